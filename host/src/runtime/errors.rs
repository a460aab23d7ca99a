//! The runtime's errors: what `durasync run` and `inspect` can fail with.
//!
//! Two kinds of failure are kept apart: what the plugin asked for and the
//! core refused (a bad path, a read-only root, a full disk) reaches the
//! plugin as a contract `error` value it can handle (see
//! [`crate::services::Error`]); host bugs, handle-table errors and exhausted
//! limits become traps, which end the call.

use crate::services::Operation;
use crate::services::limits::{human_bytes, human_ms};

/// What class of failure an [`Error`] is (the CLI maps each to an exit status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The plugin or its manifest was refused before it ran.
    Policy,
    /// The plugin trapped or hit a limit.
    Trap,
    /// The plugin ran and returned an error.
    Plugin,
    /// A host I/O failure.
    Io,
}

/// Why a call was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrapReason {
    /// Out of fuel.
    Fuel {
        /// The budget, in fuel units.
        budget: u64,
    },
    /// The wall-clock deadline passed.
    Timeout {
        /// The limit, in milliseconds.
        ms: u64,
    },
    /// A memory grow past the cap.
    Memory {
        /// The cap, in bytes.
        limit: u64,
    },
    /// A per-run limit of the manifest (bytes or files written).
    Limit {
        /// Which limit and by how much.
        message: String,
    },
    /// A change was refused before its commit by the operator's validator
    /// or guardrail (the run fails even if the plugin went on).
    Rejected {
        /// Who refused (`validator json`, `guard min_files`).
        by: String,
        /// The refusal, naming the root and path.
        message: String,
    },
    /// The result or error message is longer than `limits.output_bytes`.
    Output {
        /// Its length.
        len: u64,
        /// The cap.
        limit: u64,
    },
    /// A Rust panic in the guest.
    Panic {
        /// The panic message, from the guest's stderr.
        message: String,
    },
    /// Any other trap (bad memory access, unreachable, stack overflow, ...).
    Other {
        /// The trap's reason.
        message: String,
        /// Its wasm backtrace, trimmed (empty when there is none); shown
        /// after the guest's stderr.
        backtrace: Box<str>,
    },
}

impl std::fmt::Display for TrapReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrapReason::Fuel { budget } => {
                write!(f, "exceeded its CPU budget of {budget} fuel units (limits.fuel)")
            }
            TrapReason::Timeout { ms } => write!(f, "timed out after {} (limits.timeout_ms)", human_ms(*ms)),
            TrapReason::Memory { limit } => {
                write!(f, "exceeded its memory limit of {} (limits.memory_bytes)", human_bytes(*limit))
            }
            TrapReason::Limit { message } => write!(f, "{message}"),
            TrapReason::Rejected { message, .. } => write!(f, "had a change refused: {message}"),
            TrapReason::Output { len, limit } => write!(
                f,
                "returned {} of output, over its limit of {} (limits.output_bytes)",
                human_bytes(*len),
                human_bytes(*limit)
            ),
            TrapReason::Panic { message } => write!(f, "panicked: {message}"),
            TrapReason::Other { message, .. } => write!(f, "trapped: {message}"),
        }
    }
}

/// Everything the runtime can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A manifest key is missing or has a bad value.
    #[error("manifest {manifest}: `{key}` {reason}")]
    Manifest {
        /// The manifest's path.
        manifest: String,
        /// The dotted key (`limits.fuel`).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The component is not the one the manifest pins.
    #[error("{wasm}: sha256 is {actual}, but the manifest pins {expected}; refusing to load it")]
    Sha256Mismatch {
        /// The component's path.
        wasm: String,
        /// The manifest's value.
        expected: String,
        /// The file's.
        actual: String,
    },
    /// The component breaks the load-time policy (a forbidden import, a
    /// missing function, not a component at all).
    #[error("plugin {plugin} refused: {reason}")]
    Policy {
        /// The plugin's name (or file).
        plugin: String,
        /// Which rule, naming the import.
        reason: String,
    },
    /// The plugin trapped or hit a limit.
    #[error("plugin {plugin} {reason}{}{}", stderr_note(.stderr), backtrace_note(.reason))]
    Trap {
        /// The plugin's name.
        plugin: String,
        /// Why it was stopped.
        reason: TrapReason,
        /// The durable operations it completed before (already on disk).
        operations: Vec<Operation>,
        /// The end of the guest's captured stderr (empty when it wrote none).
        stderr: String,
    },
    /// The plugin's `run` returned an error (or it exited with a status
    /// other than 0).
    #[error("plugin {plugin} failed: {message}{}", stderr_note(.stderr))]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// What it said.
        message: String,
        /// The durable operations it completed before (already on disk).
        operations: Vec<Operation>,
        /// The end of the guest's captured stderr (empty when it wrote none).
        stderr: String,
    },
    /// A component from a registry was refused (no trust, a bad or missing
    /// signature, a digest or pin mismatch, a bad layout) or could not be
    /// fetched (see [`crate::runtime::trust::Error::is_refusal`]).
    #[error(transparent)]
    Trust(#[from] crate::runtime::trust::Error),
    /// A host I/O failure (reading the component, opening a root, the engine).
    #[error("{what}: {source}")]
    Io {
        /// What the host was doing.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The class of failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Manifest { .. } | Error::Sha256Mismatch { .. } | Error::Policy { .. } => ErrorKind::Policy,
            Error::Trap { .. } => ErrorKind::Trap,
            Error::Plugin { .. } => ErrorKind::Plugin,
            Error::Trust(e) if e.is_refusal() => ErrorKind::Policy,
            Error::Trust(_) | Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// Who refused a change of the run (a validator or guardrail of the
    /// manifest), when that is why it failed.
    pub fn rejected_by(&self) -> Option<&str> {
        match self {
            Error::Trap { reason: TrapReason::Rejected { by, .. }, .. } => Some(by),
            _ => None,
        }
    }

    /// Durable operations completed before the failure (they are on disk).
    pub fn operations(&self) -> &[Operation] {
        match self {
            Error::Trap { operations, .. } | Error::Plugin { operations, .. } => operations,
            _ => &[],
        }
    }

    pub(crate) fn engine(what: &str, e: wasmtime::Error) -> Self {
        Error::Io { what: what.to_owned(), source: std::io::Error::other(format!("{e:#}")) }
    }
}

/// A trap's wasm backtrace, last.
fn backtrace_note(reason: &TrapReason) -> String {
    match reason {
        TrapReason::Other { backtrace, .. } if !backtrace.is_empty() => {
            format!("\nwasm backtrace:\n{backtrace}")
        }
        _ => String::new(),
    }
}

/// The guest's stderr tail, after the reason, on lines of its own.
fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!("\nits stderr ends with:\n{stderr}") }
}

/// The panic message in a guest's stderr (`thread '<unnamed>' panicked at
/// src/lib.rs:3:5:\nboom`), as `boom (at src/lib.rs:3:5)`.
pub(crate) fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.rfind("panicked at ")?;
    let rest = &stderr[start + "panicked at ".len()..];
    let (location, message) = match rest.split_once(":\n") {
        Some((loc, msg)) => (loc.trim(), msg),
        None => ("", rest),
    };
    let message: Vec<&str> = message
        .lines()
        .take_while(|l| !l.starts_with("note: ") && !l.starts_with("stack backtrace"))
        .collect();
    let message = message.join("\n").trim().to_owned();
    Some(if location.is_empty() { message } else { format!("{message} (at {location})") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_come_from_stderr() {
        let stderr = "noise\nthread '<unnamed>' panicked at src/lib.rs:3:5:\nboom\nnote: run with \
                      `RUST_BACKTRACE=1`\n";
        assert_eq!(panic_message(stderr).unwrap(), "boom (at src/lib.rs:3:5)");
        assert_eq!(panic_message("nothing here"), None);
    }
}
