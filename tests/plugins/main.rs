//! plugins tests (see tests/README.md): the real plugins — certsync,
//! installer, example — built for wasm32-wasip2 and run end to end through
//! the real `durasync run`; the authoring guide's steps run as written; the
//! committed manifests' sha256 pins checked against a fresh build.

mod certsync;
mod go;
mod golden;
mod guide;
mod harness;
mod hostile_go;
mod hostile_python;
mod installer;
mod kits;
mod languages;
mod pins;
mod sandbox;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use durasync_test_support as support;
use serde_json::Value;
use support::{base64, sha256_of_file, shared_cache};

// The documented exit statuses (docs/cli.md, host/src/cli/exit.rs).
const OK: i32 = 0;
const PLUGIN_ERROR: i32 = 10;

/// The plugin packages of the workspace, built once per test binary.
fn wasm(package: &str) -> PathBuf {
    support::wasm::build("Cargo.toml", package)
}

/// One plugin set up in a fresh temporary directory: one empty folder per
/// granted root and a manifest pinning the freshly built component.
struct Fixture {
    tmp: tempfile::TempDir,
    package: String,
    roots: Vec<String>,
}

impl Fixture {
    fn new(package: &str, roots: &[&str], config: &str) -> Fixture {
        let tmp = tempfile::Builder::new().prefix("durasync-plugins-").tempdir().unwrap();
        for root in roots {
            std::fs::create_dir_all(tmp.path().join(root)).unwrap();
        }
        let f = Fixture {
            tmp,
            package: package.to_owned(),
            roots: roots.iter().map(|r| r.to_string()).collect(),
        };
        f.set_config(config);
        f
    }

    /// Rewrite the manifest with `config` (TOML) as its `[config]` table.
    fn set_config(&self, config: &str) {
        let wasm = wasm(&self.package);
        let mut text = format!(
            "name = \"{}\"\nwasm = \"{}\"\nsha256 = \"{}\"\n",
            self.package,
            wasm.display(),
            sha256_of_file(&wasm)
        );
        for root in &self.roots {
            text += &format!("[roots.{root}]\npath = \"{root}\"\naccess = \"rw\"\n");
        }
        text += &format!("[config]\n{config}\n");
        std::fs::write(self.manifest(), text).unwrap();
    }

    fn manifest(&self) -> PathBuf {
        self.tmp.path().join("plugin.toml")
    }

    fn root(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `durasync run MANIFEST --input - --json` with `input` on stdin.
    fn run(&self, input: &[u8]) -> Done {
        run_manifest(&self.manifest(), input, &[])
    }

    /// The regular files beneath a root: path → (mode, bytes), lock files left out.
    fn files(&self, root: &str) -> BTreeMap<String, (u32, Vec<u8>)> {
        files(&self.root(root))
    }
}

/// `durasync run MANIFEST --input - --json ARGS`, with a compile cache
/// shared by this test binary (so only the first run of a plugin compiles it).
fn run_manifest(manifest: &Path, input: &[u8], args: &[&str]) -> Done {
    let mut cmd = Command::new(support::durasync());
    cmd.arg("run").arg(manifest).args(["--input", "-", "--json"]).args(args);
    cmd.env("XDG_CACHE_HOME", shared_cache());
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
    Done { status: out.status.code().unwrap_or(-1), stdout, stderr, json }
}

/// What one `durasync run --json` did.
struct Done {
    status: i32,
    stdout: String,
    stderr: String,
    json: Value,
}

/// Everything, stdout included, for the message of a failed assertion.
impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Done")
            .field("status", &self.status)
            .field("stdout", &self.stdout)
            .field("stderr", &self.stderr)
            .field("json", &self.json)
            .finish()
    }
}

impl Done {
    /// The plugin's success message; panics with everything when the run failed.
    #[track_caller]
    fn ok(&self) -> &str {
        assert_eq!(self.status, OK, "durasync run failed: {self:#?}");
        self.json["result"].as_str().expect("a result message")
    }

    /// The error on stderr; panics unless the plugin returned an error.
    #[track_caller]
    fn plugin_error(&self) -> &str {
        assert_eq!(self.status, PLUGIN_ERROR, "expected a plugin error: {self:#?}");
        &self.stderr
    }

    /// Each operation as `(op, path, outcome, written, removed)`.
    fn ops(&self) -> Vec<(String, String, String, u64, u64)> {
        let Some(ops) = self.json["operations"].as_array() else { return Vec::new() };
        ops.iter()
            .map(|o| {
                (
                    o["op"].as_str().unwrap().to_owned(),
                    o["path"].as_str().unwrap().to_owned(),
                    o["outcome"].as_str().unwrap().to_owned(),
                    o["written"].as_u64().unwrap(),
                    o["removed"].as_u64().unwrap(),
                )
            })
            .collect()
    }
}

fn files(dir: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out);
    out
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(Result::unwrap).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().into_string().unwrap();
        if name == ".durasync.lock" {
            continue;
        }
        let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if meta.is_dir() {
            walk(&e.path(), &path, out);
        } else {
            out.insert(path, (meta.permissions().mode() & 0o7777, std::fs::read(e.path()).unwrap()));
        }
    }
}

#[test]
fn base64_matches_the_rfc_4648_examples() {
    let cases = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")];
    for (plain, encoded) in cases {
        assert_eq!(base64(plain.as_bytes()), encoded);
    }
}
