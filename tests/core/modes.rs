//! Modes are exact: whatever the umask, and for directories that deny
//! their owner write access (which only root can ignore).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use durasync::durable::Tree;

use crate::common::*;

/// A source tree with every kind of permission bits worth checking.
fn exotic() -> Tree {
    let mut t = readable_by_owner();
    for (path, contents, mode) in
        [("no-bits", b"0000", 0o000), ("setuid", b"4755", 0o4755), ("setgid", b"2711", 0o2711)]
    {
        t.add_file(path, contents.to_vec(), mode).unwrap();
    }
    t
}

/// The part of [`exotic`] an unprivileged owner can read and chown keeps
/// (chown clears the setuid and setgid bits of files).
fn readable_by_owner() -> Tree {
    let mut t = tree(&[
        ("plain", b"0644", 0o644),
        ("secret", b"0600", 0o600),
        ("script.sh", b"#!/bin/sh\n", 0o755),
        ("owner-only.sh", b"#!/bin/sh\n", 0o700),
        ("group-read", b"0640", 0o640),
        ("read-only", b"0444", 0o444),
        ("everyone", b"0777", 0o777),
        ("private/key", b"k", 0o600),
        ("shared/tmp/x", b"x", 0o666),
        ("locked/file", b"in a read-only dir", 0o444),
    ]);
    t.add_dir("private", 0o700).unwrap();
    t.add_dir("shared", 0o777).unwrap();
    t.add_dir("shared/tmp", 0o1777).unwrap();
    t.add_dir("locked", 0o555).unwrap();
    t.add_dir("setgid-dir", 0o2750).unwrap();
    t
}

#[test]
fn sync_modes_are_exact_under_umask_077_and_000() {
    for umask in ["077", "000"] {
        for target_exists in [false, true] {
            let s = Scratch::new();
            write_tree(&s.join("src"), &exotic(), 0o711);
            if target_exists {
                write_tree(&s.join("target"), &tree(&[("old", b"old", 0o644)]), 0o750);
            }
            let out = durasync_sh(&format!("umask {umask}"), &["sync", "target", "--from", "src"], s.path());
            ok_stdout(&out);
            // A new target gets 0755 whatever the umask; an existing one keeps its mode.
            let root = if target_exists { 0o750 } else { 0o755 };
            let want = expected(&exotic(), root);
            assert_eq!(snapshot(&s.join("target")), want, "umask {umask}, target existed: {target_exists}");
            assert_eq!(contents(&snapshot(&s.join("src"))), contents(&want), "the source is read as written");
            // Unchanged the second time: modes compare equal.
            let out = durasync_sh(&format!("umask {umask}"), &["sync", "target", "--from", "src"], s.path());
            assert!(ok_stdout(&out).starts_with("unchanged target: "), "umask {umask}");
        }
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn write_modes_are_exact_under_umask_077_and_000() {
    for umask in ["077", "000"] {
        let s = Scratch::new();
        std::fs::write(s.join("src"), b"bytes").unwrap();
        ok_stdout(&durasync_sh(
            &format!("umask {umask}"),
            &["write", "given", "--from", "src", "--mode", "0640"],
            s.path(),
        ));
        assert_eq!(mode_of(&s.join("given")), 0o640, "umask {umask}: --mode is exact");
        ok_stdout(&durasync_sh(
            &format!("umask {umask}"),
            &["write", "setuid", "--from", "src", "--mode", "4750"],
            s.path(),
        ));
        assert_eq!(mode_of(&s.join("setuid")), 0o4750, "umask {umask}");
        ok_stdout(&durasync_sh(&format!("umask {umask}"), &["write", "new", "--from", "src"], s.path()));
        assert_eq!(mode_of(&s.join("new")), 0o644, "umask {umask}: a new file gets 0644");
        std::fs::write(s.join("kept"), b"old").unwrap();
        std::fs::set_permissions(s.join("kept"), std::fs::Permissions::from_mode(0o604)).unwrap();
        ok_stdout(&durasync_sh(&format!("umask {umask}"), &["write", "kept", "--from", "src"], s.path()));
        assert_eq!(mode_of(&s.join("kept")), 0o604, "umask {umask}: an existing file keeps its mode");
        assert_eq!(std::fs::read(s.join("kept")).unwrap(), b"bytes");
    }
}

/// Whether this test can run commands as `nobody` (root with setpriv).
fn can_drop_privileges() -> bool {
    rustix::process::geteuid().is_root()
        && Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"])
            .status()
            .is_ok_and(|s| s.success())
}

fn chown_tree(path: &Path) {
    std::os::unix::fs::lchown(path, Some(65534), Some(65534)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path());
        }
    }
}

fn as_nobody(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(crate::support::durasync())
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn a_non_root_user_syncs_replaces_and_recovers_read_only_directories() {
    if !can_drop_privileges() {
        cannot_check(
            "a_non_root_user_syncs_replaces_and_recovers_read_only_directories: needs root and setpriv",
        );
        return;
    }
    let s = Scratch::new();
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(s.join("w")).unwrap();
    let w = s.join("w");
    let first = readable_by_owner();
    let mut second = tree(&[("locked/other", b"2", 0o444), ("plain", b"2", 0o644)]);
    second.add_dir("locked", 0o500).unwrap();
    write_tree(&w.join("src1"), &first, 0o755);
    write_tree(&w.join("src2"), &second, 0o755);
    chown_tree(&w);
    assert_eq!(
        contents(&snapshot(&w.join("src1"))),
        contents(&expected(&first, 0o755)),
        "chown kept the modes"
    );

    let out = as_nobody(&["sync", "target", "--from", "src1"], &w);
    assert_eq!(ok_stdout(&out), format!("created target: {} written, 0 removed\n", first.file_count()));
    assert_eq!(snapshot(&w.join("target")), expected(&first, 0o755));
    // Replacing removes the old tree, read-only directories and all.
    let out = as_nobody(&["sync", "target", "--from", "src2"], &w);
    ok_stdout(&out);
    assert_eq!(snapshot(&w.join("target")), expected(&second, 0o755));
    assert!(leftovers(&w).is_empty(), "{:?}", names(&w));
    // A read-only target directory is replaced too, and keeps its mode.
    std::fs::set_permissions(w.join("target"), std::fs::Permissions::from_mode(0o555)).unwrap();
    ok_stdout(&as_nobody(&["sync", "target", "--from", "src1"], &w));
    assert_eq!(snapshot(&w.join("target")), expected(&first, 0o555));
    assert!(leftovers(&w).is_empty(), "{:?}", names(&w));

    // A crash's leftover holding a read-only directory is recovered.
    let stale = w.join(".durasync-stage-0123456789abcdef");
    write_tree(&stale, &second, 0o500);
    chown_tree(&stale);
    let out = as_nobody(&["recover", "."], &w);
    assert_eq!(ok_stdout(&out), "removed ./.durasync-stage-0123456789abcdef\n");
    assert!(!stale.exists());
}
