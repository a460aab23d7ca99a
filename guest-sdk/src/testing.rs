//! The native test harness: run a plugin with plain `cargo test`, no Wasm
//! toolchain, against a fake host whose roots are folders of a temporary
//! directory.
//!
//! The fake host serves every [`Dir`](crate::Dir) call with the durasync
//! host's own plugin services (`durasync::services`), the code `durasync
//! run` uses: the access checks, path and mode rules, the depth limit, the
//! per-run caps on bytes and files, dry runs, the outcomes (`unchanged`
//! when nothing changes) and the errors are the real ones. What it does not
//! model: the sandbox's fuel, memory and time limits and the log volume cap.
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

use durasync::services::{Access, Grant, Session};

use crate::Level;
use crate::Plugin;
use crate::backend::{Enter, State};

pub use crate::Op;
pub use crate::backend::Operation;
/// What `durasync run --json` lists for each operation (`outcome`, `plan`, …).
pub use durasync::services::Operation as Record;
/// The per-run limits (`[limits]` of a manifest); the harness enforces the
/// bytes and files written per run.
pub use durasync::services::PluginLimits;

/// The name [`PluginLimits`] had before the contract types were gathered in
/// one crate; kept so vendors' existing tests still build.
#[deprecated(since = "0.1.0", note = "renamed to `PluginLimits`: one plugin's `[limits]` table")]
pub type Limits = PluginLimits;

/// One granted root of the fake host.
#[derive(Debug, Clone)]
struct RootSpec {
    path: PathBuf,
    access: Access,
    special_modes: bool,
}

/// A fake host: named roots in a temporary directory (removed on drop).
pub struct Host {
    dir: tempfile::TempDir,
    state: Rc<State>,
    roots: BTreeMap<String, RootSpec>,
    name: String,
    limits: PluginLimits,
    dry_run: bool,
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
        let host = Host {
            dir,
            state: Rc::default(),
            roots: BTreeMap::new(),
            name: "under test".into(),
            limits: PluginLimits::default(),
            dry_run: false,
        };
        host.reset();
        host
    }

    /// The same host, naming the plugin `name` in messages (as a manifest's
    /// `name` does).
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self.reset();
        self
    }

    /// The same host with these per-run limits.
    #[must_use]
    pub fn limits(mut self, limits: PluginLimits) -> Self {
        self.limits = limits;
        self.reset();
        self
    }

    /// The same host, planning every change instead of making it (as
    /// `durasync run --dry-run`).
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self.reset();
        self
    }

    /// Grant the root `name` read-write and allow setuid, setgid and sticky
    /// bits in it (`special_modes = true` in a manifest).
    #[must_use]
    pub fn root_with_special_modes(self, name: &str) -> Self {
        self.grant(name, Access::ReadWrite, true)
    }

    /// A fresh session (a new run): the grants, the limits, empty budgets.
    fn reset(&self) {
        let mut session = Session::new(&self.name, BTreeMap::new(), self.limits, self.dry_run);
        for (name, spec) in &self.roots {
            let grant =
                Grant::open(&spec.path, spec.access, spec.special_modes).expect("opening a root folder");
            session.grant(name, grant);
        }
        *self.state.session.borrow_mut() = session;
    }

    /// Grant the root `name` read-write, as an empty folder of the temp dir.
    #[must_use]
    pub fn root(self, name: &str) -> Self {
        self.grant(name, Access::ReadWrite, false)
    }

    /// Grant the root `name` read-only, as an empty folder of the temp dir
    /// (fill it through [`Host::path`] before running the plugin).
    #[must_use]
    pub fn read_only_root(self, name: &str) -> Self {
        self.grant(name, Access::ReadOnly, false)
    }

    fn grant(mut self, name: &str, access: Access, special_modes: bool) -> Self {
        let path = self.dir.path().join("roots").join(name);
        std::fs::create_dir_all(&path).expect("creating a root folder");
        self.roots.insert(name.to_owned(), RootSpec { path, access, special_modes });
        self.reset();
        self
    }

    /// The folder that backs the root `name`.
    pub fn path(&self, root: &str) -> PathBuf {
        self.roots.get(root).unwrap_or_else(|| panic!("root {root:?} was not granted")).path.clone()
    }

    /// Run the plugin `P` once, as `durasync run` would: `config` is the
    /// `[config]` table as JSON, `input` the bytes of `--input`.
    /// Each run starts with fresh per-run budgets, as in the real host.
    pub fn run<P: Plugin>(&self, config: &str, input: &[u8]) -> Run {
        self.reset();
        let ops_before = self.state.operations.borrow().len();
        let logs_before = self.state.logs.borrow().len();
        let result = self.enter(|| crate::__private::run::<P>(config, input));
        let session = self.state.session.borrow();
        Run {
            result,
            operations: self.state.operations.borrow()[ops_before..].to_vec(),
            logs: self.state.logs.borrow()[logs_before..].to_vec(),
            records: session.operations().to_vec(),
            limit: session.limit_hit().map(str::to_owned),
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
    /// The host's record of its durable operations, as `durasync run
    /// --json` lists them (`ms` is a measured time).
    pub records: Vec<Record>,
    /// The per-run limit it ran into, if any: the real host fails such a
    /// run (exit status 11) whatever the plugin returned.
    pub limit: Option<String>,
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
