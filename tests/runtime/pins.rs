//! Remembered pins: a warm run of an unchanged component file neither
//! opens nor hashes it; any change to the file, even one that restores its
//! modification time, is verified again and refused when it breaks the pin.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};

use super::*;

/// `durasync run` of the fixture under `strace -e trace=openat`: whether
/// the component file was opened. The fixture's own cache: in the shared
/// one another test's Cranelift upgrade could end between two runs, and a
/// run that finds Winch's artifact with no upgrade under way must read the
/// component to start one.
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
        .env("XDG_CACHE_HOME", fx.path("cache"))
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

#[test]
fn a_warm_run_on_winchs_code_does_not_open_the_component_while_its_upgrade_is_under_way() {
    let fx = Fixture::new("noop", "rw", "");
    // The test holds the cache's upgrade lock, as an upgrade under way does:
    // the cold run compiles with Winch and its upgrade ends at once.
    let dir = fx.path("cache/durasync");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).unwrap();
    let lock = std::fs::File::create(dir.join(".upgrade.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let Some(cold) = opens_component(&fx) else { return };
    assert!(cold, "the first run must read the component");
    let artifacts = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cwasm"))
            .collect();
        names.sort();
        names
    };
    let before = artifacts();
    assert!(before.len() == 1 && before[0].ends_with("-winch.cwasm"), "{before:?}");
    // Winch's artifact, loaded without the component's bytes.
    assert_eq!(opens_component(&fx), Some(false), "a run during the upgrade opened the component");
    // No upgrade under way: the next run reads the component to start one,
    // which replaces Winch's artifact with Cranelift's.
    drop(lock);
    assert_eq!(opens_component(&fx), Some(true), "nothing started the upgrade");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while artifacts().iter().any(|n| n.ends_with("-winch.cwasm")) {
        assert!(std::time::Instant::now() < deadline, "the upgrade did not end: {:?}", artifacts());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(artifacts().len(), 1, "{:?}", artifacts());
    assert_eq!(opens_component(&fx), Some(false), "a run on Cranelift's code opened the component");
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
