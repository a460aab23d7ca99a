//! A retry after "committed, durability unknown" (the commit fsync failed)
//! is really durable: after a failed fsync Linux may drop the dirty pages
//! and report the next fsync as a success, so the retry must not trust what
//! it reads back. It rewrites everything into fresh inodes and runs the
//! full sequence, in another process too; a clean repeat after it does
//! nothing again.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use durasync::durable::{self, Error, NoProbe, Outcome};
use rustix::io::Errno;

use crate::common::*;

fn fail_commit() -> FailWhen<impl Fn(&Key) -> bool + Sync> {
    FailWhen::new(Errno::IO, |k: &Key| k.is("fsync-dir", "."))
}

#[test]
fn a_sync_retried_after_a_failed_commit_fsync_rewrites_every_file_into_fresh_inodes() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &many_files("old", 3, 10, 0), 0o755);
    let mut new = many_files("f", 20, 100, 1);
    new.add_file("sub/g", b"nested".to_vec(), 0o600).unwrap();

    let probe = fail_commit();
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&probe, 4)).unwrap_err();
    assert!(matches!(err, Error::Committed { durable: false, .. }), "{err:?}");
    assert_eq!(probe.hits(), 1);
    let live = inodes(&s.join("target"));

    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &opts(&rec, 4)).unwrap();
    assert_eq!((r.outcome, r.written), (Outcome::Replaced, 21), "not `unchanged`");
    assert_eq!(rec.count("fsync-file"), 21, "every file fsynced again");
    assert_eq!(rec.count("fsync-dir"), 3, "sub, the staging root and the parent");
    let fresh = inodes(&s.join("target"));
    assert_eq!(fresh.len(), live.len());
    for (path, ino) in &fresh {
        assert_ne!(live[path].0, ino.0, "{path} is a fresh inode");
    }
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    assert_eq!(names(s.path()), ["target".to_owned()].into(), "no leftover, no marker");

    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &opts(&rec, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged, "a clean repeat trusts the target again");
    assert_eq!(rec.count("fsync-file") + rec.count("fsync-dir"), 0);
}

#[test]
fn a_write_retried_after_a_failed_commit_fsync_writes_a_fresh_inode() {
    let s = Scratch::new();
    std::fs::write(s.join("pod.yaml"), b"old").unwrap();
    let probe = fail_commit();
    let err = durable::write_file(s.fd(), "pod.yaml", b"new", None, &opts(&probe, 1)).unwrap_err();
    assert!(matches!(err, Error::Committed { durable: false, .. }), "{err:?}");
    let live = std::fs::metadata(s.join("pod.yaml")).unwrap().ino();

    let rec = Recorder::default();
    let r = durable::write_file(s.fd(), "pod.yaml", b"new", None, &opts(&rec, 1)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced, "not `unchanged`");
    assert_eq!((rec.count("fsync-file"), rec.count("fsync-dir")), (1, 1));
    assert_ne!(std::fs::metadata(s.join("pod.yaml")).unwrap().ino(), live, "a fresh inode");
    assert_eq!(names(s.path()), ["pod.yaml".to_owned()].into(), "no leftover, no marker");

    let rec = Recorder::default();
    let r = durable::write_file(s.fd(), "pod.yaml", b"new", None, &opts(&rec, 1)).unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(rec.count("fsync-file") + rec.count("fsync-dir"), 0);
}

#[test]
fn after_a_failed_commit_leftovers_are_removed_only_after_the_next_commit() {
    // The failed sync's old tree sits at a leftover name, but the failed
    // commit may never reach the disk, where it is still the target: no
    // operation in that directory deletes it before its own commit fsync.
    let s = Scratch::new();
    write_tree(&s.join("target"), &many_files("old", 3, 10, 0), 0o755);
    let probe = fail_commit();
    durable::sync_dir(s.fd(), "target", &many_files("f", 3, 10, 1), &opts(&probe, 1)).unwrap_err();
    assert_eq!(leftovers(s.path()).len(), 1, "the old tree waits at a leftover name");

    let rec = Recorder::default();
    durable::write_file(s.fd(), "other", b"x", None, &opts(&rec, 1)).unwrap();
    let keys = rec.keys();
    let commit = keys.iter().position(|k| k.is("fsync-dir", ".")).expect("a commit fsync");
    let first_removal = keys
        .iter()
        .position(|k| (k.kind == "unlink" || k.kind == "rmdir") && k.path.starts_with("<stage>"))
        .expect("the leftover is removed");
    assert!(first_removal > commit, "removed only after the commit: {keys:#?}");
    assert!(leftovers(s.path()).is_empty());
    // The target itself is still marked: its own retry rewrites it.
    let r = durable::sync_dir(s.fd(), "target", &many_files("f", 3, 10, 1), &opts(&NoProbe, 1)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
}

/// Run `durasync args` in `cwd` under strace failing every fsync of `dir`
/// with EIO; `None` when strace cannot run here.
fn with_failing_fsync_of(dir: &Path, args: &[&str], cwd: &Path) -> Option<std::process::Output> {
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync", "-e", "inject=fsync:error=EIO", "-P"])
        .arg(dir)
        .arg(crate::support::durasync())
        .args(args)
        .current_dir(cwd)
        .env_remove("DURASYNC_LOG")
        .output();
    match out {
        Ok(out) if stderr(&out).contains("ptrace") => {
            cannot_check(&format!("strace cannot trace here: {}", stderr(&out)));
            None
        }
        Ok(out) => Some(out),
        Err(e) => {
            cannot_check(&format!("cannot run strace ({e}); install strace"));
            None
        }
    }
}

#[test]
fn the_cli_retry_after_an_injected_eio_on_the_commit_fsync_runs_the_full_sequence() {
    let s = Scratch::new();
    let traces = Scratch::new();
    write_tree(&s.join("target"), &many_files("old", 3, 10, 0), 0o755);
    let new = many_files("f", 10, 100, 1);
    write_tree(&s.join("src"), &new, 0o755);
    let parent = std::fs::canonicalize(s.path()).unwrap();

    let Some(out) = with_failing_fsync_of(&parent, &["sync", "target", "--from", "src"], s.path()) else {
        return;
    };
    assert_eq!(out.status.code(), Some(4), "committed, durability unknown: {}", stderr(&out));
    assert!(stderr(&out).contains("durability unknown"), "{}", stderr(&out));

    // A new process retries: 10 file fsyncs, the staging root, the parent.
    let (stdout, syncs) =
        crate::fsync_count::traced(&["sync", "target", "--from", "src"], s.path(), traces.path()).unwrap();
    assert_eq!(stdout, "replaced target: 10 written, 0 removed\n");
    assert_eq!(syncs.fsync.values().sum::<usize>(), 12, "{:?}", syncs.fsync);
    assert_eq!(syncs.fsync.get(&parent), Some(&1), "the commit fsync");

    // Then a clean repeat issues none.
    let (stdout, syncs) =
        crate::fsync_count::traced(&["sync", "target", "--from", "src"], s.path(), traces.path()).unwrap();
    assert_eq!(stdout, "unchanged target: 0 written, 0 removed\n");
    assert!(syncs.fsync.is_empty(), "{:?}", syncs.fsync);
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    assert!(leftovers(s.path()).is_empty());
}
