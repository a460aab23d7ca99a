//! The unchanged check of `durasync sync --from`
//! ([`durable::sync_dir_unchanged_from`]): the source and the target read
//! side by side, without the source in memory. It may answer `unchanged`
//! only when `sync_dir` of the source's tree would: every difference, every
//! source a sync would refuse, a target marked unsynced, and a target
//! swapped after it was compared all fall through (`None`) to the full path.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::{fs, io};

use durasync::durable::{self, Probe, RequestLimits, SysOp, Tree, read_tree};
use rustix::fs::{CWD, RenameFlags};
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

fn check(s: &Scratch, probe: &dyn Probe, limits: RequestLimits) -> Option<durable::Report> {
    let opts = durable::Options { limits, ..opts(probe, 4) };
    durable::sync_dir_unchanged_from(s.fd(), "target", s.fd(), "src", "src", &opts)
}

#[test]
fn identical_trees_are_answered_unchanged_with_nothing_written() {
    let s = twins();
    let before = snapshot(s.path());
    let rec = Recorder::default();
    let r = check(&s, &rec, RequestLimits::default()).expect("the same trees are unchanged");
    assert_eq!((r.outcome, r.written, r.removed), (durable::Outcome::Unchanged, 0, 0));
    assert_eq!(rec.keys().iter().map(|k| k.kind).collect::<Vec<_>>(), ["lock"], "only the lock is taken");
    let mut after = snapshot(s.path());
    after.as_mut().unwrap().remove(durable::names::LOCK_NAME);
    assert_eq!(after, before);
}

#[test]
fn every_kind_of_difference_falls_through_to_the_full_sync() {
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
        assert!(check(&s, &durable::NoProbe, RequestLimits::default()).is_none(), "{what}: not unchanged");
        // And the full path makes the target the source.
        let tree = read_tree(s.fd(), "src", "src", &RequestLimits::default()).unwrap();
        let r = durable::sync_dir(s.fd(), "target", &tree, &opts(&durable::NoProbe, 4)).unwrap();
        assert_eq!(r.outcome, durable::Outcome::Replaced, "{what}");
        assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")), "{what}");
    }
}

#[test]
fn a_source_that_a_sync_would_refuse_is_never_answered_unchanged() {
    // Each entry is put into both trees: they are the same, but the source
    // is not a tree durasync syncs, so the full path must refuse it.
    let both = |s: &Scratch, make: &dyn Fn(&Path)| {
        make(&s.join("src"));
        make(&s.join("target"));
    };
    let s = twins();
    both(&s, &|d| std::os::unix::fs::symlink("/etc", d.join("link")).unwrap());
    assert!(check(&s, &durable::NoProbe, RequestLimits::default()).is_none(), "a link");

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
    assert!(check(&s, &durable::NoProbe, RequestLimits::default()).is_none(), "a fifo (and no wait on it)");

    let s = twins();
    both(&s, &|d| fs::write(d.join(durable::names::LOCK_NAME), b"").unwrap());
    assert!(check(&s, &durable::NoProbe, RequestLimits::default()).is_none(), "a name reserved for durasync");

    let limits = [
        RequestLimits { max_files: 72, ..RequestLimits::default() },
        RequestLimits { max_dirs: 1, ..RequestLimits::default() },
        RequestLimits { max_bytes: (5 << 19) + 70 * 4096, ..RequestLimits::default() },
        RequestLimits { max_path_bytes: 100, ..RequestLimits::default() },
    ];
    let s = twins();
    for limits in limits {
        assert!(check(&s, &durable::NoProbe, limits).is_none(), "over {limits:?}");
        let err = read_tree(s.fd(), "src", "src", &limits).unwrap_err();
        assert!(matches!(err, durable::Error::Limit { .. }), "the full path names the limit: {err}");
    }
    assert!(
        check(&s, &durable::NoProbe, RequestLimits::default()).is_some(),
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

    assert!(
        check(&s, &durable::NoProbe, RequestLimits::default()).is_none(),
        "what was read may not be durable"
    );
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &opts(&rec, 4)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Replaced, "the full path rewrites it");
    assert!(check(&s, &durable::NoProbe, RequestLimits::default()).is_some(), "durable again: unchanged");
}

/// Exchanges `target` with `twin` (an identical copy, another inode) when
/// the lock is taken: between the comparison and its confirmation.
struct SwapAtLock<'a> {
    dir: &'a Path,
}

impl Probe for SwapAtLock<'_> {
    fn before(&self, op: &SysOp<'_>) -> io::Result<()> {
        if matches!(op, SysOp::Lock { .. }) {
            rustix::fs::renameat_with(
                CWD,
                self.dir.join("target"),
                CWD,
                self.dir.join("twin"),
                RenameFlags::EXCHANGE,
            )?;
        }
        Ok(())
    }
}

#[test]
fn a_target_swapped_after_it_was_compared_is_not_answered_unchanged() {
    let s = twins();
    write_tree(&s.join("twin"), &source_tree(), 0o755);
    let swap = SwapAtLock { dir: s.path() };
    assert!(
        check(&s, &swap, RequestLimits::default()).is_none(),
        "the directory compared is no longer the target"
    );
    assert!(
        check(&s, &durable::NoProbe, RequestLimits::default()).is_some(),
        "the new one, compared, is unchanged"
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
