//! A directory tree as durasync syncs it: regular files with exact bytes and
//! modes, and directories with modes. Building a [`Tree`] validates it
//! completely, so the sync itself never meets a bad name halfway through.
//!
//! Reading trees from disk lives in [`super::walk`], comparing one with a
//! directory in [`super::diff`]. A tree read from disk holds its files'
//! sizes, not their bytes: those stay in its source directory
//! (`source.rs`) until a sync compares or stages them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::error::{Error, Result};
use super::names::split_rel_path;
use super::source::{Bytes, Source};

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
    /// A regular file of a tree read from disk: its bytes stay in the
    /// tree's source directory, at the same path, and are read when a sync
    /// compares or stages it.
    Source {
        /// Its size when the source was read (a copy of another size is
        /// refused: see `source.rs`).
        size: u64,
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
///
/// Building it is bounded by its [`RequestLimits`] as it grows, not only once it
/// is complete: a file or directory past `max_files` or `max_dirs`, or a
/// path (an implied directory's too) past `max_path_bytes` in all, is
/// refused when it is added. Nested names imply directories, whose keys the
/// tree stores: a request of 64 MiB of names 64 levels deep would otherwise
/// make the host build about 32 times that in keys.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
    bytes: u64,
    files: usize,
    /// The bytes of every key in `nodes`.
    path_bytes: u64,
    limits: RequestLimits,
    /// Where the bytes of [`Node::Source`] files are.
    source: Option<Arc<Source>>,
}

/// Two trees are equal when they hold the same entries, whatever limits
/// they were built under.
impl PartialEq for Tree {
    fn eq(&self, other: &Tree) -> bool {
        self.nodes == other.nodes
    }
}

impl Eq for Tree {}

impl Tree {
    /// An empty tree (syncing it makes the target an empty directory),
    /// bounded by the default [`RequestLimits`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty tree whose growth is bounded by `limits`.
    pub fn with_limits(limits: RequestLimits) -> Self {
        Tree { limits, ..Self::default() }
    }

    /// Refuse one more key of `len` bytes, for a file (`file`) or a
    /// directory, before it is stored.
    fn admit(&self, len: usize, file: bool) -> Result<()> {
        let l = &self.limits;
        if file && self.files as u64 >= l.max_files {
            return Err(Error::Limit {
                what: "files in one sync",
                limit: l.max_files,
                actual: self.files as u64 + 1,
            });
        }
        let dirs = self.dir_count() as u64;
        if !file && dirs >= l.max_dirs {
            return Err(Error::Limit {
                what: "directories in one sync",
                limit: l.max_dirs,
                actual: dirs + 1,
            });
        }
        let path_bytes = self.path_bytes + len as u64;
        if path_bytes > l.max_path_bytes {
            return Err(Error::Limit {
                what: "bytes of paths in one sync, implied directories included",
                limit: l.max_path_bytes,
                actual: path_bytes,
            });
        }
        Ok(())
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
            Some(Node::File { .. } | Node::Source { .. }) => {
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
        self.admit(path.len(), true)?;
        self.bytes += contents.len() as u64;
        self.files += 1;
        self.path_bytes += path.len() as u64;
        self.nodes.insert(path.to_owned(), Node::File { contents, mode });
        Ok(())
    }

    /// An empty tree whose files are read from `source` ([`Node::Source`]),
    /// bounded by `limits`.
    pub(crate) fn from_source(limits: RequestLimits, source: Source) -> Self {
        Tree { limits, source: Some(Arc::new(source)), ..Self::default() }
    }

    /// Add the file at `path` of the tree's source directory, `size` bytes
    /// with permission bits `mode`, as [`Tree::add_file`] adds one. Refused
    /// with [`Error::Limit`] once the tree's bytes would pass `max_bytes`.
    pub(crate) fn add_source_file(&mut self, path: &str, size: u64, mode: u32) -> Result<()> {
        debug_assert!(self.source.is_some(), "a source file in a tree without a source");
        let bytes = self.bytes.saturating_add(size);
        if bytes > self.limits.max_bytes {
            return Err(Error::Limit {
                what: "bytes in one sync",
                limit: self.limits.max_bytes,
                actual: bytes,
            });
        }
        self.add_file(path, Vec::new(), mode)?;
        if let Some(node) = self.nodes.get_mut(path) {
            *node = Node::Source { size, mode };
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Where the bytes of `node`, an entry of this tree, are, and its mode;
    /// `None` for a directory.
    pub(crate) fn file<'t>(&'t self, node: &'t Node) -> Option<(Bytes<'t>, u32)> {
        match node {
            Node::File { contents, mode } => Some((Bytes::Held(contents), *mode)),
            Node::Source { size, mode } => {
                let source = self.source.as_deref().expect("a tree with source files has a source");
                Some((Bytes::Source(source, *size), *mode))
            }
            Node::Dir { .. } => None,
        }
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
            Some(Node::File { .. } | Node::Source { .. }) => {
                Err(Error::Duplicate { path: path.to_owned(), reason: "used for a file and a directory" })
            }
            None => {
                self.admit(path.len(), false)?;
                self.path_bytes += path.len() as u64;
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
                Some(Node::File { .. } | Node::Source { .. }) => {
                    return Err(Error::Duplicate {
                        path: dir.to_owned(),
                        reason: "used for a file and a directory",
                    });
                }
                None => {
                    self.admit(dir.len(), false)?;
                    self.path_bytes += dir.len() as u64;
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

    /// The entry at `path` with the tree's own copy of the path.
    pub(crate) fn get_key_value(&self, path: &str) -> Option<(&str, &Node)> {
        self.nodes.get_key_value(path).map(|(k, v)| (k.as_str(), v))
    }

    /// How many entries (files and directories) the tree holds.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
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
    pub fn check_limits(&self, limits: &RequestLimits) -> Result<()> {
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
pub struct RequestLimits {
    /// Most regular files in one sync.
    pub max_files: u64,
    /// Most bytes, summed over all files, in one sync or write.
    pub max_bytes: u64,
    /// Most directories (listed or implied) in one sync.
    pub max_dirs: u64,
    /// Most bytes of paths, summed over every file and directory (implied
    /// ones too: `a/b/c` stores `a`, `a/b` and `a/b/c`), in one sync.
    pub max_path_bytes: u64,
}

impl Default for RequestLimits {
    /// 100 000 files and 4 GiB: far above any certificate or manifest set,
    /// low enough that a runaway request fails before it fills a disk.
    /// 100 000 directories and 64 MiB of paths: what the host builds from
    /// one request stays bounded (tens of MiB of keys) however the names
    /// nest, while 100 000 files of 600-byte paths still fit.
    fn default() -> Self {
        RequestLimits { max_files: 100_000, max_bytes: 4 << 30, max_dirs: 100_000, max_path_bytes: 64 << 20 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_files_count_their_sizes_against_the_byte_limit_as_they_are_added() {
        let limits = RequestLimits { max_bytes: 10, ..RequestLimits::default() };
        let root = rustix::fs::open(".", rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap();
        let mut t = Tree::from_source(limits, Source::new(root, "src"));
        t.add_source_file("a", 6, 0o600).unwrap();
        assert_eq!(t.get("a"), Some(&Node::Source { size: 6, mode: 0o600 }));
        assert!(matches!(t.file(t.get("a").unwrap()), Some((Bytes::Source(_, 6), 0o600))));
        let err = t.add_source_file("b", 5, 0o644).unwrap_err();
        assert!(matches!(err, Error::Limit { actual: 11, .. }), "{err:?}");
        assert_eq!(t.get("b"), None, "b is not added");
        assert!(t.add_source_file("a", 1, 0o644).is_err(), "named twice");
        assert_eq!((t.total_bytes(), t.file_count()), (6, 1));
    }

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
        let err = t
            .check_limits(&RequestLimits { max_files: 1, max_bytes: 100, ..RequestLimits::default() })
            .unwrap_err();
        assert!(err.to_string().contains("files in one sync"), "{err}");
        let err = t
            .check_limits(&RequestLimits { max_files: 10, max_bytes: 15, ..RequestLimits::default() })
            .unwrap_err();
        assert!(err.to_string().contains("bytes in one sync"), "{err}");
    }

    #[test]
    fn deeply_nested_names_are_refused_once_their_implied_directories_pass_the_path_limit() {
        // 64 levels of 62-byte names (a path near PATH_MAX): one file
        // implies 63 directories whose keys hold about 32 times the bytes of
        // its own name.
        let component = "d".repeat(62);
        let nested = |i: usize| format!("{i:06}{}", format!("/{component}").repeat(63));
        let limits = RequestLimits { max_path_bytes: 4 << 20, ..RequestLimits::default() };
        let mut t = Tree::with_limits(limits);
        let mut added = 0;
        let err = loop {
            match t.add_file(&nested(added), vec![], 0o644) {
                Ok(()) => added += 1,
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("bytes of paths in one sync"), "{err}");
        // Refused after well under the limit's worth of names was handed
        // over, and the tree never held more than the limit in keys.
        assert!(added * nested(0).len() < (4 << 20) / 16, "{added}");
        assert!(t.path_bytes <= 4 << 20);
    }

    #[test]
    fn files_and_directories_past_their_counts_are_refused_as_they_are_added() {
        let mut t =
            Tree::with_limits(RequestLimits { max_files: 2, max_dirs: 2, ..RequestLimits::default() });
        t.add_file("a", vec![], 0o644).unwrap();
        t.add_file("b", vec![], 0o644).unwrap();
        let err = t.add_file("c", vec![], 0o644).unwrap_err();
        assert_eq!(err.to_string(), "limit exceeded: files in one sync: 3 is over the limit of 2");
        let mut t = Tree::with_limits(RequestLimits { max_dirs: 2, ..RequestLimits::default() });
        let err = t.add_file("x/y/z/f", vec![], 0o644).unwrap_err();
        assert_eq!(err.to_string(), "limit exceeded: directories in one sync: 3 is over the limit of 2");
    }
}
