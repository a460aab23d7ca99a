//! Cancellation (a deadline or a flag, e.g. a plugin's timeout): checked
//! between the staged file writes and before the swap, never after it. A
//! cancelled operation changes nothing and leaves nothing behind.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use durasync::durable::{self, Cancel, Error, NoProbe, Options, Outcome, Probe, SysOp, Tree};

use crate::common::*;

/// Sets `flag` once `after` operations matching `pred` have completed.
struct SetFlagAfter<'a, F> {
    flag: &'a AtomicBool,
    pred: F,
    after: usize,
    seen: AtomicUsize,
}

impl<F: Fn(&Key) -> bool + Sync> Probe for SetFlagAfter<'_, F> {
    fn after(&self, op: &SysOp<'_>) {
        if (self.pred)(&key(op)) && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            self.flag.store(true, Ordering::SeqCst);
        }
    }

    fn before(&self, _op: &SysOp<'_>) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_cancel_during_staging_leaves_the_target_unchanged_and_nothing_behind() {
    let s = Scratch::new();
    let old = many_files("old", 5, 10, 0);
    write_tree(&s.join("target"), &old, 0o755);
    let before = snapshot(&s.join("target"));
    let flag = AtomicBool::new(false);
    let probe = SetFlagAfter {
        flag: &flag,
        pred: |k: &Key| k.kind == "fsync-file",
        after: 3,
        seen: AtomicUsize::new(0),
    };
    let o = Options { probe: &probe, threads: 1, cancel: Cancel::on(&flag), ..Options::default() };
    let err = durable::sync_dir(s.fd(), "target", &many_files("new", 20, 10, 1), &o).unwrap_err();
    assert!(matches!(&err, Error::Cancelled { path } if path == "target"), "{err:?}");
    assert!(!err.is_committed());
    assert!(err.to_string().contains("nothing was changed"), "{err}");
    assert_eq!(probe.seen.load(Ordering::SeqCst), 3, "stopped right after the third file");
    assert_eq!(snapshot(&s.join("target")), before, "the target is unchanged");
    assert_eq!(names(s.path()), ["target".to_owned()].into(), "the staging is gone, no marker");
    // The next operation runs normally.
    let r = durable::sync_dir(s.fd(), "target", &many_files("new", 20, 10, 1), &opts(&NoProbe, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn a_passed_deadline_cancels_a_write_and_a_removal_before_they_change_anything() {
    let s = Scratch::new();
    std::fs::write(s.join("f"), b"old").unwrap();
    std::fs::create_dir(s.join("d")).unwrap();
    let o = Options { cancel: Cancel::at(Instant::now()), ..Options::default() };
    let err = durable::write_file(s.fd(), "f", b"new", None, &o).unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    assert_eq!(std::fs::read(s.join("f")).unwrap(), b"old");
    let err = durable::remove(s.fd(), "d", &o).unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    assert!(s.join("d").is_dir());
    assert_eq!(names(s.path()), ["d".to_owned(), "f".to_owned()].into(), "nothing left behind");
    // A deadline in the future changes nothing about a normal run.
    let o = Options { cancel: Cancel::at(Instant::now() + Duration::from_secs(3600)), ..Options::default() };
    durable::write_file(s.fd(), "f", b"new", None, &o).unwrap();
    assert_eq!(std::fs::read(s.join("f")).unwrap(), b"new");
}

#[test]
fn a_cancel_after_the_swap_only_cuts_the_cleanup_short_and_the_change_commits() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &many_files("old", 5, 10, 0), 0o755);
    let flag = AtomicBool::new(false);
    let probe = SetFlagAfter {
        flag: &flag,
        pred: |k: &Key| k.kind == "exchange",
        after: 1,
        seen: AtomicUsize::new(0),
    };
    let o = Options { probe: &probe, threads: 1, cancel: Cancel::on(&flag), ..Options::default() };
    let new = many_files("new", 5, 10, 1);
    let r = durable::sync_dir(s.fd(), "target", &new, &o).unwrap();
    assert!(flag.load(Ordering::SeqCst), "the flag was set at the swap");
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    // The old tree's removal is off the durability path: at the deadline it
    // stops, and what is left is an ordinary leftover.
    assert_eq!(leftovers(s.path()).len(), 1, "the old tree is left for recovery");
    durable::recover(s.fd(), &Options::default()).unwrap();
    assert!(leftovers(s.path()).is_empty());
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
}

#[test]
fn a_removal_cancelled_after_its_commit_succeeds_and_leaves_the_rest_to_recovery() {
    let s = Scratch::new();
    write_tree(&s.join("d"), &many_files("f", 2000, 10, 0), 0o755);
    let flag = AtomicBool::new(false);
    // Set once the commit fsync returned and 100 files of the trash are gone.
    let probe = SetFlagAfter {
        flag: &flag,
        pred: |k: &Key| k.kind == "unlink",
        after: 100,
        seen: AtomicUsize::new(0),
    };
    let o = Options { probe: &probe, cancel: Cancel::on(&flag), ..Options::default() };
    let report = durable::remove(s.fd(), "d", &o).unwrap().expect("it was there");
    assert!(flag.load(Ordering::SeqCst));
    assert!(!s.join("d").exists(), "the removal committed");
    assert!(report.removed < 2000, "the cleanup stopped early: {}", report.removed);
    assert_eq!(leftovers(s.path()).len(), 1, "the rest of the trash is a leftover");
    durable::recover(s.fd(), &Options::default()).unwrap();
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn a_one_file_change_cancelled_before_its_rename_changes_nothing_and_after_it_commits() {
    let s = Scratch::new();
    let old = many_files("f", 50, 10, 0);
    write_tree(&s.join("target"), &old, 0o755);
    let before = snapshot(&s.join("target"));
    let mut new = Tree::new();
    for (path, node) in old.iter() {
        if let durable::Node::File { contents, mode } = node {
            let contents = if path == "f0010" { b"rotated".to_vec() } else { contents.clone() };
            new.add_file(path, contents, *mode).unwrap();
        }
    }
    // Cancelled once the temporary file is fsynced: the last check, before the rename.
    let flag = AtomicBool::new(false);
    let probe = SetFlagAfter {
        flag: &flag,
        pred: |k: &Key| k.kind == "fsync-file",
        after: 1,
        seen: AtomicUsize::new(0),
    };
    let o = Options { probe: &probe, threads: 1, cancel: Cancel::on(&flag), ..Options::default() };
    let err = durable::sync_dir(s.fd(), "target", &new, &o).unwrap_err();
    assert!(matches!(&err, Error::Cancelled { path } if path == "target"), "{err:?}");
    assert_eq!(snapshot(&s.join("target")), before, "the target is unchanged");
    assert_eq!(names(s.path()), ["target".to_owned()].into(), "the temporary file is gone, no marker");

    // Cancelled at the rename: ignored, the change commits.
    let flag = AtomicBool::new(false);
    let probe =
        SetFlagAfter { flag: &flag, pred: |k: &Key| k.kind == "rename", after: 1, seen: AtomicUsize::new(0) };
    let o = Options { probe: &probe, threads: 1, cancel: Cancel::on(&flag), ..Options::default() };
    let r = durable::sync_dir(s.fd(), "target", &new, &o).unwrap();
    assert!(flag.load(Ordering::SeqCst), "the flag was set at the rename");
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!((r.written, r.removed), (50, 0));
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    assert!(leftovers(s.path()).is_empty());
}
