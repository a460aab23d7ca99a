//! The plugin services: everything a plugin's call goes through between
//! "the guest named a root and a path" and the durable core, with no
//! WebAssembly in it.
//!
//! - [`Grant`] and [`Dir`]: the roots a manifest grants and the handles a
//!   plugin holds, each with its access, its place below the root and
//!   whether special modes are allowed;
//! - [`Session`]: one run — its limits, per-run budgets, deadline, open
//!   handles, dry-run mode and the [`Operation`] record — with one method
//!   per call of interface `fs` (`calls.rs`);
//! - [`Error`], [`File`], [`Report`], [`Entry`], [`Op`]: the contract's
//!   plain types (the `durasync-contract` crate, shared with the guest SDK),
//!   and the one mapping from core errors to [`Error`];
//! - [`limits`]: every limit a plugin runs under, as named constants.
//!
//! Two front doors use it: the wasmtime runtime ([`crate::runtime`], a thin
//! adapter from the WIT bindings) and the guest SDK's native test harness
//! (`durasync_guest::testing`). Both therefore enforce the same rules with
//! the same messages; `tests/parity` checks that they do.

mod calls;
mod checks;
pub mod error;
mod grant;
mod hooks;
pub mod limits;
pub mod log_rate;
mod operation;
mod plan;
mod session;
pub mod text;

pub use checks::SPECIAL_BITS;
pub use durasync_contract::{Entry, EntryKind, File, Op, Outcome, Report};
pub use error::{Error, Result, from_core};
pub use grant::{Access, Dir, Grant};
pub use hooks::Hooks;
pub use limits::PluginLimits;
pub use log_rate::LogRate;
pub use operation::{Changes, Ended, Operation};
pub use session::{LogBudget, LogVerdict, Session};
