//! The operator's commands as child processes: each leads its own process
//! group (`process_group(0)`), so a timeout kills it with everything it
//! started. Used by command inputs (`agent/input.rs`) and by validators and
//! actions (`hooks/command.rs`).
//!
//! # The command's own exit decides
//!
//! [`supervise`] reads the child's pipes while it runs and ends when *the
//! child* exits, not when its pipes close: a command that leaves a
//! background process behind (an init script's `restart`, `sh -c 'daemon
//! &'`) holding its standard output is not a "timeout". After the exit,
//! the pipes are read for at most [`OUTPUT_GRACE`] more (what the command
//! wrote last is already in them), then whatever the command left in its
//! process group is killed, and only then is the leader reaped: until it
//! is reaped its zombie keeps its pid, so the group id cannot have been
//! reused by an unrelated process when the group is killed.
//!
//! A process that left the group (`setsid`, a double fork into a new
//! session: a deliberate daemon) is neither waited for past the grace nor
//! killed: the agent does not track it. Tracking it would take a cgroup
//! per command or making the agent a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), which would reparent every orphaned
//! descendant to the agent and make it reap processes std's `Child` also
//! waits for; and a daemon an action started on purpose must outlive it.
//! Under systemd the unit's cgroup holds such processes (stopped with the
//! unit); in a pod, the container's.

use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

/// How long a command's pipes are still read after it exited. What it
/// wrote before its exit is in the pipe already; this only bounds the wait
/// for a process it left behind holding the pipe.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// Kill `child`'s whole process group and reap the leader.
pub(crate) fn kill_group(child: &mut Child) {
    // The child leads its own group: its pid is the group id. Killed
    // before the leader is reaped (see the module's comment).
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// How a supervised child ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// It exited (or was killed by a signal) with this status.
    Exited(ExitStatus),
    /// It outlived the deadline; its group was killed.
    TimedOut,
    /// The sink refused more output; its group was killed.
    Stopped,
}

/// Read `pipes` (the read ends of the child's output pipes, handed to
/// `sink` by index as bytes arrive) until `child` exits, plus at most
/// [`OUTPUT_GRACE`]; then kill what it left in its process group and reap
/// it. At `deadline` (or when `sink` returns `false`) the group is killed.
pub(crate) fn supervise(
    child: &mut Child,
    pipes: Vec<OwnedFd>,
    deadline: Instant,
    sink: &mut dyn FnMut(usize, &[u8]) -> bool,
) -> std::io::Result<Ended> {
    // Read without blocking: after the grace, what is left is drained, not waited for.
    for p in &pipes {
        let flags = rustix::fs::fcntl_getfl(p)?;
        rustix::fs::fcntl_setfl(p, flags | rustix::fs::OFlags::NONBLOCK)?;
    }
    let mut open: Vec<Option<OwnedFd>> = pipes.into_iter().map(Some).collect();
    let pid = rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or_else(|| std::io::Error::other("a child without a pid"))?;
    // Readable once the child has exited (a zombie, not yet reaped). Where
    // pidfds are missing (Linux < 5.3), the exit is polled every 10 ms.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
    let mut exited_at: Option<Instant> = None;
    let mut buf = [0u8; 8192];
    loop {
        if exited_at.is_none() && has_exited(pid)? {
            exited_at = Some(Instant::now());
        }
        let now = Instant::now();
        let until = match exited_at {
            Some(at) => deadline.min(at + OUTPUT_GRACE),
            None => deadline,
        };
        let all_closed = open.iter().all(Option::is_none);
        if now >= until || (exited_at.is_some() && all_closed) {
            break;
        }
        let mut wait = until - now;
        let watch_exit = exited_at.is_none();
        if watch_exit && pidfd.is_none() {
            wait = wait.min(Duration::from_millis(10));
        }
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(open.len() + 1);
        let mut which: Vec<usize> = Vec::with_capacity(open.len());
        for (i, p) in open.iter().enumerate() {
            if let Some(p) = p {
                fds.push(PollFd::new(p, PollFlags::IN));
                which.push(i);
            }
        }
        if let (true, Some(pidfd)) = (watch_exit, &pidfd) {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        let timeout = rustix::event::Timespec::try_from(wait)
            .unwrap_or(rustix::event::Timespec { tv_sec: i64::MAX, tv_nsec: 0 });
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                kill_group(child);
                return Err(e.into());
            }
        }
        let ready: Vec<usize> =
            which.iter().zip(&fds).filter(|(_, f)| !f.revents().is_empty()).map(|(i, _)| *i).collect();
        drop(fds);
        for i in ready {
            if !drain(&mut open[i], i, &mut buf, sink) {
                kill_group(child);
                return Ok(Ended::Stopped);
            }
        }
    }
    if exited_at.is_none() {
        kill_group(child);
        return Ok(Ended::TimedOut);
    }
    // The grace is over: what the pipes still hold is taken without waiting.
    for (i, pipe) in open.iter_mut().enumerate() {
        if !drain(pipe, i, &mut buf, sink) {
            kill_group(child);
            return Ok(Ended::Stopped);
        }
    }
    // The leader is a zombie: its group id is still its own. Kill what it
    // left in the group, then reap it (in that order; see the module).
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    Ok(Ended::Exited(child.wait()?))
}

/// Whether the child `pid` has exited, without reaping it.
fn has_exited(pid: rustix::process::Pid) -> std::io::Result<bool> {
    use rustix::process::{WaitId, WaitIdOptions};
    let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    Ok(rustix::process::waitid(WaitId::Pid(pid), opts)?.is_some())
}

/// Read what `pipe` holds now into `sink`; a pipe at its end is closed
/// (`None`). `false`: the sink wants no more.
fn drain(
    pipe: &mut Option<OwnedFd>,
    index: usize,
    buf: &mut [u8],
    sink: &mut dyn FnMut(usize, &[u8]) -> bool,
) -> bool {
    let Some(fd) = pipe else { return true };
    loop {
        match rustix::io::read(fd.as_fd(), &mut *buf) {
            Ok(0) => {
                *pipe = None;
                return true;
            }
            Ok(n) => {
                if !sink(index, &buf[..n]) {
                    return false;
                }
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return true,
            Err(_) => {
                *pipe = None;
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    fn sh(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_background_process_holding_the_pipe_is_killed_after_the_grace_not_waited_for() {
        let mut child = sh("echo $$; sleep 1000 & echo bg $!; exit 3");
        let out: OwnedFd = child.stdout.take().unwrap().into();
        let mut got = Vec::new();
        let start = Instant::now();
        let ended = supervise(&mut child, vec![out], start + Duration::from_secs(20), &mut |_, b| {
            got.extend_from_slice(b);
            true
        })
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        let Ended::Exited(status) = ended else { panic!("{ended:?}") };
        assert_eq!(status.code(), Some(3));
        let text = String::from_utf8(got).unwrap();
        let bg: i32 = text.lines().find_map(|l| l.strip_prefix("bg ")).unwrap().parse().unwrap();
        // Killed with the group (it may need a moment to be reaped by init).
        let pid = rustix::process::Pid::from_raw(bg).unwrap();
        let gone = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            let stat = std::fs::read_to_string(format!("/proc/{bg}/stat")).unwrap_or_default();
            rustix::process::test_kill_process(pid).is_err() || stat.contains(") Z ")
        });
        assert!(gone, "the background sleep {bg} still runs");
    }

    #[test]
    fn a_sink_that_wants_no_more_stops_the_child() {
        let mut child = sh("yes");
        let out: OwnedFd = child.stdout.take().unwrap().into();
        let mut n = 0;
        let ended =
            supervise(&mut child, vec![out], Instant::now() + Duration::from_secs(20), &mut |_, b| {
                n += b.len();
                n < 100_000
            })
            .unwrap();
        assert!(matches!(ended, Ended::Stopped), "{ended:?}");
    }
}
