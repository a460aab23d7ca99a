//! Removing what a crash or a failed cleanup left behind: staging
//! directories, old trees, temporary files and trash, all named by
//! [`names::leftover_name`](super::names::leftover_name), and keep entries
//! that are not a valid previous (`previous.rs`: a keep-sync's staging
//! before its swap, the tree a revert replaced).
//!
//! Removal never follows a link: a symlink planted inside a leftover is
//! unlinked, never traversed, so recovery cannot be turned into "delete
//! anything the link points to".

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::Options;
use super::cancel::Cancel;
use rustix::fs::AtFlags;
use rustix::io::Errno;

use super::error::{Error, Result, Step};
use super::fsinfo::unlinks_wait_for_discards;
use super::linked::{current_name, read_link};
use super::lock::lock;
use super::marker::{any_marked, is_marked};
use super::names::{DATA_LINK, LOCK_NAME, entry_link, is_gen, is_leftover, is_reserved, parse_keep};
use super::parallel;
use super::sys::{Kind, Sys, join, kind_at, kind_of, open_dir};
use super::walk::{DirStack, Entry, list_own_names, read_entries};

/// Remove every durasync leftover in `dir` and, recursively, in its
/// subdirectories (never descending through links). Returns the removed
/// leftovers' paths relative to `dir`, in walk order.
///
/// Leftovers are removed only where durasync can have made them, never in
/// a target: every operation locks the directory it works in (creating a
/// lock file, [`LOCK_NAME`]) before it makes a leftover there, so a
/// directory beside a lock file may be a target, and so may everything
/// below it. Such a directory is walked but never changed, whatever its
/// entries are called, unless it holds a lock file itself; leftovers are
/// removed in `dir` itself, in every directory holding a lock file, and in
/// directories no lock file is above (a crash may persist a leftover
/// without its directory's new lock file).
///
/// Each directory that holds leftovers is locked while they are removed, so
/// an operation in progress in another process is never disturbed: under the
/// lock, any leftover is stale.
///
/// The walk is iterative (no recursion, open fds bounded by
/// `walk::FD_WINDOW`), so any depth and width is handled.
pub fn recover(dir: BorrowedFd<'_>, opts: &Options<'_>) -> Result<Vec<String>> {
    let sys = Sys::new(opts.probe);
    let mut removed = Vec::new();
    let mut stack = DirStack::new(dir, ".");
    // The subdirectories still to visit in each directory of the path, last
    // first, and whether they are at or below a possible target.
    let mut pending = vec![recover_one(&sys, &stack, Place::Top, &mut removed)?];
    while let Some((subdirs, below_lock)) = pending.last_mut() {
        let below_lock = *below_lock;
        match subdirs.pop() {
            Some(name) => {
                stack.push(&name)?;
                pending.push(recover_one(&sys, &stack, Place::Below { below_lock }, &mut removed)?);
            }
            None => {
                pending.pop();
                if !pending.is_empty() {
                    stack.pop()?;
                }
            }
        }
    }
    Ok(removed)
}

/// Where a directory of a recovery is.
#[derive(Clone, Copy)]
enum Place {
    /// The directory recovery was asked for.
    Top,
    /// Below it; `below_lock`: a lock file is in its parent or it is below
    /// such a directory (it may be a target or inside one).
    Below { below_lock: bool },
}

/// Remove the leftovers of the stack's current directory when durasync
/// may have made them there (see [`recover`]), and return its other
/// subdirectories, sorted last first, and whether they are below a lock.
fn recover_one(
    sys: &Sys<'_>,
    stack: &DirStack<'_>,
    place: Place,
    removed: &mut Vec<String>,
) -> Result<(Vec<String>, bool)> {
    let dir = stack.top();
    let path = stack.path();
    let names = list_own_names(dir, path)?;
    let has_lock = names.iter().any(|n| n == LOCK_NAME);
    let possibly_target = matches!(place, Place::Below { below_lock: true }) && !has_lock;
    // A stale keep entry (`previous.rs`) is a leftover too; a valid
    // previous is not, and alone it takes no lock (a recovery with nothing
    // to remove changes nothing).
    let stale = if possibly_target {
        false
    } else {
        (names.iter().any(|n| parse_keep(n).is_some()) && !stale_keeps(dir, &names)?.is_empty())
            || !layout_leftovers(dir, path, &names)?.is_empty()
    };
    if !possibly_target && (stale || names.iter().any(|n| is_leftover(n))) {
        let _lock = lock(sys, dir, path)?;
        removed.extend(remove_leftovers(sys, dir, path)?);
    }
    let mut subdirs = Vec::new();
    for name in names {
        // durasync's own: a leftover, the lock, a kept previous tree (walked
        // by nobody; its contents are the target's old ones, not leftovers).
        if is_leftover(&name) || name == LOCK_NAME || parse_keep(&name).is_some() {
            continue;
        }
        if kind_at(dir, &name, &stack.child_path(&name))?.0 == Kind::Dir {
            subdirs.push(name);
        }
    }
    subdirs.sort_unstable_by(|a, b| b.cmp(a));
    Ok((subdirs, has_lock || possibly_target))
}

/// Before an operation: remove the leftovers in `dir` (the caller holds
/// its lock), unless a target there is marked unsynced. Then a leftover may
/// be the tree that is still the target on disk (the failed commit's swap
/// may never reach it), so they are removed only after this operation's own
/// commit fsync; returns whether that is needed.
pub(crate) fn remove_leftovers_or_defer(sys: &Sys<'_>, dir: BorrowedFd<'_>) -> Result<bool> {
    if any_marked(dir)? {
        return Ok(true);
    }
    remove_leftovers(sys, dir, ".")?;
    Ok(false)
}

/// Remove the leftovers directly in `dir`. The caller holds `dir`'s lock.
/// Stale keep entries (a staging that never reached its swap, a tree a
/// revert replaced) are leftovers too; a valid previous is not (see
/// `previous.rs`).
pub(crate) fn remove_leftovers(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str) -> Result<Vec<String>> {
    // One listing for both kinds.
    let listed = list_own_names(dir, dir_path)?;
    let mut names = stale_keeps(dir, &listed)?;
    // In a directory in the symlink layout: older generations, dangling links.
    names.extend(layout_leftovers(dir, dir_path, &listed)?);
    names.extend(listed.into_iter().filter(|n| is_leftover(n)));
    names.sort();
    let mut removed = Vec::with_capacity(names.len());
    for name in names {
        let path = join(dir_path, &name);
        remove_tree(sys, dir, &name, &path, &Cancel::NEVER)?;
        removed.push(path);
    }
    Ok(removed)
}

/// Remove the entry `name` of `parent`, whatever it is; a directory with
/// everything beneath it. Links are unlinked, never followed. Returns how
/// many non-directories were removed.
///
/// Not durable on its own: nothing here is fsynced, because every caller
/// removes things that are already unreachable (an old tree after the
/// commit, a stale staging directory) and a crash merely leaves them for
/// the next recovery.
///
/// `cancel` is checked before each batch of names: a cancelled removal stops
/// with [`super::Error::Cancelled`] and leaves the rest of the tree (a
/// leftover by its name, which recovery removes later).
pub(crate) fn remove_tree(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    path: &str,
    cancel: &Cancel<'_>,
) -> Result<u32> {
    remove_tree_in(sys, parent, name, path, true, cancel, &AtomicU32::new(0))
}

/// [`remove_tree`] of what a committed operation left behind (the old tree
/// of a sync, the trash of a removal): off the durability path, so a
/// cancellation (the plugin's deadline) stops it without failing the
/// operation, which is committed and durable. The rest stays under its
/// leftover name until the next operation in the directory or `recover`.
/// Returns the files removed (those removed before a cancellation).
pub(crate) fn remove_committed_leftover(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    cancel: &Cancel<'_>,
) -> Result<u32> {
    let removed = AtomicU32::new(0);
    match remove_tree_in(sys, parent, name, name, true, cancel, &removed) {
        Err(super::Error::Cancelled { .. }) => Ok(removed.into_inner()),
        r => r,
    }
}

/// On a file system whose unlinks wait for the device (ext4 mounted with
/// `discard`, see [`unlinks_wait_for_discards`]), the first directory of a
/// removal with at least this many entries is emptied from several threads
/// (once per removal, so threads never multiply; below it everything is
/// sequential again): they overlap those waits. Elsewhere a removal is
/// sequential: threads would only take turns at the directory's lock (both
/// measured in BENCHMARKS.md, "Removal threads").
const PARALLEL_REMOVE_MIN: usize = 16;

/// How many names a removal reads from a directory before acting on them.
/// The directory is read again from its start for the next batch (what was
/// removed is gone from it), so no listing is kept across levels.
const REMOVE_BATCH: usize = 256;

fn remove_tree_in(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    path: &str,
    parallel: bool,
    cancel: &Cancel<'_>,
    removed: &AtomicU32,
) -> Result<u32> {
    cancel.check(path)?;
    let mode = match kind_at(parent, name, path)? {
        (Kind::Missing, _) => return Ok(0),
        (Kind::Dir, mode) => mode,
        (_, _) => {
            sys.unlink(parent, name, path)?;
            removed.fetch_add(1, Ordering::Relaxed);
            return Ok(1);
        }
    };
    let parent_path = match path.strip_suffix(name) {
        Some(p) if !p.is_empty() => p.trim_end_matches('/'),
        _ => ".",
    };
    let mut stack = DirStack::new(parent, parent_path);
    enter(sys, &mut stack, name, mode)?;
    let mut count = 0;
    // At most one directory of a removal is emptied from several threads.
    let mut may_split = parallel;
    loop {
        cancel.check(path)?;
        let batch = read_batch(sys, stack.top(), stack.path(), REMOVE_BATCH)?;
        if may_split && batch.len() >= PARALLEL_REMOVE_MIN {
            may_split = false;
            if unlinks_wait_for_discards(stack.top()) {
                let children = read_batch(sys, stack.top(), stack.path(), usize::MAX)?;
                count +=
                    remove_children_parallel(sys, stack.top(), stack.path(), &children, cancel, removed)?;
                continue;
            }
        }
        if batch.is_empty() {
            // Empty now: remove it from the level above, then go on there.
            let path = stack.path().to_owned();
            let dir_name = stack.pop()?;
            sys.rmdir(stack.top(), &dir_name, &path)?;
            if stack.depth() == 0 {
                return Ok(count);
            }
            continue;
        }
        for child in &batch {
            let child_path = stack.child_path(&child.name);
            if unlink_listed(sys, stack.top(), child, &child_path)? {
                removed.fetch_add(1, Ordering::Relaxed);
                count += 1;
                continue;
            }
            let child = &child.name;
            match kind_at(stack.top(), child, &child_path)? {
                (Kind::Missing, _) => {}
                (Kind::Dir, mode) => {
                    // Down first; the rest of this batch is read again later.
                    enter(sys, &mut stack, child, mode)?;
                    break;
                }
                (_, _) => {
                    sys.unlink(stack.top(), child, &child_path)?;
                    removed.fetch_add(1, Ordering::Relaxed);
                    count += 1;
                }
            }
        }
    }
}

/// Unlink `child` of `dir` right away when its listing says it is not a
/// directory, without a `statat` first: `Ok(true)` once it is unlinked,
/// `Ok(false)` when it is to be looked at instead (the listing gave a
/// directory or no kind, or it became a directory since, EISDIR, or is
/// gone, ENOENT).
fn unlink_listed(sys: &Sys<'_>, dir: BorrowedFd<'_>, child: &Entry, path: &str) -> Result<bool> {
    if !child.kind.is_some_and(|k| k != Kind::Dir) {
        return Ok(false);
    }
    match sys.unlink(dir, &child.name, path) {
        Ok(()) => Ok(true),
        Err(Error::Io { source, .. })
            if [Errno::ISDIR, Errno::NOENT]
                .iter()
                .any(|e| source.raw_os_error() == Some(e.raw_os_error())) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Enter the directory `name` (mode `mode`) of a removal, giving its owner
/// the access needed to empty it.
fn enter(sys: &Sys<'_>, stack: &mut DirStack<'_>, name: &str, mode: u32) -> Result<()> {
    stack.push(name)?;
    // A tree may hold directories that deny their owner write access
    // (`0o555`); only root could empty them as they are.
    if mode & 0o300 != 0o300 {
        sys.chmod(stack.top(), stack.path(), mode | 0o700)?;
    }
    Ok(())
}

/// Up to `max` entries of `dir`, a directory inside a leftover being removed.
/// An entry whose name is not UTF-8 (the rest of the core cannot name it)
/// is first renamed to a UTF-8 name, so recovery can remove any leftover,
/// whatever someone put inside it.
fn read_batch(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str, max: usize) -> Result<Vec<Entry>> {
    read_entries(dir, dir_path, max, &mut |raw| {
        let from_path = join(dir_path, &String::from_utf8_lossy(raw.to_bytes()));
        let hash = raw
            .to_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
        // Inside a leftover, under its directory's lock: nothing else
        // creates names here, so the first free one stays free.
        for i in 0u32.. {
            let to = format!("non-utf8-{hash:016x}-{i}");
            let to_path = join(dir_path, &to);
            if kind_at(dir, &to, &to_path)?.0 == Kind::Missing {
                sys.rename_raw(dir, raw, &from_path, &to, &to_path)?;
                return Ok(Some(to));
            }
        }
        unreachable!("u32 names ran out in one directory")
    })
}

/// Remove `children` of `dir` from [`super::DEFAULT_THREADS`] threads;
/// stops at the first error and returns it. Order does not matter: the
/// tree is already unreachable.
fn remove_children_parallel(
    sys: &Sys<'_>,
    dir: BorrowedFd<'_>,
    path: &str,
    children: &[Entry],
    cancel: &Cancel<'_>,
    removed: &AtomicU32,
) -> Result<u32> {
    let count = AtomicU32::new(0);
    parallel::try_for_each(children, super::DEFAULT_THREADS, |child| {
        let n = remove_tree_in(sys, dir, &child.name, &join(path, &child.name), false, cancel, removed)?;
        count.fetch_add(n, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(count.into_inner())
}

/// The kind of the keep entry `entry` of `parent` when it is a valid
/// previous: a directory or regular file whose inode is `ino`, the one its
/// name records (the inode rule of `names::keep_name`); `None` otherwise.
pub(crate) fn kept_kind(parent: BorrowedFd<'_>, entry: &str, ino: u64) -> Result<Option<Kind>> {
    let st = match rustix::fs::statat(parent, entry, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(Error::io(Step::Read, entry, e)),
    };
    let kind = kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _));
    Ok((matches!(kind, Kind::Dir | Kind::File) && st.st_ino == ino).then_some(kind))
}

/// The keep entries among `names` (durasync's own names in `dir`, as
/// [`list_own_names`] gives them, of any target) that are not a valid
/// previous: what leftover recovery removes beside the leftovers.
pub(crate) fn stale_keeps(dir: BorrowedFd<'_>, names: &[String]) -> Result<Vec<String>> {
    let mut stale = Vec::new();
    for entry in names {
        let Some(ino) = parse_keep(entry) else { continue };
        if kept_kind(dir, entry, ino)?.is_none() {
            stale.push(entry.clone());
        }
    }
    Ok(stale)
}

/// The entries recovery removes from a directory in the symlink layout
/// (`layout.rs`), given its
/// names (`list_own_names`): generation directories other than the current
/// one and the layout's links whose name the current generation lacks
/// (dangling: a reader sees no such name either way). Nothing when the
/// directory is not in the layout, is marked unsynced, or its
/// `.durasync-data` is not as the layout leaves it (then nothing of it is
/// judged). The caller holds the directory's lock.
fn layout_leftovers(dir: BorrowedFd<'_>, shown: &str, names: &[String]) -> Result<Vec<String>> {
    // Marked unsynced, the generation on disk may be an older one than
    // `.durasync-data` shows: nothing is judged until a change commits.
    if !names.iter().any(|n| n == DATA_LINK) || is_marked(dir, DATA_LINK)? {
        return Ok(Vec::new());
    }
    let Ok(Some(current)) = current_name(dir, shown) else { return Ok(Vec::new()) };
    let generation = open_dir(dir, &current, &join(shown, &current))?;
    let mut stale = Vec::new();
    for name in names {
        if is_gen(name) {
            if *name != current {
                stale.push(name.clone());
            }
            continue;
        }
        if is_reserved(name) {
            continue;
        }
        let path = join(shown, name);
        if read_link(dir, name, &path)?.as_deref() == Some(entry_link(name).as_str())
            && kind_at(generation.as_fd(), name, &path)?.0 == Kind::Missing
        {
            stale.push(name.clone());
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::durable::probe::NoProbe;
    use crate::durable::sys::open_dir;

    #[test]
    fn what_the_listing_says_is_a_file_is_unlinked_and_anything_else_is_left_to_look_at() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("file"), b"x").unwrap();
        std::fs::create_dir(tmp.path().join("now-a-dir")).unwrap();
        std::fs::create_dir(tmp.path().join("dir")).unwrap();
        let dir = open_dir(rustix::fs::CWD, tmp.path().to_str().unwrap(), "tmp").unwrap();
        let sys = Sys::new(&NoProbe);
        let listed = |name: &str, kind| Entry { name: name.to_owned(), kind };
        let unlink = |e: &Entry| unlink_listed(&sys, dir.as_fd(), e, &e.name).unwrap();
        assert!(unlink(&listed("file", Some(Kind::File))));
        assert!(!tmp.path().join("file").exists());
        // Listed as a file, a directory by the time it is unlinked: EISDIR.
        assert!(!unlink(&listed("now-a-dir", Some(Kind::File))));
        assert!(tmp.path().join("now-a-dir").is_dir());
        // Gone since it was listed: ENOENT.
        assert!(!unlink(&listed("gone", Some(Kind::Symlink))));
        // A directory, or no kind given: not even tried.
        assert!(!unlink(&listed("dir", Some(Kind::Dir))));
        std::fs::write(tmp.path().join("unknown"), b"x").unwrap();
        assert!(!unlink(&listed("unknown", None)));
        assert!(tmp.path().join("unknown").exists());
    }
}
