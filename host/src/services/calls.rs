//! The calls of interface `fs`, WIT-free: each starts with the run's
//! admission check and, if it mutates, the handle's access; then the path
//! rules, the mode rule, the depth limit and the run's budget; then the
//! core (or, in a dry run, the plan). Every mutating call is recorded.

use std::os::fd::AsFd;

use super::checks::{check_depth, check_mode, refuse_link, subtree_deeper_than};
use super::error::{Error, Result};
use super::grant::{Dir, components, join};
use super::operation::{Done, Ended, Op};
use super::plan;
use super::session::Session;
use crate::durable::names::MAX_DEPTH;
use crate::durable::{self, Entry, Outcome, Report, Tree};
use durasync_contract::File;

impl Session {
    /// `open-root`: the handle for a granted root.
    pub fn open_root(&mut self, name: &str) -> Result<Dir> {
        self.admit(None)?;
        let Some(root) = self.roots.get(name) else {
            let granted: Vec<&str> = self.roots.keys().map(String::as_str).collect();
            let granted = if granted.is_empty() { "none".to_owned() } else { granted.join(", ") };
            return Err(Error::NotGranted(format!(
                "root `{name}` is not granted to plugin {} (granted: {granted})",
                self.plugin
            )));
        };
        let fd = durable::open_beneath(root.fd.as_fd(), "").map_err(Error::from)?;
        let dir = Dir {
            root: name.to_owned(),
            rel: String::new(),
            depth: 0,
            fd,
            access: root.access,
            special_modes: root.special_modes,
            attrs: root.attrs.clone(),
            layout: root.layout,
        };
        self.count_handle()?;
        Ok(dir)
    }

    /// `open-dir`: a handle for an existing directory beneath `dir`.
    pub fn open_dir(&mut self, dir: &Dir, path: &str) -> Result<Dir> {
        self.admit(Some(dir))?;
        let fd = durable::open_beneath(dir.fd.as_fd(), path).map_err(Error::from)?;
        let depth = dir.depth + components(path);
        check_depth(dir, path, depth)?;
        let sub = Dir {
            root: dir.root.clone(),
            rel: join(&dir.rel, path),
            depth,
            fd,
            access: dir.access,
            special_modes: dir.special_modes,
            attrs: dir.attrs.clone(),
            layout: dir.layout,
        };
        self.count_handle()?;
        Ok(sub)
    }

    /// `read-file`: refused with a `limit` error, before anything is read,
    /// when the file is larger than the run's read cap
    /// ([`super::PluginLimits::read_bytes_cap`]); stops at the run's deadline.
    pub fn read_file(&mut self, dir: &Dir, path: &str) -> Result<Option<Vec<u8>>> {
        self.admit(Some(dir))?;
        let opts = self.core_options();
        durable::read_file(dir.fd.as_fd(), path, &self.limits.read_limits(), &opts.cancel)
            .map_err(|e| self.read_error(dir, e))
    }

    /// `list-dir`: refused with a `limit` error for a directory of more than
    /// [`super::limits::MAX_LIST_ENTRIES`] entries; stops at the deadline.
    pub fn list_dir(&mut self, dir: &Dir, path: &str) -> Result<Vec<Entry>> {
        self.admit(Some(dir))?;
        let opts = self.core_options();
        durable::list_dir(dir.fd.as_fd(), path, &self.limits.read_limits(), &opts.cancel)
            .map_err(|e| self.read_error(dir, e))
    }

    /// The contract error of a failed read: a size refusal names the
    /// plugin's path and the manifest key that sets it; a cancellation is
    /// the run's deadline.
    fn read_error(&mut self, dir: &Dir, e: durable::Error) -> Error {
        match e {
            durable::Error::TooLarge { path, what, limit, actual } => {
                let key = if what == "bytes in one read" { " (limits.read_bytes)" } else { "" };
                Error::Limit(format!(
                    "{}: {what}: {actual} is over the limit of {limit}{key}",
                    dir.full(&path)
                ))
            }
            durable::Error::Cancelled { .. } => {
                self.past_deadline();
                Error::from(e)
            }
            e => Error::from(e),
        }
    }

    /// `sync`: make the directory at `path` hold exactly `files`.
    pub fn sync(&mut self, dir: &Dir, path: &str, files: Vec<File>) -> Result<Report> {
        self.record(dir, Op::Sync, dir.full(path), |s| s.sync_inner(dir, path, files))
    }

    fn sync_inner(&mut self, dir: &Dir, path: &str, files: Vec<File>) -> Result<(Done, Report)> {
        dir.writable()?;
        let (parent, name) = durable::split_last(path).map_err(Error::from)?;
        let opts = durable::Options { attrs: &dir.attrs, layout: dir.layout, ..self.core_options() };
        // Bounded as it grows: what the host builds from one call.
        let mut tree = Tree::with_limits(opts.limits);
        let mut deepest = 0;
        for f in files {
            let (file, mode) = (f.name, f.mode);
            tree.add_file(&file, f.contents, mode).map_err(Error::from)?;
            check_mode(dir, &join(path, &file), mode)?;
            deepest = deepest.max(components(&file));
        }
        check_depth(dir, path, dir.depth + components(path) + deepest)?;
        tree.check_limits(&opts.limits).map_err(Error::from)?;
        self.check_budget(tree.file_count() as u64, tree.total_bytes())?;
        let (report, changes) = if self.dry_run {
            let (report, changes) = plan::sync(dir, parent, name, &tree, &opts)?;
            (report, Some(changes))
        } else {
            let pfd = durable::create_dirs_beneath(dir.fd.as_fd(), parent, &opts).map_err(Error::from)?;
            refuse_link(pfd.as_fd(), name, path)?;
            let report = self.gated(dir, path, opts, |o| durable::sync_dir(pfd.as_fd(), name, &tree, o))?;
            (report, None)
        };
        let bytes = if report.outcome != Outcome::Unchanged { tree.total_bytes() } else { 0 };
        if report.outcome != Outcome::Unchanged {
            self.charge(tree.file_count() as u64, bytes);
        }
        Ok((Done { bytes, ..Done::of(&report, changes) }, report))
    }

    /// Run a mutating core call under the operator's gate for `path` (a
    /// refusal is remembered: the run fails with it), and tell the hooks
    /// once its commit fsync returned.
    fn gated(
        &mut self,
        dir: &Dir,
        path: &str,
        opts: durable::Options<'_>,
        f: impl FnOnce(&durable::Options<'_>) -> durable::Result<Report>,
    ) -> Result<Report> {
        let full = join(&dir.rel, path);
        let hooks = self.hooks.clone();
        let gate = hooks.as_deref().and_then(|h| h.gate(&dir.root, &full));
        let result = f(&durable::Options { gate: gate.as_deref(), ..opts });
        drop(gate);
        match result {
            Ok(report) => {
                if report.outcome != Outcome::Unchanged
                    && let Some(h) = &hooks
                {
                    h.committed(&dir.root, &full);
                }
                Ok(report)
            }
            Err(e) => {
                // Committed and durable, only a cleanup failed: as owed as a success.
                if let (durable::Error::Committed { durable: true, .. }, Some(h)) = (&e, &hooks) {
                    h.committed(&dir.root, &full);
                }
                if let durable::Error::Refused { by, .. } = &e {
                    self.reject(by, &format!("{}:{full}: {e}", dir.root));
                }
                Err(Error::from(e))
            }
        }
    }

    /// `write-file`: replace one file.
    pub fn write_file(&mut self, dir: &Dir, path: &str, contents: &[u8], mode: u32) -> Result<Report> {
        self.record(dir, Op::WriteFile, dir.full(path), |s| s.write_inner(dir, path, contents, mode))
    }

    fn write_inner(&mut self, dir: &Dir, path: &str, contents: &[u8], mode: u32) -> Result<(Done, Report)> {
        dir.writable()?;
        let (parent, name) = durable::split_last(path).map_err(Error::from)?;
        check_mode(dir, path, mode)?;
        check_depth(dir, path, dir.depth + components(path))?;
        self.check_budget(1, contents.len() as u64)?;
        let (report, changes) = if self.dry_run {
            let (report, changes) = plan::write(dir, parent, name, path, contents, mode)?;
            (report, Some(changes))
        } else {
            let opts = durable::Options { attrs: &dir.attrs, ..self.core_options() };
            let pfd = durable::create_dirs_beneath(dir.fd.as_fd(), parent, &opts).map_err(Error::from)?;
            refuse_link(pfd.as_fd(), name, path)?;
            let write =
                |o: &durable::Options<'_>| durable::write_file(pfd.as_fd(), name, contents, Some(mode), o);
            (self.gated(dir, path, opts, write)?, None)
        };
        let bytes = if report.outcome != Outcome::Unchanged { contents.len() as u64 } else { 0 };
        if report.outcome != Outcome::Unchanged {
            self.charge(1, bytes);
        }
        Ok((Done { bytes, ..Done::of(&report, changes) }, report))
    }

    /// `remove`: durably remove a file or a tree; `false` when nothing was there.
    pub fn remove(&mut self, dir: &Dir, path: &str) -> Result<bool> {
        self.record(dir, Op::Remove, dir.full(path), |s| s.remove_inner(dir, path))
    }

    fn remove_inner(&mut self, dir: &Dir, path: &str) -> Result<(Done, bool)> {
        dir.writable()?;
        let (parent, name) = durable::split_last(path).map_err(Error::from)?;
        let Some(pfd) = plan::parent_if_exists(dir.fd.as_fd(), parent)? else {
            return Ok((Done::just(Ended::Unchanged), false));
        };
        if self.dry_run {
            return plan::remove(dir, pfd.as_fd(), name, path, &self.core_options().cancel);
        }
        // A removal has no staged copy to validate; a guardrail may refuse
        // it outright, and the actions it owes are recorded before it (only
        // when something is there to remove).
        let full = join(&dir.rel, path);
        if let Some(h) = self.hooks.clone()
            && rustix::fs::statat(pfd.as_fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
            && let Err(r) = h.removal(&dir.root, &full)
        {
            let msg = format!("{}:{full}: refused by {}: {}; nothing was changed", dir.root, r.by, r.reason);
            self.reject(&r.by, &msg);
            return Err(Error::NotGranted(msg));
        }
        match durable::remove(pfd.as_fd(), name, &self.core_options()).map_err(Error::from)? {
            Some(report) => {
                if let Some(h) = &self.hooks {
                    h.committed(&dir.root, &join(&dir.rel, path));
                }
                Ok((Done::of(&report, None), true))
            }
            None => Ok((Done::just(Ended::Unchanged), false)),
        }
    }

    /// `exchange`: the raw primitive.
    pub fn exchange(&mut self, dir: &Dir, a: &str, b: &str) -> Result<()> {
        let shown = format!("{} <-> {}", dir.full(a), dir.full(b));
        self.record(dir, Op::Exchange, shown, |s| s.exchange_inner(dir, a, b))
    }

    fn exchange_inner(&mut self, dir: &Dir, a: &str, b: &str) -> Result<(Done, ())> {
        dir.writable()?;
        let (pa, na) = durable::split_last(a).map_err(Error::from)?;
        let (pb, nb) = durable::split_last(b).map_err(Error::from)?;
        // Both are resolved beneath the same handle without links, so one
        // is inside the other exactly when its components start with the
        // other's: the kernel would refuse that with EINVAL, which reads
        // like a missing RENAME_EXCHANGE.
        for (outer, inner) in [(a, b), (b, a)] {
            if a != b && inner.split('/').take(components(outer)).eq(outer.split('/')) {
                return Err(Error::InvalidPath(format!(
                    "cannot exchange {:?} with {:?}: one contains the other",
                    dir.full(outer),
                    dir.full(inner)
                )));
            }
        }
        let fa = durable::open_beneath(dir.fd.as_fd(), pa).map_err(Error::from)?;
        let fb = durable::open_beneath(dir.fd.as_fd(), pb).map_err(Error::from)?;
        // Each side lands at the other's depth: what moves deeper must
        // still fit under the depth limit.
        let (da, db) = (dir.depth + components(a), dir.depth + components(b));
        for (fd, name, path, from, to) in [(&fa, na, a, da, db), (&fb, nb, b, db, da)] {
            let cancel = self.core_options().cancel;
            if to > from && subtree_deeper_than(fd.as_fd(), name, MAX_DEPTH.saturating_sub(to), &cancel)? {
                let levels =
                    if to - from == 1 { "1 level".to_owned() } else { format!("{} levels", to - from) };
                return Err(Error::Limit(format!(
                    "exchanging would move {:?} {levels} deeper, past the limit of {MAX_DEPTH} \
                     directory levels below root `{}`",
                    dir.full(path),
                    dir.root
                )));
            }
        }
        if self.dry_run {
            return plan::exchange(fa.as_fd(), na, a, fb.as_fd(), nb, b);
        }
        // Every mutating call passes the operator's hooks for what it
        // changes: an exchange, with nothing staged, is refused where any
        // covers either side (see `hooks::RunHooks::exchange`).
        if let Some(h) = self.hooks.clone() {
            let (full_a, full_b) = (join(&dir.rel, a), join(&dir.rel, b));
            if let Err(r) = h.exchange(&dir.root, &full_a, &full_b) {
                let msg = format!(
                    "{}:{full_a} <-> {}:{full_b}: exchange refused by {}: {}; nothing was changed",
                    dir.root, dir.root, r.by, r.reason
                );
                self.reject(&r.by, &msg);
                return Err(Error::NotGranted(msg));
            }
        }
        durable::exchange(fa.as_fd(), na, fb.as_fd(), nb, &self.core_options()).map_err(Error::from)?;
        Ok((Done::just(Ended::Exchanged), ()))
    }

    /// `fsync`: the raw primitive. It changes no contents, so a read-only
    /// root allows it; a dry run skips it (nothing was written that would
    /// need it).
    pub fn fsync(&mut self, dir: &Dir, path: &str) -> Result<()> {
        self.record(dir, Op::Fsync, dir.full(path), |s| s.fsync_inner(dir, path))
    }

    fn fsync_inner(&mut self, dir: &Dir, path: &str) -> Result<(Done, ())> {
        let (parent, name) = if path.is_empty() || path == "." {
            ("", None)
        } else {
            durable::split_last(path).map(|(p, n)| (p, Some(n))).map_err(Error::from)?
        };
        let pfd = durable::open_beneath(dir.fd.as_fd(), parent).map_err(Error::from)?;
        if !self.dry_run {
            durable::fsync(pfd.as_fd(), name, &self.core_options()).map_err(Error::from)?;
        } else if let Some(name) = name {
            plan::must_exist(pfd.as_fd(), name, path)?;
        }
        Ok((Done::just(Ended::Fsynced), ()))
    }
}
