//! Helpers shared by the test binaries under `tests/` (each a `[[test]]` of
//! `host/Cargo.toml`) and the guest SDK's parity test: a dev-dependency
//! that links the same `durasync` library they do, so its types are theirs.
//! A test binary names it `use durasync_test_support as support;`.

pub mod component;
pub mod fake_registry;
pub mod go_proxy;
pub mod go_toolchain;
pub mod http_server;
pub mod oci_artifacts;
pub mod peak;
pub mod referrers;
pub mod registry;
pub mod sigstore;
pub mod snapshot;
pub mod toolchains;
pub mod wasm;

use std::path::{Path, PathBuf};

/// The `durasync` binary built for this test run: `cargo test` (1.94 and
/// later) sets `CARGO_BIN_EXE_durasync` in the environment of the
/// `durasync` package's test binaries it runs.
pub fn durasync() -> PathBuf {
    std::env::var_os("CARGO_BIN_EXE_durasync").map(PathBuf::from).expect(
        "CARGO_BIN_EXE_durasync is not set: run the test binary through `cargo test -p durasync`, \
         or set it to the durasync binary",
    )
}

/// The workspace root (the folder holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support/ has a grandparent")
        .to_path_buf()
}

/// The name of the running test binary (`agent` for `target/debug/deps/agent-<hash>`).
pub fn test_binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| n.rsplit_once('-').map_or(n.clone(), |(name, _hash)| name.to_owned()))
        .unwrap_or_default()
}

/// An `XDG_CACHE_HOME` shared by the whole test binary,
/// `target/wasm/<binary>-test-cache` (mode 0700, as durasync wants its
/// cache), so only the first load of a component compiles it.
pub fn shared_cache() -> PathBuf {
    let dir = wasm::target_dir().join(format!("{}-test-cache", test_binary()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

/// Standard output then standard error of a finished command, for messages.
pub fn output_text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Whether `tool` is on PATH.
pub fn on_path(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `tool` is on PATH; if not, [`cannot_check`] (fails under CI).
pub fn have(tool: &str) -> bool {
    let found = on_path(tool);
    if !found {
        cannot_check(&format!("`{tool}` is not installed"));
    }
    found
}

/// The SHA-256 of the file at `path`, as a manifest's `sha256` pins it.
pub fn sha256_of_file(path: &Path) -> String {
    durasync::digest::sha256_hex(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Every entry beneath `dir` whose name starts with `.durasync` (the lock,
/// markers, staging and trash, kept previous trees), in no set order;
/// entries inside such an entry are not listed. The callers pick which of
/// them count as leftovers.
pub fn durasync_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries {
        let e = e.unwrap();
        if e.file_name().as_encoded_bytes().starts_with(b".durasync") {
            out.push(e.path());
        } else if e.file_type().unwrap().is_dir() {
            out.extend(durasync_entries(&e.path()));
        }
    }
    out
}

/// Standard base64 (RFC 4648, padded), for Kubernetes objects and the like.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
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
    let line = format!("{} {test}: {why}", test_binary());
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
