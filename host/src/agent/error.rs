//! What the agent can fail with as a whole (one instance's failures are
//! reported, never returned).

use std::path::PathBuf;
use std::time::Duration;

use crate::runtime::{self, ErrorKind};

/// Everything the agent can fail with as a whole (one instance's failures
/// are reported, never returned).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config directory is missing, not a directory or unreadable.
    #[error("config directory {dir}: {source}")]
    ConfigDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// More manifests than [`MAX_INSTANCES`](super::config::MAX_INSTANCES).
    #[error("config directory {dir} holds more than {max} manifests")]
    TooManyInstances {
        /// The directory.
        dir: PathBuf,
        /// The limit.
        max: usize,
    },
    /// Two manifests name the same plugin.
    #[error("plugin name `{name}` is used by {}; each instance needs its own name", list(.files))]
    DuplicateName {
        /// The shared name.
        name: String,
        /// Every file that uses it.
        files: Vec<PathBuf>,
    },
    /// A manifest or plugin error (loading, or the runtime itself).
    #[error(transparent)]
    Runtime(runtime::Error),
    /// Loading a manifest panicked (a bug, or input nothing else refused):
    /// that instance's load error; the other instances load as usual.
    #[error("loading {}: the loader panicked: {reason}", .file.display())]
    LoadPanic {
        /// The manifest.
        file: PathBuf,
        /// The panic's message.
        reason: String,
    },
    /// Serving metrics failed to start.
    #[error("serving metrics on {addr}: {reason}")]
    Serve {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// Signal handling or inotify could not be set up.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// Runs were still in flight when the shutdown grace period ended.
    #[error("shutdown: {} still running after the grace period of {}", list_names(.instances), humantime::format_duration(*.grace))]
    ShutdownTimeout {
        /// The instances.
        instances: Vec<String>,
        /// The grace period.
        grace: Duration,
    },
}

fn list(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    names.join(" and ")
}

fn list_names(names: &[String]) -> String {
    names.join(", ")
}

impl Error {
    /// The class of failure, for the CLI's exit status: duplicate names and
    /// manifest errors are refusals ([`ErrorKind::Policy`]), the rest I/O.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::DuplicateName { .. } => ErrorKind::Policy,
            Error::Runtime(e) => e.kind(),
            _ => ErrorKind::Io,
        }
    }
}
