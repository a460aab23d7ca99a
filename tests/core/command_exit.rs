//! A validator's own exit decides (`host/src/spawn/child.rs`): one that leaves
//! a process behind holding its output — in its group or in a session of
//! its own (`setsid`) — is judged by its exit status at once, not refused
//! as timed out when the leftover finally closes the pipe.

use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn sync_validate_with_a_command_that_leaves_a_background_process_is_judged_by_its_exit() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/f1"), b"one").unwrap();
    let pids = s.join("pids");
    // `setsid sleep 30` leaves the group; `sleep 30 &` stays in it. Both hold the pipe.
    let script = "setsid sleep 30 & echo $! >> \"$0\"; sleep 30 & echo $! >> \"$0\"; exit 0";
    let start = Instant::now();
    let out = durasync(
        &[
            "sync",
            "target",
            "--from",
            "src",
            "--validate-timeout-ms",
            "7000",
            "--validate",
            "sh",
            "-c",
            script,
        ]
        .iter()
        .copied()
        .chain([pids.to_str().unwrap()])
        .collect::<Vec<_>>(),
        s.path(),
    );
    let took = start.elapsed();
    let left: Vec<i32> =
        std::fs::read_to_string(&pids).unwrap_or_default().lines().filter_map(|l| l.parse().ok()).collect();
    let alive = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        !stat.is_empty() && !stat.contains(") Z ")
    };
    // The one in its group is killed with it; the one in a new session is not ours to kill.
    let in_group_alive = left.get(1).is_some_and(|p| {
        (0..200).all(|_| {
            std::thread::sleep(Duration::from_millis(10));
            alive(*p)
        })
    });
    for pid in &left {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(*pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(took < Duration::from_secs(5), "took {took:?}: {}", stderr(&out));
    assert_eq!(std::fs::read(s.join("target/f1")).unwrap(), b"one");
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!in_group_alive, "the validator's background process {} outlived it", left[1]);

    // A failing exit refuses at once, with what it said before it exited.
    std::fs::write(s.join("src/f1"), b"two").unwrap();
    let start = Instant::now();
    let out = durasync(
        &["sync", "target", "--from", "src", "--validate", "sh", "-c", "sleep 30 & echo bad; exit 1"],
        s.path(),
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(stderr(&out).contains("exited with status 1: bad"), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    assert_eq!(std::fs::read(s.join("target/f1")).unwrap(), b"one");
}
