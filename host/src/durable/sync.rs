//! Directory sync: make a directory hold exactly a [`Tree`], atomically and
//! durably, with N + D + 2 fsyncs for N files and D subdirectories.
//!
//! The sequence, top to bottom (each step's reason is written beside it):
//! validate → lock the parent → remove stale leftovers → compare (unchanged
//! and not marked unsynced: stop, nothing written) → build a sibling staging
//! tree (files written and fsynced in parallel, directories fsynced deepest
//! first) → mark the target unsynced → exchange it with the target
//! (`RENAME_EXCHANGE`, or `RENAME_NOREPLACE` for a new target) → fsync the
//! parent, the **commit point** → unmark → remove the old tree.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::Options;
use super::diff::{Plan, compare};
use super::error::{Error, Result, Step, committed, unsupported_or};
use super::lock::lock;
use super::marker::{is_marked, mark, unmark};
use super::names::{Leftover, check_name, leftover_name};
use super::parallel;
use super::recover::{remove_leftovers, remove_leftovers_or_defer, remove_tree};
use super::report::{Outcome, Report};
use super::resolve::open_beneath;
use super::sys::{Kind, Sys, join, kind_at, open_dir};
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

    // 2. Serialise with every other durasync process working in this parent.
    let _lock = lock(&sys, parent, ".")?;
    // Under the lock any leftover is stale: a crash's staging is never
    // swapped in. (After a failed commit, only once this one committed.)
    let deferred = remove_leftovers_or_defer(&sys, parent)?;

    let (exists, target_mode) = target_state(parent, name)?;
    // 3. Unchanged: no write, no fsync — unless the last change of this
    // target may not be durable (its commit fsync failed): what the page
    // cache shows then proves nothing, so it is rebuilt from fresh inodes.
    let plan = if exists {
        let target = open_dir(parent, name, name)?;
        compare(target.as_fd(), name, tree, false)?
    } else {
        Plan::default()
    };
    if plan.is_unchanged() && !is_marked(parent, name)? {
        return Ok(Report::unchanged());
    }

    // 4–5. Build and fsync the staging tree beside the target.
    let staging = leftover_name(Leftover::Stage);
    let stage_fd = sys.mkdir(parent, &staging, &staging, FILL_MODE)?;
    let staged = build_staging(&sys, stage_fd.as_fd(), &staging, target_mode, tree, opts)
        .and_then(|()| opts.cancel.check(name));
    if let Err(mut e) = staged {
        if let Error::Cancelled { path } = &mut e {
            name.clone_into(path);
        }
        discard(&sys, parent, &staging, stage_fd);
        return Err(e);
    }
    drop(stage_fd);
    // Marked before the swap, unmarked only once the commit fsync returned:
    // a failure in between leaves the mark for the retry, in any process.
    let new_mark = match mark(&sys, parent, name) {
        Ok(new) => new,
        Err(e) => {
            let _ = remove_tree(&sys, parent, &staging, &staging);
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
        let _ = remove_tree(&sys, parent, &staging, &staging);
        if new_mark {
            let _ = unmark(&sys, parent, name);
        }
        return Err(e);
    }

    // 7. Commit point: the parent's entries, and so the swap, reach the disk.
    committed(sys.fsync_dir(parent, ".", Step::FsyncParent), false)?;
    // Durable now: a repeat may trust what it reads back again.
    committed(unmark(&sys, parent, name), true)?;

    // 8. Off the durability path: the old tree now sits at the staging name.
    if deferred {
        committed(remove_leftovers(&sys, parent, "."), true)?;
    } else if exists {
        committed(remove_tree(&sys, parent, &staging, &staging).map(drop), true)?;
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
    compare(target.as_fd(), name, tree, true)
}

/// Whether the target exists (as a real directory) and its mode. A symlink
/// or a non-directory is refused: swapping would replace the link, not the
/// directory it names.
fn target_state(parent: BorrowedFd<'_>, name: &str) -> Result<(bool, u32)> {
    match kind_at(parent, name, name)? {
        (Kind::Dir, mode) => Ok((true, mode)),
        (Kind::Missing, _) => Ok((false, IMPLIED_DIR_MODE)),
        (Kind::Symlink, _) => Err(Error::Symlink { path: name.to_owned() }),
        _ => Err(Error::NotADirectory { path: name.to_owned() }),
    }
}

/// The mode staging directories have while they are filled: a tree's own
/// mode may deny its owner write access (`0o555`), which only root ignores.
const FILL_MODE: u32 = 0o700;

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

/// Create every directory and file of `tree` in the staging directory and
/// make all of it durable before it can be swapped in. `root_mode` is the
/// staging directory's final mode.
fn build_staging(
    sys: &Sys<'_>,
    stage: BorrowedFd<'_>,
    staging: &str,
    root_mode: u32,
    tree: &Tree,
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
        if let Node::File { contents, mode } = node {
            let (parent_rel, name) = path.rsplit_once('/').unwrap_or(("", path));
            jobs.push(FileJob { parent_rel, name, path: join(staging, path), contents, mode: *mode });
        }
    }
    write_files(sys, &dirs, &jobs, opts)?;

    // A directory's entries are durable only after fsync of that directory:
    // every new subdirectory, deepest first, then the staging root, all
    // before the swap can make them reachable from the target.
    // Each directory gets its exact mode once it is filled, before its fsync
    // makes that mode durable.
    let mut by_depth: Vec<(&str, u32)> = dirs.dirs.iter().map(|(p, (_, mode))| (*p, *mode)).collect();
    by_depth.sort_by_key(|(p, _)| (std::cmp::Reverse(p.matches('/').count()), *p));
    for (path, mode) in by_depth {
        let shown = join(staging, path);
        let fd = dirs.get(path)?;
        if mode != FILL_MODE {
            sys.chmod(fd.fd(), &shown, mode)?;
        }
        sys.fsync_dir(fd.fd(), &shown, Step::FsyncDir)?;
    }
    if root_mode != FILL_MODE {
        sys.chmod(stage, staging, root_mode)?;
    }
    sys.fsync_dir(stage, staging, Step::FsyncDir)
}

/// One file to create in the staging tree.
struct FileJob<'a> {
    parent_rel: &'a str,
    name: &'a str,
    path: String,
    contents: &'a [u8],
    mode: u32,
}

/// Write and fsync every file, `opts.threads` at a time: parallel fsyncs let
/// the block layer merge device flushes. Stops at the first error (or
/// cancellation, checked before each file) and returns it.
fn write_files(sys: &Sys<'_>, dirs: &StageDirs<'_>, jobs: &[FileJob<'_>], opts: &Options<'_>) -> Result<()> {
    parallel::try_for_each(jobs, opts.threads, |job| {
        opts.cancel.check(&job.path)?;
        write_one(sys, dirs.get(job.parent_rel)?.fd(), job)
    })
}

fn write_one(sys: &Sys<'_>, dir: BorrowedFd<'_>, job: &FileJob<'_>) -> Result<()> {
    let fd = sys.create(dir, job.name, &job.path)?;
    sys.write_all(fd.as_fd(), &job.path, job.contents)?;
    // fchmod, not the create mode: the umask must not change the bits.
    sys.chmod(&fd, &job.path, job.mode)?;
    // Data and mode durable before any directory names this file in the target.
    sys.fsync_file(fd.as_fd(), &job.path)
}

/// Remove a staging directory after a failure before the swap; errors are
/// ignored because the next sync's recovery removes it anyway.
fn discard(sys: &Sys<'_>, parent: BorrowedFd<'_>, staging: &str, fd: OwnedFd) {
    drop(fd);
    let _ = remove_tree(sys, parent, staging, staging);
}
