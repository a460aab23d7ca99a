//! Trees of any depth: every walk, removal and recovery is iterative with a
//! bounded number of open fds, so a tree thousands of levels deep (which a
//! plugin can build by chaining directory handles, or anyone with `mkdir`)
//! never crashes the host or bricks a directory; creating one deeper than
//! `MAX_DEPTH` is refused with a `limit` error.

use std::os::fd::OwnedFd;
use std::path::Path;

use durasync::durable::names::MAX_DEPTH;
use durasync::durable::{self, Error, NoProbe, Outcome, Tree};
use rustix::fs::{Mode, OFlags};

use crate::common::*;

/// Create `levels` nested directories named `d` under `dir/name`, with a
/// file at the bottom, holding one fd at a time; returns the bottom's fd.
fn deep_chain(dir: &Path, name: &str, levels: usize) -> OwnedFd {
    wide_deep_chain(dir, name, 0, levels)
}

/// Like [`deep_chain`], with `width` files beside the chain's top: wide
/// enough that a removal empties it from several threads, whose stacks are
/// smaller than the main thread's (a recursive removal overflowed them at
/// about 4000 levels).
fn wide_deep_chain(dir: &Path, name: &str, width: usize, levels: usize) -> OwnedFd {
    std::fs::create_dir(dir.join(name)).unwrap();
    for i in 0..width {
        std::fs::write(dir.join(name).join(format!("w{i}")), b"w").unwrap();
    }
    let mut fd: OwnedFd = open_dir(&dir.join(name));
    for _ in 0..levels {
        rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd =
            rustix::fs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .unwrap();
    }
    let f = rustix::fs::openat(&fd, "bottom", OFlags::WRONLY | OFlags::CREATE, Mode::from_raw_mode(0o644))
        .unwrap();
    rustix::io::write(&f, b"deep").unwrap();
    fd
}

/// A leftover name that recovery removes.
fn stage_name() -> String {
    durable::names::leftover_name(durable::names::Leftover::Stage)
}

#[test]
fn recover_removes_a_16000_deep_leftover() {
    let s = Scratch::on_tmpfs();
    durable::sync_dir(s.fd(), "target", &tree(&[("a", b"a", 0o644)]), &opts(&NoProbe, 1)).unwrap();
    let stage = stage_name();
    drop(wide_deep_chain(s.path(), &stage, 20, 16_000));
    let out = durasync(&["recover", "."], s.path());
    assert!(out.status.success(), "recover failed ({}): {}", out.status, stderr(&out));
    assert_eq!(ok_stdout(&out), format!("removed ./{stage}\n"));
    assert!(leftovers(s.path()).is_empty());
    assert_eq!(snapshot(&s.join("target")), expected(&tree(&[("a", b"a", 0o644)]), 0o755));
}

#[test]
fn the_next_sync_removes_a_16000_deep_leftover() {
    let s = Scratch::on_tmpfs();
    let src = Scratch::new();
    std::fs::create_dir(src.join("src")).unwrap();
    std::fs::write(src.join("src/a"), b"new").unwrap();
    drop(wide_deep_chain(s.path(), &stage_name(), 20, 16_000));
    let from = src.join("src");
    let out = durasync(&["sync", "target", "--from", from.to_str().unwrap()], s.path());
    assert!(out.status.success(), "sync failed ({}): {}", out.status, stderr(&out));
    assert!(leftovers(s.path()).is_empty());
    assert_eq!(std::fs::read(s.join("target/a")).unwrap(), b"new");
}

#[test]
fn a_2000_deep_leftover_is_removed_with_only_64_fds_allowed() {
    let s = Scratch::on_tmpfs();
    std::fs::create_dir(s.join("dir")).unwrap();
    // A nested directory where durasync works (it holds a lock file).
    std::fs::write(s.join("dir").join(durable::names::LOCK_NAME), b"").unwrap();
    drop(deep_chain(&s.join("dir"), &stage_name(), 2_000));
    drop(deep_chain(s.path(), &stage_name(), 2_000));
    let out = durasync_sh("ulimit -n 64", &["recover", "."], s.path());
    assert!(out.status.success(), "recover failed ({}): {}", out.status, stderr(&out));
    assert!(leftovers(s.path()).is_empty() && leftovers(&s.join("dir")).is_empty());
    // And the write path: a file written beside a fresh deep leftover.
    drop(deep_chain(s.path(), &stage_name(), 2_000));
    let input = s.join("input");
    std::fs::write(&input, b"x").unwrap();
    let out = durasync_sh("ulimit -n 64", &["write", "f", "--from", input.to_str().unwrap()], s.path());
    assert!(out.status.success(), "write failed ({}): {}", out.status, stderr(&out));
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn recover_walks_a_2000_deep_non_leftover_tree_with_only_64_fds_allowed() {
    // Recovery descends into everything that is not a leftover; a deep
    // ordinary tree with a leftover at its bottom (beside a lock file).
    let s = Scratch::on_tmpfs();
    let fd = deep_chain(s.path(), "tree", 2_000);
    let leftover = stage_name();
    rustix::fs::mkdirat(&fd, leftover.as_str(), Mode::from_raw_mode(0o700)).unwrap();
    rustix::fs::openat(
        &fd,
        durable::names::LOCK_NAME,
        OFlags::WRONLY | OFlags::CREATE,
        Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let out = durasync_sh("ulimit -n 64", &["recover", "."], s.path());
    assert!(out.status.success(), "recover failed ({}): {}", out.status, stderr(&out));
    assert!(ok_stdout(&out).ends_with(&format!("/d/{leftover}\n")));
    assert!(rustix::fs::statat(&fd, leftover.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_err());
}

#[test]
fn a_target_holding_a_5000_deep_tree_is_compared_and_replaced() {
    let s = Scratch::on_tmpfs();
    std::fs::create_dir(s.join("target")).unwrap();
    drop(wide_deep_chain(&s.join("target"), "deep", 20, 5_000));
    let new = tree(&[("a", b"a", 0o644)]);
    let r = durable::sync_dir(s.fd(), "target", &new, &opts(&NoProbe, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    assert_eq!(r.removed, 21, "the file at the bottom of the deep tree and the 20 beside its top");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    assert!(leftovers(s.path()).is_empty());
    // Removing a deep directory durably works the same way.
    drop(deep_chain(s.path(), "gone", 5_000));
    let r = durable::remove(s.fd(), "gone", &opts(&NoProbe, 1)).unwrap().unwrap();
    assert_eq!(r.removed, 1);
    assert!(!s.join("gone").exists() && leftovers(s.path()).is_empty());
}

#[test]
fn a_10000_deep_source_is_refused_with_a_limit_error() {
    let s = Scratch::on_tmpfs();
    drop(deep_chain(s.path(), "src", 10_000));
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("directory levels"), "{}", stderr(&out));
    assert!(!s.join("target").exists());
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn trees_deeper_than_max_depth_are_refused_with_a_limit_error() {
    let at_limit = vec!["d"; MAX_DEPTH].join("/");
    let mut t = Tree::new();
    t.add_file(&at_limit, b"x".to_vec(), 0o644).unwrap();
    let too_deep = format!("{at_limit}/f");
    for err in
        [t.add_file(&too_deep, b"x".to_vec(), 0o644).unwrap_err(), t.add_dir(&too_deep, 0o755).unwrap_err()]
    {
        assert!(matches!(err, Error::Limit { limit, .. } if limit == MAX_DEPTH as u64), "{err:?}");
        assert!(err.to_string().contains("directory levels in a path"), "{err}");
    }
    // A tree at the limit syncs, and its nested dirs hold few fds.
    let s = Scratch::on_tmpfs();
    durable::sync_dir(s.fd(), "target", &t, &opts(&NoProbe, 1)).unwrap();
    assert_eq!(std::fs::read(s.join("target").join(&at_limit)).unwrap(), b"x");
}
