//! Getting an instance's input bytes before a run: read a file, or run a
//! command with a deadline and take its standard output.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::config::Input;
use crate::process::{kill_group, wait_until};

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
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let out_tx = tx.clone();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let r = stdout.take(MAX_INPUT_BYTES + 1).read_to_end(&mut buf).map(|_| buf);
        let _ = out_tx.send((true, r));
    });
    std::thread::spawn(move || {
        let r = drain_head_tail(stderr, MAX_STDERR_BYTES);
        let _ = tx.send((false, r));
    });
    let (mut out, mut err) = (None, None);
    while out.is_none() || err.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((true, r)) => out = Some(r),
            Ok((false, r)) => err = Some(r),
            Err(_) => {
                kill_group(&mut child);
                return Err(InputError::Timeout { program, ms: timeout.as_millis() });
            }
        }
        if let Some(Ok(o)) = &out
            && o.len() as u64 > MAX_INPUT_BYTES
        {
            kill_group(&mut child);
            return Err(InputError::TooLarge { what: format!("from command {program}") });
        }
    }
    // Both pipes are closed; the process itself may still be exiting.
    let status = match wait_until(&mut child, deadline) {
        Ok(Some(status)) => status,
        Ok(None) => return Err(InputError::Timeout { program, ms: timeout.as_millis() }),
        Err(e) => return Err(InputError::Spawn { program, source: e }),
    };
    let stdout =
        out.expect("received").map_err(|e| InputError::Spawn { program: program.clone(), source: e })?;
    if !status.success() {
        let text = err.and_then(Result::ok).map(|b| String::from_utf8_lossy(&b).trim().to_owned());
        let stderr = match text {
            Some(t) if !t.is_empty() => format!(": {}", t.replace('\n', " | ")),
            _ => String::new(),
        };
        let status = match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => format!("was killed ({status})"),
        };
        return Err(InputError::Failed { program, status, stderr });
    }
    Ok(stdout)
}

/// Read `from` to its end, keeping its first `keep` bytes and its last
/// `keep` bytes; what lies between is replaced by a note of its size.
/// Memory stays bounded by `2 * keep` plus one read buffer whatever the
/// writer sends.
fn drain_head_tail(mut from: impl Read, keep: usize) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(keep);
    let mut tail = std::collections::VecDeque::with_capacity(keep);
    let mut dropped = 0u64;
    let mut buf = [0u8; 8192];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut chunk = &buf[..n];
        let to_head = chunk.len().min(keep - head.len());
        head.extend_from_slice(&chunk[..to_head]);
        chunk = &chunk[to_head..];
        for &b in chunk {
            if tail.len() == keep {
                tail.pop_front();
                dropped += 1;
            }
            tail.push_back(b);
        }
    }
    if dropped > 0 {
        head.extend_from_slice(format!(" [... {dropped} bytes ...] ").as_bytes());
    }
    head.extend(tail);
    Ok(head)
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
        assert_eq!(drain_head_tail(&b"short"[..], 4).unwrap(), b"short");
        let long: Vec<u8> = (0..100u8).collect();
        let kept = drain_head_tail(&long[..], 10).unwrap();
        assert!(kept.starts_with(&long[..10]) && kept.ends_with(&long[90..]), "{kept:?}");
    }

    #[test]
    fn a_missing_program_or_file_is_named() {
        let e = read(&cmd(&["/nonexistent/kubectl"], 1000)).unwrap_err();
        assert!(e.to_string().starts_with("starting input command /nonexistent/kubectl: "), "{e}");
        let e = read(&Input::File("/nonexistent/in.json".into())).unwrap_err();
        assert!(e.to_string().starts_with("reading input file /nonexistent/in.json: "), "{e}");
    }
}
