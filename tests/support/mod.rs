//! Helpers shared by the test binaries under `tests/`. Each binary includes
//! this module with `#[path = "../support/mod.rs"] mod support;`.

pub mod snapshot;
pub mod toolchains;
pub mod wasm;

use std::path::PathBuf;

/// The `durasync` binary built for this test run.
pub fn durasync() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_durasync"))
}

/// The workspace root (the folder holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}
