//! A directory tree as durasync syncs it: regular files with exact bytes and
//! modes, and directories with modes. Building a [`Tree`] validates it
//! completely, so the sync itself never meets a bad name halfway through.
//!
//! This module also reads trees from disk (a CLI source, or a target to
//! compare against) through directory fds, never following a link.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::error::{Error, Result, Step};
use super::names::{is_reserved, split_rel_path};
use super::parallel;
use super::sys::{Kind, join, kind_at, kind_error, kind_of, open_dir, open_file};

/// The mode of directories a tree implies but does not list (`a` for `a/b`).
pub const IMPLIED_DIR_MODE: u32 = 0o755;

/// The permission bits a mode may carry (rwx for all, setuid, setgid, sticky).
pub const MODE_MASK: u32 = 0o7777;

/// One entry of a [`Tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A regular file.
    File {
        /// Its exact bytes.
        contents: Vec<u8>,
        /// Its exact permission bits.
        mode: u32,
    },
    /// A directory.
    Dir {
        /// Its exact permission bits.
        mode: u32,
        /// Whether it was listed itself rather than implied by a nested file.
        explicit: bool,
    },
}

/// A validated tree of files and directories, keyed by relative path.
///
/// Paths sort so that every directory precedes its contents. The tree's root
/// (the synced directory itself) is not an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
    bytes: u64,
    files: usize,
}

impl Tree {
    /// An empty tree (syncing it makes the target an empty directory).
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a regular file at a relative path (`tls.crt`, `sub/dir/file`),
    /// creating implied parent directories with [`IMPLIED_DIR_MODE`].
    ///
    /// Fails on a path that breaks the rules of [`split_rel_path`], a mode
    /// outside [`MODE_MASK`], or a path already used by a file or directory.
    pub fn add_file(&mut self, path: &str, contents: Vec<u8>, mode: u32) -> Result<()> {
        let parts = split_rel_path(path)?;
        check_mode(path, mode)?;
        self.add_parents(path, &parts)?;
        match self.nodes.get(path) {
            Some(Node::File { .. }) => {
                return Err(Error::Duplicate { path: path.to_owned(), reason: "named twice" });
            }
            Some(Node::Dir { .. }) => {
                return Err(Error::Duplicate {
                    path: path.to_owned(),
                    reason: "used for a file and a directory",
                });
            }
            None => {}
        }
        self.bytes += contents.len() as u64;
        self.files += 1;
        self.nodes.insert(path.to_owned(), Node::File { contents, mode });
        Ok(())
    }

    /// Add a directory with an exact mode (it may also be implied by files).
    pub fn add_dir(&mut self, path: &str, mode: u32) -> Result<()> {
        let parts = split_rel_path(path)?;
        check_mode(path, mode)?;
        self.add_parents(path, &parts)?;
        match self.nodes.get_mut(path) {
            Some(Node::Dir { explicit: true, .. }) => {
                Err(Error::Duplicate { path: path.to_owned(), reason: "named twice" })
            }
            Some(Node::Dir { mode: m, explicit }) => {
                (*m, *explicit) = (mode, true);
                Ok(())
            }
            Some(Node::File { .. }) => {
                Err(Error::Duplicate { path: path.to_owned(), reason: "used for a file and a directory" })
            }
            None => {
                self.nodes.insert(path.to_owned(), Node::Dir { mode, explicit: true });
                Ok(())
            }
        }
    }

    fn add_parents(&mut self, path: &str, parts: &[&str]) -> Result<()> {
        let mut end = 0;
        for part in &parts[..parts.len() - 1] {
            end += part.len();
            let dir = &path[..end];
            end += 1;
            match self.nodes.get(dir) {
                Some(Node::Dir { .. }) => {}
                Some(Node::File { .. }) => {
                    return Err(Error::Duplicate {
                        path: dir.to_owned(),
                        reason: "used for a file and a directory",
                    });
                }
                None => {
                    self.nodes.insert(dir.to_owned(), Node::Dir { mode: IMPLIED_DIR_MODE, explicit: false });
                }
            }
        }
        Ok(())
    }

    /// The entries, directories before their contents.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The entry at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// How many regular files the tree holds.
    pub fn file_count(&self) -> usize {
        self.files
    }

    /// How many directories the tree holds (not counting its root).
    pub fn dir_count(&self) -> usize {
        self.nodes.len() - self.files
    }

    /// The total size of all files, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.bytes
    }

    /// Refuse a tree over the given limits, naming the one exceeded.
    pub fn check_limits(&self, limits: &Limits) -> Result<()> {
        if self.files as u64 > limits.max_files {
            return Err(Error::Limit {
                what: "files in one sync",
                limit: limits.max_files,
                actual: self.files as u64,
            });
        }
        if self.bytes > limits.max_bytes {
            return Err(Error::Limit {
                what: "bytes in one sync",
                limit: limits.max_bytes,
                actual: self.bytes,
            });
        }
        Ok(())
    }
}

fn check_mode(path: &str, mode: u32) -> Result<()> {
    if mode & !MODE_MASK != 0 {
        return Err(Error::InvalidMode { path: path.to_owned(), mode });
    }
    Ok(())
}

/// Caps on one request, checked before anything is touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most regular files in one sync.
    pub max_files: u64,
    /// Most bytes, summed over all files, in one sync or write.
    pub max_bytes: u64,
}

impl Default for Limits {
    /// 100 000 files and 4 GiB: far above any certificate or manifest set,
    /// low enough that a runaway request fails before it fills a disk.
    fn default() -> Self {
        Limits { max_files: 100_000, max_bytes: 4 << 30 }
    }
}

/// One entry met while walking a directory on disk.
pub(crate) struct Seen<'a> {
    /// Path relative to the walked directory.
    pub path: String,
    /// The directory holding it.
    pub parent: BorrowedFd<'a>,
    /// Its name in `parent`.
    pub name: &'a str,
    /// What it is.
    pub kind: Kind,
    /// Its permission bits.
    pub mode: u32,
    /// Its size in bytes (files only).
    pub size: u64,
}

/// Walk `dir` depth first, parents before children, without following links
/// and skipping durasync's reserved names. `dir_path` is used in messages.
pub(crate) fn walk(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    visit: &mut dyn FnMut(&Seen<'_>) -> Result<()>,
) -> Result<()> {
    walk_inner(dir, dir_path, "", visit)
}

fn walk_inner(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    prefix: &str,
    visit: &mut dyn FnMut(&Seen<'_>) -> Result<()>,
) -> Result<()> {
    let shown = if prefix.is_empty() { dir_path.to_owned() } else { join(dir_path, prefix) };
    let mut names = list_names(dir, &shown)?;
    names.sort();
    for name in names {
        if is_reserved(&name) {
            continue;
        }
        let rel = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
        let shown_rel = join(dir_path, &rel);
        let st = rustix::fs::statat(dir, name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| Error::io(Step::Read, &shown_rel, e))?;
        let kind = kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _));
        let seen = Seen {
            path: rel.clone(),
            parent: dir,
            name: &name,
            kind,
            mode: st.st_mode as u32 & MODE_MASK,
            size: st.st_size as u64,
        };
        visit(&seen)?;
        if kind == Kind::Dir {
            let sub = open_dir(dir, &name, &shown_rel)?;
            walk_inner(sub.as_fd(), dir_path, &rel, visit)?;
        }
    }
    Ok(())
}

/// The names in a directory, without `.` and `..`. Names that are not UTF-8
/// are an error: durasync cannot name them back to the kernel faithfully.
pub(crate) fn list_names(dir: BorrowedFd<'_>, dir_path: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let reader = rustix::fs::Dir::read_from(dir).map_err(|e| Error::io(Step::Read, dir_path, e))?;
    for entry in reader {
        let entry = entry.map_err(|e| Error::io(Step::Read, dir_path, e))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        match std::str::from_utf8(name) {
            Ok(s) => out.push(s.to_owned()),
            Err(_) => {
                return Err(Error::InvalidPath {
                    path: join(dir_path, &String::from_utf8_lossy(name)),
                    reason: "names must be valid UTF-8",
                });
            }
        }
    }
    Ok(out)
}

/// Read a regular file completely, refusing anything else.
pub(crate) fn read_file_at(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<Vec<u8>> {
    let fd: OwnedFd = open_file(dir, name, path)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(Step::Read, path, e))?;
    if kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)) != Kind::File {
        return Err(Error::NotAFile { path: path.to_owned() });
    }
    let mut buf = Vec::with_capacity(st.st_size as usize);
    let mut chunk = vec![0u8; (st.st_size as usize).clamp(4096, 1 << 20) + 1];
    loop {
        match rustix::io::read(&fd, &mut chunk[..]) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io(Step::Read, path, e)),
        }
    }
    Ok(buf)
}

/// Read the tree at `name` in `parent` (a CLI source): every regular file
/// with its bytes and mode, every directory with its mode. Anything else (a
/// symlink, a fifo, a device) is an error naming it. Limits are enforced
/// while reading, so a huge source fails early.
pub fn read_tree(parent: BorrowedFd<'_>, name: &str, path: &str, limits: &Limits) -> Result<Tree> {
    match kind_at(parent, name, path)?.0 {
        Kind::Dir => {}
        Kind::Missing => return Err(Error::NotFound { path: path.to_owned() }),
        Kind::Symlink => return Err(Error::Symlink { path: path.to_owned() }),
        _ => return Err(Error::NotADirectory { path: path.to_owned() }),
    }
    let root = open_dir(parent, name, path)?;
    let mut tree = Tree::new();
    walk(root.as_fd(), path, &mut |seen| {
        let shown = join(path, &seen.path);
        match seen.kind {
            Kind::Dir => tree.add_dir(&seen.path, seen.mode),
            Kind::File => {
                if tree.total_bytes() + seen.size > limits.max_bytes {
                    return Err(Error::Limit {
                        what: "bytes in one sync",
                        limit: limits.max_bytes,
                        actual: tree.total_bytes() + seen.size,
                    });
                }
                let contents = read_file_at(seen.parent, seen.name, &shown)?;
                tree.add_file(&seen.path, contents, seen.mode)?;
                tree.check_limits(limits)
            }
            Kind::Symlink => Err(Error::UnsupportedEntry { path: shown, kind: "symbolic link" }),
            Kind::Other(kind) => Err(Error::UnsupportedEntry { path: shown, kind }),
            Kind::Missing => Ok(()),
        }
    })?;
    Ok(tree)
}

/// How an existing directory differs from a requested tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Whether the target exists now.
    pub exists: bool,
    /// Paths the new tree adds (directories end in `/`).
    pub added: Vec<String>,
    /// Paths in both whose bytes, mode or kind differ.
    pub changed: Vec<String>,
    /// Paths the new tree no longer holds (directories end in `/`).
    pub removed: Vec<String>,
}

impl Plan {
    /// Whether the target already holds exactly the requested tree.
    pub fn is_unchanged(&self) -> bool {
        self.exists && self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// The plan for a target that does not exist yet: every path is added.
    pub fn creating(tree: &Tree) -> Plan {
        let added = tree
            .iter()
            .map(
                |(path, node)| {
                    if matches!(node, Node::Dir { .. }) { format!("{path}/") } else { path.to_owned() }
                },
            )
            .collect();
        Plan { added, ..Plan::default() }
    }

    /// How many regular files of the old tree the new one no longer holds.
    pub fn removed_files(&self) -> u32 {
        self.removed.iter().filter(|p| !p.ends_with('/')).count() as u32
    }
}

/// Compare the existing directory `dir` with `new`. With `full` false, stops
/// reading file contents at the first difference (enough to decide
/// "unchanged", and `removed` is still exact); with `full` true every
/// differing path is listed.
pub(crate) fn compare(dir: BorrowedFd<'_>, dir_path: &str, new: &Tree, full: bool) -> Result<Plan> {
    let shown = |p: &str, dir: bool| if dir { format!("{p}/") } else { p.to_owned() };
    let mut plan = Plan { exists: true, ..Plan::default() };
    let mut present = std::collections::HashSet::with_capacity(new.nodes.len());
    // Files whose kind, mode and size match: only their bytes can differ.
    let mut candidates: Vec<(&str, &[u8])> = Vec::new();
    let mut differs = false;
    walk(dir, dir_path, &mut |seen| {
        let is_dir = seen.kind == Kind::Dir;
        let Some((path, node)) = new.nodes.get_key_value(&seen.path) else {
            plan.removed.push(shown(&seen.path, is_dir));
            differs = true;
            return Ok(());
        };
        present.insert(path.as_str());
        let same = match node {
            Node::Dir { mode, .. } => is_dir && seen.mode == *mode,
            Node::File { contents, mode } => {
                let same_meta =
                    seen.kind == Kind::File && seen.mode == *mode && seen.size == contents.len() as u64;
                if same_meta {
                    candidates.push((path.as_str(), contents.as_slice()));
                }
                same_meta
            }
        };
        if !same {
            plan.changed.push(shown(&seen.path, matches!(node, Node::Dir { .. })));
            differs = true;
        }
        Ok(())
    })?;
    for (path, node) in new.iter() {
        if !present.contains(path) {
            plan.added.push(shown(path, matches!(node, Node::Dir { .. })));
        }
    }
    if full || !differs {
        plan.changed.extend(changed_contents(dir, dir_path, &candidates, full)?);
    }
    plan.removed.sort();
    plan.changed.sort();
    Ok(plan)
}

/// From this many files on, contents are compared from several threads.
const PARALLEL_COMPARE_MIN: usize = 64;

/// Threads comparing contents. Reading from the page cache is CPU work, so
/// a few threads help on small machines and more would only contend.
const COMPARE_THREADS: usize = 4;

/// The candidates whose bytes differ from the file at their path beneath
/// `dir`. With `full` false, stops at the first difference found.
fn changed_contents(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    candidates: &[(&str, &[u8])],
    full: bool,
) -> Result<Vec<String>> {
    let threads = if candidates.len() >= PARALLEL_COMPARE_MIN { COMPARE_THREADS } else { 1 };
    let found = AtomicBool::new(false);
    let changed = std::sync::Mutex::new(Vec::new());
    parallel::try_for_each(candidates, threads, |(rel, expected)| {
        if !full && found.load(Ordering::Relaxed) {
            return Ok(());
        }
        if !file_holds(dir, rel, &join(dir_path, rel), expected)? {
            found.store(true, Ordering::Relaxed);
            changed.lock().unwrap_or_else(|p| p.into_inner()).push((*rel).to_owned());
        }
        Ok(())
    })?;
    Ok(changed.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// Whether the regular file at `rel` beneath `dir` holds exactly
/// `expected`: open, `fstat` (still a regular file of that size), one read
/// of that size, close.
pub(crate) fn file_holds(dir: BorrowedFd<'_>, rel: &str, path: &str, expected: &[u8]) -> Result<bool> {
    let fd = open_file_beneath(dir, rel, path)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(Step::Read, path, e))?;
    if kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)) != Kind::File
        || st.st_size as u64 != expected.len() as u64
    {
        return Ok(false);
    }
    let mut buf = vec![0u8; expected.len()];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::io::read(&fd, &mut buf[filled..]) {
            // Shorter than fstat said: truncated meanwhile, so not equal.
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io(Step::Read, path, e)),
        }
    }
    Ok(buf == expected)
}

/// Open the file at the relative path `rel` beneath `dir` for reading in
/// one call: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` refuses a link
/// anywhere on the way, like the component-wise walk it falls back to on
/// kernels without `openat2` (before 5.6).
fn open_file_beneath(dir: BorrowedFd<'_>, rel: &str, path: &str) -> Result<OwnedFd> {
    let Some((parent, name)) = rel.rsplit_once('/') else {
        return open_file(dir, rel, path);
    };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::NOSYS) => {
            let parent = super::resolve::open_beneath(dir, parent)?;
            open_file(parent.as_fd(), name, path)
        }
        Err(e) => Err(kind_error(e, path, Step::Open)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_files_imply_parent_directories() {
        let mut t = Tree::new();
        t.add_file("sub/dir/file", b"x".to_vec(), 0o600).unwrap();
        assert_eq!(t.get("sub"), Some(&Node::Dir { mode: IMPLIED_DIR_MODE, explicit: false }));
        assert_eq!(t.dir_count(), 2);
        assert_eq!(t.file_count(), 1);
        t.add_dir("sub", 0o700).unwrap();
        assert_eq!(t.get("sub"), Some(&Node::Dir { mode: 0o700, explicit: true }));
    }

    #[test]
    fn duplicates_and_file_directory_clashes_are_refused() {
        let mut t = Tree::new();
        t.add_file("a", vec![], 0o644).unwrap();
        assert!(matches!(t.add_file("a", vec![], 0o644), Err(Error::Duplicate { .. })));
        assert!(matches!(t.add_file("a/b", vec![], 0o644), Err(Error::Duplicate { .. })));
        assert!(matches!(t.add_dir("a", 0o755), Err(Error::Duplicate { .. })));
        let mut t = Tree::new();
        t.add_file("d/x", vec![], 0o644).unwrap();
        assert!(matches!(t.add_file("d", vec![], 0o644), Err(Error::Duplicate { .. })));
    }

    #[test]
    fn modes_outside_permission_bits_are_refused() {
        let mut t = Tree::new();
        assert!(matches!(t.add_file("a", vec![], 0o100644), Err(Error::InvalidMode { .. })));
    }

    #[test]
    fn limits_name_what_is_exceeded() {
        let mut t = Tree::new();
        t.add_file("a", vec![0; 10], 0o644).unwrap();
        t.add_file("b", vec![0; 10], 0o644).unwrap();
        let err = t.check_limits(&Limits { max_files: 1, max_bytes: 100 }).unwrap_err();
        assert!(err.to_string().contains("files in one sync"), "{err}");
        let err = t.check_limits(&Limits { max_files: 10, max_bytes: 15 }).unwrap_err();
        assert!(err.to_string().contains("bytes in one sync"), "{err}");
    }
}
