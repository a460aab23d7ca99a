//! Dry runs: what each mutating call would do, worked out without changing
//! anything. The plugin gets the report it would have got; the operation
//! record lists the names that would be added, changed and removed.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::checks::stat_entry;
use super::error::{Error, Result};
use super::grant::Dir;
use super::operation::{Changes, Done, Ended};
use crate::durable::names::MAX_DEPTH;
use crate::durable::{self, Cancel, EntryKind, Options, Outcome, Plan, ReadLimits, Report, Tree};

/// The parent `rel` beneath `dir`, or `None` when some part is missing.
pub(crate) fn parent_if_exists(dir: BorrowedFd<'_>, rel: &str) -> Result<Option<OwnedFd>> {
    match durable::open_beneath(dir, rel) {
        Ok(fd) => Ok(Some(fd)),
        Err(durable::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(Error::from(e)),
    }
}

/// A `not-found` error unless something exists at `name`.
pub(crate) fn must_exist(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<()> {
    match stat_entry(dir, name)? {
        Some(_) => Ok(()),
        None => Err(Error::from(durable::Error::NotFound { path: path.to_owned() })),
    }
}

/// A sync of `tree` to `parent/name` beneath `dir`, under the session's
/// core options (`opts`: its deadline reaches the comparison too).
pub(crate) fn sync(
    dir: &Dir,
    parent: &str,
    name: &str,
    tree: &Tree,
    opts: &Options<'_>,
) -> Result<(Report, Changes)> {
    let plan = match parent_if_exists(dir.fd.as_fd(), parent)? {
        Some(pfd) => durable::plan_sync(pfd.as_fd(), name, tree, opts).map_err(Error::from)?,
        // Parents missing: everything would be created.
        None => Plan::creating(tree),
    };
    let report = if plan.is_unchanged() {
        Report { outcome: Outcome::Unchanged, written: 0, removed: 0 }
    } else {
        Report {
            outcome: if plan.exists { Outcome::Replaced } else { Outcome::Created },
            written: tree.file_count() as u32,
            removed: plan.removed_files(),
        }
    };
    Ok((report, Changes::from(plan)))
}

/// A write of `contents` with `mode` to `parent/name` (`path`) beneath `dir`.
pub(crate) fn write(
    dir: &Dir,
    parent: &str,
    name: &str,
    path: &str,
    contents: &[u8],
    mode: u32,
) -> Result<(Report, Changes)> {
    let existing = match parent_if_exists(dir.fd.as_fd(), parent)? {
        Some(pfd) => match stat_entry(pfd.as_fd(), name)? {
            Some((true, _)) => return Err(Error::from(durable::Error::NotAFile { path: path.to_owned() })),
            // Compared, not read: only a file of exactly the new size is
            // read, into a buffer of the plugin's own (bounded) size.
            Some((false, old_mode)) => {
                let same =
                    durable::diff::file_holds(pfd.as_fd(), name, path, contents).map_err(Error::from)?;
                Some((same, old_mode))
            }
            None => None,
        },
        None => None,
    };
    let mut changes = Changes::default();
    let outcome = match existing {
        None => {
            changes.added.push(name.to_owned());
            Outcome::Created
        }
        Some((same, old_mode)) if same && old_mode == mode => Outcome::Unchanged,
        Some(_) => {
            changes.changed.push(name.to_owned());
            Outcome::Replaced
        }
    };
    let written = u32::from(outcome != Outcome::Unchanged);
    Ok((Report { outcome, written, removed: 0 }, changes))
}

/// A removal of `name` in `parent` (`path` beneath `dir`).
pub(crate) fn remove(
    dir: &Dir,
    parent: BorrowedFd<'_>,
    name: &str,
    path: &str,
    cancel: &Cancel<'_>,
) -> Result<(Done, bool)> {
    Ok(match stat_entry(parent, name)? {
        None => (Done::just(Ended::Unchanged), false),
        Some((is_dir, _)) => {
            let removed = if is_dir { count_files(dir.fd.as_fd(), path, cancel)? } else { 1 };
            let shown = if is_dir { format!("{name}/") } else { name.to_owned() };
            let plan = Changes { removed: vec![shown], ..Changes::default() };
            (Done { outcome: Ended::Removed, written: 0, removed, bytes: 0, plan: Some(plan) }, true)
        }
    })
}

/// An exchange of `na` in `fa` with `nb` in `fb`: both must exist.
pub(crate) fn exchange(
    fa: BorrowedFd<'_>,
    na: &str,
    a: &str,
    fb: BorrowedFd<'_>,
    nb: &str,
    b: &str,
) -> Result<(Done, ())> {
    must_exist(fa, na, a)?;
    must_exist(fb, nb, b)?;
    let plan = Changes { changed: vec![a.to_owned(), b.to_owned()], ..Changes::default() };
    Ok((Done { plan: Some(plan), ..Done::just(Ended::Exchanged) }, ()))
}

/// Regular files beneath `rel` (a dry-run removal's count): iterative, no
/// deeper than a tree a plugin can have made, each listing bounded, and
/// stopped by the run's deadline.
fn count_files(dir: BorrowedFd<'_>, rel: &str, cancel: &Cancel<'_>) -> Result<u32> {
    let mut n = 0u32;
    let mut stack = vec![(rel.to_owned(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        let entries = match durable::list_dir(dir, &rel, &ReadLimits::default(), cancel) {
            Ok(entries) => entries,
            Err(durable::Error::InvalidPath { .. }) => continue,
            Err(e) => return Err(Error::from(e)),
        };
        for e in entries {
            match e.kind {
                EntryKind::Directory if depth < MAX_DEPTH => {
                    stack.push((format!("{rel}/{}", e.name), depth + 1))
                }
                EntryKind::Directory => {}
                _ => n = n.saturating_add(1),
            }
        }
    }
    Ok(n)
}
