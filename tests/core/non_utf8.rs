//! Entries whose names are not UTF-8, which durasync itself never creates
//! but anyone can put beside a target or inside a leftover: they must never
//! stop an operation or a recovery.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::common::{durasync, leftovers, ok_stdout, scratch_dir, stderr};

fn raw(dir: &Path, name: &[u8]) -> PathBuf {
    dir.join(OsStr::from_bytes(name))
}

/// A leftover beside a target holding non-UTF-8 names at two levels, and
/// a directory wide enough to be emptied from several threads.
fn plant_leftover(parent: &Path) -> PathBuf {
    let leftover = parent.join(".durasync-stage-00112233aabbccdd");
    let odd_dir = raw(&leftover, b"dir-\xff");
    std::fs::create_dir_all(&odd_dir).unwrap();
    std::fs::write(raw(&odd_dir, b"\xfe\xfd"), b"x").unwrap();
    let wide = leftover.join("wide");
    std::fs::create_dir(&wide).unwrap();
    for i in 0..40u8 {
        std::fs::write(raw(&wide, &[b'f', 0x80 | i]), b"y").unwrap();
    }
    leftover
}

#[test]
fn recover_removes_a_leftover_holding_names_that_are_not_utf8() {
    let tmp = scratch_dir();
    let parent = tmp.path().join("p");
    std::fs::create_dir(&parent).unwrap();
    plant_leftover(&parent);
    let out = durasync(&["recover", parent.to_str().unwrap()], tmp.path());
    let stdout = ok_stdout(&out);
    assert!(stdout.contains(".durasync-stage-00112233aabbccdd"), "{stdout}");
    assert!(leftovers(&parent).is_empty(), "{:?}", leftovers(&parent));
}

#[test]
fn the_next_sync_removes_a_leftover_holding_names_that_are_not_utf8() {
    let tmp = scratch_dir();
    let (parent, src) = (tmp.path().join("p"), tmp.path().join("src"));
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"new").unwrap();
    plant_leftover(&parent);
    let target = parent.join("t");
    let out = durasync(&["sync", target.to_str().unwrap(), "--from", src.to_str().unwrap()], tmp.path());
    assert!(ok_stdout(&out).starts_with("created "), "{}", stderr(&out));
    assert_eq!(std::fs::read(target.join("a")).unwrap(), b"new");
    assert!(leftovers(&parent).is_empty(), "{:?}", leftovers(&parent));
}

#[test]
fn a_stray_non_utf8_entry_beside_a_target_stops_no_operation_and_is_kept() {
    let tmp = scratch_dir();
    let (parent, src) = (tmp.path().join("p"), tmp.path().join("src"));
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"new").unwrap();
    let stray = raw(&parent, b"stray-\xff");
    std::fs::write(&stray, b"not ours").unwrap();
    let target = parent.join("t");
    for expect in ["created ", "unchanged "] {
        let out = durasync(&["sync", target.to_str().unwrap(), "--from", src.to_str().unwrap()], tmp.path());
        assert!(ok_stdout(&out).starts_with(expect), "{}", stderr(&out));
    }
    let file = parent.join("f");
    let out =
        durasync(&["write", file.to_str().unwrap(), "--from", src.join("a").to_str().unwrap()], tmp.path());
    ok_stdout(&out);
    ok_stdout(&durasync(&["recover", parent.to_str().unwrap()], tmp.path()));
    assert_eq!(std::fs::read(&stray).unwrap(), b"not ours", "an entry durasync did not make was changed");
}

#[test]
fn a_target_holding_a_non_utf8_name_is_refused_naming_it_and_unchanged() {
    let tmp = scratch_dir();
    let (parent, src) = (tmp.path().join("p"), tmp.path().join("src"));
    let target = parent.join("t");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"new").unwrap();
    std::fs::write(raw(&target, b"odd-\xff"), b"old").unwrap();
    let out = durasync(&["sync", target.to_str().unwrap(), "--from", src.to_str().unwrap()], tmp.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("names must be valid UTF-8"), "{}", stderr(&out));
    assert_eq!(std::fs::read(raw(&target, b"odd-\xff")).unwrap(), b"old");
    assert!(!target.join("a").exists());
}
