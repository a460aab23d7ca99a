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
use super::http::{self, HttpError, HttpRequest};
use super::ledger::Ledger;
use crate::durable::Options;

/// What a runner reports (the agent turns it into metrics).
pub trait Observer: Send + Sync {
    /// Action `action` ended with `result` (`ok`, `failed`, `timeout`);
    /// `problem` says why when it did not succeed (it stays owed and is
    /// retried), `None` when it did.
    fn finished(&self, action: &str, result: &str, problem: Option<&str>);
    /// Action `action` was owed but is no longer declared: dropped.
    fn dropped(&self, action: &str) {
        let _ = action;
    }
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
        crate::spawn::spawn_traced(name, move || {
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
                self.observer.dropped(&name);
                continue;
            };
            let result = run_action(action);
            let label = match &result {
                Ok(()) => "ok",
                Err(Failure::Timeout { .. }) => "timeout",
                Err(_) => "failed",
            };
            let problem = match result {
                Ok(()) => {
                    tracing::info!(action = %name, "action ran");
                    if let Err(e) = self.ledger.done(&name, seq, &Options::default()) {
                        // Still owed on disk: it runs again later (at least once).
                        tracing::error!(action = %name, "{e}");
                    }
                    None
                }
                Err(f) => {
                    tracing::warn!(action = %name, "action {f}");
                    failed.insert(name.clone());
                    Some(f.to_string())
                }
            };
            self.observer.finished(&name, label, problem.as_deref());
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
        ActionRun::Signal { signal, pidfile } => signal_with_timeout(signal, pidfile, action.timeout_ms),
        ActionRun::Http { method, url, expect, allow_remote } => {
            let req = HttpRequest {
                method: method.clone(),
                url: url.clone(),
                timeout: Duration::from_millis(action.timeout_ms),
                allow_remote: *allow_remote,
            };
            http_action(&req, expect)
        }
    }
}

/// Send an HTTP action's request: success when the status is one of
/// `expect` (any 2xx when empty). Another status is a failure naming it
/// and the end of the body (where a daemon says why it would not reload);
/// no answer is a failure naming why, a timeout a timeout.
fn http_action(req: &HttpRequest, expect: &[u16]) -> Result<(), Failure> {
    match http::request(req) {
        Ok(a) if expected(a.status, expect) => Ok(()),
        Ok(a) => Err(Failure::Status {
            status: format!("answered {} (expected {})", a.status, super::config::expects(expect)),
            tail: a.body_tail,
        }),
        Err(HttpError::TimedOut { ms, .. }) => Err(Failure::Timeout { ms, tail: String::new() }),
        Err(e) => Err(Failure::Status { status: e.to_string(), tail: String::new() }),
    }
}

/// Whether `status` is one of `expect`, or a 2xx when `expect` is empty.
fn expected(status: u16, expect: &[u16]) -> bool {
    if expect.is_empty() { (200..300).contains(&status) } else { expect.contains(&status) }
}

/// The most of a pidfile read: a pid and a newline, with room to spare.
pub const MAX_PIDFILE_BYTES: u64 = 64;

/// [`send_signal`] within `timeout_ms`. It never blocks on the pidfile
/// itself (opened non-blocking, regular files only), but a pidfile on a
/// hung network or FUSE file system can still stall a read: then the
/// signal is abandoned as a timeout (the stuck thread ends with the read)
/// and the instance's later actions go on.
fn signal_with_timeout(signal: &str, pidfile: &std::path::Path, timeout_ms: u64) -> Result<(), Failure> {
    let (tx, rx) = mpsc::channel();
    let (signal_owned, pidfile_owned) = (signal.to_owned(), pidfile.to_owned());
    std::thread::Builder::new()
        .name("signal action".into())
        .spawn(move || {
            let _ = tx.send(send_signal(&signal_owned, &pidfile_owned));
        })
        .map_err(|e| Failure::Spawn(format!("cannot start a thread: {e}")))?;
    rx.recv_timeout(Duration::from_millis(timeout_ms))
        .unwrap_or_else(|_| Err(Failure::Timeout { ms: timeout_ms, tail: String::new() }))
}

/// Send `signal` to the pid named by `pidfile`, under systemd's `PIDFile=`
/// rules (`service_load_pid_file` in systemd's `src/core/service.c`): the
/// file is opened without following a symlink and without blocking (a fifo
/// is refused, never waited on), must be a regular file of at most
/// [`MAX_PIDFILE_BYTES`] holding one decimal pid (an optional newline
/// after it), and the pid must not be 1 or the agent itself. systemd
/// accepts a pid outside the service only from a pidfile owned by root;
/// the agent has no service cgroup, so it accepts a pidfile owned by root
/// (or by its own user), and one owned by another user only when the
/// process it names belongs to that same user: whoever can write the
/// pidfile can then signal nothing it could not signal itself.
fn send_signal(signal: &str, pidfile: &std::path::Path) -> Result<(), Failure> {
    use rustix::fs::{Mode, OFlags};
    use rustix::process::Signal;
    let fail = |what: String| Failure::Status { status: what, tail: String::new() };
    let shown = pidfile.display();
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::open(pidfile, flags, Mode::empty())
        .map_err(|e| fail(format!("cannot open pidfile {shown}: {}", std::io::Error::from(e))))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| fail(format!("pidfile {shown}: {e}")))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(fail(format!("pidfile {shown} is not a regular file")));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), MAX_PIDFILE_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| fail(format!("cannot read pidfile {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_PIDFILE_BYTES {
        return Err(fail(format!("pidfile {shown} is larger than {MAX_PIDFILE_BYTES} bytes")));
    }
    let pid = parse_pid(&bytes).ok_or_else(|| fail(format!("pidfile {shown} holds no pid")))?;
    if pid.as_raw_nonzero().get() == 1 || pid == rustix::process::getpid() {
        return Err(fail(format!(
            "pidfile {shown} names pid {}, which is never signalled",
            pid.as_raw_nonzero()
        )));
    }
    // A handle on the process first: the checks below and the signal then
    // concern the same process, even if the pid is reused meanwhile.
    let dead = |e: rustix::io::Errno| {
        fail(format!(
            "SIG{signal} to pid {} (from {shown}) failed: {}",
            pid.as_raw_nonzero(),
            std::io::Error::from(e)
        ))
    };
    let process = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).map_err(dead)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        match process_uid(pid) {
            Some(uid) if uid == st.st_uid => {}
            owner => {
                let owner = owner.map_or("unknown".to_owned(), |u| u.to_string());
                return Err(fail(format!(
                    "pidfile {shown} is owned by uid {} but names pid {} of uid {owner}: refused (only a \
                     pidfile owned by root may name another user's process)",
                    st.st_uid,
                    pid.as_raw_nonzero()
                )));
            }
        }
    }
    let sig = match signal {
        "HUP" => Signal::HUP,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "TERM" => Signal::TERM,
        _ => Signal::INT,
    };
    rustix::process::pidfd_send_signal(&process, sig).map_err(dead)
}

/// The pid in a pidfile's bytes: decimal digits, then at most one newline.
fn parse_pid(bytes: &[u8]) -> Option<rustix::process::Pid> {
    let digits = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let pid: i32 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    rustix::process::Pid::from_raw(pid)
}

/// The real uid of process `pid` (from `/proc/PID/status`).
fn process_uid(pid: rustix::process::Pid) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.as_raw_nonzero())).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
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
    fn a_pidfile_is_one_decimal_pid_and_never_a_fifo_a_symlink_or_a_large_file() {
        for ok in ["42", "42\n"] {
            assert_eq!(parse_pid(ok.as_bytes()).map(|p| p.as_raw_nonzero().get()), Some(42), "{ok:?}");
        }
        for bad in ["", "\n", " 42", "42 ", "42\n\n", "+42", "-1", "0", "4x", "42\n43", "99999999999"] {
            assert_eq!(parse_pid(bad.as_bytes()), None, "{bad:?}");
        }
        let tmp = tempfile::tempdir().unwrap();
        let signal = |pidfile: &std::path::Path| {
            let start = Instant::now();
            let r = run_action(&action(ActionRun::Signal { signal: "HUP".into(), pidfile: pidfile.into() }));
            assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
            r.unwrap_err().to_string()
        };
        // A fifo without a writer: refused at once, never read.
        let fifo = tmp.path().join("fifo.pid");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
        assert!(signal(&fifo).contains("is not a regular file"), "{}", signal(&fifo));
        let link = tmp.path().join("link.pid");
        std::os::unix::fs::symlink("/proc/self/stat", &link).unwrap();
        assert!(signal(&link).starts_with("cannot open pidfile"), "{}", signal(&link));
        let big = tmp.path().join("big.pid");
        std::fs::write(&big, format!("{}\n", " ".repeat(100))).unwrap();
        assert!(signal(&big).contains("larger than 64 bytes"), "{}", signal(&big));
        let one = tmp.path().join("one.pid");
        std::fs::write(&one, "1\n").unwrap();
        assert!(signal(&one).contains("never signalled"), "{}", signal(&one));
        // A dead pid: its own reaped child.
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let pid = dead.id();
        dead.wait().unwrap();
        std::fs::write(&one, format!("{pid}\n")).unwrap();
        let err = signal(&one);
        assert!(err.starts_with(&format!("SIGHUP to pid {pid}")) && err.contains("No such process"), "{err}");
    }

    /// A loopback server answering each request with `status` and `body`;
    /// the request lines it saw come back through the receiver.
    fn http_server(status: &'static str, body: &'static str) -> (String, mpsc::Receiver<String>) {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                reader.read_line(&mut first).unwrap();
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let answer = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                let _ = s.write_all(answer.as_bytes());
                if tx.send(first.trim_end().to_owned()).is_err() {
                    return;
                }
            }
        });
        (format!("http://127.0.0.1:{port}"), rx)
    }

    fn http(url: String, expect: Vec<u16>) -> Action {
        action(ActionRun::Http { method: "POST".into(), url, expect, allow_remote: false })
    }

    #[test]
    fn an_http_action_succeeds_on_an_expected_status_only() {
        let (base, seen) = http_server("200 OK", "");
        run_action(&http(format!("{base}/-/reload"), vec![])).unwrap();
        assert_eq!(seen.recv().unwrap(), "POST /-/reload HTTP/1.1");
        run_action(&http(format!("{base}/-/reload"), vec![204, 200])).unwrap();
        let err = run_action(&http(format!("{base}/-/reload"), vec![204])).unwrap_err();
        assert_eq!(err.to_string(), "answered 200 (expected 204)");

        let (base, _seen) = http_server("500 Internal Server Error", "error loading config: line 3\n");
        let err = run_action(&http(format!("{base}/-/reload"), vec![])).unwrap_err();
        assert_eq!(err.to_string(), "answered 500 (expected 2xx): error loading config: line 3");
        assert!(matches!(err, Failure::Status { .. }));
    }

    #[test]
    fn an_http_action_without_an_answer_fails_naming_why() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/-/reload");
        let err = run_action(&http(url.clone(), vec![])).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{url}: no answer: ")), "{err}");
        // A server that accepts and never answers: the action's timeout.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let mut a = http(url, vec![]);
        a.timeout_ms = 300;
        let start = Instant::now();
        assert!(matches!(run_action(&a), Err(Failure::Timeout { ms: 300, .. })));
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
        drop(listener);
    }

    #[test]
    fn back_off_doubles_up_to_its_cap() {
        let r = (Duration::from_secs(1), Duration::from_secs(5));
        let got: Vec<u64> = (1..=5).map(|f| backoff(r, f).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 5, 5]);
    }
}
