//! Building the benchmark's plugins (`host/benches/plugins`, their own
//! workspace) from inside the bench, as `tests/support/src/wasm.rs` does for the
//! tests: a nested `cargo build --release --target wasm32-wasip2` with its
//! own target dir (`target/wasm-bench`), so the outer build's lock is never
//! contended and `cargo bench` stays one command.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the folder holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// The outer target dir: target/<profile>/deps/<bench-binary> → target.
pub fn target_root() -> PathBuf {
    let exe = std::env::current_exe().expect("bench binary path");
    exe.ancestors().nth(3).map(Path::to_path_buf).unwrap_or_else(|| workspace_root().join("target"))
}

/// Build every package of the bench plugin workspace and return the path of
/// each requested package's component, in order.
pub fn build(packages: &[&str]) -> Vec<PathBuf> {
    let root = workspace_root();
    let manifest = root.join("host/benches/plugins/Cargo.toml");
    let target_dir = target_root().join("wasm-bench");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        // The outer bench build's flags are for the host, not for wasm.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd.output().expect("running cargo");
    assert!(
        out.status.success(),
        "building the bench plugins for wasm32-wasip2 failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    packages
        .iter()
        .map(|p| {
            let path = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", p.replace('-', "_")));
            assert!(path.is_file(), "{} was not produced", path.display());
            path
        })
        .collect()
}
