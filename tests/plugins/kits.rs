//! The language kits as a vendor gets them: each is packed by its
//! ecosystem's own tool from this checkout (a wheel by `pip wheel`, a
//! tarball by `npm pack`), installed from that file into a fresh
//! temporary directory outside the checkout, and used there to write a
//! small plugin, run its unit tests under `durasync harness`, build its
//! component, run its golden cases with `durasync test` and run it with
//! `durasync run`. Nothing in the plugin's folder points into the checkout.
//!
//! Every kit's plugin is the same: it writes its input to `out/note` and
//! returns `note: OUTCOME (N written, M removed)`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::support::{self, output_text, sha256_of_file, shared_cache, workspace_root};

/// A fresh directory outside the checkout.
fn outside(prefix: &str) -> tempfile::TempDir {
    let tmp = tempfile::Builder::new().prefix(prefix).tempdir_in(std::env::temp_dir()).unwrap();
    assert!(!tmp.path().starts_with(workspace_root()), "{} is inside the checkout", tmp.path().display());
    tmp
}

/// `durasync-go` as a vendor has it: the binary alone, copied out of its
/// build folder into `TMP/bin` of a directory outside the checkout, and a
/// `PATH` of that folder and the system's, with no cargo on it.
fn durasync_go_alone(prefix: &str) -> (tempfile::TempDir, PathBuf, String) {
    let tool = support::go_toolchain::install();
    let tmp = outside(prefix);
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(&tool, bin.join("durasync-go")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    for dir in std::env::split_paths(&path) {
        assert!(!dir.join("cargo").exists(), "cargo is in {}: the test cannot hide it", dir.display());
    }
    (tmp, bin, path)
}

/// Run `cmd`; panic with its output unless it succeeds.
fn ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{what} failed ({}):\n{cmd:?}\n{}", out.status, output_text(&out));
    out
}

/// The one file of `dir` whose name ends with `suffix`.
fn the_file(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "one *{suffix} in {}: {found:?}", dir.display());
    found.into_iter().next().unwrap()
}

/// No file of `dir` (the plugin's folder, its `node_modules` left out)
/// names the checkout.
fn nothing_points_into_the_checkout(dir: &Path) {
    let root = workspace_root().to_string_lossy().into_owned();
    for entry in walk(dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        assert!(!text.contains(&root), "{} names the checkout ({root})", entry.display());
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if !["node_modules", "__pycache__", "build", "out"].contains(&name.as_str()) {
                out.extend(walk(&p));
            }
        } else if !name.ends_with(".wasm") {
            out.push(p);
        }
    }
    out
}

/// The plugin's manifest beside `wasm` (pinning its sha256), one golden
/// case, then `durasync test` and `durasync run` on the built component.
fn golden_case_and_run(plugin: &Path, wasm: &Path) {
    let manifest = plugin.join("plugin.toml");
    std::fs::write(
        &manifest,
        format!(
            "name = \"note\"\nwasm = \"{}\"\nsha256 = \"{}\"\n\n[roots.out]\npath = \"out\"\naccess = \"rw\"\n",
            wasm.file_name().unwrap().to_string_lossy(),
            sha256_of_file(wasm)
        ),
    )
    .unwrap();
    let case = plugin.join("cases/created");
    std::fs::create_dir_all(case.join("after/out")).unwrap();
    std::fs::write(
        case.join("case.toml"),
        "result = \"note: created (1 written, 0 removed)\"\n\n[modes]\n\"after/out/note\" = \"0644\"\n",
    )
    .unwrap();
    std::fs::write(case.join("input"), "hello\n").unwrap();
    std::fs::write(case.join("after/out/note"), "hello\n").unwrap();
    let out = Command::new(support::durasync())
        .current_dir(plugin)
        .args(["test", "plugin.toml", "cases"])
        .env("XDG_CACHE_HOME", shared_cache())
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success() && text.contains("ok created\n"), "durasync test:\n{text}");

    std::fs::create_dir_all(plugin.join("out")).unwrap();
    std::fs::write(plugin.join("input"), "hello\n").unwrap();
    let run = || {
        Command::new(support::durasync())
            .current_dir(plugin)
            .args(["run", "plugin.toml", "--input", "input"])
            .env("XDG_CACHE_HOME", shared_cache())
            .output()
            .unwrap()
    };
    let out = run();
    let text = output_text(&out);
    assert!(out.status.success(), "durasync run:\n{text}");
    assert!(text.starts_with("note: created (1 written, 0 removed)\n"), "{text}");
    assert!(text.contains("note: 6 bytes"), "the plugin's info log: {text}");
    assert_eq!(std::fs::read(plugin.join("out/note")).unwrap(), b"hello\n");
    let text = output_text(&run());
    assert!(text.starts_with("note: unchanged (0 written, 0 removed)\n"), "{text}");
}

const PY_APP: &str = r#"import durasync
from wit_world import WitWorld as World
from wit_world.imports import fs, plugin_types


class WitWorld(World):
    def describe(self) -> plugin_types.Info:
        return plugin_types.Info("note", "0.1.0", "Writes its input to out/note", ["out"])

    def run(self, config: str, input: bytes) -> str:
        return durasync.run(lambda: note(input))


def note(input: bytes) -> str:
    report = fs.open_root("out").write_file("note", input, 0o644)
    durasync.info(f"note: {len(input)} bytes")
    return f"note: {durasync.report_text(report)}"
"#;

const PY_TEST: &str = r#"import unittest

import durasync_harness  # first: it gives CPython the bindings' names
from durasync_harness import Harness

from app import WitWorld


class NoteTest(unittest.TestCase):
    def test_writes_the_input_then_nothing_when_unchanged(self):
        with Harness(roots=["out"]) as host:
            self.assertEqual(WitWorld().run("{}", b"hello\n"), "note: created (1 written, 0 removed)")
            self.assertEqual(WitWorld().run("{}", b"hello\n"), "note: unchanged (0 written, 0 removed)")
            self.assertEqual(host.files("out"), {"note": (0o644, b"hello\n")})
            self.assertIn(("info", "note: 6 bytes"), host.logs())

    def test_a_path_the_host_refuses_is_the_runs_error(self):
        with Harness(roots=[]):
            with self.assertRaises(Exception) as e:
                WitWorld().run("{}", b"x")
            self.assertIn("not-granted", str(e.exception.value))
"#;

/// The Python kit: a wheel of `guest-sdk/python` (`pip wheel`, the
/// hatchling backend from the package index), `pip install`ed from the
/// file with `--no-index` into a new venv. The build is the documented one,
/// run in the plugin's folder with that venv active (`VIRTUAL_ENV`, where
/// componentize-py finds the helper) and the WIT from the installed
/// package; componentize-py is the tests' own install of the pinned release.
#[test]
fn the_python_kit_from_its_wheel_builds_tests_and_runs_a_plugin_outside_the_checkout() {
    let tmp = outside("durasync-kit-py-");
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let dist = tmp.path().join("dist");
    ok(
        Command::new(&python)
            .args(["-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", "-w"])
            .arg(&dist)
            .arg(workspace_root().join("guest-sdk/python")),
        "building the Python kit's wheel",
    );
    let wheel = the_file(&dist, ".whl");
    assert!(
        wheel.file_name().unwrap().to_string_lossy().starts_with("durasync_guest-"),
        "{}",
        wheel.display()
    );

    let venv = tmp.path().join("venv");
    ok(Command::new(&python).args(["-m", "venv"]).arg(&venv), "python3 -m venv");
    ok(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "--no-index"])
            .arg(&wheel),
        "pip install the wheel",
    );

    let plugin = tmp.path().join("note");
    std::fs::create_dir_all(plugin.join("tests")).unwrap();
    std::fs::write(plugin.join("app.py"), PY_APP).unwrap();
    std::fs::write(plugin.join("tests/test_app.py"), PY_TEST).unwrap();
    nothing_points_into_the_checkout(&plugin);

    // The unit tests under the venv's CPython, the plugin's folder first
    // on the path (`python -m` puts the working directory there).
    let out = ok(
        Command::new(venv.join("bin/python"))
            .current_dir(&plugin)
            .args(["-m", "unittest", "discover", "-v", "-s", "tests"])
            .env("DURASYNC", support::durasync())
            .env_remove("PYTHONPATH"),
        "the plugin's unit tests",
    );
    let text = output_text(&out);
    assert!(text.contains("Ran 2 tests") && text.trim_end().ends_with("OK"), "{text}");

    let wit = ok(
        Command::new(venv.join("bin/python")).args(["-m", "durasync_harness", "wit"]),
        "python3 -m durasync_harness wit",
    );
    let wit = PathBuf::from(String::from_utf8(wit.stdout).unwrap().trim());
    assert!(wit.starts_with(&venv) && wit.join("durasync.wit").is_file(), "{}", wit.display());
    ok(
        Command::new(support::toolchains::componentize_py())
            .current_dir(&plugin)
            .arg("-d")
            .arg(&wit)
            .args(["-w", "plugin", "componentize", "-p", ".", "app", "-o", "note.wasm"])
            .env("VIRTUAL_ENV", &venv)
            .env_remove("PYTHONPATH"),
        "componentize-py with the installed helper",
    );
    golden_case_and_run(&plugin, &plugin.join("note.wasm"));
}

const JS_PACKAGE: &str = r#"{
  "name": "note",
  "version": "0.1.0",
  "private": true,
  "type": "module"
}
"#;

const JS_APP: &str = r#"import { openRoot } from "durasync:plugin/fs@0.1.0";
import * as durasync from "./durasync.js";

export function describe() {
  return { name: "note", version: "0.1.0", summary: "Writes its input to out/note", roots: ["out"] };
}

export function run(config, input) {
  return durasync.run(() => {
    const report = openRoot("out").writeFile("note", input, 0o644);
    durasync.info(`note: ${input.length} bytes`);
    return `note: ${durasync.reportText(report)}`;
  });
}
"#;

const JS_TEST: &str = r#"import assert from "node:assert/strict";
import { test } from "node:test";

import { withHarness } from "durasync-guest/harness";
import { run } from "../app.js";

const hello = new TextEncoder().encode("hello\n");

test("writes the input, then nothing when unchanged", () => {
  withHarness({ roots: ["out"] }, (host) => {
    assert.equal(run("{}", hello), "note: created (1 written, 0 removed)");
    assert.equal(run("{}", hello), "note: unchanged (0 written, 0 removed)");
    assert.deepEqual(host.files("out"), { note: [0o644, Buffer.from("hello\n")] });
  });
});

test("a root the host refuses is the run's error", () => {
  withHarness({ roots: [] }, () => {
    assert.throws(() => run("{}", hello), /^not-granted: /);
  });
});
"#;

/// The npm kit: `npm pack` of `guest-sdk/js`, installed from the tarball
/// with `npm install --offline` into a new project; the unit tests run with
/// the package's loader (`node --import durasync-guest/register`), the
/// build copies the package's helper beside `app.js`, reads the package's
/// WIT and runs the package's `durasync-componentize-js` (over the tests'
/// own install of the pinned componentize-js).
#[test]
fn the_npm_kit_from_its_tarball_builds_tests_and_runs_a_plugin_outside_the_checkout() {
    let tmp = outside("durasync-kit-js-");
    ok(
        Command::new("npm")
            .current_dir(workspace_root().join("guest-sdk/js"))
            .args(["pack", "--silent", "--pack-destination"])
            .arg(tmp.path()),
        "npm pack",
    );
    let tarball = the_file(tmp.path(), ".tgz");
    assert!(tarball.file_name().unwrap().to_string_lossy().starts_with("durasync-guest-"));
    assert!(!workspace_root().join("guest-sdk/js/wit").exists(), "npm pack left guest-sdk/js/wit behind");

    let plugin = tmp.path().join("note");
    std::fs::create_dir_all(plugin.join("test")).unwrap();
    std::fs::write(plugin.join("package.json"), JS_PACKAGE).unwrap();
    std::fs::write(plugin.join("app.js"), JS_APP).unwrap();
    std::fs::write(plugin.join("test/app.test.js"), JS_TEST).unwrap();
    ok(
        Command::new("npm")
            .current_dir(&plugin)
            .args(["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error"])
            .arg(&tarball),
        "npm install the tarball",
    );
    nothing_points_into_the_checkout(&plugin);

    let out = ok(
        Command::new("node")
            .current_dir(&plugin)
            .args(["--import", "durasync-guest/register", "--test", "test/"])
            .env("DURASYNC", support::durasync())
            .env_remove("NODE_TEST_CONTEXT"),
        "the plugin's unit tests",
    );
    let text = output_text(&out);
    assert!(text.contains("# pass 2") && text.contains("# fail 0"), "{text}");

    let build = plugin.join("build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::copy(plugin.join("app.js"), build.join("app.js")).unwrap();
    std::fs::copy(plugin.join("node_modules/durasync-guest/durasync.js"), build.join("durasync.js")).unwrap();
    let componentize = support::toolchains::componentize_js();
    let package =
        componentize.parent().and_then(Path::parent).unwrap().join("@bytecodealliance/componentize-js");
    ok(
        Command::new(plugin.join("node_modules/.bin/durasync-componentize-js"))
            .current_dir(&plugin)
            .env("DURASYNC_COMPONENTIZE_JS", package)
            .args(["--wit", "node_modules/durasync-guest/wit", "-n", "plugin", "-d", "http", "fetch-event"])
            .args(["-o", "note.wasm", "build/app.js"]),
        "the kit's durasync-componentize-js with the installed helper and WIT",
    );
    golden_case_and_run(&plugin, &plugin.join("note.wasm"));
}

const GO_PLUGIN: &str = r#"package export_wit_world

import (
	"fmt"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
	. "wit_component/durasync_plugin_plugin_types"
)

func Describe() Info {
	return Info{Name: "note", Version: "0.1.0", Summary: "Writes its input to out/note", Roots: []string{"out"}}
}

func Run(config string, input []uint8) witTypes.Result[string, string] {
	return durasync.Run(func() (string, error) {
		root, err := durasync.OpenRoot("out")
		if err != nil {
			return "", err
		}
		r, err := root.WriteFile("note", input, 0o644)
		if err != nil {
			return "", err
		}
		durasync.Infof("note: %d bytes", len(input))
		return fmt.Sprintf("note: %s (%d written, %d removed)", r.Outcome, r.Written, r.Removed), nil
	})
}
"#;

const GO_TEST: &str = r#"package export_wit_world

import (
	"testing"

	"wit_component/durasync"
)

func TestWritesTheInputThenNothingWhenUnchanged(t *testing.T) {
	h, err := durasync.StartHarness(durasync.HarnessOptions{Roots: []string{"out"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, want := range []string{"note: created (1 written, 0 removed)", "note: unchanged (0 written, 0 removed)"} {
		if got := Run("{}", []byte("hello\n")); got.Ok() != want {
			t.Fatalf("got %q, want %q", got.Ok(), want)
		}
	}
	files, err := h.Files("out")
	if err != nil {
		t.Fatal(err)
	}
	if f := files["note"]; f.Mode != 0o644 || f.Contents != "hello\n" || len(files) != 1 {
		t.Fatalf("files: %v", files)
	}
}
"#;

/// `durasync-go` as a vendor runs it: the binary alone, copied out of its
/// build folder, with no cargo on `PATH` (nor `$CARGO`), from a directory
/// outside the checkout: `--version`, `--help`, `bindings DIR` (the module
/// for an editor), then the plugin's unit tests, its build, golden case and
/// run. Go is the tests' install (`$GO`).
#[test]
fn durasync_go_alone_builds_tests_and_runs_a_plugin_outside_the_checkout_without_cargo() {
    let (tmp, bin, path) = durasync_go_alone("durasync-kit-go-");
    let durasync_go = |args: &[&str]| {
        let mut cmd = Command::new(bin.join("durasync-go"));
        cmd.current_dir(tmp.path()).args(args);
        support::go_toolchain::go_env(&mut cmd);
        cmd.env("PATH", &path)
            .env("DURASYNC", support::durasync())
            .env_remove("CARGO")
            .env_remove("CARGO_HOME")
            .env_remove("CARGO_MANIFEST_DIR")
            .env_remove("RUSTUP_HOME");
        cmd
    };

    let version = output_text(&ok(&mut durasync_go(&["--version"]), "durasync-go --version"));
    assert!(version.starts_with("durasync-go 0.1.0 (WIT durasync:plugin@"), "{version}");
    let help = output_text(&ok(&mut durasync_go(&["--help"]), "durasync-go --help"));
    assert!(
        ["build", "test", "bindings", "module"].iter().all(|c| help.contains(&format!("durasync-go {c} "))),
        "{help}"
    );
    let bad = durasync_go(&["frobnicate"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", output_text(&bad));

    ok(&mut durasync_go(&["bindings", "editor"]), "durasync-go bindings");
    let editor = tmp.path().join("editor");
    let go_mod = std::fs::read_to_string(editor.join("go.mod")).unwrap();
    assert!(go_mod.starts_with("module wit_component\n"), "{go_mod}");
    for f in ["durasync/durasync.go", "_pkg/go.mod", "_pkg/wit/types/result.go", "export_wit_world"] {
        assert!(editor.join(f).exists(), "bindings wrote no {f}");
    }

    let plugin = tmp.path().join("note");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.go"), GO_PLUGIN).unwrap();
    std::fs::write(plugin.join("plugin_test.go"), GO_TEST).unwrap();
    let out = ok(&mut durasync_go(&["test", "note", "-v"]), "durasync-go test");
    let text = output_text(&out);
    assert!(text.contains("--- PASS: TestWritesTheInputThenNothingWhenUnchanged"), "{text}");
    ok(&mut durasync_go(&["build", "note", "note/note.wasm"]), "durasync-go build");
    golden_case_and_run(&plugin, &plugin.join("note.wasm"));
}

const GO_MODULE_PLUGIN: &str = r#"package note

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"durasync.dev/guest"
	. "durasync.dev/guest/durasync_plugin_plugin_types"

	"example.com/tally"
)

func Describe() Info {
	return Info{Name: "note", Version: "0.1.0", Summary: "Writes its input to out/note", Roots: []string{"out"}}
}

func Run(config string, input []uint8) witTypes.Result[string, string] {
	return durasync.Run(func() (string, error) {
		root, err := durasync.OpenRoot("out")
		if err != nil {
			return "", err
		}
		r, err := root.WriteFile("note", input, 0o644)
		if err != nil {
			return "", err
		}
		durasync.Infof("note: %d bytes", len(input))
		return "note: " + tally.Line(r.Outcome.String(), r.Written, r.Removed), nil
	})
}
"#;

const GO_MODULE_TEST: &str = r#"package note

import (
	"testing"

	"durasync.dev/guest"
)

func TestWritesTheInputThenNothingWhenUnchanged(t *testing.T) {
	h, err := durasync.StartHarness(durasync.HarnessOptions{Roots: []string{"out"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, want := range []string{"note: created (1 written, 0 removed)", "note: unchanged (0 written, 0 removed)"} {
		if got := Run("{}", []byte("hello\n")); got.Ok() != want {
			t.Fatalf("got %q, want %q", got.Ok(), want)
		}
	}
}
"#;

/// The third-party module the plugin module requires.
const TALLY: &str = r#"// Package tally words a sync's counts.
package tally

import "fmt"

func Line[N ~int | ~uint32 | ~uint64](outcome string, written, removed N) string {
	return fmt.Sprintf("%s (%d written, %d removed)", outcome, written, removed)
}
"#;

/// A Go plugin as a vendor keeps it: its own module (`go.mod`, `go.sum`)
/// requiring the kit module `durasync.dev/guest` and a third-party module,
/// both from a file proxy the test made (`GOPROXY=file://…`; `durasync-go
/// module` wrote the kit's two modules). Nothing reaches a network:
/// `GOPROXY` is the file proxy alone, `GOSUMDB=off` (the modules are the
/// test's own, which no checksum database knows; `go.sum` still pins them),
/// `GOTOOLCHAIN=local`. `go mod tidy` writes `go.sum`, `go vet` and a wasip1
/// `go build` compile the folder as it is (nothing generated in it); `durasync-go test`
/// and `build` run with Go's default `-mod=readonly`, so `go.sum` is
/// checked; the plugin's folder holds afterwards only what the vendor put
/// there and the component.
#[test]
fn a_go_plugin_module_requiring_the_kit_and_a_third_party_module_tests_builds_and_runs_from_a_file_proxy() {
    let (tmp, bin, path) = durasync_go_alone("durasync-kit-gomod-");
    let proxy = tmp.path().join("proxy");
    let vendor_env = |cmd: &mut Command| {
        support::go_toolchain::go_env(cmd);
        cmd.env("PATH", &path)
            .env("DURASYNC", support::durasync())
            // A module cache of this run's own (the proxy's modules are this
            // run's), writable so the temporary directory can go.
            .env("GOPATH", tmp.path().join("gopath"))
            .env("GOMODCACHE", tmp.path().join("gopath/pkg/mod"))
            .env("GOFLAGS", "-modcacherw")
            .env("GOPROXY", format!("file://{}", proxy.display()))
            .env("GOSUMDB", "off")
            .env("GOTOOLCHAIN", "local")
            .env_remove("GONOSUMDB")
            .env_remove("GOPRIVATE")
            .env_remove("GOWORK")
            .env_remove("CARGO")
            .env_remove("CARGO_HOME")
            .env_remove("CARGO_MANIFEST_DIR")
            .env_remove("RUSTUP_HOME");
    };
    let durasync_go = |args: &[&str]| {
        let mut cmd = Command::new(bin.join("durasync-go"));
        cmd.current_dir(tmp.path()).args(args);
        vendor_env(&mut cmd);
        cmd
    };
    let go = |args: &[&str]| {
        let mut cmd = Command::new(support::go_toolchain::go());
        cmd.current_dir(tmp.path().join("note")).args(args);
        vendor_env(&mut cmd);
        cmd
    };

    // The proxy: the kit's two modules as `durasync-go module` writes them,
    // and the third-party module.
    ok(&mut durasync_go(&["module", "kit"]), "durasync-go module");
    let version = |dir: &Path, name: &str| -> (PathBuf, String) {
        let entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{name}@")))
            .collect();
        assert_eq!(entries.len(), 1, "one {name}@VERSION in {}: {entries:?}", dir.display());
        let v = entries[0].file_name().unwrap().to_string_lossy().split_once('@').unwrap().1.to_owned();
        (entries[0].clone(), v)
    };
    let (guest, guest_version) = version(&tmp.path().join("kit/durasync.dev"), "guest");
    let (pkg, pkg_version) = version(&tmp.path().join("kit/go.bytecodealliance.org"), "pkg");
    for f in ["go.mod", "durasync.go", "wasm.go", "harness.go", "durasync_plugin_fs/wit_bindings.go"] {
        assert!(guest.join(f).is_file(), "durasync-go module wrote no {f} in {}", guest.display());
    }
    let wasm_go = std::fs::read_to_string(guest.join("wasm.go")).unwrap();
    assert!(
        !wasm_go.contains("wit_component") && wasm_go.contains("\"durasync.dev/guest/durasync_plugin_fs\"")
    );
    support::go_proxy::publish(&proxy, "durasync.dev/guest", &guest_version, &guest);
    support::go_proxy::publish(&proxy, "go.bytecodealliance.org/pkg", &pkg_version, &pkg);
    let tally = tmp.path().join("src/tally");
    std::fs::create_dir_all(&tally).unwrap();
    std::fs::write(tally.join("go.mod"), "module example.com/tally\n\ngo 1.21\n").unwrap();
    std::fs::write(tally.join("tally.go"), TALLY).unwrap();
    support::go_proxy::publish(&proxy, "example.com/tally", "v1.2.0", &tally);

    // The vendor's module: its go.mod names what it requires, `go mod tidy`
    // completes it and writes go.sum.
    let plugin = tmp.path().join("note");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("go.mod"),
        format!(
            "module example.com/note\n\ngo 1.27.1\n\nrequire (\n\tdurasync.dev/guest {guest_version}\n\texample.com/tally v1.2.0\n)\n"
        ),
    )
    .unwrap();
    std::fs::write(plugin.join("plugin.go"), GO_MODULE_PLUGIN).unwrap();
    std::fs::write(plugin.join("plugin_test.go"), GO_MODULE_TEST).unwrap();
    ok(go(&["mod", "tidy"]).env("GOFLAGS", "-modcacherw -mod=mod"), "go mod tidy");
    ok(&mut go(&["mod", "verify"]), "go mod verify");
    let sum = std::fs::read_to_string(plugin.join("go.sum")).unwrap();
    for m in [format!("durasync.dev/guest {guest_version} h1:"), "example.com/tally v1.2.0 h1:".into()] {
        assert!(sum.contains(&m), "go.sum has no {m}:\n{sum}");
    }
    let vendor_files = || {
        let mut names: Vec<String> = std::fs::read_dir(&plugin)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(vendor_files(), ["go.mod", "go.sum", "plugin.go", "plugin_test.go"]);
    // The folder compiles as it is, as an editor sees it: with its tests for
    // the host's GOOS (the helper's harness side), without them for wasip1
    // (the helper's bindings side).
    ok(&mut go(&["vet", "."]), "go vet");
    ok(go(&["build", "."]).env("GOOS", "wasip1").env("GOARCH", "wasm"), "go build (wasip1)");

    let out = ok(&mut durasync_go(&["test", "note", "-v"]), "durasync-go test");
    let text = output_text(&out);
    assert!(text.contains("--- PASS: TestWritesTheInputThenNothingWhenUnchanged"), "{text}");
    ok(&mut durasync_go(&["build", "note", "note/note.wasm"]), "durasync-go build");
    let refused = durasync_go(&["bindings", "note"]).output().unwrap();
    let text = output_text(&refused);
    assert!(
        !refused.status.success() && text.contains("imports the bindings from durasync.dev/guest"),
        "{text}"
    );
    assert_eq!(vendor_files(), ["go.mod", "go.sum", "note.wasm", "plugin.go", "plugin_test.go"]);
    nothing_points_into_the_checkout(&plugin);

    // go.sum is checked: a wrong checksum for the third-party module stops
    // the build.
    let good = sum.clone();
    let bad: String = good
        .lines()
        .map(|l| {
            if l.starts_with("example.com/tally v1.2.0 h1:") {
                "example.com/tally v1.2.0 h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
            } else {
                l
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(plugin.join("go.sum"), bad).unwrap();
    let refused = durasync_go(&["build", "note", "note/refused.wasm"]).output().unwrap();
    let text = output_text(&refused);
    assert!(!refused.status.success() && text.contains("SECURITY ERROR"), "{text}");
    assert!(!plugin.join("refused.wasm").exists());
    std::fs::write(plugin.join("go.sum"), good).unwrap();

    golden_case_and_run(&plugin, &plugin.join("note.wasm"));
}
