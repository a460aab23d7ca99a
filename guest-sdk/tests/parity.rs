//! Parity: one script of host calls — successes, every error kind a test
//! can provoke, links, budgets, the depth limit, special modes, a dry run —
//! run through `durasync`'s real runtime (the script plugin as a component)
//! and through the SDK's native harness (the same plugin linked natively)
//! gives identical results, errors, operation records and disk state.
//! A rule changed on one side only makes this test fail.

use std::collections::BTreeMap;
use std::path::Path;

use durasync::runtime::{CacheConfig, Manifest, Operation, RunRequest, Runtime};
use durasync_guest::testing::{Host, PluginLimits};
use durasync_test_support::snapshot::{Entry, snapshot_of};
use durasync_test_support::{shared_cache, wasm};
use parity_plugin::Script;

/// Everything one side of a comparison produced.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The transcript, or the error the run failed with (kind and text).
    result: Result<String, String>,
    /// The operation records, times zeroed.
    records: Vec<Operation>,
    /// Kind, mode and bytes of everything in the roots.
    disk: BTreeMap<String, Entry>,
}

/// How the two fixtures are seeded: `data` (rw), `ro` (read-only) and
/// `outside` beside them, with a link out of `data` and a fifo in it.
fn seed(roots: &Path) {
    for d in ["data/sub", "ro", "outside"] {
        std::fs::create_dir_all(roots.join(d)).unwrap();
    }
    std::fs::write(roots.join("data/file"), b"old\n").unwrap();
    std::fs::write(roots.join("data/sub/f"), b"sub\n").unwrap();
    std::fs::write(roots.join("ro/in"), b"read me\n").unwrap();
    std::fs::write(roots.join("outside/secret"), b"secret\n").unwrap();
    std::os::unix::fs::symlink("../outside", roots.join("data/link")).unwrap();
    let fifo = std::process::Command::new("mkfifo").arg(roots.join("data/fifo")).status().unwrap();
    assert!(fifo.success(), "mkfifo failed");
}

fn disk(roots: &Path) -> BTreeMap<String, Entry> {
    let out = snapshot_of(roots, &["data", "ro", "outside"]);
    // Leftover names are random; none may remain after a run.
    let leftovers: Vec<&String> = out.keys().filter(|k| k.contains("/.durasync-")).collect();
    assert!(leftovers.is_empty(), "leftovers remained: {leftovers:?}");
    out
}

fn zero_times(mut ops: Vec<Operation>) -> Vec<Operation> {
    for op in &mut ops {
        op.ms = 0.0;
    }
    ops
}

/// A fixture's settings: the manifest's `[limits]` lines, the per-run
/// limits they mean, whether `data` grants special modes, dry run.
#[derive(Clone, Copy, Default)]
struct Setup {
    write_files: Option<u64>,
    special_modes: bool,
    dry_run: bool,
}

impl Setup {
    fn limits(self) -> PluginLimits {
        let mut limits = PluginLimits::default();
        if let Some(n) = self.write_files {
            limits.write_files = n;
        }
        limits
    }
}

/// The script through `durasync`'s runtime.
fn through_runtime(setup: Setup, script: &str) -> Outcome {
    let component = wasm::build("Cargo.toml", "parity-plugin");
    let tmp = tempfile::tempdir().unwrap();
    let roots = tmp.path().join("roots");
    seed(&roots);
    let bytes = std::fs::read(&component).unwrap();
    let mut text = format!(
        "name = \"parity\"\nwasm = \"{}\"\nsha256 = \"{}\"\n\
         [roots.data]\npath = \"roots/data\"\naccess = \"rw\"\nspecial_modes = {}\n\
         [roots.ro]\npath = \"roots/ro\"\naccess = \"ro\"\n[limits]\n",
        component.display(),
        durasync::digest::sha256_hex(&bytes),
        setup.special_modes
    );
    if let Some(n) = setup.write_files {
        text.push_str(&format!("write_files = {n}\n"));
    }
    let manifest = Manifest::parse(&text, &tmp.path().join("plugin.toml")).unwrap();
    let runtime = Runtime::new(&CacheConfig::Dir(shared_cache())).unwrap();
    let plugin = runtime.load_manifest(&manifest).unwrap();
    let request = RunRequest::from_manifest(&manifest, script.as_bytes().to_vec(), setup.dry_run).unwrap();
    let (result, records) = match plugin.run(&request) {
        Ok(outcome) => (Ok(outcome.result), outcome.operations),
        Err(e) => (Err(limit_of(&e.to_string())), e.operations().to_vec()),
    };
    Outcome { result, records: zero_times(records), disk: disk(&roots) }
}

/// The script through the SDK's native harness.
fn through_harness(setup: Setup, script: &str) -> Outcome {
    let host = Host::new().named("parity").limits(setup.limits()).dry_run(setup.dry_run).read_only_root("ro");
    let host = if setup.special_modes { host.root_with_special_modes("data") } else { host.root("data") };
    let roots = host.path("data").parent().unwrap().to_path_buf();
    seed(&roots);
    let run = host.run::<Script>("{}", script.as_bytes());
    // The real host fails a run that hit a per-run limit, whatever it returned.
    let result = match run.limit {
        Some(limit) => Err(limit),
        None => run.result.clone(),
    };
    Outcome { result, records: zero_times(run.records.clone()), disk: disk(&roots) }
}

/// The limit's message in a runtime error (`plugin parity exceeded …`).
fn limit_of(error: &str) -> String {
    error.strip_prefix("plugin parity ").unwrap_or(error).to_owned()
}

fn assert_parity(setup: Setup, script: &str) -> Outcome {
    let real = through_runtime(setup, script);
    let native = through_harness(setup, script);
    if let (Ok(a), Ok(b)) = (&real.result, &native.result) {
        for (x, y) in a.lines().zip(b.lines()) {
            assert_eq!(x, y, "the first differing call");
        }
    }
    assert_eq!(real.result, native.result, "results differ");
    assert_eq!(real.records, native.records, "operation records differ");
    assert_eq!(real.disk, native.disk, "disk states differ");
    real
}

const CALLS: &str = "
open data
open ro
open secret
# successes
sync 0 t/a a=1:600 sub/b=2:755
sync 0 t/a a=1:600 sub/b=2:755
sync 0 t/a a=one:644
write 0 m/pod.yaml v1 600
write 0 m/pod.yaml v1 600
write 0 m/pod.yaml v2 600
read 0 m/pod.yaml
read 0 m/none
list 0 ''
list 0 t/a
dir 0 t
sync 2 a x=in-handle:644
fsync 0 t/a
fsync 0 .
exchange 0 t/a m
remove 0 m/a
remove 0 no/such/parent
remove 0 file
# invalid-path: escapes, bad names, links, bad modes, special modes
sync 0 ../x f=x:644
write 0 /etc/x x 644
read 0 a/../../x
sync 0 d ../f=x:644
sync 0 link/x f=x:644
write 0 link x 644
read 0 link/secret
list 0 link
write 0 bad x 10000
write 0 suid x 4755
sync 0 s f=x:2644
exchange 0 t t/sub
# not-granted, read-only (reads and fsync allowed)
write 1 in x 644
sync 1 d f=x:644
remove 1 in
exchange 1 in other
read 1 in
fsync 1 in
# not-found, not-a-directory, io
list 0 none
exchange 0 t none
fsync 0 none
list 0 sub/f
sync 0 sub/f/x f=x:644
read 0 fifo
read 0 sub
# a handle whose directory is removed
dir 0 gone-soon
sync 0 gone-soon f=x:644
dir 0 gone-soon
remove 0 gone-soon
list 3 ''
write 3 f x 644
# the depth limit, counted from the root, also for what an exchange moves
deep 0 80
sync 0 m2/y f=1:644
exchange 0 d m2/y
exchange 0 m2/y d
";

#[test]
fn the_runtime_and_the_native_harness_agree_on_every_call() {
    let out = assert_parity(Setup::default(), CALLS);
    let transcript = out.result.unwrap();
    // The script reached what it means to test.
    let depth_limit = format!("stopped at level {}: Limit(", durasync::durable::names::MAX_DEPTH);
    for needle in [
        "InvalidPath(\"invalid path \\\"../x\\\"",
        "NotGranted(\"root `secret` is not granted to plugin parity (granted: data, ro)\")",
        "ReadOnly(",
        "NotFound(",
        "NotADirectory(",
        "Io(",
        "sets setuid",
        "one contains the other",
        "of this handle was removed",
        depth_limit.as_str(),
        "exchanging would move \\\"d\\\" 1 level deeper",
        "Ok(Report { outcome: Unchanged",
        "Ok(Report { outcome: Replaced",
        "Ok(Report { outcome: Created",
    ] {
        assert!(transcript.contains(needle), "{needle:?} not in the transcript:\n{transcript}");
    }
}

#[test]
fn a_dry_run_plans_the_same_on_both_sides_and_changes_nothing() {
    let before = {
        let tmp = tempfile::tempdir().unwrap();
        seed(tmp.path());
        disk(tmp.path())
    };
    let out = assert_parity(Setup { dry_run: true, ..Setup::default() }, CALLS);
    assert_eq!(out.disk, before, "a dry run changed the disk");
    assert!(out.records.iter().any(|r| r.plan.is_some()), "{:?}", out.records);
}

#[test]
fn per_run_budgets_fail_the_run_the_same_way_on_both_sides() {
    let script =
        "open data\nsync 0 a f=1:644 g=2:644\nsync 0 b f=1:644 g=2:644\nwrite 0 c x 644\nread 0 a/f\n";
    let out = assert_parity(Setup { write_files: Some(3), ..Setup::default() }, script);
    let err = out.result.unwrap_err();
    assert!(err.contains("exceeded its limit of 3 files written per run (limits.write_files)"), "{err}");
}

#[test]
fn special_modes_granted_per_root_are_allowed_on_both_sides() {
    let script = "open data\nwrite 0 tool x 4755\nsync 0 shared f=x:1777\n";
    let out = assert_parity(Setup { special_modes: true, ..Setup::default() }, script);
    let transcript = out.result.unwrap();
    assert!(!transcript.contains("Err("), "{transcript}");
}
