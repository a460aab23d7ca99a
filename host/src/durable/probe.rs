//! Observation points on every file-system change the core makes.
//!
//! The durable core issues each mutating system call through `sys.rs`,
//! which calls [`Probe::before`] and [`Probe::after`] around it. Production
//! code passes [`NoProbe`]; tests pass probes that record the sequence (the
//! crash-state explorer replays it against a weak persistence model) or that
//! fail a chosen step (fault injection). Because the probe wraps the very
//! calls the `durasync` binary makes, what the tests check is what ships.

use std::io;

/// One mutating file-system operation, with paths relative to the directory
/// the operation was anchored at (the parent fd given to the core; `.` is
/// that directory itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysOp<'a> {
    /// `flock(LOCK_EX)` on the lock file of directory `dir` (created if missing).
    Lock {
        /// The locked directory.
        dir: &'a str,
    },
    /// `mkdirat(path)`.
    Mkdir {
        /// The new directory.
        path: &'a str,
    },
    /// `openat(path, O_CREAT|O_EXCL|O_NOFOLLOW)`: a new, empty file.
    Create {
        /// The new file.
        path: &'a str,
    },
    /// Writing all of `data` at offset 0 of the file just created at `path`.
    Write {
        /// The file.
        path: &'a str,
        /// Its complete new contents.
        data: &'a [u8],
    },
    /// `fchmod` of the file or directory at `path`.
    Chmod {
        /// The file or directory.
        path: &'a str,
        /// The exact permission bits.
        mode: u32,
    },
    /// `fchown` of the file or directory at `path` (`None`: that id is left).
    Chown {
        /// The file or directory.
        path: &'a str,
        /// The new owner.
        uid: Option<u32>,
        /// The new group.
        gid: Option<u32>,
    },
    /// `fsetxattr` of one extended attribute of the file or directory at `path`.
    SetXattr {
        /// The file or directory.
        path: &'a str,
        /// The attribute's name (`security.selinux`, `user.x`, …).
        name: &'a str,
        /// Its value.
        value: &'a [u8],
    },
    /// `fsync` of the regular file at `path`, on the fd that wrote it.
    FsyncFile {
        /// The file.
        path: &'a str,
    },
    /// `fsync` of the directory at `path`.
    FsyncDir {
        /// The directory.
        path: &'a str,
    },
    /// `syncfs` through the fd of the directory at `path`: every file's data
    /// and every directory's entries on that file system become durable
    /// (the flush of a whole staging tree, `--flush syncfs`).
    Syncfs {
        /// The directory whose fd was used (a staging root).
        path: &'a str,
    },
    /// `linkat(from, to)` (no flags: a link is never followed): one more
    /// name for the existing inode at `from`, an unchanged file of the
    /// target carried into the staging tree.
    Link {
        /// The existing file.
        from: &'a str,
        /// The new name.
        to: &'a str,
    },
    /// `renameat2(a, b, RENAME_EXCHANGE)`.
    Exchange {
        /// One side.
        a: &'a str,
        /// The other side.
        b: &'a str,
    },
    /// `renameat2(from, to)`, with `RENAME_NOREPLACE` unless `replace`.
    Rename {
        /// The entry moved.
        from: &'a str,
        /// Where it goes.
        to: &'a str,
        /// Whether an existing `to` is atomically replaced.
        replace: bool,
    },
    /// `symlinkat(target, path)`: a new symbolic link (the symlink layout's
    /// links, see `layout.rs`).
    Symlink {
        /// The new link.
        path: &'a str,
        /// What it points to (relative, within the same directory).
        target: &'a str,
    },
    /// `unlinkat(path)` of a non-directory.
    Unlink {
        /// The entry removed.
        path: &'a str,
    },
    /// `unlinkat(path, AT_REMOVEDIR)` of an empty directory.
    Rmdir {
        /// The directory removed.
        path: &'a str,
    },
}

/// Hooks around every mutating system call of the core.
///
/// Implementations must be `Sync`: file writes and fsyncs run on several
/// threads at once.
pub trait Probe: Sync {
    /// Called before the call is made. An error is returned to the core as
    /// if the system call itself had failed with it, and the call is not made.
    fn before(&self, op: &SysOp<'_>) -> io::Result<()> {
        let _ = op;
        Ok(())
    }

    /// Called after the call succeeded.
    fn after(&self, op: &SysOp<'_>) {
        let _ = op;
    }
}

/// The probe production code uses: observes nothing, fails nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProbe;

impl Probe for NoProbe {}
