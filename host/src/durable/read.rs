//! Read-only access beneath a directory handle (`read-file`, `list-dir`).

use std::os::fd::{AsFd, BorrowedFd};

use serde::Serialize;

use super::error::{Error, Result};
use super::names::is_reserved;
use super::resolve::{open_beneath, split_last};
use super::sys::{Kind, kind_at};
use super::walk::{list_names, read_file_at};

/// What a directory entry is; links are reported, never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A fifo, socket or device.
    Other,
}

/// One entry of [`list_dir`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirEntry {
    /// The entry's name.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

/// The bytes of the regular file at `rel` beneath `root`, or `None` when
/// nothing is there (nor at any missing parent). A link is an error.
pub fn read_file(root: BorrowedFd<'_>, rel: &str) -> Result<Option<Vec<u8>>> {
    let (parent_rel, name) = split_last(rel)?;
    let parent = match open_beneath(root, parent_rel) {
        Ok(fd) => fd,
        Err(Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    match kind_at(parent.as_fd(), name, rel)?.0 {
        Kind::Missing => Ok(None),
        Kind::File => read_file_at(parent.as_fd(), name, rel).map(Some),
        Kind::Symlink => Err(Error::Symlink { path: rel.to_owned() }),
        _ => Err(Error::NotAFile { path: rel.to_owned() }),
    }
}

/// The entries of the directory at `rel` beneath `root`, sorted by name,
/// without durasync's own bookkeeping entries.
pub fn list_dir(root: BorrowedFd<'_>, rel: &str) -> Result<Vec<DirEntry>> {
    let dir = open_beneath(root, rel)?;
    let mut names = list_names(dir.as_fd(), rel)?;
    names.retain(|n| !is_reserved(n));
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let kind = match kind_at(dir.as_fd(), &name, &name)?.0 {
                Kind::File => EntryKind::File,
                Kind::Dir => EntryKind::Directory,
                Kind::Symlink => EntryKind::Symlink,
                _ => EntryKind::Other,
            };
            Ok(DirEntry { name, kind })
        })
        .collect()
}
