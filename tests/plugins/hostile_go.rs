//! A hostile Go plugin (`tests/hostile/go/plugin.go`) makes, one per run,
//! the attempts of the hostile Python one (`hostile_python.rs`, whose
//! fixture it uses): read, list and write the host's files, connect a
//! socket, resolve a name, read the environment, allocate without bound,
//! sleep past its deadline, loop past its CPU budget, exit the process,
//! panic, and leave its root through the host API. Each is contained with a
//! message naming how, and the granted root, the folder beside it and the
//! host's files are byte-for-byte unchanged.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use super::hostile_python::{
    Fixture, PLUGIN_ERROR, PLUGIN_TRAP, assert_real_clock_and_fresh_randomness, check_failed,
};
use support::toolchains::{Lang, Source};

use super::support;

const HOSTILE_GO: Source = Source { name: "hostile-go", lang: Lang::Go, dir: "tests/hostile/go", flags: &[] };

fn fixture(limits: &str) -> Fixture {
    Fixture::of(&HOSTILE_GO, limits)
}

#[test]
fn go_cannot_read_list_or_write_the_host_file_system() {
    let fx = fixture("");
    // No preopened directory: Go's wasip1 `os` has no descriptor to resolve any path against.
    check_failed(&fx, "open", PLUGIN_ERROR, "open: open /etc/passwd: Bad file number");
    check_failed(&fx, "listdir", PLUGIN_ERROR, "listdir: open /: Bad file number");
    check_failed(&fx, "write", PLUGIN_ERROR, "write: open /tmp/durasync-go-escape: Bad file number");
    assert!(!Path::new("/tmp/durasync-go-escape").exists());
}

#[test]
fn go_cannot_connect_a_socket_or_resolve_a_name() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let fx = fixture("");
    // Go's `net` on wasip1 is an in-process fake network: nothing it does
    // reaches the host's sockets (the listener below is never connected to).
    check_failed(&fx, &format!("socket {addr}"), PLUGIN_ERROR, &format!("socket: dial tcp {addr}: "));
    check_failed(&fx, &format!("socket {addr}"), PLUGIN_ERROR, "connect: Connection refused");
    check_failed(&fx, "resolve localhost", PLUGIN_ERROR, "resolve: lookup localhost");
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the plugin reached the listener: {other:?}"),
    }
}

#[test]
fn go_sees_no_environment_no_arguments_and_the_real_clock_and_fresh_randomness() {
    let fx = fixture("");
    let (status, stdout, stderr) = fx.attempt("environ");
    assert_eq!(status, 0, "{stderr}");
    let seen: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(seen, serde_json::json!({"environ": [], "argv": [], "cwd": ""}));

    assert_real_clock_and_fresh_randomness(&fx);
}

#[test]
fn go_allocating_without_bound_hits_the_memory_limit() {
    let fx = fixture("memory_bytes = 134_217_728");
    check_failed(&fx, "alloc", PLUGIN_TRAP, "exceeded its memory limit of 128 MiB");
}

#[test]
fn go_sleeping_an_hour_is_stopped_at_its_deadline() {
    let fx = fixture("timeout_ms = 1500");
    let start = Instant::now();
    check_failed(&fx, "sleep", PLUGIN_TRAP, "timed out after");
    // The sleep ends at the deadline instead of blocking the host for an hour.
    assert!(start.elapsed() < Duration::from_secs(60), "{:?}", start.elapsed());
}

#[test]
fn go_looping_forever_is_stopped_by_its_cpu_budget() {
    let fx = fixture("fuel = 200_000_000\ntimeout_ms = 120_000");
    check_failed(&fx, "loop", PLUGIN_TRAP, "exceeded its CPU budget");
}

/// `os.Exit(0)` is `wasi:cli/exit` with status 0: the host ends that run,
/// reports it (as it does for any language), and nothing was changed.
#[test]
fn go_exiting_the_process_ends_only_its_own_run() {
    let fx = fixture("");
    let (status, stdout, stderr) = fx.attempt("exit");
    assert_eq!(status, 0, "stdout {stdout}\nstderr {stderr}");
    assert!(stdout.contains("exited with status 0 without returning a result"), "{stdout}");
}

#[test]
fn an_uncaught_go_panic_is_shown_with_its_message() {
    let fx = fixture("");
    let (status, stdout, stderr) = fx.attempt("uncaught");
    assert_eq!(status, PLUGIN_TRAP, "stdout {stdout}\nstderr {stderr}");
    // The reason, then the panic and the goroutine trace the Go runtime printed.
    let reason = stderr.find("trapped").unwrap_or_else(|| panic!("no reason in:\n{stderr}"));
    let panic = stderr.find("panic: uncaught-marker").unwrap_or_else(|| panic!("no panic in:\n{stderr}"));
    assert!(reason < panic, "{stderr}");
    assert!(stderr.contains("export_wit_world/plugin.go:"), "{stderr}");
}

#[test]
fn go_escaping_its_root_through_the_host_api_is_an_invalid_path() {
    let fx = fixture("");
    check_failed(&fx, "escape-root", PLUGIN_ERROR, "escape-root: invalid-path: invalid path \"../escaped\"");
    assert!(!fx.tmp.path().join("escaped").exists());
}
