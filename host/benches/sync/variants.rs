//! The measured variants. Each replaces the directory `target` in its own
//! parent directory with `files` and reports its wall time, the time at
//! which the change was durable (the commit point, when the variant has
//! one apart from its end) and the fsyncs it issued, *counted*: through a
//! counting [`Probe`] for durasync, by counters in the bench's own code for
//! the upstream sequences (`upstream.rs`) and the floor.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use durasync::durable::{self, Options, Outcome, Probe, SysOp, Tree};
use durasync::runtime::{Manifest, Plugin, RunRequest};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

/// The name of the synced directory inside each variant's parent.
pub const TARGET: &str = "target";

/// The files of one sync: name and contents, in order.
pub type Files = Vec<(String, Vec<u8>)>;

/// What one sync cost.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// From the call to its return (old tree removed, where the variant removes it).
    pub total: Duration,
    /// From the call to the return of the fsync that commits the swap.
    pub commit: Option<Duration>,
    /// fsync calls issued, counted; `None` where the bench cannot observe them
    /// (the plugin variant: see the strace cross-check).
    pub fsyncs: Option<usize>,
}

/// `n` files `f0000`… of `size` bytes, pseudo-random from `seed`
/// (splitmix64), so every round writes contents no earlier round wrote.
pub fn contents(n: usize, size: usize, seed: u64) -> Files {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..n)
        .map(|i| {
            let mut data = Vec::with_capacity(size);
            while data.len() < size {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                let take = (size - data.len()).min(8);
                data.extend_from_slice(&z.to_le_bytes()[..take]);
            }
            (format!("f{i:04}"), data)
        })
        .collect()
}

/// The plugin's input for `files`: `<count> <size>\n` and the contents in order.
pub fn plugin_input(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let size = files.first().map_or(0, |(_, d)| d.len());
    let mut input = format!("{} {size}\n", files.len()).into_bytes();
    for (_, d) in files {
        assert_eq!(d.len(), size, "the plugin input format needs equal sizes");
        input.extend_from_slice(d);
    }
    input
}

/// Counts the fsyncs the durable core issues and notes when the parent's
/// fsync (the commit point, `FsyncDir { path: "." }`) returned.
struct Counting {
    start: Instant,
    fsyncs: AtomicUsize,
    commit: Mutex<Option<Duration>>,
}

impl Probe for Counting {
    fn after(&self, op: &SysOp<'_>) {
        match op {
            SysOp::FsyncFile { .. } => {
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
            }
            SysOp::FsyncDir { path } => {
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                if *path == "." {
                    self.commit.lock().unwrap().get_or_insert(self.start.elapsed());
                }
            }
            _ => {}
        }
    }
}

fn tree_of(files: Files) -> Tree {
    let mut tree = Tree::new();
    for (name, data) in files {
        tree.add_file(&name, data, 0o644).expect("bench file names are valid");
    }
    tree
}

/// `durasync::durable::sync_dir` through the native library, default
/// options (16 threads), a counting probe. Building the [`Tree`] is timed:
/// it is part of the API call a user makes. `expect` is the outcome the
/// round must produce (a replace, or `Unchanged` for the unchanged variant).
pub fn durasync(parent: BorrowedFd<'_>, files: Files, expect: Outcome) -> Sample {
    let start = Instant::now();
    let probe = Counting { start, fsyncs: AtomicUsize::new(0), commit: Mutex::new(None) };
    let opts = Options { probe: &probe, ..Options::default() };
    let tree = tree_of(files);
    let report = durable::sync_dir(parent, TARGET, &tree, &opts).expect("durasync sync");
    let total = start.elapsed();
    drop(tree);
    assert_eq!(report.outcome, expect, "durasync variant");
    let commit = *probe.commit.lock().unwrap();
    Sample { total, commit, fsyncs: Some(probe.fsyncs.load(Ordering::Relaxed)) }
}

/// Initial contents for a durasync-managed target (untimed set-up).
pub fn durasync_setup(parent: BorrowedFd<'_>, files: Files) {
    durable::sync_dir(parent, TARGET, &tree_of(files), &Options::default()).expect("set-up sync");
}

/// The same sync driven by the `bench-sync` plugin: a fresh request (roots
/// opened) and a fresh instance per round, as `durasync run` makes them,
/// with the plugin loaded once (a warm process).
pub fn plugin(plugin: &Plugin, manifest: &Manifest, input: Vec<u8>) -> Sample {
    let start = Instant::now();
    let request = RunRequest::from_manifest(manifest, input, false).expect("bench manifest roots");
    let outcome = plugin.run(&request).expect("bench-sync plugin run");
    let total = start.elapsed();
    assert!(outcome.result.contains("Replaced"), "plugin variant: {}", outcome.result);
    Sample { total, commit: None, fsyncs: None }
}

/// A unique sibling name for a staging directory.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The upstream sequence in its seed form (2N + 2 fsyncs), or with `n3`
/// its later form (N + 3), from `upstream.rs`.
pub fn upstream(parent: &Path, files: &[(String, Vec<u8>)], n3: bool) -> Sample {
    let run = if n3 { crate::upstream::sync_n3 } else { crate::upstream::sync_2n2 };
    let t = run(parent, TARGET, files).expect("upstream sync");
    Sample { total: t.total, commit: Some(t.commit), fsyncs: Some(t.fsyncs) }
}

/// The physical floor: create and write every file, fsync all of them in
/// parallel together with the staging directory, exchange, one parent fsync.
/// No validation, no lock, no comparison, no fchmod. The old tree is then
/// removed (list, unlink each file from `threads` threads as durasync does,
/// rmdir) so every variant leaves the disk alike; `total` includes that
/// removal, `commit` does not.
pub fn floor(parent: BorrowedFd<'_>, files: &[(String, Vec<u8>)], threads: usize) -> Sample {
    let fsyncs = AtomicUsize::new(0);
    let start = Instant::now();
    let staging = unique(".floor");
    rustix::fs::mkdirat(parent, staging.as_str(), Mode::from_raw_mode(0o755)).expect("mkdir staging");
    let stage = open_dir(parent, &staging);
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(files.len() + 1);
    for (name, data) in files {
        let fd = rustix::fs::openat(
            &stage,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .expect("create");
        write_all(fd.as_fd(), data);
        fds.push(fd);
    }
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
    // The old tree's names are read from it, as any removal must.
    let old = open_dir(parent, &staging);
    let names: Vec<std::ffi::CString> = rustix::fs::Dir::read_from(&old)
        .expect("read old tree")
        .map(|e| e.expect("old tree entry").file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    // From several threads, as durasync removes an old tree: with `discard`
    // each unlink waits for the device, and parallel unlinks overlap.
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, names.len().max(1)) {
            s.spawn(|| {
                while let Some(name) = names.get(next.fetch_add(1, Ordering::Relaxed)) {
                    rustix::fs::unlinkat(&old, name.as_c_str(), AtFlags::empty()).expect("unlink old file");
                }
            });
        }
    });
    drop(old);
    rustix::fs::unlinkat(parent, staging.as_str(), AtFlags::REMOVEDIR).expect("rmdir old tree");
    Sample { total: start.elapsed(), commit: Some(commit), fsyncs: Some(fsyncs.into_inner()) }
}

/// Initial contents for the floor's target (untimed set-up): the target
/// must exist for the exchange.
pub fn floor_setup(parent: BorrowedFd<'_>, files: &[(String, Vec<u8>)]) {
    rustix::fs::mkdirat(parent, TARGET, Mode::from_raw_mode(0o755)).expect("mkdir target");
    floor(parent, files, durable::DEFAULT_THREADS);
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

fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(0) => panic!("write returned 0"),
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("write: {e}"),
        }
    }
}
