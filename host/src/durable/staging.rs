//! Building a staging tree: every directory and file of a [`Tree`] created
//! beside a target (or, in the symlink layout, a new generation), with its
//! owner, label and attributes, and made durable — per-entry fsyncs or one
//! `syncfs` — before anything can make it reachable; unchanged files
//! carried from the target by a hard link; and the re-check of a staged
//! tree a gate's program was shown. Used by `sync.rs` and `layout.rs`.
//!
//! # Carrying unchanged files
//!
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

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType};

use super::Options;
use super::attrs;
use super::cancel::Cancel;
use super::diff::{Carry, compare};
use super::error::{Error, Result, Step};
use super::flush::Chosen;
use super::gate::{self, StagedKind};
use super::parallel;
use super::recover::remove_tree;
use super::resolve::open_beneath;
use super::source::Bytes;
use super::sys::{Kind, Sys, join, kind_of};
use super::tree::{Node, Tree};

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
fn stamp_staging(
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
fn recheck_staging(
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

/// A staging tree being built (a sync's, or a generation of the symlink
/// layout): `name` in `dir` (shown as `dir_path`, relative to the target's
/// parent), open as `fd`.
pub(super) struct Generation<'a> {
    pub(super) dir: BorrowedFd<'a>,
    pub(super) dir_path: &'a str,
    pub(super) fd: BorrowedFd<'a>,
    pub(super) name: &'a str,
}

/// The gate's word on a staging tree, complete and durable, before
/// anything can make it visible (the swap, the switch): it is shown as
/// staged at `dir_path/name` (below the target's parent); when the gate
/// exposes it to a program, every entry is stamped once complete and
/// durable (the clock then passes every stamp's ctime) and checked after
/// ([`recheck_staging`]): what was checked is what goes live, durably.
/// A refusal is discarded by the caller like any failure before the swap.
#[allow(clippy::too_many_arguments)]
pub(super) fn ask_gate(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    staged: &Generation<'_>,
    tree: &Tree,
    plan: Option<&super::diff::Plan>,
    changed: &[String],
    flush: &super::flush::Chosen,
    opts: &Options<'_>,
) -> Result<()> {
    let Some(g) = opts.gate else { return Ok(()) };
    let before = if g.exposes_staged() {
        Some(stamp_staging(staged.dir, staged.name, staged.fd, tree)?)
    } else {
        None
    };
    let clock_past = before.as_ref().is_some_and(|b| gate::wait_past(gate::Stamp::newest(b)));
    let shown = join(staged.dir_path, staged.name);
    gate::ask(Some(g), parent, name, &shown, StagedKind::Dir, tree.file_count() as u64, plan, changed)?;
    let Some(before) = before else { return Ok(()) };
    recheck_staging(sys, staged.dir, staged.fd, staged.name, name, tree, &before, clock_past, flush, opts)
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
