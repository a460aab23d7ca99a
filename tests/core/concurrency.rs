//! Two `durasync` processes syncing the same target at once serialise on
//! the lock: while another process holds it, neither touches the target;
//! then they run in turn, the second replacing the tree the first left,
//! and the target ends up exactly one of the two sources, never a mix.
//!
//! Deterministic, with no timing: the test itself holds the lock while it
//! starts both processes and waits until the kernel shows both blocked on
//! it (`/proc/locks`); a process that finishes instead ran without the lock.
//! Each process's output then says which tree it replaced: the start tree
//! (3 files no longer held) or the other source (1 file, its `*-only` one).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use durasync::durable::names::LOCK_NAME;
use durasync::durable::{self, NoProbe, Tree};

use crate::common::*;

/// Each round is two real processes writing 151 files each.
const ROUNDS: usize = 4;

/// A failure bound only: both processes are blocked within milliseconds.
const BLOCKED_WITHIN: Duration = Duration::from_secs(60);

fn source_a() -> Tree {
    let mut t = many_files("f", 150, 512, 1);
    t.add_file("a-only/x", b"a".to_vec(), 0o644).unwrap();
    t
}

fn source_b() -> Tree {
    // The same names, other bytes and modes: a mix of the two would show as
    // a file of one beside a file of the other.
    let mut t = Tree::new();
    for i in 0..150 {
        t.add_file(&format!("f{i:04}"), vec![101u8.wrapping_add(i as u8); 300], 0o600).unwrap();
    }
    t.add_file("b-only/y", b"b".to_vec(), 0o640).unwrap();
    t
}

/// The tree every round starts from: 3 files neither source holds.
fn start() -> Tree {
    tree(&[("s1", b"start", 0o644), ("s2", b"start", 0o644), ("s3", b"start", 0o644)])
}

/// `(word, written, removed)` of a `replaced target: W written, R removed` line.
fn outcome(stdout: &str) -> (String, usize, usize) {
    let parsed = (|| {
        let (word, rest) = stdout.trim().split_once(" target: ")?;
        let (written, rest) = rest.split_once(" written, ")?;
        let removed = rest.strip_suffix(" removed")?;
        Some((word.to_owned(), written.parse().ok()?, removed.parse().ok()?))
    })();
    parsed.unwrap_or_else(|| panic!("unexpected line {stdout:?}"))
}

/// Pids of the processes `/proc/locks` shows blocked waiting for a lock on
/// inode `ino` (lines `N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INO …`).
fn blocked_on(ino: u64) -> Vec<u32> {
    let locks = std::fs::read_to_string("/proc/locks").expect("read /proc/locks");
    locks
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            if fields.next()? != "->" {
                return None;
            }
            let pid = fields.nth(3)?.parse().ok()?;
            let lock_ino: u64 = fields.next()?.rsplit(':').next()?.parse().ok()?;
            (lock_ino == ino).then_some(pid)
        })
        .collect()
}

/// Wait until every child is blocked on the lock file `lock`; fail at once
/// if one exits (it did not wait for the lock).
fn wait_blocked(children: &mut [(&str, Child)], lock: &File, round: usize) {
    let ino = lock.metadata().unwrap().ino();
    let start = Instant::now();
    loop {
        for (src, child) in children.iter_mut() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("round {round}: `sync --from {src}` ended ({status}) while the test held the lock");
            }
        }
        let blocked = blocked_on(ino);
        if children.iter().all(|(_, c)| blocked.contains(&c.id())) {
            return;
        }
        assert!(
            start.elapsed() < BLOCKED_WITHIN,
            "round {round}: never both blocked on the lock: {blocked:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn two_processes_syncing_one_target_wait_for_the_lock_and_run_in_turn_leaving_one_source() {
    let s = Scratch::new();
    write_tree(&s.join("a"), &source_a(), 0o755);
    write_tree(&s.join("b"), &source_b(), 0o755);
    let want =
        [("a", contents(&expected(&source_a(), 0o755))), ("b", contents(&expected(&source_b(), 0o755)))];
    let want_start = contents(&expected(&start(), 0o755));
    let mut last = [0usize; 2];
    for round in 0..ROUNDS {
        durable::sync_dir(s.fd(), "target", &start(), &opts(&NoProbe, 4)).unwrap();
        // The lock file every durasync process in this directory opens (the
        // sync above made it; it stays).
        let lock =
            File::options().read(true).write(true).create(true).truncate(false).open(s.join(LOCK_NAME));
        let lock = lock.expect("the lock file");
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
        // Alternate which one is started first.
        let order = if round % 2 == 0 { ["a", "b"] } else { ["b", "a"] };
        let mut children: Vec<(&str, Child)> = order
            .iter()
            .map(|src| {
                let child = Command::new(crate::support::durasync())
                    .args(["sync", "target", "--from", src])
                    .current_dir(s.path())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (*src, child)
            })
            .collect();
        wait_blocked(&mut children, &lock, round);
        assert_eq!(
            contents(&snapshot(&s.join("target"))),
            want_start,
            "round {round}: the target changed while the lock was held"
        );
        drop(lock);

        let mut outcomes: Vec<(&str, (String, usize, usize))> = children
            .into_iter()
            .map(|(src, c)| (src, outcome(&ok_stdout(&c.wait_with_output().unwrap()))))
            .collect();
        // In turn: one replaced the start tree (3 files gone), the other the
        // first one's tree (its `*-only` file gone); both wrote 151 files.
        outcomes.sort_by_key(|(_, (_, _, removed))| std::cmp::Reverse(*removed));
        let shape: Vec<(String, usize, usize)> = outcomes.iter().map(|(_, o)| o.clone()).collect();
        assert_eq!(
            shape,
            [("replaced".to_owned(), 151, 3), ("replaced".to_owned(), 151, 1)],
            "round {round}: {outcomes:?}"
        );
        let second = outcomes[1].0;
        let got = contents(&snapshot(&s.join("target")));
        let (i, (_, want_second)) = want.iter().enumerate().find(|(_, (src, _))| *src == second).unwrap();
        assert!(
            got == *want_second,
            "round {round}: the target is not the second one's source {second}: {:?}",
            got.keys().collect::<Vec<_>>()
        );
        last[i] += 1;
        assert!(leftovers(s.path()).is_empty(), "round {round}: {:?}", names(s.path()));
    }
    eprintln!("second (last) to run over {ROUNDS} rounds: a {} times, b {} times", last[0], last[1]);
}
