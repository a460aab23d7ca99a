//! `sync --from` streams its source: a tree read from disk
//! ([`durable::read_tree`]) holds names, sizes and modes, and a sync reads
//! each file's bytes from the source when it compares or stages it. A source
//! file that changed size after the walk, or was written while it was
//! copied, is refused with nothing changed; and 90 000 files of 4 KiB sync
//! within a memory bound of a constant plus the names, counted by the
//! kernel for the real binary.

use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durasync::durable::{self, Error, Node, Outcome, Probe, RequestLimits, SysOp, Tree, read_tree};

use crate::common::*;
use crate::support;

/// Nested directories with their own modes, an empty file, 70 small files
/// (enough for the comparing and staging threads) and one file of 2.5 MiB
/// (three copy chunks).
fn source_tree() -> Tree {
    let mut t = many_files("f", 70, 4096, 3);
    t.add_dir("conf", 0o750).unwrap();
    t.add_file("conf/empty", Vec::new(), 0o600).unwrap();
    t.add_file("conf/deep/key.pem", b"secret".to_vec(), 0o400).unwrap();
    t.add_file("big", (0..(5 << 19)).map(|i| (i % 251) as u8).collect(), 0o644).unwrap();
    t
}

fn read_src(s: &Scratch) -> Tree {
    read_tree(s.fd(), "src", "src", &RequestLimits::default()).unwrap()
}

#[test]
fn a_tree_read_from_disk_holds_sizes_and_its_syncs_copy_the_source_bytes() {
    let s = Scratch::new();
    write_tree(&s.join("src"), &source_tree(), 0o755);
    let tree = read_src(&s);
    assert_eq!(tree.get("big"), Some(&Node::Source { size: 5 << 19, mode: 0o644 }));
    assert_eq!(tree.get("conf/deep/key.pem"), Some(&Node::Source { size: 6, mode: 0o400 }));
    assert_eq!(tree.total_bytes(), source_tree().total_bytes());
    let sync = |tree: &Tree| durable::sync_dir(s.fd(), "target", tree, &opts(&durable::NoProbe, 4)).unwrap();

    assert_eq!(sync(&tree).outcome, Outcome::Created);
    assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")), "created");
    assert_eq!(sync(&read_src(&s)).outcome, Outcome::Unchanged, "compared with the source's bytes");

    // One file: the fast path copies it from the source.
    fs::write(s.join("src/big"), vec![7u8; 3 << 19]).unwrap();
    let rec = Recorder::default();
    let r = durable::sync_dir(s.fd(), "target", &read_src(&s), &opts(&rec, 4)).unwrap();
    assert_eq!(r.outcome, Outcome::Replaced);
    let fsyncs = rec.keys().iter().filter(|k| k.kind.starts_with("fsync")).count();
    assert_eq!(fsyncs, 2, "the one-file path: {:?}", rec.keys());
    assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")), "one file");

    // Every file: a staging tree copied from the source.
    for i in 0..70 {
        fs::write(s.join(&format!("src/f{i:04}")), [i as u8 ^ 0x5a; 4096]).unwrap();
    }
    assert_eq!(sync(&read_src(&s)).outcome, Outcome::Replaced);
    assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")), "all files");
}

#[test]
fn a_source_file_whose_size_changed_after_the_walk_is_refused_with_nothing_changed() {
    // No target yet; a target holding other files (the full sequence); a
    // target holding the source (the one-file path).
    let targets: [Option<Tree>; 3] = [None, Some(many_files("old", 80, 100, 9)), Some(source_tree())];
    for target in targets {
        let s = Scratch::new();
        write_tree(&s.join("src"), &source_tree(), 0o755);
        if let Some(t) = &target {
            write_tree(&s.join("target"), t, 0o755);
        }
        let before = snapshot(&s.join("target"));
        let tree = read_src(&s);
        fs::OpenOptions::new()
            .append(true)
            .open(s.join("src/f0042"))
            .unwrap()
            .write_all_at(b"more", 4096)
            .unwrap();
        let err = durable::sync_dir(s.fd(), "target", &tree, &opts(&durable::NoProbe, 4)).unwrap_err();
        let what = target.as_ref().map_or(0, |t| t.file_count());
        assert!(
            matches!(&err, Error::SourceChanged { path, .. } if path == "src/f0042"),
            "target of {what} files: {err}"
        );
        assert!(err.to_string().ends_with("nothing was changed"), "{err}");
        assert_eq!(snapshot(&s.join("target")), before, "target of {what} files");
        assert_eq!(leftovers(s.path()), Vec::<String>::new(), "target of {what} files");
    }
}

/// Rewrites the source file `src/f0042` in place, same size, once, when a
/// sync writes the first chunk of its copy.
struct WriteDuringCopy<'a> {
    src: &'a std::path::Path,
    done: AtomicBool,
}

impl Probe for WriteDuringCopy<'_> {
    fn before(&self, op: &SysOp<'_>) -> std::io::Result<()> {
        if let SysOp::Write { path, .. } = op
            && path.ends_with("/f0042")
            && !self.done.swap(true, Ordering::SeqCst)
        {
            // Past the clock tick of the file's last write, so that its
            // mtime and ctime move.
            std::thread::sleep(Duration::from_millis(20));
            let f = fs::OpenOptions::new().write(true).open(self.src.join("f0042")).unwrap();
            f.write_all_at(&[0xee; 100], 1000).unwrap();
        }
        Ok(())
    }
}

#[test]
fn a_source_file_written_while_it_is_copied_is_refused_with_nothing_changed() {
    for target in [None, Some(many_files("old", 80, 100, 9))] {
        let s = Scratch::new();
        write_tree(&s.join("src"), &source_tree(), 0o755);
        if let Some(t) = &target {
            write_tree(&s.join("target"), t, 0o755);
        }
        let before = snapshot(&s.join("target"));
        let tree = read_src(&s);
        let probe = WriteDuringCopy { src: &s.join("src"), done: AtomicBool::new(false) };
        let err = durable::sync_dir(s.fd(), "target", &tree, &opts(&probe, 4)).unwrap_err();
        assert!(probe.done.load(Ordering::SeqCst), "the copy of f0042 was written");
        assert!(
            matches!(&err, Error::SourceChanged { path, what } if path == "src/f0042" && what.contains("written")),
            "{err}"
        );
        assert_eq!(snapshot(&s.join("target")), before);
        assert_eq!(leftovers(s.path()), Vec::<String>::new());
        // The next sync takes the file as it is now.
        let r = durable::sync_dir(s.fd(), "target", &read_src(&s), &opts(&durable::NoProbe, 4)).unwrap();
        assert_ne!(r.outcome, Outcome::Unchanged);
        assert_eq!(snapshot(&s.join("target")), snapshot(&s.join("src")));
    }
}

/// The memory bound of `sync --from`: a constant plus the names.
const BOUND_BASE: u64 = 64 << 20;
const BOUND_PER_FILE: u64 = 200;

#[test]
fn sync_from_of_90_000_files_holds_the_names_not_the_bytes() {
    const DIRS: usize = 90;
    const PER_DIR: usize = 1000;
    const SIZE: usize = 4096;
    // On tmpfs whatever file system the other tests run on (see below): the
    // runs on the file systems under test (`DURASYNC_TEST_DIR`) would
    // repeat the main run's.
    if support::test_dir().is_some() {
        eprintln!("the 90 000-file scale test runs on tmpfs, in the run without DURASYNC_TEST_DIR only");
        return;
    }
    // The kernel's count is read through a python3 launcher (support::peak).
    if !support::have("python3") {
        return;
    }
    let files = (DIRS * PER_DIR) as u64;
    let bound = BOUND_BASE + BOUND_PER_FILE * files;
    // The source's bytes alone are over the bound: a sync holding them
    // could not pass.
    assert!(files * SIZE as u64 > 4 * bound);
    // On tmpfs: the bound is the process's own, whatever the file system,
    // and 700 MiB of writes to a loaded disk take minutes.
    let s = Scratch::in_shm();
    eprintln!(
        "peak RSS of the launcher alone: {:.1} MiB",
        support::peak::launcher_floor() as f64 / (1 << 20) as f64
    );
    let bytes = |d: usize, i: usize, seed: u8| {
        let mut b = vec![seed; SIZE];
        b[..16].copy_from_slice(format!("{d:03}/{i:04}/{seed:03}/....").as_bytes().get(..16).unwrap());
        b
    };
    for d in 0..DIRS {
        fs::create_dir_all(s.join(&format!("src/d{d:03}"))).unwrap();
        for i in 0..PER_DIR {
            fs::write(s.join(&format!("src/d{d:03}/f{i:04}")), bytes(d, i, 1)).unwrap();
        }
    }
    let run = |what: &str, said: &str| {
        let args = ["sync", "target", "--from", "src", "--flush", "syncfs"];
        let p = support::peak::run(&support::durasync(), &args, s.path());
        assert!(p.status.success(), "{what}: {}", p.stderr);
        assert!(p.stdout.contains(said), "{what}: {}", p.stdout);
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        eprintln!(
            "sync --from, {files} files, {what}: peak RSS {:.1} MiB (bound {:.1} MiB)",
            mib(p.rss),
            mib(bound)
        );
        assert!(p.rss <= bound, "{what}: peak RSS {:.1} MiB is over {:.1} MiB", mib(p.rss), mib(bound));
    };
    run("created", "created");
    run("unchanged", "unchanged");
    fs::write(s.join("src/d045/f0500"), bytes(45, 500, 2)).unwrap();
    run("one file changed", "replaced");
    for d in 0..DIRS {
        for i in 0..PER_DIR {
            let rel = format!("d{d:03}/f{i:04}");
            let want = bytes(d, i, if (d, i) == (45, 500) { 2 } else { 1 });
            assert!(fs::read(s.join(&format!("target/{rel}"))).unwrap() == want, "{rel}");
        }
    }
}
