//! Serialising durasync processes: an exclusive `flock` on a lock file
//! ([`LOCK_NAME`]) in the directory an operation changes. The file is never
//! removed: removing a lock file another process is about to open is a
//! classic race.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{FlockOperation, Mode, OFlags};

use super::error::{Result, Step};
use super::names::LOCK_NAME;
use super::probe::SysOp;
use super::sys::{Sys, join};

/// An exclusive lock on a directory, held until it is dropped (closing the
/// fd releases the `flock`).
#[must_use = "the lock is released when this is dropped"]
pub(crate) struct DirLock {
    _fd: OwnedFd,
}

/// Create (if needed) and exclusively lock `dir`'s lock file, waiting for
/// any other holder. `dir_path` names the directory in errors and probes.
pub(crate) fn lock(sys: &Sys<'_>, dir: BorrowedFd<'_>, dir_path: &str) -> Result<DirLock> {
    let lock_path = join(dir_path, LOCK_NAME);
    let fd = sys.observe(SysOp::Lock { dir: dir_path }, Step::Lock, &lock_path, || {
        let fd = rustix::fs::openat(
            dir,
            LOCK_NAME,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        rustix::fs::flock(&fd, FlockOperation::LockExclusive).map_err(io::Error::from)?;
        Ok(fd)
    })?;
    Ok(DirLock { _fd: fd })
}
