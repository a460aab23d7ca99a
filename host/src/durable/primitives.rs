//! The raw primitives exposed to plugins as `exchange` and `fsync`. They
//! are building blocks, not durable operations by themselves: an exchange
//! is atomic but not durable until both parents are fsynced.

use std::os::fd::{AsFd, BorrowedFd};

use super::Options;
use super::error::{Error, Result, Step, unsupported_or};
use super::names::check_name;
use super::sys::{Kind, Sys, join, kind_at, open_file};

/// Atomically exchange entry `a` of `dir_a` with entry `b` of `dir_b`
/// (`renameat2(RENAME_EXCHANGE)`). Both must exist and be on one file
/// system; a file system without `RENAME_EXCHANGE` gives
/// [`Error::Unsupported`] and nothing changes.
pub fn exchange(
    dir_a: BorrowedFd<'_>,
    a: &str,
    dir_b: BorrowedFd<'_>,
    b: &str,
    opts: &Options<'_>,
) -> Result<()> {
    check_name(a)?;
    check_name(b)?;
    for (dir, name) in [(dir_a, a), (dir_b, b)] {
        if kind_at(dir, name, name)?.0 == Kind::Missing {
            return Err(Error::NotFound { path: name.to_owned() });
        }
    }
    Sys::new(opts.probe).exchange(dir_a, a, a, dir_b, b, b).map_err(|e| unsupported_or(e, dir_a, true))
}

/// fsync the entry `name` of `dir` (a file or a directory), or `dir` itself
/// when `name` is `None`. Links are not followed.
pub fn fsync(dir: BorrowedFd<'_>, name: Option<&str>, opts: &Options<'_>) -> Result<()> {
    let sys = Sys::new(opts.probe);
    let Some(name) = name else {
        return sys.fsync_dir(dir, ".", Step::FsyncDir);
    };
    check_name(name)?;
    let path = join(".", name);
    match kind_at(dir, name, &path)?.0 {
        Kind::Missing => Err(Error::NotFound { path }),
        Kind::Symlink => Err(Error::Symlink { path }),
        Kind::Dir => {
            let fd = super::sys::open_dir(dir, name, &path)?;
            sys.fsync_dir(fd.as_fd(), &path, Step::FsyncDir)
        }
        _ => {
            let fd = open_file(dir, name, &path)?;
            sys.fsync_file(fd.as_fd(), &path)
        }
    }
}
