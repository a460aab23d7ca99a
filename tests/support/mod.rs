//! Helpers shared by the test binaries under `tests/`. Each binary includes
//! this module with `#[path = "../support/mod.rs"] mod support;`.

pub mod go_toolchain;
pub mod http_server;
pub mod oci_artifacts;
pub mod registry;
pub mod snapshot;
pub mod toolchains;
pub mod wasm;

use std::path::{Path, PathBuf};

/// The `durasync` binary built for this test run.
pub fn durasync() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_durasync"))
}

/// The workspace root (the folder holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// The directory the core tests make every scratch tree in, and the crash
/// tests run the real binary in (the strace audits, the kill -9 soak), when
/// set: the file system under test (the explorer's crash states stay on
/// tmpfs: its model, not the disk, decides what is durable). `.ci/run` points it at loop-mounted ext4, xfs
/// and btrfs. Unset, each test picks its own (tmpfs where disk flushes
/// would only cost time, else the system temp dir).
pub const TEST_DIR: &str = "DURASYNC_TEST_DIR";

/// The directory [`TEST_DIR`] names, if set; it must be a directory.
pub fn test_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os(TEST_DIR)?);
    assert!(dir.is_dir(), "{TEST_DIR}={} is not a directory", dir.display());
    Some(dir)
}

/// The variable a person sets to accept skipped checks on a machine that
/// lacks what they need (`DURASYNC_ALLOW_SKIP=1 cargo test --workspace`).
pub const ALLOW_SKIP: &str = "DURASYNC_ALLOW_SKIP";

/// A test that cannot run its real check here (a missing tool, no root).
///
/// A skip must never read as `ok` to someone who did not ask for it: libtest
/// captures a passing test's output, so a printed banner alone is invisible
/// in `cargo test --workspace`, whose summary would count the skipped check
/// as passed. So:
/// - under CI (`CI` set and not `false`/`0`, as `.ci/run` sets it) this
///   always fails: CI installs everything;
/// - elsewhere it fails too, saying what is missing, unless the person
///   opted in with [`ALLOW_SKIP`]`=1`; then the caller skips the check, the
///   banner is written straight to the terminal (not through the captured
///   `eprintln!`, so it shows for a passing test), and the skip is appended
///   to `target/durasync-skipped.txt`, the list of checks that did not run.
pub fn cannot_check(why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("CI is set, so this check must run, but it cannot: {why} (.ci/run installs what it needs)");
    }
    if std::env::var(ALLOW_SKIP).as_deref() != Ok("1") {
        panic!(
            "this check cannot run here: {why}. Install what it needs (README.md, \"Set-up\"), or set \
             {ALLOW_SKIP}=1 to skip it; each skip is then listed in target/durasync-skipped.txt"
        );
    }
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| n.rsplit_once('-').map_or(n.clone(), |(name, _hash)| name.to_owned()))
        .unwrap_or_default();
    let line = format!("{binary} {test}: {why}");
    let list = skipped_list();
    // Straight to the file descriptor: `eprintln!` would be captured.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\n!!! SKIPPED ({ALLOW_SKIP}=1): {line}\n    listed in {}\n", list.display()).as_bytes(),
    );
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&list)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
    if let Err(e) = appended {
        panic!("cannot list the skipped check in {}: {e}", list.display());
    }
}

/// `target/durasync-skipped.txt`: every check skipped under [`ALLOW_SKIP`].
pub fn skipped_list() -> PathBuf {
    wasm::target_dir()
        .parent()
        .map_or_else(|| workspace_root().join("target"), Path::to_path_buf)
        .join("durasync-skipped.txt")
}

/// `text` without its ANSI escape sequences (the colours `tracing` writes
/// to a terminal, or where asked to), so logs can be searched as words.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
