//! The fsync discipline: N file fsyncs + D + 2 directory fsyncs for N new or
//! changed files in D subdirectories, 2 when exactly one file changed (the
//! one-file fast path), none when nothing changed. Counted twice: through
//! the probe (what the core asks for) and with strace on the real binary
//! (what reaches the kernel).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use durasync::durable::names::is_leftover;
use durasync::durable::{self, NoProbe, Tree};

use crate::common::*;

#[test]
fn a_sync_asks_for_one_fsync_per_file_and_per_directory_plus_two() {
    let s = Scratch::new();
    write_tree(&s.join("target"), &many_files("old", 5, 10, 0), 0o755);
    let mut new = many_files("f", 20, 100, 1);
    for p in ["a/1", "a/b/2", "a/b/c/3", "z/4"] {
        new.add_file(p, p.as_bytes().to_vec(), 0o600).unwrap();
    }
    new.add_dir("empty", 0o700).unwrap();
    let rec = Recorder::default();
    durable::sync_dir(s.fd(), "target", &new, &opts(&rec, 8)).unwrap();
    assert_eq!(rec.count("fsync-file"), new.file_count());
    // a, a/b, a/b/c, z, empty; the staging root; the parent.
    assert_eq!(new.dir_count(), 5);
    assert_eq!(rec.count("fsync-dir"), new.dir_count() + 2);
    // Deepest first, the staging root, then the commit.
    let dirs: Vec<String> =
        rec.keys().into_iter().filter(|k| k.kind == "fsync-dir").map(|k| k.path).collect();
    assert_eq!(dirs[0], "<stage>/a/b/c");
    assert_eq!(dirs[dirs.len() - 2..], ["<stage>", "."]);

    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &new, &opts(&rec, 8)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Unchanged);
    assert_eq!(rec.count("fsync-file") + rec.count("fsync-dir"), 0);
}

#[test]
fn a_file_write_asks_for_one_file_fsync_and_one_directory_fsync() {
    let s = Scratch::new();
    let rec = Recorder::default();
    durable::write_file(s.fd(), "f", b"x", None, &opts(&rec, 1)).unwrap();
    assert_eq!((rec.count("fsync-file"), rec.count("fsync-dir")), (1, 1));
    let rec = Recorder::default();
    durable::write_file(s.fd(), "f", b"x", None, &opts(&rec, 1)).unwrap();
    assert_eq!((rec.count("fsync-file"), rec.count("fsync-dir")), (0, 0), "unchanged: none");
}

/// The sync-family calls one run of the binary made, from `strace -ff -y`.
#[derive(Debug, Default)]
pub(crate) struct Syncs {
    /// fd path → how many fsyncs it got.
    pub fsync: BTreeMap<PathBuf, usize>,
    /// Every other sync-family call (fdatasync, sync_file_range, syncfs, sync), as strace printed it.
    pub other: Vec<String>,
}

const TRACED: &str = "fsync,fdatasync,sync_file_range,syncfs,sync";

/// Run `durasync args` under strace; `None` (after saying why) when strace
/// cannot run here.
pub(crate) fn traced(args: &[&str], cwd: &Path, out_dir: &Path) -> Option<(String, Syncs)> {
    let prefix = out_dir.join("trace");
    let out = Command::new("strace")
        .args(["-f", "-ff", "-qq", "-y", "-e", &format!("trace={TRACED}"), "-o"])
        .arg(&prefix)
        .arg(crate::support::durasync())
        .args(args)
        .current_dir(cwd)
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            cannot_check(&format!("strace fsync count: cannot run strace ({e}); install strace"));
            return None;
        }
    };
    let err = stderr(&out);
    if !out.status.success() && err.contains("ptrace") {
        cannot_check(&format!("strace fsync count: strace cannot trace here: {err}"));
        return None;
    }
    let stdout = ok_stdout(&out);
    let mut syncs = Syncs::default();
    for entry in std::fs::read_dir(out_dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_str().unwrap().starts_with("trace.") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("+++") || line.starts_with("---") {
                continue;
            }
            // `fsync(5</tmp/x/.durasync-stage-…/f0000>) = 0`
            if let Some(rest) = line.strip_prefix("fsync(") {
                let start = rest.find('<').expect("strace -y prints the fd's path") + 1;
                let end = rest.rfind(">)").expect("one argument");
                assert!(line.ends_with("= 0"), "a failed fsync: {line}");
                *syncs.fsync.entry(PathBuf::from(&rest[start..end])).or_default() += 1;
            } else {
                syncs.other.push(line.to_owned());
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
    Some((stdout, syncs))
}

#[test]
fn strace_counts_100_file_fsyncs_and_2_directory_fsyncs_for_100_files_then_none() {
    let s = Scratch::new();
    let traces = Scratch::new();
    let files = 100;
    write_tree(&s.join("target"), &many_files("f", files, 4096, 7), 0o755);
    let new: Tree = many_files("f", files, 4096, 99);
    write_tree(&s.join("src"), &new, 0o755);
    let parent = std::fs::canonicalize(s.path()).unwrap();

    let args = ["sync", "target", "--from", "src", "--flush", "fsync"];
    let Some((stdout, syncs)) = traced(&args, s.path(), traces.path()) else {
        return;
    };
    assert_eq!(stdout, "replaced target: 100 written, 0 removed\n");
    assert!(syncs.other.is_empty(), "no other sync-family call: {:?}", syncs.other);
    let (mut file_fsyncs, mut dir_fsyncs) = (BTreeMap::new(), Vec::new());
    for (path, n) in &syncs.fsync {
        let name = path.file_name().unwrap().to_str().unwrap();
        let in_staging =
            path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).is_some_and(is_leftover);
        if *path == parent {
            dir_fsyncs.push(("parent", *n));
        } else if is_leftover(name) && path.parent() == Some(parent.as_path()) {
            dir_fsyncs.push(("staging", *n));
        } else if in_staging && new.get(name).is_some() {
            file_fsyncs.insert(name.to_owned(), *n);
        } else {
            panic!("an fsync of something else: {} ({n} times)", path.display());
        }
    }
    assert_eq!(file_fsyncs.len(), files, "every new file fsynced");
    assert!(file_fsyncs.values().all(|n| *n == 1), "each exactly once: {file_fsyncs:?}");
    dir_fsyncs.sort();
    assert_eq!(dir_fsyncs, [("parent", 1), ("staging", 1)], "2 directory fsyncs");
    eprintln!(
        "strace: {} file fsyncs, {} directory fsyncs",
        file_fsyncs.values().sum::<usize>(),
        dir_fsyncs.len()
    );

    let (stdout, syncs) = traced(&["sync", "target", "--from", "src"], s.path(), traces.path()).unwrap();
    assert_eq!(stdout, "unchanged target: 0 written, 0 removed\n");
    assert!(syncs.fsync.is_empty() && syncs.other.is_empty(), "the second sync issues none: {syncs:?}");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    durable::recover(s.fd(), &opts(&NoProbe, 1)).unwrap();
}

#[test]
fn strace_counts_2_fsyncs_when_one_file_of_1000_changed_then_none() {
    let s = Scratch::new();
    let traces = Scratch::new();
    let files = 1000;
    let old = many_files("f", files, 4096, 7);
    write_tree(&s.join("target"), &old, 0o755);
    // The same 1000 files but one, rewritten in the source tree.
    let mut new = Tree::new();
    for (path, node) in old.iter() {
        if let durable::Node::File { contents, mode } = node {
            let contents = if path == "f0500" { b"rotated".to_vec() } else { contents.clone() };
            new.add_file(path, contents, *mode).unwrap();
        }
    }
    write_tree(&s.join("src"), &new, 0o755);
    let parent = std::fs::canonicalize(s.path()).unwrap();

    let Some((stdout, syncs)) = traced(&["sync", "target", "--from", "src"], s.path(), traces.path()) else {
        return;
    };
    assert_eq!(stdout, "replaced target: 1000 written, 0 removed\n");
    assert!(syncs.other.is_empty(), "no other sync-family call: {:?}", syncs.other);
    let mut seen: Vec<String> = syncs
        .fsync
        .iter()
        .map(|(path, n)| {
            let rel = path.strip_prefix(&parent).unwrap().to_str().unwrap();
            format!("{} x{n}", normalize(if rel.is_empty() { "." } else { rel }))
        })
        .collect();
    seen.sort();
    eprintln!("strace, one file of 1000 changed: {seen:?}");
    // The one-file fast path: the temporary file beside the target, then the
    // directory holding the file (here the target itself), the commit point.
    assert_eq!(seen, ["<tmp> x1", "target x1"], "the new file and its directory");
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    assert!(leftovers(s.path()).is_empty());

    let (stdout, syncs) = traced(&["sync", "target", "--from", "src"], s.path(), traces.path()).unwrap();
    assert_eq!(stdout, "unchanged target: 0 written, 0 removed\n");
    assert!(syncs.fsync.is_empty() && syncs.other.is_empty(), "a repeat issues none: {syncs:?}");
}
