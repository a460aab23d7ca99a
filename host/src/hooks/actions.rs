//! Running owed actions, off the agent's loop: one thread per instance
//! that has actions, so an action never runs concurrently with itself, and
//! a hung one (killed at its timeout) delays nothing but its own
//! instance's later actions.
//!
//! The runner is told, after each run of its instance, which actions that
//! run's committed changes owe, and whether the run succeeded: a successful
//! run leaves every target durable as the plugin wants it, so whatever else
//! the ledger still owes (from before a crash) runs then too — never before
//! (see `ledger.rs`, "Ordering"). Each name runs at most once per batch;
//! a failure is retried with back-off, without the files being rewritten.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::command::{self, Failure};
use super::config::{Action, ActionRun};
use super::ledger::Ledger;
use crate::durable::Options;

/// What a runner reports (the agent turns it into metrics).
pub trait Observer: Send + Sync {
    /// Action `action` ended with `result` (`ok`, `failed`, `timeout`).
    fn finished(&self, action: &str, result: &str);
    /// `n` actions are owed now.
    fn owed(&self, n: usize);
}

/// One run's news for the runner.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The instance's actions (as its manifest declares them now).
    pub actions: Arc<Vec<Action>>,
    /// The actions this run's committed changes owe.
    pub names: BTreeSet<String>,
    /// The run succeeded: everything the ledger owes may run.
    pub all_owed: bool,
}

/// The handle of an instance's action thread; dropping every clone ends it
/// (after the action in progress, if any).
#[derive(Debug, Clone)]
pub struct Runner {
    tx: mpsc::Sender<Batch>,
}

/// The first retry of a failed action waits this long, doubled per failure
/// in a row up to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest wait between retries.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

impl Runner {
    /// Start the action thread of `instance`.
    pub fn start(
        instance: &str,
        ledger: Arc<Ledger>,
        retry: (Duration, Duration),
        observer: Arc<dyn Observer>,
    ) -> std::io::Result<Runner> {
        let (tx, rx) = mpsc::channel();
        let name = format!("actions {instance}");
        let span_instance = instance.to_owned();
        crate::agent::spawn_traced(name, move || {
            let span = tracing::info_span!("actions", instance = %span_instance);
            let _enter = span.enter();
            Worker {
                ledger,
                retry,
                observer,
                actions: Arc::new(Vec::new()),
                due: BTreeSet::new(),
                failures: 0,
            }
            .run(rx)
        })?;
        Ok(Runner { tx })
    }

    /// Hand over a run's batch (never blocks).
    pub fn send(&self, batch: Batch) {
        // The thread only ends when every sender is gone.
        let _ = self.tx.send(batch);
    }
}

struct Worker {
    ledger: Arc<Ledger>,
    retry: (Duration, Duration),
    observer: Arc<dyn Observer>,
    actions: Arc<Vec<Action>>,
    /// Names to run now (or at the next retry).
    due: BTreeSet<String>,
    failures: u32,
}

impl Worker {
    fn run(mut self, rx: mpsc::Receiver<Batch>) {
        self.observer.owed(self.ledger.len());
        let mut retry_at: Option<Instant> = None;
        loop {
            let batch = match retry_at {
                None => match rx.recv() {
                    Ok(b) => Some(b),
                    Err(_) => return,
                },
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(b) => Some(b),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                },
            };
            if let Some(b) = batch {
                self.actions = b.actions;
                self.due.extend(b.names);
                if b.all_owed {
                    self.due.extend(self.ledger.owed().into_iter().map(|(n, _)| n));
                }
                // A new batch while a retry waits: run now, the retry included.
            }
            retry_at = None;
            if self.run_due() {
                self.failures = 0;
            } else {
                self.failures = self.failures.saturating_add(1);
                let wait = backoff(self.retry, self.failures);
                tracing::info!("retrying owed actions in {}", humantime::format_duration(wait));
                retry_at = Some(Instant::now() + wait);
            }
            self.observer.owed(self.ledger.len());
        }
    }

    /// Run every due action once; `true` when none failed (the failed ones
    /// stay due).
    fn run_due(&mut self) -> bool {
        let owed: std::collections::BTreeMap<String, u64> = self.ledger.owed().into_iter().collect();
        let mut failed = BTreeSet::new();
        for name in std::mem::take(&mut self.due) {
            // Run only what the ledger owes (cleared meanwhile: done).
            let Some(&seq) = owed.get(&name) else { continue };
            let Some(action) = self.actions.iter().find(|a| a.name == name) else {
                tracing::warn!(action = %name, "owed, but no longer declared by the manifest: dropped");
                let _ = self.ledger.done(&name, seq, &Options::default());
                continue;
            };
            let result = run_action(action);
            let label = match &result {
                Ok(()) => "ok",
                Err(Failure::Timeout { .. }) => "timeout",
                Err(_) => "failed",
            };
            match result {
                Ok(()) => {
                    tracing::info!(action = %name, "action ran");
                    if let Err(e) = self.ledger.done(&name, seq, &Options::default()) {
                        // Still owed on disk: it runs again later (at least once).
                        tracing::error!(action = %name, "{e}");
                    }
                }
                Err(f) => {
                    tracing::warn!(action = %name, "action {f}");
                    failed.insert(name.clone());
                }
            }
            self.observer.finished(&name, label);
        }
        let ok = failed.is_empty();
        self.due.extend(failed);
        ok
    }
}

/// `min` doubled per failure in a row, capped at `max`.
fn backoff((min, max): (Duration, Duration), failures: u32) -> Duration {
    min.saturating_mul(1u32 << failures.saturating_sub(1).min(20)).min(max)
}

/// Run one action to its end or its timeout.
pub fn run_action(action: &Action) -> Result<(), Failure> {
    match &action.run {
        ActionRun::Command(argv) => command::run(argv, action.timeout_ms),
        ActionRun::Signal { signal, pidfile } => send_signal(signal, pidfile),
    }
}

/// Send `signal` to the pid on the first line of `pidfile` (at most 64 bytes read).
fn send_signal(signal: &str, pidfile: &std::path::Path) -> Result<(), Failure> {
    use rustix::process::Signal;
    use std::io::Read;
    let fail = |what: String| Failure::Status { status: what, tail: String::new() };
    let mut text = String::new();
    std::fs::File::open(pidfile)
        .and_then(|f| f.take(64).read_to_string(&mut text))
        .map_err(|e| fail(format!("cannot read pidfile {}: {e}", pidfile.display())))?;
    let pid = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
        .filter(|p| *p > 1)
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| fail(format!("pidfile {} holds no pid", pidfile.display())))?;
    let sig = match signal {
        "HUP" => Signal::HUP,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "TERM" => Signal::TERM,
        _ => Signal::INT,
    };
    rustix::process::kill_process(pid, sig)
        .map_err(|e| fail(format!("SIG{signal} to pid {} failed: {e}", pid.as_raw_nonzero())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(run: ActionRun) -> Action {
        Action { name: "a".into(), root: "r".into(), path: "**".into(), run, timeout_ms: 10_000 }
    }

    #[test]
    fn a_signal_action_reaches_the_process_named_by_its_pidfile() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
        let pidfile = tmp.path().join("app.pid");
        std::fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
        run_action(&action(ActionRun::Signal { signal: "TERM".into(), pidfile: pidfile.clone() })).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(15));
        std::fs::write(&pidfile, "not a pid\n").unwrap();
        let err = run_action(&action(ActionRun::Signal { signal: "HUP".into(), pidfile })).unwrap_err();
        assert!(err.to_string().contains("holds no pid"), "{err}");
    }

    #[test]
    fn back_off_doubles_up_to_its_cap() {
        let r = (Duration::from_secs(1), Duration::from_secs(5));
        let got: Vec<u64> = (1..=5).map(|f| backoff(r, f).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 5, 5]);
    }
}
