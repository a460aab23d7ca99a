//! Running an operator's command (a validator or an action): argv without a
//! shell, no standard input, standard output and standard error into one
//! pipe of which the last [`MAX_OUTPUT_TAIL`] bytes are kept, its own
//! process group, killed as a group at its timeout.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::process::{kill_group, wait_until};

/// How much of a command's output (stdout and stderr together) is kept for
/// the error: its end, where a validator says what is wrong. The rest is
/// read and dropped, so a chatty command never blocks on a full pipe.
pub const MAX_OUTPUT_TAIL: usize = 2048;
/// The most arguments a command may have.
pub const MAX_ARGS: usize = 256;
/// The longest argument (after substitution).
pub const MAX_ARG_BYTES: usize = 4096;
/// The default timeout of a validator or an action.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The longest timeout accepted (one hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// How a command ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// It could not be started.
    Spawn(String),
    /// It exited with a failure status or was killed by a signal.
    Status {
        /// `exited with status 1`, `was killed by signal 9`.
        status: String,
        /// The end of its output, trimmed.
        tail: String,
    },
    /// It outlived its timeout; its process group was killed.
    Timeout {
        /// The timeout.
        ms: u64,
        /// The end of its output so far, trimmed.
        tail: String,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tail = |t: &str| if t.is_empty() { String::new() } else { format!(": {t}") };
        match self {
            Failure::Spawn(e) => write!(f, "could not be started: {e}"),
            Failure::Status { status, tail: t } => write!(f, "{status}{}", tail(t)),
            Failure::Timeout { ms, tail: t } => {
                write!(f, "timed out after {ms} ms and was killed{}", tail(t))
            }
        }
    }
}

/// Run `argv` to its end or its timeout. `Ok` when it exited with status 0.
pub fn run(argv: &[String], timeout_ms: u64) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    // One pipe for both streams: validators write their complaint to either.
    let (reader, writer) = std::io::pipe().map_err(|e| Failure::Spawn(format!("pipe: {e}")))?;
    let writer2 = writer.try_clone().map_err(|e| Failure::Spawn(format!("pipe: {e}")))?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| Failure::Spawn(format!("{}: {e}", argv[0])))?;
    // The parent's copies of the write end went with `cmd`: once every
    // process of the group has closed it, the reader sees the end.
    drop(cmd);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(drain_tail(reader, MAX_OUTPUT_TAIL));
    });
    let left = deadline.saturating_duration_since(Instant::now());
    let tail = match rx.recv_timeout(left) {
        Ok(tail) => tail,
        Err(_) => {
            kill_group(&mut child);
            // The group is dead, so the pipe is closed: the tail follows.
            let tail = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
            return Err(Failure::Timeout { ms: timeout_ms, tail: text(&tail) });
        }
    };
    // Every holder of the pipe is gone; the leader itself may still be exiting.
    let status = match wait_until(&mut child, deadline) {
        Ok(Some(status)) => status,
        Ok(None) => return Err(Failure::Timeout { ms: timeout_ms, tail: text(&tail) }),
        Err(e) => return Err(Failure::Spawn(format!("waiting for {}: {e}", argv[0]))),
    };
    if status.success() {
        return Ok(());
    }
    let status = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => format!("ended with {status}"),
    };
    Err(Failure::Status { status, tail: text(&tail) })
}

fn text(tail: &[u8]) -> String {
    String::from_utf8_lossy(tail).trim().replace('\n', " | ")
}

/// Read `from` to its end, keeping its last `keep` bytes.
fn drain_tail(mut from: impl Read, keep: usize) -> Vec<u8> {
    let mut tail = std::collections::VecDeque::with_capacity(keep);
    let mut buf = [0u8; 8192];
    let mut cut = false;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for &b in &buf[..n] {
            if tail.len() == keep {
                tail.pop_front();
                cut = true;
            }
            tail.push_back(b);
        }
    }
    let mut out: Vec<u8> = if cut { "…".as_bytes().to_vec() } else { Vec::new() };
    out.extend(tail);
    out
}

/// Substitute `{staged}` and `{target}` in each argument.
pub fn substitute(argv: &[String], staged: &str, target: &str) -> Vec<String> {
    argv.iter().map(|a| a.replace("{staged}", staged).replace("{target}", target)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn a_failing_command_reports_its_status_and_output_tail() {
        assert_eq!(run(&sh("exit 0"), 10_000), Ok(()));
        let err = run(&sh("echo out; echo bad thing >&2; exit 3"), 10_000).unwrap_err();
        assert_eq!(err.to_string(), "exited with status 3: out | bad thing");
    }

    #[test]
    fn a_hung_command_is_killed_with_its_children_at_its_timeout() {
        // `sleep` holds the pipe too: only killing the whole group ends it.
        let err = run(&sh("echo started; sleep 1000 & wait"), 300).unwrap_err();
        let Failure::Timeout { ms: 300, tail } = &err else { panic!("{err:?}") };
        // (Under load the shell may not have written yet when it is killed.)
        assert!(tail == "started" || tail.is_empty(), "{err:?}");
    }

    #[test]
    fn only_the_tail_of_a_long_output_is_kept() {
        let err = run(&sh("head -c 100000 /dev/zero | tr '\\0' x; echo; echo last words; exit 1"), 10_000)
            .unwrap_err();
        let Failure::Status { tail, .. } = err else { panic!() };
        assert!(tail.ends_with("last words") && tail.len() <= MAX_OUTPUT_TAIL + 16, "{}", tail.len());
    }

    #[test]
    fn a_missing_program_is_a_spawn_failure() {
        let err = run(&["/nonexistent/validator".to_owned()], 1000).unwrap_err();
        assert!(err.to_string().starts_with("could not be started"), "{err}");
    }

    #[test]
    fn placeholders_are_substituted_in_every_argument() {
        let argv = vec!["v".to_owned(), "{staged}/a".to_owned(), "--target={target}".to_owned()];
        assert_eq!(substitute(&argv, "/s", "/t"), ["v", "/s/a", "--target=/t"]);
    }
}
