//! Directory sync: make a directory hold exactly a [`Tree`], atomically and
//! durably, with N + D + 2 fsyncs for N files and D subdirectories.
//!
//! The sequence, top to bottom (each step's reason is written beside it):
//! validate → lock the parent → remove stale leftovers → compare (unchanged:
//! stop, nothing written) → build a sibling staging tree (files written and
//! fsynced in parallel, directories fsynced deepest first) → exchange it with
//! the target (`RENAME_EXCHANGE`, or `RENAME_NOREPLACE` for a new target) →
//! fsync the parent, the **commit point** → remove the old tree.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::Options;
use super::error::{Error, Result, Step};
use super::names::{Leftover, check_name, leftover_name};
use super::parallel;
use super::recover::{remove_leftovers, remove_tree};
use super::report::{Outcome, Report};
use super::sys::{Kind, Sys, fs_name, join, kind_at, open_dir};
use super::tree::{IMPLIED_DIR_MODE, Node, Plan, Tree, compare};

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
    let _lock = sys.lock(parent, ".")?;
    // Under the lock any leftover is stale: a crash's staging is never swapped in.
    remove_leftovers(&sys, parent, ".")?;

    let (exists, target_mode) = target_state(parent, name)?;
    // 3. Unchanged: no write, no fsync.
    let plan = if exists {
        let target = open_dir(parent, name, name)?;
        compare(target.as_fd(), name, tree, false)?
    } else {
        Plan::default()
    };
    if plan.is_unchanged() {
        return Ok(Report::unchanged());
    }

    // 4–5. Build and fsync the staging tree beside the target.
    let staging = leftover_name(Leftover::Stage);
    let stage_fd = sys.mkdir(parent, &staging, &staging, FILL_MODE)?;
    if let Err(e) = build_staging(&sys, stage_fd.as_fd(), &staging, target_mode, tree, opts.threads) {
        discard(&sys, parent, &staging, stage_fd);
        return Err(e);
    }
    drop(stage_fd);

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
        return Err(e);
    }

    // 7. Commit point: the parent's entries, and so the swap, reach the disk.
    committed(sys.fsync_dir(parent, ".", Step::FsyncParent), false)?;

    // 8. Off the durability path: the old tree now sits at the staging name.
    if exists {
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

/// Create every directory and file of `tree` in the staging directory and
/// make all of it durable before it can be swapped in. `root_mode` is the
/// staging directory's final mode.
fn build_staging(
    sys: &Sys<'_>,
    stage: BorrowedFd<'_>,
    staging: &str,
    root_mode: u32,
    tree: &Tree,
    threads: usize,
) -> Result<()> {
    // Directories first; the tree's order puts every parent before its children.
    let mut dirs: HashMap<&str, (OwnedFd, u32)> = HashMap::new();
    let mut jobs = Vec::with_capacity(tree.file_count());
    for (path, node) in tree.iter() {
        let (parent_rel, name) = path.rsplit_once('/').unwrap_or(("", path));
        if let Node::Dir { mode, .. } = node {
            let parent_fd = if parent_rel.is_empty() { stage } else { dirs[parent_rel].0.as_fd() };
            let fd = sys.mkdir(parent_fd, name, &join(staging, path), FILL_MODE)?;
            dirs.insert(path, (fd, *mode));
        }
    }
    for (path, node) in tree.iter() {
        if let Node::File { contents, mode } = node {
            let (parent_rel, name) = path.rsplit_once('/').unwrap_or(("", path));
            let dir = if parent_rel.is_empty() { stage } else { dirs[parent_rel].0.as_fd() };
            jobs.push(FileJob { dir, name, path: join(staging, path), contents, mode: *mode });
        }
    }
    write_files(sys, &jobs, threads)?;

    // A directory's entries are durable only after fsync of that directory:
    // every new subdirectory, deepest first, then the staging root, all
    // before the swap can make them reachable from the target.
    // Each directory gets its exact mode once it is filled, before its fsync
    // makes that mode durable.
    let mut by_depth: Vec<(&str, &(OwnedFd, u32))> = dirs.iter().map(|(p, d)| (*p, d)).collect();
    by_depth.sort_by_key(|(p, _)| (std::cmp::Reverse(p.matches('/').count()), *p));
    for (path, (fd, mode)) in by_depth {
        let shown = join(staging, path);
        if *mode != FILL_MODE {
            sys.chmod(fd, &shown, *mode)?;
        }
        sys.fsync_dir(fd.as_fd(), &shown, Step::FsyncDir)?;
    }
    if root_mode != FILL_MODE {
        sys.chmod(stage, staging, root_mode)?;
    }
    sys.fsync_dir(stage, staging, Step::FsyncDir)
}

/// One file to create in the staging tree.
struct FileJob<'a> {
    dir: BorrowedFd<'a>,
    name: &'a str,
    path: String,
    contents: &'a [u8],
    mode: u32,
}

/// Write and fsync every file, `threads` at a time: parallel fsyncs let the
/// block layer merge device flushes. Stops at the first error and returns it.
fn write_files(sys: &Sys<'_>, jobs: &[FileJob<'_>], threads: usize) -> Result<()> {
    parallel::try_for_each(jobs, threads, |job| write_one(sys, job))
}

fn write_one(sys: &Sys<'_>, job: &FileJob<'_>) -> Result<()> {
    let fd = sys.create(job.dir, job.name, &job.path)?;
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

/// Map a failed swap to [`Error::Unsupported`] when the file system cannot
/// exchange or rename atomically; other errors pass through.
pub(crate) fn unsupported_or(e: Error, dir: BorrowedFd<'_>, exchange: bool) -> Error {
    let Error::Io { path, source, .. } = e else { return e };
    let op = match source.raw_os_error() {
        Some(code) if code == rustix::io::Errno::XDEV.raw_os_error() => "cross-device rename",
        Some(code)
            if [rustix::io::Errno::INVAL, rustix::io::Errno::NOSYS, rustix::io::Errno::OPNOTSUPP]
                .iter()
                .any(|e| e.raw_os_error() == code) =>
        {
            if exchange {
                "RENAME_EXCHANGE"
            } else {
                "RENAME_NOREPLACE"
            }
        }
        _ => {
            let step = if exchange { Step::Exchange } else { Step::Rename };
            return Error::Io { step, path, source };
        }
    };
    Error::Unsupported { path, fs: fs_name(dir), op, source }
}

/// Turn a failure after the swap into [`Error::Committed`].
pub(crate) fn committed<T>(r: Result<T>, durable: bool) -> Result<T> {
    r.map_err(|e| match e {
        Error::Io { step, path, source } => Error::Committed { durable, step, path, source },
        Error::Committed { .. } => e,
        other => Error::Committed {
            durable,
            step: Step::Remove,
            path: String::new(),
            source: std::io::Error::other(other.to_string()),
        },
    })
}
