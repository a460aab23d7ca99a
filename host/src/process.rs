//! The operator's commands as child processes: each leads its own process
//! group (`process_group(0)`), so a timeout kills it with everything it
//! started. Used by command inputs (`agent/input.rs`) and by validators and
//! actions (`hooks/command.rs`).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Kill `child`'s whole process group and reap the leader.
pub(crate) fn kill_group(child: &mut Child) {
    // The child leads its own group: its pid is the group id.
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Once its pipes are closed, wait for `child` (which may still be exiting)
/// until `deadline`. `Ok(None)`: the deadline passed and its group was killed.
pub(crate) fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    loop {
        match child.try_wait()? {
            Some(status) => return Ok(Some(status)),
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            None => {
                kill_group(child);
                return Ok(None);
            }
        }
    }
}
