//! Leftovers of a crash (staging trees, temporary files, trash) with
//! planted files and symlinks: removed by the next operation and by
//! `recover`, never swapped in, never followed.

use std::path::Path;

use durasync::durable::{self, NoProbe, Tree};

use crate::common::*;

const STAGE: &str = ".durasync-stage-0123456789abcdef";
const TMP: &str = ".durasync-tmp-fedcba9876543210";
const TRASH: &str = ".durasync-trash-00000000000000ff";

/// A directory outside every target, holding a canary file and a
/// directory that looks like a leftover: a cleanup that followed a link
/// would delete them.
struct Outside {
    dir: Scratch,
}

impl Outside {
    fn new() -> Self {
        let dir = Scratch::new();
        std::fs::write(dir.join("canary"), b"must survive").unwrap();
        std::fs::create_dir(dir.join(STAGE)).unwrap();
        std::fs::write(dir.join(STAGE).join("canary"), b"must survive too").unwrap();
        Outside { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn assert_intact(&self) {
        assert_eq!(std::fs::read(self.dir.join("canary")).unwrap(), b"must survive");
        assert_eq!(std::fs::read(self.dir.join(STAGE).join("canary")).unwrap(), b"must survive too");
    }
}

/// Plant, in `dir`, a stale staging tree that holds files the next sync
/// would want (and more), links to `outside`, and nested directories; a
/// temporary file that is a link to `outside`; and a trash directory.
fn plant(dir: &Path, outside: &Outside) {
    let stage = dir.join(STAGE);
    std::fs::create_dir(&stage).unwrap();
    std::fs::write(stage.join("tls.crt"), b"stale cert").unwrap();
    std::fs::write(stage.join("evil"), b"never swapped in").unwrap();
    std::os::unix::fs::symlink(outside.path(), stage.join("link-to-dir")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("canary"), stage.join("link-to-file")).unwrap();
    std::fs::create_dir_all(stage.join("deep/er")).unwrap();
    std::os::unix::fs::symlink(outside.path(), stage.join("deep/er/link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.join(TMP)).unwrap();
    std::fs::create_dir(dir.join(TRASH)).unwrap();
    std::fs::write(dir.join(TRASH).join("old"), b"old").unwrap();
}

fn new_tree() -> Tree {
    tree(&[("tls.crt", b"new cert", 0o644), ("tls.key", b"new key", 0o600)])
}

#[test]
fn a_sync_removes_planted_leftovers_without_swapping_them_in_or_following_links() {
    let outside = Outside::new();
    for target_exists in [false, true] {
        let s = Scratch::new();
        if target_exists {
            write_tree(&s.join("target"), &tree(&[("old", b"old", 0o644)]), 0o755);
        }
        plant(s.path(), &outside);
        let r = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&NoProbe, 4)).unwrap();
        assert_eq!(r.written, 2);
        assert_eq!(snapshot(&s.join("target")), expected(&new_tree(), 0o755), "exactly the new tree");
        assert_eq!(names(s.path()), ["target".to_owned()].into(), "every leftover is gone");
        outside.assert_intact();
    }
}

#[test]
fn a_file_write_and_a_removal_also_remove_leftovers() {
    let outside = Outside::new();
    let s = Scratch::new();
    plant(s.path(), &outside);
    durable::write_file(s.fd(), "pod.yaml", b"kind: Pod", None, &opts(&NoProbe, 1)).unwrap();
    assert_eq!(names(s.path()), ["pod.yaml".to_owned()].into());
    plant(s.path(), &outside);
    assert!(durable::remove(s.fd(), "pod.yaml", &opts(&NoProbe, 1)).unwrap().is_some());
    assert!(names(s.path()).is_empty());
    outside.assert_intact();
}

#[test]
fn recover_removes_planted_leftovers_at_every_depth_without_following_links() {
    let outside = Outside::new();
    let s = Scratch::new();
    std::fs::create_dir(s.join("secrets")).unwrap();
    write_tree(&s.join("secrets/tls"), &new_tree(), 0o755);
    plant(s.path(), &outside);
    plant(&s.join("secrets"), &outside);
    // A link to a directory holding a leftover-named entry: recover must not descend it.
    std::os::unix::fs::symlink(outside.path(), s.join("secrets/link")).unwrap();
    // Names that merely look like durasync's are not removed.
    for not_ours in
        [".durasync-stage-short", ".durasync-stage-0123456789ABCDEF", "durasync-stage-0123456789abcdef"]
    {
        std::fs::write(s.join(not_ours), b"not a leftover").unwrap();
    }
    let before_targets = snapshot(&s.join("secrets/tls"));

    let removed = durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap();
    let want: Vec<String> = [STAGE, TMP, TRASH]
        .iter()
        .map(|n| n.to_string())
        .chain([STAGE, TMP, TRASH].iter().map(|n| format!("secrets/{n}")))
        .collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    let mut got = removed.clone();
    got.sort();
    assert_eq!(got, want_sorted, "the removed paths are listed");
    assert!(leftovers(s.path()).is_empty() && leftovers(&s.join("secrets")).is_empty());
    assert_eq!(names(s.path()).len(), 4, "the look-alikes stay: {:?}", names(s.path()));
    assert_eq!(snapshot(&s.join("secrets/tls")), before_targets, "targets are untouched");
    outside.assert_intact();
    // A second recover has nothing to do.
    assert!(durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap().is_empty());
}

#[test]
fn recover_through_the_cli_lists_what_it_removed() {
    let outside = Outside::new();
    let s = Scratch::new();
    std::fs::create_dir(s.join("dir")).unwrap();
    plant(&s.join("dir"), &outside);
    let out = ok_stdout(&durasync(&["recover", "dir"], s.path()));
    let want: Vec<String> = [STAGE, TMP, TRASH].iter().map(|n| format!("removed dir/{n}")).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    outside.assert_intact();
    assert_eq!(ok_stdout(&durasync(&["recover", "dir"], s.path())), "nothing to recover in dir\n");

    plant(&s.join("dir"), &outside);
    let out = ok_stdout(&durasync(&["recover", "dir", "--json"], s.path()));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["dir"], "dir");
    let listed: Vec<&str> = v["removed"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(listed, want.iter().map(|l| l.trim_start_matches("removed ")).collect::<Vec<_>>());
    assert!(leftovers(&s.join("dir")).is_empty());
}

#[test]
fn a_reserved_entry_inside_the_target_makes_it_differ_and_is_not_kept() {
    // The comparison sees everything in the target: an entry with a
    // reserved name (a leftover of a sub-target's sync, or anything named
    // `.durasync-…`) is not part of the requested tree, so the target is
    // replaced by exactly that tree.
    for planted in [STAGE, ".durasync-extra", durasync::durable::names::LOCK_NAME] {
        let s = Scratch::new();
        write_tree(&s.join("target"), &new_tree(), 0o755);
        std::fs::create_dir(s.join("target").join(planted)).unwrap();
        let r = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&NoProbe, 1)).unwrap();
        assert_eq!(r.outcome, durable::Outcome::Replaced, "{planted}");
        assert_eq!(snapshot(&s.join("target")), expected(&new_tree(), 0o755), "{planted}");
        let again = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&NoProbe, 1)).unwrap();
        assert_eq!(again.outcome, durable::Outcome::Unchanged, "{planted}");
    }
}

#[test]
fn recover_never_changes_a_target_whatever_its_entries_are_called() {
    // A target holds no lock file, so nothing in it is durasync's own:
    // recovery walks through it and changes nothing, not even a lock file.
    let s = Scratch::new();
    durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&NoProbe, 1)).unwrap();
    std::fs::write(s.join("target").join(TMP), b"the user's file").unwrap();
    std::fs::create_dir(s.join("target/sub")).unwrap();
    std::fs::write(s.join("target/sub").join(STAGE), b"also the user's").unwrap();
    let before = snapshot(&s.join("target"));
    assert!(durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap().is_empty());
    assert_eq!(snapshot(&s.join("target")), before, "the target is untouched, no lock file added");
    let out = ok_stdout(&durasync(&["recover", "."], s.path()));
    assert_eq!(out, "nothing to recover in .\n");
    assert_eq!(snapshot(&s.join("target")), before);
}
