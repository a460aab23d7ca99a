//! Removing what a crash or a failed cleanup left behind: staging
//! directories, old trees, temporary files and trash, all named by
//! [`names::leftover_name`](super::names::leftover_name).
//!
//! Removal never follows a link: a symlink planted inside a leftover is
//! unlinked, never traversed, so recovery cannot be turned into "delete
//! anything the link points to".

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::Options;
use super::error::Result;
use super::names::is_leftover;
use super::parallel;
use super::sys::{Kind, Sys, join, kind_at, open_dir};
use super::tree::list_names;

/// Remove every durasync leftover in `dir` and, recursively, in its
/// subdirectories (never descending through links). Returns the removed
/// leftovers' paths relative to `dir`, sorted.
///
/// Each directory that holds leftovers is locked while they are removed, so
/// an operation in progress in another process is never disturbed: under the
/// lock, any leftover is stale. Directories without leftovers are not touched
/// (no lock file is created in them).
pub fn recover(dir: BorrowedFd<'_>, opts: &Options<'_>) -> Result<Vec<String>> {
    let sys = Sys::new(opts.probe);
    let mut removed = Vec::new();
    recover_in(&sys, dir, ".", &mut removed)?;
    Ok(removed)
}

fn recover_in(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str, removed: &mut Vec<String>) -> Result<()> {
    let mut names = list_names(dir, dir_path)?;
    names.sort();
    if names.iter().any(|n| is_leftover(n)) {
        let _lock = sys.lock(dir, dir_path)?;
        removed.extend(remove_leftovers(sys, dir, dir_path)?);
    }
    for name in names.iter().filter(|n| !is_leftover(n)) {
        let path = join(dir_path, name);
        if kind_at(dir, name, &path)?.0 == Kind::Dir {
            let sub = open_dir(dir, name, &path)?;
            recover_in(sys, sub.as_fd(), &path, removed)?;
        }
    }
    Ok(())
}

/// Remove the leftovers directly in `dir`. The caller holds `dir`'s lock.
pub(crate) fn remove_leftovers(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = list_names(dir, dir_path)?.into_iter().filter(|n| is_leftover(n)).collect();
    names.sort();
    let mut removed = Vec::with_capacity(names.len());
    for name in names {
        let path = join(dir_path, &name);
        remove_tree(sys, dir, &name, &path)?;
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
pub(crate) fn remove_tree(sys: &Sys<'_>, parent: BorrowedFd<'_>, name: &str, path: &str) -> Result<u32> {
    remove_tree_in(sys, parent, name, path, true)
}

/// The first directory of a removal with at least this many entries is
/// emptied from several threads (once per removal, so threads never
/// multiply; below it everything is sequential again): with
/// the `discard` mount option each unlink waits for a device discard, and
/// unlinks from several threads overlap those waits (1000 files of 4 KiB on
/// the virtio disk: ~120 ms sequential, ~40 ms from 16 threads).
const PARALLEL_REMOVE_MIN: usize = 16;

fn remove_tree_in(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    path: &str,
    parallel: bool,
) -> Result<u32> {
    match kind_at(parent, name, path)? {
        (Kind::Missing, _) => Ok(0),
        (Kind::Dir, mode) => {
            let dir = open_dir(parent, name, path)?;
            // A tree may hold directories that deny their owner write access
            // (`0o555`); only root could empty them as they are.
            if mode & 0o300 != 0o300 {
                sys.chmod(&dir, path, mode | 0o700)?;
            }
            let children = list_names(dir.as_fd(), path)?;
            let count = if parallel && children.len() >= PARALLEL_REMOVE_MIN {
                remove_children_parallel(sys, dir.as_fd(), path, &children)?
            } else {
                let mut count = 0;
                for child in &children {
                    count += remove_tree_in(sys, dir.as_fd(), child, &join(path, child), parallel)?;
                }
                count
            };
            drop(dir);
            sys.rmdir(parent, name, path)?;
            Ok(count)
        }
        (_, _) => {
            sys.unlink(parent, name, path)?;
            Ok(1)
        }
    }
}

/// Remove `children` of `dir` from [`super::DEFAULT_THREADS`] threads;
/// stops at the first error and returns it. Order does not matter: the
/// tree is already unreachable.
fn remove_children_parallel(
    sys: &Sys<'_>,
    dir: BorrowedFd<'_>,
    path: &str,
    children: &[String],
) -> Result<u32> {
    let count = AtomicU32::new(0);
    parallel::try_for_each(children, super::DEFAULT_THREADS, |child| {
        count.fetch_add(remove_tree_in(sys, dir, child, &join(path, child), false)?, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(count.into_inner())
}
