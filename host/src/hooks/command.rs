//! Running an operator's command (a validator or an action): argv without a
//! shell, no standard input, standard output and standard error into one
//! pipe of which the last [`MAX_OUTPUT_TAIL`] bytes are kept, its own
//! process group, killed as a group at its timeout.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::spawn::child::{Ended, supervise};

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
/// Its own exit decides: a process it left running (holding the output
/// pipe or not) is killed with its group once it exited, after at most
/// `OUTPUT_GRACE` more of reading
/// (`spawn/child.rs`).
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
    let mut tail = Tail::new(MAX_OUTPUT_TAIL);
    let ended = supervise(&mut child, vec![reader.into()], deadline, &mut |_, bytes| {
        tail.push(bytes);
        true
    });
    let status = match ended {
        Ok(Ended::Exited(status)) => status,
        Ok(Ended::TimedOut | Ended::Stopped) => {
            return Err(Failure::Timeout { ms: timeout_ms, tail: text(&tail.into_bytes()) });
        }
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
    Err(Failure::Status { status, tail: text(&tail.into_bytes()) })
}

/// A command's output as it is shown in errors and logged: its lines
/// joined by ` | `, every other control character escaped (`\r`,
/// `\u{1b}`), so it can neither forge a log line nor drive a terminal.
/// Every message holding a command's output takes it from here.
pub(super) fn text(tail: &[u8]) -> String {
    let text = String::from_utf8_lossy(tail);
    text.trim().split('\n').map(crate::services::text::escape_all).collect::<Vec<_>>().join(" | ")
}

/// The last `keep` bytes of what was pushed.
pub(super) struct Tail {
    bytes: std::collections::VecDeque<u8>,
    keep: usize,
    cut: bool,
}

impl Tail {
    pub(super) fn new(keep: usize) -> Tail {
        Tail { bytes: std::collections::VecDeque::with_capacity(keep), keep, cut: false }
    }

    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.cut |= chunk.len() > self.keep;
        // Only the last `keep` bytes of a chunk can stay.
        let chunk = &chunk[chunk.len().saturating_sub(self.keep)..];
        let over = (self.bytes.len() + chunk.len()).saturating_sub(self.keep);
        if over > 0 {
            self.bytes.drain(..over.min(self.bytes.len()));
            self.cut = true;
        }
        self.bytes.extend(chunk);
    }

    pub(super) fn into_bytes(self) -> Vec<u8> {
        let mut out: Vec<u8> = if self.cut { "…".as_bytes().to_vec() } else { Vec::new() };
        out.extend(self.bytes);
        out
    }
}

/// Substitute `{staged}` and `{target}` in each argument, in one pass:
/// what is substituted is never looked at again (a staged path holding a
/// directory named `{target}` stays that path).
pub fn substitute(argv: &[String], staged: &str, target: &str) -> Vec<String> {
    argv.iter()
        .map(|a| {
            let mut out = String::with_capacity(a.len());
            let mut rest = a.as_str();
            while let Some(i) = rest.find('{') {
                out.push_str(&rest[..i]);
                rest = &rest[i..];
                if let Some(after) = rest.strip_prefix("{staged}") {
                    out.push_str(staged);
                    rest = after;
                } else if let Some(after) = rest.strip_prefix("{target}") {
                    out.push_str(target);
                    rest = after;
                } else {
                    out.push('{');
                    rest = &rest[1..];
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
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
    fn a_command_that_leaves_a_daemon_holding_its_output_ends_at_its_own_exit() {
        // The daemon left the group (setsid): not killed, not waited for.
        let start = Instant::now();
        let script = "setsid sleep 30 & echo $! > \"$0\"; echo started; exit 0";
        let pidfile = tempfile::NamedTempFile::new().unwrap();
        let argv = vec!["sh".into(), "-c".into(), script.into(), pidfile.path().display().to_string()];
        assert_eq!(run(&argv, 20_000), Ok(()));
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
        let daemon: i32 = std::fs::read_to_string(pidfile.path()).unwrap().trim().parse().unwrap();
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(daemon).unwrap(),
            rustix::process::Signal::KILL,
        );
        // Its failure status decides too, and its output before the exit is kept.
        let script = "sleep 30 & echo bad thing; exit 4";
        let start = Instant::now();
        let err = run(&sh(script), 20_000).unwrap_err();
        assert_eq!(err.to_string(), "exited with status 4: bad thing");
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
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

    #[test]
    fn a_substituted_path_holding_a_placeholder_is_not_substituted_again() {
        let argv = vec!["{staged}/conf".to_owned(), "{{target}{staged}}".to_owned()];
        assert_eq!(
            substitute(&argv, "/r/{target}/.stage", "/r/{staged}/conf"),
            ["/r/{target}/.stage/conf", "{/r/{staged}/conf/r/{target}/.stage}"]
        );
    }

    #[test]
    fn control_characters_in_a_command_s_output_are_escaped() {
        let err = run(&sh("printf 'bad\\rforged\\033[2K\\nnext\\n'; exit 1"), 10_000).unwrap_err();
        assert_eq!(err.to_string(), "exited with status 1: bad\\rforged\\u{1b}[2K | next");
    }
}
