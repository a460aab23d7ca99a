//! Helpers shared by the test binaries under `tests/`. Each binary includes
//! this module with `#[path = "../support/mod.rs"] mod support;`.

pub mod go_toolchain;
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

/// A test that cannot run its real check here (a missing tool, no root):
/// under CI (`CI` set and not `false`/`0`, as `.ci/run` sets it) that is a
/// failure; elsewhere it is reported loudly and the caller skips the check.
pub fn cannot_check(why: &str) {
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("CI is set, so this check must run, but it cannot: {why} (.ci/run installs what it needs)");
    }
    eprintln!("\n!!! SKIPPED (under CI this fails): {why}\n");
}
