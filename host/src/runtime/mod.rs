//! The sandboxed plugin runtime: a wasmtime engine with fuel and epoch
//! interruption, a linker that provides the contract and WASI over an empty context, the
//! WIT adapter over [`crate::services`] (which calls [`crate::durable`]),
//! the manifest and the precompile cache. It knows nothing of the command
//! line.
//!
//! A plugin may do exactly what its manifest grants — write durably under
//! its granted roots, through the host — and nothing else: WASI is linked
//! over a context that grants nothing (no directory, no network, no
//! environment; real clocks and randomness, see [`policy`]), with bounded
//! CPU, wall-clock time, memory, writes, log and output. Every call gets a
//! fresh `Store`, so a trapped instance is never reused.
//!
//! One concept per file: [`engine`](Runtime) (compile, cache, link),
//! `call.rs` (a call in a fresh store and what its failure means),
//! `limiter.rs` (memory limiter, watchdog), `state.rs` (the store's data and
//! the view the hosts borrow), `wasi.rs` (the WASI surface), `fs.rs` and
//! `log.rs` (the WIT adapters), `request.rs` (what a run is given and returns), `errors.rs`, [`manifest`], [`policy`],
//! [`cache`], [`distribution`] (OCI references, pull, push, the blob cache) and [`trust`]
//! (the sha256 / digest / cosign signature policy).
//!
//! ```no_run
//! # fn main() -> Result<(), durasync::runtime::Error> {
//! use durasync::runtime::{CacheConfig, Manifest, RunRequest, Runtime};
//! let manifest = Manifest::load("plugin.toml".as_ref())?;
//! let runtime = Runtime::new(&CacheConfig::Default)?;
//! let plugin = runtime.load_manifest(&manifest)?;
//! let outcome = plugin.run(&RunRequest::from_manifest(&manifest, Vec::new(), false)?)?;
//! println!("{}", outcome.result);
//! # Ok(()) }
//! ```

mod artifact;
mod bindings;
pub mod cache;
mod call;
mod capture;
pub mod compiler;
pub mod distribution;
mod engine;
mod errors;
mod fs;
mod limiter;
mod log;
pub mod manifest;
mod pins;
pub mod policy;
mod request;
mod state;
pub mod trust;
pub mod upgrade;
mod wasi;

pub use crate::services::limits;
pub use crate::services::{Access, Changes, Operation, PluginLimits};
pub use cache::{CacheConfig, CacheStatus};
pub use call::Plugin;
pub use engine::{Compiled, Fetched, Runtime};
pub use errors::{Error, ErrorKind, TrapReason};
pub use log::PLUGIN_LOG_TARGET;
pub use manifest::{Component, Manifest};
pub use policy::Interface;
pub use request::{Info, RunOutcome, RunRequest};
