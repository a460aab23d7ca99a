//! `durasync test MANIFEST CASES_DIR` (`host/src/golden.rs`): the example's
//! golden cases (`plugins/example/cases`) pass for the Rust, Python,
//! JavaScript and Go builds through the real runtime; a wrong expectation
//! fails with status 14, naming the case and every difference.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::go::EXAMPLE_GO;
use super::languages::{EXAMPLE_JS, EXAMPLE_PY, manifest_for, ready};
use super::{sha256, support, wasm};

const CASES: &str = "plugins/example/cases";
const TEST_FAILED: i32 = 14;

fn durasync_test(manifest: &Path, cases: &Path) -> Output {
    std::process::Command::new(support::durasync())
        .arg("test")
        .arg(manifest)
        .arg(cases)
        .env("XDG_CACHE_HOME", support::wasm::target_dir().join("plugins-test-cache"))
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A manifest for the Rust example's fresh build.
fn rust_manifest(dir: &Path) -> PathBuf {
    let wasm = wasm("example");
    let path = dir.join("example.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"example\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.out]\npath = \"out\"\naccess = \"rw\"\n",
            wasm.display(),
            sha256(&std::fs::read(&wasm).unwrap())
        ),
    )
    .unwrap();
    path
}

fn passes_every_case(manifest: &Path) {
    let out = durasync_test(manifest, &support::workspace_root().join(CASES));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    for case in ["bad-line", "created", "invalid-name", "replaced", "unchanged"] {
        assert!(t.contains(&format!("ok {case}\n")), "{case}: {t}");
    }
    assert!(t.contains("5 passed, 0 failed"), "{t}");
}

fn language_manifest(source: &support::toolchains::Source, plugin_dir: &str, tmp: &Path) -> PathBuf {
    let wasm = ready(source).wasm;
    let root = tmp.join("unused-root");
    std::fs::create_dir_all(&root).unwrap();
    manifest_for(plugin_dir, source.name, &wasm, &root, tmp)
}

#[test]
fn the_rust_examples_golden_cases_pass() {
    let tmp = tempfile::tempdir().unwrap();
    passes_every_case(&rust_manifest(tmp.path()));
}

#[test]
fn the_python_examples_golden_cases_pass() {
    let tmp = tempfile::tempdir().unwrap();
    passes_every_case(&language_manifest(&EXAMPLE_PY, "plugins/example-py", tmp.path()));
}

#[test]
fn the_javascript_examples_golden_cases_pass() {
    let tmp = tempfile::tempdir().unwrap();
    passes_every_case(&language_manifest(&EXAMPLE_JS, "plugins/example-js", tmp.path()));
}

#[test]
fn the_go_examples_golden_cases_pass() {
    let tmp = tempfile::tempdir().unwrap();
    passes_every_case(&language_manifest(&EXAMPLE_GO, "plugins/example-go", tmp.path()));
}

#[test]
fn a_wrong_expectation_fails_naming_the_case_and_each_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = tmp.path().join("cases");
    let case = cases.join("wrong");
    std::fs::create_dir_all(case.join("after/out/env")).unwrap();
    std::fs::create_dir_all(case.join("before/out")).unwrap();
    std::fs::write(case.join("input"), "A=1\n").unwrap();
    std::fs::write(case.join("before/out/keep"), "k").unwrap();
    std::fs::write(case.join("after/out/env/A"), "2\n").unwrap();
    std::fs::write(case.join("case.toml"), "result = \"env: replaced\"\n[modes]\n\"env/A\" = 0o600\n")
        .unwrap();
    let out = durasync_test(&rust_manifest(tmp.path()), &cases);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(TEST_FAILED), "{t}");
    assert!(t.contains("FAILED wrong\n"), "{t}");
    assert!(t.contains("expected Result(\"env: replaced\"), the run succeeded with \"env: created (1 written, 0 removed)\""), "{t}");
    assert!(t.contains("out:env/A: expected \"2\\n\", found \"1\\n\""), "{t}");
    assert!(t.contains("out:keep: not expected, present"), "{t}");
    assert!(t.contains("out:env/A: expected mode 0600, found 0644"), "{t}");
    assert!(t.contains("0 passed, 1 failed"), "{t}");

    // A fixture naming a root the manifest does not grant is refused before any run.
    std::fs::create_dir_all(case.join("before/elsewhere")).unwrap();
    let out = durasync_test(&rust_manifest(tmp.path()), &cases);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("before/elsewhere: names a root the manifest does not grant (granted: out)"), "{t}");
}
