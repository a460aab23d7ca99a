//! The language harness (`durasync harness`, `host/src/harness.rs`): the
//! Python and JavaScript examples' own unit tests, run by their own runners
//! (CPython's unittest, `node --test`, `go test`) through the shims of
//! `guest-sdk/python/durasync_harness`, `guest-sdk/js/harness` and the Go helper's
//! `harness.go` (by `durasync-go test`) against the real binary; the Python shim's generated files are what componentize-py
//! generates from the WIT today.

use std::process::{Command, Output};

use super::support::{self, workspace_root};

fn show(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `python3 -m unittest discover -s DIR` with the Python kit's sources
/// (the helper and `durasync_harness`, which puts its shim first) and the
/// plugin on the path.
pub fn python_unit_tests(plugin_dir: &str) -> Output {
    let root = workspace_root();
    let path = [root.join("guest-sdk/python"), root.join(plugin_dir)];
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    Command::new(python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(root.join(plugin_dir).join("tests"))
        .env("PYTHONPATH", std::env::join_paths(path).unwrap())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("DURASYNC", support::durasync())
        .output()
        .expect("running python3 (the Python plugin tests need it)")
}

/// `node --import …/register.mjs --test FILE` with the binary under test.
pub fn node_unit_tests(test_file: &str) -> Output {
    let root = workspace_root();
    Command::new("node")
        .arg("--import")
        .arg(root.join("guest-sdk/js/harness/register.mjs"))
        .arg("--test")
        .arg(root.join(test_file))
        .env("DURASYNC", support::durasync())
        .env_remove("NODE_TEST_CONTEXT") // not a child of another runner
        .output()
        .expect("running node (the JavaScript plugin tests need it)")
}

#[test]
fn the_python_examples_unit_tests_pass_under_cpython_against_the_harness() {
    let out = python_unit_tests("plugins/example-py");
    let text = show(&out);
    assert!(out.status.success(), "{text}");
    // Every test ran (a discovery that finds nothing also exits 0).
    assert!(text.contains("Ran 6 tests"), "{text}");
    assert!(text.trim_end().ends_with("OK"), "{text}");
}

#[test]
fn the_javascript_examples_unit_tests_pass_under_node_against_the_harness() {
    let out = node_unit_tests("plugins/example-js/test/app.test.js");
    let text = show(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("# pass 6") && text.contains("# fail 0"), "{text}");
}

#[test]
fn the_go_examples_unit_tests_pass_under_go_test_against_the_harness() {
    let out = support::go_toolchain::go_test("plugins/example-go");
    let text = show(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("--- PASS: Test").count(), 5, "{text}");
    assert!(!text.contains("--- FAIL"), "{text}");
}

/// The shims and helpers themselves: every `fs` method, `log`, host errors,
/// traps, and the helpers' error text, `run`, quoting and logging, under
/// each language's runner (`guest-sdk/python/tests`, `guest-sdk/js/test`,
/// `guest-sdk/go/shimtest`).
#[test]
fn every_shim_method_and_helper_works_under_cpython_node_and_go_test() {
    let py = python_unit_tests("guest-sdk/python");
    let text = show(&py);
    assert!(py.status.success() && text.contains("Ran 5 tests"), "python: {text}");
    let js = node_unit_tests("guest-sdk/js/test/shim.test.js");
    let text = show(&js);
    assert!(js.status.success() && text.contains("# pass 5") && text.contains("# fail 0"), "node: {text}");
    let go = support::go_toolchain::go_test("guest-sdk/go/shimtest");
    let text = show(&go);
    assert!(go.status.success(), "go: {text}");
    assert_eq!(text.matches("--- PASS: Test").count(), 4, "go: {text}");
}

/// The shim keeps componentize-py's generated types, world and result
/// classes as generated (only `fs.py` and `log.py` are the harness's): a WIT
/// change that regenerates them differently fails here, naming the file.
#[test]
fn the_python_shims_generated_files_are_what_componentize_py_generates() {
    let tmp = tempfile::Builder::new().prefix("durasync-pybind-").tempdir().unwrap();
    let out = Command::new(support::toolchains::componentize_py())
        .arg("-d")
        .arg(workspace_root().join("wit"))
        .args(["-w", "plugin", "bindings"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let shim = workspace_root().join("guest-sdk/python/durasync_harness/shim");
    for f in [
        "componentize_py_types.py",
        "wit_world/__init__.py",
        "wit_world/imports/__init__.py",
        "wit_world/imports/types.py",
        "wit_world/imports/plugin_types.py",
    ] {
        let (generated, kept) = (tmp.path().join(f), shim.join(f));
        assert_eq!(
            std::fs::read_to_string(&generated).unwrap(),
            std::fs::read_to_string(&kept).unwrap(),
            "{} differs from componentize-py's; copy it from `componentize-py -d wit -w plugin bindings DIR`",
            kept.display()
        );
    }
    // The harness's own fs.py and log.py offer every name the generated ones do.
    for (f, names) in [
        ("wit_world/imports/fs.py", &["class Dir", "def open_root("][..]),
        ("wit_world/imports/log.py", &["class Level", "def log("][..]),
    ] {
        let generated = std::fs::read_to_string(tmp.path().join(f)).unwrap();
        let kept = std::fs::read_to_string(shim.join(f)).unwrap();
        for line in
            generated.lines().map(str::trim).filter(|l| l.starts_with("def ") || l.starts_with("class "))
        {
            let name = line.split(['(', ':']).next().unwrap();
            assert!(kept.contains(name), "{f}: the shim lacks `{name}` ({line})");
        }
        assert!(names.iter().all(|n| kept.contains(n)), "{f}");
    }
}
