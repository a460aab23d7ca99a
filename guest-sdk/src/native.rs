//! The native backend: the same calls, served by the host's own plugin
//! services ([`durasync::services`]) on the roots of the
//! [`testing::Host`](crate::testing::Host) that is running the plugin on
//! this thread. Access checks, path and mode rules, the depth limit, the
//! per-run budgets, dry runs, outcomes and errors are the host's, because
//! the code is the host's, and so are the values: the services take and
//! return the contract crate's types, which are this SDK's, so nothing is
//! converted.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

use durasync::services::{self, Session};

use crate::{Entry, Error, File, Level, Op, Report, Result};

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
    /// nothing, an `exchange` and an `fsync` report [`Outcome::Unchanged`](durasync_contract::Outcome::Unchanged)
    /// with no files.
    pub result: Result<Report>,
}

/// What the fake host keeps for one [`testing::Host`](crate::testing::Host).
pub(crate) struct State {
    /// The run's session: grants, limits, budgets, the operation record.
    pub session: RefCell<Session>,
    pub operations: RefCell<Vec<Operation>>,
    pub logs: RefCell<Vec<(Level, String)>>,
}

impl Default for State {
    fn default() -> Self {
        State {
            session: RefCell::new(Session::new(
                "plugin under test",
                BTreeMap::new(),
                Default::default(),
                false,
            )),
            operations: RefCell::default(),
            logs: RefCell::default(),
        }
    }
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

/// A directory handle of the fake host.
pub struct Dir {
    dir: services::Dir,
    state: Rc<State>,
}

impl fmt::Debug for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dir").field("root", &self.dir.root()).field("path", &self.dir.path()).finish()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if let Ok(mut session) = self.state.session.try_borrow_mut() {
            session.handle_dropped();
        }
    }
}

pub fn open_root(name: &str) -> Result<Dir> {
    let Some(state) = current() else {
        return Err(Error::NotGranted(format!(
            "root {name:?}: no host is running this plugin (outside wasm, run it with \
             durasync_guest::testing::Host)"
        )));
    };
    let dir = state.session.borrow_mut().open_root(name)?;
    Ok(Dir { dir, state })
}

impl Dir {
    /// Run a recorded call and keep its record, with the typed result.
    fn mutate<T>(&self, f: impl FnOnce(&mut Session, &services::Dir) -> services::Result<T>) -> Result<T> {
        let mut session = self.state.session.borrow_mut();
        let result = f(&mut session, &self.dir);
        let rec = session.operations().last().expect("every mutating call is recorded");
        let recorded = match &result {
            Ok(_) => Ok(rec.report().expect("a successful call records its outcome")),
            Err(e) => Err(e.clone()),
        };
        self.state.operations.borrow_mut().push(Operation {
            root: rec.root.clone(),
            path: rec.path.clone(),
            op: rec.op,
            result: recorded,
        });
        result
    }

    pub fn sync(&self, path: &str, files: Vec<File>) -> Result<Report> {
        self.mutate(|s, d| s.sync(d, path, files))
    }

    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<Report> {
        self.mutate(|s, d| s.write_file(d, path, contents, mode))
    }

    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>> {
        self.state.session.borrow_mut().read_file(&self.dir, path)
    }

    pub fn list_dir(&self, path: &str) -> Result<Vec<Entry>> {
        self.state.session.borrow_mut().list_dir(&self.dir, path)
    }

    pub fn remove(&self, path: &str) -> Result<bool> {
        self.mutate(|s, d| s.remove(d, path))
    }

    pub fn exchange(&self, a: &str, b: &str) -> Result<()> {
        self.mutate(|s, d| s.exchange(d, a, b))
    }

    pub fn fsync(&self, path: &str) -> Result<()> {
        self.mutate(|s, d| s.fsync(d, path))
    }

    pub fn open_dir(&self, path: &str) -> Result<Dir> {
        let dir = self.state.session.borrow_mut().open_dir(&self.dir, path)?;
        Ok(Dir { dir, state: self.state.clone() })
    }
}

pub fn log(level: Level, message: &str) {
    if let Some(state) = current() {
        state.logs.borrow_mut().push((level, message.to_owned()));
    }
    // Shown by the test harness when a test fails.
    eprintln!("[{level:?}] {message}");
}
