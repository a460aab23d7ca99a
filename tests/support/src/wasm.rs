//! Building WebAssembly components from inside a test, so `cargo test`
//! stays one command on a fresh machine. Each build runs a nested `cargo
//! build --target wasm32-wasip2 --release` with its own `--target-dir`
//! (beside the outer one, so the outer build's lock is never contended),
//! once per test binary and package.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::workspace_root;

/// Build the `cdylib` package `package` of the Cargo workspace whose
/// manifest is `manifest` (relative to the workspace root) and return the
/// path of its `.wasm` component. Panics with cargo's output on failure.
pub fn build(manifest: &str, package: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(String, String), PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    let key = (manifest.to_owned(), package.to_owned());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let root = workspace_root();
    let target_dir = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
        .arg(root.join(manifest))
        .args(["-p", package, "--target-dir"])
        .arg(&target_dir)
        // The outer test build's flags are for the host, not for wasm.
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", reproducible_rustflags())
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "building {package} for wasm32-wasip2 failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", package.replace('-', "_")));
    assert!(path.is_file(), "{} was not produced", path.display());
    built.insert(key, path.clone());
    path
}

/// Where nested wasm builds go: `target/wasm` beside the outer target dir.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test-binary> → target
    let target =
        exe.ancestors().nth(3).map(Path::to_path_buf).unwrap_or_else(|| workspace_root().join("target"));
    target.join("wasm")
}

/// The flags of every nested wasm build (`demo.sh` uses the same): the
/// paths rustc embeds (panic locations) are remapped, so a component is
/// byte-identical wherever the repository and the cargo home are, and the
/// sha256 pinned in a committed `plugin.toml` matches a fresh build.
pub fn reproducible_rustflags() -> String {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"));
    [
        format!("--remap-path-prefix={}=/cargo", cargo_home.display()),
        format!("--remap-path-prefix={}=/durasync", workspace_root().display()),
    ]
    .join("\x1f")
}
