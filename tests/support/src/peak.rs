//! The peak resident memory of a child process, as the kernel counts it:
//! the `ru_maxrss` that `wait4` gives for exactly that child, not a sample
//! taken while it runs.
//!
//! The kernel's count of a process includes the memory of the process it
//! was `exec`ed from (`exec` keeps the larger of the old and the new
//! high-water marks): a child spawned by a test binary that holds 90 MiB
//! would be counted at 90 MiB at least. So the child is started by a small
//! `python3` that forks and `exec`s it and reports its `ru_maxrss`: the
//! figure is the larger of the child's own peak and that `python3`'s
//! (about 10 MiB, printed by [`launcher_floor`]).

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

/// What [`run`] gives: the child's exit, its output and its peak RSS.
#[derive(Debug)]
pub struct Peak {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The child's peak resident set size, in bytes.
    pub rss: u64,
}

/// Forks, `exec`s `argv[1:]`, waits for it with `wait4`, and prints its
/// `ru_maxrss` (KiB) as the last line of standard error, exiting as the
/// child exited.
const LAUNCHER: &str = r#"
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\n{MARK}{usage.ru_maxrss}\n")
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// What starts the launcher's last line.
const MARK: &str = "peak RSS KiB: ";

/// Run `program` with `args` in `cwd` (`DURASYNC_LOG` unset) to its end,
/// capturing its output, with its peak RSS from `wait4` (see the module).
pub fn run(program: &Path, args: &[&str], cwd: &Path) -> Peak {
    let out = Command::new("python3")
        .arg("-c")
        .arg(LAUNCHER.replace("{MARK}", MARK))
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .env_remove("DURASYNC_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run python3");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (stderr, kib) = stderr
        .trim_end()
        .rsplit_once('\n')
        .and_then(|(rest, last)| {
            Some((rest.trim_end().to_owned(), last.strip_prefix(MARK)?.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no peak RSS reported: {stderr}"));
    Peak {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        rss: kib * 1024,
    }
}

/// The peak RSS [`run`] reports for `/bin/true`: the launcher's own share,
/// below which no figure of [`run`] can go.
pub fn launcher_floor() -> u64 {
    run(Path::new("/bin/true"), &[], Path::new("/")).rss
}
