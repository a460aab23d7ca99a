//! Durable single-file replace (static pod manifests, kubeconfigs): write a
//! temporary sibling, fsync it, rename it over the target, fsync the
//! directory. Never delete-then-write: a reader or a crash sees the old
//! bytes or the new bytes, never a missing, empty or partial file.
//!
//! Asked to keep ([`Options::keep_previous`]), a write that replaces a file
//! exchanges it with the new one instead (`RENAME_EXCHANGE` works on
//! files): the old file stays beside it as the target's previous, named
//! after its inode (see `previous.rs`). A new file has no previous.

use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::AtFlags;

use super::Options;
use super::attrs;
use super::diff::{Plan, file_holds};
use super::error::{Error, Result, Step, committed, flags_unsupported, unsupported_or};
use super::gate::{self, StagedKind};
use super::lock::lock;
use super::marker::{is_marked, mark, unmark};
use super::names::{DATA_LINK, Leftover, check_name, leftover_name};
use super::previous::{keep_staging, keeps, remove_retired, retire_previous};
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
    // A top-level name of a directory in the symlink layout is a link into
    // its current generation; a file written in its place would not be.
    if kind_at(dir, DATA_LINK, DATA_LINK)?.0 != Kind::Missing {
        return Err(Error::Layout {
            path: name.to_owned(),
            reason: "a file directly in a directory in this layout is changed by a sync of that directory, \
                     not by a write"
                .into(),
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
    if old_mode == Some(mode)
        && !owner_differs(opts, dir, name)?
        && file_holds(dir, name, name, contents)?
        && !is_marked(dir, name)?
    {
        return Ok(Report::unchanged());
    }
    // What the new inode gets besides bytes and mode: read from the file it
    // replaces (or the directory, for a new name) before anything is created.
    let planned = attrs::plan_file(opts.attrs, dir, name, name)?;

    // A keep-write exchanges the files: the old one becomes the previous,
    // named after its inode, read before the new file exists (`previous.rs`).
    let keep = exists && keeps(opts);
    let tmp = if keep {
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| Error::io(Step::Read, name, e))?;
        keep_staging(&sys, dir, name, st.st_ino)?
    } else {
        leftover_name(Leftover::Tmp)
    };
    let staged = (|| {
        let fd = sys.create(dir, &tmp, &tmp)?;
        sys.write_all(fd.as_fd(), &tmp, contents)?;
        // Owner, label and attributes before the mode and the fsync.
        attrs::apply(&sys, fd.as_fd(), &tmp, &planned)?;
        // fchmod, not the create mode: the umask must not change the bits.
        sys.chmod(&fd, &tmp, mode)?;
        // Data, mode and attributes durable before the rename can make them the target.
        sys.fsync_file(fd.as_fd(), &tmp)?;
        Ok(fd)
    })();
    // The gate sees the staged copy, already durable, before the rename.
    let staged = staged.and_then(|fd| {
        let Some(g) = opts.gate else { return Ok(()) };
        let plan = exists.then(|| Plan { exists, ..Plan::default() });
        // Stamped once durable; the clock then passes its ctime (see `gate.rs`).
        let before = match g.exposes_staged() {
            true => Some(gate::Stamp::at(dir, &tmp, &tmp)?),
            false => None,
        };
        let clock_past = before.is_some_and(|b| gate::wait_past(gate::Stamp::newest([&b])));
        gate::ask(Some(g), dir, name, &tmp, StagedKind::File, 1, plan.as_ref(), &[String::new()])?;
        match before {
            Some(before) => recheck_staged(&sys, dir, &tmp, name, fd.as_fd(), contents, before, clock_past),
            None => Ok(()),
        }
    });
    // Last chance to give up. A keep-write first retires an older previous,
    // durably (see `retire_previous`); marked until the commit fsync returned.
    let mut retired = Vec::new();
    let marked = staged
        .and_then(|()| opts.cancel.check(name))
        .and_then(|()| {
            if keep {
                retired = retire_previous(&sys, dir, name)?;
            }
            Ok(())
        })
        .and_then(|()| mark(&sys, dir, name));
    let new_mark = match marked {
        Ok(new) => new,
        Err(e) => {
            let _ = sys.unlink(dir, &tmp, &tmp);
            return Err(e);
        }
    };
    // One atomic step from the old file to the new one (NOREPLACE when new,
    // so a file created meanwhile by someone else is not clobbered).
    let renamed = if keep {
        // A keep-write exchanges instead: the old file stays, as the previous.
        sys.exchange(dir, &tmp, &tmp, dir, name, name).map_err(|e| unsupported_or(e, dir, true))
    } else {
        rename_into_place(&sys, dir, &tmp, name, exists)
    };
    if let Err(e) = renamed {
        let _ = sys.unlink(dir, &tmp, &tmp);
        // (Trash a keep-write retired is removed by the next recovery.)
        if new_mark {
            let _ = unmark(&sys, dir, name);
        }
        return Err(e);
    }
    // Commit point: the directory entry now naming the new inode is durable.
    committed(sys.fsync_dir(dir, ".", Step::FsyncParent), false)?;
    // Durable now: a repeat may trust what it reads back again.
    committed(unmark(&sys, dir, name), true)?;
    // Off the durability path; a keep-write's old file stays as the previous.
    if deferred {
        committed(remove_leftovers(&sys, dir, "."), true)?;
    } else {
        remove_retired(&sys, dir, &retired, opts)?;
    }
    Ok(Report { outcome: if exists { Outcome::Replaced } else { Outcome::Created }, written: 1, removed: 0 })
}

/// Rename the staged file `tmp` to `name`: over the old file when it
/// `exists`, else with NOREPLACE, so a file created meanwhile by someone
/// else is not clobbered.
fn rename_into_place(sys: &Sys<'_>, dir: BorrowedFd<'_>, tmp: &str, name: &str, exists: bool) -> Result<()> {
    match sys.rename(dir, tmp, tmp, name, name, exists) {
        // No renameat2 flags here (FUSE, some NFS): plain rename(2) is atomic
        // on every POSIX file system, and under the lock no durasync process
        // can have created `name` since it was found missing.
        Err(e) if !exists && flags_unsupported(&e) => sys.rename(dir, tmp, tmp, name, name, true),
        other => other,
    }
}

/// After a gate that exposed the staged file `tmp` (written through `fd`)
/// accepted it: refuse it unless `tmp` still has the stamp it had before
/// the gate (`before`: the same inode, ctime, mode, size) and holds exactly
/// `contents` — then it is what its fsync made durable. With `clock_past`
/// false equal ctimes prove nothing: it is fsynced again after the check,
/// before the rename (see `gate.rs`).
#[allow(clippy::too_many_arguments)]
fn recheck_staged(
    sys: &Sys<'_>,
    dir: BorrowedFd<'_>,
    tmp: &str,
    name: &str,
    fd: BorrowedFd<'_>,
    contents: &[u8],
    before: gate::Stamp,
    clock_past: bool,
) -> Result<()> {
    let what = match gate::Stamp::at(dir, tmp, tmp) {
        Err(_) => Some("the file is gone"),
        Ok(now) if now != before => Some("the file was changed"),
        Ok(_) if !file_holds(dir, tmp, tmp, contents)? => Some("its bytes differ"),
        Ok(_) => None,
    };
    if let Some(what) = what {
        return Err(gate::changed_after_check(name, what));
    }
    if clock_past {
        return Ok(());
    }
    sys.fsync_file(fd, tmp)
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

/// Whether the file `name` in `dir` has an owner or group other than a
/// fixed rule of the policy asks for (it is then rewritten, not unchanged).
fn owner_differs(opts: &Options<'_>, dir: BorrowedFd<'_>, name: &str) -> Result<bool> {
    if !matches!(opts.attrs.owner, attrs::IdRule::Id(_)) && !matches!(opts.attrs.group, attrs::IdRule::Id(_))
    {
        return Ok(false);
    }
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| Error::io(Step::Read, name, e))?;
    Ok(opts.attrs.owner_differs(st.st_uid, st.st_gid))
}
