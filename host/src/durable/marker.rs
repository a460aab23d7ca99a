//! The "unsynced" marker: a file beside a target that says its last change
//! may not have reached stable storage, so the next operation must not
//! trust what it reads back.
//!
//! Why: when the commit fsync fails, Linux may already have marked the
//! dirty pages clean (they stay readable in the page cache but never reach
//! the disk), and a later fsync of the same inode succeeds without writing
//! them ("fsyncgate"). A retry that compared the target with the request
//! would read the new contents from the page cache and answer "unchanged"
//! with no fsync at all; fsyncing again would not help either. So a sync or
//! write marks its target before the swap and unmarks it only after the
//! commit fsync returned; a marked target is always rebuilt from fresh
//! inodes with the full sequence. The marker is a file, so a retry in
//! another process (the CLI) sees it too.
//!
//! The marker itself is not fsynced: it only has to outlive the page cache
//! it guards, and after a power loss the disk is read back as it really is.
//! A marker that reappears after a crash only costs one full rewrite.

use std::os::fd::BorrowedFd;

use super::error::{Error, Result};
use super::sys::{Kind, Sys, join, kind_at};
use super::walk::list_own_names;

/// Prefix of marker names; `.durasync-` makes them reserved, and the label
/// is not one recovery removes.
const PREFIX: &str = ".durasync-unsynced-";

/// The marker's name for the target `name`: the prefix and the FNV-1a
/// hash of the name (a name can be 255 bytes, so it cannot be embedded).
/// The hash is fixed, so every durasync version finds the same marker.
pub(crate) fn marker_name(name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{PREFIX}{h:016x}")
}

/// Whether `name` in `dir` is marked unsynced.
pub(crate) fn is_marked(dir: BorrowedFd<'_>, name: &str) -> Result<bool> {
    let marker = marker_name(name);
    Ok(kind_at(dir, &marker, &marker)?.0 != Kind::Missing)
}

/// Whether any target in `dir` is marked unsynced.
pub(crate) fn any_marked(dir: BorrowedFd<'_>) -> Result<bool> {
    Ok(list_own_names(dir, ".")?.iter().any(|n| n.starts_with(PREFIX)))
}

/// Mark `name` in `dir` unsynced. Returns whether the marker is new.
pub(crate) fn mark(sys: &Sys<'_>, dir: BorrowedFd<'_>, name: &str) -> Result<bool> {
    mark_in(sys, dir, ".", name)
}

/// [`mark`] in `dir`, shown as `dir_path` (relative to the operation's anchor).
pub(crate) fn mark_in(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str, name: &str) -> Result<bool> {
    let marker = marker_name(name);
    match sys.create(dir, &marker, &join(dir_path, &marker)) {
        Ok(_) => Ok(true),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Remove the marker of `name` in `dir`.
pub(crate) fn unmark(sys: &Sys<'_>, dir: BorrowedFd<'_>, name: &str) -> Result<()> {
    unmark_in(sys, dir, ".", name)
}

/// [`unmark`] in `dir`, shown as `dir_path`.
pub(crate) fn unmark_in(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str, name: &str) -> Result<()> {
    let marker = marker_name(name);
    sys.unlink(dir, &marker, &join(dir_path, &marker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::names::{is_leftover, is_reserved};

    #[test]
    fn marker_names_are_reserved_fixed_and_never_leftovers() {
        let m = marker_name("tls");
        assert_eq!(m, marker_name("tls"));
        assert_ne!(m, marker_name("tls2"));
        assert!(is_reserved(&m) && !is_leftover(&m), "{m}");
        assert!(marker_name(&"x".repeat(255)).len() < 64);
    }
}
