//! One run's state: the grants, the limits, the per-run budgets, the
//! deadline, the open handles and the record of operations. Every call a
//! plugin makes goes through a [`Session`] (see `calls.rs` for the calls).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::error::{Error, Result};
use super::grant::{Dir, Grant};
use super::hooks::Hooks;
use super::limits::{MAX_OPEN_DIRS, PluginLimits, human_ms};
use super::log_rate::LogRate;
use super::operation::{Done, Ended, Op, Operation};
use crate::durable::{Cancel, Flush, Options};

/// What a run's log budget has taken so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogBudget {
    /// Bytes of messages forwarded.
    pub used: u64,
    /// Messages dropped because the budget was spent.
    pub dropped: u64,
    /// Bytes of the dropped messages.
    pub dropped_bytes: u64,
    /// Messages dropped by the instance's rate limit ([`LogRate`]).
    pub rate_dropped: u64,
}

/// What to do with one log message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogVerdict {
    /// Within the budget: forward it.
    Forward,
    /// The first message over the budget: drop it and say so once.
    DropFirst,
    /// Over the budget: drop it.
    Drop,
    /// The first message of this run over the instance's rate limit: drop
    /// it and say so once.
    RateFirst,
}

/// The state of one run of one plugin, behind every call it makes.
#[derive(Debug)]
pub struct Session {
    pub(crate) plugin: String,
    pub(crate) roots: BTreeMap<String, Grant>,
    pub(crate) limits: PluginLimits,
    pub(crate) dry_run: bool,
    written_bytes: u64,
    written_files: u64,
    /// The first per-run limit the plugin ran into: the run fails with it
    /// even if the plugin ignores the `limit` error it was given, and every
    /// later call is refused with it.
    limit_hit: Option<String>,
    deadline: Option<Instant>,
    timed_out: bool,
    pub(crate) operations: Vec<Operation>,
    log: LogBudget,
    log_rate: Option<Arc<LogRate>>,
    open_dirs: usize,
    flush: Flush,
    /// The operator's validators, guardrails and actions, if any.
    pub(crate) hooks: Option<Arc<dyn Hooks>>,
    /// The first change a validator or guardrail refused: the run fails
    /// with it even if the plugin ignores the error it was given.
    rejected: Option<(String, String)>,
}

impl Session {
    /// A run of `plugin` with these grants and limits; `dry_run` plans every
    /// change instead of making it.
    pub fn new(plugin: &str, roots: BTreeMap<String, Grant>, limits: PluginLimits, dry_run: bool) -> Self {
        Session {
            plugin: plugin.to_owned(),
            roots,
            limits,
            dry_run,
            written_bytes: 0,
            written_files: 0,
            limit_hit: None,
            deadline: None,
            timed_out: false,
            operations: Vec::new(),
            log: LogBudget::default(),
            log_rate: None,
            open_dirs: 0,
            flush: Flush::Auto,
            hooks: None,
            rejected: None,
        }
    }

    /// The same, refusing every call once `deadline` has passed.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The same, with the log volume also bounded by `rate`, shared with
    /// the instance's other runs.
    #[must_use]
    pub fn with_log_rate(mut self, rate: Option<Arc<LogRate>>) -> Self {
        self.log_rate = rate;
        self
    }

    /// The same, making staged trees durable as `flush` says.
    #[must_use]
    pub fn with_flush(mut self, flush: Flush) -> Self {
        self.flush = flush;
        self
    }

    /// The same, with the operator's hooks around every change.
    #[must_use]
    pub fn with_hooks(mut self, hooks: Option<Arc<dyn Hooks>>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The first refused change: who refused it and the whole message.
    pub fn rejected(&self) -> Option<(&str, &str)> {
        self.rejected.as_ref().map(|(by, m)| (by.as_str(), m.as_str()))
    }

    /// Remember a refusal (the first one is kept).
    pub(crate) fn reject(&mut self, by: &str, message: &str) {
        self.rejected.get_or_insert_with(|| (by.to_owned(), message.to_owned()));
    }

    /// Grant one more root (a test harness builds its grants one by one).
    pub fn grant(&mut self, name: &str, grant: Grant) {
        self.roots.insert(name.to_owned(), grant);
    }

    /// The plugin's name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The run's limits.
    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// Whether this run only plans.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The durable operations asked for so far, in order.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// Take the record of operations.
    pub fn take_operations(&mut self) -> Vec<Operation> {
        std::mem::take(&mut self.operations)
    }

    /// The first per-run limit the plugin hit, if any.
    pub fn limit_hit(&self) -> Option<&str> {
        self.limit_hit.as_deref()
    }

    /// Whether a call was refused because the deadline had passed.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The instance's log rate limit, if the run has one.
    pub fn log_rate(&self) -> Option<&LogRate> {
        self.log_rate.as_deref()
    }

    /// The log budget so far.
    pub fn log_budget(&self) -> LogBudget {
        self.log
    }

    /// Charge a log message of `len` bytes to the run's log budget.
    pub fn admit_log(&mut self, len: u64) -> LogVerdict {
        if self.log.used + len > self.limits.log_bytes {
            self.log.dropped += 1;
            self.log.dropped_bytes += len;
            return if self.log.dropped == 1 { LogVerdict::DropFirst } else { LogVerdict::Drop };
        }
        if let Some(rate) = &self.log_rate
            && !rate.admit(len)
        {
            self.log.rate_dropped += 1;
            return if self.log.rate_dropped == 1 { LogVerdict::RateFirst } else { LogVerdict::Drop };
        }
        self.log.used += len;
        LogVerdict::Forward
    }

    /// The options every core call of this run gets. This is the one place
    /// where the run's deadline reaches the durable core: a long operation
    /// stops between steps that are safe to stop at (never between a durable
    /// step and its commit) once the deadline has passed, changing nothing.
    pub(crate) fn core_options(&self) -> Options<'static> {
        let flush = self.flush;
        match self.deadline {
            Some(deadline) => Options { cancel: Cancel::at(deadline), flush, ..Options::default() },
            None => Options { flush, ..Options::default() },
        }
    }

    /// Whether the run's deadline has passed (remembered: the run then
    /// fails as timed out). Every call checks it first, `log` included.
    pub fn past_deadline(&mut self) -> bool {
        if let Some(deadline) = self.deadline
            && Instant::now() >= deadline
        {
            self.timed_out = true;
        }
        self.timed_out
    }

    /// What every call starts with: refuse it when the run's deadline has
    /// passed or a per-run limit was already hit, and when the handle's
    /// directory is gone.
    pub(crate) fn admit(&mut self, dir: Option<&Dir>) -> Result<()> {
        if self.past_deadline() {
            return Err(Error::Limit(format!(
                "timed out after {} (limits.timeout_ms); the call was not started",
                human_ms(self.limits.timeout_ms)
            )));
        }
        if let Some(hit) = &self.limit_hit {
            return Err(Error::Limit(hit.clone()));
        }
        match dir {
            Some(dir) => dir.still_there(),
            None => Ok(()),
        }
    }

    /// Refuse a write of `files` files and `bytes` bytes that would take the
    /// run over its budget. Nothing has been touched when this fails.
    pub(crate) fn check_budget(&mut self, files: u64, bytes: u64) -> Result<()> {
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
                Err(Error::Limit(msg))
            }
            None => Ok(()),
        }
    }

    pub(crate) fn charge(&mut self, files: u64, bytes: u64) {
        self.written_files += files;
        self.written_bytes += bytes;
    }

    /// Count a new handle, refusing one over [`MAX_OPEN_DIRS`].
    pub(crate) fn count_handle(&mut self) -> Result<()> {
        if self.open_dirs >= MAX_OPEN_DIRS {
            return Err(Error::Limit(format!(
                "a plugin may hold at most {MAX_OPEN_DIRS} dir handles at once; drop some first"
            )));
        }
        self.open_dirs += 1;
        Ok(())
    }

    /// A handle was dropped by the plugin.
    pub fn handle_dropped(&mut self) {
        self.open_dirs = self.open_dirs.saturating_sub(1);
    }

    /// Run one mutating operation and record it (`shown` is its path from
    /// the root).
    pub(crate) fn record<T>(
        &mut self,
        dir: &Dir,
        op: Op,
        shown: String,
        f: impl FnOnce(&mut Self) -> Result<(Done, T)>,
    ) -> Result<T> {
        let start = Instant::now();
        let result = self.admit(Some(dir)).and_then(|()| f(self));
        let ms = (start.elapsed().as_secs_f64() * 1e6).round() / 1e3;
        let mut rec = Operation {
            root: dir.root.clone(),
            path: shown,
            op,
            outcome: Ended::Failed,
            written: 0,
            removed: 0,
            bytes: 0,
            ms,
            error: None,
            plan: None,
        };
        let out = match result {
            Ok((done, value)) => {
                (rec.outcome, rec.written, rec.removed, rec.bytes, rec.plan) =
                    (done.outcome, done.written, done.removed, done.bytes, done.plan);
                Ok(value)
            }
            Err(e) => {
                rec.error = Some(e.to_string());
                Err(e)
            }
        };
        self.operations.push(rec);
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::services::{Access, File};

    fn session(dir: &std::path::Path, limits: PluginLimits) -> Session {
        let grant = Grant::open(dir, Access::ReadWrite, false).unwrap();
        Session::new("t", [("data".to_owned(), grant)].into(), limits, false)
    }

    #[test]
    fn no_call_starts_once_the_deadline_has_passed() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = session(tmp.path(), PluginLimits::default());
        let root = s.open_root("data").unwrap();
        let past = Instant::now().checked_sub(Duration::from_millis(1)).unwrap();
        let mut s = s.with_deadline(past);
        let err = s.write_file(&root, "f", b"x", 0o644).unwrap_err();
        assert!(matches!(&err, Error::Limit(m) if m.contains("timed out")), "{err}");
        assert!(s.timed_out());
        assert!(s.read_file(&root, "f").is_err());
        assert!(!tmp.path().join("f").exists(), "the call ran");
        assert!(!tmp.path().join(crate::durable::names::LOCK_NAME).exists(), "the core was reached");
    }

    #[test]
    fn once_a_budget_is_spent_every_later_call_is_refused_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = PluginLimits { write_files: 1, ..PluginLimits::default() };
        let mut s = session(tmp.path(), limits);
        let root = s.open_root("data").unwrap();
        let two = vec![
            File { name: "a".into(), contents: b"1".to_vec(), mode: 0o644 },
            File { name: "b".into(), contents: b"2".to_vec(), mode: 0o644 },
        ];
        let err = s.sync(&root, "d", two).unwrap_err();
        assert!(matches!(&err, Error::Limit(m) if m.contains("limits.write_files")), "{err}");
        let again = s.read_file(&root, "anything").unwrap_err();
        assert_eq!(again, err, "a later call gets the same limit");
        assert_eq!(s.limit_hit(), Some(err.message()));
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "nothing was touched");
    }

    #[test]
    fn depth_counts_from_the_root_whatever_the_handle() {
        use crate::durable::names::MAX_DEPTH;
        let tmp = tempfile::tempdir().unwrap();
        let mut s = session(tmp.path(), PluginLimits::default());
        let root = s.open_root("data").unwrap();
        let third = MAX_DEPTH / 3;
        let chain = ["d"; MAX_DEPTH / 3].join("/");
        s.sync(&root, &chain, Vec::new()).unwrap();
        let mid = s.open_dir(&root, &chain).unwrap();
        s.sync(&mid, &chain, Vec::new()).unwrap();
        let deep = s.open_dir(&mid, &chain).unwrap();
        assert_eq!(deep.depth, 2 * third);
        let file = || File { name: "f".into(), contents: Vec::new(), mode: 0o644 };
        // 2·third + rest levels + the file = MAX_DEPTH: allowed; one more is not.
        let rest = MAX_DEPTH - 2 * third - 1;
        let path = |part: &str, n: usize| vec![part; n].join("/");
        s.sync(&deep, &path("d", rest), vec![file()]).unwrap();
        let err = s.sync(&deep, &path("d", rest + 1), vec![file()]).unwrap_err();
        let over = format!("{} directory levels", MAX_DEPTH + 1);
        assert!(matches!(&err, Error::Limit(m) if m.contains(&over)), "{err}");
        s.write_file(&deep, &path("e", rest + 1), b"", 0o644).unwrap();
        let err = s.write_file(&deep, &path("e", rest + 2), b"", 0o644).unwrap_err();
        assert!(matches!(&err, Error::Limit(_)), "{err}");
    }
}
