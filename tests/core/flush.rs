//! The flush strategy (`host/src/durable/flush.rs`): with `syncfs` a sync
//! writes its staging tree with no per-file fsync and makes it durable with
//! one `syncfs` before the swap, then commits with the parent's fsync; a
//! failed `syncfs` changes nothing and the retry writes fresh inodes;
//! `auto` never uses `syncfs` for a small batch; the binary's `--flush`
//! reaches the kernel as exactly that (strace).

use std::collections::BTreeMap;

use durasync::durable::{self, Error, Flush, Options, Outcome};
use rustix::io::Errno;

use crate::common::*;

fn with_flush(probe: &dyn durable::Probe, flush: Flush) -> Options<'_> {
    Options { flush, ..opts(probe, 8) }
}

#[test]
fn a_syncfs_flush_replaces_every_staging_fsync_by_one_syncfs_before_the_swap() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &many_files("old", 5, 10, 0), 0o755);
    let mut new = many_files("f", 40, 100, 1);
    new.add_file("a/b/deep", b"deep".to_vec(), 0o600).unwrap();
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &with_flush(&rec, Flush::Syncfs)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(rec.count("fsync-file"), 0, "no per-file fsync");
    assert_eq!(rec.count("syncfs"), 1, "one syncfs for the whole tree");
    let keys = rec.keys();
    let syncfs = keys.iter().position(|k| k.kind == "syncfs").unwrap();
    assert_eq!(keys[syncfs].path, "<stage>", "through the staging root's fd");
    let swap = keys.iter().position(|k| k.kind == "exchange").unwrap();
    let last_write = keys
        .iter()
        .rposition(|k| {
            matches!(k.kind, "write" | "chmod" | "mkdir" | "create") && k.path.starts_with("<stage>")
        })
        .unwrap();
    // Writes and modes of the staging tree, then the syncfs, then the swap;
    // between them only the marker.
    assert!(last_write < syncfs && syncfs < swap, "{keys:?}");
    let dirs: Vec<String> = keys.iter().filter(|k| k.kind == "fsync-dir").map(|k| k.path.clone()).collect();
    assert_eq!(dirs, ["."], "the commit fsync of the parent, after the swap, and nothing else");
    assert!(keys.iter().position(|k| k.is("fsync-dir", ".")).unwrap() > swap);
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));

    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &with_flush(&rec, Flush::Syncfs)).unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(rec.count("syncfs") + rec.count("fsync-file") + rec.count("fsync-dir"), 0);
}

#[test]
fn a_failed_syncfs_changes_nothing_and_the_retry_writes_fresh_inodes() {
    let s = Scratch::new();
    let old = many_files("old", 5, 10, 0);
    write_tree(&s.join("target"), &old, 0o755);
    let new = many_files("f", 40, 100, 1);
    let probe = FailWhen::new(Errno::IO, |k: &Key| k.kind == "syncfs");
    let err = durable::sync_dir(s.fd(), "target", &new, &with_flush(&probe, Flush::Syncfs)).unwrap_err();
    assert_eq!(probe.hits(), 1);
    assert!(matches!(err, Error::Io { step: durable::Step::Syncfs, .. }), "{err:?}");
    assert!(!err.is_committed(), "before the swap: nothing changed");
    assert!(err.to_string().contains("syncfs"), "{err}");
    assert_eq!(snapshot(&s.join("target")), expected(&old, 0o755), "the target is untouched");
    assert_eq!(names(s.path()), ["target".to_owned()].into(), "the staging tree is discarded");

    // The retry stages everything again into new inodes (none of the failed
    // batch's is reused) and ends with the new tree.
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &with_flush(&rec, Flush::Syncfs)).unwrap();
    assert_eq!((r.outcome, r.written), (Outcome::Replaced, 40));
    assert_eq!(rec.staged_creates(), 40);
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
}

#[test]
fn auto_never_uses_syncfs_for_a_batch_below_the_threshold() {
    let s = Scratch::new();
    let new = many_files("f", durable::flush::SYNCFS_MIN_FILES - 1, 100, 1);
    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "target", &new, &with_flush(&rec, Flush::Auto)).unwrap();
    assert_eq!(rec.count("syncfs"), 0);
    assert_eq!(rec.count("fsync-file"), new.file_count());
}

#[test]
fn auto_flushes_a_large_batch_with_exactly_one_of_the_two_primitives() {
    // Which one depends on the file system and its dirty data; either way
    // the sequence is one of the two complete ones.
    let s = Scratch::new();
    let new = many_files("f", 100, 100, 1);
    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "target", &new, &with_flush(&rec, Flush::Auto)).unwrap();
    match rec.count("syncfs") {
        0 => assert_eq!((rec.count("fsync-file"), rec.count("fsync-dir")), (100, 2)),
        1 => assert_eq!((rec.count("fsync-file"), rec.count("fsync-dir")), (0, 1)),
        n => panic!("{n} syncfs calls"),
    }
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
}

#[test]
fn the_binary_with_flush_syncfs_issues_one_syncfs_and_the_commit_fsync() {
    let s = Scratch::new();
    let traces = Scratch::new();
    write_tree(&s.join("target"), &many_files("f", 100, 4096, 7), 0o755);
    let new = many_files("f", 100, 4096, 99);
    write_tree(&s.join("src"), &new, 0o755);
    let parent = std::fs::canonicalize(s.path()).unwrap();
    let args = ["sync", "target", "--from", "src", "--flush", "syncfs"];
    let Some((stdout, syncs)) = crate::fsync_count::traced(&args, s.path(), traces.path()) else {
        return;
    };
    assert_eq!(stdout, "replaced target: 100 written, 0 removed\n");
    let fsyncs: BTreeMap<_, _> = syncs.fsync.iter().map(|(p, n)| (p.clone(), *n)).collect();
    assert_eq!(fsyncs, [(parent.clone(), 1)].into(), "only the commit fsync of the parent");
    assert_eq!(syncs.other.len(), 1, "{:?}", syncs.other);
    let call = &syncs.other[0];
    assert!(
        call.starts_with("syncfs(") && call.contains("/.durasync-stage-") && call.ends_with("= 0"),
        "{call}"
    );
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
}

#[test]
fn a_bad_flush_setting_is_refused_by_name() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    let out = std::process::Command::new(crate::support::durasync())
        .args(["sync", "target", "--from", "src", "--flush", "fdatasync"])
        .current_dir(s.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--flush") && err.contains("fdatasync"), "{err}");
    assert!(!s.join("target").exists());
}
