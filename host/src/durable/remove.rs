//! Durable removal of a file or of a whole managed directory.
//!
//! A directory is first renamed to a trash sibling (one atomic step), the
//! parent is fsynced (the commit point), and only then is the tree deleted.
//! A crash therefore never leaves a half-deleted directory under the
//! target's name: it is all there, or it is gone and recovery deletes the
//! trash.

use std::os::fd::BorrowedFd;

use super::Options;
use super::error::{Result, Step};
use super::names::{Leftover, check_name, leftover_name};
use super::recover::{remove_leftovers, remove_tree};
use super::report::{Outcome, Report};
use super::sync::committed;
use super::sys::{Kind, Sys, kind_at};

/// Remove the entry `name` of `dir` durably. Returns `None` when nothing was
/// there. A symbolic link is removed itself, never followed.
pub fn remove(dir: BorrowedFd<'_>, name: &str, opts: &Options<'_>) -> Result<Option<Report>> {
    check_name(name)?;
    let sys = Sys::new(opts.probe);
    let _lock = sys.lock(dir, ".")?;
    remove_leftovers(&sys, dir, ".")?;
    match kind_at(dir, name, name)?.0 {
        Kind::Missing => Ok(None),
        Kind::Dir => {
            let trash = leftover_name(Leftover::Trash);
            // Atomically take the whole tree away from its name.
            sys.rename(dir, name, name, &trash, &trash, false)?;
            // Commit point: the name is durably gone.
            committed(sys.fsync_dir(dir, ".", Step::FsyncParent), false)?;
            let removed = committed(remove_tree(&sys, dir, &trash, &trash), true)?;
            Ok(Some(Report { outcome: Outcome::Removed, written: 0, removed }))
        }
        _ => {
            sys.unlink(dir, name, name)?;
            // Commit point: the unlink is durable.
            committed(sys.fsync_dir(dir, ".", Step::FsyncParent), false)?;
            Ok(Some(Report { outcome: Outcome::Removed, written: 0, removed: 1 }))
        }
    }
}
