//! durasync: atomic, crash-durable directory and file updates, with the
//! decisions about *what* to write made by sandboxed WebAssembly plugins.
//!
//! - [`durable`]: the native core (no WebAssembly), usable on its own.
//! - [`services`]: the rules every plugin call goes through (grants, paths,
//!   modes, budgets, dry runs, operation records), with no WebAssembly.
//! - [`hooks`]: the operator's validators, guardrails and actions around a run's changes.
//! - [`runtime`]: the wasmtime host that runs plugins through the services.
//! - [`golden`]: a built plugin's golden cases through the runtime.
//! - [`harness`]: the same services as JSON lines, for the language shims' tests.
//!
//! `fuzzing` (hidden) holds one fuzz target per parser of outside input.

#![deny(missing_docs)]
#![deny(unsafe_code)]

#[cfg(feature = "runtime")]
pub mod agent;
pub mod durable;
#[cfg(feature = "runtime")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "runtime")]
pub mod golden;
#[cfg(feature = "runtime")]
pub mod harness;
#[cfg(feature = "runtime")]
pub mod hooks;
#[cfg(feature = "runtime")]
mod process;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod services;
