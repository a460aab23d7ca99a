//! `durasync sync --from` of a source the target may already hold: the
//! source read from disk as a [`Tree`] (names, sizes and modes; its bytes
//! read only when compared or copied, `durable/source.rs`) and
//! [`durable::sync_dir`]'s own compare answer `unchanged` from one walk and
//! one comparison of each side. Every difference is synced, every source a
//! sync refuses is refused even when the target holds the same, and a
//! target marked unsynced is rewritten, never answered unchanged.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use durasync::durable::{self, Probe, RequestLimits, Tree, read_tree};
use rustix::fs::CWD;
use rustix::io::Errno;

use crate::common::*;

/// Nested directories with their own modes, an empty file, 70 small files
/// (enough for the comparing threads) and one file of 2.5 MiB (three chunks).
fn source_tree() -> Tree {
    let mut t = many_files("f", 70, 4096, 3);
    t.add_dir("conf", 0o750).unwrap();
    t.add_file("conf/empty", Vec::new(), 0o600).unwrap();
    t.add_file("conf/deep/key.pem", b"secret".to_vec(), 0o400).unwrap();
    t.add_file("big", (0..(5 << 19)).map(|i| (i % 251) as u8).collect(), 0o644).unwrap();
    t
}

/// A scratch dir holding `src` and `target`, both exactly [`source_tree`].
fn twins() -> Scratch {
    let s = Scratch::new();
    write_tree(&s.join("src"), &source_tree(), 0o755);
    write_tree(&s.join("target"), &source_tree(), 0o755);
    s
}

/// `sync --from src` into `target`, as the CLI does it.
fn sync_from(s: &Scratch, probe: &dyn Probe, limits: RequestLimits) -> durable::Result<durable::Report> {
    let opts = durable::Options { limits, ..opts(probe, 4) };
    let tree = read_tree(s.fd(), "src", "src", &limits)?;
    durable::sync_dir(s.fd(), "target", &tree, &opts)
}

fn outcome(s: &Scratch, probe: &dyn Probe, limits: RequestLimits) -> durable::Outcome {
    sync_from(s, probe, limits).unwrap().outcome
}

#[test]
fn identical_trees_are_answered_unchanged_with_nothing_written() {
    let s = twins();
    let before = snapshot(s.path());
    let rec = Recorder::default();
    let r = sync_from(&s, &rec, RequestLimits::default()).unwrap();
    assert_eq!((r.outcome, r.written, r.removed), (durable::Outcome::Unchanged, 0, 0));
    assert_eq!(rec.keys().iter().map(|k| k.kind).collect::<Vec<_>>(), ["lock"], "only the lock is taken");
    let mut after = snapshot(s.path());
    after.as_mut().unwrap().remove(durable::names::LOCK_NAME);
    assert_eq!(after, before);
}

#[test]
fn every_kind_of_difference_is_synced() {
    type Change = fn(&Path);
    let changes: [(&str, Change); 11] = [
        ("one byte of a small file", |t| fs::write(t.join("f0042"), [9u8; 4096]).unwrap()),
        ("one byte in the last chunk of the big file", |t| {
            let mut b = fs::read(t.join("big")).unwrap();
            *b.last_mut().unwrap() ^= 1;
            fs::write(t.join("big"), b).unwrap();
        }),
        ("a file one byte longer", |t| fs::write(t.join("conf/empty"), b"x").unwrap()),
        ("a file's mode", |t| {
            fs::set_permissions(t.join("f0001"), fs::Permissions::from_mode(0o600)).unwrap()
        }),
        ("a directory's mode", |t| {
            fs::set_permissions(t.join("conf"), fs::Permissions::from_mode(0o755)).unwrap()
        }),
        ("an extra file", |t| fs::write(t.join("conf/deep/extra"), b"").unwrap()),
        ("an extra empty directory", |t| fs::create_dir(t.join("more")).unwrap()),
        ("a missing file", |t| fs::remove_file(t.join("f0069")).unwrap()),
        ("a missing directory", |t| fs::remove_dir_all(t.join("conf/deep")).unwrap()),
        ("a file where a directory was", |t| {
            fs::remove_dir_all(t.join("conf/deep")).unwrap();
            fs::write(t.join("conf/deep"), b"").unwrap();
        }),
        ("a link where a file was", |t| {
            fs::remove_file(t.join("f0000")).unwrap();
            std::os::unix::fs::symlink("f0001", t.join("f0000")).unwrap();
        }),
    ];
    for (what, change) in changes {
        let s = twins();
        change(&s.join("target"));
        let r = sync_from(&s, &durable::NoProbe, RequestLimits::default()).unwrap();
        assert_eq!(r.outcome, durable::Outcome::Replaced, "{what}");
        assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")), "{what}");
    }
}

#[test]
fn a_source_that_a_sync_would_refuse_is_refused_even_when_the_target_holds_the_same() {
    // Each entry is put into both trees: they are the same, but the source
    // is not a tree durasync syncs.
    let both = |s: &Scratch, make: &dyn Fn(&Path)| {
        make(&s.join("src"));
        make(&s.join("target"));
    };
    let refused = |s: &Scratch, limits: RequestLimits, what: &str| {
        let before = snapshot(s.path());
        let err = sync_from(s, &durable::NoProbe, limits).expect_err(what);
        assert_eq!(snapshot(s.path()), before, "{what}: nothing changed");
        err
    };
    let s = twins();
    both(&s, &|d| std::os::unix::fs::symlink("/etc", d.join("link")).unwrap());
    refused(&s, RequestLimits::default(), "a link");

    let s = twins();
    both(&s, &|d| {
        rustix::fs::mknodat(
            CWD,
            d.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap()
    });
    refused(&s, RequestLimits::default(), "a fifo (and no wait on it)");

    let s = twins();
    both(&s, &|d| fs::write(d.join(durable::names::LOCK_NAME), b"").unwrap());
    refused(&s, RequestLimits::default(), "a name reserved for durasync");

    let limits = [
        RequestLimits { max_files: 72, ..RequestLimits::default() },
        RequestLimits { max_dirs: 1, ..RequestLimits::default() },
        RequestLimits { max_bytes: (5 << 19) + 70 * 4096, ..RequestLimits::default() },
        RequestLimits { max_path_bytes: 100, ..RequestLimits::default() },
    ];
    let s = twins();
    for limits in limits {
        let err = refused(&s, limits, &format!("over {limits:?}"));
        assert!(matches!(err, durable::Error::Limit { .. }), "the limit is named: {err}");
    }
    assert_eq!(
        outcome(&s, &durable::NoProbe, RequestLimits::default()),
        durable::Outcome::Unchanged,
        "within the limits it is unchanged"
    );
}

#[test]
fn a_target_whose_last_commit_failed_is_not_answered_unchanged() {
    let s = twins();
    // A sync of the same tree plus one file, whose commit fsync fails: the
    // target holds it, marked unsynced. The source then gains that file.
    let mut new = source_tree();
    new.add_file("added", b"new".to_vec(), 0o644).unwrap();
    let fail = FailWhen::new(Errno::IO, |k: &Key| k.is("fsync-dir", "."));
    let err = durable::sync_dir(s.fd(), "target", &new, &opts(&fail, 4)).unwrap_err();
    assert!(matches!(err, durable::Error::Committed { .. }), "{err:?}");
    fs::write(s.join("src/added"), b"new").unwrap();
    assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")));

    let rec = Recorder::default();
    let r = sync_from(&s, &rec, RequestLimits::default()).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Replaced, "what was read may not be durable: rewritten");
    assert_eq!(
        outcome(&s, &durable::NoProbe, RequestLimits::default()),
        durable::Outcome::Unchanged,
        "durable again: unchanged"
    );
}

#[test]
fn the_cli_answers_unchanged_from_a_directory_and_still_refuses_a_bad_source() {
    let s = twins();
    let out = durasync(&["sync", "target", "--from", "src", "--json"], s.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "unchanged", "{v}");

    std::os::unix::fs::symlink("/etc", s.join("src/link")).unwrap();
    std::os::unix::fs::symlink("/etc", s.join("target/link")).unwrap();
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("src/link: is a symbolic link"), "{}", stderr(&out));
}
