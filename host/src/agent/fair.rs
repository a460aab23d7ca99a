//! Which due runs start when: the agent's run slots shared fairly.
//!
//! The agent runs at most `max_runs` plugin runs at once (the bound on its
//! threads and memory). Handed out earliest-due first, those slots can be
//! held hostage: instances that fail every run, or run to their timeout,
//! are due again after each back-off, and a handful of them can keep every
//! slot busy while a healthy instance whose input just changed waits for one
//! of them to time out.
//!
//! The policy, applied each time slots are free:
//!
//! - **Standing.** An instance is *proven* when its last run succeeded, it
//!   has succeeded at least once, and that run took less than half its
//!   timeout. Every other instance (one that failed or timed out last, a
//!   slow one, one that never ran) is *unproven*.
//! - **A reserve for the proven.** With `max_runs ≥ 2`, [`reserved`] slots
//!   (a quarter, at least one) are kept for proven instances: unproven runs
//!   may hold at most `max_runs - reserved` at once. A proven instance that
//!   becomes due finds a free slot unless proven runs fill the reserve and
//!   the rest, which only happens when that many instances are healthy and
//!   busy at once, not because others are failing.
//! - **Order.** Proven instances start first, then unproven ones; within
//!   each, earliest due first (a failing instance is already spaced out by
//!   its back-off).
//!
//! Why not a share per instance: each instance has at most one run in
//! flight already, so per-instance shares only matter when instances
//! outnumber slots, and then it is precisely the failing and slow ones
//! that must not decide who waits. Why not pre-empting a running plugin: a
//! run holds a lock and may be mid-commit; it ends at its own deadline.
//! The bound itself never moves: at most `max_runs` runs are ever in flight.

use std::time::{Duration, Instant};

/// How an instance stands for scheduling, from its last run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Succeeded last, at least once, in under half its timeout.
    Proven,
    /// Failed or timed out last, slow, or never ran.
    Unproven,
}

impl Standing {
    /// The standing after a run that ended `ok` after `elapsed`, for an
    /// instance whose runs may take `timeout`.
    pub(crate) fn after_run(ok: bool, elapsed: Duration, timeout: Duration) -> Standing {
        if ok && elapsed.saturating_mul(2) < timeout { Standing::Proven } else { Standing::Unproven }
    }
}

/// The slots of `max_runs` kept for proven instances: a quarter, at least
/// one when there are two or more (with one slot, only the order helps).
pub(crate) fn reserved(max_runs: usize) -> usize {
    if max_runs < 2 { 0 } else { (max_runs / 4).max(1) }
}

/// One due, idle instance: when it became due, its standing, and an id.
#[derive(Debug, Clone)]
pub(crate) struct Due<K> {
    pub at: Instant,
    pub standing: Standing,
    pub key: K,
}

/// Which of `due` to start now, in order, given `running_proven` and
/// `running_unproven` runs already in flight and the bound `max_runs`.
pub(crate) fn pick<K: Ord>(
    mut due: Vec<Due<K>>,
    running_proven: usize,
    running_unproven: usize,
    max_runs: usize,
) -> Vec<K> {
    let mut free = max_runs.saturating_sub(running_proven + running_unproven);
    let mut unproven_room = (max_runs - reserved(max_runs)).saturating_sub(running_unproven);
    due.sort_by(|a, b| {
        (a.standing != Standing::Proven, a.at, &a.key).cmp(&(b.standing != Standing::Proven, b.at, &b.key))
    });
    let mut out = Vec::new();
    for d in due {
        if free == 0 {
            break;
        }
        if d.standing == Standing::Unproven {
            if unproven_room == 0 {
                continue;
            }
            unproven_room -= 1;
        }
        free -= 1;
        out.push(d.key);
    }
    out
}

/// Whether an instance of `standing` may start now (for the loop's next
/// wake-up: an instance that could not start anyway must not wake it).
pub(crate) fn may_start(
    standing: Standing,
    running_proven: usize,
    running_unproven: usize,
    max_runs: usize,
) -> bool {
    let running = running_proven + running_unproven;
    match standing {
        Standing::Proven => running < max_runs,
        Standing::Unproven => running < max_runs && running_unproven < max_runs - reserved(max_runs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(at_ms: u64, standing: Standing, key: &'static str) -> Due<&'static str> {
        let base = Instant::now();
        Due { at: base + Duration::from_millis(at_ms), standing, key }
    }

    #[test]
    fn a_proven_instance_starts_before_earlier_unproven_ones() {
        let d = vec![
            due(1, Standing::Unproven, "hang-1"),
            due(2, Standing::Unproven, "hang-2"),
            due(9, Standing::Proven, "good"),
        ];
        assert_eq!(pick(d, 0, 0, 2), ["good", "hang-1"]);
    }

    #[test]
    fn unproven_runs_never_take_the_reserved_slot() {
        let hangs: Vec<_> = (0..12)
            .map(|i| {
                due(
                    i,
                    Standing::Unproven,
                    ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"][i as usize],
                )
            })
            .collect();
        // Four slots, one reserved: three unproven runs at most.
        assert_eq!(pick(hangs.clone(), 0, 0, 4), ["a", "b", "c"]);
        assert!(pick(hangs.clone(), 0, 3, 4).is_empty(), "the fourth slot waits for a proven instance");
        assert_eq!(pick(vec![due(5, Standing::Proven, "good")], 0, 3, 4), ["good"]);
        assert!(!may_start(Standing::Unproven, 0, 3, 4));
        assert!(may_start(Standing::Proven, 0, 3, 4));
        // Sixteen slots keep four.
        assert_eq!(pick(hangs, 0, 0, 16).len(), 12);
        assert_eq!(reserved(16), 4);
    }

    #[test]
    fn the_bound_holds_whatever_the_standing() {
        let d: Vec<_> = (0..8)
            .map(|i| due(i, Standing::Proven, ["a", "b", "c", "d", "e", "f", "g", "h"][i as usize]))
            .collect();
        assert_eq!(pick(d.clone(), 0, 0, 4).len(), 4);
        assert_eq!(pick(d.clone(), 2, 1, 4).len(), 1);
        assert!(pick(d, 3, 1, 4).is_empty());
        assert!(!may_start(Standing::Proven, 3, 1, 4));
    }

    #[test]
    fn one_slot_keeps_no_reserve_and_orders_proven_first() {
        assert_eq!(reserved(1), 0);
        let d = vec![due(1, Standing::Unproven, "hang"), due(2, Standing::Proven, "good")];
        assert_eq!(pick(d.clone(), 0, 0, 1), ["good"]);
        assert_eq!(pick(vec![due(1, Standing::Unproven, "hang")], 0, 0, 1), ["hang"]);
    }

    #[test]
    fn a_run_is_proven_only_when_it_succeeded_in_under_half_its_timeout() {
        let t = Duration::from_secs(30);
        assert_eq!(Standing::after_run(true, Duration::from_secs(1), t), Standing::Proven);
        assert_eq!(Standing::after_run(true, Duration::from_secs(16), t), Standing::Unproven);
        assert_eq!(Standing::after_run(false, Duration::from_millis(1), t), Standing::Unproven);
    }
}
