//! The crash-state explorer: replay a recorded trace into the weak model,
//! and at every crash point (before the first operation and after each one)
//! materialise every state the model allows into a real directory, run the
//! real `durable::recover` on it, and check the result.
//!
//! Checks on each recovered state:
//! - recovery succeeded and no durasync leftover remains anywhere;
//! - the target is byte-for-byte (names, bytes, modes, owners, the
//!   `security.selinux` and `user.*` attributes) the old or the new tree; at
//!   the success point (the end of the trace, where the call
//!   returned `Ok`) only the new one;
//! - the entries a scenario says must be untouched are;
//! - with a kept previous ([`Prev`]): at most one valid previous of the
//!   target, and it is what the call allows while the target is old and
//!   while it is new (a keep-sync: the old tree once the swap is durable;
//!   a revert: still the previous while the target is not reverted);
//! - optional milestones: from a given crash point on, a directory exists
//!   with a given mode (a call that returned earlier in the trace).
//!
//! Crash during recovery: for some crashed states with leftovers, the
//! recovery of that state is itself recorded and explored the same way; its
//! target must stay what it was and a second recovery must finish the job.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use durasync::durable::names::{DATA_LINK, entry_link, is_gen, is_leftover, is_reserved};
use durasync::durable::{self, Options};

use crate::model::{
    Disk, EnumStats, Model, Step, canonical_stale, canonical_valid, describe, lower, materialise, snapshot,
};
use crate::trace::{ROp, Recorder};

/// What must hold for a scenario.
#[derive(Debug, Clone)]
pub struct Expect {
    /// The target's path relative to the explored root.
    pub target: String,
    /// The target before the call (`None`: missing).
    pub old: Option<Disk>,
    /// The target after the call returned `Ok`.
    pub new: Option<Disk>,
    /// Paths that must be exactly as they were (`None`: must stay missing).
    pub keep: Vec<(String, Option<Disk>)>,
    /// From crash point `.0` on, `.1` is a directory with mode `.2`.
    pub dirs_from: Vec<(usize, String, u32)>,
    /// An owed-action ledger to check (see [`Owed`]).
    pub owed: Option<Owed>,
    /// The target's kept previous to check (see [`Prev`]).
    pub previous: Option<Prev>,
    /// The target is in the symlink layout: `old` and `new` are what a
    /// reader sees through its links ([`layout_view`]), and after recovery
    /// it holds no generation but the current one and no dangling link
    /// (unless marked unsynced, when recovery leaves them).
    pub linked: bool,
}

/// What a reader of a directory in the symlink layout sees (see
/// `durasync::durable::layout`): each entry that is the layout's link
/// `name -> .durasync-data/name` replaced by `name` in the generation
/// `.durasync-data` names (absent when that is missing: a dangling link),
/// other entries as they are, durasync's own (reserved) names left out;
/// the directory's own mode, owner and attributes.
pub fn layout_view(node: &Disk) -> Disk {
    let Disk::Dir { mode, owner, xattrs, entries } = node else { return node.clone() };
    let generation = match entries.get(DATA_LINK) {
        Some(Disk::Link { target }) => match entries.get(target.as_str()) {
            Some(Disk::Dir { entries, .. }) => Some(entries),
            _ => None,
        },
        _ => None,
    };
    let mut seen = std::collections::BTreeMap::new();
    for (name, child) in entries {
        if is_reserved(name) {
            continue;
        }
        match child {
            Disk::Link { target } if *target == entry_link(name) => {
                if let Some(found) = generation.and_then(|g| g.get(name)) {
                    seen.insert(name.clone(), found.clone());
                }
            }
            other => {
                seen.insert(name.clone(), other.clone());
            }
        }
    }
    Disk::Dir { mode: *mode, owner: *owner, xattrs: xattrs.clone(), entries: seen }
}

/// What remains in a recovered directory in the symlink layout that
/// recovery should have removed: another generation than the current one,
/// a dangling link of the layout. Nothing is judged while it is marked
/// unsynced (recovery then leaves them, see `layout.rs`).
fn layout_leftovers(node: Option<&Disk>) -> Option<String> {
    let Some(Disk::Dir { entries, .. }) = node else { return None };
    if entries.keys().any(|n| n.starts_with(".durasync-unsynced-")) {
        return None;
    }
    let current = match entries.get(DATA_LINK) {
        Some(Disk::Link { target }) => Some(target.as_str()),
        _ => None,
    };
    // A `.durasync-data` naming what is not there would refuse every later change.
    if let Some(c) = current
        && !matches!(entries.get(c), Some(Disk::Dir { .. }))
    {
        return Some(format!("{DATA_LINK} names {c}, which is not a generation directory beside it"));
    }
    let other: Vec<&String> = entries.keys().filter(|n| is_gen(n) && Some(n.as_str()) != current).collect();
    if current.is_some() && !other.is_empty() {
        return Some(format!("generations other than the current one remain after recovery: {other:?}"));
    }
    let generation = current.and_then(|c| match entries.get(c) {
        Some(Disk::Dir { entries, .. }) => Some(entries),
        _ => None,
    });
    let dangling: Vec<&String> = entries
        .iter()
        .filter(|(n, d)| matches!(d, Disk::Link { target } if *target == entry_link(n)))
        .filter(|(n, _)| generation.is_some_and(|g| !g.contains_key(*n)))
        .map(|(n, _)| n)
        .collect();
    if !dangling.is_empty() {
        return Some(format!("dangling links remain after recovery: {dangling:?}"));
    }
    None
}

/// The target as the checks see it in `root`: as it is, or through its
/// links in the symlink layout.
pub fn seen(expect: &Expect, root: &Disk) -> Option<Disk> {
    let target = root.get(&expect.target)?;
    Some(if expect.linked { layout_view(target) } else { target.clone() })
}

/// What the valid previous of the target (a keep entry beside it, by the
/// inode rule; see `model.rs` for its canonical names) may be in a
/// recovered state: one of `when_old` while the target is the old tree,
/// one of `when_new` once it is the new one (`None`: no previous).
#[derive(Debug, Clone)]
pub struct Prev {
    pub when_old: Vec<Option<Disk>>,
    pub when_new: Vec<Option<Disk>>,
}

/// The valid previous of `target` (a path) in `root`: `Err` when there is
/// more than one.
pub fn previous_in(root: &Disk, target: &str) -> Result<Option<Disk>, String> {
    let (parent, name) = target.rsplit_once('/').unwrap_or(("", target));
    let Some(Disk::Dir { entries, .. }) = root.get(parent) else { return Ok(None) };
    let valid: Vec<(&String, &Disk)> =
        entries.iter().filter(|(n, _)| canonical_valid(n).is_some_and(|(_, t)| t == name)).collect();
    match valid.as_slice() {
        [] => Ok(None),
        [(_, d)] => Ok(Some((*d).clone())),
        more => Err(format!(
            "{} valid previouses of {target}: {:?}",
            more.len(),
            more.iter().map(|(n, d)| format!("{n}={}", d.describe())).collect::<Vec<_>>()
        )),
    }
}

/// The ledger's promise: at every crash point before the action's success
/// was recorded (`done_from`), a recovered state whose target is the new
/// tree has the ledger file naming the action — the restarted agent runs it.
#[derive(Debug, Clone)]
pub struct Owed {
    /// The ledger file's path relative to the explored root.
    pub ledger: String,
    /// The action's name (one line of the ledger).
    pub action: String,
    /// The first crash point after the action's clearing began.
    pub done_from: usize,
}

/// A recorded call, ready to explore.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    /// The explored root before the call, all of it durable.
    pub initial: Disk,
    /// The call's operations, resolved to inodes.
    pub steps: Vec<Step>,
    pub expect: Expect,
}

/// A crash state that breaks the guarantee.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Crash point: after this many operations.
    pub point: usize,
    /// The last operation before the crash (`start` for point 0).
    pub after: String,
    /// The crashed state, before recovery.
    pub state: String,
    /// What recovery made of it.
    pub recovered: String,
    /// Which check failed.
    pub reason: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "crash point {} (after `{}`): {}\n    crashed state: {}\n    after recovery: {}",
            self.point, self.after, self.reason, self.state, self.recovered
        )
    }
}

/// What an exploration saw.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub crash_points: usize,
    /// Distinct crash states, summed over crash points.
    pub states: usize,
    /// The first crash point at which some state holds the new target.
    pub first_new: Option<usize>,
    /// The first crash point from which every state holds the new target.
    pub new_only_from: Option<usize>,
    pub enumeration: EnumStats,
    /// Crashed states whose own recovery was explored.
    pub recovery_runs: usize,
    pub recovery_points: usize,
    pub recovery_states: usize,
    pub elapsed: Duration,
}

/// The result of one exploration.
#[derive(Debug, Default)]
pub struct Outcome {
    pub stats: Stats,
    pub violations: Vec<Violation>,
}

/// How to explore.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Stop at the first violating crash point (mutation checks).
    pub stop_at_first: bool,
    /// How many crashed states get their own recovery explored.
    pub recovery_crashes: usize,
}

/// Materialises states and runs recovery on them, caching by state.
pub struct Explorer {
    base: tempfile::TempDir,
    counter: usize,
    cache: HashMap<Disk, Result<Disk, String>>,
    /// States really written to disk and recovered.
    pub materialised: usize,
}

impl Explorer {
    pub fn new() -> Explorer {
        let base = tempfile::Builder::new()
            .prefix("crash-states-")
            .tempdir_in(crate::states_base())
            .expect("tempdir");
        Explorer { base, counter: 0, cache: HashMap::new(), materialised: 0 }
    }

    /// A fresh, not yet existing path beneath the explorer's directory.
    pub fn fresh_path(&mut self) -> PathBuf {
        self.counter += 1;
        self.base.path().join(format!("s{}", self.counter))
    }

    /// Run the real recovery on `state` (cached): the recovered root, or
    /// recovery's error.
    fn recover(&mut self, state: &Disk) -> Result<Disk, String> {
        if let Some(r) = self.cache.get(state) {
            return r.clone();
        }
        let (r, path) = self.recover_with(state, &durable::NoProbe);
        remove(&path);
        self.cache.insert(state.clone(), r.clone());
        r
    }

    fn recover_with(&mut self, state: &Disk, probe: &dyn durable::Probe) -> (Result<Disk, String>, PathBuf) {
        let path = self.fresh_path();
        materialise(state, &path);
        self.materialised += 1;
        let dir = std::fs::File::open(&path).expect("open state dir");
        let opts = Options { probe, ..Options::default() };
        let r = durable::recover(std::os::fd::AsFd::as_fd(&dir), &opts)
            .map(|_| snapshot(&path))
            .map_err(|e| e.to_string());
        drop(dir);
        (r, path)
    }

    /// Record the recovery of `state`: its trace and its result.
    fn record_recovery(&mut self, state: &Disk) -> (Vec<ROp>, Result<Disk, String>) {
        let rec = Recorder::new();
        let (r, path) = self.recover_with(state, &rec);
        remove(&path);
        (rec.take(), r)
    }

    /// Explore every crash point of `steps` (which may be a mutated trace of
    /// `sc`) against `sc.expect`.
    pub fn explore(&mut self, sc: &Scenario, steps: &[Step], opts: Opts) -> Outcome {
        let start = Instant::now();
        let mut out = Outcome::default();
        let mut model = Model::from_disk(&sc.initial);
        let n = steps.len();
        let mut recovery_candidates: Vec<(usize, Disk)> = Vec::new();
        let mut all_new_since: Option<usize> = None;
        for point in 0..=n {
            if point > 0 {
                model.apply(&steps[point - 1].op);
            }
            let after = if point == 0 { "start".to_owned() } else { steps[point - 1].what.clone() };
            let states = model.crash_states(&mut out.stats.enumeration);
            out.stats.crash_points += 1;
            out.stats.states += states.len();
            let mut all_new = true;
            let mut best: Option<(usize, &Disk)> = None;
            let mut violated = false;
            for state in &states {
                let recovered = self.recover(state);
                let target = recovered.as_ref().ok().and_then(|r| seen(&sc.expect, r));
                let is_new = recovered.is_ok() && target == sc.expect.new;
                if is_new && sc.expect.new != sc.expect.old {
                    out.stats.first_new.get_or_insert(point);
                }
                all_new &= is_new;
                if let Some(reason) = check(&sc.expect, point, point == n, &recovered) {
                    violated = true;
                    out.violations.push(Violation {
                        point,
                        after: after.clone(),
                        state: state.describe(),
                        recovered: match &recovered {
                            Ok(r) => r.describe(),
                            Err(e) => format!("error: {e}"),
                        },
                        reason,
                    });
                    if opts.stop_at_first {
                        break;
                    }
                } else {
                    let leftovers =
                        state.paths_where(&|name| is_leftover(name) || canonical_stale(name)).len();
                    if leftovers > 0 && best.is_none_or(|(b, _)| leftovers > b) {
                        best = Some((leftovers, state));
                    }
                }
            }
            if all_new {
                all_new_since.get_or_insert(point);
            } else {
                all_new_since = None;
            }
            if let Some((_, s)) = best {
                recovery_candidates.push((point, s.clone()));
            }
            if violated && opts.stop_at_first {
                break;
            }
        }
        out.stats.new_only_from = all_new_since;

        // Crash during recovery, on an even spread of crashed states.
        let picks = spread(recovery_candidates.len(), opts.recovery_crashes);
        for i in picks {
            let (point, state) = &recovery_candidates[i];
            let (trace, recovered) = self.record_recovery(state);
            let Ok(recovered) = recovered else { continue };
            // Idempotent: recovering a recovered state changes nothing at all.
            let (again, _) = self.record_recovery(&recovered);
            if !again.is_empty() {
                let ops: Vec<String> = again.iter().map(ROp::to_string).collect();
                out.violations.push(Violation {
                    point: *point,
                    after: "a completed recovery".into(),
                    state: recovered.describe(),
                    recovered: recovered.describe(),
                    reason: format!("a second recovery still changed something: {ops:?}"),
                });
            }
            let target = seen(&sc.expect, &recovered);
            let sub = Scenario {
                name: format!("{} / recovery of crash point {point}", sc.name),
                initial: state.clone(),
                steps: lower(&Model::from_disk(state), &trace),
                expect: Expect {
                    target: sc.expect.target.clone(),
                    old: target.clone(),
                    new: target,
                    keep: sc.expect.keep.clone(),
                    dirs_from: Vec::new(),
                    owed: None,
                    linked: sc.expect.linked,
                    // Recovery never changes a valid previous.
                    previous: sc.expect.previous.as_ref().map(|_| {
                        let prev = previous_in(&recovered, &sc.expect.target).ok().flatten();
                        Prev { when_old: vec![prev.clone()], when_new: vec![prev] }
                    }),
                },
            };
            let nested = self.explore(&sub, &sub.steps, Opts { stop_at_first: false, recovery_crashes: 0 });
            out.stats.recovery_runs += 1;
            out.stats.recovery_points += nested.stats.crash_points;
            out.stats.recovery_states += nested.stats.states;
            out.stats.enumeration.capped += nested.stats.enumeration.capped;
            out.stats.enumeration.max_pending =
                out.stats.enumeration.max_pending.max(nested.stats.enumeration.max_pending);
            for mut v in nested.violations {
                v.reason = format!("crash during recovery of a state of crash point {point}: {}", v.reason);
                out.violations.push(v);
            }
        }
        out.stats.elapsed = start.elapsed();
        // Nothing was cut: every state the model allows at every crash point
        // (every subset of every directory's pending changes) was recovered
        // and checked, for this trace and the recoveries explored under it.
        assert_eq!(
            out.stats.enumeration.capped,
            0,
            "{}: the crash states were sampled (more than {} in one subtree): the check would be partial",
            sc.name,
            crate::model::STATES_CAP
        );
        out
    }
}

/// Up to `k` indices out of `n`, evenly spread, first and last included.
fn spread(n: usize, k: usize) -> Vec<usize> {
    match (n, k) {
        (0, _) | (_, 0) => Vec::new(),
        _ if k >= n => (0..n).collect(),
        (_, 1) => vec![n - 1],
        _ => {
            let mut v: Vec<usize> = (0..k).map(|i| i * (n - 1) / (k - 1)).collect();
            v.dedup();
            v
        }
    }
}

/// Why a recovered state breaks the guarantee, if it does.
fn check(expect: &Expect, point: usize, success: bool, recovered: &Result<Disk, String>) -> Option<String> {
    let root = match recovered {
        Ok(r) => r,
        Err(e) => return Some(format!("recovery failed: {e}")),
    };
    let leftovers = root.paths_where(&|name| is_leftover(name) || canonical_stale(name));
    if !leftovers.is_empty() {
        return Some(format!("leftovers remain after recovery: {leftovers:?}"));
    }
    if expect.linked
        && let Some(reason) = layout_leftovers(root.get(&expect.target))
    {
        return Some(reason);
    }
    let target = seen(expect, root);
    let target = target.as_ref();
    if success {
        if target != expect.new.as_ref() {
            return Some(format!(
                "after the success point the target must be the new tree {}, found {}",
                describe(expect.new.as_ref()),
                describe(target)
            ));
        }
    } else if target != expect.old.as_ref() && target != expect.new.as_ref() {
        return Some(format!(
            "target is neither old {} nor new {}, found {}",
            describe(expect.old.as_ref()),
            describe(expect.new.as_ref()),
            describe(target)
        ));
    }
    if let Some(p) = &expect.previous {
        let prev = match previous_in(root, &expect.target) {
            Ok(prev) => prev,
            Err(e) => return Some(e),
        };
        let (allowed, when) = if target == expect.new.as_ref() && (success || expect.new != expect.old) {
            (&p.when_new, "new")
        } else {
            (&p.when_old, "old")
        };
        if !allowed.contains(&prev) {
            let shown: Vec<String> = allowed.iter().map(|d| describe(d.as_ref())).collect();
            return Some(format!(
                "with the {when} target the previous must be one of {shown:?}, found {}",
                describe(prev.as_ref())
            ));
        }
    }
    for (path, want) in &expect.keep {
        let got = root.get(path);
        if got != want.as_ref() {
            return Some(format!("{path} must stay {}, found {}", describe(want.as_ref()), describe(got)));
        }
    }
    if let Some(o) = &expect.owed
        && point < o.done_from
        && expect.new != expect.old
        && target == expect.new.as_ref()
    {
        let owes = match root.get(&o.ledger) {
            Some(Disk::File { data, .. }) => String::from_utf8_lossy(data).lines().any(|l| l == o.action),
            _ => false,
        };
        if !owes {
            return Some(format!(
                "the new target is in place but the ledger {} does not owe `{}` (found {}): the action would be lost",
                o.ledger,
                o.action,
                describe(root.get(&o.ledger))
            ));
        }
    }
    for (from, path, mode) in &expect.dirs_from {
        if point >= *from {
            match root.get(path) {
                Some(Disk::Dir { mode: m, .. }) if m == mode => {}
                other => {
                    return Some(format!(
                        "from crash point {from} on {path} must be a directory with mode {mode:o}, found {}",
                        describe(other)
                    ));
                }
            }
        }
    }
    None
}

/// Remove a materialised state (best effort: a leftover is only disk space
/// in a temporary directory).
pub fn remove(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
}

/// Print one exploration's numbers.
pub fn print_stats(name: &str, ops: usize, out: &Outcome, materialised: usize) {
    let s = &out.stats;
    println!(
        "[crash] {name}: {ops} ops, {} crash points, {} states (+ recovery crashes: {} runs, {} crash points, \
         {} states), {materialised} materialised, first new at point {}, only new from point {}, \
         at most {} pending changes in one directory (every subset explored), {:.2?}",
        s.crash_points,
        s.states,
        s.recovery_runs,
        s.recovery_points,
        s.recovery_states,
        s.first_new.map_or("-".into(), |p| p.to_string()),
        s.new_only_from.map_or("-".into(), |p| p.to_string()),
        s.enumeration.max_pending,
        s.elapsed,
    );
}
