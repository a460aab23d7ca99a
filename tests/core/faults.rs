//! Fault injection: every file-system step of an operation, found in a
//! recorded run, is made to fail in turn. Before the commit point the
//! target must be byte-for-byte unchanged and nothing left after
//! `recover`; after it the new contents are live and the error says
//! "committed".

use std::collections::HashSet;
use std::os::fd::AsFd;

use durasync::durable::{self, Error, NoProbe, Options, Step, Tree};

use crate::common::*;

/// One operation to explore.
struct Case<'a> {
    /// Creates the state before the operation.
    setup: &'a dyn Fn(&Scratch),
    /// The operation.
    run: &'a dyn Fn(&Scratch, &Options<'_>) -> Result<(), Error>,
    /// The path (relative to the scratch dir) the operation changes.
    target: &'a str,
    /// The directory holding it, where leftovers would be (`""`: the scratch dir).
    parent: &'a str,
    /// The step that makes the change (the swap); the commit fsync follows it.
    swap: Key,
    /// Workers for file writes and fsyncs.
    threads: usize,
}

/// The step an error names, for comparison with the failed operation.
fn step_of(err: &Error) -> Option<Step> {
    match err {
        Error::Io { step, .. } | Error::Committed { step, .. } => Some(*step),
        _ => None,
    }
}

fn expected_step(k: &Key, committed: bool) -> Step {
    match k.kind {
        "lock" => Step::Lock,
        "mkdir" => Step::Mkdir,
        "create" => Step::Create,
        "write" => Step::Write,
        "chmod" => Step::Chmod,
        "chown" => Step::Chown,
        "setxattr" => Step::SetXattr,
        "fsync-file" => Step::FsyncFile,
        "fsync-dir" if committed && k.path == "." => Step::FsyncParent,
        "fsync-dir" => Step::FsyncDir,
        "link" => Step::Link,
        "exchange" => Step::Exchange,
        "rename" => Step::Rename,
        "unlink" | "rmdir" => Step::Remove,
        other => panic!("unknown op kind {other}"),
    }
}

/// Explore a case; returns how many steps were failed in turn.
fn explore(case: &Case<'_>) -> usize {
    // The recorded run: the steps, and the state the operation leads to.
    let s = Scratch::new();
    (case.setup)(&s);
    let rec = Recorder::default();
    (case.run)(&s, &opts(&rec, case.threads)).expect("the recorded run succeeds");
    let new = snapshot(&s.join(case.target));
    let keys = rec.keys();
    let unique: HashSet<&Key> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "every step can be told apart: {keys:#?}");
    let swap_at = keys.iter().position(|k| *k == case.swap).unwrap_or_else(|| {
        panic!("no {} in the recorded run: {keys:#?}", case.swap);
    });
    // The commit fsync: of the parent, or for a one-file change of the
    // directory inside the target that holds the file.
    assert_eq!(keys.get(swap_at + 1).map(|k| k.kind), Some("fsync-dir"), "commit follows swap: {keys:#?}");

    for (i, k) in keys.iter().enumerate() {
        let s = Scratch::new();
        (case.setup)(&s);
        let old = snapshot(&s.join(case.target));
        let names_before = names(&s.join(case.parent));
        let probe = fail_at(k.clone());
        let err = match (case.run)(&s, &opts(&probe, case.threads)) {
            Ok(()) => panic!("failing {k} did not fail the operation"),
            Err(e) => e,
        };
        assert!(probe.hits() > 0, "{k}: the fault was never reached");
        let committed = i > swap_at;
        let msg = err.to_string();
        assert!(msg.contains("Input/output error"), "{k}: the kernel's error is kept: {msg}");
        assert_eq!(step_of(&err), Some(expected_step(k, committed)), "{k}: the error names the step: {msg}");
        if committed {
            assert!(err.is_committed(), "{k}: after the swap the error is committed: {err:?}");
            assert!(msg.contains("committed"), "{k}: {msg}");
            assert_eq!(snapshot(&s.join(case.target)), new, "{k}: the new content is live");
        } else {
            assert!(!err.is_committed(), "{k}: before the swap nothing is committed: {err:?}");
            assert!(!msg.contains("committed"), "{k}: {msg}");
            assert_eq!(snapshot(&s.join(case.target)), old, "{k}: the target is unchanged");
        }
        durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap();
        assert!(leftovers(&s.join(case.parent)).is_empty(), "{k}: recover leaves nothing behind");
        if !committed {
            assert_eq!(names(&s.join(case.parent)), names_before, "{k}: nothing new beside the target");
        }
        // Nothing a failure leaves in place stops the same operation from succeeding now.
        (case.run)(&s, &opts(&NoProbe, case.threads)).unwrap_or_else(|e| panic!("{k}: retry failed: {e}"));
        assert_eq!(snapshot(&s.join(case.target)), new, "{k}: the retry reaches the new state");
        assert!(leftovers(&s.join(case.parent)).is_empty());
    }
    keys.len()
}

fn old_tree() -> Tree {
    let mut t = tree(&[
        ("tls.crt", b"old cert", 0o644),
        ("tls.key", b"old key", 0o600),
        ("keep/same", b"same bytes", 0o644),
        ("gone/deep/file", b"removed", 0o640),
    ]);
    t.add_dir("empty-old", 0o700).unwrap();
    t
}

fn new_tree() -> Tree {
    let mut t = tree(&[
        ("tls.crt", b"new cert", 0o644),
        ("tls.key", b"new key", 0o600),
        ("keep/same", b"same bytes", 0o644),
        ("ca/bundle/ca.crt", b"ca", 0o444),
        ("empty-file", b"", 0o600),
    ]);
    t.add_dir("empty-new", 0o750).unwrap();
    t
}

fn sync_new(s: &Scratch, o: &Options<'_>) -> Result<(), Error> {
    durable::sync_dir(s.fd(), "target", &new_tree(), o).map(drop)
}

fn with_old_target(s: &Scratch) {
    write_tree(&s.join("target"), &old_tree(), 0o750);
}

fn exchange_key() -> Key {
    Key { kind: "exchange", path: "<stage> <-> target".into() }
}

#[test]
fn every_failing_step_of_a_parallel_sync_leaves_old_or_committed_new() {
    let case = Case {
        setup: &with_old_target,
        run: &sync_new,
        target: "target",
        parent: "",
        swap: exchange_key(),
        threads: 4,
    };
    let steps = explore(&case);
    // Enough steps were explored to cover every file and directory.
    assert!(steps > new_tree().file_count() * 4, "{steps}");
}

#[test]
fn every_failing_step_of_a_sequential_sync_leaves_old_or_committed_new() {
    let case = Case {
        setup: &with_old_target,
        run: &sync_new,
        target: "target",
        parent: "",
        swap: exchange_key(),
        threads: 1,
    };
    explore(&case);
}

#[test]
fn every_failing_step_of_a_sync_to_a_missing_target_leaves_no_target_or_committed_new() {
    let swap = Key { kind: "rename", path: "<stage> -> target".into() };
    let case = Case { setup: &|_| {}, run: &sync_new, target: "target", parent: "", swap, threads: 4 };
    explore(&case);
}

#[test]
fn every_failing_step_of_a_sync_to_an_empty_tree_leaves_old_or_committed_new() {
    let run = |s: &Scratch, o: &Options<'_>| durable::sync_dir(s.fd(), "target", &Tree::new(), o).map(drop);
    let case = Case {
        setup: &with_old_target,
        run: &run,
        target: "target",
        parent: "",
        swap: exchange_key(),
        threads: 4,
    };
    explore(&case);
}

#[test]
fn every_failing_step_of_a_nested_target_sync_leaves_old_or_committed_new() {
    // A target below the handle: the parent is reached with open_beneath.
    let setup = |s: &Scratch| {
        std::fs::create_dir_all(s.join("secrets")).unwrap();
        write_tree(&s.join("secrets/tls"), &old_tree(), 0o700);
    };
    let run = |s: &Scratch, o: &Options<'_>| {
        let parent = durable::open_beneath(s.fd(), "secrets")?;
        durable::sync_dir(parent.as_fd(), "tls", &new_tree(), o).map(drop)
    };
    let case = Case {
        setup: &setup,
        run: &run,
        target: "secrets/tls",
        parent: "secrets",
        swap: Key { kind: "exchange", path: "<stage> <-> tls".into() },
        threads: 4,
    };
    explore(&case);
}

/// `old_tree` with one file's bytes changed (`keep/same`), or with only
/// `tls.key`'s mode: the one-file fast path.
fn one_file_tree(mode_only: bool) -> Tree {
    let mut t = Tree::new();
    for (path, node) in old_tree().iter() {
        match node {
            durable::Node::Dir { mode, .. } => t.add_dir(path, *mode).unwrap(),
            durable::Node::File { contents, mode } => {
                let (contents, mode) = match path {
                    "keep/same" if !mode_only => (b"rotated bytes".to_vec(), *mode),
                    "tls.key" if mode_only => (contents.clone(), 0o400),
                    _ => (contents.clone(), *mode),
                };
                t.add_file(path, contents, mode).unwrap();
            }
            durable::Node::Source { .. } => unreachable!("a tree built in memory"),
        }
    }
    t
}

#[test]
fn every_failing_step_of_a_one_file_change_leaves_old_or_committed_new() {
    for (mode_only, swap) in [(false, "<tmp> -> target/keep/same"), (true, "<tmp> -> target/tls.key")] {
        let run = move |s: &Scratch, o: &Options<'_>| {
            durable::sync_dir(s.fd(), "target", &one_file_tree(mode_only), o).map(drop)
        };
        let swap = Key { kind: "rename", path: swap.into() };
        let case =
            Case { setup: &with_old_target, run: &run, target: "target", parent: "", swap, threads: 4 };
        let steps = explore(&case);
        // create, write, chmod, fsync of the temporary file, mark, rename, commit fsync, unmark (+ lock).
        assert!(steps >= 8, "the fast path was explored: {steps} steps");
    }
}

fn write_new(s: &Scratch, o: &Options<'_>) -> Result<(), Error> {
    durable::write_file(s.fd(), "pod.yaml", b"kind: Pod\nrevision: 2\n", Some(0o600), o).map(drop)
}

#[test]
fn every_failing_step_of_a_file_replace_leaves_old_or_committed_new() {
    let setup = |s: &Scratch| std::fs::write(s.join("pod.yaml"), b"kind: Pod\nrevision: 1\n").unwrap();
    let swap = Key { kind: "rename", path: "<tmp> -> pod.yaml".into() };
    let case = Case { setup: &setup, run: &write_new, target: "pod.yaml", parent: "", swap, threads: 1 };
    explore(&case);
}

#[test]
fn every_failing_step_of_a_file_create_leaves_no_file_or_committed_new() {
    let swap = Key { kind: "rename", path: "<tmp> -> pod.yaml".into() };
    let case = Case { setup: &|_| {}, run: &write_new, target: "pod.yaml", parent: "", swap, threads: 1 };
    explore(&case);
}

fn remove_managed(s: &Scratch, o: &Options<'_>) -> Result<(), Error> {
    match durable::remove(s.fd(), "managed", o)? {
        Some(_) => Ok(()),
        None => panic!("nothing was removed"),
    }
}

#[test]
fn every_failing_step_of_a_directory_removal_leaves_it_whole_or_committed_gone() {
    let setup = |s: &Scratch| write_tree(&s.join("managed"), &old_tree(), 0o750);
    let swap = Key { kind: "rename", path: "managed -> <trash>".into() };
    // The retry after a committed failure finds nothing to remove; run it as "remove if present".
    let run = |s: &Scratch, o: &Options<'_>| {
        if s.join("managed").exists() { remove_managed(s, o) } else { Ok(()) }
    };
    let case = Case { setup: &setup, run: &run, target: "managed", parent: "", swap, threads: 1 };
    explore(&case);
}

#[test]
fn every_failing_step_of_a_file_removal_leaves_it_or_committed_gone() {
    let setup = |s: &Scratch| std::fs::write(s.join("managed"), b"contents").unwrap();
    let swap = Key { kind: "unlink", path: "managed".into() };
    let run = |s: &Scratch, o: &Options<'_>| {
        if s.join("managed").exists() { remove_managed(s, o) } else { Ok(()) }
    };
    let case = Case { setup: &setup, run: &run, target: "managed", parent: "", swap, threads: 1 };
    explore(&case);
}

#[test]
fn a_staging_left_by_a_failed_cleanup_is_removed_by_the_next_sync() {
    let s = Scratch::new();
    with_old_target(&s);
    let old = snapshot(&s.join("target"));
    // The write fails, and so does every removal of the cleanup after it.
    let probe = FailWhen::new(rustix::io::Errno::IO, |k: &Key| {
        k.is("write", "<stage>/tls.key") || k.kind == "rmdir" || k.kind == "unlink"
    });
    let err = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&probe, 1)).unwrap_err();
    assert!(matches!(err, Error::Io { step: Step::Write, .. }), "{err:?}");
    assert_eq!(snapshot(&s.join("target")), old);
    assert_eq!(leftovers(s.path()).len(), 1, "the half-built staging is still there");
    let report = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&NoProbe, 4)).unwrap();
    assert_eq!(report.written as usize, new_tree().file_count());
    assert_eq!(snapshot(&s.join("target")), expected(&new_tree(), 0o750));
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn a_failure_to_set_the_new_staging_directorys_mode_leaves_no_staging_behind() {
    // The error says nothing changed, so nothing may stay beside the target,
    // not even until the next recovery.
    let s = Scratch::new();
    with_old_target(&s);
    let old = snapshot(&s.join("target"));
    let probe = FailWhen::new(rustix::io::Errno::IO, |k: &Key| k.is("chmod", "<stage> 700"));
    let err = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&probe, 1)).unwrap_err();
    assert_eq!(probe.hits(), 1);
    assert!(matches!(err, Error::Io { step: Step::Chmod, .. }), "{err:?}");
    assert_eq!(snapshot(&s.join("target")), old);
    assert_eq!(names(s.path()), ["target".to_owned()].into(), "no staging directory is left");
}

/// Fails every `RENAME_NOREPLACE` with EINVAL, as FUSE and some NFS do.
struct NoRenameFlags {
    hits: std::sync::atomic::AtomicUsize,
}

impl durable::Probe for NoRenameFlags {
    fn before(&self, op: &durable::SysOp<'_>) -> std::io::Result<()> {
        match op {
            durable::SysOp::Rename { replace: false, .. } | durable::SysOp::Exchange { .. } => {
                self.hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err(std::io::Error::from_raw_os_error(rustix::io::Errno::INVAL.raw_os_error()))
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn where_renameat2_flags_are_unsupported_write_and_remove_still_work_by_plain_rename() {
    let s = Scratch::new();
    let probe = NoRenameFlags { hits: Default::default() };
    let r = durable::write_file(s.fd(), "pod.yaml", b"kind: Pod", None, &opts(&probe, 1)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Created);
    assert_eq!(std::fs::read(s.join("pod.yaml")).unwrap(), b"kind: Pod");
    let r = durable::write_file(s.fd(), "pod.yaml", b"kind: Pod2", None, &opts(&probe, 1)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Replaced);
    write_tree(&s.join("managed"), &old_tree(), 0o750);
    durable::remove(s.fd(), "managed", &opts(&probe, 1)).unwrap().unwrap();
    assert!(!s.join("managed").exists());
    assert_eq!(
        probe.hits.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the create and the removal fell back"
    );
    assert_eq!(names(s.path()), ["pod.yaml".to_owned()].into(), "no leftovers");
    // A directory sync has no atomic fallback: unsupported, nothing changed.
    let err = durable::sync_dir(s.fd(), "target", &new_tree(), &opts(&probe, 1)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { op: "RENAME_NOREPLACE", .. }), "{err:?}");
    assert_eq!(names(s.path()), ["pod.yaml".to_owned()].into());
}

#[test]
fn every_failing_step_of_a_sync_that_sets_owners_labels_and_attributes_leaves_old_or_committed_new() {
    if !rustix::process::geteuid().is_root() {
        cannot_check("every_failing_step_of_a_sync_that_sets_owners_…: needs root (fchown to other ids)");
        return;
    }
    let setup = |s: &Scratch| {
        with_old_target(s);
        let flags = rustix::fs::XattrFlags::empty();
        let label = b"system_u:object_r:cert_t:s0";
        rustix::fs::setxattr(s.join("target"), "security.selinux", label, flags).expect("label the target");
        rustix::fs::setxattr(s.join("target/tls.crt"), "user.origin", b"vendor", flags).expect("user xattr");
    };
    let policy = durable::Attrs {
        owner: durable::IdRule::Id(1000),
        group: durable::IdRule::Id(1000),
        xattrs: true,
        ..durable::Attrs::default()
    };
    let run = |s: &Scratch, o: &Options<'_>| {
        durable::sync_dir(s.fd(), "target", &new_tree(), &Options { attrs: &policy, ..*o }).map(drop)
    };
    let case =
        Case { setup: &setup, run: &run, target: "target", parent: "", swap: exchange_key(), threads: 4 };
    let steps = explore(&case);
    assert!(steps > new_tree().file_count() * 6, "chown and setxattr steps were explored too: {steps}");
}
