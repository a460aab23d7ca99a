//! Kill -9 soak: start `durasync sync` of a 2000-file tree, SIGKILL it at a
//! random moment, run `durasync recover`, and check the target is exactly
//! the old or the new tree, no leftover remains and every file of the target
//! has one link (no carried inode is still shared with a leftover). Every
//! other sync is a partial change (1 file in 20 rewritten, a few modes
//! changed, some files added and removed: the rest is carried by links)
//! or a one-file change (the fast path: a temporary file beside the target
//! renamed over that file), the others replace every file. Bounded: at most
//! [`MAX_ITERATIONS`] kills and [`BUDGET`] of wall time, so a slow machine
//! simply runs fewer iterations (nothing asserts on time).
//!
//! Runs on tmpfs unless `DURASYNC_TEST_DIR` names another directory.
//! A SIGKILL is not a power loss (the page cache survives), so this checks
//! process-crash atomicity and recovery of real leftovers at scale; the
//! explorer covers power loss.
//!
//! Phase of each kill, decided from what the process printed and the state
//! it left (before recovery):
//! - **before the swap**: the target is still the old tree (split by whether
//!   a staging directory had been started);
//! - **during**: the target is the new tree but the process had not printed
//!   its report: killed between the exchange and reporting success (the
//!   parent fsync, the commit point, or removing the old tree);
//! - **after**: the process had printed its report (success was reported),
//!   whether the kill then hit it or it had already exited.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use durasync::durable::names::is_leftover;

use crate::model::{Disk, materialise, snapshot};
use crate::scenarios::{dir, file};
use crate::support::durasync;

/// Upper bound on the whole soak, setup included, far below the 60 s cap.
const BUDGET: Duration = Duration::from_secs(45);
/// Upper bound on kills.
const MAX_ITERATIONS: usize = 60;
/// Files per tree.
const FILES: usize = 2000;

/// Two different 2000-file trees in 20 subdirectories: different bytes,
/// some different names and modes.
fn source(tag: char) -> Disk {
    let mut files = Vec::with_capacity(FILES);
    for i in 0..FILES {
        let name = if tag == 'B' && i % 200 == 0 {
            format!("d{:02}/only-b-{i:04}", i / 100)
        } else {
            format!("d{:02}/f{i:04}", i / 100)
        };
        let mode = if tag == 'B' && i % 3 == 0 { 0o600 } else { 0o644 };
        files.push((name, file(&format!("{tag} generation, file {i}, {}\n", "-".repeat(i % 97)), mode)));
    }
    let refs: Vec<(&str, Disk)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    dir(0o755, &refs)
}

/// Tree A with a partial change: every 20th file rewritten, every 50th
/// file's mode changed, every 400th removed and a few added; the rest is
/// exactly A's and is carried.
fn partial() -> Disk {
    let mut files = Vec::with_capacity(FILES);
    for i in 0..FILES {
        if i % 400 == 7 {
            continue;
        }
        let bytes = if i % 20 == 3 {
            format!("C rotation, file {i}\n")
        } else {
            format!("A generation, file {i}, {}\n", "-".repeat(i % 97))
        };
        let mode = if i % 50 == 11 { 0o600 } else { 0o644 };
        files.push((format!("d{:02}/f{i:04}", i / 100), file(&bytes, mode)));
    }
    for i in 0..5 {
        files.push((format!("d{:02}/new-c-{i}", i * 3), file("added by C", 0o640)));
    }
    let refs: Vec<(&str, Disk)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    dir(0o755, &refs)
}

/// Tree A with exactly one file rewritten: the one-file fast path (a
/// temporary file beside the target renamed over that file).
fn one_file() -> Disk {
    let mut tree = source('A');
    tree.insert("d07/f0700", file("D rotation of one file\n", 0o644));
    tree
}

/// Paths of regular files beneath `dir` with more than one link.
fn shared_inodes(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let meta = std::fs::symlink_metadata(e.path()).expect("stat");
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.nlink() != 1 {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

/// A small xorshift generator: the delays need no quality, only spread.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let mut b = [0u8; 8];
        rustix::rand::getrandom(&mut b[..], rustix::rand::GetRandomFlags::empty()).expect("getrandom");
        Rng(u64::from_le_bytes(b) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn leftovers(parent: &Path) -> Vec<String> {
    snapshot(parent).paths_where(&|name| is_leftover(name))
}

fn run_ok(args: &[&Path]) {
    let out = Command::new(durasync()).args(args).output().expect("run durasync");
    assert!(out.status.success(), "durasync {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Iterations of one cycle of the soak's changes: A→B→A→C→A→D→A.
const CYCLE: usize = 6;

#[derive(Debug, Default)]
struct Phases {
    before_nothing_staged: usize,
    before_staging: usize,
    during: usize,
    after_killed: usize,
    after_exited: usize,
}

#[test]
fn sigkill_at_random_moments_leaves_old_or_new_and_recover_cleans_up() {
    let start = Instant::now();
    // tmpfs by default (a SIGKILL does not depend on the file system, and a
    // 2000-file sync there takes ~0.1 s instead of 2–5 s of device flushes
    // on this shared disk); DURASYNC_TEST_DIR=/mnt/… runs it on that disk.
    let work = tempfile::Builder::new().prefix("crash-soak-").tempdir_in(crate::tmp_base()).expect("tempdir");
    let (src_a, src_b, src_c) = (work.path().join("a"), work.path().join("b"), work.path().join("c"));
    let (tree_a, tree_b, tree_c, tree_d) = (source('A'), source('B'), partial(), one_file());
    let src_d = work.path().join("d");
    materialise(&tree_a, &src_a);
    materialise(&tree_b, &src_b);
    materialise(&tree_c, &src_c);
    materialise(&tree_d, &src_d);
    let parent = work.path().join("p");
    std::fs::create_dir(&parent).expect("mkdir");
    let target = parent.join("t");
    let sync = |src: &'_ Path| -> Vec<std::ffi::OsString> {
        vec!["sync".into(), target.clone().into(), "--from".into(), src.into()]
    };

    // Uninterrupted syncs: the first creates; the median of three replaces
    // (what every iteration does) sets the range of kill delays.
    run_ok(&[Path::new("sync"), &target, Path::new("--from"), &src_a]);
    let mut times: Vec<Duration> = [&src_b, &src_a, &src_b]
        .iter()
        .map(|src| {
            let t = Instant::now();
            run_ok(&[Path::new("sync"), &target, Path::new("--from"), src]);
            t.elapsed()
        })
        .collect();
    times.sort();
    let replace_time = times[1];
    assert_eq!(snapshot(&target), tree_b);
    // The same for a partial change (A to C and back), much shorter.
    let mut times: Vec<Duration> = [&src_a, &src_c, &src_a, &src_c, &src_a]
        .iter()
        .map(|src| {
            let t = Instant::now();
            run_ok(&[Path::new("sync"), &target, Path::new("--from"), src]);
            t.elapsed()
        })
        .collect();
    times.sort();
    let partial_time = times[2];
    assert_eq!(snapshot(&target), tree_a);
    assert!(shared_inodes(&target).is_empty(), "after a partial change every file has one link");
    // And for one changed file (A to D and back).
    let mut times: Vec<Duration> = [&src_d, &src_a, &src_d, &src_a, &src_d, &src_a]
        .iter()
        .map(|src| {
            let t = Instant::now();
            run_ok(&[Path::new("sync"), &target, Path::new("--from"), src]);
            t.elapsed()
        })
        .collect();
    times.sort();
    let one_time = times[2];
    assert_eq!(snapshot(&target), tree_a);

    let mut rng = Rng::seeded();
    let mut phases = Phases::default();
    let mut current = 'A';
    let mut iterations = 0;
    let mut partials = 0;
    let mut ones = 0;
    let mut stuck = 0u32;
    // At least one whole cycle (a full replace, a partial change and a
    // one-file change, each there and back) whatever the budget: on a busy
    // machine the calibration above can take most of it, and a soak that
    // killed no change of one kind has checked nothing of that kind.
    while iterations < MAX_ITERATIONS && (iterations < CYCLE || start.elapsed() + replace_time * 2 < BUDGET) {
        iterations += 1;
        // From A, in turn a full replace (B), a partial change (C) and a
        // one-file change (D); back to A from any of them (`CYCLE` steps).
        let (next, src, old, new) = match current {
            'A' if iterations % 6 < 2 => ('B', &src_b, &tree_a, &tree_b),
            'A' if iterations % 6 < 4 => ('C', &src_c, &tree_a, &tree_c),
            'A' => ('D', &src_d, &tree_a, &tree_d),
            'B' => ('A', &src_a, &tree_b, &tree_a),
            'C' => ('A', &src_a, &tree_c, &tree_a),
            _ => ('A', &src_a, &tree_d, &tree_a),
        };
        let is_partial = next == 'C' || current == 'C';
        let is_one = next == 'D' || current == 'D';
        partials += usize::from(is_partial);
        ones += usize::from(is_one);
        let took = match (is_partial, is_one) {
            (true, _) => partial_time,
            (_, true) => one_time,
            _ => replace_time,
        };
        // Uniform over 1.1 × the sync: most kills land inside it, some after.
        // A machine busier than at calibration stretches every sync: each
        // kill in a row that left the target old doubles the range (up to
        // 16×), so the cycle moves on and every kind of change is killed.
        let range = took.as_micros() as u64 * 11 / 10 * (1 << stuck.min(4));
        let delay = Duration::from_micros(rng.below(range));
        let mut child = Command::new(durasync())
            .args(sync(src))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn durasync");
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL; fails only if it already exited
        let status = child.wait().expect("wait");
        let mut printed = String::new();
        child.stdout.take().expect("stdout").read_to_string(&mut printed).expect("read stdout");
        let printed = !printed.is_empty();

        let state = snapshot(&target);
        let staged = !leftovers(&parent).is_empty();
        let is_new = &state == new;
        assert!(
            is_new || &state == old,
            "iteration {iterations}: before recovery the target is neither tree"
        );
        run_ok(&[Path::new("recover"), &parent]);
        let recovered = snapshot(&target);
        assert_eq!(recovered, state, "iteration {iterations}: recovery must not touch the target");
        assert_eq!(
            leftovers(&parent),
            Vec::<String>::new(),
            "iteration {iterations}: leftovers after recover"
        );
        let shared = shared_inodes(&target);
        assert!(shared.is_empty(), "iteration {iterations}: inodes shared after recover: {shared:?}");
        if printed {
            assert!(is_new, "iteration {iterations}: success was reported but the target is old");
        }
        match (printed, is_new, staged) {
            (true, _, _) if status.success() => phases.after_exited += 1,
            (true, _, _) => phases.after_killed += 1,
            (false, true, _) => phases.during += 1,
            (false, false, true) => phases.before_staging += 1,
            (false, false, false) => phases.before_nothing_staged += 1,
        }
        if is_new {
            current = next;
            stuck = 0;
        } else {
            stuck += 1;
        }
    }
    println!(
        "[soak] {iterations} kills of a {FILES}-file sync ({partials} partial changes: {partial_time:.2?}, \
         {ones} one-file changes: {one_time:.2?}, full replace {replace_time:.2?}) in {:.1?}: \
         before the swap {} ({} nothing staged yet, {} staging in progress), during {} (swapped, not \
         reported), after {} ({} killed after reporting, {} had exited)",
        start.elapsed(),
        phases.before_nothing_staged + phases.before_staging,
        phases.before_nothing_staged,
        phases.before_staging,
        phases.during,
        phases.after_killed + phases.after_exited,
        phases.after_killed,
        phases.after_exited,
    );
    assert!(iterations > 0, "the soak ran no iteration");
    assert!(ones > 0, "the soak killed no one-file change");
}
