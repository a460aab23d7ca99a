//! Resolving relative paths beneath a directory handle — the sandbox wall
//! for plugins and the way every caller reaches a nested target.
//!
//! The path is first checked as a string ([`split_rel_path`]). It is then
//! opened in one call with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (the fast path, Linux ≥ 5.6); when that fails for any reason — an old
//! kernel, a missing component, a link — it is walked one component at a
//! time with `openat(O_DIRECTORY|O_NOFOLLOW)` from the root fd, which has
//! the same semantics on every kernel and gives an error naming the
//! component at fault. A `..` never reaches the kernel and a symbolic link
//! anywhere on the way is refused, so nothing outside the root is reachable
//! — with one exception the walk follows itself: the link of a top-level
//! name of a directory in the symlink layout (`name -> .durasync-data/name`,
//! see `linked.rs`), which leads to `name` in that directory's
//! current generation, beneath it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::error::{Error, Result, Step};
use super::names::{split_rel_path, split_rel_path_or_self};
use super::sys::{Kind, READ_FLAGS, join, kind_at, kind_error, open_dir, open_file, without_atime};

/// Split a relative path into its parent (`""` for the root itself) and
/// its last name, after checking every component.
pub fn split_last(path: &str) -> Result<(&str, &str)> {
    split_rel_path(path)?;
    Ok(path.rsplit_once('/').unwrap_or(("", path)))
}

/// Open the directory at `rel` beneath `root` (`""` or `"."`: the root
/// itself). Every component must be a real directory, not a link.
pub fn open_beneath(root: BorrowedFd<'_>, rel: &str) -> Result<OwnedFd> {
    let parts = split_rel_path_or_self(rel)?;
    if parts.len() > 1 {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if let Ok(fd) =
            without_atime(|noatime| rustix::fs::openat2(root, rel, flags | noatime, Mode::empty(), BENEATH))
        {
            return Ok(fd);
        }
    }
    open_beneath_walk(root, &parts)
}

/// The fallback of [`open_beneath`]: one component at a time.
fn open_beneath_walk(root: BorrowedFd<'_>, parts: &[&str]) -> Result<OwnedFd> {
    let mut fd = reopen(root)?;
    let mut shown = String::from(".");
    for part in parts {
        shown = join(&shown, part);
        fd = match open_component(fd.as_fd(), part, &shown) {
            Err(Error::Symlink { path }) => match super::linked::hop(fd.as_fd(), part, &shown)? {
                Some(generation) => open_component(generation.as_fd(), part, &shown)?,
                None => return Err(Error::Symlink { path }),
            },
            other => other?,
        };
    }
    Ok(fd)
}

/// `openat2` resolution that stays beneath the starting fd and refuses
/// every link (magic links of `/proc` included).
const BENEATH: ResolveFlags =
    ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_MAGICLINKS);

/// Open the regular file at the already checked relative path `rel`
/// beneath `dir` for reading, in one call on kernels with `openat2`: a link
/// anywhere on the way is refused, like the component-wise walk it falls
/// back to on kernels without `openat2` (before 5.6). `path` is the path
/// shown in errors.
pub(crate) fn open_file_beneath(dir: BorrowedFd<'_>, rel: &str, path: &str) -> Result<OwnedFd> {
    let Some((parent, name)) = rel.rsplit_once('/') else {
        return open_file_or_hop(dir, rel, path);
    };
    match without_atime(|noatime| rustix::fs::openat2(dir, rel, READ_FLAGS | noatime, Mode::empty(), BENEATH))
    {
        Ok(fd) => Ok(fd),
        // No openat2, or a link on the way (which the walk refuses unless it
        // is the symlink layout's own).
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::LOOP) => {
            let parent = open_beneath(dir, parent)?;
            open_file_or_hop(parent.as_fd(), name, path)
        }
        Err(e) => Err(kind_error(e, path, Step::Open)),
    }
}

/// [`open_file`], following the symlink layout's link of `name` (see
/// [`super::linked::hop`]); any other link stays refused.
pub(crate) fn open_file_or_hop(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<OwnedFd> {
    match open_file(dir, name, path) {
        Err(Error::Symlink { path }) => match super::linked::hop(dir, name, &path)? {
            Some(generation) => open_file(generation.as_fd(), name, &path),
            None => Err(Error::Symlink { path }),
        },
        other => other,
    }
}

/// A fresh fd for the directory `dir` itself.
pub(crate) fn reopen(dir: BorrowedFd<'_>) -> Result<OwnedFd> {
    rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io(Step::Open, ".", e))
}

/// Open one component, telling a link from a non-directory.
pub(crate) fn open_component(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<OwnedFd> {
    match open_dir(dir, name, path) {
        Err(Error::NotADirectory { .. } | Error::Symlink { .. }) => match kind_at(dir, name, path)?.0 {
            Kind::Symlink => Err(Error::Symlink { path: path.to_owned() }),
            _ => Err(Error::NotADirectory { path: path.to_owned() }),
        },
        other => other,
    }
}
