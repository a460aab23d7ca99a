//! The explored scenarios: each runs one real durable-core call on a temp
//! dir with a recording probe, replays the trace into the weak model, and
//! explores every crash point.

use std::os::fd::{AsFd, BorrowedFd};

use durasync::durable::names::{LOCK_NAME, Leftover, leftover_name};
use durasync::durable::{self, Flush, Options};

use crate::explorer::{Expect, Explorer, Opts, Outcome, Scenario, print_stats, remove};
use crate::model::{Disk, Model, lower, materialise, snapshot};
use crate::trace::{ROp, Recorder};

/// Crashed states per scenario whose own recovery is explored.
const RECOVERY_CRASHES: usize = 12;

/// A file node.
pub fn file(data: &str, mode: u32) -> Disk {
    Disk::file(data.as_bytes(), mode)
}

/// A directory with `mode` holding `files` at relative paths (implied
/// directories get 0755).
pub fn dir(mode: u32, files: &[(&str, Disk)]) -> Disk {
    let mut d = Disk::dir(mode);
    for (path, node) in files {
        d.insert(path, node.clone());
    }
    d
}

/// The durable tree for a directory node (its files and directories).
pub fn to_tree(node: &Disk) -> durable::Tree {
    fn add(tree: &mut durable::Tree, prefix: &str, node: &Disk) {
        let Disk::Dir { entries, .. } = node else { panic!("not a directory") };
        for (name, child) in entries {
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
            match child {
                Disk::File { data, mode, .. } => tree.add_file(&path, data.clone(), *mode).expect("add file"),
                Disk::Dir { mode, .. } => {
                    tree.add_dir(&path, *mode).expect("add dir");
                    add(tree, &path, child);
                }
                Disk::Link { .. } => panic!("trees hold no links"),
            }
        }
    }
    let mut tree = durable::Tree::new();
    add(&mut tree, "", node);
    tree
}

/// The bystander every scenario plants beside the target.
const KEEP: &str = "keep.txt";

/// Run `call` on a real directory holding `initial` (plus [`KEEP`]) and
/// turn what it recorded into a scenario. Checks that replaying the trace in
/// the model gives exactly the real result, so no operation went unrecorded.
pub fn record(
    ex: &mut Explorer,
    name: &str,
    mut initial: Disk,
    target: &str,
    call: impl FnOnce(BorrowedFd<'_>) -> Vec<ROp>,
) -> Scenario {
    initial.insert(KEEP, file("bystander", 0o644));
    let root = ex.fresh_path();
    materialise(&initial, &root);
    let before = snapshot(&root);
    assert_eq!(before, initial, "materialising the initial state");
    let dir = std::fs::File::open(&root).expect("open root");
    // A valid previous of the initial state is named after its real inode;
    // the model knows it by its canonical name (see `model.rs`).
    let renames = canonical_names(&root);
    let trace: Vec<ROp> = call(dir.as_fd()).into_iter().map(|op| rename_paths(op, &renames)).collect();
    drop(dir);
    let after = snapshot(&root);
    remove(&root);

    let model = Model::from_disk(&before);
    let steps = lower(&model, &trace);
    let mut replay = model.clone();
    for step in &steps {
        replay.apply(&step.op);
    }
    // Compared as trees (every byte), not as their one-line descriptions.
    assert!(
        replay.current() == after,
        "{name}: replaying the recorded trace in the model must give the real result:\n model: {}\n real:  {}",
        replay.current().describe(),
        after.describe()
    );
    Scenario {
        name: name.to_owned(),
        expect: Expect {
            target: target.to_owned(),
            old: before.get(target).cloned(),
            new: after.get(target).cloned(),
            keep: vec![(KEEP.to_owned(), before.get(KEEP).cloned())],
            dirs_from: Vec::new(),
            owed: None,
            previous: None,
            linked: false,
        },
        initial: before,
        steps,
    }
}

/// The canonical name (see `model.rs`) of every keep entry directly in
/// `dir`, by real name.
fn canonical_names(dir: &std::path::Path) -> std::collections::HashMap<String, String> {
    use std::os::unix::fs::MetadataExt;
    let real: Vec<(String, bool, String)> = std::fs::read_dir(dir)
        .expect("read root")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().into_string().expect("utf-8");
            let meta = std::fs::symlink_metadata(e.path()).expect("stat");
            let valid = (meta.is_dir() || meta.is_file())
                && durasync::durable::names::parse_keep(&name) == Some(meta.ino());
            (name.clone(), valid, name)
        })
        .collect();
    crate::model::canonical_keeps(real).into_iter().filter(|(c, r)| c != r).map(|(c, r)| (r, c)).collect()
}

/// `op` with every path component found in `renames` renamed.
fn rename_paths(op: ROp, renames: &std::collections::HashMap<String, String>) -> ROp {
    if renames.is_empty() {
        return op;
    }
    let r = |p: String| -> String {
        p.split('/').map(|c| renames.get(c).map_or(c, String::as_str)).collect::<Vec<_>>().join("/")
    };
    match op {
        ROp::Lock { dir } => ROp::Lock { dir: r(dir) },
        ROp::Mkdir { path } => ROp::Mkdir { path: r(path) },
        ROp::Create { path } => ROp::Create { path: r(path) },
        ROp::Write { path, data } => ROp::Write { path: r(path), data },
        ROp::Chmod { path, mode } => ROp::Chmod { path: r(path), mode },
        ROp::Chown { path, uid, gid } => ROp::Chown { path: r(path), uid, gid },
        ROp::SetXattr { path, name, value } => ROp::SetXattr { path: r(path), name, value },
        ROp::FsyncFile { path } => ROp::FsyncFile { path: r(path) },
        ROp::FsyncDir { path } => ROp::FsyncDir { path: r(path) },
        ROp::FsyncFail { path } => ROp::FsyncFail { path: r(path) },
        ROp::Syncfs { path } => ROp::Syncfs { path: r(path) },
        ROp::SyncfsFail { path } => ROp::SyncfsFail { path: r(path) },
        ROp::Link { from, to } => ROp::Link { from: r(from), to: r(to) },
        ROp::Exchange { a, b } => ROp::Exchange { a: r(a), b: r(b) },
        ROp::Rename { from, to, replace } => ROp::Rename { from: r(from), to: r(to), replace },
        ROp::Unlink { path } => ROp::Unlink { path: r(path) },
        ROp::Rmdir { path } => ROp::Rmdir { path: r(path) },
        ROp::Symlink { path, target } => ROp::Symlink { path: r(path), target },
    }
}

/// Explore a scenario completely, print its numbers and fail on any violation.
pub fn explore_ok(ex: &mut Explorer, sc: &Scenario) -> Outcome {
    let before = ex.materialised;
    let out = ex.explore(sc, &sc.steps, Opts { stop_at_first: false, recovery_crashes: RECOVERY_CRASHES });
    print_stats(&sc.name, sc.steps.len(), &out, ex.materialised - before);
    if std::env::var_os("CRASH_VERBOSE").is_some() {
        for (i, step) in sc.steps.iter().enumerate() {
            println!("    op {:>2}: {}", i + 1, step.what);
        }
    }
    let shown: Vec<String> = out.violations.iter().take(5).map(|v| v.to_string()).collect();
    assert!(
        out.violations.is_empty(),
        "{}: {} violating crash states, the first:\n{}",
        sc.name,
        out.violations.len(),
        shown.join("\n")
    );
    out
}

/// The crash point right after the last operation matching `pred`.
fn point_after_last(sc: &Scenario, pred: impl Fn(&ROp) -> bool) -> usize {
    sc.steps.iter().rposition(|s| pred(&s.rop)).expect("operation in trace") + 1
}

/// Assert the commit window: the new target appears no earlier than right
/// after the swap, and is the only possibility from right after the commit
/// fsync of `commit_dir`.
pub fn assert_commit_window(sc: &Scenario, out: &Outcome, commit_dir: &str) {
    let swap = point_after_last(sc, |op| {
        op.is_swap() || matches!(op, ROp::Unlink { path } if path == &sc.expect.target)
    });
    let commit = point_after_last(sc, |op| matches!(op, ROp::FsyncDir { path } if path == commit_dir));
    assert_eq!(out.stats.first_new, Some(swap), "{}: the new target appears only with the swap", sc.name);
    assert_eq!(
        out.stats.new_only_from,
        Some(commit),
        "{}: the new target is certain exactly from the commit fsync on",
        sc.name
    );
}

fn sync_call(tree: durable::Tree) -> impl FnOnce(BorrowedFd<'_>) -> Vec<ROp> {
    sync_call_with(tree, Flush::Fsync)
}

fn sync_call_with(tree: durable::Tree, flush: Flush) -> impl FnOnce(BorrowedFd<'_>) -> Vec<ROp> {
    move |root| {
        let rec = Recorder::new();
        let opts = Options { probe: &rec, flush, ..Options::default() };
        durable::sync_dir(root, "t", &tree, &opts).expect("sync");
        rec.take()
    }
}

/// A scenario's name with its flush (`sync replacing a tree (syncfs)`).
fn named(name: &str, flush: Flush) -> String {
    match flush {
        Flush::Syncfs => format!("{name} (syncfs)"),
        _ => name.to_owned(),
    }
}

/// Sync replacing an existing tree (three files for two plus a subdirectory).
pub fn replace(ex: &mut Explorer) -> Scenario {
    replace_with(ex, Flush::Fsync)
}

/// [`replace`], its staging tree made durable as `flush` says.
pub fn replace_with(ex: &mut Explorer, flush: Flush) -> Scenario {
    let old = dir(
        0o750,
        &[("x", file("old x", 0o644)), ("y", file("old y", 0o600)), ("sub/z", file("old z", 0o640))],
    );
    let new =
        dir(0o750, &[("a", file("new a", 0o644)), ("b", file("new b", 0o600)), ("c", file("new c", 0o755))]);
    let name = named("sync replacing a tree", flush);
    let sc = record(ex, &name, dir(0o755, &[("t", old)]), "t", sync_call_with(to_tree(&new), flush));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// Sync replacing a nested tree with another (`sub/dir/file`).
pub fn nested(ex: &mut Explorer) -> Scenario {
    nested_with(ex, Flush::Fsync)
}

/// [`nested`], its staging tree made durable as `flush` says.
pub fn nested_with(ex: &mut Explorer, flush: Flush) -> Scenario {
    let old = dir(0o755, &[("top", file("old top", 0o644)), ("sub/dir/file", file("old file", 0o600))]);
    let mut new = dir(
        0o755,
        &[
            ("top", file("new top", 0o644)),
            ("sub/dir/file", file("new file", 0o600)),
            ("sub/other", file("o", 0o644)),
        ],
    );
    if let Disk::Dir { entries, .. } = &mut new
        && let Some(Disk::Dir { mode, .. }) = entries.get_mut("sub")
    {
        *mode = 0o750;
    }
    let name = named("sync of a nested tree", flush);
    let sc = record(ex, &name, dir(0o755, &[("t", old)]), "t", sync_call_with(to_tree(&new), flush));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// A partial change, the common certificate rotation: of a nested tree, two
/// files are unchanged (carried by a link into staging, no fsync), one
/// changes its bytes, one only its mode (both rewritten into fresh inodes),
/// one is added and one removed.
pub fn partial(ex: &mut Explorer) -> Scenario {
    partial_with(ex, Flush::Fsync)
}

/// [`partial`], its staging tree made durable as `flush` says (with
/// syncfs: no file fsync at all, the carried names durable by the syncfs).
pub fn partial_with(ex: &mut Explorer, flush: Flush) -> Scenario {
    let old = dir(
        0o755,
        &[
            ("same", file("same bytes", 0o644)),
            ("key", file("old key", 0o600)),
            ("mode", file("mode only", 0o644)),
            ("gone", file("removed", 0o644)),
            ("sub/same", file("deep same", 0o640)),
            ("sub/dir/crt", file("old crt", 0o644)),
        ],
    );
    let new = dir(
        0o755,
        &[
            ("same", file("same bytes", 0o644)),
            ("key", file("new key!", 0o600)),
            ("mode", file("mode only", 0o600)),
            ("added", file("added", 0o644)),
            ("sub/same", file("deep same", 0o640)),
            ("sub/dir/crt", file("new crt", 0o644)),
        ],
    );
    let name = named("sync of a partial change", flush);
    let sc = record(ex, &name, dir(0o755, &[("t", old)]), "t", sync_call_with(to_tree(&new), flush));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    let linked: Vec<(String, String)> = sc
        .steps
        .iter()
        .filter_map(|s| match &s.rop {
            ROp::Link { from, to } => Some((from.clone(), crate::trace::short(to))),
            _ => None,
        })
        .collect();
    let mut sorted = linked.clone();
    sorted.sort();
    let want = [("t/same", "<stage>/same"), ("t/sub/same", "<stage>/sub/same")];
    assert_eq!(sorted, want.map(|(a, b)| (a.to_owned(), b.to_owned())), "the unchanged files are carried");
    let fsynced: Vec<String> = sc
        .steps
        .iter()
        .filter_map(|s| match &s.rop {
            ROp::FsyncFile { path } => Some(crate::trace::short(path)),
            _ => None,
        })
        .collect();
    for f in ["same", "sub/same"] {
        assert!(!fsynced.contains(&format!("<stage>/{f}")), "a carried file is not fsynced: {fsynced:?}");
    }
    let want = if flush == Flush::Syncfs { 0 } else { 4 };
    assert_eq!(fsynced.len(), want, "the changed, mode-changed and added files are (fsync): {fsynced:?}");
    sc
}

/// The commonest rotation, taking the one-file fast path: one file of a
/// nested tree changes (its bytes, or with `mode_only` only its
/// mode, at the top of the target). A temporary file in the parent is
/// fsynced, renamed over the file, and the directory holding it fsynced.
pub fn one_file(ex: &mut Explorer, mode_only: bool) -> Scenario {
    let old = dir(
        0o755,
        &[
            ("same", file("same bytes", 0o644)),
            ("top", file("top", 0o644)),
            ("sub/same", file("deep same", 0o640)),
            ("sub/key", file("old key", 0o600)),
        ],
    );
    let mut new = old.clone();
    let (changed, node) =
        if mode_only { ("top", file("top", 0o600)) } else { ("sub/key", file("new key, longer", 0o600)) };
    new.insert(changed, node);
    let name = if mode_only { "sync of one file's mode" } else { "sync of one file's bytes" };
    let sc = record(ex, name, dir(0o755, &[("t", old)]), "t", sync_call(to_tree(&new)));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    let durable: Vec<String> = sc
        .steps
        .iter()
        .filter(|s| !matches!(s.rop, ROp::Create { .. } | ROp::Write { .. } | ROp::Chmod { .. }))
        .filter(|s| !matches!(&s.rop, ROp::Lock { .. }))
        .filter(|s| !matches!(&s.rop, ROp::Unlink { path } | ROp::Create { path } if path.starts_with(".durasync-unsynced-")))
        .map(|s| s.rop.to_string())
        .collect();
    let dir_of = if mode_only { "t" } else { "t/sub" };
    let want = [
        "fsync-file <tmp>".to_owned(),
        format!("rename(replace) <tmp> -> t/{changed}"),
        format!("fsync-dir {dir_of}"),
    ];
    assert_eq!(durable, want, "{name}: no staging tree, two fsyncs");
    sc
}

/// A one-file change whose commit fsync (of the directory holding the file)
/// fails with EIO, then the same sync again: the retry sees the target
/// marked and runs the full sequence.
pub fn one_file_retry(ex: &mut Explorer) -> Scenario {
    let old = dir(0o755, &[("x", file("x", 0o644)), ("sub/key", file("old key", 0o600))]);
    let mut new = old.clone();
    new.insert("sub/key", file("new key", 0o600));
    let tree = to_tree(&new);
    let sc = record(
        ex,
        "one-file sync, failed commit fsync, retry",
        dir(0o755, &[("t", old)]),
        "t",
        move |root| {
            let rec = Recorder::failing_fsync_of("t/sub");
            let opts = Options { probe: &rec, ..Options::default() };
            let err = durable::sync_dir(root, "t", &tree, &opts).expect_err("the commit fsync fails");
            assert!(matches!(err, durable::Error::Committed { durable: false, .. }), "{err}");
            durable::sync_dir(root, "t", &tree, &opts).expect("the retry");
            rec.take()
        },
    );
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    assert!(sc.steps.iter().any(|s| matches!(s.rop, ROp::Exchange { .. })), "the retry is a full sync");
    sc
}

/// Sync replacing a tree while an earlier crash's staging (holding what
/// would have been the next tree) is still beside it: it must be removed,
/// never swapped in.
pub fn stale_leftover(ex: &mut Explorer) -> Scenario {
    let old = dir(0o755, &[("a", file("old a", 0o644))]);
    let stale = dir(0o755, &[("a", file("stale a", 0o644)), ("s/b", file("stale b", 0o644))]);
    let new = dir(0o755, &[("a", file("new a", 0o644)), ("b", file("new b", 0o644))]);
    let initial = dir(0o755, &[("t", old), (&leftover_name(Leftover::Stage), stale)]);
    let sc = record(ex, "sync beside a stale staging", initial, "t", sync_call(to_tree(&new)));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// First-time sync: the target does not exist yet.
pub fn create(ex: &mut Explorer) -> Scenario {
    create_with(ex, Flush::Fsync)
}

/// [`create`], its staging tree made durable as `flush` says.
pub fn create_with(ex: &mut Explorer, flush: Flush) -> Scenario {
    let new = dir(0o755, &[("a", file("first a", 0o644)), ("b", file("first b", 0o600))]);
    let name = named("first-time sync", flush);
    let sc = record(ex, &name, Disk::dir(0o755), "t", sync_call_with(to_tree(&new), flush));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// `create_dirs_beneath("a/b")`, then a first sync of `a/b/t`.
pub fn fresh_parents(ex: &mut Explorer) -> Scenario {
    let new = dir(0o755, &[("f", file("deep", 0o644))]);
    let tree = to_tree(&new);
    let mut split = 0;
    let mut sc = record(ex, "create_dirs_beneath + sync", Disk::dir(0o755), "a/b/t", |root| {
        let rec = Recorder::new();
        let parent =
            durable::create_dirs_beneath(root, "a/b", &Options { probe: &rec, ..Options::default() })
                .expect("create dirs");
        let mut trace = rec.take();
        split = trace.len();
        let rec = Recorder::under("a/b");
        durable::sync_dir(parent.as_fd(), "t", &tree, &Options { probe: &rec, ..Options::default() })
            .expect("sync");
        trace.extend(rec.take());
        trace
    });
    // Once create_dirs_beneath returned, both directories are durable.
    sc.expect.dirs_from = vec![(split, "a".into(), 0o755), (split, "a/b".into(), 0o755)];
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

fn write_call(contents: &'static str, mode: Option<u32>) -> impl FnOnce(BorrowedFd<'_>) -> Vec<ROp> {
    move |root| {
        let rec = Recorder::new();
        let opts = Options { probe: &rec, ..Options::default() };
        durable::write_file(root, "f", contents.as_bytes(), mode, &opts).expect("write");
        rec.take()
    }
}

/// Single-file write replacing an existing file (new bytes and mode).
pub fn write_replace(ex: &mut Explorer) -> Scenario {
    let initial = dir(0o755, &[("f", file("old manifest", 0o644))]);
    let sc = record(ex, "single-file replace", initial, "f", write_call("new manifest", Some(0o600)));
    assert_eq!(sc.expect.new, Some(file("new manifest", 0o600)));
    sc
}

/// Single-file write creating the file.
pub fn write_create(ex: &mut Explorer) -> Scenario {
    let sc = record(ex, "single-file create", Disk::dir(0o755), "f", write_call("fresh", None));
    assert_eq!(sc.expect.new, Some(file("fresh", 0o644)));
    sc
}

fn remove_call(root: BorrowedFd<'_>) -> Vec<ROp> {
    let rec = Recorder::new();
    durable::remove(root, "d", &Options { probe: &rec, ..Options::default() })
        .expect("remove")
        .expect("removed");
    rec.take()
}

/// Durable removal of a directory tree.
pub fn remove_dir(ex: &mut Explorer) -> Scenario {
    let d = dir(0o755, &[("p", file("p", 0o644)), ("q/r", file("r", 0o600))]);
    let sc = record(ex, "directory removal", dir(0o755, &[("d", d)]), "d", remove_call);
    assert_eq!(sc.expect.new, None);
    sc
}

/// Durable removal of a single file.
pub fn remove_file(ex: &mut Explorer) -> Scenario {
    let sc = record(ex, "file removal", dir(0o755, &[("d", file("gone", 0o644))]), "d", remove_call);
    assert_eq!(sc.expect.new, None);
    sc
}

/// `recover` of leftovers planted by hand: staging with nested files and
/// links pointing out of it (one at the target), a temp file, a trash tree,
/// a leftover in a subdirectory durasync works in (it holds a lock file),
/// and a look-alike that is not a leftover.
pub fn planted(ex: &mut Explorer) -> Scenario {
    let stage = leftover_name(Leftover::Stage);
    let tmp = leftover_name(Leftover::Tmp);
    let trash = leftover_name(Leftover::Trash);
    let nested_tmp = leftover_name(Leftover::Tmp);
    let t = dir(0o755, &[("a", file("live a", 0o644))]);
    let initial = dir(
        0o755,
        &[
            ("t", t),
            (&format!("{stage}/a"), file("", 0o600)),
            (&format!("{stage}/sub/b"), file("half", 0o600)),
            (&format!("{stage}/lk"), Disk::Link { target: "../keep.txt".into() }),
            (&format!("{stage}/ldir"), Disk::Link { target: "../t".into() }),
            (&format!("{trash}/x/y"), file("y", 0o644)),
            (&tmp, file("partial", 0o600)),
            ("other/k", file("k", 0o644)),
            (&format!("other/{nested_tmp}"), file("tmp", 0o600)),
            // durasync locks a directory before it makes a leftover there.
            (&format!("other/{LOCK_NAME}"), file("", 0o600)),
            (".durasync-stage-notaleftover/z", file("z", 0o644)),
        ],
    );
    let mut sc = record(ex, "recover of planted leftovers", initial, "t", |root| {
        let rec = Recorder::new();
        let removed =
            durable::recover(root, &Options { probe: &rec, ..Options::default() }).expect("recover");
        assert_eq!(removed.len(), 4, "{removed:?}");
        rec.take()
    });
    for keep in ["other/k", ".durasync-stage-notaleftover"] {
        sc.expect.keep.push((keep.to_owned(), sc.initial.get(keep).cloned()));
    }
    assert_eq!(sc.expect.new, sc.expect.old);
    sc
}

/// A sync whose commit fsync fails with EIO ("fsyncgate": the swap may
/// never reach the disk, and a later fsync of the parent would not write
/// it), then the same sync again, as the caller's retry.
pub fn sync_retry(ex: &mut Explorer) -> Scenario {
    let old = dir(0o755, &[("x", file("old x", 0o644)), ("sub/y", file("old y", 0o600))]);
    let new = dir(0o755, &[("a", file("new a", 0o644)), ("sub/y", file("new y, longer", 0o600))]);
    let tree = to_tree(&new);
    let sc = record(ex, "sync, failed commit fsync, retry", dir(0o755, &[("t", old)]), "t", move |root| {
        let rec = Recorder::failing_fsync_of(".");
        let opts = Options { probe: &rec, ..Options::default() };
        let err = durable::sync_dir(root, "t", &tree, &opts).expect_err("the commit fsync fails");
        assert!(matches!(err, durable::Error::Committed { durable: false, .. }), "{err}");
        durable::sync_dir(root, "t", &tree, &opts).expect("the retry");
        rec.take()
    });
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// A smaller [`nested`] for the syncfs flush: with one `syncfs` and no
/// fsync before it, every entry, byte and mode of the staging tree is
/// pending at once, so the crash states multiply; this tree keeps them
/// below [`crate::model::STATES_CAP`] and still nests two levels.
pub fn syncfs_nested(ex: &mut Explorer) -> Scenario {
    let old = dir(0o755, &[("top", file("old top", 0o644))]);
    let new = dir(0o755, &[("top", file("new top", 0o644)), ("sub/dir/file", file("deep", 0o600))]);
    let name = "sync of a nested tree (syncfs)";
    let sc = record(ex, name, dir(0o755, &[("t", old)]), "t", sync_call_with(to_tree(&new), Flush::Syncfs));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// A smaller [`partial`] for the syncfs flush (see [`syncfs_nested`]): a
/// carried file at the top and one in a subdirectory (their new names
/// durable by the syncfs alone), a changed, an added and a removed file.
pub fn syncfs_partial(ex: &mut Explorer) -> Scenario {
    let old = dir(
        0o755,
        &[
            ("same", file("same bytes", 0o644)),
            ("key", file("old key", 0o600)),
            ("gone", file("removed", 0o644)),
            ("sub/same", file("deep same", 0o640)),
        ],
    );
    let new = dir(
        0o755,
        &[
            ("same", file("same bytes", 0o644)),
            ("key", file("new key!", 0o600)),
            ("added", file("added", 0o644)),
            ("sub/same", file("deep same", 0o640)),
        ],
    );
    let name = "sync of a partial change (syncfs)";
    let sc = record(ex, name, dir(0o755, &[("t", old)]), "t", sync_call_with(to_tree(&new), Flush::Syncfs));
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    let linked = sc.steps.iter().filter(|s| matches!(s.rop, ROp::Link { .. })).count();
    assert_eq!(linked, 2, "the unchanged files are carried");
    sc
}

/// A sync with the syncfs flush whose `syncfs` fails with EIO (any inode's
/// pending pages may be gone for good), then the same sync again: the
/// failure is before the swap, so nothing changed, and the retry stages
/// everything into fresh inodes.
pub fn syncfs_retry(ex: &mut Explorer) -> Scenario {
    let old = dir(0o755, &[("x", file("old x", 0o644)), ("same", file("same", 0o644))]);
    let new = dir(
        0o755,
        &[("a", file("new a", 0o644)), ("same", file("same", 0o644)), ("sub/y", file("y", 0o600))],
    );
    let tree = to_tree(&new);
    let sc = record(ex, "sync (syncfs), failed syncfs, retry", dir(0o755, &[("t", old)]), "t", move |root| {
        let rec = Recorder::failing_syncfs();
        let opts = Options { probe: &rec, flush: Flush::Syncfs, ..Options::default() };
        let err = durable::sync_dir(root, "t", &tree, &opts).expect_err("the syncfs fails");
        assert!(matches!(err, durable::Error::Io { step: durable::Step::Syncfs, .. }), "{err}");
        durable::sync_dir(root, "t", &tree, &opts).expect("the retry");
        rec.take()
    });
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    sc
}

/// A single-file write whose commit fsync fails, then the same write again.
pub fn write_retry(ex: &mut Explorer) -> Scenario {
    let initial = dir(0o755, &[("f", file("old manifest", 0o644))]);
    let sc = record(ex, "write, failed commit fsync, retry", initial, "f", |root| {
        let rec = Recorder::failing_fsync_of(".");
        let opts = Options { probe: &rec, ..Options::default() };
        let err = durable::write_file(root, "f", b"new manifest", None, &opts).expect_err("the commit fails");
        assert!(matches!(err, durable::Error::Committed { durable: false, .. }), "{err}");
        durable::write_file(root, "f", b"new manifest", None, &opts).expect("the retry");
        rec.take()
    });
    assert_eq!(sc.expect.new, Some(file("new manifest", 0o644)));
    sc
}

/// Explore a failed-commit-then-retry scenario: old or new everywhere, new
/// only from the retry's commit fsync on; and the same trace cut right
/// after the failed fsync (a retry that trusts the page cache and does
/// nothing) must end in a violation, or the model could not see the bug.
fn explore_retry(ex: &mut Explorer, sc: &Scenario) {
    let out = explore_ok(ex, sc);
    let failed =
        sc.steps.iter().position(|s| matches!(s.rop, ROp::FsyncFail { .. })).expect("a failed fsync");
    let commit = point_after_last(sc, |op| matches!(op, ROp::FsyncDir { path } if path == "."));
    assert!(commit > failed + 1, "{}: the retry commits after the failure", sc.name);
    assert_eq!(
        out.stats.new_only_from,
        Some(commit),
        "{}: new is certain from the retry's commit on",
        sc.name
    );
    let trusting = &sc.steps[..=failed];
    let cut = ex.explore(sc, trusting, Opts { stop_at_first: true, recovery_crashes: 0 });
    let v = cut.violations.first().expect("a retry that does nothing after a failed fsync is caught");
    println!("[crash] {}: a retry answering `unchanged` is caught: {v}", sc.name);
}

#[test]
fn a_sync_retried_after_a_failed_commit_fsync_ends_durable_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = sync_retry(&mut ex);
    explore_retry(&mut ex, &sc);
    // The failed call's old tree waits at its staging name, but on disk it
    // may still be the target: the retry removes it only after its own
    // commit. Moving that removal before the retry's staging must be caught.
    let failed = sc.steps.iter().position(|s| matches!(s.rop, ROp::FsyncFail { .. })).expect("failed fsync");
    let old_at = sc.steps[..failed]
        .iter()
        .find_map(|s| match &s.rop {
            ROp::Exchange { a, .. } => Some(a.clone()),
            _ => None,
        })
        .expect("the failed call's exchange");
    let in_old = |rop: &ROp| match rop {
        ROp::Unlink { path } | ROp::Rmdir { path } | ROp::Chmod { path, .. } => {
            path == &old_at || path.starts_with(&format!("{old_at}/"))
        }
        _ => false,
    };
    let (early, rest): (Vec<_>, Vec<_>) =
        sc.steps[failed + 1..].iter().cloned().partition(|s| in_old(&s.rop));
    assert!(!early.is_empty(), "the retry removes the old tree");
    let mut steps = sc.steps[..=failed].to_vec();
    // Right after the retry's lock, where it would remove stale leftovers.
    let mut rest = rest.into_iter();
    steps.extend(rest.next());
    steps.extend(early);
    steps.extend(rest);
    let out = ex.explore(&sc, &steps, Opts { stop_at_first: true, recovery_crashes: 0 });
    let v = out.violations.first().expect("removing the old tree before the retry's commit is caught");
    println!("[crash] {}: removing leftovers before the retry's commit is caught: {v}", sc.name);
}

#[test]
fn a_write_retried_after_a_failed_commit_fsync_ends_durable_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = write_retry(&mut ex);
    explore_retry(&mut ex, &sc);
}

#[test]
fn sync_replacing_a_tree_is_old_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = replace(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
    assert!(out.stats.recovery_runs > 0, "no crashed state had leftovers to recover");
}

#[test]
fn a_partial_change_carrying_unchanged_files_is_old_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = partial(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
    assert!(out.stats.recovery_runs > 0, "no crashed state had leftovers to recover");
}

#[test]
fn a_one_file_change_replacing_just_that_file_is_old_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    for (mode_only, dir) in [(false, "t/sub"), (true, "t")] {
        let sc = one_file(&mut ex, mode_only);
        let out = explore_ok(&mut ex, &sc);
        assert_commit_window(&sc, &out, dir);
        assert!(out.stats.recovery_runs > 0, "no crashed state had a temporary file to recover");
    }
}

#[test]
fn a_one_file_change_retried_after_a_failed_commit_fsync_ends_durable_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = one_file_retry(&mut ex);
    explore_retry(&mut ex, &sc);
}

#[test]
fn sync_beside_a_stale_staging_never_swaps_it_in_at_any_crash_point() {
    let mut ex = Explorer::new();
    let sc = stale_leftover(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn nested_tree_sync_is_old_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = nested(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn first_sync_creates_the_target_all_or_nothing_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = create(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn sync_into_freshly_created_parents_is_durable_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = fresh_parents(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, "a/b");
}

#[test]
fn single_file_replace_is_old_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = write_replace(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn single_file_create_is_missing_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = write_create(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn directory_removal_is_all_or_nothing_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = remove_dir(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn file_removal_is_all_or_nothing_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = remove_file(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}

#[test]
fn recovery_of_planted_leftovers_is_idempotent_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = planted(&mut ex);
    explore_ok(&mut ex, &sc);
}

#[test]
fn a_sync_flushed_by_one_syncfs_is_old_or_new_at_every_crash_point() {
    let mut ex = Explorer::new();
    let scs = [
        replace_with(&mut ex, Flush::Syncfs),
        syncfs_nested(&mut ex),
        syncfs_partial(&mut ex),
        create_with(&mut ex, Flush::Syncfs),
    ];
    for sc in &scs {
        let syncfs = sc.steps.iter().filter(|s| matches!(s.rop, ROp::Syncfs { .. })).count();
        let fsyncs: Vec<&str> = sc
            .steps
            .iter()
            .filter(|s| matches!(s.rop, ROp::FsyncFile { .. } | ROp::FsyncDir { .. }))
            .map(|s| s.what.as_str())
            .collect();
        assert_eq!(syncfs, 1, "{}: one syncfs", sc.name);
        assert_eq!(fsyncs, ["fsync-dir ."], "{}: and only the commit fsync", sc.name);
        let out = explore_ok(&mut ex, sc);
        assert_commit_window(sc, &out, ".");
    }
}

#[test]
fn a_sync_retried_after_a_failed_syncfs_ends_durable_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = syncfs_retry(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    let failed =
        sc.steps.iter().position(|s| matches!(s.rop, ROp::SyncfsFail { .. })).expect("a failed syncfs");
    let swaps: Vec<usize> =
        sc.steps.iter().enumerate().filter(|(_, s)| s.rop.is_swap()).map(|(i, _)| i).collect();
    assert!(swaps.len() == 1 && swaps[0] > failed, "only the retry swaps: {swaps:?}");
    assert_commit_window(&sc, &out, ".");

    // The control: ignoring the failed syncfs and swapping the failed
    // batch's staging tree in anyway (its pages may be gone) must be caught.
    let staging = sc.steps[..failed]
        .iter()
        .find_map(|s| match &s.rop {
            ROp::Mkdir { path } if durasync::durable::names::is_leftover(path) => Some(path.clone()),
            _ => None,
        })
        .expect("the failed batch's staging");
    let mut trace: Vec<ROp> = sc.steps[..=failed].iter().map(|s| s.rop.clone()).collect();
    trace.push(ROp::Exchange { a: staging, b: "t".into() });
    trace.push(ROp::FsyncDir { path: ".".into() });
    let ignoring = lower(&Model::from_disk(&sc.initial), &trace);
    let cut = ex.explore(&sc, &ignoring, Opts { stop_at_first: true, recovery_crashes: 0 });
    let v = cut.violations.first().expect("committing the batch of a failed syncfs is caught");
    println!("[crash] {}: committing after the failed syncfs is caught: {v}", sc.name);
}
