//! Directory sync: make a directory hold exactly a [`Tree`], atomically and
//! durably, with N + D + 2 fsyncs for N new or changed files and D
//! subdirectories (or, with the syncfs flush, one `syncfs` and one fsync),
//! and 2 fsyncs when exactly one file changed.
//!
//! The sequence, top to bottom (each step's reason is written beside it):
//! validate → lock the parent → remove stale leftovers → compare (unchanged
//! and not marked unsynced: stop, nothing written; one file changed: replace
//! it, see `replace_one.rs`) → build a sibling staging
//! tree (unchanged files carried by a hard link, new and changed files
//! written and fsynced in parallel, directories fsynced deepest first; or,
//! with the syncfs flush, all of it written and then one `syncfs`, see
//! `flush.rs`) →
//! (a keep-sync: retire an older previous, durably, see `previous.rs`) →
//! mark the target unsynced → exchange it with the target
//! (`RENAME_EXCHANGE`, or `RENAME_NOREPLACE` for a new target) → fsync the
//! parent, the **commit point** → unmark → remove the old tree (a
//! keep-sync keeps it as the target's previous).
//!
//! # Carrying unchanged files
//!
//! A file whose bytes and mode are unchanged is carried into the staging
//! tree by a hard link, not rewritten: see `staging.rs`.
//!
//! # Replacing one file
//!
//! See `replace_one.rs`: when exactly one file differs, that file alone
//! is replaced, with two fsyncs.

use std::os::fd::{AsFd, BorrowedFd};

use super::Options;
use super::attrs;
use super::cancel::Cancel;
use super::diff::{Carry, Plan, compare, compare_carrying};
use super::layout::{self, Layout};
use super::linked;
use super::replace_one::{one_changed_file, replace_one_file};

use super::error::{Error, Result, Step, committed, unsupported_or};
use super::flush::choose as choose_flush;
use super::gate;
use super::lock::lock;
use super::marker::{is_marked, mark, unmark};
use super::names::{Leftover, check_name, leftover_name};
use super::previous::{keep_staging, keeps, remove_retired, retire_previous};
use super::recover::{remove_committed_leftover, remove_leftovers, remove_leftovers_or_defer, remove_tree};
use super::report::{Outcome, Report};
use super::staging::{Carried, FILL_MODE, Generation, ask_gate, build_staging, discard};
use super::sys::{Kind, Sys, kind_at, open_dir};
use super::tree::{IMPLIED_DIR_MODE, Tree};

/// Make the directory `name` in `parent` hold exactly `tree`.
///
/// After a power loss at any instant, `name` holds exactly its old contents
/// or exactly `tree`; once this returns `Ok`, it holds `tree` durably. When
/// it already holds `tree` (names, bytes, modes), nothing is written or
/// fsynced and the outcome is [`Outcome::Unchanged`].
///
/// The target directory keeps its own mode when it exists and gets
/// [`IMPLIED_DIR_MODE`] when it is created. The parent must exist.
///
/// A target whose last change ended "committed, durability unknown" is
/// never answered unchanged: it is rebuilt from fresh inodes (see
/// `marker.rs`). `opts.cancel` is checked between staged files and before
/// the swap, never after it ([`Error::Cancelled`]: nothing changed).
///
/// Errors other than [`Error::Committed`] leave the target unchanged.
pub fn sync_dir(parent: BorrowedFd<'_>, name: &str, tree: &Tree, opts: &Options<'_>) -> Result<Report> {
    // 1. Validate everything before touching anything.
    check_name(name)?;
    tree.check_limits(&opts.limits)?;
    let sys = Sys::new(opts.probe);
    // A symlinked or wrong-kind target is refused before the lock file is
    // created, so a refused request leaves the parent exactly as it was.
    target_state(parent, name)?;
    // A target in the symlink layout stays in it (`layout.rs`).
    if opts.layout == Layout::Symlink || linked::is_linked(parent, name)? {
        return layout::sync_linked(parent, name, tree, opts);
    }

    // 2. Serialise with every other durasync process working in this parent.
    let _lock = lock(&sys, parent, ".")?;
    // Under the lock any leftover is stale: a crash's staging is never
    // swapped in. (After a failed commit, only once this one committed.)
    let deferred = remove_leftovers_or_defer(&sys, parent)?;

    let (exists, target_mode) = target_state(parent, name)?;
    // 3. Unchanged: no write, no fsync — unless the last change of this
    // target may not be durable (its commit fsync failed): what the page
    // cache shows then proves nothing, so it is rebuilt from fresh inodes
    // and nothing of it is carried.
    let marked = exists && is_marked(parent, name)?;
    let target = if exists { Some(open_dir(parent, name, name)?) } else { None };
    let (plan, carry) = match &target {
        None => (Plan::default(), Carry::new()),
        Some(t) if marked => (compare(t.as_fd(), name, tree, false, opts.attrs)?, Carry::new()),
        // One walk decides "unchanged" and learns which files may be carried.
        Some(t) => compare_carrying(t.as_fd(), name, tree, opts.attrs)?,
    };
    if plan.is_unchanged() && !marked {
        return Ok(Report::unchanged());
    }
    // 3b. Exactly one regular file differs: replace just that file (see the
    // module's "Replacing one file"). Not for a marked target (everything is
    // rewritten then), nor while leftovers wait for a failed call's retry,
    // nor when an unchanged file could not be carried (another link, another
    // owner): the full sequence would rewrite it, and so the result is
    // every file's inode is the one the full sequence would give it.
    // A keep-sync swaps whole trees: the old one becomes the previous.
    let keep = exists && keeps(opts);
    if !marked
        && !deferred
        && !keep
        // A gate is shown the complete staged tree, which this path has not.
        && opts.gate.is_none()
        && carry.len() + 1 == tree.file_count()
        && let (Some(t), Some(one)) = (&target, one_changed_file(&plan, tree))
        && let Some(report) = replace_one_file(&sys, parent, name, t.as_fd(), one, tree, opts)?
    {
        return Ok(report);
    }
    // A gate that hands the staged tree to a program (a validator) gets
    // fresh copies only: a carried file is a hard link to the live file,
    // and a write or chmod through it would change the live tree, also
    // when the change is then refused (see `gate.rs`).
    let exposed = opts.gate.is_some_and(|g| g.exposes_staged());
    let carried =
        target.as_ref().filter(|_| !exposed).map(|t| Carried { target: t.as_fd(), name, files: &carry });
    let carried_count = if carried.is_some() { carry.len() } else { 0 };

    // What each staged inode gets besides bytes and mode (owner, group,
    // label, carried attributes), read from the live target before anything
    // is created: a refusal here changes nothing (see `attrs.rs`).
    let attr_plan = attrs::plan_tree(opts.attrs, parent, name, target.as_ref().map(|t| t.as_fd()), tree)?;

    // 4–5. Build the staging tree beside the target and make it durable:
    // per-entry fsyncs or one syncfs, whichever the flush setting picks for
    // this batch and file system (`flush.rs`); decided before anything is
    // created, so a refused `--flush syncfs` changes nothing.
    let flush = choose_flush(opts.flush, parent, name, tree.file_count() - carried_count, opts.threads)?;
    tracing::debug!(target = name, syncfs = flush.syncfs, threads = flush.threads, why = %flush.why, "flush");
    let staging = match &target {
        // The keep name states the current target's inode, read before the
        // staging tree exists (see `previous.rs`): valid only once swapped.
        Some(t) if keep => {
            let ino = rustix::fs::fstat(t).map_err(|e| Error::io(Step::Read, name, e))?.st_ino;
            keep_staging(&sys, parent, name, ino)?
        }
        _ => leftover_name(Leftover::Stage),
    };
    let stage_fd = sys.mkdir(parent, &staging, &staging, FILL_MODE)?;
    let staged = build_staging(
        &sys,
        stage_fd.as_fd(),
        &staging,
        target_mode,
        tree,
        carried.as_ref(),
        &attr_plan,
        &flush,
        opts,
    )
    .and_then(|()| opts.cancel.check(name))
    // The gate sees the complete tree, already durable (after the
    // fsyncs or the syncfs above), before the mark and the swap: a
    // refusal is discarded like any failure before it.
    .and_then(|()| {
        if opts.gate.is_none() {
            return Ok(());
        }
        let plan = exists.then_some(&plan);
        // A marked target was compared only far enough to know it differs.
        let changed = gate::changed_paths(plan, !marked, tree);
        let staged = Generation { dir: parent, dir_path: ".", fd: stage_fd.as_fd(), name: &staging };
        ask_gate(&sys, parent, name, &staged, tree, plan, &changed, &flush, opts)
    });
    if let Err(mut e) = staged {
        if let Error::Cancelled { path } = &mut e {
            name.clone_into(path);
        }
        discard(&sys, parent, &staging, stage_fd);
        return Err(e);
    }
    drop(stage_fd);
    drop(target);
    // A keep-sync: an older previous leaves its keep name, durably, before
    // the swap makes the current tree the previous (see `retire_previous`).
    let retired = if keep { retire_previous(&sys, parent, name) } else { Ok(Vec::new()) };
    let retired = match retired {
        Ok(r) => r,
        Err(e) => {
            let _ = remove_tree(&sys, parent, &staging, &staging, &Cancel::NEVER);
            return Err(e);
        }
    };
    // Marked before the swap, unmarked only once the commit fsync returned:
    // a failure in between leaves the mark for the retry, in any process.
    let new_mark = match mark(&sys, parent, name) {
        Ok(new) => new,
        Err(e) => {
            let _ = remove_tree(&sys, parent, &staging, &staging, &Cancel::NEVER);
            return Err(e);
        }
    };

    // 6. The swap: one atomic step from the old tree to the new one.
    let swapped = if exists {
        sys.exchange(parent, &staging, &staging, parent, name, name)
    } else {
        // NOREPLACE: a target created meanwhile is never clobbered.
        sys.rename(parent, &staging, &staging, name, name, false)
    };
    if let Err(e) = swapped {
        let e = unsupported_or(e, parent, exists);
        let _ = remove_tree(&sys, parent, &staging, &staging, &Cancel::NEVER);
        if new_mark {
            let _ = unmark(&sys, parent, name);
        }
        return Err(e);
    }

    // 7. Commit point: the parent's entries, and so the swap, reach the disk.
    committed(sys.fsync_dir(parent, ".", Step::FsyncParent), false)?;
    // Durable now: a repeat may trust what it reads back again.
    committed(unmark(&sys, parent, name), true)?;

    // 8. Off the durability path: the old tree now sits at the staging name
    // (kept there by a keep-sync: it is the target's previous now).
    if deferred {
        committed(remove_leftovers(&sys, parent, "."), true)?;
    } else if keep {
        remove_retired(&sys, parent, &retired, opts)?;
    } else if exists {
        committed(remove_committed_leftover(&sys, parent, &staging, &opts.cancel).map(drop), true)?;
    }
    Ok(Report {
        outcome: if exists { Outcome::Replaced } else { Outcome::Created },
        written: tree.file_count() as u32,
        removed: plan.removed_files(),
    })
}

/// What a sync of `tree` into `name` would change, without changing
/// anything and without taking the lock (`durasync run --dry-run`).
pub fn plan_sync(parent: BorrowedFd<'_>, name: &str, tree: &Tree, opts: &Options<'_>) -> Result<Plan> {
    check_name(name)?;
    tree.check_limits(&opts.limits)?;
    let (exists, _) = target_state(parent, name)?;
    if !exists {
        return Ok(Plan::creating(tree));
    }
    let target = open_dir(parent, name, name)?;
    // In the symlink layout, what a reader sees: the current generation.
    if let Some(current) = linked::current_generation(target.as_fd(), name)? {
        return compare(current.as_fd(), name, tree, true, opts.attrs);
    }
    compare(target.as_fd(), name, tree, true, opts.attrs)
}

/// Whether the target exists (as a real directory) and its mode. A symlink
/// or a non-directory is refused: swapping would replace the link, not the
/// directory it names.
pub(super) fn target_state(parent: BorrowedFd<'_>, name: &str) -> Result<(bool, u32)> {
    match kind_at(parent, name, name)? {
        (Kind::Dir, mode) => Ok((true, mode)),
        (Kind::Missing, _) => Ok((false, IMPLIED_DIR_MODE)),
        (Kind::Symlink, _) => Err(Error::Symlink { path: name.to_owned() }),
        _ => Err(Error::NotADirectory { path: name.to_owned() }),
    }
}
