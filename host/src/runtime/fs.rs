//! The host side of interface `fs`: `dir` handles over the durable core.
//!
//! Each method is thin: look the handle up, check its access on the first
//! line if it mutates, check the run's write budget, resolve the guest's
//! path beneath the handle's fd with the core's resolver (one component at a
//! time, `O_NOFOLLOW`; `..`, absolute paths, NUL and links never pass),
//! call the core, convert. No guest path is ever joined to a host path.
//!
//! Every mutating call is recorded as an [`Operation`] for the run's report.
//! In a dry run nothing is changed: the call is planned with
//! [`durable::plan_sync`] (or its single-file equivalent) and the plugin
//! gets the report it would have got.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use wasmtime::component::{Resource, ResourceTable};

use super::bindings::durasync::plugin::fs::{Host, HostDir};
use super::bindings::durasync::plugin::types::{
    self, Entry, EntryKind as WitKind, Error as WitError, File, Outcome as WitOutcome,
};
use super::errors::to_wit;
use super::limits::{Limits, MAX_OPEN_DIRS};
use super::log::LogBudget;
use super::manifest::Access;
use crate::durable::{self, EntryKind, Options, Outcome, Plan, Report, Tree};

/// A `dir` handle: a directory fd beneath a granted root.
pub struct Dir {
    /// The root's name (reports, messages).
    root: String,
    /// The directory's path relative to the root (`""` for the root).
    rel: String,
    /// The directory itself; every guest path is resolved beneath it.
    fd: OwnedFd,
    /// Whether the plugin may write through it.
    access: Access,
}

/// A root a run grants: its name, an open fd and its access.
#[derive(Debug, Clone)]
pub struct GrantedRoot {
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) access: Access,
}

/// One durable operation a plugin asked for, as reported by `durasync run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operation {
    /// The root's name.
    pub root: String,
    /// The path beneath the root (`a <-> b` for an exchange).
    pub path: String,
    /// `sync`, `write-file`, `remove`, `exchange` or `fsync`.
    pub op: &'static str,
    /// `created`, `replaced`, `unchanged`, `removed`, `exchanged`,
    /// `fsynced`, or `failed`.
    pub outcome: &'static str,
    /// Files written.
    pub written: u32,
    /// Files of the old contents removed.
    pub removed: u32,
    /// How long the host took, in milliseconds.
    pub ms: f64,
    /// Why it failed (`outcome` = `failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// In a dry run: what would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Changes>,
}

/// The names a dry-run operation would add, change and remove (directories
/// end in `/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Paths that would appear.
    pub added: Vec<String>,
    /// Paths whose bytes, mode or kind would change.
    pub changed: Vec<String>,
    /// Paths that would disappear.
    pub removed: Vec<String>,
}

impl From<Plan> for Changes {
    fn from(p: Plan) -> Self {
        Changes { added: p.added, changed: p.changed, removed: p.removed }
    }
}

/// The per-call state behind interface `fs` and `log`.
pub(crate) struct HostState {
    pub plugin: String,
    pub roots: BTreeMap<String, GrantedRoot>,
    pub limits: Limits,
    pub dry_run: bool,
    pub written_bytes: u64,
    pub written_files: u64,
    /// The first per-run limit the plugin ran into: the run fails with it
    /// even if the plugin ignores the `limit` error it was given.
    pub limit_hit: Option<String>,
    pub operations: Vec<Operation>,
    pub log: LogBudget,
    open_dirs: usize,
}

impl HostState {
    pub(crate) fn new(
        plugin: &str,
        roots: BTreeMap<String, GrantedRoot>,
        limits: Limits,
        dry_run: bool,
    ) -> Self {
        HostState {
            plugin: plugin.to_owned(),
            roots,
            limits,
            dry_run,
            written_bytes: 0,
            written_files: 0,
            limit_hit: None,
            operations: Vec::new(),
            log: LogBudget::default(),
            open_dirs: 0,
        }
    }

    /// Refuse a write of `files` files and `bytes` bytes that would take the
    /// run over its budget. Nothing has been touched when this fails.
    fn check_budget(&mut self, files: u64, bytes: u64) -> Result<(), WitError> {
        let l = self.limits;
        let over = if self.written_files + files > l.write_files {
            Some(format!(
                "exceeded its limit of {} files written per run (limits.write_files): {} written, {} more asked for",
                l.write_files, self.written_files, files
            ))
        } else if self.written_bytes + bytes > l.write_bytes {
            Some(format!(
                "exceeded its limit of {} bytes written per run (limits.write_bytes): {} written, {} more asked for",
                l.write_bytes, self.written_bytes, bytes
            ))
        } else {
            None
        };
        match over {
            Some(msg) => {
                self.limit_hit.get_or_insert_with(|| msg.clone());
                Err(WitError::Limit(msg))
            }
            None => Ok(()),
        }
    }

    fn charge(&mut self, files: u64, bytes: u64) {
        self.written_files += files;
        self.written_bytes += bytes;
    }

    /// Run one mutating operation and record it.
    fn record<T>(
        &mut self,
        dir: &Dir,
        op: &'static str,
        path: &str,
        f: impl FnOnce(&mut Self) -> Result<(Done, T), WitError>,
    ) -> Result<T, WitError> {
        let start = Instant::now();
        let result = f(self);
        let ms = (start.elapsed().as_secs_f64() * 1e6).round() / 1e3;
        let path = if op == "exchange" { path.to_owned() } else { join(&dir.rel, path) };
        let mut rec = Operation {
            root: dir.root.clone(),
            path,
            op,
            outcome: "failed",
            written: 0,
            removed: 0,
            ms,
            error: None,
            plan: None,
        };
        let out = match result {
            Ok((done, value)) => {
                (rec.outcome, rec.written, rec.removed, rec.plan) =
                    (done.outcome, done.written, done.removed, done.plan);
                Ok(value)
            }
            Err(e) => {
                rec.error = Some(wit_message(&e));
                Err(e)
            }
        };
        self.operations.push(rec);
        out
    }
}

/// What a recorded operation did.
struct Done {
    outcome: &'static str,
    written: u32,
    removed: u32,
    plan: Option<Changes>,
}

impl Done {
    fn of(report: &Report, plan: Option<Changes>) -> Self {
        Done { outcome: report.outcome.as_str(), written: report.written, removed: report.removed, plan }
    }

    fn just(outcome: &'static str) -> Self {
        Done { outcome, written: 0, removed: 0, plan: None }
    }
}

/// The borrowed view the generated `Host` traits are implemented on.
pub(crate) struct HostView<'a> {
    pub table: &'a mut ResourceTable,
    pub state: &'a mut HostState,
}

/// The `HasData` marker for [`HostView`].
pub(crate) struct HasHost;

impl wasmtime::component::HasData for HasHost {
    type Data<'a> = HostView<'a>;
}

type WitResult<T> = wasmtime::Result<Result<T, WitError>>;

fn opts() -> Options<'static> {
    Options::default()
}

fn wit(e: durable::Error) -> WitError {
    to_wit(&e)
}

fn wit_message(e: &WitError) -> String {
    match e {
        WitError::InvalidPath(m) => format!("invalid-path: {m}"),
        WitError::NotGranted(m) => format!("not-granted: {m}"),
        WitError::ReadOnly(m) => format!("read-only: {m}"),
        WitError::NotFound(m) => format!("not-found: {m}"),
        WitError::NotADirectory(m) => format!("not-a-directory: {m}"),
        WitError::Limit(m) => format!("limit: {m}"),
        WitError::Unsupported(m) => format!("unsupported: {m}"),
        WitError::Committed(m) => format!("committed: {m}"),
        WitError::Io(m) => format!("io: {m}"),
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty() || b == ".") {
        (_, true) => a.to_owned(),
        (true, false) => b.to_owned(),
        (false, false) => format!("{a}/{b}"),
    }
}

/// The permission check every mutating method starts with.
fn writable(dir: &Dir) -> Result<(), WitError> {
    match dir.access {
        Access::ReadWrite => Ok(()),
        Access::ReadOnly => Err(WitError::ReadOnly(format!(
            "root `{}` is granted read-only; the manifest must say access = \"rw\" to write to it",
            dir.root
        ))),
    }
}

fn wit_report(r: &Report) -> types::Report {
    let outcome = match r.outcome {
        Outcome::Unchanged => WitOutcome::Unchanged,
        Outcome::Created => WitOutcome::Created,
        Outcome::Replaced => WitOutcome::Replaced,
        Outcome::Removed => WitOutcome::Removed,
    };
    types::Report { outcome, written: r.written, removed: r.removed }
}

/// The parent of `rel` beneath `dir`, or `None` when some part is missing.
fn parent_if_exists(dir: BorrowedFd<'_>, rel: &str) -> Result<Option<OwnedFd>, WitError> {
    match durable::open_beneath(dir, rel) {
        Ok(fd) => Ok(Some(fd)),
        Err(durable::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(wit(e)),
    }
}

/// What exists at `name` in `dir`, links not followed: `(is_dir, mode)`.
fn stat_entry(dir: BorrowedFd<'_>, name: &str) -> Result<Option<(bool, u32)>, WitError> {
    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode as _);
            Ok(Some((ft == rustix::fs::FileType::Directory, st.st_mode & 0o7777)))
        }
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(WitError::Io(format!("stat {name}: {}", std::io::Error::from(e)))),
    }
}

/// Refuse a symbolic link at `name` before the core takes its lock, so a
/// refused call leaves no trace (not even the lock file) in the root. The
/// core checks again under the lock; this only makes the refusal earlier.
fn refuse_link(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<(), WitError> {
    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode as _) == rustix::fs::FileType::Symlink => {
            Err(wit(durable::Error::Symlink { path: path.to_owned() }))
        }
        _ => Ok(()),
    }
}

/// Regular files beneath `rel` (for a dry-run removal's count), bounded by
/// the core's depth rule.
fn count_files(dir: BorrowedFd<'_>, rel: &str, depth: usize) -> Result<u32, WitError> {
    if depth > durable::names::DEPTH_MAX {
        return Ok(0);
    }
    let mut n = 0;
    for e in durable::list_dir(dir, rel).map_err(wit)? {
        match e.kind {
            EntryKind::Directory => n += count_files(dir, &join(rel, &e.name), depth + 1)?,
            _ => n += 1,
        }
    }
    Ok(n)
}

fn sync(
    state: &mut HostState,
    dir: &Dir,
    path: &str,
    files: Vec<File>,
) -> Result<(Done, types::Report), WitError> {
    writable(dir)?;
    let (parent, name) = durable::split_last(path).map_err(wit)?;
    let mut tree = Tree::new();
    for f in files {
        tree.add_file(&f.name, f.contents, f.mode).map_err(wit)?;
    }
    tree.check_limits(&opts().limits).map_err(wit)?;
    state.check_budget(tree.file_count() as u64, tree.total_bytes())?;
    let (report, plan) = if state.dry_run {
        let plan = match parent_if_exists(dir.fd.as_fd(), parent)? {
            Some(pfd) => durable::plan_sync(pfd.as_fd(), name, &tree, &opts()).map_err(wit)?,
            // Parents missing: everything would be created.
            None => Plan::creating(&tree),
        };
        let report = if plan.is_unchanged() {
            Report { outcome: Outcome::Unchanged, written: 0, removed: 0 }
        } else {
            Report {
                outcome: if plan.exists { Outcome::Replaced } else { Outcome::Created },
                written: tree.file_count() as u32,
                removed: plan.removed_files(),
            }
        };
        (report, Some(Changes::from(plan)))
    } else {
        let pfd = durable::create_dirs_beneath(dir.fd.as_fd(), parent, &opts()).map_err(wit)?;
        refuse_link(pfd.as_fd(), name, path)?;
        (durable::sync_dir(pfd.as_fd(), name, &tree, &opts()).map_err(wit)?, None)
    };
    if report.outcome != Outcome::Unchanged {
        state.charge(tree.file_count() as u64, tree.total_bytes());
    }
    Ok((Done::of(&report, plan), wit_report(&report)))
}

fn write_file(
    state: &mut HostState,
    dir: &Dir,
    path: &str,
    contents: Vec<u8>,
    mode: u32,
) -> Result<(Done, types::Report), WitError> {
    writable(dir)?;
    let (parent, name) = durable::split_last(path).map_err(wit)?;
    if mode & !durable::tree::MODE_MASK != 0 {
        return Err(wit(durable::Error::InvalidMode { path: path.to_owned(), mode }));
    }
    state.check_budget(1, contents.len() as u64)?;
    let (report, plan) = if state.dry_run {
        let existing = match parent_if_exists(dir.fd.as_fd(), parent)? {
            Some(pfd) => match stat_entry(pfd.as_fd(), name)? {
                Some((_, old_mode)) => {
                    durable::read_file(dir.fd.as_fd(), path).map_err(wit)?.map(|old| (old, old_mode))
                }
                None => None,
            },
            None => None,
        };
        let mut changes = Changes::default();
        let outcome = match existing {
            None => {
                changes.added.push(name.to_owned());
                Outcome::Created
            }
            Some((old, old_mode)) if old == contents && old_mode == mode => Outcome::Unchanged,
            Some(_) => {
                changes.changed.push(name.to_owned());
                Outcome::Replaced
            }
        };
        let written = u32::from(outcome != Outcome::Unchanged);
        (Report { outcome, written, removed: 0 }, Some(changes))
    } else {
        let pfd = durable::create_dirs_beneath(dir.fd.as_fd(), parent, &opts()).map_err(wit)?;
        refuse_link(pfd.as_fd(), name, path)?;
        (durable::write_file(pfd.as_fd(), name, &contents, Some(mode), &opts()).map_err(wit)?, None)
    };
    if report.outcome != Outcome::Unchanged {
        state.charge(1, contents.len() as u64);
    }
    Ok((Done::of(&report, plan), wit_report(&report)))
}

fn remove(state: &mut HostState, dir: &Dir, path: &str) -> Result<(Done, bool), WitError> {
    writable(dir)?;
    let (parent, name) = durable::split_last(path).map_err(wit)?;
    let Some(pfd) = parent_if_exists(dir.fd.as_fd(), parent)? else {
        return Ok((Done::just("unchanged"), false));
    };
    if state.dry_run {
        return Ok(match stat_entry(pfd.as_fd(), name)? {
            None => (Done::just("unchanged"), false),
            Some((is_dir, _)) => {
                let removed = if is_dir { count_files(dir.fd.as_fd(), path, 0)? } else { 1 };
                let shown = if is_dir { format!("{name}/") } else { name.to_owned() };
                let plan = Changes { removed: vec![shown], ..Changes::default() };
                (Done { outcome: "removed", written: 0, removed, plan: Some(plan) }, true)
            }
        });
    }
    match durable::remove(pfd.as_fd(), name, &opts()).map_err(wit)? {
        Some(report) => Ok((Done::of(&report, None), true)),
        None => Ok((Done::just("unchanged"), false)),
    }
}

fn exchange(state: &mut HostState, dir: &Dir, a: &str, b: &str) -> Result<(Done, ()), WitError> {
    writable(dir)?;
    let (pa, na) = durable::split_last(a).map_err(wit)?;
    let (pb, nb) = durable::split_last(b).map_err(wit)?;
    let fa = durable::open_beneath(dir.fd.as_fd(), pa).map_err(wit)?;
    let fb = durable::open_beneath(dir.fd.as_fd(), pb).map_err(wit)?;
    if state.dry_run {
        for (fd, name, path) in [(&fa, na, a), (&fb, nb, b)] {
            if stat_entry(fd.as_fd(), name)?.is_none() {
                return Err(wit(durable::Error::NotFound { path: path.to_owned() }));
            }
        }
        let plan = Changes { changed: vec![a.to_owned(), b.to_owned()], ..Changes::default() };
        return Ok((Done { plan: Some(plan), ..Done::just("exchanged") }, ()));
    }
    durable::exchange(fa.as_fd(), na, fb.as_fd(), nb, &opts()).map_err(wit)?;
    Ok((Done::just("exchanged"), ()))
}

fn fsync(state: &mut HostState, dir: &Dir, path: &str) -> Result<(Done, ()), WitError> {
    // fsync changes no contents, so a read-only root allows it; a dry run
    // skips it (nothing was written that would need it).
    let (parent, name) = if path.is_empty() || path == "." {
        ("", None)
    } else {
        durable::split_last(path).map(|(p, n)| (p, Some(n))).map_err(wit)?
    };
    let pfd = durable::open_beneath(dir.fd.as_fd(), parent).map_err(wit)?;
    if !state.dry_run {
        durable::fsync(pfd.as_fd(), name, &opts()).map_err(wit)?;
    } else if let Some(name) = name
        && stat_entry(pfd.as_fd(), name)?.is_none()
    {
        return Err(wit(durable::Error::NotFound { path: path.to_owned() }));
    }
    Ok((Done::just("fsynced"), ()))
}

impl HostView<'_> {
    fn push_dir(&mut self, dir: Dir) -> WitResult<Resource<Dir>> {
        if self.state.open_dirs >= MAX_OPEN_DIRS {
            return Ok(Err(WitError::Limit(format!(
                "a plugin may hold at most {MAX_OPEN_DIRS} dir handles at once; drop some first"
            ))));
        }
        let res = self.table.push(dir)?;
        self.state.open_dirs += 1;
        Ok(Ok(res))
    }
}

impl HostDir for HostView<'_> {
    fn sync(&mut self, d: Resource<Dir>, path: String, files: Vec<File>) -> WitResult<types::Report> {
        let dir = self.table.get(&d)?;
        Ok(self.state.record(dir, "sync", &path, |s| sync(s, dir, &path, files)))
    }

    fn write_file(
        &mut self,
        d: Resource<Dir>,
        path: String,
        contents: Vec<u8>,
        mode: u32,
    ) -> WitResult<types::Report> {
        let dir = self.table.get(&d)?;
        Ok(self.state.record(dir, "write-file", &path, |s| write_file(s, dir, &path, contents, mode)))
    }

    fn read_file(&mut self, d: Resource<Dir>, path: String) -> WitResult<Option<Vec<u8>>> {
        let dir = self.table.get(&d)?;
        Ok(durable::read_file(dir.fd.as_fd(), &path).map_err(wit))
    }

    fn list_dir(&mut self, d: Resource<Dir>, path: String) -> WitResult<Vec<Entry>> {
        let dir = self.table.get(&d)?;
        Ok(durable::list_dir(dir.fd.as_fd(), &path).map_err(wit).map(|entries| {
            entries
                .into_iter()
                .map(|e| Entry {
                    name: e.name,
                    kind: match e.kind {
                        EntryKind::File => WitKind::File,
                        EntryKind::Directory => WitKind::Directory,
                        EntryKind::Symlink => WitKind::Symlink,
                        EntryKind::Other => WitKind::Other,
                    },
                })
                .collect()
        }))
    }

    fn remove(&mut self, d: Resource<Dir>, path: String) -> WitResult<bool> {
        let dir = self.table.get(&d)?;
        Ok(self.state.record(dir, "remove", &path, |s| remove(s, dir, &path)))
    }

    fn exchange(&mut self, d: Resource<Dir>, a: String, b: String) -> WitResult<()> {
        let dir = self.table.get(&d)?;
        let shown = format!("{} <-> {}", join(&dir.rel, &a), join(&dir.rel, &b));
        Ok(self.state.record(dir, "exchange", &shown, |s| exchange(s, dir, &a, &b)))
    }

    fn fsync(&mut self, d: Resource<Dir>, path: String) -> WitResult<()> {
        let dir = self.table.get(&d)?;
        Ok(self.state.record(dir, "fsync", &path, |s| fsync(s, dir, &path)))
    }

    fn open_dir(&mut self, d: Resource<Dir>, path: String) -> WitResult<Resource<Dir>> {
        let dir = self.table.get(&d)?;
        let fd = match durable::open_beneath(dir.fd.as_fd(), &path) {
            Ok(fd) => fd,
            Err(e) => return Ok(Err(wit(e))),
        };
        let sub = Dir { root: dir.root.clone(), rel: join(&dir.rel, &path), fd, access: dir.access };
        self.push_dir(sub)
    }

    fn drop(&mut self, d: Resource<Dir>) -> wasmtime::Result<()> {
        self.table.delete(d)?;
        self.state.open_dirs -= 1;
        Ok(())
    }
}

impl Host for HostView<'_> {
    fn open_root(&mut self, name: String) -> WitResult<Resource<Dir>> {
        let Some(root) = self.state.roots.get(&name) else {
            let granted: Vec<&str> = self.state.roots.keys().map(String::as_str).collect();
            let granted = if granted.is_empty() { "none".to_owned() } else { granted.join(", ") };
            return Ok(Err(WitError::NotGranted(format!(
                "root `{name}` is not granted to plugin {} (granted: {granted})",
                self.state.plugin
            ))));
        };
        let fd = match durable::open_beneath(root.fd.as_fd(), "") {
            Ok(fd) => fd,
            Err(e) => return Ok(Err(wit(e))),
        };
        let dir = Dir { root: name, rel: String::new(), fd, access: root.access };
        self.push_dir(dir)
    }
}

impl types::Host for HostView<'_> {}
impl super::bindings::durasync::plugin::plugin_types::Host for HostView<'_> {}
