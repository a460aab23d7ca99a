//! The plain values of durasync's contract (`wit/durasync.wit`, package
//! `durasync:plugin@0.1.0`), written once for every side that speaks it:
//!
//! - the durable core returns [`Report`] / [`Outcome`] / [`Entry`];
//! - the host's services layer returns them and [`Error`] to both front
//!   doors (the wasmtime runtime and the guest SDK's native harness) and
//!   records each mutating call with its [`Op`];
//! - the guest SDK re-exports them to plugin authors (`durasync_guest::File`,
//!   …), on wasm32 and natively.
//!
//! So the only conversions left are the ones a code generator forces:
//! WIT bindings ↔ these types, once per type, on each side of the
//! component boundary (`host/src/runtime/fs.rs`, `guest-sdk/src/wasm.rs`).
//!
//! The crate has no dependencies and is `no_std` (with `alloc`), so it
//! builds for `wasm32-wasip2` and for the host and adds nothing to a
//! plugin but these types. It knows nothing of WIT or wasmtime: each type
//! mirrors a WIT type by name and by variant, one for one.

#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

extern crate alloc;

mod entry;
mod error;
mod file;
mod info;
mod op;
mod report;

pub use entry::{Entry, EntryKind};
pub use error::{Error, Result};
pub use file::{DEFAULT_MODE, File};
pub use info::{Info, Level};
pub use op::Op;
pub use report::{Outcome, Report};
