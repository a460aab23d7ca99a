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
//! A file of the target whose bytes and mode are exactly what the new tree
//! wants is not rewritten: the staging tree gets a second name for the same
//! inode (`linkat`), made durable by the fsync of the staging directory
//! that holds it, like every other entry. What this relies on, and the
//! choices made:
//!
//! - **Its data is not fsynced again.** It became durable when the sync
//!   that wrote it committed (its fsync preceded that commit). A target
//!   marked unsynced (its last commit fsync failed, "fsyncgate": what the
//!   page cache shows may not be what the disk holds) carries nothing and
//!   every file is rewritten into a fresh inode — conservative, since the
//!   failed call's own file fsyncs had succeeded, but it keeps one simple
//!   rule: nothing read from a marked target is trusted. A file
//!   another program wrote into the target in place without fsyncing it is
//!   outside the promise (other writers are not serialised, see docs/guarantees.md,
//!   "What is outside the promise"): durasync carries what it reads, it does not flush it.
//! - **Only inodes of the target itself**: a regular file with exactly one
//!   link (`st_nlink == 1`), owned by this process's user. An inode someone
//!   hard-linked elsewhere is rewritten, so a carried inode is only ever
//!   reachable from the old and the new tree; once the old tree is removed
//!   it has one link again. The link is checked after it is made (the
//!   name could have been replaced since it was compared): a different
//!   inode is unlinked from staging and the file written afresh.
//! - **The link count** is inode metadata. On a journaled file system (ext4
//!   with its journal, xfs, btrfs) it commits in the same transaction as the
//!   directory entry, so the staging fsync makes both durable. On ext4
//!   without a journal the directory fsync writes the entry but not the
//!   carried inode's count: after a power loss the count may be one too low
//!   until `e2fsck` (run at boot on a file system not cleanly unmounted)
//!   repairs it. The crash explorer models entries, not link counts.
//! - Mode-only changes get a fresh inode (a link shares the mode), and so
//!   does every file of a target created now.
//!
//! # Replacing one file
//!
//! See `replace_one.rs`: when exactly one file differs, that file alone
//! is replaced, with two fsyncs.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::Options;
use super::attrs;
use super::cancel::Cancel;
use super::diff::{Carry, Plan, compare, compare_carrying, same_tree};
use super::layout::{self, Layout};
use super::linked;
use super::replace_one::{one_changed_file, replace_one_file};
use rustix::fs::{AtFlags, FileType};

use super::error::{Error, Result, Step, committed, unsupported_or};
use super::flush::{Chosen, choose as choose_flush};
use super::gate::{self, StagedKind};
use super::lock::lock;
use super::marker::{is_marked, mark, unmark};
use super::names::{Leftover, check_name, leftover_name};
use super::parallel;
use super::previous::{keep_staging, keeps, remove_retired, retire_previous};
use super::recover::{remove_committed_leftover, remove_leftovers, remove_leftovers_or_defer, remove_tree};
use super::report::{Outcome, Report};
use super::resolve::open_beneath;
use super::source::Bytes;
use super::sys::{Kind, Sys, join, kind_at, kind_of, open_dir};
use super::tree::{IMPLIED_DIR_MODE, Node, Tree};

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
        let Some(g) = opts.gate else { return Ok(()) };
        let plan = exists.then_some(&plan);
        // A marked target was compared only far enough to know it differs.
        let changed = gate::changed_paths(plan, !marked, tree);
        let files = tree.file_count() as u64;
        // Stamped once complete and durable, before anything else
        // can see it; the clock then passes every stamp's ctime.
        let before =
            if exposed { Some(stamp_staging(parent, &staging, stage_fd.as_fd(), tree)?) } else { None };
        let clock_past = before.as_ref().is_some_and(|b| gate::wait_past(gate::Stamp::newest(b)));
        gate::ask(Some(g), parent, name, &staging, StagedKind::Dir, files, plan, &changed)?;
        let Some(before) = before else { return Ok(()) };
        // What was checked is what goes live, durably: the staged
        // tree, once the gate's program is done with it, must be
        // untouched since it was made durable — checked before the
        // mark and the swap.
        recheck_staging(
            &sys,
            parent,
            stage_fd.as_fd(),
            &staging,
            name,
            tree,
            &before,
            clock_past,
            &flush,
            opts,
        )
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

/// The unchanged answer of [`sync_dir`] for the tree of the directory
/// `src_name` in `src_parent` (`durasync sync --from`), found without
/// reading that tree into memory: `Some` when the target already holds it
/// durably, `None` when that is not shown (the caller then reads the source
/// with [`read_tree`](super::read_tree) and calls [`sync_dir`], which
/// names any problem). Never an error: any doubt is `None`.
///
/// The comparison runs before the lock, so a source that would be refused
/// changes nothing, as with [`sync_dir`]. It is then confirmed under the
/// lock, where [`sync_dir`] would decide: leftovers are handled the same
/// way, the target must not be marked unsynced, and the directory at `name`
/// must still be the one compared (same device and inode). Any swap since
/// gave `name` another inode; an unsynced mark means what was read may not
/// be durable. A sync that replaced one file of the target after it was
/// read leaves the inode in place: that sync is then simply the later of
/// the two, each atomic, and the answer stays true of the moment it was
/// read, which is when this call takes effect.
pub fn sync_dir_unchanged_from(
    parent: BorrowedFd<'_>,
    name: &str,
    src_parent: BorrowedFd<'_>,
    src_name: &str,
    src_path: &str,
    opts: &Options<'_>,
) -> Option<Report> {
    let unchanged = || -> Result<bool> {
        check_name(name)?;
        // The side-by-side walk compares bytes and modes, not owners: a
        // fixed owner or group is checked by `sync_dir`'s own compare.
        if [opts.attrs.owner, opts.attrs.group].iter().any(|r| matches!(r, attrs::IdRule::Id(_))) {
            return Ok(false);
        }
        if !target_state(parent, name)?.0 || kind_at(src_parent, src_name, src_path)?.0 != Kind::Dir {
            return Ok(false);
        }
        let target = open_dir(parent, name, name)?;
        // In the symlink layout, what a reader sees: the current generation
        // (`layout.rs`); a target there that is not settled takes the full path.
        let generation = if linked::is_linked(parent, name)? {
            match layout::settled_generation(target.as_fd(), name)? {
                Some(found) => Some(found),
                None => return Ok(false),
            }
        } else {
            None
        };
        let compared_dir = generation.as_ref().map_or(target.as_fd(), |(_, fd)| fd.as_fd());
        let src = open_dir(src_parent, src_name, src_path)?;
        if !same_tree(src.as_fd(), src_path, compared_dir, name, &opts.limits) {
            return Ok(false);
        }
        let compared = rustix::fs::fstat(&target).map_err(|e| Error::io(Step::Read, name, e))?;
        let sys = Sys::new(opts.probe);
        let _lock = lock(&sys, parent, ".")?;
        remove_leftovers_or_defer(&sys, parent)?;
        let now = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| Error::io(Step::Read, name, e))?;
        // In the layout a change switches generations under this lock: the
        // one compared must still be the current one, and not marked.
        if let Some((current, _)) = &generation {
            let still = linked::current_of(target.as_fd(), name).as_ref() == Some(current);
            return Ok(still
                && (now.st_dev, now.st_ino) == (compared.st_dev, compared.st_ino)
                && layout::settled_generation(target.as_fd(), name)?.is_some());
        }
        Ok((now.st_dev, now.st_ino) == (compared.st_dev, compared.st_ino) && !is_marked(parent, name)?)
    };
    match unchanged() {
        Ok(true) => Some(Report::unchanged()),
        Ok(false) => None,
        Err(e) => {
            tracing::debug!(target = name, error = %e, "the unchanged check without reading the source gave up");
            None
        }
    }
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

/// The mode staging directories have while they are filled: a tree's own
/// mode may deny its owner write access (`0o555`), which only root ignores.
pub(super) const FILL_MODE: u32 = 0o700;

/// A staging tree with at most this many directories keeps their fds open
/// while it is filled; a bigger one reopens a directory (one `openat2`
/// beneath the staging root) each time it needs it, so the fds a sync holds
/// never grow with the tree (`RLIMIT_NOFILE` is 1024 by default).
const HELD_DIR_FDS: usize = 128;

/// The subdirectories of a staging tree, by relative path: their final
/// mode and, for small trees, their open fd.
struct StageDirs<'a> {
    stage: BorrowedFd<'a>,
    dirs: HashMap<&'a str, (Option<OwnedFd>, u32)>,
    hold: bool,
}

/// A directory fd, borrowed from [`StageDirs`] or opened for one use.
enum DirFd<'a> {
    Held(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl DirFd<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Held(fd) => *fd,
            DirFd::Opened(fd) => fd.as_fd(),
        }
    }
}

impl<'a> StageDirs<'a> {
    /// The directory at `rel` beneath the staging root (`""`: the root).
    fn get(&self, rel: &str) -> Result<DirFd<'_>> {
        if rel.is_empty() {
            return Ok(DirFd::Held(self.stage));
        }
        match &self.dirs[rel].0 {
            Some(fd) => Ok(DirFd::Held(fd.as_fd())),
            None => open_beneath(self.stage, rel).map(DirFd::Opened),
        }
    }
}

/// The files of the current target that a staging tree carries.
pub(super) struct Carried<'a> {
    /// The target directory, open since it was compared.
    pub(super) target: BorrowedFd<'a>,
    /// Its name in the parent (for probes and messages).
    pub(super) name: &'a str,
    /// Carryable files by relative path, with the inode compared.
    pub(super) files: &'a Carry,
}

/// Create every directory and file of `tree` in the staging directory and
/// make all of it durable before it can be swapped in, as `flush` says:
/// per-entry fsyncs, or one syncfs through `stage` (opened before the first
/// write, so it reports every write-back error of the batch). `root_mode` is
/// the staging directory's final mode; files in `carried` are linked, not
/// written.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_staging(
    sys: &Sys<'_>,
    stage: BorrowedFd<'_>,
    staging: &str,
    root_mode: u32,
    tree: &Tree,
    carried: Option<&Carried<'_>>,
    attr_plan: &attrs::TreePlan,
    flush: &Chosen,
    opts: &Options<'_>,
) -> Result<()> {
    // Directories first; the tree's order puts every parent before its children.
    let mut dirs = StageDirs { stage, dirs: HashMap::new(), hold: tree.dir_count() <= HELD_DIR_FDS };
    for (path, node) in tree.iter() {
        let (parent_rel, name) = path.rsplit_once('/').unwrap_or(("", path));
        if let Node::Dir { mode, .. } = node {
            let fd = sys.mkdir(dirs.get(parent_rel)?.fd(), name, &join(staging, path), FILL_MODE)?;
            let held = if dirs.hold { Some(fd) } else { None };
            dirs.dirs.insert(path, (held, *mode));
        }
    }
    let mut jobs = Vec::with_capacity(tree.file_count());
    for (path, node) in tree.iter() {
        if let Some((contents, mode)) = tree.file(node) {
            let (parent_rel, name) = path.rsplit_once('/').unwrap_or(("", path));
            let carry = carried.and_then(|c| c.files.get(path).map(|ino| (c, *ino)));
            let attrs = attr_plan.get(path);
            jobs.push(FileJob {
                parent_rel,
                name,
                path: join(staging, path),
                rel: path,
                contents,
                mode,
                carry,
                attrs,
            });
        }
    }
    write_files(sys, &dirs, &jobs, !flush.syncfs, flush.threads, opts)?;

    // A directory's entries are durable only after fsync of that directory:
    // every new subdirectory, deepest first, then the staging root, all
    // before the swap can make them reachable from the target. That fsync is
    // also what makes a carried file's new name durable.
    // Each directory gets its owner, label and attributes and then its exact
    // mode once it is filled, before its fsync (or the syncfs below) makes
    // them durable (after filling: a carried default ACL must not reach
    // the entries staged inside it).
    let mut by_depth: Vec<(&str, u32)> = dirs.dirs.iter().map(|(p, (_, mode))| (*p, *mode)).collect();
    by_depth.sort_by_key(|(p, _)| (std::cmp::Reverse(p.matches('/').count()), *p));
    for (path, mode) in by_depth {
        let shown = join(staging, path);
        let fd = dirs.get(path)?;
        if let Some(planned) = attr_plan.get(path) {
            attrs::apply(sys, fd.fd(), &shown, planned)?;
        }
        if mode != FILL_MODE {
            sys.chmod(fd.fd(), &shown, mode)?;
        }
        if !flush.syncfs {
            sys.fsync_dir(fd.fd(), &shown, Step::FsyncDir)?;
        }
    }
    attrs::apply(sys, stage, staging, &attr_plan.root)?;
    if root_mode != FILL_MODE {
        sys.chmod(stage, staging, root_mode)?;
    }
    if flush.syncfs {
        // Every file's data and mode, every directory's entries and mode of
        // the staging tree (a carried file's new name too) durable in one
        // step, after the last of them was written and before the swap can
        // make any of them reachable from the target. Its error is the
        // batch's: the caller discards the staging tree, nothing changed.
        return sys.syncfs(stage, staging);
    }
    sys.fsync_dir(stage, staging, Step::FsyncDir)
}

/// The [`gate::Stamp`] of the staging directory `staging` (by its name in
/// `parent`) and of every path of `tree` beneath it (`stage`), in order.
pub(super) fn stamp_staging(
    parent: BorrowedFd<'_>,
    staging: &str,
    stage: BorrowedFd<'_>,
    tree: &Tree,
) -> Result<Vec<gate::Stamp>> {
    let mut out = Vec::with_capacity(tree.len() + 1);
    out.push(gate::Stamp::at(parent, staging, staging)?);
    for (path, _) in tree.iter() {
        out.push(gate::Stamp::at(stage, path, &join(staging, path))?);
    }
    Ok(out)
}

/// After a gate that exposed the staging tree accepted it: refuse it
/// unless every entry has the stamp it had before the gate (`before`) and
/// it holds exactly `tree` (names, kinds, modes, bytes: a second proof that
/// costs reads of the page cache only). Unchanged, it is what the staging's
/// fsyncs made durable. With `clock_past` false equal ctimes prove
/// nothing, so it is made durable again, as `flush` says, after the check.
#[allow(clippy::too_many_arguments)]
pub(super) fn recheck_staging(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    stage: BorrowedFd<'_>,
    staging: &str,
    target: &str,
    tree: &Tree,
    before: &[gate::Stamp],
    clock_past: bool,
    flush: &Chosen,
    opts: &Options<'_>,
) -> Result<()> {
    let paths = std::iter::once("").chain(tree.iter().map(|(p, _)| p));
    let after = match stamp_staging(parent, staging, stage, tree) {
        Ok(after) => after,
        Err(Error::Io { path, .. }) => {
            return Err(gate::changed_after_check(target, &format!("{path} is gone")));
        }
        Err(e) => return Err(e),
    };
    if let Some((path, _)) = paths.zip(before.iter().zip(&after)).find(|(_, (b, a))| b != a) {
        let path = if path.is_empty() { "the staged directory" } else { path };
        return Err(gate::changed_after_check(target, &format!("{path} was changed")));
    }
    let plan = compare(stage, staging, tree, false, opts.attrs)?;
    if !plan.is_unchanged() {
        let first = plan.added.iter().chain(&plan.changed).chain(&plan.removed).next();
        return Err(gate::changed_after_check(target, &format!("{} differs", first.map_or("it", |p| p))));
    }
    if clock_past {
        return Ok(());
    }
    if flush.syncfs {
        return sys.syncfs(stage, staging);
    }
    let mut dirs: Vec<&str> = Vec::new();
    for (path, node) in tree.iter() {
        let shown = join(staging, path);
        match node {
            Node::Dir { .. } => dirs.push(path),
            Node::File { .. } | Node::Source { .. } => {
                let fd = match path.rsplit_once('/') {
                    Some((dir, file)) => {
                        super::sys::open_file(open_beneath(stage, dir)?.as_fd(), file, &shown)?
                    }
                    None => super::sys::open_file(stage, path, &shown)?,
                };
                sys.fsync_file(fd.as_fd(), &shown)?;
            }
        }
    }
    dirs.sort_by_key(|p| (std::cmp::Reverse(p.matches('/').count()), *p));
    for path in dirs {
        let shown = join(staging, path);
        let fd = open_beneath(stage, path)?;
        sys.fsync_dir(fd.as_fd(), &shown, Step::FsyncDir)?;
    }
    sys.fsync_dir(stage, staging, Step::FsyncDir)
}

/// One file to create in the staging tree.
struct FileJob<'a> {
    parent_rel: &'a str,
    name: &'a str,
    path: String,
    /// Its path in the tree.
    rel: &'a str,
    contents: Bytes<'a>,
    mode: u32,
    /// The target to carry it from and the inode compared there.
    carry: Option<(&'a Carried<'a>, u64)>,
    /// Its owner, label and attributes, when it gets any.
    attrs: Option<&'a attrs::Planned>,
}

/// Write (and with `fsync`, fsync) every file, `threads` at a time:
/// parallel fsyncs let the block layer merge device flushes. Stops at the
/// first error (or cancellation, checked before each file) and returns it.
fn write_files(
    sys: &Sys<'_>,
    dirs: &StageDirs<'_>,
    jobs: &[FileJob<'_>],
    fsync: bool,
    threads: usize,
    opts: &Options<'_>,
) -> Result<()> {
    parallel::try_for_each(jobs, threads, |job| {
        opts.cancel.check(&job.path)?;
        let dir = dirs.get(job.parent_rel)?;
        match job.carry {
            Some((carried, ino)) => carry_one(sys, dir.fd(), carried, ino, job, fsync),
            None => write_one(sys, dir.fd(), job, fsync),
        }
    })
}

/// Link an unchanged file of the target into the staging tree. No fsync of
/// the file: its data and mode were made durable by the sync that wrote it
/// (see the module's "Carrying unchanged files"); the staging directory's
/// fsync makes the new name durable.
fn carry_one(
    sys: &Sys<'_>,
    dir: BorrowedFd<'_>,
    carried: &Carried<'_>,
    ino: u64,
    job: &FileJob<'_>,
    fsync: bool,
) -> Result<()> {
    let rel = join(job.parent_rel, job.name);
    let from_path = join(carried.name, &rel);
    let from_dir = if job.parent_rel.is_empty() {
        DirFd::Held(carried.target)
    } else {
        DirFd::Opened(open_beneath(carried.target, job.parent_rel)?)
    };
    match sys.link(from_dir.fd(), job.name, &from_path, dir, job.name, &job.path) {
        Ok(()) => {}
        // Carrying only saves a write. Where the kernel refuses the link (a
        // mount inside the target: EXDEV; an immutable or append-only file:
        // EPERM; a file at its link limit: EMLINK), nothing was created, and
        // the file is written afresh with the sequence of any changed file.
        Err(Error::Io { source, .. }) if link_refused(&source) => return write_one(sys, dir, job, fsync),
        Err(e) => return Err(e),
    }
    // Compared and linked in two steps: only the very inode whose bytes were
    // compared may be carried; anything else that took its name meanwhile
    // (a link is linked itself, never followed) leaves and is written afresh.
    let st = rustix::fs::statat(dir, job.name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| Error::io(Step::Link, &job.path, e))?;
    let is_file = kind_of(FileType::from_raw_mode(st.st_mode as _)) == Kind::File;
    if is_file && st.st_ino == ino {
        return Ok(());
    }
    sys.unlink(dir, job.name, &job.path)?;
    write_one(sys, dir, job, fsync)
}

/// Whether a failed `linkat` means this file cannot be carried (rather than
/// that the staging tree cannot be written).
fn link_refused(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    [Errno::XDEV, Errno::PERM, Errno::MLINK].iter().any(|n| e.raw_os_error() == Some(n.raw_os_error()))
}

/// Create one file, write it, set its mode and, with `fsync`, fsync it
/// (without, the staging tree's one syncfs makes it durable later).
fn write_one(sys: &Sys<'_>, dir: BorrowedFd<'_>, job: &FileJob<'_>, fsync: bool) -> Result<()> {
    let fd = sys.create(dir, job.name, &job.path)?;
    job.contents.write_to(sys, fd.as_fd(), &job.path, job.rel)?;
    // Owner, label and attributes before the mode (see `attrs.rs`) and
    // before the fsync below (or the staging tree's syncfs) makes them durable.
    if let Some(planned) = job.attrs {
        attrs::apply(sys, fd.as_fd(), &job.path, planned)?;
    }
    // fchmod, not the create mode: the umask must not change the bits.
    sys.chmod(&fd, &job.path, job.mode)?;
    if !fsync {
        return Ok(());
    }
    // Data and mode durable before any directory names this file in the target.
    sys.fsync_file(fd.as_fd(), &job.path)
}

/// Remove a staging directory after a failure before the swap; errors are
/// ignored because the next sync's recovery removes it anyway.
pub(super) fn discard(sys: &Sys<'_>, parent: BorrowedFd<'_>, staging: &str, fd: OwnedFd) {
    drop(fd);
    let _ = remove_tree(sys, parent, staging, staging, &Cancel::NEVER);
}
