//! Remembered pins: a warm run of an unchanged component file neither
//! opens nor hashes it; any change to the file, even one that restores its
//! modification time, is verified again and refused when it breaks the pin.

use std::os::unix::fs::MetadataExt;

use super::*;

/// `durasync run` of the fixture under `strace -e trace=openat`: whether
/// the component file was opened.
fn opens_component(fx: &Fixture) -> Option<bool> {
    if Command::new("strace").arg("-V").output().is_err() {
        support::cannot_check("strace is not installed");
        return None;
    }
    let log = fx.path("strace.log");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=openat,open", "-o"])
        .arg(&log)
        .arg(support::durasync())
        .arg("run")
        .arg(&fx.manifest)
        .env("XDG_CACHE_HOME", shared_cache())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    Some(std::fs::read_to_string(&log).unwrap().contains("plugin.wasm"))
}

#[test]
fn a_warm_run_of_an_unchanged_component_does_not_open_it() {
    let fx = Fixture::new("noop", "rw", "");
    // Cold: read, hashed, remembered.
    let Some(cold) = opens_component(&fx) else { return };
    assert!(cold, "the first run must read the component");
    assert_eq!(opens_component(&fx), Some(false), "a warm run opened the component");
    // Touched (a chmod changes its ctime): verified again, then remembered.
    let mode = std::fs::metadata(fx.path("plugin.wasm")).unwrap().mode();
    std::fs::set_permissions(fx.path("plugin.wasm"), std::fs::Permissions::from_mode(mode & 0o7777)).unwrap();
    assert_eq!(opens_component(&fx), Some(true));
    assert_eq!(opens_component(&fx), Some(false));
}

/// The fixture's component with its last byte changed: the same size, other
/// bytes (so another sha256).
fn tampered(fx: &Fixture) -> Vec<u8> {
    let mut bytes = std::fs::read(fx.path("plugin.wasm")).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    bytes
}

fn assert_refused(fx: &Fixture, what: &str) {
    let out = fx.run("", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(POLICY), "{what}: {stderr}");
    assert!(stderr.contains("sha256"), "{what}: {stderr}");
}

#[test]
fn a_component_rewritten_in_place_with_its_mtime_restored_is_verified_again_and_refused() {
    let fx = Fixture::new("noop", "rw", "");
    let component = fx.path("plugin.wasm");
    for _ in 0..2 {
        let out = fx.run("", &[], "warn");
        assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    }
    let before = std::fs::metadata(&component).unwrap();
    let bytes = tampered(&fx);
    // Same inode, same size, then the old mtime put back.
    std::fs::OpenOptions::new().write(true).open(&component).unwrap().write_all(&bytes).unwrap();
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: before.atime(), tv_nsec: before.atime_nsec() as _ },
        last_modification: rustix::fs::Timespec { tv_sec: before.mtime(), tv_nsec: before.mtime_nsec() as _ },
    };
    rustix::fs::utimensat(rustix::fs::CWD, &component, &times, rustix::fs::AtFlags::empty()).unwrap();
    let after = std::fs::metadata(&component).unwrap();
    assert_eq!(
        (after.ino(), after.size(), after.mtime(), after.mtime_nsec()),
        (before.ino(), before.size(), before.mtime(), before.mtime_nsec())
    );
    assert_refused(&fx, "rewritten in place, mtime restored");
}

#[test]
fn a_component_replaced_under_its_name_is_verified_again_and_refused() {
    let fx = Fixture::new("noop", "rw", "");
    let component = fx.path("plugin.wasm");
    for _ in 0..2 {
        let out = fx.run("", &[], "warn");
        assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    }
    let bytes = tampered(&fx);
    let new = fx.path("plugin.wasm.new");
    std::fs::write(&new, bytes).unwrap();
    std::fs::rename(&new, &component).unwrap();
    assert_refused(&fx, "replaced by rename");
}
