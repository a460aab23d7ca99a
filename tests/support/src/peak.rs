//! The peak resident memory of a child process, as the kernel counts it:
//! `wait4`'s `ru_maxrss` of exactly that child (its high-water mark,
//! `VmHWM`, kept past its exit), not a sample taken while it runs.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
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

/// Run `cmd` to its end, capturing its output, and reap it with `wait4`
/// for its own peak RSS (other children of the test process do not count).
pub fn run(cmd: &mut Command) -> Peak {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let _ = out.read_to_string(&mut stdout);
    let stderr = reader.join().expect("stderr reader");
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct
    // `wait4` fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is this process's own unreaped child (`Child` never
        // waited for it); `status` and `usage` are valid for writes.
        let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if got == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "wait4: {e}");
    }
    // Reaped already: dropping `child` does not wait for it again.
    drop(child);
    Peak { status: ExitStatus::from_raw(status), stdout, stderr, rss: usage.ru_maxrss as u64 * 1024 }
}
