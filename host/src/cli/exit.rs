//! The documented exit statuses of `durasync`, and which error maps to which.
//! The table in docs/cli.md ("Exit statuses") is the contract; keep the two in step.

use durasync::{durable, runtime};

/// Success.
pub const OK: u8 = 0;
/// A host I/O failure (disk, permissions, a full file system): nothing changed.
pub const IO: u8 = 1;
/// The command line could not be parsed (clap's own status).
pub const USAGE: u8 = 2;
/// The request was refused before anything was touched: a bad name, a
/// duplicate, a limit, a symlinked or wrong-kind target, a bad source entry.
pub const INVALID: u8 = 3;
/// The change was made, but a step after the commit point failed (see the
/// message: durability unknown, or only the cleanup failed).
pub const COMMITTED: u8 = 4;
/// The file system cannot do the operation atomically; nothing changed.
pub const UNSUPPORTED: u8 = 5;
/// A validator or guardrail refused the change before its commit point
/// (`sync --validate`, a manifest's `[[validate]]`); nothing changed.
pub const REFUSED: u8 = 6;
/// The plugin ran and returned an error.
pub const PLUGIN_ERROR: u8 = 10;
/// The plugin trapped (panic, bad memory access) or hit a limit (CPU budget,
/// timeout, memory, bytes, files, output).
pub const PLUGIN_TRAP: u8 = 11;
/// The plugin or its manifest was refused: a forbidden import, a sha256
/// mismatch, a bad manifest key or value, a missing WIT function.
pub const POLICY: u8 = 12;
/// `durasync test`: at least one golden case failed (its lines say how).
pub const TEST_FAILED: u8 = 14;
/// `durasync doctor`: a sync would fail at one of the places examined
/// (its `fail` lines say why).
pub const DOCTOR_FAILED: u8 = 15;

/// The exit status for an error, from the first durable-core error in its
/// chain (or an explicit [`Status`] attached by a command).
pub fn status_of(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(status) = cause.downcast_ref::<Status>() {
            return status.0;
        }
        if let Some(e) = cause.downcast_ref::<durasync::runtime::Error>() {
            return runtime_status(e);
        }
        if let Some(e) = cause.downcast_ref::<durable::Error>() {
            return core_status(e);
        }
    }
    IO
}

/// The exit status for a durable-core error.
pub fn core_status(e: &durable::Error) -> u8 {
    if e.is_committed() {
        COMMITTED
    } else if matches!(e, durable::Error::Refused { .. }) {
        REFUSED
    } else if matches!(e, durable::Error::Unsupported { .. } | durable::Error::FlushUnsupported { .. }) {
        UNSUPPORTED
    } else if e.is_invalid_request() {
        INVALID
    } else {
        IO
    }
}

/// The exit status of a runtime error.
pub fn runtime_status(e: &runtime::Error) -> u8 {
    if e.rejected_by().is_some() {
        return REFUSED;
    }
    match e.kind() {
        runtime::ErrorKind::Policy => POLICY,
        runtime::ErrorKind::Trap => PLUGIN_TRAP,
        runtime::ErrorKind::Plugin => PLUGIN_ERROR,
        runtime::ErrorKind::Io => IO,
    }
}

/// An explicit exit status carried in an error chain.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("exit status {0}")]
pub struct Status(pub u8);
