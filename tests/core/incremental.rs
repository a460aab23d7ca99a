//! Incremental sync: unchanged files of the target are carried into the
//! new tree as the same inode (a hard link into staging, no rewrite and no
//! fsync); new, changed and mode-only changed files get fresh inodes; an
//! inode also reachable from outside the target is never carried. One
//! changed file takes the fast path: only that file is replaced, no staging.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;

use durasync::durable::{self, Outcome, Probe, SysOp, Tree};

use crate::common::*;

fn old_tree() -> Tree {
    tree(&[
        ("same", b"same bytes", 0o644),
        ("sub/deep", b"deep same", 0o600),
        ("changed", b"old bytes", 0o644),
        ("mode", b"mode only", 0o644),
        ("gone", b"removed", 0o644),
    ])
}

fn new_tree() -> Tree {
    tree(&[
        ("same", b"same bytes", 0o644),
        ("sub/deep", b"deep same", 0o600),
        ("changed", b"new bytes", 0o644),
        ("mode", b"mode only", 0o600),
        ("added", b"added", 0o644),
    ])
}

#[test]
fn unchanged_files_are_carried_as_the_same_inode_and_the_others_get_fresh_ones() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &old_tree(), 0o755);
    let before = inodes(&s.join("target"));
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&rec, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(snapshot(&s.join("target")), expected(&new_tree(), 0o755));
    let after = inodes(&s.join("target"));
    for carried in ["same", "sub/deep"] {
        assert_eq!(after[carried].0, before[carried].0, "{carried} is carried as the same inode");
    }
    for fresh in ["changed", "mode"] {
        assert_ne!(after[fresh].0, before[fresh].0, "{fresh} is a fresh inode");
    }
    // The old tree is gone: every inode of the target has one name again.
    assert!(after.values().all(|(_, nlink)| *nlink == 1), "{after:?}");
    // Files are staged from several threads: the links come in any order.
    let mut links: Vec<String> =
        rec.keys().into_iter().filter(|k| k.kind == "link").map(|k| k.path).collect();
    links.sort();
    assert_eq!(links, ["target/same -> <stage>/same", "target/sub/deep -> <stage>/sub/deep"]);
    assert_eq!(rec.count("fsync-file"), 3, "changed, mode and added; no carried file");
    assert_eq!(rec.count("fsync-dir"), 3, "sub, the staging root and the parent");
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn a_file_hard_linked_from_outside_the_target_is_rewritten_not_carried() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &old_tree(), 0o755);
    std::fs::hard_link(s.join("target/same"), s.join("outside")).unwrap();
    // Two names inside the target for one inode: not carried either.
    write_tree(&s.join("t2"), &tree(&[("a", b"twin", 0o644), ("x", b"x", 0o644)]), 0o755);
    std::fs::remove_file(s.join("t2/a")).unwrap();
    std::fs::write(s.join("t2/a"), b"twin").unwrap();
    std::fs::hard_link(s.join("t2/a"), s.join("t2/b")).unwrap();
    let before = (inodes(&s.join("target")), inodes(&s.join("t2")));

    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&rec, 2)).unwrap();
    let after = inodes(&s.join("target"));
    assert_ne!(after["same"].0, before.0["same"].0, "an inode with another name outside is rewritten");
    assert_eq!(after["sub/deep"].0, before.0["sub/deep"].0, "the others are still carried");
    let outside = std::fs::symlink_metadata(s.join("outside")).unwrap();
    assert_eq!((outside.ino(), outside.nlink()), (before.0["same"].0, 1), "the outside name keeps its inode");
    assert_eq!(std::fs::read(s.join("outside")).unwrap(), b"same bytes");
    assert!(!rec.keys().iter().any(|k| k.kind == "link" && k.path.starts_with("target/same")));

    let twins = tree(&[("a", b"twin", 0o644), ("b", b"twin", 0o644), ("x", b"x2", 0o644)]);
    durable::sync_dir(s.fd(), "t2", &twins, &opts(&rec, 2)).unwrap();
    let after = inodes(&s.join("t2"));
    assert_ne!(after["a"].0, after["b"].0, "two names of one inode become two inodes");
    assert_ne!(after["a"].0, before.1["a"].0);
    assert_eq!(snapshot(&s.join("t2")), expected(&twins, 0o755));
}

/// Before the first link of `victim` (a path relative to the scratch dir),
/// replaces it: with another file of the same bytes, or with a symlink.
struct Swapper {
    root: PathBuf,
    victims: Mutex<Vec<(String, bool)>>,
}

impl Probe for Swapper {
    fn before(&self, op: &SysOp<'_>) -> io::Result<()> {
        if let SysOp::Link { from, .. } = *op {
            let mut victims = self.victims.lock().unwrap();
            if let Some(i) = victims.iter().position(|(v, _)| v == from) {
                let (victim, symlink) = victims.remove(i);
                let path = self.root.join(&victim);
                let tmp = self.root.join("intruder");
                if symlink {
                    std::os::unix::fs::symlink("/etc/passwd", &tmp)?;
                } else {
                    std::fs::write(&tmp, b"intruder")?;
                }
                std::fs::rename(&tmp, &path)?;
            }
        }
        Ok(())
    }
}

#[test]
fn a_file_replaced_between_the_comparison_and_its_link_is_written_afresh() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &old_tree(), 0o755);
    let probe = Swapper {
        root: s.path().to_owned(),
        victims: Mutex::new(vec![("target/same".into(), false), ("target/sub/deep".into(), true)]),
    };
    let r = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&probe, 1)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert!(probe.victims.lock().unwrap().is_empty(), "both replacements happened");
    // Neither the intruder's bytes nor the symlink: the requested tree.
    assert_eq!(snapshot(&s.join("target")), expected(&new_tree(), 0o755));
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn a_partial_change_then_a_repeat_is_unchanged_with_no_fsync() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &many_files("f", 200, 512, 3), 0o755);
    let mut changed = Tree::new();
    for (path, node) in many_files("f", 200, 512, 3).iter() {
        if let durable::Node::File { contents, mode } = node {
            let contents = if path == "f0007" { vec![9; 700] } else { contents.clone() };
            changed.add_file(path, contents, *mode).unwrap();
        }
    }
    let before = inodes(&s.join("target"));
    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "target", &changed, &opts(&rec, 4)).unwrap();
    // One file changed: the fast path, nothing linked, the new file and its directory fsynced.
    assert_eq!((rec.count("link"), rec.count("fsync-file"), rec.count("fsync-dir")), (0, 1, 1));
    assert_eq!(snapshot(&s.join("target")), expected(&changed, 0o755));
    let after = inodes(&s.join("target"));
    for (path, (ino, nlink)) in &after {
        assert_eq!(*nlink, 1, "{path}");
        assert_eq!(*ino == before[path].0, path != "f0007", "{path}: only the changed file is a fresh inode");
    }
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &changed, &opts(&rec, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(rec.keys().len(), 1, "only the lock: {:?}", rec.keys());
}

#[test]
fn one_changed_file_replaces_just_that_file_and_an_empty_directory_in_its_place_takes_the_full_path() {
    let s = Scratch::new();
    let old = tree(&[("a", b"a", 0o644), ("sub/key", b"old key", 0o600), ("sub/crt", b"crt", 0o644)]);
    write_tree(&s.join("target"), &old, 0o750);
    let before = inodes(&s.join("target"));
    let new = tree(&[("a", b"a", 0o644), ("sub/key", b"new key", 0o600), ("sub/crt", b"crt", 0o644)]);
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &opts(&rec, 4)).unwrap();
    assert_eq!((r.outcome, r.written, r.removed), (Outcome::Replaced, 3, 0));
    let kinds: Vec<String> = rec.keys().into_iter().map(|k| format!("{} {}", k.kind, k.path)).collect();
    assert!(kinds.contains(&"rename <tmp> -> target/sub/key".to_owned()), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k.contains("<stage>")), "no staging tree: {kinds:?}");
    assert_eq!((rec.count("fsync-file"), rec.count("fsync-dir")), (1, 1));
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o750), "the target keeps its own mode");
    let after = inodes(&s.join("target"));
    assert_eq!(after["a"], before["a"]);
    assert_eq!(after["sub/crt"], before["sub/crt"]);
    assert_ne!(after["sub/key"].0, before["sub/key"].0);
    assert!(leftovers(s.path()).is_empty());

    // An empty directory where the new tree wants a file is the only
    // difference too, but a rename cannot replace it: the full sequence runs.
    std::fs::create_dir(s.join("target/b")).unwrap();
    let with_b = tree(&[
        ("a", b"a", 0o644),
        ("b", b"now a file", 0o644),
        ("sub/key", b"new key", 0o600),
        ("sub/crt", b"crt", 0o644),
    ]);
    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "target", &with_b, &opts(&rec, 4)).unwrap();
    assert_eq!(rec.count("exchange"), 1, "the full sequence");
    assert_eq!(snapshot(&s.join("target")), expected(&with_b, 0o750));
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn a_file_the_kernel_refuses_to_link_is_written_afresh_and_the_sync_succeeds() {
    // EXDEV: a mount inside the target; EPERM: an immutable or append-only
    // file; EMLINK: a file at its link limit. Each refusal of one carry must
    // cost a rewrite of that file, never the sync.
    for errno in [rustix::io::Errno::XDEV, rustix::io::Errno::PERM, rustix::io::Errno::MLINK] {
        let s = Scratch::new();
        write_tree(&s.join("target"), &old_tree(), 0o755);
        let before = inodes(&s.join("target"));
        let probe = FailWhen::new(errno, |k: &Key| k.kind == "link" && k.path.starts_with("target/same"));
        let options = durable::Options { probe: &probe, ..durable::Options::default() };
        let r = durable::sync_dir(s.fd(), "target", &new_tree(), &options)
            .unwrap_or_else(|e| panic!("{errno:?}: {e}"));
        assert_eq!(probe.hits(), 1, "{errno:?}: the link was refused once");
        assert_eq!(r.outcome, Outcome::Replaced);
        assert_eq!(snapshot(&s.join("target")), expected(&new_tree(), 0o755), "{errno:?}");
        let after = inodes(&s.join("target"));
        assert_ne!(after["same"].0, before["same"].0, "{errno:?}: the refused file is a fresh inode");
        assert_eq!(after["sub/deep"].0, before["sub/deep"].0, "{errno:?}: the others are still carried");
        assert!(leftovers(s.path()).is_empty());
    }
}

#[test]
fn a_link_that_fails_for_another_reason_still_fails_the_sync_and_changes_nothing() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &old_tree(), 0o755);
    let probe = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.kind == "link");
    let options = durable::Options { probe: &probe, ..durable::Options::default() };
    durable::sync_dir(s.fd(), "target", &new_tree(), &options).unwrap_err();
    assert!(probe.hits() >= 1);
    assert_eq!(snapshot(&s.join("target")), expected(&old_tree(), 0o755));
    assert!(leftovers(s.path()).is_empty());
}

/// 100 small files `f000`…`f099` (the core samples 16 of them, spread
/// evenly: `f000`, `f006`, `f012`, … `f093`), and the large ones given; in
/// the new tree, the files `changed` says get new bytes.
fn rotation(changed: impl Fn(usize) -> bool, large: &[&str]) -> (Tree, Tree) {
    let (mut old, mut new) = (Tree::new(), Tree::new());
    for i in 0..100 {
        let path = format!("f{i:03}");
        old.add_file(&path, format!("old bytes of {path}").into_bytes(), 0o644).unwrap();
        let bytes = if changed(i) { format!("new bytes of {path}") } else { format!("old bytes of {path}") };
        new.add_file(&path, bytes.into_bytes(), 0o644).unwrap();
    }
    for path in large {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        old.add_file(path, bytes.clone(), 0o644).unwrap();
        new.add_file(path, bytes, 0o644).unwrap();
    }
    (old, new)
}

/// Sync `new` into a target holding `old` (4 threads) and check the result;
/// returns the target's inodes before and after, and what was recorded.
#[allow(clippy::type_complexity)]
fn sync_over(
    old: &Tree,
    new: &Tree,
) -> (BTreeMap<String, (u64, u64)>, BTreeMap<String, (u64, u64)>, Recorder) {
    let s = Scratch::new();
    write_tree(&s.join("target"), old, 0o755);
    let before = inodes(&s.join("target"));
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", new, &opts(&rec, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(snapshot(&s.join("target")), expected(new, 0o755));
    assert!(leftovers(s.path()).is_empty());
    (before, inodes(&s.join("target")), rec)
}

fn sampled(i: usize) -> bool {
    (0..16).any(|k| k * 100 / 16 == i)
}

#[test]
fn a_tree_whose_sampled_small_files_all_changed_is_rewritten_without_comparing_the_rest() {
    // Only the 16 sampled files changed; the other 84 kept their bytes. The
    // sample says "rewritten", so those 84 are not read: they are written
    // into fresh inodes like the changed ones, and the result is exact.
    let (old, new) = rotation(sampled, &[]);
    let (before, after, rec) = sync_over(&old, &new);
    assert!(before.keys().all(|p| after[p].0 != before[p].0), "every file is a fresh inode");
    assert_eq!(rec.count("link"), 0, "nothing is carried");
    assert_eq!(rec.staged_creates(), 100);
}

#[test]
fn one_sampled_file_unchanged_keeps_every_unchanged_file_carried() {
    // The same tree, but f000 (the first file sampled) kept its bytes: the
    // sample does not say "rewritten", every file is compared, and all 85
    // unchanged files are carried.
    let (old, new) = rotation(|i| i != 0 && sampled(i), &[]);
    let (before, after, rec) = sync_over(&old, &new);
    for i in 0..100 {
        let path = format!("f{i:03}");
        let carried = i == 0 || !sampled(i);
        assert_eq!(after[&path].0 == before[&path].0, carried, "{path}: carried {carried}");
    }
    assert_eq!(rec.count("link"), 85);
}

#[test]
fn large_unchanged_files_are_compared_and_carried_even_when_the_small_ones_were_rewritten() {
    // Rewriting a large file writes all its bytes back to the disk, so the
    // sample's verdict on the small files never skips comparing it.
    let (old, new) = rotation(|_| true, &["large-a", "large-b"]);
    let (before, after, rec) = sync_over(&old, &new);
    for large in ["large-a", "large-b"] {
        assert_eq!(after[large].0, before[large].0, "{large} is carried");
    }
    assert_eq!(rec.count("link"), 2);
    assert_eq!(rec.staged_creates(), 100);
}
