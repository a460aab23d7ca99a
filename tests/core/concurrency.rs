//! Two `durasync` processes syncing the same target at once serialise on
//! the lock: both succeed in turn, and the target ends up exactly one of
//! the two sources, never a mix.

use std::process::{Command, Stdio};

use durasync::durable::{self, NoProbe, Tree};

use crate::common::*;

/// Bounded: each round is two real processes writing a few hundred files.
const ROUNDS: usize = 8;

fn source_a() -> Tree {
    let mut t = many_files("f", 150, 512, 1);
    t.add_file("a-only/x", b"a".to_vec(), 0o644).unwrap();
    t
}

fn source_b() -> Tree {
    // The same names, other bytes and modes: a mix of the two would show as
    // a file of one beside a file of the other. About the same size as
    // `source_a`, so that either process may take the lock first.
    let mut t = Tree::new();
    for i in 0..150 {
        t.add_file(&format!("f{i:04}"), vec![101u8.wrapping_add(i as u8); 300], 0o600).unwrap();
    }
    t.add_file("b-only/y", b"b".to_vec(), 0o640).unwrap();
    t
}

fn outcome(stdout: &str) -> String {
    let word = stdout.split_whitespace().next().unwrap_or("").to_owned();
    assert!(stdout.starts_with(&format!("{word} target: ")), "unexpected line {stdout:?}");
    word
}

#[test]
fn two_processes_syncing_one_target_both_succeed_in_turn_and_leave_one_source() {
    let s = Scratch::new();
    write_tree(&s.join("a"), &source_a(), 0o755);
    write_tree(&s.join("b"), &source_b(), 0o755);
    let want_a = contents(&expected(&source_a(), 0o755));
    let want_b = contents(&expected(&source_b(), 0o755));
    let mut winners = [0usize; 2];
    for round in 0..ROUNDS {
        if round > 0 {
            // Start from a third tree so that both processes have work to do.
            let start = tree(&[("start", b"start", 0o644)]);
            durable::sync_dir(s.fd(), "target", &start, &opts(&NoProbe, 4)).unwrap();
        }
        // Alternate which one is started first.
        let order = if round % 2 == 0 { ["a", "b"] } else { ["b", "a"] };
        let children: Vec<_> = order
            .iter()
            .map(|src| {
                Command::new(crate::support::durasync())
                    .args(["sync", "target", "--from", src])
                    .current_dir(s.path())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut outcomes: Vec<String> =
            children.into_iter().map(|c| outcome(&ok_stdout(&c.wait_with_output().unwrap()))).collect();
        outcomes.sort();
        // In turn: the second one saw the first one's tree and replaced it.
        let want = if round == 0 { ["created", "replaced"] } else { ["replaced", "replaced"] };
        assert_eq!(outcomes, want, "round {round}");
        let got = contents(&snapshot(&s.join("target")));
        if got == want_a {
            winners[0] += 1;
        } else if got == want_b {
            winners[1] += 1;
        } else {
            panic!("round {round}: the target is neither source: {:?}", got.keys().collect::<Vec<_>>());
        }
        assert!(leftovers(s.path()).is_empty(), "round {round}: {:?}", names(s.path()));
    }
    eprintln!("last writer over {ROUNDS} rounds: a {} times, b {} times", winners[0], winners[1]);
}
