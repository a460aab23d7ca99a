//! A hostile Python plugin (`tests/hostile/python/app.py`, componentize-py's
//! default build) tries, one attempt per run, to read and write files, list
//! `/`, connect a socket, resolve a name, read the environment, allocate
//! without bound and sleep past its deadline. Each attempt fails with a
//! message naming how, and the granted root, the folder beside it and the
//! host's files are byte-for-byte unchanged.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::languages::ready;
use super::{files, sha256_of_file, support};
use support::toolchains::{Lang, Source};

pub const HOSTILE_PY: Source =
    Source { name: "hostile-py", lang: Lang::Python, dir: "tests/hostile/python", flags: &[] };

pub const PLUGIN_ERROR: i32 = 10;
pub const PLUGIN_TRAP: i32 = 11;

/// A secret in the host's environment that the plugin must never see.
pub const SECRET: (&str, &str) = ("DURASYNC_TEST_SECRET", "hunter2-do-not-leak");

/// A hostile plugin (of any language) with a granted root, run one attempt
/// at a time (`tests/plugins/hostile_go.rs` uses it too).
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    manifest: PathBuf,
}

impl Fixture {
    /// `data/` (granted rw, seeded), `outside/` beside it, the manifest.
    fn new(limits: &str) -> Fixture {
        Fixture::of(&HOSTILE_PY, limits)
    }

    /// The same for the plugin built from `source`.
    pub fn of(source: &Source, limits: &str) -> Fixture {
        let wasm = ready(source).wasm;
        let tmp = tempfile::Builder::new().prefix(&format!("durasync-{}-", source.name)).tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("data/sub")).unwrap();
        std::fs::write(tmp.path().join("data/inside"), b"inside\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), b"do not touch\n").unwrap();
        let manifest = tmp.path().join("plugin.toml");
        let text = format!(
            "name = \"{}\"\nwasm = \"{}\"\nsha256 = \"{}\"\n\
             [roots.data]\npath = \"data\"\naccess = \"rw\"\n[limits]\n{limits}\n",
            source.name,
            wasm.display(),
            sha256_of_file(&wasm)
        );
        std::fs::write(&manifest, text).unwrap();
        Fixture { tmp, manifest }
    }

    /// Everything beneath the fixture but the manifest, lock files left out.
    fn snapshot(&self) -> BTreeMap<String, (u32, Vec<u8>)> {
        let mut all = files(self.tmp.path());
        all.remove("plugin.toml");
        all
    }

    /// Run one attempt; returns (status, stdout, stderr). Checks that
    /// nothing on disk changed and that the secret never shows.
    pub fn attempt(&self, input: &str) -> (i32, String, String) {
        let before = self.snapshot();
        let out = Command::new(support::durasync())
            .arg("run")
            .arg(&self.manifest)
            .args(["--input", "-"])
            .env("XDG_CACHE_HOME", support::shared_cache())
            .env(SECRET.0, SECRET.1)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(input.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(self.snapshot(), before, "{input}: the root or the folder beside it changed\n{stderr}");
        assert!(!stdout.contains(SECRET.1) && !stderr.contains(SECRET.1), "{input}: the secret leaked");
        (out.status.code().unwrap_or(-1), stdout, stderr)
    }
}

#[track_caller]
/// Two runs of `clock-and-random`: the guest's wall clock is the host's,
/// and each run draws other random bytes (a fixed seed is a key hazard).
pub fn assert_real_clock_and_fresh_randomness(fx: &Fixture) {
    let mut randoms = Vec::new();
    for _ in 0..2 {
        let (status, stdout, stderr) = fx.attempt("clock-and-random");
        assert_eq!(status, 0, "{stderr}");
        let v: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let time = v["time"].as_f64().unwrap();
        assert!((now - time).abs() < 60.0, "the guest's wall clock says {time}, the host's {now}");
        randoms.push(v["random"].as_str().unwrap().to_owned());
    }
    assert_eq!(randoms[0].len(), 32);
    assert_ne!(randoms[0], randoms[1], "two runs drew the same random bytes");
}

pub fn check_failed(fx: &Fixture, input: &str, status: i32, message: &str) {
    let (got, stdout, stderr) = fx.attempt(input);
    assert_eq!(got, status, "{input}: stdout {stdout}\nstderr {stderr}");
    assert!(stderr.contains(message), "{input}: {message:?} not in:\n{stderr}");
}

#[test]
fn python_cannot_read_list_or_write_the_host_file_system() {
    let fx = Fixture::new("");
    check_failed(
        &fx,
        "open",
        PLUGIN_ERROR,
        "open: FileNotFoundError: [Errno 44] No such file or directory: '/etc/passwd'",
    );
    check_failed(
        &fx,
        "listdir",
        PLUGIN_ERROR,
        "listdir: FileNotFoundError: [Errno 44] No such file or directory: '/'",
    );
    check_failed(
        &fx,
        "write",
        PLUGIN_ERROR,
        "write: FileNotFoundError: [Errno 44] No such file or directory",
    );
    assert!(!Path::new("/tmp/durasync-python-escape").exists());
}

#[test]
fn python_cannot_connect_a_socket_or_resolve_a_name() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let fx = Fixture::new("");
    check_failed(&fx, &format!("socket {addr}"), PLUGIN_ERROR, "socket: PermissionError");
    check_failed(&fx, "resolve localhost", PLUGIN_ERROR, "resolve: gaierror");
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the plugin reached the listener: {other:?}"),
    }
}

#[test]
fn python_sees_no_environment_no_arguments_and_the_real_clock_and_fresh_randomness() {
    let fx = Fixture::new("");
    let (status, stdout, stderr) = fx.attempt("environ");
    assert_eq!(status, 0, "{stderr}");
    let seen: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(seen, serde_json::json!({"environ": {}, "argv": [], "cwd": "/"}));

    assert_real_clock_and_fresh_randomness(&fx);
}

#[test]
fn python_allocating_without_bound_hits_the_memory_limit() {
    let fx = Fixture::new("memory_bytes = 134_217_728");
    check_failed(&fx, "alloc", PLUGIN_TRAP, "exceeded its memory limit of 128 MiB");
}

#[test]
fn python_sleeping_an_hour_is_stopped_at_its_deadline() {
    let fx = Fixture::new("timeout_ms = 1500");
    let start = Instant::now();
    check_failed(&fx, "sleep", PLUGIN_TRAP, "timed out after");
    // The sleep ends at the deadline instead of blocking the host for an hour.
    assert!(start.elapsed() < Duration::from_secs(60), "{:?}", start.elapsed());
}

#[test]
fn an_uncaught_python_exception_is_shown_with_its_traceback() {
    let fx = Fixture::new("");
    let (status, stdout, stderr) = fx.attempt("uncaught");
    assert_eq!(status, PLUGIN_TRAP, "stdout {stdout}\nstderr {stderr}");
    // The reason first, then the traceback the guest printed before trapping.
    let reason = stderr.find("panicked").unwrap_or_else(|| panic!("no reason in:\n{stderr}"));
    let traceback = stderr.find("Traceback").unwrap_or_else(|| panic!("no traceback in:\n{stderr}"));
    assert!(reason < traceback, "{stderr}");
    assert!(stderr.contains("KeyError: 'uncaught-marker'"), "{stderr}");
}

#[test]
fn python_escaping_its_root_through_the_host_api_is_an_invalid_path() {
    let fx = Fixture::new("");
    check_failed(&fx, "escape-root", PLUGIN_ERROR, "escape-root: host error Error_InvalidPath");
    assert!(!fx.tmp.path().join("escaped").exists());
}
