//! Checks a call makes before the core is asked to change anything: the
//! mode rule, the depth limit, and the early refusal of a link.

use std::os::fd::{AsFd, BorrowedFd};

use super::error::{Error, Result};
use super::grant::Dir;
use crate::durable::names::MAX_DEPTH;
use crate::durable::{self, Cancel, EntryKind, ReadLimits};

/// The setuid, setgid and sticky bits.
pub const SPECIAL_BITS: u32 = 0o7000;

/// Refuse a mode with bits beyond the permission bits (the core's rule), and
/// setuid, setgid or sticky bits unless the root grants special modes: a
/// plugin must not plant a setuid file for whoever runs the host.
pub(crate) fn check_mode(dir: &Dir, path: &str, mode: u32) -> Result<()> {
    if mode & !durable::tree::MODE_MASK != 0 {
        return Err(Error::from(durable::Error::InvalidMode { path: path.to_owned(), mode }));
    }
    let special = mode & SPECIAL_BITS;
    if special != 0 && !dir.special_modes {
        let names: Vec<&str> = [(0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")]
            .into_iter()
            .filter(|(bit, _)| special & bit != 0)
            .map(|(_, name)| name)
            .collect();
        return Err(Error::InvalidPath(format!(
            "mode {mode:#o} for {:?} sets {} ({special:#o}); root `{}` does not grant special modes \
             (the manifest must say special_modes = true under [roots.{}])",
            dir.full(path),
            names.join(" and "),
            dir.root,
            dir.root
        )));
    }
    Ok(())
}

/// Refuse anything `depth` levels below the root when that is past
/// [`MAX_DEPTH`].
pub(crate) fn check_depth(dir: &Dir, path: &str, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        let full = dir.full(path);
        // A path this deep is long: its end says enough.
        let shown = match full.char_indices().rev().nth(80) {
            Some((i, _)) => format!("…{}", &full[i..]),
            None => full,
        };
        return Err(Error::Limit(format!(
            "{shown:?} would reach {depth} directory levels below root `{}`, over the limit of {MAX_DEPTH}",
            dir.root
        )));
    }
    Ok(())
}

/// Refuse a symbolic link at `name` before the core takes its lock, so a
/// refused call leaves no trace (not even the lock file) in the root. The
/// core checks again under the lock; this only makes the refusal earlier
/// and names the guest's whole path.
pub(crate) fn refuse_link(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<()> {
    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode as _) == rustix::fs::FileType::Symlink => {
            Err(Error::from(durable::Error::Symlink { path: path.to_owned() }))
        }
        _ => Ok(()),
    }
}

/// Whether the entry `name` of `dir` holds anything more than `levels`
/// levels below itself (a file directly in it is one level). Iterative and
/// bounded: it never descends past `levels + 1`, holds one fd and one
/// bounded listing at a time, and stops at `cancel` (the run's deadline).
pub(crate) fn subtree_deeper_than(
    dir: BorrowedFd<'_>,
    name: &str,
    levels: usize,
    cancel: &Cancel<'_>,
) -> Result<bool> {
    let mut stack = vec![(name.to_owned(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        let entries = match durable::list_dir(dir, &rel, &ReadLimits::default(), cancel) {
            Ok(entries) => entries,
            // Not a directory (or gone): nothing below it.
            Err(durable::Error::NotADirectory { .. } | durable::Error::NotFound { .. }) => continue,
            // Deeper than a path the core accepts: certainly too deep.
            Err(durable::Error::InvalidPath { .. }) => return Ok(true),
            Err(e) => return Err(Error::from(e)),
        };
        for e in entries {
            if depth + 1 > levels {
                return Ok(true);
            }
            if e.kind == EntryKind::Directory {
                stack.push((format!("{rel}/{}", e.name), depth + 1));
            }
        }
    }
    Ok(false)
}

/// What exists at `name` in `dir`, links not followed: `(is_dir, mode)`.
pub(crate) fn stat_entry(dir: BorrowedFd<'_>, name: &str) -> Result<Option<(bool, u32)>> {
    match rustix::fs::statat(dir.as_fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode as _);
            Ok(Some((ft == rustix::fs::FileType::Directory, st.st_mode & 0o7777)))
        }
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::Io(format!("stat {name}: {}", std::io::Error::from(e)))),
    }
}
