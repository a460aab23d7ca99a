//! The native CLI: output lines, `--json`, exit statuses, `write --from -`.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::*;

fn json(out: &str) -> serde_json::Value {
    assert_eq!(out.lines().count(), 1, "one line: {out:?}");
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"))
}

#[test]
fn sync_prints_created_replaced_and_unchanged_lines() {
    let s = Scratch::new();
    write_tree(&s.join("one"), &tree(&[("a", b"1", 0o644), ("b", b"2", 0o600), ("d/c", b"3", 0o644)]), 0o755);
    write_tree(&s.join("two"), &tree(&[("a", b"1", 0o644), ("z", b"9", 0o644)]), 0o755);
    let run = |src: &str| ok_stdout(&durasync(&["sync", "out/target", "--from", src], s.path()));
    std::fs::create_dir(s.join("out")).unwrap();
    assert_eq!(run("one"), "created out/target: 3 written, 0 removed\n");
    assert_eq!(run("one"), "unchanged out/target: 0 written, 0 removed\n");
    assert_eq!(run("two"), "replaced out/target: 2 written, 2 removed\n");
    assert_eq!(
        run("two/"),
        "unchanged out/target: 0 written, 0 removed\n",
        "a trailing / names the same dir"
    );
    // An absolute target is printed as given.
    let abs = s.join("out/target");
    let out = durasync(&["sync", abs.to_str().unwrap(), "--from", "one"], s.path());
    assert_eq!(ok_stdout(&out), format!("replaced {}: 3 written, 1 removed\n", abs.display()));
    assert!(out.stderr.is_empty(), "nothing on stderr: {}", stderr(&out));
}

#[test]
fn sync_json_prints_the_same_as_an_object() {
    let s = Scratch::new();
    write_tree(&s.join("src"), &tree(&[("a", b"1", 0o644), ("b", b"2", 0o600)]), 0o755);
    let run = || json(&ok_stdout(&durasync(&["sync", "target", "--from", "src", "--json"], s.path())));
    let v = run();
    assert_eq!(v, serde_json::json!({"target": "target", "outcome": "created", "written": 2, "removed": 0}));
    let v = run();
    assert_eq!(
        v,
        serde_json::json!({"target": "target", "outcome": "unchanged", "written": 0, "removed": 0})
    );
}

#[test]
fn write_reads_standard_input_with_from_dash() {
    let s = Scratch::new();
    let write = |args: &[&str], input: &[u8]| {
        let mut child = Command::new(crate::support::durasync())
            .args(args)
            .current_dir(s.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        ok_stdout(&child.wait_with_output().unwrap())
    };
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        write(&["write", "pod.yaml", "--from", "-", "--mode", "0600"], &big),
        "created pod.yaml: 1 written, 0 removed\n"
    );
    assert_eq!(std::fs::read(s.join("pod.yaml")).unwrap(), big, "all of standard input, byte for byte");
    assert_eq!(
        write(&["write", "pod.yaml", "--from", "-", "--mode", "0600"], &big),
        "unchanged pod.yaml: 0 written, 0 removed\n"
    );
    let v = json(&write(&["write", "pod.yaml", "--from", "-", "--json"], b""));
    assert_eq!(
        v,
        serde_json::json!({"target": "pod.yaml", "outcome": "replaced", "written": 1, "removed": 0})
    );
    assert_eq!(std::fs::read(s.join("pod.yaml")).unwrap(), b"", "an empty input makes an empty file");
    assert_eq!(names(s.path()), ["pod.yaml".to_owned()].into());
}

#[test]
fn write_from_a_file_replaces_the_target() {
    let s = Scratch::new();
    std::fs::write(s.join("src"), b"new").unwrap();
    std::fs::write(s.join("dst"), b"old").unwrap();
    assert_eq!(
        ok_stdout(&durasync(&["write", "dst", "--from", "src"], s.path())),
        "replaced dst: 1 written, 0 removed\n"
    );
    assert_eq!(std::fs::read(s.join("dst")).unwrap(), b"new");
}

/// Run a command that must fail with `status`, with one line on stderr
/// that starts with `durasync: ` and contains `words`.
fn assert_fails(s: &Scratch, args: &[&str], status: i32, words: &str) {
    let out = durasync(args, s.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err:?}");
    assert!(err.starts_with("durasync: ") && err.contains(words), "{args:?}: {err}");
}

#[test]
fn refused_requests_exit_3_and_change_nothing() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &tree(&[("a", b"1", 0o644)]), 0o755);
    write_tree(&s.join("src"), &tree(&[("a", b"2", 0o644)]), 0o755);
    std::os::unix::fs::symlink("/etc", s.join("src/link")).unwrap();
    std::fs::write(s.join("file"), b"f").unwrap();
    std::fs::create_dir(s.join("plain")).unwrap();
    let before = snapshot(s.path());
    assert_fails(&s, &["sync", "target", "--from", "src"], 3, "src/link: is a symbolic link");
    assert_fails(&s, &["sync", "file", "--from", "plain"], 3, "syncing file: file: not a directory");
    assert_fails(&s, &["write", "plain", "--from", "file"], 3, "writing plain: plain: not a regular file");
    assert_fails(&s, &["sync", ".durasync.lock", "--from", "plain"], 3, "reserved for durasync");
    let mut after = snapshot(s.path());
    after.as_mut().unwrap().remove(durasync::durable::names::LOCK_NAME);
    assert_eq!(after, before);
}

#[test]
fn io_failures_exit_1_naming_the_path() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    assert_fails(
        &s,
        &["sync", "missing/target", "--from", "src"],
        1,
        "opening directory missing: No such file",
    );
    assert_fails(
        &s,
        &["sync", "target", "--from", "nope"],
        1,
        "reading source nope: nope: no such file or directory",
    );
    assert_fails(&s, &["write", "f", "--from", "nope"], 1, "reading source nope: No such file or directory");
    assert!(names(s.path()) == ["src".to_owned()].into(), "{:?}", names(s.path()));
}

#[test]
fn error_lines_name_the_kernels_error_once() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    let out = durasync(&["sync", "missing/target", "--from", "src"], s.path());
    assert_eq!(stderr(&out).matches("No such file or directory").count(), 1, "{}", stderr(&out));
}

#[test]
fn bad_command_lines_exit_2() {
    let s = Scratch::new();
    for args in [&["sync", "target"][..], &["write", "f", "--from", "-", "--mode", "0800"], &["frobnicate"]] {
        let out = durasync(args, s.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    assert!(names(s.path()).is_empty());
}
