//! Replacing one file: the fast path of a sync whose new tree differs from
//! the target by exactly one regular file.
//!
//! The commonest rotation changes one file. When the comparison finds that
//! exactly one regular file differs (bytes and/or mode), no name is added or
//! removed, no directory's mode changes and the target is not marked
//! unsynced, the new tree differs from the old by that file alone, so
//! replacing that file atomically is an atomic old-or-new of the whole tree.
//! No staging tree, no link, no removal of an old tree: a temporary file
//! beside the target (in the parent, so a crash never leaves an extra entry
//! in the target), written, `fchmod`, fsynced → mark → plain `renameat`
//! over the file inside the target → fsync of the directory holding it,
//! the **commit point** → unmark. Two fsyncs. A crash after the rename may
//! bring the temporary name back in the parent as a second name of the new
//! inode; recovery removes it (on ext4 without a journal the link count is
//! repaired by `e2fsck` first, as for a carried file). While another
//! target of the parent waits for its retry (leftovers deferred), the full
//! sequence runs instead, and so it does when an unchanged file could not
//! be carried (another link or owner: the full sequence rewrites it), so
//! every file of the result is the inode the full sequence would give it
//! (directories keep theirs: they are not recreated).

use std::os::fd::{AsFd, BorrowedFd};

use super::Options;
use super::attrs;
use super::diff::Plan;
use super::error::{Error, Result, Step, committed};
use super::marker::{mark, unmark};
use super::names::{Leftover, leftover_name};
use super::report::{Outcome, Report};
use super::resolve::open_beneath;
use super::source::Bytes;
use super::sys::{Kind, Sys, join, kind_at};
use super::tree::Tree;

/// The one file to replace, with its new bytes and mode.
pub(super) struct OneFile<'t> {
    rel: &'t str,
    contents: Bytes<'t>,
    mode: u32,
}

/// The file to replace when the new tree differs from the target by
/// exactly one regular file's bytes and/or mode: no name added or removed,
/// no directory's mode changed (a changed directory is listed with a `/`).
pub(super) fn one_changed_file<'t>(plan: &Plan, tree: &'t Tree) -> Option<OneFile<'t>> {
    let [rel] = plan.changed.as_slice() else { return None };
    if !plan.added.is_empty() || !plan.removed.is_empty() {
        return None;
    }
    let (rel, node) = tree.get_key_value(rel)?;
    let (contents, mode) = tree.file(node)?;
    Some(OneFile { rel, contents, mode })
}

/// Replace the one changed file of the target in place: temporary file
/// beside the target, fsync, mark, rename over the file, fsync the
/// directory holding it (the commit point), unmark. `Ok(None)`: not taken
/// (what is there is no regular file, or the rename would cross a mount),
/// nothing changed, the caller runs the full sequence.
pub(super) fn replace_one_file(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    target: BorrowedFd<'_>,
    one: OneFile<'_>,
    tree: &Tree,
    opts: &Options<'_>,
) -> Result<Option<Report>> {
    let (dir_rel, file) = one.rel.rsplit_once('/').unwrap_or(("", one.rel));
    let opened;
    let dir = if dir_rel.is_empty() {
        target
    } else {
        opened = open_beneath(target, dir_rel)?;
        opened.as_fd()
    };
    let dir_path = if dir_rel.is_empty() { name.to_owned() } else { join(name, dir_rel) };
    let path = join(name, one.rel);
    // Only a regular file is replaced this way (an empty directory where a
    // file is wanted also differs by one name): a rename could not replace it.
    if kind_at(dir, file, &path)?.0 != Kind::File {
        return Ok(None);
    }

    // In the parent, never in the target: a crash must not leave an extra
    // entry in the target, and recovery removes leftovers beside it.
    // What the new inode gets besides bytes and mode: read from the file it
    // replaces before anything is created (see `attrs.rs`).
    let planned = attrs::plan_file(opts.attrs, dir, file, &path)?;
    let tmp = leftover_name(Leftover::Tmp);
    let staged = (|| {
        let fd = sys.create(parent, &tmp, &tmp)?;
        one.contents.write_to(sys, fd.as_fd(), &tmp, one.rel)?;
        // Owner, label and attributes before the mode and the fsync.
        attrs::apply(sys, fd.as_fd(), &tmp, &planned)?;
        // fchmod, not the create mode: the umask must not change the bits.
        sys.chmod(&fd, &tmp, one.mode)?;
        // Data and mode durable before the rename can make them the target's.
        sys.fsync_file(fd.as_fd(), &tmp)
    })();
    // Last chance to give up; marked before the rename, unmarked only once
    // the commit fsync returned, so a failed commit is retried in full.
    let marked = staged.and_then(|()| opts.cancel.check(name)).and_then(|()| mark(sys, parent, name));
    let new_mark = match marked {
        Ok(new) => new,
        Err(e) => {
            let _ = sys.unlink(parent, &tmp, &tmp);
            return Err(e);
        }
    };
    // The swap: one atomic step from the old file, and so the old tree, to
    // the new one (plain rename replaces; the same file system by construction).
    if let Err(e) = sys.replace_into(parent, &tmp, &tmp, dir, file, &path) {
        let _ = sys.unlink(parent, &tmp, &tmp);
        if new_mark {
            let _ = unmark(sys, parent, name);
        }
        let xdev = rustix::io::Errno::XDEV.raw_os_error();
        return match e {
            // A mount point inside the target: the full sequence works there.
            Error::Io { source, .. } if source.raw_os_error() == Some(xdev) => Ok(None),
            e => Err(e),
        };
    }
    // Commit point: the directory holding the file names the new inode on
    // disk. The parent is not fsynced: a crash may bring the temporary name
    // back as a second name of the new inode, a leftover recovery removes.
    committed(sys.fsync_dir(dir, &dir_path, Step::FsyncDir), false)?;
    // Durable now: a repeat may trust what it reads back again.
    committed(unmark(sys, parent, name), true)?;
    Ok(Some(Report { outcome: Outcome::Replaced, written: tree.file_count() as u32, removed: 0 }))
}
