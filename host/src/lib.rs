//! durasync: atomic, crash-durable directory and file updates, with the
//! decisions about *what* to write made by sandboxed WebAssembly plugins.
//!
//! The floors, lowest first; a module uses only its own floor and those
//! below (`.ci/structure.py --check` holds CI to it, see ARCHITECTURE.md):
//!
//! - [`durable`]: the native core (no WebAssembly), usable on its own.
//! - [`services`]: the rules every plugin call goes through (grants, paths,
//!   modes, budgets, dry runs, operation records), with no WebAssembly.
//! - [`digest`]: SHA-256 digests as durasync writes them.
//! - `spawn` (private): threads that keep their starter's log, and the
//!   operator's commands as supervised child processes.
//! - [`hooks`]: the operator's validators, guardrails, actions and probes
//!   around a run's changes.
//! - [`runtime`]: the wasmtime host that runs plugins through the services,
//!   and fetches and verifies them from registries.
//! - [`agent`]: the node agent that keeps every plugin of a config
//!   directory in sync.
//! - [`testing`]: a built plugin's golden cases through the runtime, and the
//!   same services as JSON lines for the language shims' tests.
//! - `fuzzing` (hidden): one fuzz target per parser of outside input.
//!
//! The `durasync` binary's CLI (`src/cli/`) sits on top of them all.

#![deny(missing_docs)]
#![deny(unsafe_code)]

#[cfg(feature = "runtime")]
pub mod agent;
#[cfg(feature = "runtime")]
pub mod digest;
pub mod durable;
#[cfg(feature = "runtime")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "runtime")]
pub mod hooks;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod services;
#[cfg(feature = "runtime")]
mod spawn;
#[cfg(feature = "runtime")]
pub mod testing;
