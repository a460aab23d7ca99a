//! The owed-action ledger under the crash explorer: a sync whose gate
//! records the owed action (the real `hooks::Ledger`, durably, before the
//! swap), then the action, then its clearing, recorded as one trace. At
//! every crash point before the clearing, a recovered state holding the new
//! target also holds a ledger owing the action (so the restarted agent runs
//! it: at least once); the action itself runs only at a point from which
//! every crash state holds the new target (never before it is durable).

use std::sync::Mutex;

use durasync::durable::{self, Gate, Options, Refusal, Staged};
use durasync::hooks::Ledger;

use crate::explorer::{Explorer, Opts, Owed, Scenario};
use crate::scenarios::{dir, explore_ok, file, record, to_tree};
use crate::trace::{ROp, Recorder};

/// What the agent's gate does once validators accepted: owe the action,
/// durably, before returning (the sync's ops so far are taken first, so the
/// trace keeps the real order).
pub(crate) struct OweGate<'a> {
    pub(crate) ledger: &'a Ledger,
    pub(crate) sync_rec: &'a Recorder,
    pub(crate) ledger_rec: &'a Recorder,
    pub(crate) trace: &'a Mutex<Vec<ROp>>,
}

impl Gate for OweGate<'_> {
    fn check(&self, _: &Staged<'_>) -> Result<(), Refusal> {
        let mut trace = self.trace.lock().unwrap();
        trace.extend(self.sync_rec.take());
        let opts = Options { probe: self.ledger_rec, ..Options::default() };
        self.ledger
            .owe(&["reload".to_owned()], &opts)
            .map_err(|e| Refusal { by: "ledger".into(), reason: e.to_string() })?;
        trace.extend(self.ledger_rec.take());
        Ok(())
    }

    /// Like the agent's gate of a path with an action and no validator.
    fn exposes_staged(&self) -> bool {
        false
    }
}

/// The recorded scenario: with `owe_first`, the gate owes the action before
/// the swap (what the agent does); without, it is owed only once the sync
/// returned (the order of a tool that records nothing before its commit).
/// Returns the scenario and the crash point where the action runs.
fn scenario(ex: &mut Explorer, owe_first: bool) -> (Scenario, usize) {
    let old = dir(0o755, &[("a", file("old a", 0o644)), ("b", file("old b", 0o600))]);
    let new = dir(0o755, &[("a", file("new a", 0o644)), ("c", file("new c", 0o644))]);
    // A ledger directory that has been written before holds its lock file
    // (durable since that write): recovery then cleans it like any
    // directory durasync writes in (a fresh one is cleaned by `Ledger::open`).
    let initial = dir(0o755, &[("t", old), ("state/.durasync.lock", file("", 0o600))]);
    let tree = to_tree(&new);
    let (mut action_point, mut done_from) = (0, 0);
    let name = if owe_first {
        "sync owing an action, the action, its clearing"
    } else {
        "owed after the commit (wrong)"
    };
    let mut sc = record(ex, name, initial, "t", |root| {
        let state = durable::open_beneath(root, "state").expect("open state");
        let ledger = Ledger::open_at(state, "a.owed").expect("ledger");
        let (sync_rec, ledger_rec) = (Recorder::new(), Recorder::under("state"));
        let trace = Mutex::new(Vec::new());
        let gate = OweGate { ledger: &ledger, sync_rec: &sync_rec, ledger_rec: &ledger_rec, trace: &trace };
        let gate: Option<&dyn Gate> = if owe_first { Some(&gate) } else { None };
        let opts = Options { probe: &sync_rec, gate, ..Options::default() };
        durable::sync_dir(root, "t", &tree, &opts).expect("sync");
        let mut trace = trace.into_inner().unwrap();
        trace.extend(sync_rec.take());
        let opts = Options { probe: &ledger_rec, ..Options::default() };
        if !owe_first {
            ledger.owe(&["reload".to_owned()], &opts).expect("owe");
            trace.extend(ledger_rec.take());
        }
        // The sync returned: its commit fsync is behind us. The agent runs
        // the action here (no disk operation), then clears it.
        action_point = trace.len();
        let (name, seq) = ledger.owed().remove(0);
        done_from = trace.len() + 1;
        assert!(ledger.done(&name, seq, &opts).expect("done"));
        trace.extend(ledger_rec.take());
        trace
    });
    sc.expect.owed = Some(Owed { ledger: "state/a.owed".into(), action: "reload".into(), done_from });
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
    (sc, action_point)
}

#[test]
fn an_owed_action_is_never_lost_and_never_runs_before_the_change_is_durable_at_any_crash_point() {
    let mut ex = Explorer::new();
    let (sc, action_point) = scenario(&mut ex, true);
    let out = explore_ok(&mut ex, &sc);
    // Never before durable: from the action's point on, every crash state
    // holds the new target.
    let certain = out.stats.new_only_from.expect("the new target becomes certain");
    assert!(
        certain <= action_point,
        "the action runs at point {action_point}, the change is certain only from {certain}"
    );
    // And the ledger's own commit fsync precedes the swap.
    let owed_at = sc.steps.iter().position(|s| matches!(&s.rop, ROp::FsyncDir { path } if path == "state"));
    let swap = sc.steps.iter().position(|s| matches!(s.rop, ROp::Exchange { .. }));
    let (owed_at, swap) = (owed_at.expect("the ledger is made durable"), swap.expect("a swap"));
    assert!(owed_at < swap, "the ledger is durable at op {owed_at}, after the swap at op {swap}");
}

#[test]
fn owing_the_action_only_after_the_commit_loses_it_at_some_crash_point() {
    // The check has teeth: the order every tool in the issue uses (record
    // nothing, act after the write) has crash states with the new target
    // and nothing owed.
    let mut ex = Explorer::new();
    let (sc, _) = scenario(&mut ex, false);
    let out = ex.explore(&sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
    let v = out.violations.first().expect("a crash state that loses the action");
    assert!(v.reason.contains("does not owe `reload`"), "{v}");
}
