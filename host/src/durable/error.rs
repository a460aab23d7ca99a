//! The core's typed errors.
//!
//! Two families are kept apart on purpose. Errors before the commit point
//! (every variant but [`Error::Committed`]) guarantee that the target was
//! not changed. [`Error::Committed`] means the new contents are already in
//! place; what failed is making them durable or cleaning up after them.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

/// A step of a durable operation, named in I/O errors so a person knows what
/// failed (`fsync file secrets/tls/tls.key: Input/output error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Opening a directory or a file.
    Open,
    /// Reading a file or a directory listing.
    Read,
    /// Taking the per-directory lock.
    Lock,
    /// Creating a directory.
    Mkdir,
    /// Creating a file with `O_CREAT|O_EXCL|O_NOFOLLOW`.
    Create,
    /// Writing a file's bytes.
    Write,
    /// Setting a file's exact mode.
    Chmod,
    /// Giving a staged file or directory its owner and group.
    Chown,
    /// Setting an extended attribute (label, carried attribute, ACL).
    SetXattr,
    /// Flushing a file's data and metadata.
    FsyncFile,
    /// Flushing a directory's entries.
    FsyncDir,
    /// Linking an unchanged file of the target into the staging tree.
    Link,
    /// `renameat2(RENAME_EXCHANGE)`.
    Exchange,
    /// A rename that moves an entry (`RENAME_NOREPLACE` or a plain rename).
    Rename,
    /// Creating a symbolic link (the symlink layout).
    Symlink,
    /// Flushing the parent directory: the commit point.
    FsyncParent,
    /// `syncfs` of the file system holding a staging tree (`--flush syncfs`).
    Syncfs,
    /// Removing a file or a directory tree.
    Remove,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Open => "open",
            Step::Read => "read",
            Step::Lock => "lock",
            Step::Mkdir => "create directory",
            Step::Create => "create file",
            Step::Write => "write",
            Step::Chmod => "set mode of",
            Step::Chown => "set owner of",
            Step::SetXattr => "set extended attribute of",
            Step::FsyncFile => "fsync file",
            Step::FsyncDir => "fsync directory",
            Step::Link => "link",
            Step::Exchange => "exchange",
            Step::Rename => "rename",
            Step::FsyncParent => "fsync parent directory",
            Step::Syncfs => "syncfs of the file system holding",
            Step::Symlink => "symlink",
            Step::Remove => "remove",
        })
    }
}

/// Everything that can go wrong in the durable core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name or path breaks the path rules. Nothing was touched.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The offending path, as given.
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A request names the same path twice, or a file where it also needs a
    /// directory. Nothing was touched.
    #[error("duplicate path {path:?}: {reason}")]
    Duplicate {
        /// The path named twice.
        path: String,
        /// How the two uses clash.
        reason: &'static str,
    },
    /// A mode has bits outside the permission bits (`0o7777`).
    #[error("invalid mode {mode:#o} for {path:?}: only permission bits (0o7777) are allowed")]
    InvalidMode {
        /// The file the mode was for.
        path: String,
        /// The mode given.
        mode: u32,
    },
    /// Something exists at a path that must be a directory.
    #[error("{path}: not a directory")]
    NotADirectory {
        /// The path.
        path: String,
    },
    /// Something exists at a path that must be a regular file.
    #[error("{path}: not a regular file")]
    NotAFile {
        /// The path.
        path: String,
    },
    /// A target or a path component is a symbolic link. durasync never
    /// follows links and never replaces one with a directory.
    #[error("{path}: is a symbolic link; durasync never follows or replaces links")]
    Symlink {
        /// The path of the link.
        path: String,
    },
    /// A path that must exist does not.
    #[error("{path}: no such file or directory")]
    NotFound {
        /// The path.
        path: String,
    },
    /// A revert was asked for a target that has no valid previous contents
    /// (none was kept, or it was reverted to or discarded already).
    #[error("{path}: no previous contents are kept; nothing was changed")]
    NoPrevious {
        /// The target.
        path: String,
    },
    /// A file of a sync's source directory changed while the sync read it
    /// (see `source.rs`): nothing was changed.
    #[error("{path}: the source changed during the sync: {what}; nothing was changed")]
    SourceChanged {
        /// The source file.
        path: String,
        /// What changed.
        what: &'static str,
    },
    /// A source tree holds something that is neither a regular file nor a
    /// directory (a symlink, a fifo, a device, a socket).
    #[error("{path}: is a {kind}; only regular files and directories can be synced")]
    UnsupportedEntry {
        /// The entry's path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// A limit on files, bytes or names would be exceeded. Nothing was touched.
    #[error("limit exceeded: {what}: {actual} is over the limit of {limit}")]
    Limit {
        /// What is limited.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// What the request needs.
        actual: u64,
    },
    /// A file or directory on disk is larger than a read may bring into
    /// memory ([`super::ReadLimits`]). Nothing was read or changed.
    #[error("{path}: limit exceeded: {what}: {actual} is over the limit of {limit}")]
    TooLarge {
        /// The file or directory.
        path: String,
        /// What is limited.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// What is there (at least).
        actual: u64,
    },
    /// The file system cannot do the operation atomically. Nothing was changed.
    #[error(
        "{path}: the file system ({fs}) does not support atomic {op} ({source}); nothing was changed \
         (the symlink layout works there: layout = \"symlink\" on the root, or --layout symlink)"
    )]
    Unsupported {
        /// The directory where it was tried.
        path: String,
        /// The file system's type, as far as it is known (`nfs`, `ext4`, …).
        fs: String,
        /// The operation (`RENAME_EXCHANGE`, `cross-device rename`).
        op: &'static str,
        /// The error the kernel returned.
        source: io::Error,
    },
    /// A directory in the symlink layout (`layout.rs`) is not as the layout
    /// leaves it, or the operation cannot be done in that layout. Nothing
    /// was changed.
    #[error("{path}: the symlink layout: {reason}; nothing was changed")]
    Layout {
        /// The directory (or its entry) at fault.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A flush strategy was asked for that cannot be trusted here
    /// (`--flush syncfs` on a file system or kernel where `syncfs` may not
    /// persist the batch or report its errors). Nothing was changed.
    #[error(
        "{path}: --flush syncfs cannot be used on this file system ({fs}): {reason}; nothing was changed"
    )]
    FlushUnsupported {
        /// The directory where it was tried.
        path: String,
        /// The file system's type, as far as it is known.
        fs: String,
        /// Why `syncfs` cannot be trusted there.
        reason: String,
    },
    /// The operation was cancelled ([`super::Cancel`]) before its commit
    /// point; what it had staged was removed. Nothing was changed.
    #[error("{path}: cancelled before the change was made; nothing was changed")]
    Cancelled {
        /// The target.
        path: String,
    },
    /// A [`super::Gate`] refused the staged contents before the swap; what
    /// was staged was removed. Nothing was changed.
    #[error("{path}: refused by {by}: {reason}; nothing was changed")]
    Refused {
        /// The target.
        path: String,
        /// Who refused.
        by: String,
        /// Why.
        reason: String,
    },
    /// The kernel refused to give a staged inode what the root's policy
    /// asks for (an owner, a label, an attribute): the agent lacks the
    /// right. What was staged was removed; nothing was changed.
    #[error("{path}: cannot set {what}: {source}; nothing was changed")]
    AttrsRefused {
        /// The staged file or directory.
        path: String,
        /// What was asked.
        what: String,
        /// The kernel's error.
        source: io::Error,
    },
    /// An I/O error before the commit point. The target is unchanged.
    #[error("{step} {path}: {source}")]
    Io {
        /// Which step failed.
        step: Step,
        /// The path it failed on.
        path: String,
        /// The kernel's error.
        source: io::Error,
    },
    /// A failure after the swap: the new contents are in place and visible.
    /// `durable` says whether the commit fsync had already returned (only the
    /// cleanup failed) or not (durability unknown).
    #[error("{}", committed_message(*.durable, *.step, .path, .source))]
    Committed {
        /// Whether the change is known to be durable.
        durable: bool,
        /// Which step failed.
        step: Step,
        /// The path it failed on.
        path: String,
        /// The kernel's error.
        source: io::Error,
    },
}

fn committed_message(durable: bool, step: Step, path: &str, source: &io::Error) -> String {
    if durable {
        format!(
            "committed and durable, but {step} {path} failed afterwards: {source} \
             (`durasync recover` removes the leftover)"
        )
    } else {
        format!("committed, durability unknown: the new contents are live but {step} {path} failed: {source}")
    }
}

impl Error {
    pub(crate) fn invalid_path(path: &str, reason: &'static str) -> Self {
        Error::InvalidPath { path: path.to_owned(), reason }
    }

    pub(crate) fn io(step: Step, path: impl Into<String>, source: impl Into<io::Error>) -> Self {
        Error::Io { step, path: path.into(), source: source.into() }
    }

    /// Whether the failure happened after the commit point, so the new
    /// contents are in place.
    pub fn is_committed(&self) -> bool {
        matches!(self, Error::Committed { .. })
    }

    /// Whether the request itself was bad (path rules, limits, duplicates,
    /// a symlinked or wrong-kind target): retrying it can never succeed.
    pub fn is_invalid_request(&self) -> bool {
        matches!(
            self,
            Error::InvalidPath { .. }
                | Error::Duplicate { .. }
                | Error::InvalidMode { .. }
                | Error::NotADirectory { .. }
                | Error::NotAFile { .. }
                | Error::Symlink { .. }
                | Error::NoPrevious { .. }
                | Error::UnsupportedEntry { .. }
                | Error::Limit { .. }
                | Error::TooLarge { .. }
        )
    }
}

/// Whether a failed `renameat2` means the file system does not support its
/// flags (`EINVAL` from FUSE and some NFS, `ENOSYS`/`EOPNOTSUPP` elsewhere).
pub(crate) fn flags_unsupported(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if errno_unsupported(source))
}

fn errno_unsupported(source: &io::Error) -> bool {
    let unsupported = [rustix::io::Errno::INVAL, rustix::io::Errno::NOSYS, rustix::io::Errno::OPNOTSUPP];
    source.raw_os_error().is_some_and(|code| unsupported.iter().any(|e| e.raw_os_error() == code))
}

/// Map a failed swap to [`Error::Unsupported`] when the file system cannot
/// exchange or rename atomically; other errors pass through.
pub(crate) fn unsupported_or(e: Error, dir: BorrowedFd<'_>, exchange: bool) -> Error {
    let Error::Io { path, source, .. } = e else { return e };
    let op = match source.raw_os_error() {
        Some(code) if code == rustix::io::Errno::XDEV.raw_os_error() => "cross-device rename",
        Some(_) if errno_unsupported(&source) => {
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
    Error::Unsupported { path, fs: super::fsinfo::fs_name(dir), op, source }
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

/// The core's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
