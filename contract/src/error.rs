//! WIT `error`: why a call failed.

use alloc::string::String;
use core::fmt;

/// Why a host call failed: the WIT `error` variants, one for one. Every
/// variant carries a message for a person. Unless the variant says
/// otherwise, the failed call changed nothing it names; a failed `sync` or
/// `write-file` may leave the missing parent directories it created for its
/// path (empty but for the lock file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A path, a name or a mode breaks the rules, or leaves its root.
    InvalidPath(String),
    /// The named root is not granted to this plugin by its manifest (or the
    /// operator refused this content).
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
    /// Retrying the same call is safe.
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

impl core::error::Error for Error {}

/// The result of a host call.
pub type Result<T, E = Error> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn an_error_displays_its_wit_kind_then_its_message() {
        let e = Error::ReadOnly("m".into());
        assert_eq!((e.kind(), e.message()), ("read-only", "m"));
        assert_eq!(e.to_string(), "read-only: m");
        assert_eq!(Error::NotADirectory("x".into()).kind(), "not-a-directory");
    }
}
