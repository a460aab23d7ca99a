//! A 1000-file (4 KiB each) directory sync done two ways, in one run:
//! `durable::sync_dir` (N + 2 fsyncs, file fsyncs in parallel) and the
//! upstream library-go `atomicdir.Sync` sequence (2N + 2 fsyncs, one at a
//! time). Rounds are interleaved and the order rotates every round; each
//! round writes fresh contents into a target that already holds the
//! previous round's files. Prints the median, min and max of each, to the
//! commit point and in total (including removal of the old tree), and the
//! ratio of the medians.
//!
//! `cargo run --release -p durasync --example upstream_vs_durasync [-- FILES ROUNDS DIR]`

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use durasync::durable::{self, Op, Options, Probe, Tree};
use rustix::fs::{CWD, RenameFlags};

const SIZE: usize = 4096;

/// The upstream sequence, as library-go's `atomicdir.Sync` with
/// `fsutil.WriteFileFsync` does it: make sure the target exists, create a
/// sibling staging dir, then for every file write it (`O_TRUNC`), reopen it
/// and fsync it, and fsync the staging dir; exchange the two dirs, fsync
/// both parents (here the same dir, twice), remove the old tree.
///
/// Returns the time at which the last parent fsync returned (the commit).
pub fn upstream_sync(parent: &Path, target: &str, files: &[(String, Vec<u8>)]) -> io::Result<Instant> {
    let target_path = parent.join(target);
    std::fs::create_dir_all(&target_path)?;
    let staging = parent.join(format!("{target}-{:016x}", rand_u64()));
    std::fs::create_dir(&staging)?;
    for (name, data) in files {
        let path = staging.join(name);
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&path)?;
        f.write_all(data)?;
        drop(f);
        // fsutil.WriteFileFsync reopens the file to fsync it ...
        File::open(&path)?.sync_all()?;
        // ... and fsyncs its directory after every file.
        File::open(&staging)?.sync_all()?;
    }
    rustix::fs::renameat_with(CWD, &staging, CWD, &target_path, RenameFlags::EXCHANGE)?;
    // Both parents: the target's and the staging dir's (the same here).
    File::open(target_path.parent().unwrap())?.sync_all()?;
    File::open(staging.parent().unwrap())?.sync_all()?;
    let committed = Instant::now();
    std::fs::remove_dir_all(&staging)?;
    Ok(committed)
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    rustix::rand::getrandom(&mut b[..], rustix::rand::GetRandomFlags::empty()).expect("getrandom");
    u64::from_le_bytes(b)
}

/// Notes when the commit fsync (of the parent, `.`) returns.
#[derive(Default)]
struct CommitClock(Mutex<Option<Instant>>);

impl Probe for CommitClock {
    fn after(&self, op: &Op<'_>) {
        if matches!(op, Op::FsyncDir { path: "." }) {
            *self.0.lock().unwrap() = Some(Instant::now());
        }
    }
}

fn contents(files: usize, round: usize) -> Vec<(String, Vec<u8>)> {
    // Fresh bytes every round and for every file, so nothing is "unchanged".
    let seed = rand_u64();
    (0..files)
        .map(|i| {
            let mut data = vec![0u8; SIZE];
            let tag = format!("round {round} file {i} seed {seed:x}\n");
            data[..tag.len()].copy_from_slice(tag.as_bytes());
            (format!("f{i:05}"), data)
        })
        .collect()
}

fn to_tree(files: &[(String, Vec<u8>)]) -> Tree {
    let mut t = Tree::new();
    for (name, data) in files {
        t.add_file(name, data.clone(), 0o644).expect("valid names");
    }
    t
}

fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .expect("open the bench dir")
}

#[derive(Default)]
struct Times {
    commit: Vec<Duration>,
    total: Vec<Duration>,
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(name: &str, t: &Times) {
    let (c, a) = (&t.commit, &t.total);
    println!(
        "{name:<10} to commit: median {:7.1} ms (min {:7.1}, max {:7.1})   total: median {:7.1} ms (min {:7.1}, max {:7.1})",
        ms(median(c)),
        ms(*c.iter().min().unwrap()),
        ms(*c.iter().max().unwrap()),
        ms(median(a)),
        ms(*a.iter().min().unwrap()),
        ms(*a.iter().max().unwrap()),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files: usize = args.first().map_or(1000, |a| a.parse().expect("FILES"));
    let rounds: usize = args.get(1).map_or(11, |a| a.parse().expect("ROUNDS"));
    let base = args.get(2).map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = tempfile::Builder::new().prefix("durasync-bench-").tempdir_in(&base).expect("bench dir");
    let parent = dir.path().to_path_buf();
    let parent_fd = open_dir(&parent);
    let fs = rustix::fs::fstatfs(&parent_fd).map(|s| s.f_type).unwrap_or(0);
    println!(
        "{files} files of {SIZE} bytes, {rounds} interleaved rounds, in {} (statfs type {fs:#x}), {} threads for durasync",
        parent.display(),
        durable::DEFAULT_THREADS
    );

    // Both targets start out holding files, so every round replaces one.
    let first = contents(files, usize::MAX);
    upstream_sync(&parent, "upstream", &first).expect("warm-up upstream");
    durable::sync_dir(parent_fd.as_fd(), "durasync", &to_tree(&first), &Options::default()).expect("warm-up");

    let (mut up, mut ds) = (Times::default(), Times::default());
    for round in 0..rounds {
        let data = contents(files, round);
        let tree = to_tree(&data);
        let order: [bool; 2] = if round % 2 == 0 { [true, false] } else { [false, true] };
        for upstream_first in order {
            if upstream_first {
                let start = Instant::now();
                let commit = upstream_sync(&parent, "upstream", &data).expect("upstream sync");
                up.total.push(start.elapsed());
                up.commit.push(commit - start);
            } else {
                let clock = CommitClock::default();
                let opts = Options { probe: &clock, ..Options::default() };
                let start = Instant::now();
                let report =
                    durable::sync_dir(parent_fd.as_fd(), "durasync", &tree, &opts).expect("durasync sync");
                ds.total.push(start.elapsed());
                assert_eq!(report.written as usize, files);
                ds.commit.push(clock.0.lock().unwrap().expect("a commit fsync") - start);
            }
        }
        eprintln!(
            "round {round:2}: upstream {:7.1} ms, durasync {:7.1} ms (total)",
            ms(*up.total.last().unwrap()),
            ms(*ds.total.last().unwrap())
        );
    }
    summary("upstream", &up);
    summary("durasync", &ds);
    println!(
        "ratio upstream/durasync of medians: to commit {:.2}x, total {:.2}x",
        ms(median(&up.commit)) / ms(median(&ds.commit)),
        ms(median(&up.total)) / ms(median(&ds.total))
    );
}
