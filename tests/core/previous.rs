//! Keeping a target's previous contents (`Options::keep_previous`,
//! `durable::revert`, `discard_previous`, `previous_of`) and the CLI's
//! `sync --keep-previous`, `sync --to-previous`, `write --keep-previous`
//! and `rollback`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use durasync::durable::names::{keep_name, keep_of, parse_keep};
use durasync::durable::{self, Error, Options, Outcome, PreviousKind, Tree};

use crate::common::*;

fn keep() -> Options<'static> {
    Options { keep_previous: true, flush: durable::Flush::Fsync, ..Options::default() }
}

/// The old tree: nested, with modes that are not the defaults.
fn old_tree() -> Tree {
    let mut t =
        tree(&[("tls.crt", b"old cert", 0o644), ("tls.key", b"old key", 0o600), ("bin/run", b"#!", 0o755)]);
    t.add_dir("empty", 0o700).unwrap();
    t
}

fn new_tree() -> Tree {
    tree(&[("tls.crt", b"new cert", 0o640), ("ca.crt", b"new ca", 0o644)])
}

/// The keep entries directly in `dir`.
fn keeps(dir: &Path) -> Vec<String> {
    names(dir).into_iter().filter(|n| parse_keep(n).is_some()).collect()
}

/// A target `certs` holding `old_tree` (mode 0750), synced as durasync would.
fn with_old(s: &Scratch) -> Snapshot {
    durable::sync_dir(s.fd(), "certs", &old_tree(), &Options::default()).unwrap();
    std::fs::set_permissions(s.join("certs"), std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
    snapshot(&s.join("certs"))
}

#[test]
fn keep_then_revert_returns_exactly_the_old_tree_with_its_modes() {
    let s = Scratch::new();
    let old = with_old(&s);
    let old_ino = std::fs::metadata(s.join("certs")).unwrap().ino();
    let r = durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(contents(&snapshot(&s.join("certs"))), contents(&expected(&new_tree(), 0o750)));
    let prev = durable::previous_of(s.fd(), "certs").unwrap().expect("the old tree is kept");
    assert_eq!((prev.inode, prev.kind), (old_ino, PreviousKind::Dir));
    assert_eq!(prev.entry, keep_name(old_ino, "certs"));
    assert_eq!(snapshot(&s.join(&prev.entry)), old, "the previous is the old tree, untouched");
    assert!(leftovers(s.path()).is_empty(), "{:?}", names(s.path()));

    let r = durable::revert(s.fd(), "certs", &Options::default()).unwrap();
    assert_eq!((r.outcome, r.written, r.removed), (Outcome::Replaced, 3, 2));
    assert_eq!(snapshot(&s.join("certs")), old, "names, bytes and modes, the root's 0750 too");
    assert_eq!(std::fs::metadata(s.join("certs")).unwrap().ino(), old_ino, "the very same directory");
    assert_eq!(durable::previous_of(s.fd(), "certs").unwrap(), None, "a revert is not undone by another");
    assert!(keeps(s.path()).is_empty() && leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
}

#[test]
fn revert_without_a_previous_is_a_clear_error_and_changes_nothing() {
    let s = Scratch::new();
    with_old(&s);
    // A plain sync keeps nothing.
    durable::sync_dir(s.fd(), "certs", &new_tree(), &Options::default()).unwrap();
    let before = snapshot(s.path());
    let err = durable::revert(s.fd(), "certs", &Options::default()).unwrap_err();
    assert!(matches!(&err, Error::NoPrevious { path } if path == "certs"), "{err:?}");
    assert_eq!(err.to_string(), "certs: no previous contents are kept; nothing was changed");
    assert_eq!(snapshot(s.path()), before);
    // A missing target with nothing kept: the same error, nothing created.
    let err = durable::revert(s.fd(), "missing", &Options::default()).unwrap_err();
    assert!(matches!(err, Error::NoPrevious { .. }), "{err:?}");
    assert_eq!(snapshot(s.path()), before);
}

#[test]
fn a_second_keep_sync_replaces_the_previous() {
    let s = Scratch::new();
    with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let middle = snapshot(&s.join("certs"));
    let third = tree(&[("tls.crt", b"third", 0o600)]);
    durable::sync_dir(s.fd(), "certs", &third, &keep()).unwrap();
    assert_eq!(keeps(s.path()).len(), 1, "one previous per target: {:?}", names(s.path()));
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    assert_eq!(snapshot(&s.join(&prev.entry)), middle, "the tree the second keep-sync replaced");
    assert!(leftovers(s.path()).is_empty(), "the older previous is removed: {:?}", names(s.path()));
    durable::revert(s.fd(), "certs", &Options::default()).unwrap();
    assert_eq!(snapshot(&s.join("certs")), middle);
}

#[test]
fn a_sync_without_keep_leaves_the_previous_alone() {
    let s = Scratch::new();
    let old = with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    // A probation is open: the next change keeps nothing, and the last good
    // tree stays the one to go back to.
    durable::sync_dir(s.fd(), "certs", &tree(&[("x", b"y", 0o644)]), &Options::default()).unwrap();
    durable::revert(s.fd(), "certs", &Options::default()).unwrap();
    assert_eq!(snapshot(&s.join("certs")), old);
}

#[test]
fn a_keep_sync_of_one_changed_file_swaps_the_whole_tree_and_keeps_the_old_one() {
    let s = Scratch::new();
    let old = with_old(&s);
    // Exactly one file differs: a plain sync would replace just that file.
    let mut one_changed =
        tree(&[("tls.crt", b"renewed", 0o644), ("tls.key", b"old key", 0o600), ("bin/run", b"#!", 0o755)]);
    one_changed.add_dir("empty", 0o700).unwrap();
    let old_ino = std::fs::metadata(s.join("certs")).unwrap().ino();
    durable::sync_dir(s.fd(), "certs", &one_changed, &keep()).unwrap();
    assert_ne!(std::fs::metadata(s.join("certs")).unwrap().ino(), old_ino, "not the one-file path");
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    assert_eq!(snapshot(&s.join(&prev.entry)), old);
}

#[test]
fn an_unchanged_keep_sync_changes_nothing() {
    let s = Scratch::new();
    with_old(&s);
    let before = snapshot(s.path());
    let r = durable::sync_dir(s.fd(), "certs", &old_tree(), &keep()).unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(snapshot(s.path()), before);
}

#[test]
fn a_keep_sync_creating_its_target_keeps_nothing() {
    let s = Scratch::new();
    let r = durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    assert_eq!(r.outcome, Outcome::Created);
    assert!(keeps(s.path()).is_empty() && leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
}

#[test]
fn leftover_recovery_keeps_a_valid_previous_and_removes_a_stale_keep_staging() {
    let s = Scratch::new();
    let old = with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    // A keep-sync's staging left by a crash before its swap: named after
    // the live target's inode, its own inode another.
    let live = std::fs::metadata(s.join("certs")).unwrap().ino();
    let stale = keep_name(live, "certs");
    write_tree(&s.join(&stale), &tree(&[("never", b"swapped in", 0o644)]), 0o755);
    // And one of another target, whose inode number is long gone.
    let gone = keep_name(1, "other");
    std::fs::create_dir(s.join(&gone)).unwrap();
    assert_eq!(keep_of(&stale, "certs"), Some(live));

    let removed = durable::recover(s.fd(), &Options::default()).unwrap();
    let mut want = vec![gone.clone(), stale.clone()];
    want.sort();
    assert_eq!(removed, want);
    assert_eq!(keeps(s.path()), vec![prev.entry.clone()]);
    assert_eq!(snapshot(&s.join(&prev.entry)), old);

    // The next operation's own leftover removal does the same.
    std::fs::create_dir(s.join(&stale)).unwrap();
    durable::write_file(s.fd(), "other-file", b"x", None, &Options::default()).unwrap();
    assert_eq!(keeps(s.path()), vec![prev.entry.clone()]);
    durable::revert(s.fd(), "certs", &Options::default()).unwrap();
    assert_eq!(snapshot(&s.join("certs")), old);
}

#[test]
fn recovery_never_walks_into_a_previous() {
    let s = Scratch::new();
    with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    // Something that looks like a leftover inside the kept tree is the old
    // tree's own: the revert must bring it back as it was.
    let inside = s.join(&prev.entry).join(".durasync-stage-0123456789abcdef");
    std::fs::create_dir(&inside).unwrap();
    let kept = snapshot(&s.join(&prev.entry));
    durable::recover(s.fd(), &Options::default()).unwrap();
    assert_eq!(snapshot(&s.join(&prev.entry)), kept);
}

#[test]
fn keep_write_then_revert_restores_the_old_file_and_its_mode() {
    let s = Scratch::new();
    durable::write_file(s.fd(), "pod.yaml", b"old pod", Some(0o600), &Options::default()).unwrap();
    let old_ino = std::fs::metadata(s.join("pod.yaml")).unwrap().ino();
    let r = durable::write_file(s.fd(), "pod.yaml", b"new pod", Some(0o644), &keep()).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(std::fs::read(s.join("pod.yaml")).unwrap(), b"new pod");
    let prev = durable::previous_of(s.fd(), "pod.yaml").unwrap().unwrap();
    assert_eq!((prev.inode, prev.kind), (old_ino, PreviousKind::File));
    // A second keep-write replaces it.
    durable::write_file(s.fd(), "pod.yaml", b"newer pod", None, &keep()).unwrap();
    assert_eq!(keeps(s.path()).len(), 1, "{:?}", names(s.path()));
    durable::revert(s.fd(), "pod.yaml", &Options::default()).unwrap();
    let snap = snapshot(&s.join("pod.yaml"));
    assert_eq!(snap.unwrap()[""], Entry::File { mode: 0o644, bytes: b"new pod".to_vec() });
    assert!(keeps(s.path()).is_empty() && leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
    // A keep-write of a new file has nothing to keep.
    durable::write_file(s.fd(), "new.yaml", b"x", None, &keep()).unwrap();
    assert!(keeps(s.path()).is_empty());
}

#[test]
fn discard_previous_removes_it_for_good_and_leaves_the_target() {
    let s = Scratch::new();
    with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let target = snapshot(&s.join("certs"));
    assert!(durable::discard_previous(s.fd(), "certs", &Options::default()).unwrap());
    assert!(!durable::discard_previous(s.fd(), "certs", &Options::default()).unwrap(), "nothing left");
    assert_eq!(snapshot(&s.join("certs")), target);
    assert!(keeps(s.path()).is_empty() && leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
    assert!(matches!(durable::revert(s.fd(), "certs", &Options::default()), Err(Error::NoPrevious { .. })));
}

#[test]
fn revert_of_a_removed_target_puts_the_previous_back_in_place() {
    let s = Scratch::new();
    let old = with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    durable::remove(s.fd(), "certs", &Options::default()).unwrap().unwrap();
    let r = durable::revert(s.fd(), "certs", &Options::default()).unwrap();
    assert_eq!(r.outcome, Outcome::Created);
    assert_eq!(snapshot(&s.join("certs")), old);
    assert!(keeps(s.path()).is_empty());
}

#[test]
fn revert_refuses_a_target_of_the_other_kind_or_a_link_and_changes_nothing() {
    let s = Scratch::new();
    with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    std::fs::rename(s.join("certs"), s.join("moved")).unwrap();
    std::fs::write(s.join("certs"), b"a file now").unwrap();
    let before = snapshot(s.path());
    let err = durable::revert(s.fd(), "certs", &Options::default()).unwrap_err();
    assert!(matches!(err, Error::NotADirectory { .. }), "{err:?}");
    assert_eq!(snapshot(s.path()), before);
    std::fs::remove_file(s.join("certs")).unwrap();
    std::os::unix::fs::symlink("moved", s.join("certs")).unwrap();
    let before = snapshot(s.path());
    let err = durable::revert(s.fd(), "certs", &Options::default()).unwrap_err();
    assert!(matches!(err, Error::Symlink { .. }), "{err:?}");
    assert_eq!(snapshot(s.path()), before);
    assert_eq!(durable::previous_of(s.fd(), "certs").unwrap().unwrap(), prev);
}

#[test]
fn a_failed_revert_exchange_leaves_the_target_and_its_previous() {
    let s = Scratch::new();
    with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let before = snapshot(s.path());
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    let fail = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.kind == "exchange");
    let err = durable::revert(s.fd(), "certs", &Options { probe: &fail, ..Options::default() }).unwrap_err();
    assert_eq!(fail.hits(), 1);
    assert!(!err.is_committed(), "{err}");
    assert_eq!(snapshot(s.path()), before, "target, previous and marker as they were");
    assert_eq!(durable::previous_of(s.fd(), "certs").unwrap(), Some(prev));
}

#[test]
fn a_failed_commit_fsync_of_a_revert_is_committed_with_durability_unknown_and_the_next_sync_rebuilds() {
    let s = Scratch::new();
    let old = with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let fail = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.is("fsync-dir", "."));
    let err = durable::revert(s.fd(), "certs", &Options { probe: &fail, ..Options::default() }).unwrap_err();
    assert!(matches!(err, Error::Committed { durable: false, .. }), "{err:?}");
    assert_eq!(snapshot(&s.join("certs")), old, "the revert is live");
    // The replaced tree waits (stale) until a later commit: then it goes.
    assert_eq!(keeps(s.path()).len(), 1);
    assert_eq!(durable::previous_of(s.fd(), "certs").unwrap(), None);
    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "certs", &old_tree(), &Options { probe: &rec, ..Options::default() }).unwrap();
    assert!(rec.count("exchange") == 1, "a marked target is rebuilt, not answered unchanged");
    assert!(keeps(s.path()).is_empty() && leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
}

#[test]
fn when_the_fsync_retiring_the_older_previous_fails_the_target_is_unchanged() {
    let s = Scratch::new();
    with_old(&s);
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    let target = snapshot(&s.join("certs"));
    let fail = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.is("fsync-dir", "."));
    let opts = Options { probe: &fail, ..keep() };
    let err = durable::sync_dir(s.fd(), "certs", &tree(&[("third", b"3", 0o644)]), &opts).unwrap_err();
    assert_eq!(fail.hits(), 1, "the retire fsync, before any swap");
    assert!(!err.is_committed(), "{err}");
    assert_eq!(snapshot(&s.join("certs")), target);
    // The older previous was taken away (a keep-sync replaces it); its
    // trash and the staging are leftovers the next operation removes.
    assert_eq!(durable::previous_of(s.fd(), "certs").unwrap(), None);
    durable::recover(s.fd(), &Options::default()).unwrap();
    assert!(keeps(s.path()).is_empty() && leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
}

#[test]
fn the_cli_keeps_with_keep_previous_and_reverts_with_to_previous_and_rollback() {
    let s = Scratch::new();
    write_tree(&s.join("one"), &tree(&[("a", b"1", 0o644), ("b", b"2", 0o600)]), 0o755);
    write_tree(&s.join("two"), &tree(&[("a", b"9", 0o644)]), 0o755);
    let run = |args: &[&str]| ok_stdout(&durasync(args, s.path()));
    run(&["sync", "target", "--from", "one"]);
    let one = snapshot(&s.join("target"));
    assert_eq!(
        run(&["sync", "target", "--from", "two", "--keep-previous"]),
        "replaced target: 1 written, 1 removed\n"
    );
    assert_eq!(run(&["sync", "--to-previous", "target"]), "replaced target: 2 written, 1 removed\n");
    assert_eq!(snapshot(&s.join("target")), one);
    // Nothing kept any more: exit status 3, the reason named, nothing changed.
    let before = snapshot(s.path());
    let out = durasync(&["rollback", "target"], s.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("target: no previous contents are kept"), "{}", stderr(&out));
    assert_eq!(snapshot(s.path()), before);
    // rollback, --json, and a file.
    run(&["sync", "target", "--from", "two", "--keep-previous"]);
    let v: serde_json::Value = serde_json::from_str(&run(&["rollback", "target", "--json"])).unwrap();
    assert_eq!(v["outcome"], "replaced");
    assert_eq!(snapshot(&s.join("target")), one);
    std::fs::write(s.join("src"), b"v1").unwrap();
    run(&["write", "f", "--from", "src"]);
    std::fs::write(s.join("src"), b"v2").unwrap();
    run(&["write", "f", "--from", "src", "--keep-previous"]);
    run(&["rollback", "f"]);
    assert_eq!(std::fs::read(s.join("f")).unwrap(), b"v1");
    // --to-previous takes no source.
    let out = durasync(&["sync", "--to-previous", "target", "--from", "one"], s.path());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn after_a_keep_sync_whose_commit_fsync_failed_a_retry_without_keep_leaves_the_old_tree_as_the_previous() {
    let s = Scratch::new();
    let old = with_old(&s);
    let fail = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.is("fsync-dir", "."));
    let err =
        durable::sync_dir(s.fd(), "certs", &new_tree(), &Options { probe: &fail, ..keep() }).unwrap_err();
    assert!(matches!(err, Error::Committed { durable: false, .. }), "{err:?}");
    // The swap happened: the old tree is already the previous.
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    assert_eq!(snapshot(&s.join(&prev.entry)), old);
    // The retry (the target is marked: rebuilt from fresh inodes) keeps
    // nothing, so the previous stays the last good tree.
    let r = durable::sync_dir(s.fd(), "certs", &new_tree(), &Options::default()).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced, "a marked target is rebuilt, not answered unchanged");
    assert_eq!(contents(&snapshot(&s.join("certs"))), contents(&expected(&new_tree(), 0o750)));
    assert_eq!(keeps(s.path()), vec![prev.entry.clone()], "{:?}", names(s.path()));
    assert!(leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
    durable::revert(s.fd(), "certs", &Options::default()).unwrap();
    assert_eq!(snapshot(&s.join("certs")), old);
}

#[test]
fn a_keep_sync_retried_after_a_failed_commit_keeps_one_previous_the_tree_it_replaced() {
    let s = Scratch::new();
    with_old(&s);
    let fail = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.is("fsync-dir", "."));
    durable::sync_dir(s.fd(), "certs", &new_tree(), &Options { probe: &fail, ..keep() }).unwrap_err();
    let live = snapshot(&s.join("certs"));
    // A retry that keeps: the tree the failed change left live is "current",
    // so it becomes the previous (the caller asked to keep the current tree).
    durable::sync_dir(s.fd(), "certs", &new_tree(), &keep()).unwrap();
    assert_eq!(keeps(s.path()).len(), 1, "{:?}", names(s.path()));
    let prev = durable::previous_of(s.fd(), "certs").unwrap().unwrap();
    assert_eq!(snapshot(&s.join(&prev.entry)), live);
    assert!(leftovers(s.path()).is_empty(), "{:?}", names(s.path()));
}
