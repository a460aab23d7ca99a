//! The wasm32 backend: every call goes to the host through the bindings.
//!
//! The one conversion a code generator forces: the bindings' types ↔ the
//! contract crate's plain types, one function per type at the bottom of
//! this file. A new WIT function adds one method here that calls the
//! binding and converts with them.

use crate::bindings::durasync::plugin::{fs, log as wit_log, types as wit};
use crate::{Entry, EntryKind, Error, File, Info, Level, Outcome, Plugin, Report, Result};

/// A host `dir` resource.
#[derive(Debug)]
pub struct Dir(fs::Dir);

pub fn open_root(name: &str) -> Result<Dir> {
    fs::open_root(name).map(Dir).map_err(error)
}

impl Dir {
    pub fn sync(&self, path: &str, files: Vec<File>) -> Result<Report> {
        let files: Vec<wit::File> = files.into_iter().map(file).collect();
        self.0.sync(path, &files).map(report).map_err(error)
    }

    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<Report> {
        self.0.write_file(path, contents, mode).map(report).map_err(error)
    }

    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>> {
        self.0.read_file(path).map_err(error)
    }

    pub fn list_dir(&self, path: &str) -> Result<Vec<Entry>> {
        let entries = self.0.list_dir(path).map_err(error)?;
        Ok(entries.into_iter().map(entry).collect())
    }

    pub fn remove(&self, path: &str) -> Result<bool> {
        self.0.remove(path).map_err(error)
    }

    pub fn exchange(&self, a: &str, b: &str) -> Result<()> {
        self.0.exchange(a, b).map_err(error)
    }

    pub fn fsync(&self, path: &str) -> Result<()> {
        self.0.fsync(path).map_err(error)
    }

    pub fn open_dir(&self, path: &str) -> Result<Dir> {
        self.0.open_dir(path).map(Dir).map_err(error)
    }
}

pub fn log(level: Level, message: &str) {
    let level = match level {
        Level::Debug => wit_log::Level::Debug,
        Level::Info => wit_log::Level::Info,
        Level::Warn => wit_log::Level::Warn,
        Level::Error => wit_log::Level::Error,
    };
    wit_log::log(level, message);
}

/// The plugin's `describe`, in the bindings' type.
pub fn describe<P: Plugin>() -> crate::bindings::Info {
    let Info { name, version, summary, roots } = P::describe();
    crate::bindings::Info { name, version, summary, roots }
}

fn file(f: File) -> wit::File {
    wit::File { name: f.name, contents: f.contents, mode: f.mode }
}

fn entry(e: wit::Entry) -> Entry {
    let kind = match e.kind {
        wit::EntryKind::File => EntryKind::File,
        wit::EntryKind::Directory => EntryKind::Directory,
        wit::EntryKind::Symlink => EntryKind::Symlink,
        wit::EntryKind::Other => EntryKind::Other,
    };
    Entry { name: e.name, kind }
}

fn report(r: wit::Report) -> Report {
    let outcome = match r.outcome {
        wit::Outcome::Unchanged => Outcome::Unchanged,
        wit::Outcome::Created => Outcome::Created,
        wit::Outcome::Replaced => Outcome::Replaced,
        wit::Outcome::Removed => Outcome::Removed,
    };
    Report { outcome, written: r.written, removed: r.removed }
}

fn error(e: wit::Error) -> Error {
    match e {
        wit::Error::InvalidPath(m) => Error::InvalidPath(m),
        wit::Error::NotGranted(m) => Error::NotGranted(m),
        wit::Error::ReadOnly(m) => Error::ReadOnly(m),
        wit::Error::NotFound(m) => Error::NotFound(m),
        wit::Error::NotADirectory(m) => Error::NotADirectory(m),
        wit::Error::Limit(m) => Error::Limit(m),
        wit::Error::Unsupported(m) => Error::Unsupported(m),
        wit::Error::Committed(m) => Error::Committed(m),
        wit::Error::Io(m) => Error::Io(m),
    }
}
