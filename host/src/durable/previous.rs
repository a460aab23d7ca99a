//! The previous contents of a target, kept by a sync so that a revert is
//! one more exchange: [`revert`], [`discard_previous`], [`previous_of`].
//!
//! # How a previous is kept
//!
//! A sync (or single-file write) asked to keep ([`Options::keep_previous`],
//! or [`Gate::keep_previous`](super::Gate::keep_previous)) names its staging
//! entry `.durasync-keep.<O>.<target>` ([`keep_name`](super::names::keep_name)), where `<O>`
//! is the inode number of the target it is about to replace, read before
//! the staging entry is made. Before the swap that entry is the new tree,
//! a fresh inode, so its own inode number is not `O` (`O` is still live as
//! the target). After `RENAME_EXCHANGE` the entry holds the old tree, whose
//! inode *is* `O`. Hence the one rule, needing no ledger:
//!
//! **A keep entry of target `t` whose own inode number equals the `<O>` in
//! its name is the valid previous of `t`; any other keep entry is stale**
//! (a staging left by a crash before its swap, or the replaced tree left by
//! a revert) and leftover recovery removes it. Recovery never removes a
//! valid previous.
//!
//! A crash at any instant leaves the target exactly old or new (the swap is
//! one atomic step, as in every sync), and the keep entry valid exactly
//! when the swap reached the disk: then it holds the old tree.
//!
//! At most one previous per target: a keep-sync renames an older valid
//! previous to a trash name and fsyncs the parent **before** its own swap,
//! so no crash state holds two valid previouses (the weak model lets a
//! crash keep any subset of a directory's unsynced changes, so the removal
//! must be durable on its own first). The older previous is thus gone once
//! a keep-sync reaches its swap, even if that swap then fails: the caller
//! asked to keep the *current* tree.
//!
//! The previous shares the inodes of the files the keep-sync carried
//! (unchanged files are hard links, see `sync.rs`): they are the same bytes
//! and mode in both trees. A later sync rewrites such a file instead of
//! carrying it again (it carries only files with one link), so writing the
//! live tree never reaches the previous through durasync.
//!
//! After a keep-sync ended "committed, durability unknown"
//! ([`Error::Committed`] with `durable: false`) its exchange has happened:
//! the old tree is already the previous. Retry it *without* keeping (the
//! marked target is rebuilt from fresh inodes, the previous stays the old
//! tree); a retry that keeps makes the tree the failed change left live the
//! previous, as asked. While the target is marked (see `marker.rs`) an
//! older previous is only renamed away before the swap; its contents are
//! removed after the commit, with the other deferred leftovers.
//!
//! A sync that does not keep leaves an existing previous alone (the last
//! kept tree stays the one a revert returns to), and so does a removal of
//! the target (a revert then recreates it).
//!
//! # Revert
//!
//! Under the lock: find the valid previous `P` (inode `O`); mark the target
//! unsynced (as a sync does); exchange `P` with the target (or rename it
//! into place with `RENAME_NOREPLACE` when the target is missing); fsync
//! the parent: the **commit point**; unmark. The keep entry now holds the
//! replaced tree, whose inode is not `O`: it is stale, and it is removed
//! off the durability path. A crash at any instant leaves the target old
//! or reverted, and the previous valid exactly when the revert is not
//! durable.

use std::os::fd::BorrowedFd;

use super::Options;
use super::error::{Error, Result, Step, committed, unsupported_or};
use super::lock::lock;
use super::marker::{mark, unmark};
use super::names::{Leftover, check_name, keep_of, leftover_name};
use super::recover::{kept_kind, remove_committed_leftover, remove_leftovers, remove_leftovers_or_defer};
use super::report::{Outcome, Report};
use super::sys::{Kind, Sys, kind_at};
use super::walk::{count_files, list_own_names};

/// What kind of entry a previous is: what its target was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviousKind {
    /// A directory kept by a sync.
    Dir,
    /// A regular file kept by a single-file write.
    File,
}

/// The valid previous of a target, as [`previous_of`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousInfo {
    /// Its entry's name beside the target (`.durasync-keep.…`).
    pub entry: String,
    /// Its inode number (the one its name states).
    pub inode: u64,
    /// Directory or regular file.
    pub kind: PreviousKind,
}

/// The valid previous of `name` in `parent`, if any.
///
/// Cheap (one listing of `parent`, one `statat` per keep entry of `name`)
/// and takes no lock: a concurrent keep-sync or revert may change the
/// answer right after it is given; [`revert`] looks again under the lock.
pub fn previous_of(parent: BorrowedFd<'_>, name: &str) -> Result<Option<PreviousInfo>> {
    check_name(name)?;
    Ok(valid_previous(parent, name)?.into_iter().next())
}

/// Every valid previous of `name` in `parent`, by name (at most one unless
/// something other than durasync made entries with keep names).
pub(crate) fn valid_previous(parent: BorrowedFd<'_>, name: &str) -> Result<Vec<PreviousInfo>> {
    let mut found = Vec::new();
    let mut names = list_own_names(parent, ".")?;
    names.sort();
    for entry in names {
        let Some(ino) = keep_of(&entry, name) else { continue };
        if let Some(kind) = valid_kind(parent, &entry, ino)? {
            found.push(PreviousInfo { entry, inode: ino, kind });
        }
    }
    Ok(found)
}

/// The kind of the keep entry `entry` of `parent` naming inode `ino` when
/// it is valid: a directory or regular file whose own inode is `ino`.
fn valid_kind(parent: BorrowedFd<'_>, entry: &str, ino: u64) -> Result<Option<PreviousKind>> {
    Ok(match kept_kind(parent, entry, ino)? {
        Some(Kind::Dir) => Some(PreviousKind::Dir),
        Some(Kind::File) => Some(PreviousKind::File),
        _ => None,
    })
}

/// Whether a sync or write with `opts` keeps the target's previous contents.
pub(crate) fn keeps(opts: &Options<'_>) -> bool {
    opts.keep_previous || opts.gate.is_some_and(|g| g.keep_previous())
}

/// The staging name of a keep-sync of `name` whose current target is the
/// inode `ino`. An entry already there is stale (it cannot be a valid
/// previous: `ino` is live as the target) and only exists when leftovers
/// are deferred (see `recover.rs`): it is renamed to a trash name, removed
/// with the other deferred leftovers after the commit.
pub(crate) fn keep_staging(sys: &Sys<'_>, parent: BorrowedFd<'_>, name: &str, ino: u64) -> Result<String> {
    let staging = super::names::keep_name(ino, name);
    if kind_at(parent, &staging, &staging)?.0 != Kind::Missing {
        let trash = leftover_name(Leftover::Trash);
        sys.rename(parent, &staging, &staging, &trash, &trash, false)?;
    }
    Ok(staging)
}

/// Before a keep-sync's swap: take every older valid previous of `name`
/// away from its keep name (a rename to a trash name, one atomic step
/// each) and make that durable with an fsync of the parent. Returns the
/// trash names, removed after the commit.
///
/// Ordering: the fsync must come before the swap. Without it a crash could
/// keep the swap (the new previous valid) and not the rename (the old one
/// still valid): two valid previouses, and no rule to tell which is newer.
/// Contents are not removed here: while leftovers are deferred (a target
/// marked unsynced) the older previous may be what the disk still holds at
/// the target's name, so its inodes are only emptied after this sync's
/// own commit.
pub(crate) fn retire_previous(sys: &Sys<'_>, parent: BorrowedFd<'_>, name: &str) -> Result<Vec<String>> {
    let mut trashed = Vec::new();
    for prev in valid_previous(parent, name)? {
        let trash = leftover_name(Leftover::Trash);
        sys.rename(parent, &prev.entry, &prev.entry, &trash, &trash, false)?;
        trashed.push(trash);
    }
    if !trashed.is_empty() {
        // Durable before the swap: at most one valid previous in every crash state.
        sys.fsync_dir(parent, ".", Step::FsyncParent)?;
    }
    Ok(trashed)
}

/// After a keep-sync's commit: remove the trees [`retire_previous`] took
/// away (off the durability path, like the old tree of a plain sync).
pub(crate) fn remove_retired(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    trashed: &[String],
    opts: &Options<'_>,
) -> Result<()> {
    for trash in trashed {
        committed(remove_committed_leftover(sys, parent, trash, &opts.cancel), true)?;
    }
    Ok(())
}

/// Put the previous contents of `name` in `parent` back, atomically and
/// durably: after a power loss at any instant `name` holds exactly its
/// current contents or exactly its previous ones; once this returns `Ok`
/// it durably holds the previous ones, and the target has no previous
/// any more (the replaced contents are removed).
///
/// The outcome is [`Outcome::Replaced`] (or [`Outcome::Created`] when the
/// target was missing); `written` counts the regular files the reverted
/// contents hold, `removed` the regular files of the replaced contents
/// removed after the commit.
///
/// [`Error::NoPrevious`] when `name` has no valid previous: nothing is
/// changed. A target that is a link, or not of the previous's kind, is
/// refused. Errors other than [`Error::Committed`] leave the target and its
/// previous unchanged.
pub fn revert(parent: BorrowedFd<'_>, name: &str, opts: &Options<'_>) -> Result<Report> {
    check_name(name)?;
    let sys = Sys::new(opts.probe);
    // A refused request (a link, nothing to revert to) leaves the parent
    // exactly as it was: checked before the lock file is created.
    target_kind(parent, name)?;
    if previous_of(parent, name)?.is_none() {
        return Err(Error::NoPrevious { path: name.to_owned() });
    }
    let _lock = lock(&sys, parent, ".")?;
    // A stale keep entry is removed here, a valid previous never.
    let deferred = remove_leftovers_or_defer(&sys, parent)?;
    // Looked up again under the lock: another process may have reverted.
    let Some(prev) = previous_of(parent, name)? else {
        return Err(Error::NoPrevious { path: name.to_owned() });
    };
    let exists = match (target_kind(parent, name)?, prev.kind) {
        (None, _) => false,
        (Some(PreviousKind::Dir), PreviousKind::Dir) | (Some(PreviousKind::File), PreviousKind::File) => true,
        (Some(_), PreviousKind::Dir) => return Err(Error::NotADirectory { path: name.to_owned() }),
        (Some(_), PreviousKind::File) => return Err(Error::NotAFile { path: name.to_owned() }),
    };
    let written = match prev.kind {
        PreviousKind::Dir => {
            let fd = super::sys::open_dir(parent, &prev.entry, &prev.entry)?;
            u32::try_from(count_files(std::os::fd::AsFd::as_fd(&fd), &prev.entry)?).unwrap_or(u32::MAX)
        }
        PreviousKind::File => 1,
    };
    opts.cancel.check(name)?;
    // Marked before the exchange, unmarked once the commit fsync returned
    // (see `marker.rs`): a failed commit is rebuilt by the next sync.
    let new_mark = mark(&sys, parent, name)?;
    // The revert: one atomic step. NOREPLACE for a missing target, so a
    // target created meanwhile by another program is never clobbered.
    let swapped = if exists {
        sys.exchange(parent, &prev.entry, &prev.entry, parent, name, name)
    } else {
        sys.rename(parent, &prev.entry, &prev.entry, name, name, false)
    };
    if let Err(e) = swapped {
        if new_mark {
            let _ = unmark(&sys, parent, name);
        }
        return Err(unsupported_or(e, parent, exists));
    }
    // Commit point: the exchange reaches the disk. Until it returns, a crash
    // leaves the target as it was and the previous valid.
    committed(sys.fsync_dir(parent, ".", Step::FsyncParent), false)?;
    committed(unmark(&sys, parent, name), true)?;
    // Off the durability path: the keep entry now holds the replaced
    // contents, whose inode is not the one its name states (stale).
    let removed = if deferred {
        committed(remove_leftovers(&sys, parent, "."), true)?;
        0
    } else if exists {
        committed(remove_committed_leftover(&sys, parent, &prev.entry, &opts.cancel), true)?
    } else {
        0
    };
    Ok(Report { outcome: if exists { Outcome::Replaced } else { Outcome::Created }, written, removed })
}

/// Remove the valid previous of `name` in `parent` (a probation passed):
/// `true` when there was one. It is renamed to a trash name and the parent
/// fsynced, so once this returns it durably is no previous any more (a
/// crash cannot bring it back for a later revert); then its contents are
/// removed, off the durability path. Never changes the target.
pub fn discard_previous(parent: BorrowedFd<'_>, name: &str, opts: &Options<'_>) -> Result<bool> {
    check_name(name)?;
    if previous_of(parent, name)?.is_none() {
        return Ok(false);
    }
    let sys = Sys::new(opts.probe);
    let _lock = lock(&sys, parent, ".")?;
    let deferred = remove_leftovers_or_defer(&sys, parent)?;
    let trashed = retire_previous(&sys, parent, name)?;
    if trashed.is_empty() {
        return Ok(false);
    }
    // While leftovers are deferred the previous may be what the disk holds
    // at the target's name (see `retire_previous`): left to the next
    // operation's deferred removal.
    if !deferred {
        remove_retired(&sys, parent, &trashed, opts)?;
    }
    Ok(true)
}

/// The kind of the target `name`: `None` when missing; a link or another
/// kind of entry is refused.
fn target_kind(parent: BorrowedFd<'_>, name: &str) -> Result<Option<PreviousKind>> {
    match kind_at(parent, name, name)?.0 {
        Kind::Dir => Ok(Some(PreviousKind::Dir)),
        Kind::File => Ok(Some(PreviousKind::File)),
        Kind::Missing => Ok(None),
        Kind::Symlink => Err(Error::Symlink { path: name.to_owned() }),
        _ => Err(Error::NotADirectory { path: name.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::durable::names::keep_name;
    use crate::durable::recover::stale_keeps;
    use crate::durable::sys::open_dir;

    /// A scratch parent with an fd on it.
    fn parent() -> (tempfile::TempDir, std::os::fd::OwnedFd) {
        let tmp = tempfile::tempdir().unwrap();
        let fd = open_dir(rustix::fs::CWD, tmp.path().to_str().unwrap(), "tmp").unwrap();
        (tmp, fd)
    }

    /// Make `rel` a directory and name it as the keep entry of `target`
    /// stating inode `stated(its own inode)`; returns the name.
    fn keep_dir(tmp: &std::path::Path, target: &str, stated: impl Fn(u64) -> u64) -> String {
        let made = tmp.join("made");
        std::fs::create_dir(&made).unwrap();
        let ino = std::fs::metadata(&made).unwrap().ino();
        let name = keep_name(stated(ino), target);
        std::fs::rename(&made, tmp.join(&name)).unwrap();
        name
    }

    #[test]
    fn a_keep_entry_is_the_previous_only_when_its_own_inode_is_the_one_its_name_states() {
        let (tmp, fd) = parent();
        // Far from any inode the next directory may get (a rename onto the same
        // name would replace it).
        let stale = keep_dir(tmp.path(), "certs", |ino| ino + (1 << 40));
        assert_eq!(previous_of(fd.as_fd(), "certs").unwrap(), None);
        let valid = keep_dir(tmp.path(), "certs", |ino| ino);
        let found = previous_of(fd.as_fd(), "certs").unwrap().expect("a valid previous");
        assert_eq!((found.entry.as_str(), found.kind), (valid.as_str(), PreviousKind::Dir));
        // Another target's previous is not this one's.
        assert_eq!(previous_of(fd.as_fd(), "cert").unwrap(), None);
        assert_eq!(stale_keeps(fd.as_fd(), &list_own_names(fd.as_fd(), ".").unwrap()).unwrap(), vec![stale]);
    }

    #[test]
    fn a_link_or_a_fifo_under_a_keep_name_is_never_a_previous() {
        let (tmp, fd) = parent();
        std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        // Named after their own inodes: only a directory or a regular file
        // is a previous, never something a revert would swap in as a link.
        std::os::unix::fs::symlink("elsewhere", tmp.path().join("l")).unwrap();
        let link_ino = std::fs::symlink_metadata(tmp.path().join("l")).unwrap().ino();
        std::fs::rename(tmp.path().join("l"), tmp.path().join(keep_name(link_ino, "t"))).unwrap();
        rustix::fs::mknodat(fd.as_fd(), "f", rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).unwrap();
        let fifo_ino = std::fs::symlink_metadata(tmp.path().join("f")).unwrap().ino();
        std::fs::rename(tmp.path().join("f"), tmp.path().join(keep_name(fifo_ino, "u"))).unwrap();
        assert_eq!(previous_of(fd.as_fd(), "t").unwrap(), None);
        assert_eq!(previous_of(fd.as_fd(), "u").unwrap(), None);
        assert_eq!(stale_keeps(fd.as_fd(), &list_own_names(fd.as_fd(), ".").unwrap()).unwrap().len(), 2);
    }

    #[test]
    fn revert_without_a_previous_names_the_target_and_creates_no_lock_file() {
        let (tmp, fd) = parent();
        std::fs::create_dir(tmp.path().join("certs")).unwrap();
        let err = revert(fd.as_fd(), "certs", &Options::default()).unwrap_err();
        assert!(matches!(&err, Error::NoPrevious { path } if path == "certs"), "{err}");
        assert!(err.is_invalid_request());
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["certs"]);
    }
}
