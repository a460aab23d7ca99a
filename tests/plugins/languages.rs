//! The example plugin in Python (`plugins/example-py`, componentize-py) and
//! JavaScript (`plugins/example-js`, componentize-js), built by the
//! registries' toolchains (installed by the test itself, see
//! `tests/support/src/toolchains.rs`) and run end to end through the real
//! `durasync run`: for the same inputs they give the Rust example's
//! results, files and errors, byte for byte. A JavaScript plugin making
//! 40 000 host calls in one run stays within the default fuel budget, and
//! its string arguments reach the host as their UTF-8 (`tests/stress/js`).

use std::path::Path;

use super::{Done, files, run_manifest, sha256_of_file, support, wasm};
use support::toolchains::{self, Lang, Source};

/// componentize-py's default build: no flag.
pub const EXAMPLE_PY: Source =
    Source { name: "example-py", lang: Lang::Python, dir: "plugins/example-py", flags: &[] };

/// componentize-js's build without wasi:http (which the host does not
/// provide); stdio, clocks and randomness stay as by default.
pub const EXAMPLE_JS: Source = Source {
    name: "example-js",
    lang: Lang::JavaScript,
    dir: "plugins/example-js",
    flags: &["-d", "http", "fetch-event"],
};

/// Build `source` (cached) and compile it into the test binary's shared
/// cache once, by `durasync inspect`, before any test runs it: a Python
/// component takes tens of seconds to compile, and tests that started
/// `durasync run` on it at the same time would each compile it.
pub fn ready(source: &Source) -> toolchains::Built {
    static WARM: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let built = toolchains::build(source);
    let mut warm = WARM.lock().unwrap_or_else(|p| p.into_inner());
    if !warm.contains(&built.wasm) {
        let out = inspect(&built.wasm);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        warm.push(built.wasm.clone());
    }
    built
}

/// `durasync inspect WASM --json` with the test binary's shared cache.
pub fn inspect(wasm: &Path) -> std::process::Output {
    std::process::Command::new(support::durasync())
        .arg("inspect")
        .arg(wasm)
        .arg("--json")
        .env("XDG_CACHE_HOME", support::shared_cache())
        .output()
        .unwrap()
}

/// Inputs run in this order into one root, with what each must give.
const STEPS: &[(&str, &str)] = &[
    ("A=1\n# note\n\nB = two\n", "env: created (2 written, 0 removed)"),
    ("B=two\nA=1", "env: unchanged (0 written, 0 removed)"),
    ("A=3", "env: replaced (1 written, 1 removed)"),
    ("oops", "not KEY=value: \"oops\""),
    ("..=1", "invalid-path"),
];

/// A manifest for `wasm` named `name`, granting `out` at `root`, written
/// from the plugin's committed `plugin.toml` with the built file and its
/// sha256 in place of the committed ones (neither toolchain builds the
/// same bytes twice).
pub fn manifest_for(
    plugin_dir: &str,
    name: &str,
    wasm: &Path,
    root: &Path,
    dir: &Path,
) -> std::path::PathBuf {
    let committed = support::workspace_root().join(plugin_dir).join("plugin.toml");
    let mut m: toml::Table = toml::from_str(&std::fs::read_to_string(&committed).unwrap()).unwrap();
    assert_eq!(m["name"].as_str(), Some(name), "{}", committed.display());
    let pinned = m["sha256"].as_str().unwrap();
    assert!(pinned.len() == 64 && pinned.bytes().all(|b| b.is_ascii_hexdigit()), "{pinned}");
    assert_eq!(m["roots"]["out"]["access"].as_str(), Some("rw"));
    m.insert("wasm".into(), wasm.display().to_string().into());
    m.insert("sha256".into(), sha256_of_file(wasm).into());
    m["roots"]["out"].as_table_mut().unwrap().insert("path".into(), root.display().to_string().into());
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml::to_string(&m).unwrap()).unwrap();
    path
}

/// What each step gave: (status, result or error) and the files after it.
type Trace = Vec<((i32, String), std::collections::BTreeMap<String, (u32, Vec<u8>)>)>;

fn trace(manifest: &Path, root: &Path) -> Trace {
    STEPS
        .iter()
        .map(|(input, _)| {
            let done = run_manifest(manifest, input.as_bytes(), &[]);
            (outcome(&done), files(root))
        })
        .collect()
}

/// The result of a success, or the plugin's error message (the text after
/// `failed: `) of a plugin error; anything else is the whole stderr.
fn outcome(done: &Done) -> (i32, String) {
    match done.status {
        0 => (0, done.json["result"].as_str().unwrap_or_default().to_owned()),
        10 => (10, done.stderr.split_once("failed: ").map_or(&*done.stderr, |(_, m)| m).trim().to_owned()),
        s => (s, done.stderr.clone()),
    }
}

pub fn check_against_the_rust_example(source: &Source, plugin_dir: &str) {
    let built = ready(source);
    let tmp = tempfile::Builder::new().prefix("durasync-lang-").tempdir().unwrap();
    let (root, rust_root) = (tmp.path().join("out"), tmp.path().join("rust-out"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&rust_root).unwrap();
    let manifest = manifest_for(plugin_dir, source.name, &built.wasm, &root, tmp.path());
    let got = trace(&manifest, &root);

    for (((status, text), _), (input, expected)) in got.iter().zip(STEPS) {
        assert!(text.contains(expected), "{}: {input:?} gave {status}: {text}", source.name);
    }
    assert_eq!(got[0].1["env/B"], (0o644, b"two\n".to_vec()));

    let rust_manifest = tmp.path().join("rust.toml");
    let rust_wasm = wasm("example");
    std::fs::write(
        &rust_manifest,
        format!(
            "name = \"example\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.out]\npath = \"{}\"\naccess = \"rw\"\n",
            rust_wasm.display(),
            sha256_of_file(&rust_wasm),
            rust_root.display()
        ),
    )
    .unwrap();
    let rust = trace(&rust_manifest, &rust_root);
    assert_eq!(got, rust, "{} and the Rust example differ", source.name);
}

#[test]
fn the_python_example_default_build_gives_the_rust_examples_results_files_and_errors() {
    check_against_the_rust_example(&EXAMPLE_PY, "plugins/example-py");
}

#[test]
fn the_javascript_example_gives_the_rust_examples_results_files_and_errors() {
    check_against_the_rust_example(&EXAMPLE_JS, "plugins/example-js");
}

#[test]
fn the_python_and_javascript_examples_describe_themselves() {
    for (source, name) in [(&EXAMPLE_PY, "example-py"), (&EXAMPLE_JS, "example-js")] {
        let out = inspect(&ready(source).wasm);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["policy"], "pass", "{v}");
        assert_eq!(v["describe"]["name"], name);
        assert_eq!(v["describe"]["roots"], serde_json::json!(["out"]));
        let imports = v["imports"].as_array().unwrap();
        // The language runtimes import WASI the host links over an empty context.
        assert!(
            imports.iter().any(|i| i.as_str().unwrap().starts_with("wasi:filesystem/preopens@0.2.")),
            "{v}"
        );
        assert!(imports.iter().any(|i| i.as_str().unwrap().starts_with("wasi:random/random@0.2.")), "{v}");
    }
}

/// The stress plugin of `tests/stress/js`, built like the example.
const STRESS_JS: Source = Source {
    name: "js-stress",
    lang: Lang::JavaScript,
    dir: "tests/stress/js",
    flags: &["-d", "http", "fetch-event"],
};

/// A root `data` holding `blob` (4 KiB, byte i is i*7 mod 251), `names/`
/// (64 empty files `n00`…`n63`) and `strings/` (the files the stress
/// plugin's `strings` input reads), in `dir`, and a manifest of the stress
/// plugin granting it read-only with the default fuel and a long deadline.
fn stress_manifest(dir: &Path) -> std::path::PathBuf {
    let wasm = ready(&STRESS_JS).wasm;
    let data = dir.join("data");
    std::fs::create_dir_all(data.join("names")).unwrap();
    let blob: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(data.join("blob"), blob).unwrap();
    for i in 0..64 {
        std::fs::write(data.join(format!("names/n{i:02}")), b"").unwrap();
    }
    std::fs::create_dir_all(data.join("strings/some/longer/path")).unwrap();
    for (name, contents) in STRINGS {
        std::fs::write(data.join("strings").join(name), contents).unwrap();
    }
    let manifest = dir.join("plugin.toml");
    std::fs::write(
        &manifest,
        format!(
            "name = \"js-stress\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.data]\npath = \"data\"\naccess = \"ro\"\n\
             [limits]\ntimeout_ms = 600_000\n",
            wasm.display(),
            sha256_of_file(&wasm)
        ),
    )
    .unwrap();
    manifest
}

/// The files under `strings/` and their contents, in the order the stress
/// plugin reads them: a JavaScript lone surrogate is U+FFFD in UTF-8.
const STRINGS: [(&str, &str); 6] = [
    ("é.txt", "e-acute"),
    ("日本語", "cjk"),
    ("🦀.bin", "crab"),
    ("a\u{FFFD}b", "lone high surrogate"),
    ("x\u{FFFD}", "lone low surrogate"),
    ("some/longer/path/name.crt", "25 characters"),
];

/// A host call from JavaScript costs the same however many came before it
/// in the run, so 40 000 of them (reads of a 4 KiB file, a listing every
/// 100th) fit the default fuel budget, `limits.fuel` unset. The deadline is
/// raised: this counts fuel, not time.
#[test]
fn a_javascript_plugin_makes_40000_host_calls_within_the_default_fuel_budget() {
    const CALLS: u32 = 40_000;
    let tmp = tempfile::Builder::new().prefix("durasync-js-stress-").tempdir().unwrap();
    let manifest = stress_manifest(tmp.path());
    let done = run_manifest(&manifest, CALLS.to_string().as_bytes(), &[]);
    assert_eq!(
        done.ok(),
        format!("{CALLS} calls: {} bytes read, {} names listed", CALLS * 4096, CALLS / 100 * 64)
    );
}

/// A JavaScript string argument reaches the host as its UTF-8 through the
/// kit's encoder: names that are not ASCII, an emoji, lone surrogates
/// (U+FFFD, as `TextEncoder` writes them), 25 characters and `""` (a path
/// the host refuses), read 100 times in one run with the same results, with
/// a call whose second argument throws after its first was lowered in each
/// round. The same plugin built with componentize-js's own CLI gives the
/// same result (checked by hand: the test builds with the kit only).
#[test]
fn javascript_string_arguments_reach_the_host_as_their_utf8() {
    let tmp = tempfile::Builder::new().prefix("durasync-js-strings-").tempdir().unwrap();
    let manifest = stress_manifest(tmp.path());
    let done = run_manifest(&manifest, b"strings", &[]);
    let mut want: Vec<String> = STRINGS.iter().enumerate().map(|(i, (_, c))| format!("{i}: {c}")).collect();
    want.push("\"\": invalid-path".into());
    want.push("list: a\u{FFFD}b some x\u{FFFD} é.txt 日本語 🦀.bin".into());
    assert_eq!(done.ok(), want.join("\n"));
}
