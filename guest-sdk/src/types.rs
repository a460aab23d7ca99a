//! The values of the contract, as plain Rust types (the same on every
//! target, so plugin logic and its tests never see the generated bindings).

use std::fmt;

/// The default mode of a [`File`]: readable by everyone, writable by the owner.
pub const DEFAULT_MODE: u32 = 0o644;

/// One regular file of a directory [`sync`](crate::Dir::sync).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Path relative to the synced directory: plain names joined by `/`.
    pub name: String,
    /// The exact bytes the file will hold.
    pub contents: Vec<u8>,
    /// Permission bits, applied exactly (the host's umask does not change them).
    pub mode: u32,
}

impl File {
    /// A file named `name` holding `contents`, with mode [`DEFAULT_MODE`] (0644).
    pub fn new(name: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        File { name: name.into(), contents: contents.into(), mode: DEFAULT_MODE }
    }

    /// The same file with permission bits `mode` (`0o600`, `0o755`, …).
    #[must_use]
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }
}

/// What a mutating call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The target already held exactly the requested contents: nothing was
    /// written and nothing was fsynced.
    Unchanged,
    /// The target did not exist and now does.
    Created,
    /// The target existed and was atomically replaced.
    Replaced,
    /// The target existed and was durably removed.
    Removed,
}

impl Outcome {
    /// The lowercase word the host prints (`unchanged`, `created`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Replaced => "replaced",
            Outcome::Removed => "removed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a successful mutating call. When it is returned the change
/// has reached stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// What happened to the target.
    pub outcome: Outcome,
    /// Files written into the new contents.
    pub written: u32,
    /// Files of the old contents that the new contents no longer hold.
    pub removed: u32,
}

/// What a directory entry is (links are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A fifo, socket or device.
    Other,
}

/// One entry of [`list_dir`](crate::Dir::list_dir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

/// Why a host call failed: the WIT `error` variants, one for one. Every
/// variant carries a message for a person. Unless the variant says
/// otherwise, the failed call changed nothing it names; a failed `sync` or
/// `write-file` may leave the missing parent directories it created for its
/// path (empty but for the lock file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A path or a name breaks the path rules, or leaves its root.
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
    /// Retrying the same call is safe.
    Committed(String),
    /// Any other I/O failure, with the path and the step.
    Io(String),
}

impl Error {
    /// The host's message, without the kind.
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

/// The result of a host call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a plugin says about itself (`describe`, `durasync inspect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// A short machine-friendly name (`certsync`).
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One sentence for a person.
    pub summary: String,
    /// The root names the plugin opens, so an operator knows what to grant.
    pub roots: Vec<String>,
}

impl Info {
    /// A plugin called `name`, at `version`, that does `summary` and opens no roots.
    pub fn new(name: impl Into<String>, version: impl Into<String>, summary: impl Into<String>) -> Self {
        Info { name: name.into(), version: version.into(), summary: summary.into(), roots: Vec::new() }
    }

    /// The same, opening the roots `roots`.
    #[must_use]
    pub fn roots<I, S>(mut self, roots: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roots = roots.into_iter().map(Into::into).collect();
        self
    }
}

/// How important a log message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Detail for whoever debugs the plugin.
    Debug,
    /// Normal progress.
    Info,
    /// Something an operator should look at.
    Warn,
    /// Something failed.
    Error,
}
