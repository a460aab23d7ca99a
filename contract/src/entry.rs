//! WIT `entry-kind` and `entry`: one entry of `list-dir`.

use alloc::string::String;

/// What a directory entry is; links are reported, never followed (WIT
/// `entry-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

impl EntryKind {
    /// The lowercase WIT name (`file`, `directory`, `symlink`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Directory => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }
}

/// One entry of `list-dir` (WIT `entry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}
