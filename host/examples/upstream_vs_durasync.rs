//! A 1000-file (4 KiB each) directory sync done three ways, in one run:
//! `durable::sync_dir` (N + 2 fsyncs, file fsyncs in parallel) and the
//! upstream library-go `atomicdir.Sync` sequence in its two forms (2N + 2
//! and N + 3 fsyncs, one at a time; see `host/benches/sync/upstream.rs`). Rounds are interleaved and the order rotates every round; each
//! round writes fresh contents into a target that already holds the
//! previous round's files. Prints the median, min and max of each, to the
//! commit point and in total (including removal of the old tree), and the
//! ratio of the medians.
//!
//! `cargo run --release -p durasync --example upstream_vs_durasync [-- FILES ROUNDS DIR]`

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use durasync::durable::{self, Options, Probe, SysOp, Tree};

const SIZE: usize = 4096;

/// The upstream sequences: the one copy, shared with the bench.
#[path = "../benches/sync/upstream.rs"]
mod upstream;

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    rustix::rand::getrandom(&mut b[..], rustix::rand::GetRandomFlags::empty()).expect("getrandom");
    u64::from_le_bytes(b)
}

/// Notes when the commit fsync (of the parent, `.`) returns.
#[derive(Default)]
struct CommitClock(Mutex<Option<Instant>>);

impl Probe for CommitClock {
    fn after(&self, op: &SysOp<'_>) {
        if matches!(op, SysOp::FsyncDir { path: "." }) {
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

    // Every target starts out holding files, so every round replaces one.
    let first = contents(files, usize::MAX);
    upstream::sync_2n2(&parent, "upstream", &first).expect("warm-up upstream");
    upstream::sync_n3(&parent, "upstream-n3", &first).expect("warm-up upstream-n3");
    durable::sync_dir(parent_fd.as_fd(), "durasync", &to_tree(&first), &Options::default()).expect("warm-up");

    let (mut up, mut up3, mut ds) = (Times::default(), Times::default(), Times::default());
    for round in 0..rounds {
        let data = contents(files, round);
        let tree = to_tree(&data);
        let mut order = [0, 1, 2];
        order.rotate_left(round % 3);
        for variant in order {
            if variant < 2 {
                type Run = fn(&Path, &str, &[(String, Vec<u8>)]) -> std::io::Result<upstream::Timing>;
                let (name, run, times): (&str, Run, &mut Times) = if variant == 0 {
                    ("upstream", upstream::sync_2n2, &mut up)
                } else {
                    ("upstream-n3", upstream::sync_n3, &mut up3)
                };
                let t = run(&parent, name, &data).expect("upstream sync");
                let want = if variant == 0 { 2 * files + 2 } else { files + 3 };
                assert_eq!(t.fsyncs, want, "{name}: fsyncs issued");
                times.total.push(t.total);
                times.commit.push(t.commit);
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
            "round {round:2}: upstream {:7.1} ms, upstream-n3 {:7.1} ms, durasync {:7.1} ms (total)",
            ms(*up.total.last().unwrap()),
            ms(*up3.total.last().unwrap()),
            ms(*ds.total.last().unwrap())
        );
    }
    summary("upstream", &up);
    summary("upstream-n3", &up3);
    summary("durasync", &ds);
    for (name, t) in [("upstream", &up), ("upstream-n3", &up3)] {
        println!(
            "ratio {name}/durasync of medians: to commit {:.2}x, total {:.2}x",
            ms(median(&t.commit)) / ms(median(&ds.commit)),
            ms(median(&t.total)) / ms(median(&ds.total))
        );
    }
}
