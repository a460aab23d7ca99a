//! The values of the contract, as plain Rust types (the same on every
//! target, so plugin logic and its tests never see the generated bindings).
//!
//! They are defined once, in the `durasync-contract` crate (no
//! dependencies, builds for wasm32 and the host), and shared with the host:
//! the native harness passes the host services' values through unconverted,
//! and only the wasm backend converts, once per type, from the bindings.

pub use durasync_contract::{
    DEFAULT_MODE, Entry, EntryKind, Error, File, Info, Level, Op, Outcome, Report, Result,
};
