//! Validators and guardrails (docs/hooks.md, "Validators and actions"): real
//! commands (`python3` checking JSON, `openssl x509 -noout` checking a
//! certificate) run on the staged tree before the swap; a refusal leaves
//! the target byte for byte unchanged, fails the run, and `/readyz` and
//! `durasync_agent_rejections_total` name who refused.

use std::path::Path;
use std::process::Command;

use super::{Agent, Node, base64, certsync_wasm, leftovers, sha256_of_file, support};

/// No retry on its own within a test: every run is one input change.
const SCHEDULE: &str = "[schedule]\ninterval = \"1h\"\nbackoff_min = \"1h\"\nbackoff_max = \"1h\"\n";

/// A List with configmap `app` holding `data` (key → text).
fn configmap_list(data: &[(&str, &str)]) -> Vec<u8> {
    let data: Vec<String> = data.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
    format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"app","namespace":"ns"}},"data":{{{}}}}}]}}"#,
        data.join(",")
    )
    .into_bytes()
}

/// A List with secret `tls` holding tls.crt and tls.key.
fn secret_list(crt: &[u8], key: &[u8]) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"tls","namespace":"ns"}},"data":{{"tls.crt":{:?},"tls.key":{:?}}}}}]}}"#,
        base64(crt),
        base64(key)
    )
    .into_bytes()
}

fn manifest(node: &Node, name: &str, root_extra: &str, config: &str, hooks: &str) -> String {
    let wasm = certsync_wasm();
    format!(
        "name = \"{name}\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\n{root_extra}\n\
         [config]\n{config}\n[input]\nfile = \"{}\"\n{SCHEDULE}{hooks}",
        wasm.display(),
        sha256_of_file(&wasm),
        node.root(name).display(),
        node.input(name).display(),
    )
}

/// Every entry beneath `dir` (kind, mode, bytes) and the inode of `dir`
/// itself: a swap, even of identical bytes, would change it.
fn snap(dir: &Path) -> (u64, support::snapshot::Snapshot) {
    use std::os::unix::fs::MetadataExt;
    (std::fs::metadata(dir).unwrap().ino(), support::snapshot::snapshot(dir))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const JSON_CHECK: &str = r#"[[validate]]
name = "json"
root = "certs"
path = "configmaps/*"
command = ["python3", "-c", "import json, sys; json.load(open(sys.argv[1]))", "{staged}/app.json"]
timeout_ms = 60000
"#;

#[test]
fn a_json_validator_and_the_guardrails_refuse_bad_configs_and_the_target_stays_byte_for_byte() {
    if Command::new("python3").arg("-c").arg("import json").output().is_err() {
        return support::cannot_check("python3 is not installed");
    }
    let node = Node::new();
    std::fs::create_dir_all(node.root("app")).unwrap();
    let good = |v: u32| {
        let json = format!("{{\"version\": {v}}}");
        configmap_list(&[("app.json", &json), ("b", "b"), ("c", "c"), ("d", "d")])
    };
    node.replace(&node.input("app"), &good(1));
    let guard = "min_files = 1\nmax_removed_fraction = 0.5\n";
    let text = manifest(&node, "app", guard, "configmaps = [{ name = \"app\" }]", JSON_CHECK);
    node.replace(&node.manifest("app"), text.as_bytes());
    let agent = Agent::start(&node, &[]);
    let target = node.root("app").join("configmaps/app");
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"app\",result=\"ok\"}", 1.0);
    agent.wait_ready(200);
    assert_eq!(read(&target.join("app.json")), b"{\"version\": 1}");
    let before = snap(&target);

    // Broken JSON: refused by the validator with python's complaint.
    node.replace(
        &node.input("app"),
        &configmap_list(&[("app.json", "{\"version\": "), ("b", "b"), ("c", "c"), ("d", "d")]),
    );
    agent
        .wait_metric("durasync_agent_rejections_total{durasync_instance=\"app\",by=\"validator json\"}", 1.0);
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"app\",result=\"rejected\"}", 1.0);
    let not_ready = agent.wait_not_ready(&["app"]);
    let problem = not_ready[0]["problem"].as_str().unwrap().to_owned();
    assert!(problem.contains("refused by validator json"), "{problem}");
    assert!(problem.contains("configmaps/app") && problem.contains("Expecting value"), "{problem}");
    assert_eq!(snap(&target), before, "the target changed");
    assert!(leftovers(&node.root("app")).is_empty(), "{:?}", leftovers(&node.root("app")));

    // Valid JSON but three of four files gone: over max_removed_fraction.
    node.replace(&node.input("app"), &configmap_list(&[("app.json", "{\"version\": 3}")]));
    let by = "durasync_agent_rejections_total{durasync_instance=\"app\",by=\"guard max_removed_fraction\"}";
    agent.wait_metric(by, 1.0);
    let problem = agent.wait_not_ready(&["app"])[0]["problem"].as_str().unwrap().to_owned();
    assert!(problem.contains("remove 3 of the 4 files"), "{problem}");
    assert_eq!(snap(&target), before, "the target changed");

    // An empty configmap: under min_files.
    node.replace(&node.input("app"), &configmap_list(&[]));
    agent.wait_metric(
        "durasync_agent_rejections_total{durasync_instance=\"app\",by=\"guard min_files\"}",
        1.0,
    );
    assert_eq!(snap(&target), before, "the target changed");

    // A good config goes through and the instance is ready again.
    node.replace(&node.input("app"), &good(4));
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"app\",result=\"ok\"}", 2.0);
    agent.wait_ready(200);
    assert_eq!(read(&target.join("app.json")), b"{\"version\": 4}");
    assert!(leftovers(&node.root("app")).is_empty());
    assert_eq!(
        agent.metric("durasync_agent_runs_total{durasync_instance=\"app\",result=\"rejected\"}"),
        Some(3.0)
    );
}

#[test]
fn an_openssl_validator_refuses_a_truncated_certificate_through_durasync_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
        .args(["-subj", "/CN=durasync-test", "-days", "2", "-keyout"])
        .arg(t.join("k.pem"))
        .arg("-out")
        .arg(t.join("c.pem"))
        .output();
    match made {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("openssl req failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => return support::cannot_check(&format!("openssl cannot run: {e}")),
    }
    let (crt, key) = (read(&t.join("c.pem")), read(&t.join("k.pem")));
    let root = t.join("root");
    std::fs::create_dir(&root).unwrap();
    let wasm = certsync_wasm();
    let manifest = format!(
        "name = \"tls\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\n\
         [config]\nsecrets = [{{ name = \"tls\" }}]\n\
         [[validate]]\nname = \"x509\"\nroot = \"certs\"\npath = \"secrets/**\"\n\
         command = [\"openssl\", \"x509\", \"-noout\", \"-in\", \"{{staged}}/tls.crt\"]\n",
        wasm.display(),
        sha256_of_file(&wasm),
        root.display()
    );
    std::fs::write(t.join("plugin.toml"), manifest).unwrap();
    let run = |input: &[u8]| run_manifest(t, input, &[]);
    let out = run(&secret_list(&crt, &key));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let target = root.join("secrets/tls");
    assert_eq!(read(&target.join("tls.crt")), crt);
    let before = snap(&target);

    let out = run(&secret_list(&crt[..crt.len() / 2], b"another key"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "a truncated certificate is refused (exit 6): {stderr}");
    assert!(stderr.contains("refused by validator x509: `openssl` exited with status 1"), "{stderr}");
    assert_eq!(snap(&target), before, "the target changed");
    assert!(leftovers(&root).is_empty(), "{:?}", leftovers(&root));
}

#[test]
fn a_dry_run_lists_the_guardrails_validators_and_actions_a_change_would_meet_and_runs_none() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let root = t.join("root");
    std::fs::create_dir(&root).unwrap();
    let wasm = certsync_wasm();
    // `false` would refuse every change, and the action would leave a file:
    // a dry run runs neither.
    let manifest = format!(
        "name = \"dry\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\nmin_files = 1\n\
         [config]\nsecrets = [{{ name = \"tls\" }}]\n\
         [[validate]]\nname = \"never\"\nroot = \"certs\"\npath = \"secrets/*\"\ncommand = [\"false\"]\n\
         [[action]]\nname = \"mark\"\nroot = \"certs\"\ncommand = [\"touch\", \"{}\"]\n",
        wasm.display(),
        sha256_of_file(&wasm),
        root.display(),
        t.join("ran").display()
    );
    std::fs::write(t.join("plugin.toml"), manifest).unwrap();
    let out = run_manifest(t, &secret_list(b"crt", b"key"), &["--dry-run"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "would check certs:secrets/tls with guard roots.certs.min_files = 1",
        "would check certs:secrets/tls with validator never: false",
        "would check certs:secrets/tls with action mark (after the change is durable): touch",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
    assert!(!root.join("secrets").exists() && !t.join("ran").exists(), "a dry run changed something");
}

#[test]
fn a_root_with_min_files_refuses_a_plugin_s_removal_and_keeps_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let root = t.join("root");
    std::fs::create_dir(&root).unwrap();
    let wasm = certsync_wasm();
    // An optional object missing from the input is removed by certsync:
    // an empty or truncated input must not wipe it under `min_files`.
    let manifest = format!(
        "name = \"rm\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\nmin_files = 1\n\
         [config]\nsecrets = [{{ name = \"tls\", optional = true }}]\n",
        wasm.display(),
        sha256_of_file(&wasm),
        root.display()
    );
    std::fs::write(t.join("plugin.toml"), manifest).unwrap();
    let run = |input: &[u8]| run_manifest(t, input, &[]);
    let out = run(&secret_list(b"crt", b"key"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let target = root.join("secrets/tls");
    let before = snap(&target);
    let out = run(br#"{"apiVersion":"v1","kind":"List","items":[]}"#);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("certs:secrets/tls: refused by guard min_files"), "{stderr}");
    assert_eq!(snap(&target), before, "the directory was removed or changed");
}

/// `durasync run DIR/plugin.toml ARGS… --input DIR/input.json` (the file
/// written with `input` first), with the tests' shared compile cache.
fn run_manifest(dir: &Path, input: &[u8], args: &[&str]) -> std::process::Output {
    std::fs::write(dir.join("input.json"), input).unwrap();
    Command::new(support::durasync())
        .arg("run")
        .arg(dir.join("plugin.toml"))
        .args(args)
        .arg("--input")
        .arg(dir.join("input.json"))
        .arg("--cache-dir")
        .arg(super::shared_cache())
        .output()
        .unwrap()
}

/// `durasync run` of the script plugin of `tests/parity/plugin` (one host
/// call per line of `script`) on root `data` at `DIR/root`, with `root_extra`
/// under `[roots.data]` and `hooks` after it. The transcript is stdout.
fn run_script(dir: &Path, root_extra: &str, hooks: &str, script: &str) -> std::process::Output {
    let wasm = support::wasm::build("Cargo.toml", "parity-plugin");
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let manifest = format!(
        "name = \"script\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.data]\npath = \"{}\"\naccess = \"rw\"\n{root_extra}\n{hooks}",
        wasm.display(),
        sha256_of_file(&wasm),
        dir.join("root").display()
    );
    std::fs::write(dir.join("plugin.toml"), manifest).unwrap();
    run_manifest(dir, script.as_bytes(), &[])
}

/// A validator on `path` refusing any staged file that holds `BAD`.
fn no_bad(path: &str) -> String {
    format!(
        "[[validate]]\nname = \"nobad\"\nroot = \"data\"\npath = \"{path}\"\n\
         command = [\"sh\", \"-c\", \"! grep -rq BAD \\\"$1\\\"\", \"_\", \"{{staged}}\"]\n"
    )
}

fn transcript(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn a_directory_pattern_validates_every_file_below_it_in_a_sync_and_a_write() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // `secrets/*` names the directories below `secrets`: every file beneath
    // one is covered, however deep, whichever call changes it.
    let hooks = no_bad("secrets/*");
    let out = run_script(t, "", &hooks, "open data\nsync 0 secrets tls/tls.key=BAD");
    assert_eq!(out.status.code(), Some(6), "{}", transcript(&out));
    assert!(!t.join("root/secrets").exists(), "{}", transcript(&out));
    let out = run_script(t, "", &hooks, "open data\nwrite 0 secrets/tls/tls.key BAD 600");
    assert_eq!(out.status.code(), Some(6), "{}", transcript(&out));
    assert!(!t.join("root/secrets/tls/tls.key").exists(), "{}", transcript(&out));
    let out = run_script(
        t,
        "",
        &hooks,
        "open data\nsync 0 secrets tls/tls.key=good\nwrite 0 secrets/tls/tls.crt ok 644",
    );
    assert!(out.status.success(), "{}", transcript(&out));
    assert_eq!(read(&t.join("root/secrets/tls/tls.key")), b"good");
    // A pattern naming a file does not cover its siblings.
    let hooks = no_bad("conf/only.json");
    let out = run_script(t, "", &hooks, "open data\nsync 0 conf other=BAD");
    assert!(out.status.success(), "{}", transcript(&out));
    let out = run_script(t, "", &hooks, "open data\nsync 0 conf other=BAD only.json=BAD");
    assert_eq!(out.status.code(), Some(6), "{}", transcript(&out));
}

#[test]
fn exchange_is_refused_where_a_hook_covers_either_side() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let hooks = no_bad("conf");
    let out = run_script(t, "", &hooks, "open data\nsync 0 conf a=1 b=2 c=3 d=4");
    assert!(out.status.success(), "{}", transcript(&out));
    let before = snap(&t.join("root/conf"));
    // Refused directly…
    let out = run_script(t, "", &hooks, "open data\nsync 0 conf a=BAD");
    assert_eq!(out.status.code(), Some(6), "{}", transcript(&out));
    // …and through a scratch directory swapped in, from either side.
    for script in [
        "open data\nsync 0 tmp a=BAD\nexchange 0 tmp conf",
        "open data\nsync 0 tmp a=BAD\nexchange 0 conf tmp",
    ] {
        let out = run_script(t, "", &hooks, script);
        let text = transcript(&out);
        assert_eq!(out.status.code(), Some(6), "{text}");
        assert!(text.contains("exchange") && text.contains("validator nobad"), "{text}");
        assert_eq!(snap(&t.join("root/conf")), before, "{text}");
    }
    // A pattern below either side, or a guardrail on the root, covers it too.
    let hooks = no_bad("conf/d");
    let out = run_script(t, "", &hooks, "open data\nexchange 0 tmp conf");
    assert_eq!(out.status.code(), Some(6), "{}", transcript(&out));
    let out = run_script(t, "max_removed_fraction = 0.9", "", "open data\nexchange 0 tmp conf");
    assert_eq!(out.status.code(), Some(6), "{}", transcript(&out));
    assert_eq!(snap(&t.join("root/conf")), before);
    // Where nothing covers either side, exchange is the raw primitive.
    let out = run_script(t, "", &no_bad("other"), "open data\nexchange 0 tmp conf");
    assert!(out.status.success(), "{}", transcript(&out));
    assert_eq!(read(&t.join("root/tmp/d")), b"4");
}

#[test]
fn max_removed_fraction_ignores_durasync_s_lock_and_bounds_a_whole_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A write into `d` leaves durasync's lock file there; the next sync of
    // the same files must not count it as a file it removes (1 of 4 would
    // be over 0.2), on any run.
    let strict = "max_removed_fraction = 0.2";
    let out = run_script(t, strict, "", "open data\nsync 0 d a=1 b=2\nwrite 0 d/c 3 644");
    assert!(out.status.success(), "{}", transcript(&out));
    for _ in 0..2 {
        let out = run_script(t, strict, "", "open data\nsync 0 d a=1 b=2 c=3");
        assert!(out.status.success(), "{}", transcript(&out));
    }
    let guard = "max_removed_fraction = 0.5";
    // 8 files; each sync removes at most half of what `d` holds, but the
    // run as a whole may remove at most half of what the root held.
    let eight = "a=1 b=2 c=3 d=4 e=5 f=6 g=7 h=8";
    let out = run_script(t, guard, "", &format!("open data\nsync 0 d {eight}"));
    assert!(out.status.success(), "{}", transcript(&out));
    let out = run_script(t, guard, "", "open data\nsync 0 d a=1 b=2 c=3 d=4\nsync 0 d a=1 b=2\nsync 0 d a=1");
    let text = transcript(&out);
    assert_eq!(out.status.code(), Some(6), "{text}");
    assert!(text.contains("remove 6 of the 8 files"), "{text}");
    let mut left: Vec<String> = std::fs::read_dir(t.join("root/d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with(".durasync"))
        .collect();
    left.sort();
    assert_eq!(left, ["a", "b", "c", "d"], "{text}");
}
