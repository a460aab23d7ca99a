//! runtime tests (see tests/README.md): manifests, the import policy, the
//! limits, the precompile cache and the hostile plugins of
//! `tests/hostile/plugins/`, all through the real `durasync` binary.
//!
//! Every hostile case checks three things: the documented exit status, a
//! message a person can act on, and that every granted directory (and the
//! directory outside them) is byte-for-byte what it was.

mod compile;
mod containment;
mod pins;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use durasync::digest::sha256_hex;
use durasync_test_support as support;
use support::snapshot::{Entry, snapshot_of};
use support::{sha256_of_file, shared_cache, strip_ansi};

const HOSTILE: &str = "tests/hostile/plugins/Cargo.toml";

// The documented exit statuses (docs/cli.md, host/src/cli/exit.rs).
const OK: i32 = 0;
const PLUGIN_ERROR: i32 = 10;
const PLUGIN_TRAP: i32 = 11;
const POLICY: i32 = 12;

/// The host's WIT version (from `wit/durasync.wit`) and the one the
/// `newer-minor` plugin is built for (derived from it by its `build.rs`).
fn wit_versions() -> (&'static str, String) {
    let host = durasync::runtime::policy::HOST_WIT_VERSION;
    let (head, patch) = host.rsplit_once('.').unwrap();
    (host, format!("{head}.{}", patch.parse::<u64>().unwrap() + 1))
}

fn wasm(package: &str) -> PathBuf {
    support::wasm::build(HOSTILE, package)
}

/// One plugin set up in a fresh temporary directory: `data/` (the granted
/// root, seeded), `outside/` (beside it, never granted), the manifest.
struct Fixture {
    tmp: tempfile::TempDir,
    manifest: PathBuf,
}

impl Fixture {
    fn new(package: &str, root_access: &str, limits: &str) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let bytes = std::fs::read(wasm(package)).unwrap();
        std::fs::write(dir.join("plugin.wasm"), &bytes).unwrap();
        std::fs::create_dir_all(dir.join("data/sub")).unwrap();
        std::fs::write(dir.join("data/inside"), b"inside\n").unwrap();
        std::fs::write(dir.join("data/sub/f"), b"sub file\n").unwrap();
        std::fs::create_dir_all(dir.join("outside/sub")).unwrap();
        std::fs::write(dir.join("outside/secret"), b"do not touch\n").unwrap();
        std::fs::write(dir.join("x"), b"beside the root\n").unwrap();
        let manifest = dir.join("plugin.toml");
        let text = format!(
            "name = \"{package}\"\nwasm = \"plugin.wasm\"\nsha256 = \"{}\"\n\
             [roots.data]\npath = \"data\"\naccess = \"{root_access}\"\n[limits]\n{limits}\n",
            sha256_hex(&bytes)
        );
        std::fs::write(&manifest, text).unwrap();
        Fixture { tmp, manifest }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `durasync run MANIFEST --input - ARGS` with `input` on stdin, a cache
    /// shared by the whole test binary and `DURASYNC_LOG=log`.
    fn run(&self, input: &str, args: &[&str], log: &str) -> Output {
        let mut cmd = Command::new(support::durasync());
        cmd.arg("run").arg(&self.manifest).args(["--input", "-"]).args(args);
        cmd.env("XDG_CACHE_HOME", shared_cache()).env("DURASYNC_LOG", log);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Everything under the temporary directory except the plugin itself.
    fn snapshot(&self) -> BTreeMap<String, Entry> {
        snapshot_of(self.tmp.path(), &["data", "outside", "x"])
    }
}

/// Output as text, without the terminal colour codes of the log.
fn text(b: &[u8]) -> String {
    strip_ansi(&String::from_utf8_lossy(b))
}

/// Run `input` against a fresh fixture and check status, message and that
/// nothing on disk changed. Returns stderr.
fn refused(package: &str, access: &str, limits: &str, input: &str, status: i32, needles: &[&str]) -> String {
    let fx = Fixture::new(package, access, limits);
    prepare(&fx, input);
    let before = fx.snapshot();
    let out = fx.run(input, &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{input}: stdout {}\nstderr {stderr}", text(&out.stdout));
    for needle in needles {
        assert!(stderr.contains(needle), "{input}: {needle:?} not in stderr:\n{stderr}");
    }
    assert!(!stderr.contains("ESCAPED"), "{input}: an attempt succeeded:\n{stderr}");
    assert_eq!(fx.snapshot(), before, "{input}: the granted or outside directories changed");
    stderr
}

/// Plant what a mode needs: links from the root to the outside.
fn prepare(fx: &Fixture, input: &str) {
    if input == "symlink" {
        std::os::unix::fs::symlink(fx.path("outside"), fx.path("data/link")).unwrap();
        std::os::unix::fs::symlink(fx.path("outside/secret"), fx.path("data/flink")).unwrap();
    }
}

/// The lines of the plugin's error message (one per attempt).
fn attempt_lines(stderr: &str) -> Vec<String> {
    let msg = stderr.split_once("failed: ").map_or("", |(_, m)| m);
    // Later lines of a plugin's message are indented by the host.
    msg.lines().map(|l| l.strip_prefix("  ").unwrap_or(l).to_owned()).filter(|l| !l.is_empty()).collect()
}

#[test]
fn a_plugin_using_std_fs_loads_but_has_no_file_system_to_write_to() {
    // wasi:filesystem is linked over no preopened directory: the write fails.
    let stderr = refused("uses-fs", "rw", "", "", PLUGIN_ERROR, &["No such file or directory"]);
    assert!(!Path::new("/etc/durasync-escape").exists(), "{stderr}");
}

#[test]
fn escaping_paths_and_bad_names_are_refused_as_invalid_path() {
    let stderr = refused("hostile", "rw", "", "paths", PLUGIN_ERROR, &["../x", "/etc/x", "a/../../x", "NUL"]);
    let lines = attempt_lines(&stderr);
    // 7 paths × 8 operations + 4 bad names in a file list.
    assert_eq!(lines.len(), 7 * 8 + 4, "{stderr}");
    for line in lines {
        assert!(line.contains("InvalidPath"), "not refused as invalid-path: {line}");
    }
}

#[test]
fn symlinks_planted_in_a_root_are_never_followed_out_of_it() {
    let stderr = refused("hostile", "rw", "", "symlink", PLUGIN_ERROR, &["symbolic link"]);
    let lines = attempt_lines(&stderr);
    assert_eq!(lines.len(), 3 * 8 + 2 * 6, "{stderr}");
    for line in lines {
        assert!(line.contains("InvalidPath"), "a link was not refused: {line}");
    }
}

#[test]
fn a_root_the_manifest_does_not_grant_cannot_be_opened() {
    refused("hostile", "rw", "", "ungranted", PLUGIN_ERROR, &["NotGranted", "root `secret` is not granted"]);
}

#[test]
fn a_read_only_root_refuses_every_write_but_allows_reads() {
    let stderr = refused("hostile", "ro", "", "readonly", PLUGIN_ERROR, &["read-file: allowed"]);
    let lines = attempt_lines(&stderr);
    assert_eq!(lines.len(), 6, "{stderr}");
    for line in lines.iter().filter(|l| !l.starts_with("read-file")) {
        assert!(line.contains("ReadOnly") && line.contains("read-only"), "{line}");
    }
}

#[test]
fn an_endless_loop_runs_out_of_fuel() {
    refused(
        "hostile",
        "rw",
        "fuel = 50_000_000",
        "loop",
        PLUGIN_TRAP,
        &["exceeded its CPU budget of 50000000 fuel units (limits.fuel)"],
    );
}

#[test]
fn an_endless_loop_with_unlimited_fuel_hits_the_timeout() {
    refused(
        "hostile",
        "rw",
        "fuel = \"unlimited\"\ntimeout_ms = 300",
        "loop",
        PLUGIN_TRAP,
        &["timed out after 300 ms (limits.timeout_ms)"],
    );
}

#[test]
fn allocating_past_the_memory_limit_traps_with_the_limit() {
    refused(
        "hostile",
        "rw",
        "memory_bytes = 67_108_864",
        "alloc",
        PLUGIN_TRAP,
        &["exceeded its memory limit of 64 MiB (limits.memory_bytes)"],
    );
}

#[test]
fn a_panic_shows_the_guest_panic_message() {
    refused("hostile", "rw", "", "panic", PLUGIN_TRAP, &["panicked: hostile plugin panics on purpose (at "]);
}

#[test]
fn a_log_flood_is_capped_not_fatal() {
    let fx = Fixture::new("hostile", "rw", "log_bytes = 10_000");
    let before = fx.snapshot();
    let out = fx.run("log-flood", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(OK), "{stderr}");
    assert!(text(&out.stdout).contains("flooded the log"));
    assert!(stderr.contains("log limit of 10000 bytes reached"), "{stderr}");
    assert!(stderr.contains("log messages") && stderr.contains("were dropped"), "{stderr}");
    // 20 000 messages of 1 kB were sent; about 10 kB (plus framing) get through.
    assert!(stderr.len() < 100_000, "{} bytes of log got through", stderr.len());
    assert!(stderr.contains("plugin=\"hostile\""), "messages carry the plugin's name: {stderr}");
    assert_eq!(fx.snapshot(), before);
}

#[test]
fn a_stderr_flood_does_not_kill_the_guest() {
    let fx = Fixture::new("hostile", "rw", "");
    let out = fx.run("stderr-flood", &[], "warn");
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("flooded stderr"));
}

#[test]
fn a_huge_result_is_refused_over_the_output_limit() {
    let stderr = refused(
        "hostile",
        "rw",
        "",
        "huge-result",
        PLUGIN_TRAP,
        &["over its limit of 1 MiB (limits.output_bytes)"],
    );
    assert!(stderr.len() < 10_000, "the huge result was printed");
}

#[test]
fn exceeding_the_per_run_byte_limit_fails_the_run_and_writes_nothing() {
    refused(
        "hostile",
        "rw",
        "write_bytes = 1_048_576",
        "bytes",
        PLUGIN_TRAP,
        &["exceeded its limit of 1048576 bytes written per run (limits.write_bytes)"],
    );
}

#[test]
fn exceeding_the_per_run_file_limit_fails_the_run_and_writes_nothing() {
    refused(
        "hostile",
        "rw",
        "write_files = 10",
        "files",
        PLUGIN_TRAP,
        &["exceeded its limit of 10 files written per run (limits.write_files)"],
    );
}

#[test]
fn a_plugin_built_for_a_newer_minor_calling_a_missing_function_is_refused_precisely() {
    let (host, newer) = wit_versions();
    refused(
        "newer-minor",
        "rw",
        "",
        "",
        POLICY,
        &[
            &format!("durasync:plugin@{newer}"),
            &format!("durasync:plugin/fs@{newer}"),
            "[method]dir.rename",
            &format!("durasync:plugin@{host}"),
        ],
    );
}

#[test]
fn a_sha256_mismatch_refuses_to_load() {
    let fx = Fixture::new("noop", "rw", "");
    let text_before = std::fs::read_to_string(&fx.manifest).unwrap();
    let real = sha256_of_file(&fx.path("plugin.wasm"));
    std::fs::write(&fx.manifest, text_before.replace(&real, &"0".repeat(64))).unwrap();
    let out = fx.run("", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(POLICY), "{stderr}");
    assert!(stderr.contains("sha256 is") && stderr.contains("refusing to load"), "{stderr}");
}

#[test]
fn a_manifest_with_an_unknown_key_is_refused_naming_it() {
    let fx = Fixture::new("noop", "rw", "fule = 1");
    let out = fx.run("", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(POLICY), "{stderr}");
    assert!(stderr.contains("`limits.fule` unknown key"), "{stderr}");
}

#[test]
fn a_missing_root_directory_is_refused_naming_the_root() {
    let fx = Fixture::new("noop", "rw", "");
    std::fs::remove_dir_all(fx.path("data")).unwrap();
    let out = fx.run("", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(POLICY), "{stderr}");
    assert!(stderr.contains("`roots.data.path`"), "{stderr}");
}

#[test]
fn a_run_reports_every_durable_operation() {
    let fx = Fixture::new("hostile", "rw", "");
    let out = fx.run("write", &[], "warn");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("synced: Report"), "{stdout}");
    assert!(lines[1].starts_with("created data:secrets/tls: 2 written, 0 removed ("), "{stdout}");
    assert!(lines[2].starts_with("created data:manifest.yaml: 1 written, 0 removed ("), "{stdout}");
    assert_eq!(std::fs::read(fx.path("data/secrets/tls/tls.key")).unwrap(), b"k");
    let mode = std::fs::metadata(fx.path("data/secrets/tls/tls.key")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    // Again: nothing to do, and JSON says so.
    let out = fx.run("write", &["--json"], "warn");
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["plugin"], "hostile");
    let ops = v["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0]["root"], "data");
    assert_eq!(ops[0]["path"], "secrets/tls");
    assert_eq!(ops[0]["op"], "sync");
    assert_eq!(ops[0]["outcome"], "unchanged");
    assert_eq!(ops[0]["written"], 0);
    assert!(ops[0]["ms"].is_number());
}

#[test]
fn a_dry_run_changes_nothing_and_lists_the_plan() {
    let fx = Fixture::new("hostile", "rw", "");
    let before = fx.snapshot();
    let out = fx.run("write", &["--dry-run"], "warn");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert_eq!(fx.snapshot(), before, "a dry run changed the disk");
    assert!(stdout.contains("dry run: nothing was changed"), "{stdout}");
    // The plugin saw the report as if it had happened.
    assert!(stdout.contains("synced: Report { outcome: Outcome::Created, written: 2"), "{stdout}");
    assert!(stdout.contains("created data:secrets/tls: 2 written"), "{stdout}");
    assert!(stdout.contains("  + tls.crt\n  + tls.key\n"), "{stdout}");
    assert!(stdout.contains("  + manifest.yaml\n"), "{stdout}");
    // Once written, a changed file shows as changed and a stray one as removed.
    assert_eq!(fx.run("write", &[], "warn").status.code(), Some(OK));
    std::fs::write(fx.path("data/secrets/tls/tls.crt"), b"old").unwrap();
    std::fs::write(fx.path("data/secrets/tls/stray"), b"stray").unwrap();
    let before = fx.snapshot();
    let out = fx.run("write", &["--dry-run", "--json"], "warn");
    assert_eq!(fx.snapshot(), before);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &v["operations"][0]["plan"];
    assert_eq!(plan["changed"], serde_json::json!(["tls.crt"]));
    assert_eq!(plan["removed"], serde_json::json!(["stray"]));
    assert_eq!(v["operations"][0]["outcome"], "replaced");
    assert_eq!(v["operations"][1]["outcome"], "unchanged");
}

#[test]
fn root_overrides_point_a_root_elsewhere_keeping_its_access() {
    let fx = Fixture::new("hostile", "ro", "");
    std::fs::create_dir(fx.path("other")).unwrap();
    std::fs::write(fx.path("other/inside"), b"o").unwrap();
    std::fs::create_dir(fx.path("other/sub")).unwrap();
    let other = fx.path("other");
    let arg = format!("data={}", other.display());
    let out = fx.run("readonly", &["--root", &arg], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(PLUGIN_ERROR), "{stderr}");
    assert!(stderr.contains("read-only") && stderr.contains("read-file: allowed"), "{stderr}");
}

/// The one `.cwasm` file in a cache directory.
fn artifact(cache: &Path) -> PathBuf {
    let dir = cache.join("durasync");
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

fn run_with_cache(fx: &Fixture, cache: &Path) -> Output {
    Command::new(support::durasync())
        .arg("run")
        .arg(&fx.manifest)
        .env("XDG_CACHE_HOME", cache)
        .env("DURASYNC_LOG", "info")
        .output()
        .unwrap()
}

#[test]
fn a_cached_artifact_from_another_engine_config_is_recompiled_not_trusted() {
    let fx = Fixture::new("noop", "rw", "");
    let cache = fx.path("cache");
    let out = run_with_cache(&fx, &cache);
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    // Winch's artifact first, then Cranelift's in its place.
    compile::upgraded(&cache.join("durasync"));
    let path = artifact(&cache);
    let good = std::fs::read(&path).unwrap();
    // Hit: nothing recompiled.
    let out = run_with_cache(&fx, &cache);
    assert!(!text(&out.stderr).contains("recompiling"), "{}", text(&out.stderr));
    // An artifact of the same component from an engine without fuel/epochs.
    let wasm = std::fs::read(fx.path("plugin.wasm")).unwrap();
    let engine = wasmtime::Engine::new(&wasmtime::Config::new()).unwrap();
    let foreign = engine.precompile_component(&wasm).unwrap();
    assert_ne!(foreign, good);
    // Winch's artifact of the same component, same settings otherwise.
    let winch = durasync::runtime::compiler::engine(durasync::runtime::compiler::Compiler::Winch).unwrap();
    let by_winch = winch.precompile_component(&wasm).unwrap();
    for (what, bytes) in
        [("another config", foreign), ("Winch's", by_winch), ("garbage", b"\0asm not really".to_vec())]
    {
        std::fs::write(&path, &bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = run_with_cache(&fx, &cache);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(OK), "{what}: {stderr}");
        assert!(stderr.contains("recompiling"), "{what}: {stderr}");
        assert!(text(&out.stdout).contains("nothing to do"));
        compile::upgraded(&cache.join("durasync"));
        assert_ne!(std::fs::read(&path).unwrap(), bytes, "{what}: the bad artifact was kept");
    }
}

#[test]
fn no_cache_never_writes_the_cache() {
    let fx = Fixture::new("noop", "rw", "");
    let cache = fx.path("cache");
    let out = Command::new(support::durasync())
        .arg("run")
        .arg(&fx.manifest)
        .arg("--no-cache")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert!(!cache.exists());
}

fn inspect(target: &Path, json: bool) -> Output {
    let mut cmd = Command::new(support::durasync());
    cmd.arg("inspect").arg(target).env("XDG_CACHE_HOME", shared_cache());
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

#[test]
fn inspect_shows_hash_version_imports_exports_policy_and_describe() {
    let fx = Fixture::new("hostile", "rw", "");
    let out = inspect(&fx.manifest, true);
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sha256"], sha256_of_file(&fx.path("plugin.wasm")));
    let (host, _) = wit_versions();
    assert_eq!(v["wit_version"], host);
    assert_eq!(v["policy"], "pass");
    assert!(v["imports"].as_array().unwrap().iter().any(|i| *i == format!("durasync:plugin/fs@{host}")));
    assert!(v["exports"].as_array().unwrap().iter().any(|e| e == "run"));
    assert_eq!(v["describe"]["name"], "hostile");
    assert_eq!(v["describe"]["roots"], serde_json::json!(["data"]));
    let out = inspect(&fx.path("plugin.wasm"), false);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("policy:      pass") && stdout.contains("summary: tries to escape"), "{stdout}");
}

#[test]
fn inspect_of_a_forbidden_plugin_names_the_import_and_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let forbidden = tmp.path().join("http.wasm");
    std::fs::write(&forbidden, support::component::component_importing(&["wasi:http/types@0.2.4"])).unwrap();
    let out = inspect(&forbidden, false);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(POLICY), "{}", text(&out.stderr));
    assert!(stdout.contains("policy:      FAIL") && stdout.contains("`wasi:http/types@0.2.4`"), "{stdout}");
    let out = inspect(&wasm("newer-minor"), true);
    assert_eq!(out.status.code(), Some(POLICY));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["wit_version"], wit_versions().1);
    assert!(v["problems"][0].as_str().unwrap().contains("[method]dir.rename"), "{v}");
}
