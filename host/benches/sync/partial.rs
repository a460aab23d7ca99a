//! Incremental sync: K changed files of N (`--changed 1,10,100`). Every
//! round changes the same K files' bytes (spread over the tree, different
//! ones every round) in the targets of `durasync`, `upstream`,
//! `upstream-n3` and `floor`, and replaces every file of `durasync-full`'s
//! target, interleaved and rotated like the main bench. The upstream
//! sequences have no per-file comparison: they rewrite all N whatever
//! changed. The floor knows which K changed without comparing: it links the
//! N − K others from the target into a fresh staging directory, writes the
//! K, fsyncs them with the staging directory from 16 threads, exchanges and
//! fsyncs the parent, then removes the old tree.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use durasync::durable::{DEFAULT_THREADS, Outcome};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use crate::variants::{self, Files, Sample, TARGET, contents};

/// The variants of a partial-change round, in their round-0 order.
pub const VARIANTS: [&str; 5] = ["durasync", "durasync-full", "upstream", "upstream-n3", "floor"];

/// All samples of one K.
pub struct KResult {
    pub n: usize,
    pub k: usize,
    pub regime: &'static str,
    pub rounds: usize,
    /// Per variant (in [`VARIANTS`] order), one sample per round.
    pub samples: Vec<Vec<Sample>>,
}

impl KResult {
    pub fn total(&self, v: &str) -> Vec<f64> {
        let i = VARIANTS.iter().position(|x| *x == v).expect("variant");
        self.samples[i].iter().map(|s| crate::stats::ms(s.total)).collect()
    }
    pub fn fsyncs(&self, v: &str) -> String {
        let i = VARIANTS.iter().position(|x| *x == v).expect("variant");
        let c: Vec<usize> = self.samples[i].iter().filter_map(|s| s.fsyncs).collect();
        match (c.iter().min(), c.iter().max()) {
            (Some(a), Some(b)) if a == b => a.to_string(),
            (Some(a), Some(b)) => format!("{a}–{b}"),
            _ => "–".into(),
        }
    }
}

/// The indexes of the K files changed in round `r`: spread evenly, shifted
/// every round.
pub fn changed_indexes(n: usize, k: usize, r: usize) -> Vec<usize> {
    (0..k).map(|i| (i * n / k + r * 7) % n).collect()
}

/// `prev` with the files at `idx` given fresh bytes from `seed`.
pub fn change(prev: &Files, idx: &[usize], seed: u64) -> Files {
    let mut next = prev.clone();
    let size = prev.first().map_or(0, |(_, d)| d.len());
    let fresh = contents(idx.len(), size, seed);
    for (i, (_, data)) in idx.iter().zip(fresh) {
        next[*i].1 = data;
    }
    next
}

fn mkdir_open(path: &Path) -> OwnedFd {
    std::fs::create_dir_all(path).expect("bench dir");
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .expect("open bench dir")
}

/// Run `rounds` (after `warmup`) of K changed of N, each variant in its own
/// parent directory under `tmp`. With `settle`, `syncfs` and a pause before
/// each variant (untimed), as the main bench's settled regime.
pub fn run(
    n: usize,
    k: usize,
    rounds: usize,
    warmup: usize,
    tmp: &Path,
    settle: Option<std::time::Duration>,
) -> KResult {
    let regime = if settle.is_some() { "settled" } else { "tight" };
    let dir = |v: &str| tmp.join(format!("partial-{v}-{n}-{k}-{regime}"));
    let tmp_fd = mkdir_open(tmp);
    let fds: Vec<OwnedFd> = VARIANTS.iter().map(|v| mkdir_open(&dir(v))).collect();
    let size = crate::FILE_SIZE;
    // Untimed set-up: every target holds N files; the partial variants the same ones.
    let mut current = contents(n, size, 0x5EED ^ k as u64);
    variants::durasync_setup(fds[0].as_fd(), current.clone());
    variants::durasync_setup(fds[1].as_fd(), contents(n, size, 0xF011));
    variants::upstream(&dir("upstream"), &current, false);
    variants::upstream(&dir("upstream-n3"), &current, true);
    rustix::fs::mkdirat(&fds[4], TARGET, Mode::from_raw_mode(0o755)).expect("mkdir floor target");
    variants::floor(fds[4].as_fd(), &current, DEFAULT_THREADS);

    let mut samples: Vec<Vec<Sample>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    for r in 0..warmup + rounds {
        let idx = changed_indexes(n, k, r);
        let next = change(&current, &idx, ((k as u64) << 32) | r as u64);
        let full = contents(n, size, ((k as u64) << 40) | (r as u64) << 8 | 0xFF);
        let mut order: Vec<usize> = (0..VARIANTS.len()).collect();
        order.rotate_left(r % VARIANTS.len());
        for i in order {
            if let Some(pause) = settle {
                rustix::fs::syncfs(&tmp_fd).expect("syncfs");
                std::thread::sleep(pause);
            }
            let fd = fds[i].as_fd();
            let sample = match VARIANTS[i] {
                "durasync" => variants::durasync(fd, next.clone(), Outcome::Replaced),
                "durasync-full" => variants::durasync(fd, full.clone(), Outcome::Replaced),
                "upstream" => variants::upstream(&dir("upstream"), &next, false),
                "upstream-n3" => variants::upstream(&dir("upstream-n3"), &next, true),
                _ => floor_partial(fd, &next, &idx, DEFAULT_THREADS),
            };
            if r >= warmup {
                samples[i].push(sample);
            }
        }
        current = next;
        eprint!(".");
    }
    eprintln!(" K={k} of N={n} {regime} done (load {})", crate::loadavg());
    // Every partial variant really holds the last contents.
    for v in ["durasync", "upstream", "upstream-n3", "floor"] {
        let target = dir(v).join(TARGET);
        for (name, data) in &current {
            assert_eq!(&std::fs::read(target.join(name)).expect("read back"), data, "{v} {name}");
        }
        assert_eq!(std::fs::read_dir(&target).expect("read target").count(), n, "{v} holds N files");
    }
    KResult { n, k, regime, rounds, samples }
}

/// The floor of a partial change (see the module docs).
fn floor_partial(parent: BorrowedFd<'_>, files: &Files, changed: &[usize], threads: usize) -> Sample {
    let fsyncs = AtomicUsize::new(0);
    let start = Instant::now();
    let staging = format!(".floor-partial-{}", std::process::id());
    rustix::fs::mkdirat(parent, staging.as_str(), Mode::from_raw_mode(0o755)).expect("mkdir staging");
    let stage = open_dir(parent, &staging);
    let target = open_dir(parent, TARGET);
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(changed.len() + 1);
    for (i, (name, data)) in files.iter().enumerate() {
        if changed.contains(&i) {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
            let fd =
                rustix::fs::openat(&stage, name.as_str(), flags, Mode::from_raw_mode(0o644)).expect("create");
            let mut rest = data.as_slice();
            while !rest.is_empty() {
                rest = &rest[rustix::io::write(&fd, rest).expect("write")..];
            }
            fds.push(fd);
        } else {
            rustix::fs::linkat(&target, name.as_str(), &stage, name.as_str(), AtFlags::empty())
                .expect("link");
        }
    }
    drop(target);
    fds.push(stage);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, fds.len()) {
            s.spawn(|| {
                while let Some(fd) = fds.get(next.fetch_add(1, Ordering::Relaxed)) {
                    rustix::fs::fsync(fd).expect("fsync");
                    fsyncs.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    drop(fds);
    rustix::fs::renameat_with(parent, staging.as_str(), parent, TARGET, RenameFlags::EXCHANGE)
        .expect("exchange");
    rustix::fs::fsync(parent).expect("fsync parent");
    fsyncs.fetch_add(1, Ordering::Relaxed);
    let commit = start.elapsed();
    let old = open_dir(parent, &staging);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, names.len().max(1)) {
            s.spawn(|| {
                while let Some(name) = names.get(next.fetch_add(1, Ordering::Relaxed)) {
                    rustix::fs::unlinkat(&old, *name, AtFlags::empty()).expect("unlink old file");
                }
            });
        }
    });
    drop(old);
    rustix::fs::unlinkat(parent, staging.as_str(), AtFlags::REMOVEDIR).expect("rmdir old tree");
    Sample { total: start.elapsed(), commit: Some(commit), fsyncs: Some(fsyncs.into_inner()) }
}

fn open_dir(parent: BorrowedFd<'_>, name: &str) -> OwnedFd {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open dir")
}
