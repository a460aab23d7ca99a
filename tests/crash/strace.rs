//! Strace audit: run the real `durasync sync` binary under `strace -f -y`,
//! extract its durable sequence (file fsyncs, directory fsyncs, links of
//! carried files, the `renameat2` flags, their order) and check it is the
//! sequence the explorer verified for the same trees: N + D + 2 fsyncs for N
//! new or changed files (the unchanged ones are linked, never fsynced) and D
//! new subdirectories, every staging fsync completed before the swap, exactly one
//! fsync after it, of the parent. A second identical sync must issue no
//! fsync and no rename at all.
//!
//! A change of exactly one file takes the fast path, audited line by line:
//! fsync of the temporary file beside the target, the rename over the file,
//! fsync of the directory holding it.
//!
//! The same audit covers a single-file `write` (create and replace), and a
//! plugin's `sync` and `remove` through `durasync run` (certsync).
//!
//! Keeping a previous tree and reverting to it (`sync --keep-previous`,
//! `rollback`) are audited the same way, line by line; the revert with
//! its unlinks traced too: the exchange, then the parent's fsync, and only
//! then any removal inside the replaced tree.
//!
//! Skipped, loudly, when `strace` is not installed (`.ci/run` installs it);
//! under CI (`CI=true`) that is a failure instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::explorer::{Explorer, Opts};
use crate::model::{Disk, materialise};
use crate::scenarios::{self, dir, file};
use crate::support::{durasync, sha256_of_file};
use crate::trace::{DurableSeq, Event, ROp, Recorder, staging_rel};

/// The syscalls that can make anything durable or move a name.
/// (and `link`/`linkat`, how an unchanged file is carried into staging).
const TRACED: &str =
    "trace=fsync,fdatasync,sync,syncfs,sync_file_range,msync,rename,renameat,renameat2,link,linkat";

fn strace_available() -> bool {
    let ok = Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        crate::cannot_check("strace is not installed; the strace audit did NOT run");
    }
    ok
}

/// One traced system call, completed.
#[derive(Debug, Clone)]
struct Call {
    name: String,
    args: String,
    ret: String,
}

/// Run `durasync ARGS` under strace; the completed calls in completion
/// order (a call interrupted by another thread's is placed where it returned).
fn strace(work: &Path, args: &[&Path]) -> Vec<Call> {
    strace_with(work, args, TRACED)
}

/// [`strace`] of the calls `traced` (an `-e trace=` expression).
fn strace_with(work: &Path, args: &[&Path], traced: &str) -> Vec<Call> {
    let log = work.join(format!("strace-{}.log", std::process::id()));
    let out = Command::new("strace")
        .args(["-f", "-y", "-qq", "-e", traced, "-o"])
        .arg(&log)
        .arg(durasync())
        .args(args)
        .output()
        .expect("running strace");
    assert!(
        out.status.success(),
        "durasync under strace failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).expect("strace log");
    let _ = std::fs::remove_file(&log);
    parse(&text)
}

fn parse(text: &str) -> Vec<Call> {
    let mut pending: std::collections::HashMap<String, String> = Default::default();
    let mut calls = Vec::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else { continue };
        let rest = rest.trim_start();
        let full = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), start.to_owned());
            continue;
        } else if let Some(resumed) = rest.strip_prefix("<... ") {
            let (_, tail) = resumed.split_once(" resumed>").expect("resumed line");
            let start = pending.remove(pid).unwrap_or_else(|| panic!("resumed without start: {line}"));
            format!("{start}{tail}")
        } else if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        } else {
            rest.to_owned()
        };
        let (name, after) = full.split_once('(').unwrap_or_else(|| panic!("unparsed strace line: {line}"));
        // strace pads `) = 0` with spaces when it reassembles an interrupted call.
        let (args, ret) = after.rsplit_once(')').unwrap_or_else(|| panic!("no return value: {line}"));
        let ret = ret.trim().strip_prefix('=').unwrap_or_else(|| panic!("no return value: {line}"));
        calls.push(Call { name: name.to_owned(), args: args.to_owned(), ret: ret.trim().to_owned() });
    }
    calls
}

/// The path `-y` prints for the fd in the first argument.
fn fd_path(args: &str) -> String {
    fd_path_of(args.split(", ").next().unwrap_or(args))
}

/// The path `-y` prints for one fd argument (`3</a/b>`).
fn fd_path_of(first: &str) -> String {
    let start = first.find('<').expect("fd path (strace -y)");
    let end = first.rfind('>').expect("fd path end");
    first[start + 1..end].to_owned()
}

/// The durable sequence of a traced sync of `target` whose new contents
/// are `new` (used to tell a directory's fsync from a file's).
fn durable_seq(calls: &[Call], target: &Path, new: &Disk) -> DurableSeq {
    let parent = target.parent().expect("target parent").to_str().expect("utf-8").to_owned();
    let mut events = Vec::new();
    for call in calls {
        assert_eq!(call.ret, "0", "{} failed: {call:?}", call.name);
        match call.name.as_str() {
            "fsync" => {
                let path = fd_path(&call.args);
                let rel = path
                    .strip_prefix(&parent)
                    .map(|r| r.trim_start_matches('/'))
                    .unwrap_or_else(|| panic!("fsync outside the target's parent: {path}"));
                let rel = staging_rel(rel);
                let is_dir = rel == "<parent>" || matches!(new.get(&rel), Some(Disk::Dir { .. }));
                assert!(
                    rel == "<parent>" || new.get(&rel).is_some(),
                    "fsync of something neither staging nor parent: {path}"
                );
                events.push(if is_dir { Event::FsyncDir(rel) } else { Event::FsyncFile(rel) });
            }
            "renameat2" => {
                let flags = call.args.rsplit(", ").next().unwrap_or_default().to_owned();
                events.push(Event::Swap(flags));
            }
            "syncfs" => {
                let path = fd_path(&call.args);
                let rel = path
                    .strip_prefix(&parent)
                    .map(|r| r.trim_start_matches('/'))
                    .unwrap_or_else(|| panic!("syncfs through an fd outside the target's parent: {path}"));
                events.push(Event::Syncfs(staging_rel(rel)));
            }
            "linkat" => {
                let (from, to) = link_paths(&call.args);
                let to = to.strip_prefix(&parent).map(|r| r.trim_start_matches('/')).unwrap_or_else(|| {
                    panic!("a link outside the target's parent: {to}");
                });
                assert!(
                    from.starts_with(target.to_str().expect("utf-8")),
                    "a link from outside the target: {from}"
                );
                events.push(Event::Link(staging_rel(to)));
            }
            other => panic!("unexpected durability or rename call {other}({})", call.args),
        }
    }
    DurableSeq::from_events(&events)
}

/// The full paths of `linkat(OLDDIRFD, "old", NEWDIRFD, "new", 0)` (`-y`).
fn link_paths(args: &str) -> (String, String) {
    let a: Vec<&str> = args.split(", ").collect();
    assert_eq!(a.len(), 5, "linkat arguments: {args}");
    assert_eq!(a[4], "0", "linkat never follows a link: {args}");
    let full = |fd: &str, name: &str| format!("{}/{}", fd_path_of(fd), name.trim_matches('"'));
    (full(a[0], a[1]), full(a[2], a[3]))
}

/// The sequence the explorer verified for the same call: explore the
/// recorded trace (it must have no violation) and reduce it.
fn explored_seq(ex: &mut Explorer, sc: &crate::explorer::Scenario) -> DurableSeq {
    let out = ex.explore(sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
    assert!(out.violations.is_empty(), "{}: {}", sc.name, out.violations[0]);
    let trace: Vec<ROp> = sc.steps.iter().map(|s| s.rop.clone()).collect();
    DurableSeq::from_trace(&trace)
}

/// A work directory with `old` (if any) at `t` and `new` at `src`.
fn setup(old: Option<&Disk>, new: &Disk) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let work =
        tempfile::Builder::new().prefix("crash-strace-").tempdir_in(crate::tmp_base()).expect("tempdir");
    let parent = work.path().join("p");
    std::fs::create_dir(&parent).expect("mkdir");
    let (target, src) = (parent.join("t"), work.path().join("src"));
    if let Some(old) = old {
        materialise(old, &target);
    }
    materialise(new, &src);
    (work, target, src)
}

/// Check a sync's sequence: every file of `new` but the `carried` ones
/// fsynced once, the carried ones linked and not fsynced, each new directory
/// and the staging root fsynced, one swap, then the parent's fsync.
fn assert_seq(seq: &DurableSeq, new: &Disk, swap: &str, carried: &[&str]) {
    let all =
        new.paths_where(&|_| true).into_iter().filter(|p| matches!(new.get(p), Some(Disk::File { .. })));
    let all: std::collections::BTreeSet<String> = all.collect();
    let dirs = new.paths_where(&|_| true).len() - all.len();
    let carried: std::collections::BTreeSet<String> = carried.iter().map(|s| (*s).to_owned()).collect();
    let files: std::collections::BTreeSet<String> = all.difference(&carried).cloned().collect();
    assert_eq!(seq.swaps, 1, "{seq:?}");
    assert_eq!(seq.swap, swap, "{seq:?}");
    assert_eq!(seq.links, carried, "exactly the unchanged files are carried by a link");
    assert_eq!(seq.file_fsyncs, files, "every new or changed file is fsynced once before the swap");
    assert_eq!(seq.dir_fsyncs.len(), dirs + 1, "each new directory and the staging root: {seq:?}");
    assert_eq!(seq.after_swap, ["<parent>"], "exactly one fsync after the swap, of the parent");
    assert!(seq.root_fsync_last, "the staging root is fsynced last before the swap: {seq:?}");
    assert!(seq.files_before_dirs, "file fsyncs complete before directory fsyncs: {seq:?}");
    assert_eq!(seq.fsyncs(), files.len() + dirs + 2, "N + D + 2 fsyncs for N new or changed files");
}

fn sync_args<'a>(target: &'a Path, src: &'a Path) -> [&'a Path; 4] {
    [Path::new("sync"), target, Path::new("--from"), src]
}

#[test]
fn strace_of_a_nested_sync_matches_the_explored_sequence_and_a_repeat_does_nothing() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    let sc = scenarios::nested(&mut ex);
    let (old, new) = (sc.expect.old.clone().expect("old"), sc.expect.new.clone().expect("new"));
    let explored = explored_seq(&mut ex, &sc);
    assert_seq(&explored, &new, "RENAME_EXCHANGE", &[]);

    let (work, target, src) = setup(Some(&old), &new);
    let calls = strace(work.path(), &sync_args(&target, &src));
    let traced = durable_seq(&calls, &target, &new);
    println!("[strace] nested sync: {} fsyncs, swap {}: {traced:?}", traced.fsyncs(), traced.swap);
    assert_eq!(traced, explored, "the binary's durable sequence is the explored one");
    assert_seq(&traced, &new, "RENAME_EXCHANGE", &[]);

    let again = strace(work.path(), &sync_args(&target, &src));
    println!("[strace] identical second sync: {} durability/rename calls", again.len());
    assert!(again.is_empty(), "an unchanged sync issues no fsync and no rename: {again:?}");
}

#[test]
fn strace_of_a_partial_change_links_the_unchanged_files_and_matches_the_explored_sequence() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    let sc = scenarios::partial(&mut ex);
    let (old, new) = (sc.expect.old.clone().expect("old"), sc.expect.new.clone().expect("new"));
    let explored = explored_seq(&mut ex, &sc);
    let carried = ["same", "sub/same"];
    assert_seq(&explored, &new, "RENAME_EXCHANGE", &carried);

    let (work, target, src) = setup(Some(&old), &new);
    let traced = durable_seq(&strace(work.path(), &sync_args(&target, &src)), &target, &new);
    println!(
        "[strace] partial change: {} fsyncs, {} links, swap {}: {traced:?}",
        traced.fsyncs(),
        traced.links.len(),
        traced.swap
    );
    assert_eq!(traced, explored, "the binary's durable sequence is the explored one");
    assert_seq(&traced, &new, "RENAME_EXCHANGE", &carried);
    assert_eq!(crate::model::snapshot(&target), new);
}

#[test]
fn strace_of_a_one_file_change_matches_the_explored_fast_path_and_a_repeat_does_nothing() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    for mode_only in [false, true] {
        let sc = scenarios::one_file(&mut ex, mode_only);
        let out = ex.explore(&sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
        assert!(out.violations.is_empty(), "{}: {}", sc.name, out.violations[0]);
        let explored: Vec<ROp> = sc.steps.iter().map(|s| s.rop.clone()).collect();
        let (old, new) = (sc.expect.old.clone().expect("old"), sc.expect.new.clone().expect("new"));
        let (work, target, src) = setup(Some(&old), &new);
        let parent = target.parent().expect("parent").to_path_buf();
        let traced = tokens_of_calls(&strace(work.path(), &sync_args(&target, &src)), &parent);
        println!("[strace] {}: {traced:?}", sc.name);
        assert_eq!(
            traced,
            tokens_of_trace(&explored),
            "{}: the binary's sequence is the explored one",
            sc.name
        );
        let changed = if mode_only { "t/top" } else { "t/sub/key" };
        let dir = if mode_only { "t" } else { "t/sub" };
        let want =
            ["fsync <tmp>".to_owned(), format!("rename(replace) <tmp> -> {changed}"), format!("fsync {dir}")];
        assert_eq!(traced, want, "the new file's fsync, the rename, the commit fsync of its directory");
        assert_eq!(crate::model::snapshot(&target), new);
        let again = strace(work.path(), &sync_args(&target, &src));
        assert!(again.is_empty(), "an unchanged sync issues no fsync and no rename: {again:?}");
    }
}

#[test]
fn strace_of_a_first_sync_matches_the_explored_sequence() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    let sc = scenarios::create(&mut ex);
    let new = sc.expect.new.clone().expect("new");
    let explored = explored_seq(&mut ex, &sc);
    let (work, target, src) = setup(None, &new);
    let traced = durable_seq(&strace(work.path(), &sync_args(&target, &src)), &target, &new);
    println!("[strace] first sync: {} fsyncs, swap {}", traced.fsyncs(), traced.swap);
    assert_eq!(traced, explored);
    assert_seq(&traced, &new, "RENAME_NOREPLACE", &[]);
}

#[test]
fn strace_of_a_syncfs_sync_matches_the_explored_sequence() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    for sc in [scenarios::syncfs_nested(&mut ex), scenarios::syncfs_partial(&mut ex)] {
        let (old, new) = (sc.expect.old.clone().expect("old"), sc.expect.new.clone().expect("new"));
        let explored = explored_seq(&mut ex, &sc);
        let (work, target, src) = setup(Some(&old), &new);
        let mut args = sync_args(&target, &src).to_vec();
        args.extend([Path::new("--flush"), Path::new("syncfs")]);
        let traced = durable_seq(&strace(work.path(), &args), &target, &new);
        println!("[strace] {}: {traced:?}", sc.name);
        assert_eq!(traced, explored, "{}: the binary's durable sequence is the explored one", sc.name);
        assert_eq!(traced.syncfs, ["."], "one syncfs, through the staging root");
        assert!(traced.file_fsyncs.is_empty() && traced.dir_fsyncs.is_empty(), "{traced:?}");
        assert!(traced.syncfs_last, "the syncfs is the last flush before the swap");
        assert_eq!((traced.swaps, traced.swap.as_str()), (1, "RENAME_EXCHANGE"));
        assert_eq!(traced.after_swap, ["<parent>"], "then only the commit fsync");
        assert_eq!(crate::model::snapshot(&target), new);
    }
}

#[test]
fn strace_of_100_files_into_an_existing_target_shows_100_file_and_2_dir_fsyncs() {
    if !strace_available() {
        return;
    }
    let block = |i: usize| "x".repeat(4096 - 8) + &format!("{i:08}");
    let files: Vec<(String, Disk)> = (0..100).map(|i| (format!("f{i:03}"), file(&block(i), 0o644))).collect();
    let refs: Vec<(&str, Disk)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    let new = dir(0o755, &refs);
    let old = dir(0o755, &[("old", file("old", 0o644))]);

    // The same call in-process, recorded through the probe.
    let (work, target, src) = setup(Some(&old), &new);
    let recorded = {
        let rec = Recorder::new();
        let parent = std::fs::File::open(target.parent().expect("parent")).expect("open");
        let flush = durasync::durable::Flush::Fsync;
        let opts = durasync::durable::Options { probe: &rec, flush, ..Default::default() };
        let tree = scenarios::to_tree(&new);
        durasync::durable::sync_dir(std::os::fd::AsFd::as_fd(&parent), "t", &tree, &opts).expect("sync");
        materialise_again(&target, &old);
        DurableSeq::from_trace(&rec.take())
    };
    let mut args = sync_args(&target, &src).to_vec();
    args.extend([Path::new("--flush"), Path::new("fsync")]);
    let traced = durable_seq(&strace(work.path(), &args), &target, &new);
    let file_fsyncs = traced.file_fsyncs.len();
    println!("[strace] 100 x 4 KiB: {file_fsyncs} file fsyncs, {} dir fsyncs", traced.fsyncs() - file_fsyncs);
    assert_eq!(file_fsyncs, 100);
    assert_eq!(traced.fsyncs() - file_fsyncs, 2, "the staging directory and the parent");
    assert_seq(&traced, &new, "RENAME_EXCHANGE", &[]);
    assert_eq!(traced, recorded, "the binary's sequence is the probe's");
}

/// Put `old` back at `target` (replacing what is there).
fn materialise_again(target: &Path, old: &Disk) {
    std::fs::remove_dir_all(target).expect("remove");
    materialise(old, target);
}

/// A durable step as one comparable line: fsyncs and renames, paths
/// relative to the parent (`.`), leftover names shortened (`<tmp>`).
fn tokens_of_calls(calls: &[Call], parent: &Path) -> Vec<String> {
    let parent = parent.to_str().expect("utf-8");
    let rel = |path: &str| -> String {
        let r = path.strip_prefix(parent).unwrap_or_else(|| panic!("outside the parent: {path}"));
        let r = r.trim_start_matches('/');
        if r.is_empty() { ".".to_owned() } else { crate::trace::short(r) }
    };
    // A name relative to its directory fd: a rename may cross directories
    // (the one-file fast path renames from the parent into the target).
    let name =
        |fd: &str, quoted: &str| rel(&format!("{}/{}", fd_path_of(fd), quoted.trim().trim_matches('"')));
    calls
        .iter()
        .map(|call| {
            assert_eq!(call.ret, "0", "{} failed: {call:?}", call.name);
            let args: Vec<&str> = call.args.split(", ").collect();
            match (call.name.as_str(), args.get(4).copied()) {
                ("fsync", _) => format!("fsync {}", rel(&fd_path(&call.args))),
                ("linkat", _) => {
                    let (from, to) = link_paths(&call.args);
                    format!("link {} -> {}", rel(&from), rel(&to))
                }
                ("renameat", None) | ("renameat2", Some("0")) => {
                    format!("rename(replace) {} -> {}", name(args[0], args[1]), name(args[2], args[3]))
                }
                ("renameat2", Some("RENAME_NOREPLACE")) => {
                    format!("rename(noreplace) {} -> {}", name(args[0], args[1]), name(args[2], args[3]))
                }
                ("renameat2", Some("RENAME_EXCHANGE")) => {
                    format!("exchange {} <-> {}", name(args[0], args[1]), name(args[2], args[3]))
                }
                _ => panic!("unexpected durability or rename call {}({})", call.name, call.args),
            }
        })
        .collect()
}

/// The same lines from a recorded trace anchored at the parent.
fn tokens_of_trace(trace: &[ROp]) -> Vec<String> {
    let s = |p: &str| if p.is_empty() || p == "." { ".".to_owned() } else { crate::trace::short(p) };
    trace
        .iter()
        .filter_map(|op| match op {
            ROp::FsyncFile { path } | ROp::FsyncDir { path } => Some(format!("fsync {}", s(path))),
            ROp::Rename { from, to, replace } => {
                let how = if *replace { "replace" } else { "noreplace" };
                Some(format!("rename({how}) {} -> {}", s(from), s(to)))
            }
            ROp::Exchange { a, b } => Some(format!("exchange {} <-> {}", s(a), s(b))),
            ROp::Link { from, to } => Some(format!("link {} -> {}", s(from), s(to))),
            _ => None,
        })
        .collect()
}

#[test]
fn strace_of_a_file_write_matches_the_explored_sequence_for_a_create_and_a_replace() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    for sc in [scenarios::write_create(&mut ex), scenarios::write_replace(&mut ex)] {
        let explored: Vec<ROp> = {
            let out = ex.explore(&sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
            assert!(out.violations.is_empty(), "{}: {}", sc.name, out.violations[0]);
            sc.steps.iter().map(|s| s.rop.clone()).collect()
        };
        let Some(Disk::File { data, mode, .. }) = sc.expect.new.clone() else { panic!("a file") };
        let work =
            tempfile::Builder::new().prefix("crash-strace-").tempdir_in(crate::tmp_base()).expect("tempdir");
        let parent = work.path().join("p");
        std::fs::create_dir(&parent).expect("mkdir");
        if let Some(old) = &sc.expect.old {
            materialise(old, &parent.join("f"));
        }
        let src = work.path().join("src");
        std::fs::write(&src, &data).expect("write src");
        let mode_arg = format!("{mode:o}");
        let args = [
            Path::new("write"),
            &parent.join("f"),
            Path::new("--from"),
            &src,
            Path::new("--mode"),
            Path::new(&mode_arg),
        ];
        let traced = tokens_of_calls(&strace(work.path(), &args), &parent);
        println!("[strace] {}: {traced:?}", sc.name);
        assert_eq!(
            traced,
            tokens_of_trace(&explored),
            "{}: the binary's sequence is the explored one",
            sc.name
        );
        assert_eq!(traced.len(), 3, "fsync of the temporary file, the rename, fsync of the directory");
        let again = strace(work.path(), &args);
        assert!(again.is_empty(), "an unchanged write issues no fsync and no rename: {again:?}");
    }
}

/// certsync through `durasync run` (no compile cache, so nothing but the
/// core renames or fsyncs): a manifest granting `root` as `certs`.
fn certsync_manifest(work: &Path, root: &Path) -> PathBuf {
    let wasm = crate::support::wasm::build("Cargo.toml", "certsync");
    let sha = sha256_of_file(&wasm);
    let manifest = work.join("plugin.toml");
    let text = format!(
        "name = \"certsync\"\nwasm = \"{}\"\nsha256 = \"{sha}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\n\
         [config]\nconfigmaps = [{{ name = \"a\", optional = true }}]\n",
        wasm.display(),
        root.display()
    );
    std::fs::write(&manifest, text).expect("write manifest");
    manifest
}

#[test]
fn strace_of_a_plugins_sync_and_remove_through_durasync_run_matches_the_core_sequence() {
    if !strace_available() {
        return;
    }
    let work =
        tempfile::Builder::new().prefix("crash-strace-").tempdir_in(crate::tmp_base()).expect("tempdir");
    let root = work.path().join("certs");
    let parent = root.join("configmaps");
    std::fs::create_dir_all(&parent).expect("mkdir");
    let manifest = certsync_manifest(work.path(), &root);
    let object = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"f":"F","sub":"S"}}"#;
    let with_a = work.path().join("with-a.json");
    std::fs::write(
        &with_a,
        format!(r#"{{"apiVersion":"v1","kind":"List","items":[{object}],"metadata":{{}}}}"#),
    )
    .expect("input");
    let without_a = work.path().join("without-a.json");
    std::fs::write(&without_a, r#"{"apiVersion":"v1","kind":"List","items":[],"metadata":{}}"#)
        .expect("input");
    let run = |input: &Path| {
        let args =
            [Path::new("run"), manifest.as_path(), Path::new("--input"), input, Path::new("--no-cache")];
        strace(work.path(), &args)
    };

    // The plugin's sync creates configmaps/a: the same N + D + 2 sequence.
    let calls = run(&with_a);
    let target = parent.join("a");
    let new = crate::model::snapshot(&target);
    let traced = durable_seq(&calls, &target, &new);
    println!("[strace] plugin sync: {} fsyncs, swap {}", traced.fsyncs(), traced.swap);
    assert_seq(&traced, &new, "RENAME_NOREPLACE", &[]);
    assert!(run(&with_a).is_empty(), "an unchanged plugin sync issues no fsync and no rename");

    // The optional object disappears: a durable removal, rename to trash then the commit fsync.
    let traced = tokens_of_calls(&run(&without_a), &parent);
    println!("[strace] plugin remove: {traced:?}");
    assert_eq!(traced, ["rename(noreplace) a -> <trash>", "fsync ."]);
    assert!(!target.exists());
}

#[test]
fn strace_of_a_plugin_run_with_flush_syncfs_shows_one_syncfs_and_the_commit_fsync() {
    if !strace_available() {
        return;
    }
    let work =
        tempfile::Builder::new().prefix("crash-strace-").tempdir_in(crate::tmp_base()).expect("tempdir");
    let root = work.path().join("certs");
    let parent = root.join("configmaps");
    std::fs::create_dir_all(&parent).expect("mkdir");
    let manifest = certsync_manifest(work.path(), &root);
    let input = work.path().join("with-a.json");
    let object = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"f":"F","sub":"S"}}"#;
    std::fs::write(
        &input,
        format!(r#"{{"apiVersion":"v1","kind":"List","items":[{object}],"metadata":{{}}}}"#),
    )
    .expect("input");
    // `--flush syncfs` on the command line reaches the plugin's syncs.
    let args = [
        Path::new("run"),
        manifest.as_path(),
        Path::new("--input"),
        &input,
        Path::new("--no-cache"),
        Path::new("--flush"),
        Path::new("syncfs"),
    ];
    let calls = strace(work.path(), &args);
    let target = parent.join("a");
    let new = crate::model::snapshot(&target);
    let traced = durable_seq(&calls, &target, &new);
    println!("[strace] plugin sync, --flush syncfs: {traced:?}");
    assert_eq!(traced.syncfs, ["."], "one syncfs through the staging root");
    assert!(traced.file_fsyncs.is_empty() && traced.dir_fsyncs.is_empty(), "{traced:?}");
    assert_eq!((traced.swaps, traced.swap.as_str()), (1, "RENAME_NOREPLACE"));
    assert_eq!(traced.after_swap, ["<parent>"]);
}

/// Run `durasync ARGS` in `work` untraced; it must succeed.
fn run_ok(work: &Path, args: &[&Path]) {
    let out = Command::new(durasync()).args(args).current_dir(work).output().expect("run durasync");
    assert!(out.status.success(), "durasync {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn strace_of_keep_syncs_matches_the_explored_sequences() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    for second in [false, true] {
        let sc = if second { crate::keep::keep_second(&mut ex) } else { crate::keep::keep_first(&mut ex) };
        let out = ex.explore(&sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
        assert!(out.violations.is_empty(), "{}: {}", sc.name, out.violations[0]);
        let explored: Vec<ROp> = sc.steps.iter().map(|s| s.rop.clone()).collect();
        let (old, new) = (sc.expect.old.clone().expect("old"), sc.expect.new.clone().expect("new"));
        let (work, target, src) = setup(None, &new);
        let (old_src, older_src) = (work.path().join("old"), work.path().join("older"));
        materialise(&old, &old_src);
        materialise(&dir(0o700, &[("z", file("older z", 0o644))]), &older_src);
        if second {
            run_ok(work.path(), &sync_args(&target, &older_src));
            run_ok(
                work.path(),
                &[&sync_args(&target, &old_src)[..], &[Path::new("--keep-previous")][..]].concat(),
            );
        } else {
            run_ok(work.path(), &sync_args(&target, &old_src));
        }
        let args = [&sync_args(&target, &src)[..], &[Path::new("--keep-previous")][..]].concat();
        let parent = target.parent().expect("parent").to_path_buf();
        let traced = tokens_of_calls(&strace(work.path(), &args), &parent);
        println!("[strace] {}: {traced:?}", sc.name);
        assert_eq!(
            traced,
            tokens_of_trace(&explored),
            "{}: the binary's sequence is the explored one",
            sc.name
        );
        let mut want = vec!["fsync <keep>/a", "fsync <keep>"];
        if second {
            want.extend(["rename(noreplace) <keep> -> <trash>", "fsync ."]);
        }
        want.extend(["exchange <keep> <-> t", "fsync ."]);
        assert_eq!(traced, want);
        assert_eq!(entries(&crate::model::snapshot(&target)), entries(&new));
    }
}

#[test]
fn strace_of_syncs_in_the_symlink_layout_matches_the_explored_sequences_and_a_repeat_does_nothing() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    for take_over in [false, true] {
        let sc = crate::layout::one_file(&mut ex, take_over);
        let out = ex.explore(&sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
        assert!(out.violations.is_empty(), "{}: {}", sc.name, out.violations[0]);
        let explored: Vec<ROp> = sc.steps.iter().map(|s| s.rop.clone()).collect();
        let new = sc.expect.new.clone().expect("new");
        let (work, target, src) = setup(sc.initial.get("t"), &new);
        let layout = [Path::new("--layout"), Path::new("symlink"), Path::new("--flush"), Path::new("fsync")];
        let args = [&sync_args(&target, &src)[..], &layout[..]].concat();
        let parent = target.parent().expect("parent").to_path_buf();
        let traced = tokens_of_calls(&strace(work.path(), &args), &parent);
        println!("[strace] {}: {traced:?}", sc.name);
        assert_eq!(
            traced,
            tokens_of_trace(&explored),
            "{}: the binary's sequence is the explored one",
            sc.name
        );
        let switch = if take_over {
            "rename(replace) t/<tmp> -> t/.durasync-data"
        } else {
            "rename(noreplace) <stage> -> t"
        };
        let at = traced.iter().position(|t| t == switch).unwrap_or_else(|| panic!("no switch: {traced:?}"));
        let commit = if take_over { "fsync t" } else { "fsync ." };
        assert_eq!(traced[at + 1..], [commit], "{}: the commit fsync, then nothing durable", sc.name);
        let again = strace(work.path(), &args);
        assert!(
            again.is_empty(),
            "an unchanged sync in the symlink layout issues no fsync and no rename: {again:?}"
        );
    }
}

#[test]
fn strace_of_a_revert_shows_the_exchange_then_the_parent_fsync_and_no_removal_before_it() {
    if !strace_available() {
        return;
    }
    let mut ex = Explorer::new();
    let sc = crate::keep::revert(&mut ex);
    let out = ex.explore(&sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
    assert!(out.violations.is_empty(), "{}: {}", sc.name, out.violations[0]);
    let explored: Vec<ROp> = sc.steps.iter().map(|s| s.rop.clone()).collect();
    let (bad, good) = (sc.expect.old.clone().expect("old"), sc.expect.new.clone().expect("new"));
    let (work, target, bad_src) = setup(None, &bad);
    let good_src = work.path().join("good");
    materialise(&good, &good_src);
    run_ok(work.path(), &sync_args(&target, &good_src));
    run_ok(work.path(), &[&sync_args(&target, &bad_src)[..], &[Path::new("--keep-previous")][..]].concat());

    let calls = strace_with(
        work.path(),
        &[Path::new("rollback"), target.as_path()],
        &format!("{TRACED},unlink,unlinkat,rmdir"),
    );
    let parent = target.parent().expect("parent").to_path_buf();
    let is_removal = |c: &Call| matches!(c.name.as_str(), "unlink" | "unlinkat" | "rmdir");
    let durable: Vec<Call> = calls.iter().filter(|c| !is_removal(c)).cloned().collect();
    let traced = tokens_of_calls(&durable, &parent);
    println!("[strace] revert: {traced:?}");
    assert_eq!(traced, tokens_of_trace(&explored), "the binary's sequence is the explored one");
    assert_eq!(
        traced,
        ["exchange <keep> <-> t", "fsync ."],
        "one exchange, then the commit fsync of the parent"
    );

    // Every removal inside the replaced tree (now at the keep name) comes
    // after the commit fsync; and the replaced tree is removed.
    let commit = calls.iter().position(|c| c.name == "fsync").expect("the commit fsync");
    let in_keep = |c: &Call| {
        let args: Vec<&str> = c.args.split(", ").collect();
        let full = format!("{}/{}", fd_path_of(args[0]), args.get(1).map_or("", |a| a.trim_matches('"')));
        full.split('/').any(|part| durasync::durable::names::parse_keep(part).is_some())
    };
    let removals: Vec<usize> =
        calls.iter().enumerate().filter(|(_, c)| is_removal(c) && in_keep(c)).map(|(i, _)| i).collect();
    assert!(!removals.is_empty(), "the replaced tree is removed: {calls:?}");
    assert!(
        removals.iter().all(|&i| i > commit),
        "a removal in the keep entry before the commit fsync: {calls:?}"
    );
    assert_eq!(entries(&crate::model::snapshot(&target)), entries(&good));
}

/// What a directory holds (its own mode aside: a target made by the CLI
/// gets the default mode).
fn entries(d: &Disk) -> &std::collections::BTreeMap<String, Disk> {
    let Disk::Dir { entries, .. } = d else { panic!("a directory") };
    entries
}

/// The calls that give a staged inode its owner, label and attributes, and
/// those that make it durable or swap it in.
const TRACED_ATTRS: &str = "trace=fchown,fsetxattr,fchmod,fsync,syncfs,rename,renameat,renameat2";

/// Check, on a traced run, that every inode fsynced before the swap (and
/// with `syncfs`, every inode given attributes) got its owner (`fchown`
/// to `ids`) and its label (`fsetxattr security.selinux`) before its fsync
/// (or the syncfs) and before its last `fchmod`, and all of it before the
/// swap. Returns how many inodes were checked.
fn assert_attrs_before_fsync(calls: &[Call], ids: &str, what: &str) -> usize {
    let swap = calls
        .iter()
        .position(|c| c.name.starts_with("rename"))
        .unwrap_or_else(|| panic!("{what}: no rename in {calls:#?}"));
    let syncfs = calls[..swap].iter().position(|c| c.name == "syncfs");
    let first_call = |name: &str, path: &str, extra: &str| {
        calls[..swap]
            .iter()
            .position(|c| c.name == name && fd_path(&c.args) == path && c.args.contains(extra))
    };
    let mut inodes: Vec<String> = calls[..swap]
        .iter()
        .filter(|c| c.name == "fsync" || (syncfs.is_some() && c.name == "fchown"))
        .map(|c| fd_path(&c.args))
        .collect();
    inodes.sort();
    inodes.dedup();
    // The parent's fsync of a lock or a mark is not an inode of the new tree.
    inodes.retain(|p| {
        p.contains(".durasync-stage") || p.contains(".durasync-tmp") || p.contains(".durasync-keep")
    });
    assert!(!inodes.is_empty(), "{what}: no staged inode fsynced: {calls:#?}");
    for path in &inodes {
        let durable_at = match syncfs {
            Some(at) => at,
            None => first_call("fsync", path, "").expect("fsynced"),
        };
        let chown = first_call("fchown", path, &format!(", {ids}"))
            .unwrap_or_else(|| panic!("{what}: {path} never got the owner {ids}"));
        let label = first_call("fsetxattr", path, "\"security.selinux\"")
            .unwrap_or_else(|| panic!("{what}: {path} never got its label"));
        assert!(
            chown < durable_at && label < durable_at,
            "{what}: {path}: owner and label before it is made durable"
        );
        let last_chmod = calls[..swap].iter().rposition(|c| c.name == "fchmod" && fd_path(&c.args) == *path);
        if let Some(chmod) = last_chmod {
            assert!(chown < chmod, "{what}: {path}: the owner before the mode (chown clears setuid)");
        }
    }
    inodes.len()
}

/// A target labelled as an SELinux host labels it, and a source changing it.
fn labelled(work: &Path) -> (PathBuf, PathBuf) {
    let (target, src) = (work.join("p/t"), work.join("src"));
    for (dir, files) in [(&target, ["a", "sub/b", "c"]), (&src, ["a", "sub/b", "n"])] {
        for f in files {
            let path = dir.join(f);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, format!("{f} in {}", dir.display())).expect("write");
        }
    }
    let flags = rustix::fs::XattrFlags::empty();
    for (rel, label) in [
        ("", "u:object_r:etc_t:s0"),
        ("a", "u:object_r:cert_t:s0"),
        ("sub", "u:object_r:sub_t:s0"),
        ("sub/b", "u:object_r:sub_t:s0"),
    ] {
        rustix::fs::setxattr(target.join(rel), "security.selinux", label.as_bytes(), flags).expect("label");
    }
    (target, src)
}

#[test]
fn strace_shows_every_staged_inode_gets_its_owner_and_label_before_its_fsync() {
    if !strace_available() {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        crate::cannot_check("strace of owners and labels: needs root (fchown, security.selinux)");
        return;
    }
    for flush in ["fsync", "syncfs"] {
        let work =
            tempfile::Builder::new().prefix("crash-strace-").tempdir_in(crate::tmp_base()).expect("tempdir");
        let (target, src) = labelled(work.path());
        let args: Vec<&Path> = ["sync", target.to_str().unwrap(), "--from", src.to_str().unwrap()]
            .into_iter()
            .chain(["--owner", "1000", "--group", "1001", "--preserve", "xattrs", "--flush", flush])
            .map(Path::new)
            .collect();
        let calls = strace_with(work.path(), &args, TRACED_ATTRS);
        // a, sub/b and n; sub; the staging root.
        let checked = assert_attrs_before_fsync(&calls, "1000, 1001", &format!("sync --flush {flush}"));
        println!("[strace] sync --flush {flush}: owner and label before durable on {checked} inodes");
        assert_eq!(checked, 5, "every staged file and directory: {calls:#?}");
    }

    // The one-file path and a `write`: the temporary file beside the target.
    let work =
        tempfile::Builder::new().prefix("crash-strace-").tempdir_in(crate::tmp_base()).expect("tempdir");
    let (target, src) = labelled(work.path());
    run_ok(work.path(), &[Path::new("sync"), &target, Path::new("--from"), &src]);
    std::fs::write(src.join("a"), "a changed").expect("change a");
    let one = strace_with(
        work.path(),
        &[
            Path::new("sync"),
            &target,
            Path::new("--from"),
            &src,
            Path::new("--owner"),
            Path::new("keep"),
            Path::new("--group"),
            Path::new("keep"),
        ],
        TRACED_ATTRS,
    );
    // Keep: the replaced file's ids (root's, here) and label.
    assert_eq!(assert_attrs_before_fsync(&one, "0, 0", "one-file sync"), 1);
    let write = strace_with(
        work.path(),
        &[
            Path::new("write"),
            &target.join("a"),
            Path::new("--from"),
            &src.join("n"),
            Path::new("--owner"),
            Path::new("7"),
            Path::new("--group"),
            Path::new("8"),
        ],
        TRACED_ATTRS,
    );
    assert_eq!(assert_attrs_before_fsync(&write, "7, 8", "write"), 1);
}
