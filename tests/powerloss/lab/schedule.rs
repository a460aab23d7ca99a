//! Which rounds a file system gets, and the verdict: the cut points (every
//! flush of the workload, random writes, some torn), the controls, the
//! tally printed as a table, and the assertions.
//!
//! Bounded: the sweep covers every flush the workload makes (measured by an
//! uncut calibration round) up to [`MAX_SWEEP`] cut points, plus
//! [`RANDOM_ROUNDS`] random ones; `DURASYNC_POWERLOSS_ROUNDS=N` adds N more
//! random rounds (the soak). Nothing asserts on time.

use std::time::Instant;

use durasync_powerloss::{CutMode, CutPlan, image::xorshift};

use crate::can_run;
use crate::lab::{Control, Lab, Observed, STEPS};
use crate::rig::Fs;

/// At most this many flush cut points in the sweep (a stride past it).
const MAX_SWEEP: u64 = 40;
/// Random-write cuts per file system in a normal run (half of them torn).
const RANDOM_ROUNDS: u64 = 12;
/// Rounds per control per file system.
const CONTROL_ROUNDS: usize = 3;

/// The run's random choices: `DURASYNC_POWERLOSS_SEED`, else fresh.
fn seed() -> u64 {
    if let Some(s) = std::env::var("DURASYNC_POWERLOSS_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    let mut b = [0u8; 8];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).expect("getrandom");
    u64::from_le_bytes(b) | 1
}

/// A number in `1..=n`.
fn pick(rng: &mut u64, n: u64) -> u64 {
    1 + xorshift(rng) % n.max(1)
}

/// Run the whole lab for `fs` with the workload's `--flush` (`fsync` or
/// `syncfs`) and assert its verdict. The known-wrong controls run with the
/// fsync lab; the syncfs lab runs the positive syncfs control instead.
pub fn lab(fs: Fs, flush: &'static str) {
    if !can_run(Some(fs)) {
        return;
    }
    let started = Instant::now();
    let seed = seed();
    let mut rng = seed;
    let lab = Lab::new(fs, flush);
    let mut failures: Vec<String> = Vec::new();
    let record = |what: String, o: &Observed, failures: &mut Vec<String>| {
        for v in &o.violations {
            failures.push(format!("{} {what}: {v}", fs.name()));
        }
    };

    // Calibration: no cut until the workload ends; everything must succeed.
    let calib = lab.durasync_round(CutPlan::Never, CutMode::DropAll);
    assert_eq!(calib.succeeded, STEPS, "{}: the uncut workload failed: {:?}", fs.name(), calib.violations);
    record("uncut".into(), &calib, &mut failures);
    let (writes, flushes) = (calib.stats.writes, calib.stats.flushes);

    // The durasync rounds: every flush (or a stride of them), then random writes.
    let stride = flushes.div_ceil(MAX_SWEEP).max(1);
    let mut plans: Vec<(CutPlan, CutMode)> = (1..=flushes + 1)
        .step_by(stride as usize)
        .map(|k| (CutPlan::AfterFlush(k), CutMode::DropAll))
        .collect();
    let extra: u64 =
        std::env::var("DURASYNC_POWERLOSS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    for i in 0..RANDOM_ROUNDS + extra {
        let mode = if i % 2 == 1 { CutMode::Tear(xorshift(&mut rng)) } else { CutMode::DropAll };
        let plan = if i >= RANDOM_ROUNDS && i % 3 == 0 {
            CutPlan::AfterFlush(pick(&mut rng, flushes + 1))
        } else {
            CutPlan::AtWrite(pick(&mut rng, writes + 1))
        };
        plans.push((plan, mode));
    }
    let mut outcomes = [0usize; 3];
    let mut successes_before_cut = 0usize;
    // Where the cut fell: during step i (index STEPS: after every step).
    let mut cut_in = [0usize; STEPS + 1];
    let mut rounds = 1usize;
    for (plan, mode) in &plans {
        let o = lab.durasync_round(*plan, *mode);
        record(format!("{plan:?} {mode:?}"), &o, &mut failures);
        if let Some(g) = o.generation {
            outcomes[g] += 1;
        }
        successes_before_cut += o.succeeded;
        cut_in[o.succeeded] += 1;
        rounds += 1;
    }

    // The controls: known-wrong writers must be caught.
    let controls: &[Control] = if flush == "syncfs" {
        &[Control::CopyRenameSyncfs]
    } else {
        &[Control::CopyRename, Control::CopyRenameDirFsync, Control::InPlace { upto: 0 }]
    };
    let mut control_rows = Vec::new();
    for &control in controls {
        let (mut old, mut new, mut neither) = (0, 0, 0);
        let mut sample = String::new();
        for i in 0..CONTROL_ROUNDS + (extra as usize) / 10 {
            let c = match control {
                // 1..=4: B has 8 entries A lacks or holds otherwise (they go
                // first), so the cut always leaves some rewritten and A's
                // removed files in place.
                Control::InPlace { .. } => Control::InPlace { upto: 1 + i % 4 },
                c => c,
            };
            let o = lab.control_round(c);
            match o.generation {
                Some(0) => old += 1,
                Some(_) => new += 1,
                None => {
                    neither += 1;
                    if sample.is_empty() {
                        sample = o
                            .violations
                            .iter()
                            .find(|v| v.starts_with("neither"))
                            .cloned()
                            .unwrap_or_default();
                    }
                }
            }
            // The file system itself must come back clean even under a
            // wrong writer: anything else is a broken rig.
            for v in o.violations.iter().filter(|v| !v.starts_with("neither old nor new")) {
                failures.push(format!("{} control {c:?}: {v}", fs.name()));
            }
        }
        control_rows.push((control, old, new, neither, sample));
    }

    println!(
        "\npower-loss lab, {} --flush {flush} (seed {seed}): {} durasync rounds ({} flush cut points 1..={} stride {stride}, {} random-write/soak cuts of {} writes, half torn) \
         in {:.0?}\n  target came back A {} / B {} / C {}; steps that reported success before the cut: {successes_before_cut}; violations: {}\n  \
         the cut fell during sync A→B {} / sync B→C {} / write {} / plugin run {} / keep-sync C→A {} / rollback A→C {} / \
         symlink layout A→B {} / B→C {} / after all {}",
        fs.name(),
        rounds,
        flushes.div_ceil(stride) + 1,
        flushes + 1,
        RANDOM_ROUNDS + extra,
        writes,
        started.elapsed(),
        outcomes[0],
        outcomes[1],
        outcomes[2],
        failures.len(),
        cut_in[0],
        cut_in[1],
        cut_in[2],
        cut_in[3],
        cut_in[4],
        cut_in[5],
        cut_in[6],
        cut_in[7],
        cut_in[STEPS],
    );
    for (c, old, new, neither, sample) in &control_rows {
        println!(
            "  control {:<20} old {old} / new {new} / neither-old-nor-new {neither}  {}",
            format!("{c:?}").split(' ').next().unwrap(),
            &sample[..sample.len().min(160)]
        );
    }
    assert!(failures.is_empty(), "{} power-loss violations:\n{}", failures.len(), failures.join("\n"));

    // Proof that the power is really cut: the wrong writers must lose.
    for (control, old, new, neither, _) in control_rows {
        let name = format!("{control:?}");
        match control {
            // Nothing of the renamed copy was flushed: a restart would show
            // B; a cut must show A (btrfs: the renames were not committed)
            // or an emptied B (ext4, xfs: renames committed, data not).
            Control::CopyRename => {
                assert!(
                    new < old + new + neither,
                    "{}: {name} came back new every time: the lab is not cutting power",
                    fs.name()
                );
                if fs != Fs::Btrfs {
                    assert!(neither > 0, "{}: {name} showed no violation in {} rounds", fs.name(), old + new);
                }
            }
            // Directory fsyncs commit the renames, not the files' data (all
            // three come back with empty files); an in-place rewrite cut
            // between two files' fsyncs is a mixed tree.
            Control::CopyRenameDirFsync | Control::InPlace { .. } => {
                assert!(neither > 0, "{}: {name} showed no violation in {} rounds", fs.name(), old + new);
            }
            // What one syncfs persisted must all be there after the cut.
            Control::CopyRenameSyncfs => {
                assert_eq!(
                    (old, neither),
                    (0, 0),
                    "{}: {name}: a syncfs did not persist the renamed copy ({new} new)",
                    fs.name()
                );
            }
        }
    }
}
