//! oci tests (see tests/README.md): plugins from OCI registries, trusted by
//! digest, pin or cosign signature, through the real `durasync` binary.
//!
//! The registry is real: Debian's `docker-registry` (distribution 2.8),
//! started here on 127.0.0.1 at a free port with its own config and
//! temporary storage. The other side of every exchange is another
//! implementation: `skopeo` pushes and reads back, `openssl` makes the keys
//! and signatures. Protocol faults a real registry never shows (wrong
//! bytes under a digest, 401/500, garbage, a stall) come from a tiny fake
//! on 127.0.0.1 (`support::fake_registry`).

mod auth;
mod cross;
mod faults;
mod hostile;
mod offline;
mod sigstore;
mod sigstore_js;
mod sigstore_python;
mod tls;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use durasync::digest::{oci_digest, sha256_hex};
use durasync_test_support as support;
use support::oci_artifacts::*;
use support::registry::Registry as RealRegistry;
use support::{have, output_text};

// The documented exit statuses (docs/cli.md, host/src/cli/exit.rs).
const OK: i32 = 0;
const IO: i32 = 1;
const POLICY: i32 = 12;

/// The example plugin (KEY=value lines → an envdir under root `out`).
fn example_wasm() -> PathBuf {
    support::wasm::build("Cargo.toml", "example")
}

/// `durasync ARGS` with a private cache, no inherited docker config.
fn durasync(cache: &Path, args: &[&str]) -> Output {
    durasync_env(cache, args, &[])
}

/// `durasync ARGS` with a private cache and these environment variables.
/// `durasync agent --once` of the manifests in `conf`, compiling into
/// `cache_dir` (where the tests count the `.cwasm` files).
fn agent_once(cache: &Path, conf: &Path, cache_dir: &Path) -> Output {
    let args = [
        "agent",
        "--once",
        "--config-dir",
        conf.to_str().unwrap(),
        "--cache-dir",
        cache_dir.to_str().unwrap(),
    ];
    durasync(cache, &args)
}

fn durasync_env(cache: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    Command::new(support::durasync())
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("HOME", cache)
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("DURASYNC_INSECURE_REGISTRIES")
        .env_remove("DURASYNC_REGISTRY_CA")
        .env_remove("DURASYNC_REGISTRY_MIRRORS")
        .env("DURASYNC_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

#[track_caller]
fn assert_status(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "expected exit {code}:\n{}", output_text(out));
}

/// The value after `label` on a line of `pull`/`push` output.
fn field(out: &Output, label: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("no {label:?} in:\n{}", output_text(out)))
}
