//! What a directory tree holds, for "nothing changed" and "both sides
//! agree" assertions: kind, permission bits and bytes (or link target) of
//! every entry, links never followed, fifos and devices never opened.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One entry of a [`Snapshot`].
#[derive(Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory and its permission bits.
    Dir {
        /// Permission bits (`0o7777`).
        mode: u32,
    },
    /// A regular file: permission bits and bytes.
    File {
        /// Permission bits (`0o7777`).
        mode: u32,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// A symbolic link and its target.
    Symlink {
        /// The target, as stored.
        to: PathBuf,
    },
    /// A fifo, socket or device (never opened) and its permission bits.
    Other {
        /// Permission bits (`0o7777`).
        mode: u32,
    },
}

/// Modes in octal and bytes as escaped text, so a failed comparison reads.
impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Dir { mode } => write!(f, "dir {mode:o}"),
            Entry::File { mode, bytes } => write!(f, "file {mode:o} b\"{}\"", bytes.escape_ascii()),
            Entry::Symlink { to } => write!(f, "link -> {}", to.display()),
            Entry::Other { mode } => write!(f, "other {mode:o}"),
        }
    }
}

/// Everything beneath a path, by relative path (`""` is the path itself,
/// `a/b` an entry beneath it), links not followed. `None` when nothing is
/// there.
pub type Snapshot = Option<BTreeMap<String, Entry>>;

/// The [`Snapshot`] of `path`.
pub fn snapshot(path: &Path) -> Snapshot {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("stat {}: {e}", path.display()),
    };
    let mut out = BTreeMap::new();
    snap_into(path, "", &meta, &mut out);
    Some(out)
}

/// The snapshots of `names` in `dir`, in one map: `name` for each, and
/// `name/a/b` for the entries beneath it. Each must exist.
pub fn snapshot_of(dir: &Path, names: &[&str]) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for name in names {
        let path = dir.join(name);
        let meta =
            std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
        snap_into(&path, name, &meta, &mut out);
    }
    out
}

fn snap_into(path: &Path, rel: &str, meta: &std::fs::Metadata, out: &mut BTreeMap<String, Entry>) {
    let mode = meta.permissions().mode() & 0o7777;
    let ft = meta.file_type();
    if ft.is_symlink() {
        out.insert(rel.to_owned(), Entry::Symlink { to: std::fs::read_link(path).unwrap() });
    } else if ft.is_file() {
        out.insert(rel.to_owned(), Entry::File { mode, bytes: std::fs::read(path).unwrap() });
    } else if ft.is_dir() {
        out.insert(rel.to_owned(), Entry::Dir { mode });
        for child in std::fs::read_dir(path).unwrap() {
            let child = child.unwrap();
            let name = child.file_name().into_string().expect("utf-8 test names");
            let child_rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let child_meta = std::fs::symlink_metadata(child.path()).unwrap();
            snap_into(&child.path(), &child_rel, &child_meta, out);
        }
    } else {
        out.insert(rel.to_owned(), Entry::Other { mode });
    }
}
