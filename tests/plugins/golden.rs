//! `durasync test MANIFEST CASES_DIR` (`host/src/golden.rs`): the example's
//! golden cases (`plugins/example/cases`) pass for the Rust, Python,
//! JavaScript and Go builds through the real runtime; a wrong expectation
//! fails with status 14, naming the case and every difference in plain text
//! (a unified diff of a file); `[modes]` gives a fixture file a mode git
//! cannot keep (0600) and checks a file's mode after the run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::go::EXAMPLE_GO;
use super::languages::{EXAMPLE_JS, EXAMPLE_PY, manifest_for, ready};
use super::{sha256_of_file, support, wasm};

const CASES: &str = "plugins/example/cases";
const TEST_FAILED: i32 = 14;

fn durasync_test(manifest: &Path, cases: &Path) -> Output {
    std::process::Command::new(support::durasync())
        .arg("test")
        .arg(manifest)
        .arg(cases)
        .env("XDG_CACHE_HOME", support::shared_cache())
        .output()
        .unwrap()
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
            sha256_of_file(&wasm)
        ),
    )
    .unwrap();
    path
}

fn passes_every_case(manifest: &Path) {
    let out = durasync_test(manifest, &support::workspace_root().join(CASES));
    let t = support::output_text(&out);
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
    std::fs::write(
        case.join("case.toml"),
        "result = \"env: replaced\"\n[modes]\n\"after/out/env/A\" = \"0600\"\n",
    )
    .unwrap();
    let out = durasync_test(&rust_manifest(tmp.path()), &cases);
    let t = support::output_text(&out);
    assert_eq!(out.status.code(), Some(TEST_FAILED), "{t}");
    assert!(t.contains("FAILED wrong\n"), "{t}");
    let result = "    result differs\n      expected: env: replaced\n      got:      env: created (1 written, 0 removed)\n";
    assert!(t.contains(result), "{t}");
    let diff = "    out:env/A: contents differ\n      --- expected\n      +++ got\n      @@ -1 +1 @@\n      -2\n      +1\n";
    assert!(t.contains(diff), "{t}");
    assert!(t.contains("    out:keep: not expected, present\n"), "{t}");
    assert!(t.contains("    out:env/A: mode 0644, expected 0600\n"), "{t}");
    assert!(!t.contains("Result("), "no Rust type names: {t}");
    assert!(t.contains("0 passed, 1 failed"), "{t}");

    // A fixture naming a root the manifest does not grant is refused before any run.
    std::fs::create_dir_all(case.join("before/elsewhere")).unwrap();
    let out = durasync_test(&rust_manifest(tmp.path()), &cases);
    let t = support::output_text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("before/elsewhere: names a root the manifest does not grant (granted: out)"), "{t}");
}

#[test]
fn a_case_that_is_a_link_or_a_fifo_fails_and_a_linked_root_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = tmp.path().join("cases");
    let good = cases.join("good");
    std::fs::create_dir_all(&cases).unwrap();
    let example = support::workspace_root().join(CASES).join("created");
    assert!(std::process::Command::new("cp").arg("-a").arg(example).arg(&good).status().unwrap().success());
    // A case that would fail if it ran, reached only through a link, and a fifo.
    let wrong = tmp.path().join("wrong");
    std::fs::create_dir_all(&wrong).unwrap();
    std::fs::write(wrong.join("case.toml"), "result = \"never\"\n").unwrap();
    std::os::unix::fs::symlink(&wrong, cases.join("linked")).unwrap();
    let mode = rustix::fs::Mode::from(0o600);
    rustix::fs::mknodat(rustix::fs::CWD, cases.join("pipe"), rustix::fs::FileType::Fifo, mode, 0).unwrap();
    let manifest = rust_manifest(tmp.path());
    let out = durasync_test(&manifest, &cases);
    let t = support::output_text(&out);
    assert_eq!(out.status.code(), Some(TEST_FAILED), "{t}");
    assert!(t.contains("ok good\n"), "{t}");
    assert!(t.contains("FAILED linked\n"), "{t}");
    assert!(t.contains("linked: is a symbolic link (links are not followed), not a case folder"), "{t}");
    assert!(t.contains("FAILED pipe\n"), "{t}");
    assert!(t.contains("pipe: is a fifo, not a case folder"), "{t}");
    assert!(t.contains("1 passed, 2 failed"), "{t}");

    // A root's starting tree that is a link to a folder elsewhere is refused, not read.
    std::fs::remove_file(cases.join("linked")).unwrap();
    std::fs::remove_file(cases.join("pipe")).unwrap();
    std::fs::create_dir_all(good.join("before")).unwrap();
    std::fs::write(wrong.join("outside"), "o").unwrap();
    std::os::unix::fs::symlink(&wrong, good.join("before/out")).unwrap();
    let out = durasync_test(&manifest, &cases);
    let t = support::output_text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("before/out: is a symbolic link; a fixture folder must be a directory"), "{t}");
}

/// A case with a starting file `key.pem`, 0644 on disk as git would check
/// it out, and `modes`. With `after`, the run writes `env/A` and `after/`
/// expects it; without, the input is refused and nothing is written.
fn key_case(cases: &Path, name: &str, modes: &str, after: bool) {
    let case = cases.join(name);
    std::fs::create_dir_all(case.join("before/out")).unwrap();
    std::fs::write(case.join("input"), if after { "A=1\n" } else { "oops\n" }).unwrap();
    let key = case.join("before/out/key.pem");
    std::fs::write(&key, "secret\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    if after {
        std::fs::create_dir_all(case.join("after/out/env")).unwrap();
        std::fs::write(case.join("after/out/env/A"), "1\n").unwrap();
        std::fs::write(case.join("after/out/key.pem"), "secret\n").unwrap();
    }
    let expect =
        if after { "result = \"env: created (1 written, 0 removed)\"" } else { "error = \"not KEY=value\"" };
    let toml = format!("{expect}\n[modes]\n{modes}\n");
    std::fs::write(case.join("case.toml"), toml).unwrap();
}

#[test]
fn a_0600_fixture_set_by_case_toml_is_planted_with_that_mode_and_checked_after_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = tmp.path().join("cases");
    // No after/: the root must end as it began, the key at 0600. Had the
    // key been planted 0644 (its mode on disk), the case would fail.
    key_case(&cases, "kept-without-after", "\"before/out/key.pem\" = \"0600\"", false);
    key_case(
        &cases,
        "kept-with-after",
        "\"before/out/key.pem\" = \"0600\"\n\"after/out/key.pem\" = \"0600\"\n\"after/out/env/A\" = \"0644\"",
        true,
    );
    let manifest = rust_manifest(tmp.path());
    let out = durasync_test(&manifest, &cases);
    let t = support::output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("ok kept-with-after\nok kept-without-after\n2 passed, 0 failed"), "{t}");

    // Expecting 0600 after the run of a key planted at its disk mode fails, naming both modes.
    std::fs::remove_dir_all(&cases).unwrap();
    key_case(&cases, "unset", "\"after/out/key.pem\" = \"0600\"", true);
    let out = durasync_test(&manifest, &cases);
    let t = support::output_text(&out);
    assert_eq!(out.status.code(), Some(TEST_FAILED), "{t}");
    assert!(t.contains("FAILED unset\n    out:key.pem: mode 0644, expected 0600\n"), "{t}");

    // A mode for a file the case does not have is refused naming the case, the key and the problem.
    std::fs::remove_dir_all(&cases).unwrap();
    key_case(&cases, "typo", "\"before/out/key.pen\" = \"0600\"", false);
    let out = durasync_test(&manifest, &cases);
    let t = support::output_text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("typo/case.toml: [modes] \"before/out/key.pen\": names no file of the case"), "{t}");
}

#[test]
fn the_help_of_durasync_test_points_at_a_heading_of_the_guide_and_no_rust_path() {
    let out = std::process::Command::new(support::durasync()).args(["test", "--help"]).output().unwrap();
    let t = support::output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(!t.contains("durasync::"), "a Rust path no vendor can open: {t}");
    assert!(t.contains("case.toml") && t.contains("before/ROOT/") && t.contains("after/ROOT/"), "{t}");
    let anchor = "docs/plugins.md#golden-cases-durasync-test";
    assert!(t.contains(anchor), "{t}");
    let guide = std::fs::read_to_string(support::workspace_root().join("docs/plugins.md")).unwrap();
    assert!(
        guide.lines().any(|l| l == "### Golden cases: `durasync test`"),
        "the heading {anchor} names is gone"
    );
}
