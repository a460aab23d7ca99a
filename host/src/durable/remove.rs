//! Durable removal of a file or of a whole managed directory.
//!
//! A directory is first renamed to a trash sibling (one atomic step), the
//! parent is fsynced (the commit point), and only then is the tree deleted.
//! A crash therefore never leaves a half-deleted directory under the
//! target's name: it is all there, or it is gone and recovery deletes the
//! trash.

use std::os::fd::BorrowedFd;

use super::Options;
use super::error::{Result, Step, committed, flags_unsupported};
use super::lock::lock;
use super::marker::{is_marked, unmark};
use super::names::{Leftover, check_name, leftover_name};
use super::recover::{remove_committed_leftover, remove_leftovers, remove_leftovers_or_defer};
use super::report::{Outcome, Report};
use super::sys::{Kind, Sys, kind_at};

/// Remove the entry `name` of `dir` durably. Returns `None` when nothing was
/// there. A symbolic link is removed itself, never followed.
pub fn remove(dir: BorrowedFd<'_>, name: &str, opts: &Options<'_>) -> Result<Option<Report>> {
    check_name(name)?;
    let sys = Sys::new(opts.probe);
    let _lock = lock(&sys, dir, ".")?;
    let deferred = remove_leftovers_or_defer(&sys, dir)?;
    let kind = kind_at(dir, name, name)?.0;
    if kind == Kind::Missing {
        return Ok(None);
    }
    opts.cancel.check(name)?;
    let report = if kind == Kind::Dir {
        let trash = leftover_name(Leftover::Trash);
        // Atomically take the whole tree away from its name. The trash name
        // is fresh, so where renameat2 flags are unsupported (FUSE, some
        // NFS) a plain rename(2) is just as safe.
        match sys.rename(dir, name, name, &trash, &trash, false) {
            Err(e) if flags_unsupported(&e) => sys.rename(dir, name, name, &trash, &trash, true)?,
            other => other?,
        }
        // Commit point: the name is durably gone.
        committed(sys.fsync_dir(dir, ".", Step::FsyncParent), false)?;
        let removed = committed(remove_committed_leftover(&sys, dir, &trash, &opts.cancel), true)?;
        Report { outcome: Outcome::Removed, written: 0, removed }
    } else {
        sys.unlink(dir, name, name)?;
        // Commit point: the unlink is durable.
        committed(sys.fsync_dir(dir, ".", Step::FsyncParent), false)?;
        Report { outcome: Outcome::Removed, written: 0, removed: 1 }
    };
    // The mark of an earlier failed commit concerned contents that are gone.
    if committed(is_marked(dir, name), true)? {
        committed(unmark(&sys, dir, name), true)?;
    }
    if deferred {
        committed(remove_leftovers(&sys, dir, "."), true)?;
    }
    Ok(Some(report))
}
