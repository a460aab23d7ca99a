//! Helpers of the core tests: scratch directories, full-tree snapshots
//! (`support::snapshot`, compared with the trees the tests wrote), trees on
//! disk, and probes that record or fail the core's system calls.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use durasync::durable::names::{LOCK_NAME, is_leftover};
use durasync::durable::{Node, Options, Probe, RequestLimits, SysOp, Tree};
pub use durasync_test_support::snapshot::{Entry, Snapshot, snapshot};

/// A fresh directory with an fd on it: the parent of the targets of a test.
pub struct Scratch {
    dir: tempfile::TempDir,
    fd: OwnedFd,
}

impl Scratch {
    /// In `$DURASYNC_TEST_DIR` when set ([`scratch_dir`]).
    pub fn new() -> Self {
        let dir = scratch_dir();
        let fd = open_dir(dir.path());
        Scratch { dir, fd }
    }

    /// A scratch dir on tmpfs (`/dev/shm`) when there is one: for tests
    /// that create and delete thousands of directories, which on a disk
    /// mounted with `discard` costs a device discard per directory. With
    /// `$DURASYNC_TEST_DIR` set, there instead: the file system under test.
    pub fn on_tmpfs() -> Self {
        if crate::support::test_dir().is_some() {
            return Scratch::new();
        }
        let shm = Path::new("/dev/shm");
        let builder = tempfile::Builder::new().prefix("durasync-core-").tempdir_in(shm);
        match builder {
            Ok(dir) => {
                let fd = open_dir(dir.path());
                Scratch { dir, fd }
            }
            Err(_) => Scratch::new(),
        }
    }

    /// A scratch dir on tmpfs (`/dev/shm`), `$DURASYNC_TEST_DIR` or not,
    /// when there is one: for tests of the process itself (its memory)
    /// that write hundreds of MiB.
    pub fn in_shm() -> Self {
        let builder = tempfile::Builder::new().prefix("durasync-core-").tempdir_in("/dev/shm");
        match builder {
            Ok(dir) => {
                let fd = open_dir(dir.path());
                Scratch { dir, fd }
            }
            Err(_) => Scratch::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

/// A fresh temporary directory: in `$DURASYNC_TEST_DIR` (the file system
/// under test, [`crate::support::TEST_DIR`]) when set, else the system's.
pub fn scratch_dir() -> tempfile::TempDir {
    let builder = tempfile::Builder::new().prefix("durasync-core-").clone();
    match crate::support::test_dir() {
        Some(dir) => builder.tempdir_in(dir),
        None => builder.tempdir(),
    }
    .expect("create a scratch dir")
}

/// Open a directory by path (the test's own path: links are followed).
pub fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// Options for a test: the given probe, default limits, `threads` workers,
/// per-file fsyncs (the counts these tests check; `auto` could pick syncfs
/// for a large batch on a quiet ext4, xfs or btrfs).
pub fn opts(probe: &dyn Probe, threads: usize) -> Options<'_> {
    Options {
        probe,
        limits: RequestLimits::default(),
        threads,
        flush: durasync::durable::Flush::Fsync,
        ..Options::default()
    }
}

/// The snapshot a directory holding exactly `tree` has, its own mode `root_mode`.
pub fn expected(tree: &Tree, root_mode: u32) -> Snapshot {
    let mut out = BTreeMap::new();
    out.insert(String::new(), Entry::Dir { mode: root_mode });
    for (path, node) in tree.iter() {
        let entry = match node {
            Node::File { contents, mode } => Entry::File { mode: *mode, bytes: contents.clone() },
            Node::Source { .. } => panic!("{path}: a tree read from disk; snapshot its source instead"),
            Node::Dir { mode, .. } => Entry::Dir { mode: *mode },
        };
        out.insert(path.to_owned(), entry);
    }
    Some(out)
}

/// A snapshot without its root entry: what a directory holds, whatever its own mode.
pub fn contents(snap: &Snapshot) -> BTreeMap<String, Entry> {
    let mut map = snap.clone().expect("the directory exists");
    map.remove("");
    map
}

/// The names directly in `dir`, without the lock file.
pub fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != LOCK_NAME)
        .collect()
}

/// The durasync leftovers directly in `dir`.
pub fn leftovers(dir: &Path) -> Vec<String> {
    names(dir).into_iter().filter(|n| is_leftover(n)).collect()
}

/// A tree from `(path, contents, mode)` triples.
pub fn tree(files: &[(&str, &[u8], u32)]) -> Tree {
    let mut t = Tree::new();
    for (path, contents, mode) in files {
        t.add_file(path, contents.to_vec(), *mode).unwrap();
    }
    t
}

/// `n` files of `size` bytes, named `{prefix}{i}`, the bytes depending on `seed`.
pub fn many_files(prefix: &str, n: usize, size: usize, seed: u8) -> Tree {
    let mut t = Tree::new();
    for i in 0..n {
        let byte = seed.wrapping_add(i as u8);
        t.add_file(&format!("{prefix}{i:04}"), vec![byte; size], 0o644).unwrap();
    }
    t
}

/// Create `path` as a directory holding exactly `tree`, with exact modes
/// (directories get theirs last, so read-only ones can still be filled).
pub fn write_tree(path: &Path, tree: &Tree, root_mode: u32) {
    std::fs::create_dir(path).unwrap();
    let mut dirs = Vec::new();
    for (rel, node) in tree.iter() {
        let p = path.join(rel);
        match node {
            Node::Dir { mode, .. } => {
                std::fs::create_dir(&p).unwrap();
                dirs.push((p, *mode));
            }
            Node::File { contents, mode } => {
                std::fs::write(&p, contents).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
            }
            Node::Source { .. } => panic!("{rel}: a tree read from disk; copy its source instead"),
        }
    }
    dirs.push((path.to_owned(), root_mode));
    for (p, mode) in dirs.into_iter().rev() {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// A core operation, described independently of its random leftover names
/// (`<stage>`, `<tmp>`, `<trash>`), so that a step of one run can be found
/// again in another.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: &'static str,
    pub path: String,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.path)
    }
}

impl Key {
    pub fn is(&self, kind: &str, path: &str) -> bool {
        self.kind == kind && self.path == path
    }
}

/// Replace leftover names by their label: `.durasync-stage-…/a` → `<stage>/a`.
pub fn normalize(path: &str) -> String {
    path.split('/')
        .map(|c| if is_leftover(c) { format!("<{}>", c.split('-').nth(1).unwrap()) } else { c.to_owned() })
        .collect::<Vec<_>>()
        .join("/")
}

pub fn key(op: &SysOp<'_>) -> Key {
    let (kind, path) = match op {
        SysOp::Lock { dir } => ("lock", normalize(dir)),
        SysOp::Mkdir { path } => ("mkdir", normalize(path)),
        SysOp::Create { path } => ("create", normalize(path)),
        SysOp::Write { path, .. } => ("write", normalize(path)),
        // A directory is chmodded twice (filled at 0700, then its own mode).
        SysOp::Chmod { path, mode } => ("chmod", format!("{} {mode:o}", normalize(path))),
        SysOp::FsyncFile { path } => ("fsync-file", normalize(path)),
        SysOp::FsyncDir { path } => ("fsync-dir", normalize(path)),
        SysOp::Syncfs { path } => ("syncfs", normalize(path)),
        SysOp::Exchange { a, b } => ("exchange", format!("{} <-> {}", normalize(a), normalize(b))),
        SysOp::Rename { from, to, .. } => ("rename", format!("{} -> {}", normalize(from), normalize(to))),
        SysOp::Link { from, to } => ("link", format!("{} -> {}", normalize(from), normalize(to))),
        SysOp::Unlink { path } => ("unlink", normalize(path)),
        SysOp::Rmdir { path } => ("rmdir", normalize(path)),
        SysOp::Symlink { path, .. } => ("symlink", normalize(path)),
        SysOp::Chown { path, .. } => ("chown", normalize(path)),
        SysOp::SetXattr { path, name, .. } => ("setxattr", format!("{} {name}", normalize(path))),
    };
    Key { kind, path }
}

/// Records every operation the core attempts, in order.
#[derive(Default)]
pub struct Recorder {
    ops: Mutex<Vec<Key>>,
}

impl Recorder {
    pub fn keys(&self) -> Vec<Key> {
        self.ops.lock().unwrap().clone()
    }

    pub fn count(&self, kind: &str) -> usize {
        self.ops.lock().unwrap().iter().filter(|k| k.kind == kind).count()
    }

    /// Files created in the staging tree (the unsynced marker is created
    /// beside it, not in it).
    pub fn staged_creates(&self) -> usize {
        self.ops
            .lock()
            .unwrap()
            .iter()
            .filter(|k| k.kind == "create" && k.path.starts_with("<stage>/"))
            .count()
    }
}

impl Probe for Recorder {
    fn before(&self, op: &SysOp<'_>) -> io::Result<()> {
        self.ops.lock().unwrap().push(key(op));
        Ok(())
    }
}

/// Fails every operation matching a predicate with an errno, and counts
/// how often it did (a test asserts that the fault was really injected).
pub struct FailWhen<F> {
    pred: F,
    errno: i32,
    hits: AtomicUsize,
}

impl<F: Fn(&Key) -> bool + Sync> FailWhen<F> {
    pub fn new(errno: rustix::io::Errno, pred: F) -> Self {
        FailWhen { pred, errno: errno.raw_os_error(), hits: AtomicUsize::new(0) }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl<F: Fn(&Key) -> bool + Sync> Probe for FailWhen<F> {
    fn before(&self, op: &SysOp<'_>) -> io::Result<()> {
        if (self.pred)(&key(op)) {
            self.hits.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        Ok(())
    }
}

/// Fail exactly the operation `key` (every time it is attempted).
pub fn fail_at(key: Key) -> FailWhen<impl Fn(&Key) -> bool + Sync> {
    FailWhen::new(rustix::io::Errno::IO, move |k| *k == key)
}

/// Run the real binary, with `args`, in `cwd`.
pub fn durasync(args: &[&str], cwd: &Path) -> Output {
    Command::new(crate::support::durasync())
        .args(args)
        .current_dir(cwd)
        .env_remove("DURASYNC_LOG")
        .output()
        .expect("run durasync")
}

/// Like [`durasync`], after the shell command `setup` (`umask 077`,
/// `ulimit -n 64`): through `sh -c 'SETUP && exec …'`.
pub fn durasync_sh(setup: &str, args: &[&str], cwd: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{setup} && exec \"$0\" \"$@\""))
        .arg(crate::support::durasync())
        .args(args)
        .current_dir(cwd)
        .env_remove("DURASYNC_LOG")
        .output()
        .expect("run sh")
}

/// Inode number and link count of every regular file beneath `dir`, by
/// relative path.
pub fn inodes(dir: &Path) -> BTreeMap<String, (u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        for e in std::fs::read_dir(&path).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                stack.push((e.path(), rel));
            } else {
                out.insert(rel, (meta.ino(), meta.nlink()));
            }
        }
    }
    out
}

pub use crate::support::cannot_check;

/// stdout of a run that must have succeeded.
pub fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "durasync failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A mount made by a test, unmounted when dropped.
pub struct Mounted(PathBuf);

impl Mounted {
    /// `mount ARGS POINT`; `None` when it fails.
    pub fn new(args: &[&str], point: &Path) -> Option<Mounted> {
        let ok =
            std::process::Command::new("mount").args(args).arg(point).status().is_ok_and(|s| s.success());
        ok.then(|| Mounted(point.to_owned()))
    }

    /// `PROGRAM ARGS POINT` (a FUSE file system's own command), unmounted
    /// with `fusermount -u`; `None` when it fails.
    pub fn fuse(program: &str, args: &[&str], point: &Path) -> Option<Mounted> {
        let ok =
            std::process::Command::new(program).args(args).arg(point).status().is_ok_and(|s| s.success());
        ok.then(|| Mounted(point.to_owned()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let unmounted = std::process::Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !unmounted {
            let _ = std::process::Command::new("fusermount").arg("-u").arg(&self.0).status();
        }
    }
}
