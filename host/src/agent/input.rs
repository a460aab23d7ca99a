//! Getting an instance's input bytes before a run: read a file, or run a
//! command with a deadline and take its standard output.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::config::Input;
use crate::spawn::child::{Ended, supervise};

/// The largest input the agent hands a plugin. A `kubectl get -o json` of a
/// namespace's configmaps and secrets is well under a MiB; anything this
/// large is a misconfiguration, and the limit keeps one instance from
/// holding arbitrary memory.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;
/// How much of a failing command's standard error goes into the message:
/// this many bytes of its start and as many of its end. The rest is read
/// and dropped (never left in the pipe: a command that writes more than a
/// pipe holds to standard error would block, or die of SIGPIPE once the
/// reader stopped).
pub const MAX_STDERR_BYTES: usize = 2048;

/// Why no input could be had (the run is skipped).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The input file could not be read.
    #[error("reading input file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The input is larger than [`MAX_INPUT_BYTES`].
    #[error("input {what} is larger than {MAX_INPUT_BYTES} bytes")]
    TooLarge {
        /// The file or command.
        what: String,
    },
    /// The command could not be started.
    #[error("starting input command {program}: {source}")]
    Spawn {
        /// `argv[0]`.
        program: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The command exited with a failure status.
    #[error("input command {program} {status}{stderr}")]
    Failed {
        /// `argv[0]`.
        program: String,
        /// How it ended.
        status: String,
        /// `: <its standard error>`, or empty.
        stderr: String,
    },
    /// The command outlived its deadline and was killed.
    #[error("input command {program} timed out after {ms} ms (input.command_timeout_ms) and was killed")]
    Timeout {
        /// `argv[0]`.
        program: String,
        /// The deadline.
        ms: u128,
    },
}

/// The input bytes for one run.
pub fn read(input: &Input) -> Result<Vec<u8>, InputError> {
    match input {
        Input::None => Ok(Vec::new()),
        Input::File(path) => read_file(path),
        Input::Command { argv, timeout } => run_command(argv, *timeout),
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, InputError> {
    let err = |e| InputError::File { path: path.display().to_string(), source: e };
    let file = std::fs::File::open(path).map_err(err)?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes).map_err(err)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge { what: path.display().to_string() });
    }
    Ok(bytes)
}

/// Run `argv` in its own process group with no standard input, collect its
/// standard output (bounded) and the start of its standard error. Past the
/// deadline the whole group is killed, so a hung `kubectl` or a shell's
/// children cannot keep the run waiting.
fn run_command(argv: &[String], timeout: Duration) -> Result<Vec<u8>, InputError> {
    let program = argv[0].clone();
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| InputError::Spawn { program: program.clone(), source: e })?;
    let stdout: std::os::fd::OwnedFd = child.stdout.take().expect("piped").into();
    let stderr: std::os::fd::OwnedFd = child.stderr.take().expect("piped").into();
    // Its own exit decides: a process it left holding a pipe is not waited
    // for past a short grace, and is killed with its group (spawn/child.rs).
    let mut out = Vec::new();
    let mut err = HeadTail::new(MAX_STDERR_BYTES);
    let ended = supervise(&mut child, vec![stdout, stderr], deadline, &mut |i, bytes| {
        if i == 0 {
            out.extend_from_slice(bytes);
            out.len() as u64 <= MAX_INPUT_BYTES
        } else {
            err.push(bytes);
            true
        }
    });
    let status = match ended {
        Ok(Ended::Exited(status)) => status,
        Ok(Ended::Stopped) => return Err(InputError::TooLarge { what: format!("from command {program}") }),
        Ok(Ended::TimedOut) => return Err(InputError::Timeout { program, ms: timeout.as_millis() }),
        Err(e) => return Err(InputError::Spawn { program, source: e }),
    };
    if !status.success() {
        let text = err.into_bytes();
        let text = String::from_utf8_lossy(&text);
        let stderr = match text.trim() {
            "" => String::new(),
            t => format!(": {}", t.replace('\n', " | ")),
        };
        let status = match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => format!("was killed ({status})"),
        };
        return Err(InputError::Failed { program, status, stderr });
    }
    Ok(out)
}

/// The first `keep` bytes and the last `keep` bytes of what was pushed;
/// what lies between is replaced by a note of its size. Memory stays
/// bounded by `2 * keep` whatever the writer sends.
struct HeadTail {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    keep: usize,
    dropped: u64,
}

impl HeadTail {
    fn new(keep: usize) -> HeadTail {
        HeadTail { head: Vec::with_capacity(keep), tail: Default::default(), keep, dropped: 0 }
    }

    fn push(&mut self, mut chunk: &[u8]) {
        let to_head = chunk.len().min(self.keep - self.head.len());
        self.head.extend_from_slice(&chunk[..to_head]);
        chunk = &chunk[to_head..];
        for &b in chunk {
            // Push, then drop past `keep` (popping first at `len == keep`
            // never popped for `keep == 0`: everything was kept).
            self.tail.push_back(b);
            if self.tail.len() > self.keep {
                self.tail.pop_front();
                self.dropped += 1;
            }
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        let mut out = self.head;
        if self.dropped > 0 {
            out.extend_from_slice(format!(" [... {} bytes ...] ", self.dropped).as_bytes());
        }
        out.extend(self.tail);
        out
    }
}

/// The first `keep` and the last `keep` bytes of `bytes`, as a failing
/// input command's stderr is kept (pushed in reads of any size).
pub(crate) fn head_tail(bytes: &[u8], keep: usize) -> Vec<u8> {
    let mut h = HeadTail::new(keep);
    bytes.chunks(8192).for_each(|c| h.push(c));
    h.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str], ms: u64) -> Input {
        Input::Command {
            argv: args.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_millis(ms),
        }
    }

    #[test]
    fn a_command_s_stdout_is_the_input() {
        assert_eq!(read(&cmd(&["sh", "-c", "printf 'a\\nb'"], 10_000)).unwrap(), b"a\nb");
    }

    #[test]
    fn a_failing_command_names_its_status_and_stderr() {
        let e = read(&cmd(&["sh", "-c", "echo no access >&2; exit 3"], 10_000)).unwrap_err();
        assert_eq!(e.to_string(), "input command sh exited with status 3: no access");
    }

    #[test]
    fn a_hung_command_and_its_children_are_killed_at_the_deadline() {
        let start = Instant::now();
        let e = read(&cmd(&["sh", "-c", "sleep 30 & sleep 30"], 200)).unwrap_err();
        assert!(matches!(e, InputError::Timeout { ms: 200, .. }), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    }

    #[test]
    fn a_command_that_floods_stderr_runs_to_its_end_and_its_message_keeps_head_and_tail() {
        // 200 lines of warnings (about 20 KiB, more than a pipe holds past
        // the first read), then the real output: the command must not die
        // of SIGPIPE.
        let script = "i=0; while [ $i -lt 200 ]; do echo \"W$i: deprecated API version, use v2 instead of v1\" >&2; \
                      i=$((i+1)); done; printf ok";
        assert_eq!(read(&cmd(&["sh", "-c", script], 30_000)).unwrap(), b"ok");
        let failing = format!("{script}; echo last words >&2; exit 7");
        let e = read(&cmd(&["sh", "-c", &failing], 30_000)).unwrap_err().to_string();
        assert!(e.starts_with("input command sh exited with status 7: W0: deprecated"), "{e}");
        assert!(e.ends_with("last words"), "{e}");
        assert!(e.contains(" bytes ...] "), "{e}");
        assert!(e.len() < 3 * MAX_STDERR_BYTES, "{}", e.len());
    }

    #[test]
    fn head_and_tail_keep_everything_when_it_fits() {
        let kept = |bytes: &[u8], keep| {
            let mut h = HeadTail::new(keep);
            bytes.chunks(7).for_each(|c| h.push(c));
            h.into_bytes()
        };
        assert_eq!(kept(b"short", 4), b"short");
        let long: Vec<u8> = (0..100u8).collect();
        let kept = kept(&long, 10);
        assert!(kept.starts_with(&long[..10]) && kept.ends_with(&long[90..]), "{kept:?}");
    }

    #[test]
    fn a_command_that_leaves_a_process_holding_its_output_gives_what_it_wrote_at_its_exit() {
        let start = Instant::now();
        let got = read(&cmd(&["sh", "-c", "sleep 30 & printf '{}'"], 20_000)).unwrap();
        assert_eq!(got, b"{}");
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    }

    #[test]
    fn keeping_no_bytes_keeps_only_the_note() {
        // Found by the fuzz target `input`: with `keep == 0` the tail kept everything.
        assert_eq!(head_tail(b"abcdef", 0), b" [... 6 bytes ...] ");
        assert_eq!(head_tail(b"abcdef", 1), b"a [... 4 bytes ...] f");
    }

    #[test]
    fn a_missing_program_or_file_is_named() {
        let e = read(&cmd(&["/nonexistent/kubectl"], 1000)).unwrap_err();
        assert!(e.to_string().starts_with("starting input command /nonexistent/kubectl: "), "{e}");
        let e = read(&Input::File("/nonexistent/in.json".into())).unwrap_err();
        assert!(e.to_string().starts_with("reading input file /nonexistent/in.json: "), "{e}");
    }
}
