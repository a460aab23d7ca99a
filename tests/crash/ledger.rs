//! The owed-action ledger under the crash explorer: a sync whose gate
//! records the owed action (the real `hooks::Ledger`, durably, before the
//! swap), then the action, then its clearing, recorded as one trace. At
//! every crash point before the clearing, a recovered state holding the new
//! target also holds a ledger owing the action (so the restarted agent runs
//! it: at least once); the action itself runs only at a point from which
//! every crash state holds the new target (never before it is durable).

use std::os::fd::AsFd;
use std::sync::Mutex;

use durasync::durable::{self, Gate, Options, Refusal, Staged};
use durasync::hooks::Ledger;

use crate::explorer::{Explorer, Owed};
use crate::scenarios::{dir, explore_ok, file, record, to_tree};
use crate::trace::{ROp, Recorder};

/// What the agent's gate does once validators accepted: owe the action,
/// durably, before returning (the sync's ops so far are taken first, so the
/// trace keeps the real order).
struct OweGate<'a> {
    ledger: &'a Ledger,
    sync_rec: &'a Recorder,
    ledger_rec: &'a Recorder,
    trace: &'a Mutex<Vec<ROp>>,
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
}

#[test]
fn an_owed_action_is_never_lost_and_never_runs_before_the_change_is_durable_at_any_crash_point() {
    let mut ex = Explorer::new();
    let old = dir(0o755, &[("a", file("old a", 0o644)), ("b", file("old b", 0o600))]);
    let new = dir(0o755, &[("a", file("new a", 0o644)), ("c", file("new c", 0o644))]);
    let initial = dir(0o755, &[("t", old), ("state/.keep", file("", 0o600))]);
    let tree = to_tree(&new);
    let (mut action_point, mut done_from) = (0, 0);
    let mut sc = record(&mut ex, "sync owing an action, the action, its clearing", initial, "t", |root| {
        let state = durable::open_beneath(root, "state").expect("open state");
        let ledger = Ledger::open_at(state, "a.owed").expect("ledger");
        let (sync_rec, ledger_rec) = (Recorder::new(), Recorder::under("state"));
        let trace = Mutex::new(Vec::new());
        let gate = OweGate { ledger: &ledger, sync_rec: &sync_rec, ledger_rec: &ledger_rec, trace: &trace };
        let opts = Options { probe: &sync_rec, gate: Some(&gate), ..Options::default() };
        durable::sync_dir(root, "t", &tree, &opts).expect("sync");
        let mut trace = trace.into_inner().unwrap();
        trace.extend(sync_rec.take());
        // The sync returned: its commit fsync is behind us. The agent runs
        // the action here (no disk operation), then clears it.
        action_point = trace.len();
        let (name, seq) = ledger.owed().remove(0);
        done_from = trace.len() + 1;
        let opts = Options { probe: &ledger_rec, ..Options::default() };
        assert!(ledger.done(&name, seq, &opts).expect("done"));
        trace.extend(ledger_rec.take());
        trace
    });
    sc.expect.owed = Some(Owed { ledger: "state/a.owed".into(), action: "reload".into(), done_from });
    assert_eq!(sc.expect.new.as_ref(), Some(&new));
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
