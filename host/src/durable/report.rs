//! What a successful durable operation reports: the contract's plain
//! [`Report`] and [`Outcome`] (WIT `report`, `outcome`), defined once in
//! the `durasync-contract` crate. That crate has no dependencies and knows
//! nothing of Wasm; the core returns these values and the services layer,
//! the runtime and the guest SDK pass them on unconverted.
//!
//! In the core, `written` counts the regular files the new contents hold:
//! written, or carried unchanged from the old contents by a link (see
//! `sync.rs`); `removed` the regular files of the old contents that the new
//! contents no longer hold.

pub use durasync_contract::{Outcome, Report};
