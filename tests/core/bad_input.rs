//! Bad input: each refused with an error naming the problem, the target
//! unchanged.

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use durasync::durable::{self, Error, NoProbe, Options, RequestLimits, Tree};
use rustix::fs::{FileType, Mode};
use rustix::io::Errno;

use crate::common::*;

/// A snapshot of the scratch dir without the lock file a refused request
/// may have created (it is durasync's own, never part of a target).
fn state(s: &Scratch) -> Snapshot {
    snapshot(s.path()).map(|mut m| {
        m.remove(durable::names::LOCK_NAME);
        m
    })
}

fn pair() -> Tree {
    tree(&[("tls.crt", b"cert", 0o644), ("tls.key", b"key", 0o600)])
}

fn long_name() -> String {
    "x".repeat(256)
}

/// (name, words its error must contain)
fn bad_names() -> Vec<(String, &'static str)> {
    vec![
        ("a/b".into(), "must not contain `/`"),
        ("..".into(), "`.` and `..` are not allowed"),
        (".".into(), "`.` and `..` are not allowed"),
        ("".into(), "must not be empty"),
        ("a\0b".into(), "must not contain NUL"),
        (long_name(), "at most 255 bytes"),
        (".durasync.lock".into(), "reserved"),
    ]
}

#[test]
fn target_names_breaking_the_rules_are_refused_before_anything_is_touched() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o755);
    let before = snapshot(s.path());
    for (name, words) in bad_names() {
        let o = opts(&NoProbe, 1);
        let errors = [
            durable::sync_dir(s.fd(), &name, &pair(), &o).map(drop).unwrap_err(),
            durable::write_file(s.fd(), &name, b"x", None, &o).map(drop).unwrap_err(),
            durable::remove(s.fd(), &name, &o).map(drop).unwrap_err(),
        ];
        for err in errors {
            assert!(matches!(&err, Error::InvalidPath { path, .. } if *path == name), "{name:?}: {err:?}");
            assert!(err.is_invalid_request());
            let msg = err.to_string();
            assert!(msg.contains(words), "{name:?}: {msg}");
            assert!(msg.starts_with(&format!("invalid path {name:?}")), "names the path: {msg}");
        }
    }
    assert_eq!(snapshot(s.path()), before, "nothing changed, not even a lock file");
}

#[test]
fn tree_paths_breaking_the_rules_are_refused_naming_the_path() {
    let mut table: Vec<(String, &str)> = bad_names().into_iter().filter(|(n, _)| n != "a/b").collect();
    table.extend([
        ("/abs".into(), "absolute paths are not allowed"),
        ("a//b".into(), "must not be empty"),
        ("a/".into(), "must not be empty"),
        ("home/../api.crt".into(), "`.` and `..`"),
        ("a/./b".into(), "`.` and `..`"),
        (format!("sub/{}", long_name()), "at most 255 bytes"),
        ("sub/.durasync-stage-0123456789abcdef".into(), "reserved"),
    ]);
    for (path, words) in table {
        let mut t = pair();
        let before = t.clone();
        for err in
            [t.add_file(&path, b"x".to_vec(), 0o644).unwrap_err(), t.add_dir(&path, 0o755).unwrap_err()]
        {
            assert!(matches!(&err, Error::InvalidPath { path: p, .. } if *p == path), "{path:?}: {err:?}");
            assert!(err.to_string().contains(words), "{path:?}: {err}");
        }
        assert_eq!(t, before, "{path:?}: a refused path adds nothing (not even a parent)");
    }
}

#[test]
fn duplicate_paths_are_refused_naming_the_clash() {
    let mut t = pair();
    let err = t.add_file("tls.crt", b"again".to_vec(), 0o644).unwrap_err();
    assert_eq!(err.to_string(), "duplicate path \"tls.crt\": named twice");
    let err = t.add_file("tls.crt/inner", b"x".to_vec(), 0o644).unwrap_err();
    assert_eq!(err.to_string(), "duplicate path \"tls.crt\": used for a file and a directory");
    t.add_dir("d", 0o755).unwrap();
    let err = t.add_dir("d", 0o700).unwrap_err();
    assert_eq!(err.to_string(), "duplicate path \"d\": named twice");
    let err = t.add_file("d", vec![], 0o644).unwrap_err();
    assert!(err.is_invalid_request() && err.to_string().contains("file and a directory"), "{err}");
    assert_eq!(t.get("tls.crt"), pair().get("tls.crt"), "the first use is kept");
}

#[test]
fn modes_outside_the_permission_bits_are_refused() {
    let mut t = Tree::new();
    let err = t.add_file("f", vec![], 0o100_644).unwrap_err();
    assert!(err.to_string().contains("only permission bits"), "{err}");
    let s = Scratch::new();
    let err = durable::write_file(s.fd(), "f", b"x", Some(0o10_000), &opts(&NoProbe, 1)).unwrap_err();
    assert!(matches!(err, Error::InvalidMode { .. }), "{err:?}");
    assert!(names(s.path()).is_empty());
}

#[test]
fn requests_over_the_limits_are_refused_naming_the_limit() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o755);
    let before = state(&s);
    let small = Options {
        probe: &NoProbe,
        limits: RequestLimits { max_files: 2, max_bytes: 100, ..RequestLimits::default() },
        threads: 1,
        ..Options::default()
    };
    let err = durable::sync_dir(s.fd(), "target", &many_files("f", 3, 1, 0), &small).unwrap_err();
    assert_eq!(err.to_string(), "limit exceeded: files in one sync: 3 is over the limit of 2");
    let err = durable::sync_dir(s.fd(), "target", &many_files("f", 1, 101, 0), &small).unwrap_err();
    assert_eq!(err.to_string(), "limit exceeded: bytes in one sync: 101 is over the limit of 100");
    let err = durable::write_file(s.fd(), "f", &[0; 101], None, &small).unwrap_err();
    assert!(matches!(err, Error::Limit { what: "bytes in one write", .. }), "{err:?}");
    assert_eq!(state(&s), before);
}

#[test]
fn a_symlinked_target_is_refused_and_neither_link_nor_directory_changes() {
    let s = Scratch::new();
    write_tree(&s.join("real"), &pair(), 0o755);
    std::os::unix::fs::symlink("real", s.join("target")).unwrap();
    let before = state(&s);
    let new = tree(&[("other", b"new", 0o644)]);
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&NoProbe, 1)).unwrap_err();
    assert!(matches!(&err, Error::Symlink { path } if path == "target"), "{err:?}");
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    let err = durable::write_file(s.fd(), "target", b"x", None, &opts(&NoProbe, 1)).unwrap_err();
    assert!(matches!(&err, Error::Symlink { .. }), "{err:?}");
    // Through the CLI: status 3, one line naming the link.
    write_tree(&s.join("src"), &new, 0o755);
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("target: is a symbolic link"), "{}", stderr(&out));
    std::fs::remove_dir_all(s.join("src")).unwrap();
    assert_eq!(state(&s), before);
}

#[test]
fn a_symlink_on_the_way_to_a_nested_target_is_refused() {
    let s = Scratch::new();
    let outside = Scratch::new();
    std::os::unix::fs::symlink(outside.path(), s.join("secrets")).unwrap();
    let err = durable::open_beneath(s.fd(), "secrets").unwrap_err();
    assert!(matches!(&err, Error::Symlink { path } if path == "secrets"), "{err:?}");
    let err = durable::create_dirs_beneath(s.fd(), "secrets/tls", &opts(&NoProbe, 1)).unwrap_err();
    assert!(matches!(&err, Error::Symlink { .. }), "{err:?}");
    assert!(names(outside.path()).is_empty(), "nothing was created through the link");
}

#[test]
fn a_target_that_is_a_regular_file_is_refused() {
    let s = Scratch::new();
    std::fs::write(s.join("target"), b"a file").unwrap();
    let before = state(&s);
    let err = durable::sync_dir(s.fd(), "target", &pair(), &opts(&NoProbe, 1)).unwrap_err();
    assert!(matches!(&err, Error::NotADirectory { path } if path == "target"), "{err:?}");
    assert_eq!(err.to_string(), "target: not a directory");
    // And a directory where a file is to be written.
    std::fs::create_dir(s.join("dir")).unwrap();
    let err = durable::write_file(s.fd(), "dir", b"x", None, &opts(&NoProbe, 1)).unwrap_err();
    assert_eq!(err.to_string(), "dir: not a regular file");
    std::fs::remove_dir(s.join("dir")).unwrap();
    assert_eq!(state(&s), before);
}

/// Put a source holding `plant` (made by the closure) in `src/sub/`, and
/// check that reading it and syncing it from the CLI both fail naming the
/// entry and its kind, with the target unchanged.
fn assert_source_entry_refused(kind: &str, plant: impl Fn(&Path)) {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o755);
    write_tree(&s.join("src"), &tree(&[("ok", b"fine", 0o644), ("sub/ok", b"fine", 0o644)]), 0o755);
    plant(&s.join("src/sub/bad"));
    let before = state(&s);
    let err = durable::read_tree(s.fd(), "src", "src", &RequestLimits::default()).unwrap_err();
    assert!(matches!(&err, Error::UnsupportedEntry { path, .. } if path == "src/sub/bad"), "{err:?}");
    let msg = err.to_string();
    assert_eq!(msg, format!("src/sub/bad: is a {kind}; only regular files and directories can be synced"));
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let line = stderr(&out);
    assert!(line.starts_with("durasync: ") && line.contains(&msg), "{line}");
    assert_eq!(line.lines().count(), 1, "one line: {line}");
    assert_eq!(state(&s), before, "the target is unchanged");
}

#[test]
fn a_source_holding_a_symlink_is_refused() {
    let outside = Scratch::new();
    std::fs::write(outside.join("secret"), b"not to be copied").unwrap();
    assert_source_entry_refused("symbolic link", |p| std::os::unix::fs::symlink(outside.path(), p).unwrap());
}

#[test]
fn a_source_holding_a_fifo_is_refused() {
    assert_source_entry_refused("fifo", |p| {
        let parent = open_dir(p.parent().unwrap());
        let name = p.file_name().unwrap().as_bytes();
        rustix::fs::mknodat(parent.as_fd(), name, FileType::Fifo, Mode::from_raw_mode(0o644), 0).unwrap();
    });
}

#[test]
fn a_source_holding_a_socket_is_refused() {
    assert_source_entry_refused("socket", |p| {
        // The listener is dropped but its socket file stays.
        std::os::unix::net::UnixListener::bind(p).unwrap();
    });
}

#[test]
fn a_source_holding_a_device_is_refused() {
    // /dev/null's numbers; needs CAP_MKNOD (root outside a restricted container).
    let probe = Scratch::new();
    let made = rustix::fs::mknodat(
        probe.fd(),
        "null",
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    );
    if let Err(e) = made {
        cannot_check(&format!(
            "a_source_holding_a_device_is_refused: cannot create a character device here ({e})"
        ));
        return;
    }
    assert_source_entry_refused("character device", |p| {
        let parent = open_dir(p.parent().unwrap());
        let name = p.file_name().unwrap().as_bytes();
        let dev = rustix::fs::makedev(1, 3);
        rustix::fs::mknodat(parent.as_fd(), name, FileType::CharacterDevice, Mode::from_raw_mode(0o600), dev)
            .unwrap();
    });
}

#[test]
fn a_source_name_that_is_not_utf8_is_refused() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o755);
    std::fs::create_dir(s.join("src")).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff");
    std::fs::write(s.join("src").join(name), b"x").unwrap();
    let err = durable::read_tree(s.fd(), "src", "src", &RequestLimits::default()).unwrap_err();
    assert!(err.to_string().contains("names must be valid UTF-8"), "{err}");
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(snapshot(&s.join("target")), expected(&pair(), 0o755));
}

fn assert_unsupported(exists: bool, errno: Errno, op: &str) {
    let s = Scratch::new();
    if exists {
        write_tree(&s.join("target"), &pair(), 0o750);
    }
    let before = state(&s);
    let swap = if exists { "exchange" } else { "rename" };
    let probe = FailWhen::new(errno, move |k: &Key| k.kind == swap);
    let new = tree(&[("new", b"new", 0o644)]);
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&probe, 4)).unwrap_err();
    assert_eq!(probe.hits(), 1);
    let Error::Unsupported { fs, op: got, .. } = &err else { panic!("{errno:?}: not Unsupported: {err:?}") };
    assert_eq!(*got, op);
    // The error names the file system the target is on.
    assert_eq!(*fs, durable::FsKind::of(s.fd()).unwrap().to_string());
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("the file system ({fs}) does not support atomic {op}")),
        "names the file system: {msg}"
    );
    assert!(msg.contains("nothing was changed"), "{msg}");
    assert!(!err.is_committed());
    assert_eq!(state(&s), before, "{errno:?}: nothing changed and no staging is left, even without recover");
}

#[test]
fn rename_exchange_unsupported_is_a_clear_error_and_changes_nothing() {
    for errno in [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP] {
        assert_unsupported(true, errno, "RENAME_EXCHANGE");
    }
}

#[test]
fn rename_noreplace_unsupported_is_a_clear_error_and_creates_nothing() {
    assert_unsupported(false, Errno::INVAL, "RENAME_NOREPLACE");
}

#[test]
fn a_cross_device_swap_is_unsupported_and_changes_nothing() {
    assert_unsupported(true, Errno::XDEV, "cross-device rename");
}

#[test]
fn the_exchange_primitive_reports_unsupported_file_systems() {
    let s = Scratch::new();
    write_tree(&s.join("a"), &pair(), 0o755);
    write_tree(&s.join("b"), &Tree::new(), 0o755);
    let before = state(&s);
    let probe = FailWhen::new(Errno::INVAL, |k: &Key| k.kind == "exchange");
    let err = durable::exchange(s.fd(), "a", s.fd(), "b", &opts(&probe, 1)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { op: "RENAME_EXCHANGE", .. }), "{err:?}");
    assert_eq!(state(&s), before);
}

#[test]
fn a_source_holding_a_reserved_name_is_refused_naming_it() {
    for reserved in [".durasync-notes", ".durasync.lock", ".durasync-stage-0123456789abcdef"] {
        let s = Scratch::new();
        write_tree(&s.join("target"), &pair(), 0o755);
        write_tree(&s.join("src"), &tree(&[("ok", b"fine", 0o644)]), 0o755);
        std::fs::create_dir(s.join("src/sub")).unwrap();
        std::fs::write(s.join("src/sub").join(reserved), b"not silently dropped").unwrap();
        let before = state(&s);
        let err = durable::read_tree(s.fd(), "src", "src", &RequestLimits::default()).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidPath { path, .. } if *path == format!("sub/{reserved}")),
            "{err:?}"
        );
        let out = durasync(&["sync", "target", "--from", "src"], s.path());
        assert_eq!(out.status.code(), Some(3), "{reserved}: {}", stderr(&out));
        assert!(stderr(&out).contains(reserved) && stderr(&out).contains("reserved"), "{}", stderr(&out));
        assert_eq!(state(&s), before, "{reserved}: the target is unchanged");
    }
}

#[test]
fn a_source_directory_with_more_entries_than_a_sync_may_hold_is_refused_once_its_listing_passes_them() {
    // 10 files and 5 directories at most: a directory of 40 entries can
    // never be a source, and its listing stops at the 16th.
    let s = Scratch::new();
    std::fs::create_dir_all(s.join("src/big")).unwrap();
    std::fs::write(s.join("src/small"), b"x").unwrap();
    for i in 0..40 {
        std::fs::write(s.join(&format!("src/big/f{i:02}")), b"x").unwrap();
    }
    let limits = RequestLimits { max_files: 10, max_dirs: 5, ..RequestLimits::default() };
    let err = durable::read_tree(s.fd(), "src", "src", &limits).unwrap_err();
    match &err {
        Error::TooLarge { path, what: "entries in one directory", limit: 15, actual: 16 } => {
            assert_eq!(path, "src/big")
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("src/big: limit exceeded: entries in one directory"), "{err}");
}
