//! The native backend: the same calls, served by the host's own durable
//! core on the roots of the [`testing::Host`](crate::testing::Host) that
//! is running the plugin on this thread. Path rules, outcomes and errors
//! are the host's, because the code is the host's.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;

use durasync::durable::{self, Options, Tree};

use crate::{Entry, EntryKind, Error, File, Level, Outcome, Report, Result};

/// One granted root of the fake host.
#[derive(Debug, Clone)]
pub(crate) struct RootSpec {
    pub path: PathBuf,
    pub writable: bool,
}

/// Which durable operation a plugin asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`Dir::sync`](crate::Dir::sync).
    Sync,
    /// [`Dir::write_file`](crate::Dir::write_file).
    WriteFile,
    /// [`Dir::remove`](crate::Dir::remove).
    Remove,
    /// [`Dir::exchange`](crate::Dir::exchange).
    Exchange,
    /// [`Dir::fsync`](crate::Dir::fsync).
    Fsync,
}

impl Op {
    /// The WIT name (`sync`, `write-file`, `remove`), as the host prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Sync => "sync",
            Op::WriteFile => "write-file",
            Op::Remove => "remove",
            Op::Exchange => "exchange",
            Op::Fsync => "fsync",
        }
    }
}

/// One durable operation a plugin asked for, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The root it was made in.
    pub root: String,
    /// Its path relative to that root.
    pub path: String,
    /// What was asked.
    pub op: Op,
    /// The report, or the error the plugin received. A `remove` of
    /// nothing, an `exchange` and an `fsync` report [`Outcome::Unchanged`]
    /// with no files.
    pub result: Result<Report>,
}

/// What the fake host keeps for one [`testing::Host`](crate::testing::Host).
#[derive(Default)]
pub(crate) struct State {
    pub roots: RefCell<BTreeMap<String, RootSpec>>,
    pub operations: RefCell<Vec<Operation>>,
    pub logs: RefCell<Vec<(Level, String)>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<State>>> = const { RefCell::new(None) };
}

/// Makes `state` the host of this thread until dropped (then restores the previous one).
pub(crate) struct Enter(Option<Rc<State>>);

impl Enter {
    pub fn new(state: Rc<State>) -> Self {
        Enter(CURRENT.with(|c| c.replace(Some(state))))
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

fn current() -> Option<Rc<State>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// What an operation that changed nothing reports.
const NOTHING: Report = Report { outcome: Outcome::Unchanged, written: 0, removed: 0 };

/// A directory handle of the fake host.
pub struct Dir {
    fd: OwnedFd,
    root: String,
    /// Its path relative to the root (`""` for the root).
    prefix: String,
    writable: bool,
    state: Rc<State>,
}

impl fmt::Debug for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dir").field("root", &self.root).field("path", &self.prefix).finish()
    }
}

pub fn open_root(name: &str) -> Result<Dir> {
    let Some(state) = current() else {
        return Err(Error::NotGranted(format!(
            "root {name:?}: no host is running this plugin (outside wasm, run it with \
             durasync_guest::testing::Host)"
        )));
    };
    let spec = state.roots.borrow().get(name).cloned();
    let Some(spec) = spec else {
        let granted: Vec<String> = state.roots.borrow().keys().cloned().collect();
        let granted = if granted.is_empty() { "none".to_owned() } else { granted.join(", ") };
        return Err(Error::NotGranted(format!(
            "root `{name}` is not granted to plugin under test (granted: {granted})"
        )));
    };
    let file = std::fs::File::open(&spec.path)
        .map_err(|e| Error::Io(format!("open root {name:?} at {}: {e}", spec.path.display())))?;
    Ok(Dir { fd: file.into(), root: name.to_owned(), prefix: String::new(), writable: spec.writable, state })
}

impl Dir {
    fn full(&self, path: &str) -> String {
        match (self.prefix.as_str(), path) {
            ("", p) => p.to_owned(),
            (pre, "" | ".") => pre.to_owned(),
            (pre, p) => format!("{pre}/{p}"),
        }
    }

    fn check_writable(&self, path: &str) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::ReadOnly(format!(
                "{}: root `{}` is granted read-only; the manifest must say access = \"rw\" to write to it",
                self.full(path),
                self.root
            )))
        }
    }

    fn record(&self, op: Op, path: String, result: &Result<Report>) {
        self.state.operations.borrow_mut().push(Operation {
            root: self.root.clone(),
            path,
            op,
            result: result.clone(),
        });
    }

    pub fn sync(&self, path: &str, files: Vec<File>) -> Result<Report> {
        let result = self.sync_inner(path, files);
        self.record(Op::Sync, self.full(path), &result);
        result
    }

    fn sync_inner(&self, path: &str, files: Vec<File>) -> Result<Report> {
        self.check_writable(path)?;
        let opts = Options::default();
        let mut tree = Tree::new();
        let (parent, name) = durable::split_last(path).map_err(error)?;
        for f in files {
            tree.add_file(&f.name, f.contents, f.mode).map_err(error)?;
        }
        tree.check_limits(&opts.limits).map_err(error)?;
        let parent = durable::create_dirs_beneath(self.fd.as_fd(), parent, &opts).map_err(error)?;
        durable::sync_dir(parent.as_fd(), name, &tree, &opts).map(report).map_err(error)
    }

    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<Report> {
        let result = (|| {
            self.check_writable(path)?;
            let (parent, name) = durable::split_last(path).map_err(error)?;
            if mode & !durable::tree::MODE_MASK != 0 {
                return Err(error(durable::Error::InvalidMode { path: path.to_owned(), mode }));
            }
            let opts = Options::default();
            let parent = durable::create_dirs_beneath(self.fd.as_fd(), parent, &opts).map_err(error)?;
            durable::write_file(parent.as_fd(), name, contents, Some(mode), &opts).map(report).map_err(error)
        })();
        self.record(Op::WriteFile, self.full(path), &result);
        result
    }

    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>> {
        durable::read_file(self.fd.as_fd(), path).map_err(error)
    }

    pub fn list_dir(&self, path: &str) -> Result<Vec<Entry>> {
        let entries = durable::list_dir(self.fd.as_fd(), path).map_err(error)?;
        Ok(entries
            .into_iter()
            .map(|e| Entry {
                name: e.name,
                kind: match e.kind {
                    durable::EntryKind::File => EntryKind::File,
                    durable::EntryKind::Directory => EntryKind::Directory,
                    durable::EntryKind::Symlink => EntryKind::Symlink,
                    durable::EntryKind::Other => EntryKind::Other,
                },
            })
            .collect())
    }

    pub fn remove(&self, path: &str) -> Result<bool> {
        let result = (|| {
            self.check_writable(path)?;
            let (parent, name) = durable::split_last(path).map_err(error)?;
            let parent = match durable::open_beneath(self.fd.as_fd(), parent) {
                Ok(fd) => fd,
                // Nothing is there when a parent is missing.
                Err(durable::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(error(e)),
            };
            durable::remove(parent.as_fd(), name, &Options::default()).map(|r| r.map(report)).map_err(error)
        })();
        let recorded = result.clone().map(|r| r.unwrap_or(NOTHING));
        self.record(Op::Remove, self.full(path), &recorded);
        result.map(|r| r.is_some())
    }

    pub fn exchange(&self, a: &str, b: &str) -> Result<()> {
        let result = self.exchange_inner(a, b);
        let shown = format!("{} <-> {}", self.full(a), self.full(b));
        self.record(Op::Exchange, shown, &result.clone().map(|()| NOTHING));
        result
    }

    fn exchange_inner(&self, a: &str, b: &str) -> Result<()> {
        self.check_writable(a)?;
        let (pa, na) = durable::split_last(a).map_err(error)?;
        let (pb, nb) = durable::split_last(b).map_err(error)?;
        let da = durable::open_beneath(self.fd.as_fd(), pa).map_err(error)?;
        let db = durable::open_beneath(self.fd.as_fd(), pb).map_err(error)?;
        durable::exchange(da.as_fd(), na, db.as_fd(), nb, &Options::default()).map_err(error)
    }

    pub fn fsync(&self, path: &str) -> Result<()> {
        let result = self.fsync_inner(path);
        self.record(Op::Fsync, self.full(path), &result.clone().map(|()| NOTHING));
        result
    }

    // fsync changes no contents, so a read-only root allows it.
    fn fsync_inner(&self, path: &str) -> Result<()> {
        let opts = Options::default();
        if path.is_empty() || path == "." {
            return durable::fsync(self.fd.as_fd(), None, &opts).map_err(error);
        }
        let (parent, name) = durable::split_last(path).map_err(error)?;
        let parent = durable::open_beneath(self.fd.as_fd(), parent).map_err(error)?;
        durable::fsync(parent.as_fd(), Some(name), &opts).map_err(error)
    }

    pub fn open_dir(&self, path: &str) -> Result<Dir> {
        let fd = durable::open_beneath(self.fd.as_fd(), path).map_err(error)?;
        Ok(Dir {
            fd,
            root: self.root.clone(),
            prefix: self.full(path),
            writable: self.writable,
            state: self.state.clone(),
        })
    }
}

pub fn log(level: Level, message: &str) {
    if let Some(state) = current() {
        state.logs.borrow_mut().push((level, message.to_owned()));
    }
    // Shown by the test harness when a test fails.
    eprintln!("[{level:?}] {message}");
}

fn report(r: durable::Report) -> Report {
    let outcome = match r.outcome {
        durable::Outcome::Unchanged => Outcome::Unchanged,
        durable::Outcome::Created => Outcome::Created,
        durable::Outcome::Replaced => Outcome::Replaced,
        durable::Outcome::Removed => Outcome::Removed,
    };
    Report { outcome, written: r.written, removed: r.removed }
}

/// The core's error as the WIT variant a plugin receives: the same mapping
/// as the host's runtime (`host/src/runtime/errors.rs`, `to_wit`).
fn error(e: durable::Error) -> Error {
    use durable::Error as E;
    let message = e.to_string();
    match e {
        E::InvalidPath { .. } | E::Duplicate { .. } | E::InvalidMode { .. } | E::Symlink { .. } => {
            Error::InvalidPath(message)
        }
        E::NotFound { .. } => Error::NotFound(message),
        E::NotADirectory { .. } => Error::NotADirectory(message),
        E::Limit { .. } => Error::Limit(message),
        E::Unsupported { .. } => Error::Unsupported(message),
        E::Committed { .. } => Error::Committed(message),
        E::NotAFile { .. } | E::UnsupportedEntry { .. } | E::Io { .. } | E::Cancelled { .. } => {
            Error::Io(message)
        }
    }
}
