//! The power-loss lab (see tests/README.md): under real ext4 (journal), xfs
//! and btrfs on a volatile disk (tests/powerloss/src: writes persist only at
//! fsync of the disk image; a switch drops the rest), cut the power during
//! the real `durasync` binary's workload at every flush and at random writes,
//! replay, recover, and check the target is exactly old or new; known-wrong
//! writers in the same run must show violations, or the lab is not cutting.
//!
//! Needs root, /dev/fuse, loop devices and mkfs/fsck for each file system
//! (.ci/run installs them); elsewhere `cannot_check`.
//!
//! `cargo test -p durasync --test powerloss -- --nocapture` prints the
//! numbers; `DURASYNC_POWERLOSS_ROUNDS=N` adds N random rounds per file
//! system (the soak), `DURASYNC_POWERLOSS_SEED=S` replays a run's choices.

mod disk;
mod lab;
mod rig;
mod schedule;
mod trees;

use std::path::Path;

use durasync_test_support as support;
use rig::{Fs, program};
pub use support::cannot_check;

/// The tests of this binary run one at a time: a child forked by one test
/// thread holds a copy of every fd the process has open until it execs, so a
/// file another test is reading under its mount can make that unmount fail
/// with EBUSY (and a lazily detached btrfs can be found again by its fsid).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Take this binary's turn (a failed test leaves the lock usable).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this machine can run the lab for `fs`; if not, say why through
/// `cannot_check` (a failure under CI).
pub fn can_run(fs: Option<Fs>) -> bool {
    let mut missing = Vec::new();
    if !rustix::process::geteuid().is_root() {
        missing.push("root (loop devices and mounts)".to_string());
    }
    if !Path::new("/dev/fuse").exists() {
        missing.push("/dev/fuse".to_string());
    }
    let mut tools = vec!["losetup", "mount"];
    if let Some(fs) = fs {
        tools.extend(fs.tools());
        if !std::fs::read_to_string("/proc/filesystems").is_ok_and(|s| s.contains(fs.name())) {
            missing.push(format!("kernel support for {}", fs.name()));
        }
    }
    missing.extend(tools.into_iter().filter(|t| program(t).is_none()).map(String::from));
    if missing.is_empty() {
        return true;
    }
    cannot_check(&format!("the power-loss lab needs {}", missing.join(", ")));
    false
}

#[test]
fn ext4_power_cuts_leave_every_durasync_target_old_or_new() {
    let _turn = serial();
    schedule::lab(Fs::Ext4, "fsync");
}

#[test]
fn xfs_power_cuts_leave_every_durasync_target_old_or_new() {
    let _turn = serial();
    schedule::lab(Fs::Xfs, "fsync");
}

#[test]
fn btrfs_power_cuts_leave_every_durasync_target_old_or_new() {
    let _turn = serial();
    schedule::lab(Fs::Btrfs, "fsync");
}

#[test]
fn ext4_power_cuts_with_the_syncfs_flush_leave_every_durasync_target_old_or_new() {
    let _turn = serial();
    schedule::lab(Fs::Ext4, "syncfs");
}

#[test]
fn xfs_power_cuts_with_the_syncfs_flush_leave_every_durasync_target_old_or_new() {
    let _turn = serial();
    schedule::lab(Fs::Xfs, "syncfs");
}

#[test]
fn btrfs_power_cuts_with_the_syncfs_flush_leave_every_durasync_target_old_or_new() {
    let _turn = serial();
    schedule::lab(Fs::Btrfs, "syncfs");
}
