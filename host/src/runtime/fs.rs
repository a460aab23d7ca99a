//! The host side of interface `fs`: a thin adapter from the WIT bindings to
//! the plugin services ([`crate::services`]). Each method looks the handle
//! up, calls the session, and converts types; every rule lives in the
//! services layer, shared with the SDK's native harness.
//!
//! A call refused because the run's deadline had passed ends the call with
//! a trap (reported as the timeout), so a plugin cannot keep working by
//! ignoring the `limit` error.

use wasmtime::component::Resource;

use super::bindings::durasync::plugin::fs::{Host, HostDir};
use super::bindings::durasync::plugin::types::{self as wit, Error as WitError};
use super::state::HostView;
use crate::services::{self, Dir, Entry, EntryKind, File, Outcome, Report};

type WitResult<T> = wasmtime::Result<Result<T, WitError>>;

// The one conversion per contract type between the bindings and the
// contract crate's plain types (`durasync-contract`), which the services
// take and return: the variants and fields are the same, one for one.

impl From<services::Error> for WitError {
    fn from(e: services::Error) -> Self {
        use services::Error as E;
        match e {
            E::InvalidPath(m) => WitError::InvalidPath(m),
            E::NotGranted(m) => WitError::NotGranted(m),
            E::ReadOnly(m) => WitError::ReadOnly(m),
            E::NotFound(m) => WitError::NotFound(m),
            E::NotADirectory(m) => WitError::NotADirectory(m),
            E::Limit(m) => WitError::Limit(m),
            E::Unsupported(m) => WitError::Unsupported(m),
            E::Committed(m) => WitError::Committed(m),
            E::Io(m) => WitError::Io(m),
        }
    }
}

impl From<Report> for wit::Report {
    fn from(r: Report) -> Self {
        let outcome = match r.outcome {
            Outcome::Unchanged => wit::Outcome::Unchanged,
            Outcome::Created => wit::Outcome::Created,
            Outcome::Replaced => wit::Outcome::Replaced,
            Outcome::Removed => wit::Outcome::Removed,
        };
        wit::Report { outcome, written: r.written, removed: r.removed }
    }
}

impl From<Entry> for wit::Entry {
    fn from(e: Entry) -> Self {
        let kind = match e.kind {
            EntryKind::File => wit::EntryKind::File,
            EntryKind::Directory => wit::EntryKind::Directory,
            EntryKind::Symlink => wit::EntryKind::Symlink,
            EntryKind::Other => wit::EntryKind::Other,
        };
        wit::Entry { name: e.name, kind }
    }
}

impl From<wit::File> for File {
    fn from(f: wit::File) -> Self {
        File { name: f.name, contents: f.contents, mode: f.mode }
    }
}

impl HostView<'_> {
    /// The call's result for the guest, or a trap once the deadline passed
    /// (also when it passed during the call: the core then stopped before
    /// its commit point, or committed, and the run's records say which).
    fn done<T>(&mut self, r: services::Result<T>) -> WitResult<T> {
        if self.session.past_deadline() {
            return Err(wasmtime::Error::msg("deadline reached"));
        }
        Ok(r.map_err(WitError::from))
    }

    fn push_dir(&mut self, dir: services::Result<Dir>) -> WitResult<Resource<Dir>> {
        match dir {
            Ok(dir) => Ok(Ok(self.table.push(dir)?)),
            Err(e) => self.done(Err(e)),
        }
    }
}

impl HostDir for HostView<'_> {
    fn sync(&mut self, d: Resource<Dir>, path: String, files: Vec<wit::File>) -> WitResult<wit::Report> {
        let dir = self.table.get(&d)?;
        let files = files.into_iter().map(File::from).collect();
        let r = self.session.sync(dir, &path, files).map(Into::into);
        self.done(r)
    }

    fn write_file(
        &mut self,
        d: Resource<Dir>,
        path: String,
        contents: Vec<u8>,
        mode: u32,
    ) -> WitResult<wit::Report> {
        let dir = self.table.get(&d)?;
        let r = self.session.write_file(dir, &path, &contents, mode).map(Into::into);
        self.done(r)
    }

    fn read_file(&mut self, d: Resource<Dir>, path: String) -> WitResult<Option<Vec<u8>>> {
        let dir = self.table.get(&d)?;
        let r = self.session.read_file(dir, &path);
        self.done(r)
    }

    fn list_dir(&mut self, d: Resource<Dir>, path: String) -> WitResult<Vec<wit::Entry>> {
        let dir = self.table.get(&d)?;
        let r =
            self.session.list_dir(dir, &path).map(|entries| entries.into_iter().map(Into::into).collect());
        self.done(r)
    }

    fn remove(&mut self, d: Resource<Dir>, path: String) -> WitResult<bool> {
        let dir = self.table.get(&d)?;
        let r = self.session.remove(dir, &path);
        self.done(r)
    }

    fn exchange(&mut self, d: Resource<Dir>, a: String, b: String) -> WitResult<()> {
        let dir = self.table.get(&d)?;
        let r = self.session.exchange(dir, &a, &b);
        self.done(r)
    }

    fn fsync(&mut self, d: Resource<Dir>, path: String) -> WitResult<()> {
        let dir = self.table.get(&d)?;
        let r = self.session.fsync(dir, &path);
        self.done(r)
    }

    fn open_dir(&mut self, d: Resource<Dir>, path: String) -> WitResult<Resource<Dir>> {
        let dir = self.table.get(&d)?;
        let sub = self.session.open_dir(dir, &path);
        self.push_dir(sub)
    }

    fn drop(&mut self, d: Resource<Dir>) -> wasmtime::Result<()> {
        self.table.delete(d)?;
        self.session.handle_dropped();
        Ok(())
    }
}

impl Host for HostView<'_> {
    fn open_root(&mut self, name: String) -> WitResult<Resource<Dir>> {
        let dir = self.session.open_root(&name);
        self.push_dir(dir)
    }
}

impl wit::Host for HostView<'_> {}
impl super::bindings::durasync::plugin::plugin_types::Host for HostView<'_> {}
