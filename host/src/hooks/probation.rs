//! Probation after commit (`[[probe]]`): a change a probe covers commits
//! with its previous tree kept (`durable::Options::keep_previous`); the
//! probe is then tried every `interval` until it succeeds (the previous
//! tree is discarded, the probation closed) or `within` has passed since
//! the commit (the previous tree is swapped back with `durable::revert`,
//! the root's actions run again, and the contents that failed are
//! remembered by digest: a later run that would write them is refused
//! until the input changes).
//!
//! The durable state is the instance's ledger (`ledger.rs`, "Probation
//! records"); this module holds the content digest, one probe attempt and
//! the per-instance thread that probes ([`Prober`]). It knows no agent: it
//! reports through [`ProbeObserver`].
//!
//! # Ordering
//!
//! - **Open before the swap.** The gate records the probation durably
//!   before it returns, so before the core's swap and commit fsync: a crash
//!   after the swap always finds it. A crash before the swap leaves a
//!   probation of a change that did not happen: at the next start it finds
//!   no previous tree (`durable::previous_of`) and is closed.
//! - **Pass: discard, then close.** The previous tree is removed first,
//!   then the record: a crash between them leaves a probation without a
//!   previous, closed at the next start. The other order could leave a
//!   previous tree no record ever discards.
//! - **Fail: remember and owe, revert, close.** The failed digest and the
//!   root's owed actions are written in one durable ledger write, then the
//!   revert (its exchange and parent fsync: the commit point), then the
//!   record is closed. A crash before the revert is durable finds the
//!   probation open with its previous: it is probed again and reverted.
//!   A crash after it finds no previous: closed; the actions are owed.
//! - **One change at a time.** A run of the instance and a revert never
//!   overlap ([`Prober::changes`]): the revert re-reads the probation under
//!   that lock and goes ahead only if no run renewed or closed it.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::actions::{Batch, Runner};
use super::config::{Action, Probe, ProbeCheck};
use super::ledger::{FailedRecord, Ledger, ProbationRecord};
use super::{command, http, pattern};
use crate::durable::{self, Options};

/// The probe of the synced path `path` of `root`: the first, in manifest
/// order, whose pattern may cover it or something below it.
pub fn probe_for<'p>(probes: &'p [Probe], root: &str, path: &str) -> Option<&'p Probe> {
    probes.iter().find(|p| p.root == root && pattern::may_cover_below(&p.path, path))
}

/// One attempt of `probe` on the live target `target`: `Ok` when healthy,
/// else what it said (an exit status and its output tail, an HTTP status
/// and its body tail, a timeout).
pub fn attempt(probe: &Probe, target: &Path) -> Result<(), String> {
    match &probe.check {
        ProbeCheck::Command(argv) => {
            let target = target.display().to_string();
            let argv = command::substitute(argv, "", &target);
            let ms = u64::try_from(probe.timeout.as_millis()).unwrap_or(u64::MAX);
            command::run(&argv, ms).map_err(|f| format!("`{}` {f}", argv[0]))
        }
        ProbeCheck::Http(url) => {
            let req = http::HttpRequest {
                method: "GET".into(),
                url: url.clone(),
                timeout: probe.timeout,
                allow_remote: false,
            };
            match http::request(&req) {
                Ok(a) if (200..300).contains(&a.status) => Ok(()),
                Ok(a) if a.body_tail.is_empty() => Err(format!("GET {url} answered {}", a.status)),
                Ok(a) => Err(format!("GET {url} answered {}: {}", a.status, a.body_tail)),
                Err(e) => Err(format!("GET {e}")),
            }
        }
    }
}

/// Milliseconds since the Unix epoch (probation windows outlive the
/// process, and a reboot: wall time, not a monotonic clock).
pub fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis())
        .unwrap_or(u64::MAX)
}

/// `2026-12-03T16:49:30Z` for a time in Unix milliseconds.
pub fn show_ms(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The refusal of contents that failed their probe.
pub fn refusal(f: &FailedRecord) -> durable::Refusal {
    let tail = if f.tail.is_empty() { String::new() } else { format!(": {}", f.tail) };
    durable::Refusal {
        by: format!("probe {}", f.probe),
        reason: format!(
            "these contents ({}) failed their probe at {}{tail}; they are not written again until the input changes",
            f.digest,
            show_ms(f.at_ms)
        ),
    }
}

/// The directory holding `path` below the root `root_dir`, and the
/// target's name in it.
pub fn open_parent(root_dir: &Path, path: &str) -> Result<(OwnedFd, String), durable::Error> {
    use rustix::fs::{Mode, OFlags};
    let root = rustix::fs::open(
        root_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| durable::Error::io(durable::Step::Open, root_dir.display().to_string(), e))?;
    let (parent, name) = durable::split_last(path)?;
    let dir = durable::open_beneath(root.as_fd(), parent)?;
    Ok((dir, name.to_owned()))
}

/// What a prober reports (the agent turns it into metrics, `/readyz` and
/// logs).
pub trait ProbeObserver: Send + Sync {
    /// An attempt ended: `Ok`, or why it failed (the probation stays open
    /// until its window ends).
    fn attempted(&self, rec: &ProbationRecord, result: Result<(), &str>);
    /// The probe passed: the previous tree is discarded, the change stays.
    fn passed(&self, rec: &ProbationRecord);
    /// The window ended with the probe failing: reverted (`true`), or there
    /// was nothing to revert to (`false`: the change created the target).
    fn reverted(&self, rec: &ProbationRecord, reverted: bool, problem: &str);
    /// The revert (or closing the probation) failed; tried again at the
    /// next interval.
    fn revert_failed(&self, rec: &ProbationRecord, error: &str);
    /// What `/readyz` should say of the instance's probations now (`None`:
    /// nothing open, nothing reverted since the last good change), and how
    /// many are open.
    fn state(&self, problem: Option<String>, open: usize);
}

/// One run's news for the prober: the manifest as it is now.
#[derive(Debug, Clone)]
pub struct ProbeBatch {
    /// The instance's probes.
    pub probes: Arc<Vec<Probe>>,
    /// The instance's actions (run again after a revert).
    pub actions: Arc<Vec<Action>>,
    /// The host directory of each root.
    pub roots: Arc<BTreeMap<String, PathBuf>>,
}

/// The handle of an instance's probing thread; dropping every clone ends it.
#[derive(Debug, Clone)]
pub struct Prober {
    tx: mpsc::Sender<ProbeBatch>,
    changes: Arc<Mutex<()>>,
}

impl Prober {
    /// Start the probing thread of `instance`: it resumes the ledger's open
    /// probations once it has the manifest (the first [`Prober::send`]).
    pub fn start(
        instance: &str,
        ledger: Arc<Ledger>,
        runner: Runner,
        observer: Arc<dyn ProbeObserver>,
    ) -> std::io::Result<Prober> {
        let (tx, rx) = mpsc::channel();
        let changes = Arc::new(Mutex::new(()));
        let span_instance = instance.to_owned();
        let worker = Worker {
            ledger,
            runner,
            observer,
            changes: changes.clone(),
            batch: None,
            next: BTreeMap::new(),
            reverted: BTreeMap::new(),
        };
        crate::spawn::spawn_traced(format!("probes {instance}"), move || {
            let span = tracing::info_span!("probes", instance = %span_instance);
            let _enter = span.enter();
            worker.run(rx)
        })?;
        Ok(Prober { tx, changes })
    }

    /// Hand over the manifest after a run (never blocks); the probations
    /// the run opened are probed from now on.
    pub fn send(&self, batch: ProbeBatch) {
        let _ = self.tx.send(batch);
    }

    /// Held by a run of the instance for its whole length, and by a revert:
    /// the two never overlap.
    pub fn changes(&self) -> &Mutex<()> {
        &self.changes
    }
}

type Key = (String, String);

struct Worker {
    ledger: Arc<Ledger>,
    runner: Runner,
    observer: Arc<dyn ProbeObserver>,
    changes: Arc<Mutex<()>>,
    batch: Option<ProbeBatch>,
    /// When each open probation is tried next, and the record it was for.
    next: BTreeMap<Key, (Instant, ProbationRecord)>,
    /// Reverted paths and why, until a later change of theirs passes.
    reverted: BTreeMap<Key, String>,
}

impl Worker {
    fn run(mut self, rx: mpsc::Receiver<ProbeBatch>) {
        loop {
            let wake = self.next.values().map(|(at, _)| *at).min();
            let got = match wake {
                Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            match got {
                Ok(batch) => self.batch = Some(batch),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            self.turn();
        }
    }

    /// Schedule probations new to this thread, try those due, publish the state.
    fn turn(&mut self) {
        let Some(batch) = self.batch.clone() else { return };
        let open = self.ledger.probations();
        let now = Instant::now();
        let wall = now_ms();
        // Closed meanwhile (passed, reverted, or by a later run's renewal
        // of a different record): forget.
        self.next.retain(|k, _| open.iter().any(|r| (&r.root, &r.path) == (&k.0, &k.1)));
        for rec in open {
            let key = (rec.root.clone(), rec.path.clone());
            let interval =
                batch.probes.iter().find(|p| p.name == rec.probe).map_or(Duration::ZERO, |p| p.interval);
            match self.next.get(&key) {
                Some((_, seen)) if *seen == rec => {}
                _ => {
                    // New (or renewed by a later change): its first attempt
                    // one interval from now, so the consumer's reload
                    // action has run; at once when the window has passed
                    // (resumed after a restart).
                    let first = if wall >= rec.until_ms { now } else { now + interval };
                    self.next.insert(key.clone(), (first, rec.clone()));
                    if self.reverted.remove(&key).is_some() {
                        tracing::debug!(root = %rec.root, path = %rec.path, "a new change is on probation");
                    }
                }
            }
        }
        let due: Vec<ProbationRecord> =
            self.next.values().filter(|(at, _)| *at <= now).map(|(_, r)| r.clone()).collect();
        for rec in due {
            self.try_one(&batch, rec);
        }
        self.publish();
    }

    fn try_one(&mut self, batch: &ProbeBatch, rec: ProbationRecord) {
        let key = (rec.root.clone(), rec.path.clone());
        let Some(root_dir) = batch.roots.get(&rec.root) else {
            // The root is no longer granted: nothing of it is ours to probe
            // or revert. The record stays for a manifest that grants it again.
            self.next.remove(&key);
            return;
        };
        let Some(probe) = batch.probes.iter().find(|p| p.name == rec.probe) else {
            tracing::warn!(root = %rec.root, path = %rec.path, probe = %rec.probe,
                "probe no longer declared by the manifest: the change is kept and its probation closed");
            self.pass(root_dir, rec);
            return;
        };
        {
            // Under the run lock: a run between its gate (which records the
            // probation) and its swap has no valid previous yet.
            let changes = self.changes.clone();
            let _changes = changes.lock().unwrap_or_else(|p| p.into_inner());
            if self.ledger.probation(&rec.root, &rec.path).as_ref() != Some(&rec) {
                self.next.remove(&key);
                return;
            }
            let previous = open_parent(root_dir, &rec.path)
                .and_then(|(parent, name)| durable::previous_of(parent.as_fd(), &name));
            match previous {
                Ok(Some(_)) => {}
                Ok(None) if rec.kept => {
                    // Nothing to keep on probation: the change never went
                    // live (a crash before its swap) or was reverted by hand.
                    tracing::info!(root = %rec.root, path = %rec.path,
                        "probation without a previous tree (a crash before the swap, or a rollback by hand): closed");
                    self.close(&rec);
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    self.observer.revert_failed(&rec, &e.to_string());
                    self.next.insert(key, (Instant::now() + probe.interval, rec));
                    return;
                }
            }
        }
        let target = root_dir.join(&rec.path);
        let result = attempt(probe, &target);
        self.observer.attempted(&rec, result.as_ref().map(|_| ()).map_err(String::as_str));
        match result {
            Ok(()) => self.pass(root_dir, rec),
            Err(problem) if now_ms() >= rec.until_ms => self.revert(batch, probe, root_dir, rec, &problem),
            Err(problem) => {
                tracing::info!(root = %rec.root, path = %rec.path, probe = %probe.name,
                    "probe failed ({} left): {problem}", left(rec.until_ms));
                self.next.insert(key, (Instant::now() + probe.interval, rec));
            }
        }
    }

    fn pass(&mut self, root_dir: &Path, rec: ProbationRecord) {
        let key = (rec.root.clone(), rec.path.clone());
        // Discard first, then close (see "Ordering").
        let discarded = open_parent(root_dir, &rec.path)
            .and_then(|(parent, name)| durable::discard_previous(parent.as_fd(), &name, &Options::default()));
        if let Err(e) = discarded {
            tracing::error!(root = %rec.root, path = %rec.path, "discarding the previous tree: {e}");
        }
        if self.close(&rec) {
            tracing::info!(root = %rec.root, path = %rec.path, probe = %rec.probe, "probe passed: the change stays");
            self.reverted.remove(&key);
            self.observer.passed(&rec);
        }
    }

    /// Close `rec` in the ledger; `true` when closed.
    fn close(&mut self, rec: &ProbationRecord) -> bool {
        let key = (rec.root.clone(), rec.path.clone());
        match self.ledger.close_probation(rec, &Options::default()) {
            Ok(closed) => {
                self.next.remove(&key);
                closed
            }
            Err(e) => {
                tracing::error!(root = %rec.root, path = %rec.path, "{e}");
                self.observer.revert_failed(rec, &e.to_string());
                self.next.insert(key, (Instant::now() + Duration::from_secs(1), rec.clone()));
                false
            }
        }
    }

    fn revert(
        &mut self,
        batch: &ProbeBatch,
        probe: &Probe,
        root_dir: &Path,
        rec: ProbationRecord,
        problem: &str,
    ) {
        let key = (rec.root.clone(), rec.path.clone());
        let retry = |w: &mut Worker, rec: ProbationRecord, e: String| {
            tracing::error!(root = %rec.root, path = %rec.path, "reverting: {e}; trying again in {}",
                humantime::format_duration(probe.interval));
            w.observer.revert_failed(&rec, &e);
            w.next.insert((rec.root.clone(), rec.path.clone()), (Instant::now() + probe.interval, rec));
        };
        // No run of the instance in flight from here to the end.
        let changes = self.changes.clone();
        let _changes = changes.lock().unwrap_or_else(|p| p.into_inner());
        if self.ledger.probation(&rec.root, &rec.path).as_ref() != Some(&rec) {
            // A run renewed it (new contents, a new window) or closed it.
            self.next.remove(&key);
            return;
        }
        let (parent, name) = match open_parent(root_dir, &rec.path) {
            Ok(p) => p,
            Err(e) => return retry(self, rec, e.to_string()),
        };
        // What failed is what is live now.
        let digest = match crate::digest::tree_digest(
            parent.as_fd(),
            &name,
            &root_dir.join(&rec.path).display().to_string(),
        ) {
            Ok(d) => d,
            Err(durable::Error::NotFound { .. }) => {
                // A target created by a change that never went live.
                self.close(&rec);
                return;
            }
            Err(e) => return retry(self, rec, e.to_string()),
        };
        let names: Vec<String> = batch
            .actions
            .iter()
            .filter(|a| a.root == rec.root && pattern::may_cover_below(&a.path, &rec.path))
            .map(|a| a.name.clone())
            .collect();
        let failed = FailedRecord {
            root: rec.root.clone(),
            path: rec.path.clone(),
            probe: probe.name.clone(),
            digest,
            at_ms: now_ms(),
            tail: problem.to_owned(),
        };
        // Remembered and owed, durably, before the revert (see "Ordering").
        if let Err(e) = self.ledger.fail(failed, &names, &Options::default()) {
            return retry(self, rec, e.to_string());
        }
        let reverted = match durable::revert(parent.as_fd(), &name, &Options::default()) {
            Ok(_) => true,
            Err(durable::Error::NoPrevious { .. }) => false,
            Err(e) => return retry(self, rec, e.to_string()),
        };
        let what = if reverted {
            "reverted to the previous tree"
        } else {
            "nothing to revert to (no previous tree was kept: the change created it)"
        };
        tracing::warn!(root = %rec.root, path = %rec.path, probe = %probe.name,
            "probe failed for {} since the commit: {what}; its output: {problem}",
            humantime::format_duration(Duration::from_millis(rec.until_ms.saturating_sub(rec.opened_ms))));
        self.close(&rec);
        if !names.is_empty() {
            // After the revert's commit point: the consumer reloads the old contents.
            self.runner.send(Batch {
                actions: batch.actions.clone(),
                names: names.into_iter().collect(),
                all_owed: false,
            });
        }
        self.reverted.insert(
            key,
            format!("{}:{} failed its probe {}: {what}: {problem}", rec.root, rec.path, probe.name),
        );
        self.observer.reverted(&rec, reverted, problem);
    }

    fn publish(&self) {
        let mut problems: Vec<String> = self
            .next
            .values()
            .map(|(_, r)| {
                format!("{}:{} on probation (probe {}, {} left)", r.root, r.path, r.probe, left(r.until_ms))
            })
            .collect();
        problems.extend(self.reverted.values().cloned());
        let open = self.next.len();
        self.observer.state(if problems.is_empty() { None } else { Some(problems.join("; ")) }, open);
    }
}

fn left(until_ms: u64) -> String {
    let ms = until_ms.saturating_sub(now_ms());
    humantime::format_duration(Duration::from_millis(ms - ms % 100)).to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::hooks::{HookSpec, RunHooks};
    use crate::services::Hooks as _;

    fn dir_fd(p: &Path) -> OwnedFd {
        use rustix::fs::{Mode, OFlags};
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap()
    }

    fn digest(parent: &Path, name: &str) -> String {
        crate::digest::tree_digest(dir_fd(parent).as_fd(), name, name).unwrap()
    }

    #[test]
    fn the_digest_covers_every_path_mode_and_byte_and_not_where_the_tree_lives() {
        let tmp = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let d = tmp.path().join(name);
            std::fs::create_dir_all(d.join("y")).unwrap();
            std::fs::write(d.join("x"), b"one").unwrap();
            std::fs::write(d.join("y/z"), b"two").unwrap();
            d
        };
        let (a, b) = (make("a"), make("b"));
        let first = digest(tmp.path(), "a");
        assert!(first.starts_with("sha256:") && first.len() == 7 + 64, "{first}");
        assert_eq!(digest(tmp.path(), "b"), first);
        // durasync's own entries are not contents.
        std::fs::write(b.join(".durasync.lock"), b"").unwrap();
        std::fs::create_dir(b.join(".durasync-keep.1.y")).unwrap();
        assert_eq!(digest(tmp.path(), "b"), first);
        std::fs::set_permissions(b.join("x"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let by_mode = digest(tmp.path(), "b");
        assert_ne!(by_mode, first);
        std::fs::write(a.join("y/z"), b"twO").unwrap();
        assert_ne!(digest(tmp.path(), "a"), first);
        // Bytes moved between files are a different tree.
        std::fs::write(a.join("x"), b"onet").unwrap();
        std::fs::write(a.join("y/z"), b"wo").unwrap();
        assert_ne!(digest(tmp.path(), "a"), first);
        // One regular file is contents too; nothing there is an error.
        assert!(digest(&a, "x").starts_with("sha256:"));
        let err = crate::digest::tree_digest(dir_fd(tmp.path()).as_fd(), "missing", "missing").unwrap_err();
        assert!(matches!(err, durable::Error::NotFound { .. }), "{err}");
    }

    fn probe() -> Probe {
        Probe {
            name: "web".into(),
            root: "conf".into(),
            path: "app".into(),
            check: ProbeCheck::Command(vec!["true".into()]),
            interval: Duration::from_millis(100),
            within: Duration::from_secs(60),
            timeout: Duration::from_secs(1),
        }
    }

    fn tree(v: &str) -> durable::Tree {
        let mut t = durable::Tree::new();
        t.add_file("app.conf", v.as_bytes().to_vec(), 0o644).unwrap();
        t
    }

    /// One sync of `app` under the root through the hooks' gate.
    fn sync(hooks: &RunHooks, root: &Path, v: &str) -> durable::Result<durable::Report> {
        let gate = hooks.gate("conf", "app");
        let opts = Options { gate: gate.as_deref(), ..Options::default() };
        durable::sync_dir(dir_fd(root).as_fd(), "app", &tree(v), &opts)
    }

    #[test]
    fn a_probed_change_keeps_its_previous_on_probation_and_contents_that_failed_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("conf");
        std::fs::create_dir(&root).unwrap();
        let ledger = Arc::new(Ledger::open(&tmp.path().join("state"), "inst").unwrap());
        let hooks = Arc::new(HookSpec { probes: vec![probe()], ..HookSpec::default() });
        let run = || {
            RunHooks::new(hooks.clone(), BTreeMap::from([("conf".into(), root.clone())]))
                .with_ledger(ledger.clone())
        };
        // Created: on probation, nothing kept to go back to.
        sync(&run(), &root, "v1").unwrap();
        let first = ledger.probation("conf", "app").unwrap();
        assert!(!first.kept);
        assert_eq!(first.digest, digest(&root, "app"));
        assert_eq!(first.until_ms - first.opened_ms, 60_000);
        assert!(ledger.close_probation(&first, &Options::default()).unwrap());
        // Replaced with no probation open: the previous tree is kept.
        sync(&run(), &root, "v2").unwrap();
        let second = ledger.probation("conf", "app").unwrap();
        assert!(second.kept);
        let (parent, name) = open_parent(&root, "app").unwrap();
        let kept = durable::previous_of(parent.as_fd(), &name).unwrap().expect("a previous tree");
        // Replaced again while on probation: the last known good (v1) stays
        // the previous, the probation is renewed for v3.
        sync(&run(), &root, "v3").unwrap();
        let third = ledger.probation("conf", "app").unwrap();
        assert_ne!(third.digest, second.digest);
        assert!(third.kept);
        assert_eq!(durable::previous_of(parent.as_fd(), &name).unwrap(), Some(kept));
        durable::revert(parent.as_fd(), &name, &Options::default()).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("app/app.conf")).unwrap(), "v1");
        // v3 failed: refused by digest, the target unchanged.
        let failed = FailedRecord {
            root: "conf".into(),
            path: "app".into(),
            probe: "web".into(),
            digest: third.digest.clone(),
            at_ms: 1_000,
            tail: "bad".into(),
        };
        ledger.fail(failed, &[], &Options::default()).unwrap();
        assert!(ledger.close_probation(&third, &Options::default()).unwrap());
        let err = sync(&run(), &root, "v3").unwrap_err().to_string();
        assert!(
            err.contains("probe web") && err.contains("failed their probe at 1970-01-01T00:00:01Z: bad"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(root.join("app/app.conf")).unwrap(), "v1");
        assert!(ledger.probation("conf", "app").is_none());
        // A different input goes through.
        sync(&run(), &root, "v4").unwrap();
        assert_eq!(std::fs::read_to_string(root.join("app/app.conf")).unwrap(), "v4");
    }
}
