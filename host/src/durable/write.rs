//! Durable single-file replace (static pod manifests, kubeconfigs): write a
//! temporary sibling, fsync it, rename it over the target, fsync the
//! directory. Never delete-then-write: a reader or a crash sees the old
//! bytes or the new bytes, never a missing, empty or partial file.

use std::os::fd::{AsFd, BorrowedFd};

use super::Options;
use super::diff::{Plan, file_holds};
use super::error::{Error, Result, Step, committed, flags_unsupported};
use super::gate::{self, StagedKind};
use super::lock::lock;
use super::marker::{is_marked, mark, unmark};
use super::names::{Leftover, check_name, leftover_name};
use super::recover::{remove_leftovers, remove_leftovers_or_defer};
use super::report::{Outcome, Report};
use super::sys::{Kind, Sys, kind_at};
use super::tree::MODE_MASK;

/// The mode of a file created without an explicit mode.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// Replace the file `name` in `dir` with `contents`, atomically and durably.
///
/// `mode` `None` keeps an existing file's mode and uses
/// [`DEFAULT_FILE_MODE`] for a new one. When the file already holds exactly
/// these bytes with this mode, nothing is written (`Unchanged`).
///
/// Errors other than [`Error::Committed`] leave the file as it was.
pub fn write_file(
    dir: BorrowedFd<'_>,
    name: &str,
    contents: &[u8],
    mode: Option<u32>,
    opts: &Options<'_>,
) -> Result<Report> {
    check_name(name)?;
    if let Some(m) = mode.filter(|m| m & !MODE_MASK != 0) {
        return Err(Error::InvalidMode { path: name.to_owned(), mode: m });
    }
    if contents.len() as u64 > opts.limits.max_bytes {
        return Err(Error::Limit {
            what: "bytes in one write",
            limit: opts.limits.max_bytes,
            actual: contents.len() as u64,
        });
    }
    let sys = Sys::new(opts.probe);
    // A symlinked or wrong-kind target is refused before the lock file is
    // created, so a refused request leaves the directory exactly as it was.
    file_state(dir, name)?;
    let _lock = lock(&sys, dir, ".")?;
    let deferred = remove_leftovers_or_defer(&sys, dir)?;

    let old_mode = file_state(dir, name)?;
    let exists = old_mode.is_some();
    let mode = mode.or(old_mode).unwrap_or(DEFAULT_FILE_MODE);
    // Unchanged: nothing to do — unless the last write's commit fsync
    // failed, when what the page cache shows proves nothing (see `marker`).
    if old_mode == Some(mode) && file_holds(dir, name, name, contents)? && !is_marked(dir, name)? {
        return Ok(Report::unchanged());
    }

    let tmp = leftover_name(Leftover::Tmp);
    let staged = (|| {
        let fd = sys.create(dir, &tmp, &tmp)?;
        sys.write_all(fd.as_fd(), &tmp, contents)?;
        // fchmod, not the create mode: the umask must not change the bits.
        sys.chmod(&fd, &tmp, mode)?;
        // Data and mode durable before the rename can make them the target.
        sys.fsync_file(fd.as_fd(), &tmp)
    })();
    // The gate sees the staged copy, already durable, before the rename.
    let staged = staged.and_then(|()| {
        let plan = exists.then(|| Plan { exists, ..Plan::default() });
        gate::ask(opts.gate, dir, name, &tmp, StagedKind::File, 1, plan.as_ref())
    });
    // Last chance to give up; marked until the commit fsync returned.
    let marked = staged.and_then(|()| opts.cancel.check(name)).and_then(|()| mark(&sys, dir, name));
    let new_mark = match marked {
        Ok(new) => new,
        Err(e) => {
            let _ = sys.unlink(dir, &tmp, &tmp);
            return Err(e);
        }
    };
    // One atomic step from the old file to the new one (NOREPLACE when new,
    // so a file created meanwhile by someone else is not clobbered).
    let renamed = match sys.rename(dir, &tmp, &tmp, name, name, exists) {
        // No renameat2 flags here (FUSE, some NFS): plain rename(2) is atomic
        // on every POSIX file system, and under the lock no durasync process
        // can have created `name` since it was found missing.
        Err(e) if !exists && flags_unsupported(&e) => sys.rename(dir, &tmp, &tmp, name, name, true),
        other => other,
    };
    if let Err(e) = renamed {
        let _ = sys.unlink(dir, &tmp, &tmp);
        if new_mark {
            let _ = unmark(&sys, dir, name);
        }
        return Err(e);
    }
    // Commit point: the directory entry now naming the new inode is durable.
    committed(sys.fsync_dir(dir, ".", Step::FsyncParent), false)?;
    // Durable now: a repeat may trust what it reads back again.
    committed(unmark(&sys, dir, name), true)?;
    if deferred {
        committed(remove_leftovers(&sys, dir, "."), true)?;
    }
    Ok(Report { outcome: if exists { Outcome::Replaced } else { Outcome::Created }, written: 1, removed: 0 })
}

/// The mode of the regular file `name`, `None` when nothing is there; a
/// link or anything but a regular file is refused.
fn file_state(dir: BorrowedFd<'_>, name: &str) -> Result<Option<u32>> {
    match kind_at(dir, name, name)? {
        (Kind::File, mode) => Ok(Some(mode)),
        (Kind::Missing, _) => Ok(None),
        (Kind::Symlink, _) => Err(Error::Symlink { path: name.to_owned() }),
        _ => Err(Error::NotAFile { path: name.to_owned() }),
    }
}
