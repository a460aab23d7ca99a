//! The library-go `atomicdir` / `fsutil` test matrix (library-go `pkg/operator/staticpod/internal/atomicdir`), ported.

use std::os::fd::AsFd;
use std::path::Path;

use durasync::durable::{self, Error, NoProbe, Outcome, Step, Tree};

use crate::common::*;

// ---------------------------------------------------------------- swap

/// Two directories `pa/a` (mode 0755) and `pb/b` (mode 0700) holding `a` and `b`.
fn swap_fixture(a: &Tree, b: &Tree) -> Scratch {
    let s = Scratch::new();
    std::fs::create_dir(s.join("pa")).unwrap();
    std::fs::create_dir(s.join("pb")).unwrap();
    write_tree(&s.join("pa/a"), a, 0o755);
    write_tree(&s.join("pb/b"), b, 0o700);
    s
}

fn assert_swapped(s: &Scratch, a: &Tree, b: &Tree) {
    assert_eq!(snapshot(&s.join("pa/a")), expected(b, 0o700), "a holds b's old tree");
    assert_eq!(snapshot(&s.join("pb/b")), expected(a, 0o755), "b holds a's old tree");
}

fn two_trees() -> (Tree, Tree) {
    (tree(&[("1", b"a1", 0o644), ("d/2", b"a2", 0o600)]), tree(&[("3", b"b3", 0o640)]))
}

#[test]
fn swap_succeeds_with_absolute_paths() {
    let (a, b) = two_trees();
    let s = swap_fixture(&a, &b);
    let pa = open_dir(&s.join("pa"));
    let pb = open_dir(&s.join("pb"));
    durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap();
    assert_swapped(&s, &a, &b);
}

#[test]
fn swap_succeeds_with_the_first_path_relative() {
    let (a, b) = two_trees();
    let s = swap_fixture(&a, &b);
    // The first parent is reached relative to a handle, the second by an absolute path.
    let pa = durable::open_beneath(s.fd(), "pa").unwrap();
    let pb = open_dir(&s.join("pb"));
    durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap();
    assert_swapped(&s, &a, &b);
}

#[test]
fn swap_succeeds_with_the_second_path_relative() {
    let (a, b) = two_trees();
    let s = swap_fixture(&a, &b);
    let pa = open_dir(&s.join("pa"));
    let pb = durable::open_beneath(s.fd(), "pb").unwrap();
    durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap();
    assert_swapped(&s, &a, &b);
}

#[test]
fn swap_succeeds_with_relative_paths_through_the_cli() {
    // The CLI's swap is a sync; both its paths relative to the working directory.
    let s = Scratch::new();
    let old = tree(&[("x", b"old", 0o644)]);
    let new = tree(&[("y", b"new", 0o600)]);
    write_tree(&s.join("target"), &old, 0o755);
    write_tree(&s.join("src"), &new, 0o755);
    let out = ok_stdout(&durasync(&["sync", "target", "--from", "src"], s.path()));
    assert_eq!(out, "replaced target: 1 written, 1 removed\n");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
}

#[test]
fn swap_succeeds_when_the_first_dir_is_empty() {
    let (a, b) = (Tree::new(), two_trees().1);
    let s = swap_fixture(&a, &b);
    let (pa, pb) = (open_dir(&s.join("pa")), open_dir(&s.join("pb")));
    durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap();
    assert_swapped(&s, &a, &b);
}

#[test]
fn swap_succeeds_when_the_second_dir_is_empty() {
    let (a, b) = (two_trees().0, Tree::new());
    let s = swap_fixture(&a, &b);
    let (pa, pb) = (open_dir(&s.join("pa")), open_dir(&s.join("pb")));
    durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap();
    assert_swapped(&s, &a, &b);
}

#[test]
fn swap_succeeds_when_both_dirs_are_empty() {
    let (a, b) = (Tree::new(), Tree::new());
    let s = swap_fixture(&a, &b);
    let (pa, pb) = (open_dir(&s.join("pa")), open_dir(&s.join("pb")));
    durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap();
    assert_swapped(&s, &a, &b);
}

fn assert_swap_of_missing_fails(remove_a: bool, remove_b: bool) {
    let (a, b) = two_trees();
    let s = swap_fixture(&a, &b);
    if remove_a {
        std::fs::remove_dir_all(s.join("pa/a")).unwrap();
    }
    if remove_b {
        std::fs::remove_dir_all(s.join("pb/b")).unwrap();
    }
    let before = snapshot(s.path());
    let (pa, pb) = (open_dir(&s.join("pa")), open_dir(&s.join("pb")));
    let err = durable::exchange(pa.as_fd(), "a", pb.as_fd(), "b", &opts(&NoProbe, 1)).unwrap_err();
    let missing = if remove_a { "a" } else { "b" };
    assert!(matches!(&err, Error::NotFound { path } if path == missing), "{err:?}");
    assert!(err.to_string().contains("no such file or directory"), "{err}");
    assert_eq!(snapshot(s.path()), before, "nothing changed");
}

#[test]
fn swap_fails_when_the_first_dir_is_missing() {
    assert_swap_of_missing_fails(true, false);
}

#[test]
fn swap_fails_when_the_second_dir_is_missing() {
    assert_swap_of_missing_fails(false, true);
}

#[test]
fn swap_fails_when_both_dirs_are_missing() {
    assert_swap_of_missing_fails(true, true);
}

// ---------------------------------------------------------------- sync, success

/// Sync `new` into `target` (created holding `old` first unless `None`) and
/// check the result, the report, and that nothing is left beside it.
fn assert_sync(old: Option<&Tree>, new: &Tree, outcome: Outcome, written: u32, removed: u32) {
    let s = Scratch::new();
    if let Some(old) = old {
        write_tree(&s.join("target"), old, 0o750);
    }
    let rec = Recorder::default();
    let report = durable::sync_dir(s.fd(), "target", new, &opts(&rec, 4)).unwrap();
    assert_eq!((report.outcome, report.written, report.removed), (outcome, written, removed));
    let root_mode = if old.is_some() { 0o750 } else { 0o755 };
    assert_eq!(snapshot(&s.join("target")), expected(new, root_mode));
    assert_eq!(names(s.path()), ["target".to_owned()].into(), "only the target is left beside it");
    if outcome == Outcome::Unchanged {
        assert_eq!(rec.keys(), [Key { kind: "lock", path: ".".into() }], "unchanged: no write, no fsync");
    }
}

fn pair() -> Tree {
    tree(&[("tls.crt", b"cert-1", 0o644), ("tls.key", b"key-1", 0o600)])
}

#[test]
fn sync_creates_a_missing_target() {
    assert_sync(None, &pair(), Outcome::Created, 2, 0);
}

#[test]
fn sync_fills_an_empty_target() {
    assert_sync(Some(&Tree::new()), &pair(), Outcome::Replaced, 2, 0);
}

#[test]
fn sync_of_an_already_synchronized_target_is_unchanged() {
    assert_sync(Some(&pair()), &pair(), Outcome::Unchanged, 0, 0);
}

#[test]
fn sync_changes_contents_keeping_names() {
    let new = tree(&[("tls.crt", b"cert-2", 0o644), ("tls.key", b"key-2", 0o600)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 0);
}

#[test]
fn sync_changes_names_keeping_contents() {
    let new = tree(&[("a.crt", b"cert-1", 0o644), ("a.key", b"key-1", 0o600)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 2);
}

#[test]
fn sync_changes_names_and_contents() {
    let new = tree(&[("a.crt", b"cert-2", 0o644), ("a.key", b"key-2", 0o600)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 2);
}

#[test]
fn sync_replaces_one_files_content() {
    let new = tree(&[("tls.crt", b"cert-1", 0o644), ("tls.key", b"key-2", 0o600)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 0);
}

#[test]
fn sync_replaces_one_file() {
    let new = tree(&[("tls.crt", b"cert-1", 0o644), ("ca.crt", b"ca", 0o644)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 1);
}

#[test]
fn sync_renames_one_file() {
    let new = tree(&[("tls.crt", b"cert-1", 0o644), ("tls-renamed.key", b"key-1", 0o600)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 1);
}

#[test]
fn sync_adds_files() {
    let new = tree(&[
        ("tls.crt", b"cert-1", 0o644),
        ("tls.key", b"key-1", 0o600),
        ("ca.crt", b"ca", 0o644),
        ("sub/dir/extra", b"x", 0o640),
    ]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 4, 0);
}

#[test]
fn sync_deletes_one_file() {
    let new = tree(&[("tls.crt", b"cert-1", 0o644)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 1, 1);
}

#[test]
fn sync_of_no_files_leaves_an_empty_directory() {
    assert_sync(Some(&pair()), &Tree::new(), Outcome::Replaced, 0, 2);
}

#[test]
fn sync_detects_a_mode_change_as_a_change() {
    let new = tree(&[("tls.crt", b"cert-1", 0o644), ("tls.key", b"key-1", 0o640)]);
    assert_sync(Some(&pair()), &new, Outcome::Replaced, 2, 0);
}

// ---------------------------------------------------------------- sync, failure before the swap

/// Sync `new` into a target holding `old` (or none) with a fault at `at`,
/// and check that nothing changed: the target, and, after `recover`,
/// everything beside it.
fn assert_fault_leaves_target(old: Option<&Tree>, new: &Tree, at: Key, threads: usize) -> Error {
    let s = Scratch::new();
    if let Some(old) = old {
        write_tree(&s.join("target"), old, 0o750);
    }
    let before = snapshot(&s.join("target"));
    let probe = fail_at(at.clone());
    let err = durable::sync_dir(s.fd(), "target", new, &opts(&probe, threads)).unwrap_err();
    assert!(probe.hits() > 0, "the fault at {at} was never reached");
    assert!(!err.is_committed(), "{err}");
    assert_eq!(snapshot(&s.join("target")), before, "the target is unchanged");
    durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap();
    let left: Vec<String> = names(s.path()).into_iter().filter(|n| n != "target").collect();
    assert!(left.is_empty(), "left beside the target: {left:?}");
    err
}

#[test]
fn sync_leaves_no_target_when_creating_it_fails() {
    let at = Key { kind: "rename", path: "<stage> -> target".into() };
    let err = assert_fault_leaves_target(None, &pair(), at, 4);
    assert!(matches!(err, Error::Io { step: Step::Rename, .. }), "{err:?}");
}

#[test]
fn sync_leaves_target_unchanged_when_creating_staging_fails() {
    let at = Key { kind: "mkdir", path: "<stage>".into() };
    let err = assert_fault_leaves_target(Some(&pair()), &many_files("f", 3, 10, 1), at, 4);
    assert!(matches!(err, Error::Io { step: Step::Mkdir, .. }), "{err:?}");
}

#[test]
fn sync_leaves_target_unchanged_when_first_write_fails() {
    let new = many_files("f", 3, 10, 1);
    let at = Key { kind: "write", path: "<stage>/f0000".into() };
    let err = assert_fault_leaves_target(Some(&pair()), &new, at, 1);
    assert!(matches!(&err, Error::Io { step: Step::Write, path, .. } if path.ends_with("/f0000")), "{err:?}");
}

#[test]
fn sync_leaves_target_unchanged_when_second_write_fails() {
    let new = many_files("f", 3, 10, 1);
    let at = Key { kind: "write", path: "<stage>/f0001".into() };
    let err = assert_fault_leaves_target(Some(&pair()), &new, at, 1);
    assert!(matches!(&err, Error::Io { step: Step::Write, path, .. } if path.ends_with("/f0001")), "{err:?}");
    assert!(err.to_string().starts_with("write .durasync-stage-"), "{err}");
}

#[test]
fn sync_leaves_target_unchanged_when_the_swap_fails() {
    let at = Key { kind: "exchange", path: "<stage> <-> target".into() };
    let err = assert_fault_leaves_target(Some(&pair()), &many_files("f", 3, 10, 1), at, 4);
    assert!(matches!(err, Error::Io { step: Step::Exchange, .. }), "{err:?}");
    assert!(err.to_string().contains("Input/output error"), "{err}");
}

// ---------------------------------------------------------------- sync, after the swap

#[test]
fn sync_reports_committed_when_the_parent_fsync_fails() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o750);
    let new = many_files("f", 3, 10, 1);
    let probe = fail_at(Key { kind: "fsync-dir", path: ".".into() });
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&probe, 4)).unwrap_err();
    assert_eq!(probe.hits(), 1);
    assert!(matches!(err, Error::Committed { durable: false, step: Step::FsyncParent, .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("committed, durability unknown"), "{msg}");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o750), "the new content is live");
    // The old tree was left at the staging name; recovery removes it.
    assert_eq!(leftovers(s.path()).len(), 1);
    assert_eq!(durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap().len(), 1);
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn sync_reports_committed_and_leaves_a_leftover_when_removing_the_old_tree_fails() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o750);
    let new = many_files("f", 3, 10, 1);
    let probe = fail_at(Key { kind: "rmdir", path: "<stage>".into() });
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&probe, 4)).unwrap_err();
    assert_eq!(probe.hits(), 1);
    assert!(matches!(err, Error::Committed { durable: true, step: Step::Remove, .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("committed and durable") && msg.contains("durasync recover"), "{msg}");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o750), "the new content is live");
    let left = leftovers(s.path());
    assert_eq!(left.len(), 1, "the emptied old tree is left: {left:?}");
    assert_eq!(durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap(), left, "a later recover removes it");
    assert!(leftovers(s.path()).is_empty());
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o750));
}

#[test]
fn sync_reports_committed_when_an_unlink_fails_while_a_large_old_tree_is_removed() {
    // 64 old files, nested; one unlink in the middle fails. Where unlinks
    // wait for discards (ext4 with `discard`, like this machine's root) the
    // removal runs from several threads, starting below the top.
    let s = Scratch::new();
    let mut old = Tree::new();
    for i in 0..64 {
        old.add_file(&format!("sub/f{i:04}"), vec![i as u8; 100], 0o644).unwrap();
    }
    write_tree(&s.join("target"), &old, 0o750);
    let new = many_files("g", 3, 10, 7);
    let probe = fail_at(Key { kind: "unlink", path: "<stage>/sub/f0031".into() });
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&probe, 4)).unwrap_err();
    assert_eq!(probe.hits(), 1);
    assert!(matches!(err, Error::Committed { durable: true, step: Step::Remove, .. }), "{err:?}");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o750), "the new content is live");
    let left = leftovers(s.path());
    assert_eq!(left.len(), 1, "the partly removed old tree is left: {left:?}");
    assert_eq!(durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap(), left, "a later recover removes it");
    assert!(leftovers(s.path()).is_empty());
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o750));
}

// ---------------------------------------------------------------- names

#[test]
fn names_escaping_the_target_are_rejected_and_the_target_is_unchanged() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &pair(), 0o750);
    write_tree(&s.join("home"), &Tree::new(), 0o755);
    let before = snapshot(s.path());
    for bad in ["home/../api.crt", "/api.crt"] {
        let mut t = pair();
        let err = t.add_file(bad, b"evil".to_vec(), 0o644).unwrap_err();
        assert!(matches!(&err, Error::InvalidPath { path, .. } if path == bad), "{bad}: {err:?}");
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        // The same paths as a target name are refused before anything is touched.
        let err = durable::sync_dir(s.fd(), bad, &pair(), &opts(&NoProbe, 1)).unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{bad}: {err:?}");
        let err = durable::write_file(s.fd(), bad, b"evil", None, &opts(&NoProbe, 1)).unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{bad}: {err:?}");
    }
    assert_eq!(snapshot(s.path()), before, "nothing changed, not even a lock file");
}

// ---------------------------------------------------------------- file write

fn file_entry(path: &Path) -> Entry {
    snapshot(path).expect("the file exists").remove("").unwrap()
}

#[test]
fn write_file_writes_content_and_mode() {
    let s = Scratch::new();
    let r = durable::write_file(s.fd(), "manifest.yaml", b"kind: Pod\n", Some(0o600), &opts(&NoProbe, 1));
    assert_eq!(r.unwrap().outcome, Outcome::Created);
    assert_eq!(
        file_entry(&s.join("manifest.yaml")),
        Entry::File { mode: 0o600, bytes: b"kind: Pod\n".into() }
    );
    assert_eq!(names(s.path()), ["manifest.yaml".to_owned()].into());
}

#[test]
fn write_file_fails_in_a_missing_directory() {
    let s = Scratch::new();
    let err = durable::open_beneath(s.fd(), "missing").unwrap_err();
    assert!(matches!(&err, Error::NotFound { path } if path == "missing"), "{err:?}");
    // Through the CLI: a one-line error naming the directory, and nothing created.
    std::fs::write(s.join("src"), b"x").unwrap();
    let out = durasync(&["write", "missing/file", "--from", "src"], s.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("opening directory missing"), "{}", stderr(&out));
    assert_eq!(names(s.path()), ["src".to_owned()].into());
}

#[test]
fn write_file_overwrites() {
    let s = Scratch::new();
    std::fs::write(s.join("f"), b"old contents").unwrap();
    let r = durable::write_file(s.fd(), "f", b"new", Some(0o640), &opts(&NoProbe, 1)).unwrap();
    assert_eq!((r.outcome, r.written), (Outcome::Replaced, 1));
    assert_eq!(file_entry(&s.join("f")), Entry::File { mode: 0o640, bytes: b"new".into() });
    let r = durable::write_file(s.fd(), "f", b"new", Some(0o640), &opts(&NoProbe, 1)).unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(names(s.path()), ["f".to_owned()].into());
}

#[test]
fn write_file_writes_an_empty_file() {
    let s = Scratch::new();
    let r = durable::write_file(s.fd(), "empty", b"", None, &opts(&NoProbe, 1)).unwrap();
    assert_eq!(r.outcome, Outcome::Created);
    assert_eq!(file_entry(&s.join("empty")), Entry::File { mode: 0o644, bytes: vec![] });
    std::fs::write(s.join("was-full"), b"full").unwrap();
    durable::write_file(s.fd(), "was-full", b"", None, &opts(&NoProbe, 1)).unwrap();
    assert_eq!(std::fs::read(s.join("was-full")).unwrap(), b"");
}

// ---------------------------------------------------------------- unchanged detection at scale

#[test]
fn one_changed_byte_among_many_nested_files_is_detected_and_planned_exactly() {
    // 200 files (compared from several threads), nested two levels deep.
    let s = Scratch::new();
    let mut old = Tree::new();
    for i in 0..200 {
        old.add_file(&format!("d{}/e/f{i:04}", i % 3), vec![i as u8; 512], 0o644).unwrap();
    }
    durable::sync_dir(s.fd(), "target", &old, &opts(&NoProbe, 4)).unwrap();
    let again = durable::sync_dir(s.fd(), "target", &old, &opts(&NoProbe, 4)).unwrap();
    assert_eq!(again.outcome, Outcome::Unchanged);

    let mut new = Tree::new();
    for i in 0..200 {
        let mut bytes = vec![i as u8; 512];
        if i == 137 {
            bytes[300] ^= 1;
        }
        new.add_file(&format!("d{}/e/f{i:04}", i % 3), bytes, 0o644).unwrap();
    }
    let plan = durable::plan_sync(s.fd(), "target", &new, &opts(&NoProbe, 4)).unwrap();
    assert_eq!(plan.changed, ["d2/e/f0137"]);
    assert!(plan.added.is_empty() && plan.removed.is_empty(), "{plan:?}");
    let report = durable::sync_dir(s.fd(), "target", &new, &opts(&NoProbe, 4)).unwrap();
    assert_eq!(report.outcome, Outcome::Replaced);
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
}
