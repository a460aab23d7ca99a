//! A sync checked by a validator, under the crash explorer: the gate is
//! shown the staged tree (here it reads it as a validator would, through
//! the directory's path), owes the action durably, and the core then
//! compares the staged tree with the request again and flushes it again
//! before the swap. At every crash point a recovered state holds the old
//! target or exactly the tree the validator saw — and whenever that new
//! tree can survive, the ledger owes its action. A validator that writes
//! into what it was shown — a changed file, or one carried unchanged from
//! the live target — is refused, and no crash state (nor the live target
//! after the call) holds its edit.

use std::os::fd::AsRawFd;
use std::sync::Mutex;

use durasync::durable::{self, Gate, Options, Refusal, Staged};
use durasync::hooks::Ledger;

use crate::explorer::{Explorer, Owed, Scenario};
use crate::ledger::OweGate;
use crate::model::{Disk, snapshot};
use crate::scenarios::{dir, explore_ok, file, record, to_tree};
use crate::trace::{ROp, Recorder};

/// What the agent's gate does for a path with a validator and an action:
/// the validator reads (and, with `tamper`, appends to the file named so)
/// the staged tree, then the action is owed (the ledger test's gate).
struct ValidatorGate<'a> {
    tamper: Option<&'a str>,
    seen: Mutex<Option<Disk>>,
    owe: OweGate<'a>,
}

impl Gate for ValidatorGate<'_> {
    fn check(&self, s: &Staged<'_>) -> Result<(), Refusal> {
        // The validator is a program outside durasync: its reads and
        // writes go through no recorder, so the trace shows none of them.
        let staged =
            std::path::PathBuf::from(format!("/proc/self/fd/{}", s.parent.as_raw_fd())).join(s.staging);
        *self.seen.lock().unwrap() = Some(snapshot(&staged));
        if let Some(name) = self.tamper {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(staged.join(name)).unwrap();
            f.write_all(b"INJECTED").unwrap();
        }
        self.owe.check(s)
    }
}

/// The recorded scenario and what the validator saw. `tamper`: the file of
/// the staged tree the validator appends to (then the sync must be refused).
fn scenario(ex: &mut Explorer, tamper: Option<&str>) -> (Scenario, Disk) {
    let old = dir(
        0o755,
        &[("same", file("same", 0o644)), ("a", file("old a", 0o644)), ("b", file("old b", 0o600))],
    );
    let new = dir(
        0o755,
        &[("same", file("same", 0o644)), ("a", file("new a", 0o644)), ("d/c", file("new c", 0o644))],
    );
    let initial = dir(0o755, &[("t", old), ("state/.durasync.lock", file("", 0o600))]);
    let tree = to_tree(&new);
    let mut seen = None;
    let mut done_from = 0;
    let name = match tamper {
        None => "sync checked by a validator, owing an action",
        Some(_) => "sync whose validator edits what it was shown (refused)",
    };
    let mut sc = record(ex, name, initial, "t", |root| {
        let state = durable::open_beneath(root, "state").expect("open state");
        let ledger = Ledger::open_at(state, "a.owed").expect("ledger");
        let (sync_rec, ledger_rec) = (Recorder::new(), Recorder::under("state"));
        let trace = Mutex::new(Vec::new());
        let owe = OweGate { ledger: &ledger, sync_rec: &sync_rec, ledger_rec: &ledger_rec, trace: &trace };
        let gate = ValidatorGate { tamper, seen: Mutex::new(None), owe };
        let opts = Options { probe: &sync_rec, gate: Some(&gate), ..Options::default() };
        let result = durable::sync_dir(root, "t", &tree, &opts);
        seen = gate.seen.lock().unwrap().take();
        let mut trace = trace.into_inner().unwrap();
        trace.extend(sync_rec.take());
        match (tamper, result) {
            (None, Ok(_)) => {
                let opts = Options { probe: &ledger_rec, ..Options::default() };
                let (name, seq) = ledger.owed().remove(0);
                done_from = trace.len() + 1;
                assert!(ledger.done(&name, seq, &opts).expect("done"));
                trace.extend(ledger_rec.take());
            }
            (Some(_), Err(e)) => {
                assert!(e.to_string().contains("changed the staged contents"), "{e}");
            }
            (_, r) => panic!("{name}: {r:?}"),
        }
        trace
    });
    if tamper.is_none() {
        sc.expect.owed = Some(Owed { ledger: "state/a.owed".into(), action: "reload".into(), done_from });
    }
    (sc, seen.expect("the validator ran"))
}

#[test]
fn what_a_validator_saw_is_what_commits_with_its_action_owed_at_every_crash_point() {
    let mut ex = Explorer::new();
    let (sc, seen) = scenario(&mut ex, None);
    // The new target of every crash state is exactly what the validator saw.
    assert_eq!(sc.expect.new.as_ref(), Some(&seen));
    explore_ok(&mut ex, &sc);
    // Nothing carried by hard link into what a validator is shown.
    assert!(
        !sc.steps.iter().any(|s| matches!(s.rop, ROp::Link { .. })),
        "a live file was linked into {{staged}}"
    );
    // After the validator nothing more is written or fsynced in the staged
    // tree: what it saw is what the staging's own fsyncs made durable.
    let swap = sc.steps.iter().position(|s| matches!(s.rop, ROp::Exchange { .. })).expect("a swap");
    let owed =
        sc.steps.iter().position(|s| matches!(&s.rop, ROp::FsyncDir { path } if path == "state")).unwrap();
    for s in &sc.steps[owed..swap] {
        assert!(!s.what.contains("<stage>"), "after the validator: {}", s.what);
    }
}

#[test]
fn a_validator_editing_a_changed_or_a_carried_file_is_refused_and_no_crash_state_holds_its_edit() {
    for tampered in ["a", "same"] {
        let mut ex = Explorer::new();
        // `record` checks the real result against the recorded trace: an
        // edit that reached the live target would not be in it.
        let (sc, seen) = scenario(&mut ex, Some(tampered));
        assert_eq!(sc.expect.new, sc.expect.old, "the refused sync changed the target");
        assert_ne!(sc.expect.new.as_ref(), Some(&seen));
        explore_ok(&mut ex, &sc);
    }
}
