//! The native test harness: run a plugin with plain `cargo test`, no Wasm
//! toolchain, against a fake host whose roots are folders of a temporary
//! directory.
//!
//! The fake host serves every [`Dir`](crate::Dir) call with the durasync
//! host's own durable core, so the path rules, the outcomes (`unchanged`
//! when nothing changes) and the errors are the real ones. What it does not
//! model: the sandbox's fuel, memory and time limits, and the per-run caps
//! on bytes, files and log volume.
//!
//! ```
//! use durasync_guest::testing::Host;
//! use durasync_guest::{File, Info, Outcome, Plugin, Root};
//!
//! struct Keys;
//! impl Plugin for Keys {
//!     fn describe() -> Info { Info::new("keys", "0.1.0", "test").roots(["certs"]) }
//!     fn run(_: &str, input: &[u8]) -> Result<String, durasync_guest::RunError> {
//!         let report = Root::open("certs")?.sync("secrets/tls", [File::new("tls.key", input).mode(0o600)])?;
//!         Ok(report.outcome.to_string())
//!     }
//! }
//!
//! let host = Host::new().root("certs");
//! assert_eq!(host.run::<Keys>("{}", b"k").ok(), "created");
//! assert_eq!(host.run::<Keys>("{}", b"k").ok(), "unchanged");
//! assert_eq!(host.files("certs")["secrets/tls/tls.key"], (0o600, b"k".to_vec()));
//! ```

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::Level;
use crate::Plugin;
use crate::backend::{Enter, RootSpec, State};

pub use crate::backend::{Op, Operation};

/// A fake host: named roots in a temporary directory (removed on drop).
pub struct Host {
    dir: tempfile::TempDir,
    state: Rc<State>,
}

impl Default for Host {
    fn default() -> Self {
        Self::new()
    }
}

impl Host {
    /// A host that grants no roots yet.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("durasync-guest-").tempdir().expect("creating a temp dir");
        Host { dir, state: Rc::default() }
    }

    /// Grant the root `name` read-write, as an empty folder of the temp dir.
    #[must_use]
    pub fn root(self, name: &str) -> Self {
        self.grant(name, true)
    }

    /// Grant the root `name` read-only, as an empty folder of the temp dir
    /// (fill it through [`Host::path`] before running the plugin).
    #[must_use]
    pub fn read_only_root(self, name: &str) -> Self {
        self.grant(name, false)
    }

    fn grant(self, name: &str, writable: bool) -> Self {
        let path = self.dir.path().join("roots").join(name);
        std::fs::create_dir_all(&path).expect("creating a root folder");
        self.state.roots.borrow_mut().insert(name.to_owned(), RootSpec { path, writable });
        self
    }

    /// The folder that backs the root `name`.
    pub fn path(&self, root: &str) -> PathBuf {
        let roots = self.state.roots.borrow();
        roots.get(root).unwrap_or_else(|| panic!("root {root:?} was not granted")).path.clone()
    }

    /// Run the plugin `P` once, as `durasync run` would: `config` is the
    /// `[config]` table as JSON, `input` the bytes of `--input`.
    pub fn run<P: Plugin>(&self, config: &str, input: &[u8]) -> Run {
        let ops_before = self.state.operations.borrow().len();
        let logs_before = self.state.logs.borrow().len();
        let result = self.enter(|| crate::__private::run::<P>(config, input));
        Run {
            result,
            operations: self.state.operations.borrow()[ops_before..].to_vec(),
            logs: self.state.logs.borrow()[logs_before..].to_vec(),
        }
    }

    /// Call `f` with this host serving the SDK's calls on this thread (to
    /// test helpers of a plugin, or the SDK itself, without a [`Plugin`]).
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _entered = Enter::new(self.state.clone());
        f()
    }

    /// Every durable operation made so far, oldest first.
    pub fn operations(&self) -> Vec<Operation> {
        self.state.operations.borrow().clone()
    }

    /// Every message logged so far, oldest first.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.state.logs.borrow().clone()
    }

    /// The regular files beneath the root `root`, by path relative to it,
    /// with their permission bits and bytes (the host's lock files left out).
    pub fn files(&self, root: &str) -> BTreeMap<String, (u32, Vec<u8>)> {
        let mut out = BTreeMap::new();
        walk(&self.path(root), "", &mut out);
        out
    }
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("listing a root").map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().into_string().expect("utf-8 names");
        if durasync::durable::names::is_reserved(&name) {
            continue;
        }
        let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let meta = std::fs::symlink_metadata(entry.path()).expect("stat");
        if meta.is_dir() {
            walk(&entry.path(), &path, out);
        } else if meta.is_file() {
            let bytes = std::fs::read(entry.path()).expect("reading a file");
            out.insert(path, (meta.permissions().mode() & 0o7777, bytes));
        }
    }
}

/// What one [`Host::run`] did.
#[derive(Debug, Clone)]
pub struct Run {
    /// The plugin's result: its message, or its error's text.
    pub result: Result<String, String>,
    /// The durable operations it asked for, in order.
    pub operations: Vec<Operation>,
    /// What it logged, in order.
    pub logs: Vec<(Level, String)>,
}

impl Run {
    /// The success message; panics with the error when the run failed.
    #[track_caller]
    pub fn ok(&self) -> &str {
        match &self.result {
            Ok(m) => m,
            Err(e) => panic!("the plugin failed: {e}"),
        }
    }

    /// The error message; panics with the message when the run succeeded.
    #[track_caller]
    pub fn err(&self) -> &str {
        match &self.result {
            Ok(m) => panic!("the plugin succeeded: {m}"),
            Err(e) => e,
        }
    }

    /// The outcome of each successful operation, as `(op, path, outcome)`.
    pub fn outcomes(&self) -> Vec<(Op, &str, crate::Outcome)> {
        self.operations
            .iter()
            .filter_map(|o| o.result.as_ref().ok().map(|r| (o.op, o.path.as_str(), r.outcome)))
            .collect()
    }
}
