//! The contract's error kinds as a plain Rust enum, and the one mapping from
//! the durable core's errors to them.
//!
//! [`Error`] mirrors the WIT `error` variant one for one; the runtime and
//! the SDK's native harness each convert it to their own type with a
//! match that only renames. What a plugin asked for and the core refused
//! (a bad path, a read-only root, a full disk) is one of these values,
//! which the plugin can handle.

use std::fmt;

use crate::durable;

/// Why a plugin's call failed: the WIT `error` variants, one for one. Every
/// variant carries a message for a person. Unless the variant says
/// otherwise, the failed call changed nothing it names; a failed `sync` or
/// `write-file` may leave the missing parent directories it created for its
/// path (empty but for the lock file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A path, a name or a mode breaks the rules, or leaves its root.
    InvalidPath(String),
    /// The named root is not granted to this plugin by its manifest.
    NotGranted(String),
    /// The root is granted read-only and the call would write.
    ReadOnly(String),
    /// A path the call needs does not exist.
    NotFound(String),
    /// A path that must be a directory is something else.
    NotADirectory(String),
    /// A limit of the host or of the manifest would be exceeded.
    Limit(String),
    /// The file system cannot do this atomically; nothing was changed.
    Unsupported(String),
    /// The change was made and is visible, but making it durable failed.
    Committed(String),
    /// Any other I/O failure, with the path and the step.
    Io(String),
}

impl Error {
    /// The message, without the kind.
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidPath(m)
            | Error::NotGranted(m)
            | Error::ReadOnly(m)
            | Error::NotFound(m)
            | Error::NotADirectory(m)
            | Error::Limit(m)
            | Error::Unsupported(m)
            | Error::Committed(m)
            | Error::Io(m) => m,
        }
    }

    /// The WIT name of the variant (`invalid-path`, `not-granted`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidPath(_) => "invalid-path",
            Error::NotGranted(_) => "not-granted",
            Error::ReadOnly(_) => "read-only",
            Error::NotFound(_) => "not-found",
            Error::NotADirectory(_) => "not-a-directory",
            Error::Limit(_) => "limit",
            Error::Unsupported(_) => "unsupported",
            Error::Committed(_) => "committed",
            Error::Io(_) => "io",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for Error {}

impl From<durable::Error> for Error {
    fn from(e: durable::Error) -> Self {
        from_core(&e)
    }
}

/// The contract error for a durable-core error: the one core → contract
/// mapping. The core's messages name paths relative to the handle, never
/// host paths.
pub fn from_core(e: &durable::Error) -> Error {
    use durable::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidPath { .. } | E::Duplicate { .. } | E::InvalidMode { .. } => Error::InvalidPath(msg),
        // A link anywhere on the way could lead out of the root.
        E::Symlink { .. } => Error::InvalidPath(msg),
        E::NotFound { .. } => Error::NotFound(msg),
        E::NotADirectory { .. } => Error::NotADirectory(msg),
        E::Limit { .. } | E::TooLarge { .. } => Error::Limit(msg),
        E::Unsupported { .. } | E::FlushUnsupported { .. } => Error::Unsupported(msg),
        E::Committed { .. } => Error::Committed(msg),
        // 0.1 has no variant for "the operator refused this content", and a
        // new case would change the `error` type every 0.1.0 plugin was
        // built against. `not-granted` is the nearest meaning (the grant does
        // not extend to this content) and tells a plugin not to retry as is.
        E::Refused { .. } => Error::NotGranted(msg),
        _ => Error::Io(msg),
    }
}

/// [`from_core`] by value, for `map_err`.
pub(crate) fn core(e: durable::Error) -> Error {
    from_core(&e)
}

/// The result of a plugin's call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_map_to_their_contract_kind() {
        let e = durable::Error::Symlink { path: "x".into() };
        assert!(matches!(from_core(&e), Error::InvalidPath(m) if m.contains("symbolic link")));
        let e = durable::Error::NotFound { path: "x".into() };
        assert!(matches!(from_core(&e), Error::NotFound(_)));
        assert_eq!(Error::ReadOnly("m".into()).to_string(), "read-only: m");
    }
}
