//! Mutation checks: break the recorded sequence on purpose and make sure the
//! explorer sees it. Each fsync is dropped in turn, and the swap is moved
//! before the fsync that must precede it (the staging directory's for a
//! sync, the temporary file's for a single-file write); under an owner and
//! label policy, each `chown` and `setxattr` is moved after the flush that
//! must follow it (its inode's fsync, or the syncfs) and dropped. Every mutation must
//! produce a violating crash state; one that goes unnoticed fails the test,
//! because it means that step is not needed or the explorer is blind.

use crate::explorer::{Explorer, Opts, Scenario, print_stats};
use crate::model::{IOp, Step};
use crate::scenarios;
use crate::trace::ROp;

/// One broken variant of a trace.
struct Mutation {
    name: String,
    steps: Vec<Step>,
}

/// Every fsync dropped in turn, and the swap moved before the fsync of
/// `before_swap` (a path in the trace), if given.
fn mutations(sc: &Scenario, before_swap: Option<&str>) -> Vec<Mutation> {
    let mut out = Vec::new();
    for (i, step) in sc.steps.iter().enumerate() {
        if matches!(step.op, IOp::Fsync { .. } | IOp::SyncFs) {
            let mut steps = sc.steps.clone();
            steps.remove(i);
            out.push(Mutation { name: format!("drop op {} `{}`", i + 1, step.what), steps });
        }
    }
    if let Some(path) = before_swap {
        let swap = sc.steps.iter().position(|s| s.rop.is_swap()).expect("a swap");
        let fsync = sc
            .steps
            .iter()
            .position(|s| match &s.rop {
                ROp::FsyncDir { path: p } | ROp::FsyncFile { path: p } | ROp::Syncfs { path: p } => {
                    crate::trace::short(p) == path
                }
                _ => false,
            })
            .unwrap_or_else(|| panic!("no fsync of {path}"));
        assert!(fsync < swap, "the fsync of {path} precedes the swap");
        let mut steps = sc.steps.clone();
        let moved = steps.remove(swap);
        let name = format!("move `{}` before `{}`", moved.what, steps[fsync].what);
        steps.insert(fsync, moved);
        out.push(Mutation { name, steps });
    }
    out
}

/// Every `chown` and `setxattr` of `sc` moved right after the first flush
/// that covers its inode (the next fsync of its path, or a syncfs), and
/// every one dropped.
fn attr_mutations(sc: &Scenario) -> Vec<Mutation> {
    let mut out = Vec::new();
    for (i, step) in sc.steps.iter().enumerate() {
        let path = match &step.rop {
            ROp::Chown { path, .. } | ROp::SetXattr { path, .. } => path,
            _ => continue,
        };
        let flush = i
            + 1
            + sc.steps[i + 1..]
                .iter()
                .position(|s| match &s.rop {
                    ROp::FsyncFile { path: p } | ROp::FsyncDir { path: p } => p == path,
                    ROp::Syncfs { .. } => true,
                    _ => false,
                })
                .unwrap_or_else(|| panic!("{}: `{}` is never flushed", sc.name, step.what));
        // The step keeps its inode (lowered in trace order), wherever it goes.
        let mut steps = sc.steps.clone();
        let moved = steps.remove(i);
        let name = format!("move `{}` after `{}`", moved.what, sc.steps[flush].what);
        steps.insert(flush, moved);
        out.push(Mutation { name, steps });
        let mut steps = sc.steps.clone();
        steps.remove(i);
        out.push(Mutation { name: format!("drop op {} `{}`", i + 1, step.what), steps });
    }
    out
}

/// Explore every mutation of `sc`; print each with its first violating
/// crash point; fail if the original trace has a violation or if any
/// mutation has none.
fn check_mutations(ex: &mut Explorer, sc: &Scenario, before_swap: Option<&str>) {
    let muts = mutations(sc, before_swap);
    let fsyncs = sc.steps.iter().filter(|s| matches!(s.op, IOp::Fsync { .. } | IOp::SyncFs)).count();
    assert_eq!(muts.len(), fsyncs + usize::from(before_swap.is_some()));
    check_all(ex, sc, &muts);
}

/// Explore the unmutated trace of `sc` (it must hold) and each of `muts`
/// (each must be caught).
fn check_all(ex: &mut Explorer, sc: &Scenario, muts: &[Mutation]) {
    let base = ex.explore(sc, &sc.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
    assert!(base.violations.is_empty(), "{}: the unmutated trace fails: {}", sc.name, base.violations[0]);
    let mut unnoticed = Vec::new();
    let mut states = 0;
    let before = ex.materialised;
    let start = std::time::Instant::now();
    for m in muts {
        let out = ex.explore(sc, &m.steps, Opts { stop_at_first: true, recovery_crashes: 0 });
        states += out.stats.states;
        match out.violations.first() {
            Some(v) => println!("[mutation] {}: {} — caught at {v}", sc.name, m.name),
            None => {
                println!("[mutation] {}: {} — NOT CAUGHT", sc.name, m.name);
                unnoticed.push(m.name.clone());
            }
        }
    }
    println!(
        "[mutation] {}: {} mutations, {} caught, {states} states explored, {} materialised, {:.2?}",
        sc.name,
        muts.len(),
        muts.len() - unnoticed.len(),
        ex.materialised - before,
        start.elapsed()
    );
    print_stats(&format!("{} (unmutated, to first violation)", sc.name), sc.steps.len(), &base, 0);
    assert!(unnoticed.is_empty(), "{}: mutations the explorer did not catch: {unnoticed:?}", sc.name);
}

#[test]
fn every_fsync_and_the_swap_order_of_a_replacing_sync_are_needed() {
    let mut ex = Explorer::new();
    let sc = scenarios::replace(&mut ex);
    check_mutations(&mut ex, &sc, Some("<stage>"));
}

#[test]
fn every_fsync_and_the_swap_order_of_a_nested_sync_are_needed() {
    let mut ex = Explorer::new();
    let sc = scenarios::nested(&mut ex);
    check_mutations(&mut ex, &sc, Some("<stage>"));
    // Also before the deepest subdirectory's fsync, the first directory fsync.
    check_mutations(&mut ex, &sc, Some("<stage>/sub/dir"));
}

#[test]
fn every_fsync_and_the_swap_order_of_a_partial_change_carrying_files_are_needed() {
    let mut ex = Explorer::new();
    let sc = scenarios::partial(&mut ex);
    check_mutations(&mut ex, &sc, Some("<stage>"));
    // The carried `sub/same` is named only by `sub`'s entries: its fsync too.
    check_mutations(&mut ex, &sc, Some("<stage>/sub"));
}

#[test]
fn every_fsync_and_the_swap_order_of_a_first_sync_are_needed() {
    let mut ex = Explorer::new();
    let sc = scenarios::create(&mut ex);
    check_mutations(&mut ex, &sc, Some("<stage>"));
    let sc = scenarios::fresh_parents(&mut ex);
    check_mutations(&mut ex, &sc, Some("a/b/<stage>"));
}

#[test]
fn every_fsync_and_the_rename_order_of_a_single_file_write_are_needed() {
    let mut ex = Explorer::new();
    let sc = scenarios::write_replace(&mut ex);
    check_mutations(&mut ex, &sc, Some("<tmp>"));
    let sc = scenarios::write_create(&mut ex);
    check_mutations(&mut ex, &sc, Some("<tmp>"));
}

#[test]
fn the_commit_fsync_of_a_removal_is_needed() {
    let mut ex = Explorer::new();
    let sc = scenarios::remove_dir(&mut ex);
    check_mutations(&mut ex, &sc, None);
    let sc = scenarios::remove_file(&mut ex);
    check_mutations(&mut ex, &sc, None);
}

#[test]
fn every_fsync_and_the_rename_order_of_a_one_file_change_are_needed() {
    let mut ex = Explorer::new();
    for mode_only in [false, true] {
        let sc = scenarios::one_file(&mut ex, mode_only);
        // Dropping the temporary file's or the directory's fsync, and the
        // rename moved before the file's fsync.
        check_mutations(&mut ex, &sc, Some("<tmp>"));
    }
}

#[test]
fn the_syncfs_and_its_order_before_the_swap_are_needed() {
    use durasync::durable::Flush;
    let mut ex = Explorer::new();
    // Dropping the syncfs or the commit fsync, and the swap moved before the syncfs.
    let sc = scenarios::replace_with(&mut ex, Flush::Syncfs);
    check_mutations(&mut ex, &sc, Some("<stage>"));
    // The carried names too are made durable by the syncfs alone.
    let sc = scenarios::syncfs_partial(&mut ex);
    check_mutations(&mut ex, &sc, Some("<stage>"));
}

/// Explore `steps`, a hand-made variant of `sc` named `name`: it must be
/// caught, like every mutation.
fn check_caught(ex: &mut Explorer, sc: &Scenario, name: &str, steps: &[Step]) {
    let out = ex.explore(sc, steps, Opts { stop_at_first: true, recovery_crashes: 0 });
    match out.violations.first() {
        Some(v) => println!("[mutation] {}: {name} — caught at {v}", sc.name),
        None => panic!("{}: the mutation `{name}` was not caught", sc.name),
    }
}

#[test]
fn every_fsync_and_the_order_of_a_keep_sync_are_needed() {
    let mut ex = Explorer::new();
    let sc = crate::keep::keep_first(&mut ex);
    check_mutations(&mut ex, &sc, Some("<keep>"));
    let sc = crate::keep::keep_write(&mut ex);
    check_mutations(&mut ex, &sc, Some("<keep>"));

    // With an older previous: every fsync (the one retiring it too) …
    let sc = crate::keep::keep_second(&mut ex);
    check_mutations(&mut ex, &sc, None);
    // … and the older previous retired only AFTER the swap (its rename and
    // fsync moved behind the exchange): two valid previouses in between.
    let retire = sc
        .steps
        .iter()
        .position(|s| matches!(&s.rop, ROp::Rename { from, .. } if crate::trace::short(from) == "<keep>"))
        .expect("the older previous is retired");
    let fsync = retire
        + sc.steps[retire..]
            .iter()
            .position(|s| matches!(&s.rop, ROp::FsyncDir { path } if path == "."))
            .expect("its fsync");
    let mut steps = sc.steps.clone();
    let moved_fsync = steps.remove(fsync);
    let moved_rename = steps.remove(retire);
    let exchange = steps.iter().position(|s| matches!(s.rop, ROp::Exchange { .. })).expect("exchange");
    steps.insert(exchange + 1, moved_fsync);
    steps.insert(exchange + 1, moved_rename);
    check_caught(&mut ex, &sc, "retire the older previous after the exchange", &steps);
}

#[test]
fn the_commit_fsync_of_a_revert_is_needed_and_comes_before_removing_the_replaced_tree() {
    let mut ex = Explorer::new();
    for sc in [
        crate::keep::revert(&mut ex),
        crate::keep::revert_missing(&mut ex),
        crate::keep::revert_file(&mut ex),
    ] {
        check_mutations(&mut ex, &sc, None);
        // The replaced tree removed before the commit fsync (the fsync moved last).
        let commit = sc
            .steps
            .iter()
            .position(|s| matches!(&s.rop, ROp::FsyncDir { path } if path == "."))
            .expect("commit fsync");
        let removes_keep = |s: &Step| match &s.rop {
            ROp::Unlink { path } | ROp::Rmdir { path } => crate::trace::short(path).starts_with("<keep>"),
            _ => false,
        };
        if sc.steps[commit..].iter().any(removes_keep) {
            let mut steps = sc.steps.clone();
            let moved = steps.remove(commit);
            steps.push(moved);
            check_caught(&mut ex, &sc, "remove the replaced tree before the commit fsync", &steps);
        }
    }
}

/// Explore every `chown` and `setxattr` of `sc` moved after its flush and
/// dropped (`set` of them in the trace): each must be caught.
fn check_attr_mutations(ex: &mut Explorer, sc: &Scenario, set: usize) {
    let muts = attr_mutations(sc);
    assert_eq!(muts.len(), 2 * set, "{}: each chown and setxattr, moved and dropped", sc.name);
    check_all(ex, sc, &muts);
}

#[test]
fn every_chown_and_setxattr_before_the_fsyncs_of_a_sync_under_an_owner_and_label_policy_is_needed() {
    if let Some(why) = crate::attrs::cannot_set_attrs() {
        return crate::cannot_check(why);
    }
    let mut ex = Explorer::new();
    let sc = crate::attrs::full_sync(&mut ex);
    // Owner, label and `user.*` attribute of the target, `sub` and the
    // rewritten `x` and `sub/z`; owner and label of the new `a` and `sub/n`.
    check_attr_mutations(&mut ex, &sc, 3 + 3 + 3 + 3 + 2 + 2);
}

#[test]
fn every_chown_and_setxattr_before_the_syncfs_of_a_sync_under_an_owner_and_label_policy_is_needed() {
    if let Some(why) = crate::attrs::cannot_set_attrs() {
        return crate::cannot_check(why);
    }
    let mut ex = Explorer::new();
    let sc = crate::attrs::syncfs_sync(&mut ex);
    // The target's and `x`'s owner, label and `user.*` attribute; `a`'s owner and label.
    check_attr_mutations(&mut ex, &sc, 3 + 3 + 2);
}

#[test]
fn every_chown_and_setxattr_before_the_fsync_of_one_file_under_an_owner_and_label_policy_is_needed() {
    if let Some(why) = crate::attrs::cannot_set_attrs() {
        return crate::cannot_check(why);
    }
    let mut ex = Explorer::new();
    // A one-file change (the fast path) and a single-file write.
    for sc in [crate::attrs::one_file(&mut ex), crate::attrs::write_replace(&mut ex)] {
        // The new file's owner, label and `user.*` attribute.
        check_attr_mutations(&mut ex, &sc, 3);
    }
}

/// `sc` with its switch (the last rename over `t/.durasync-data`, or of the
/// staging directory to `t`) moved right before the fsync of `dir` that
/// precedes it: it must be caught.
fn check_switch_moved(ex: &mut Explorer, sc: &Scenario, dir: &str) {
    let switch = sc
        .steps
        .iter()
        .rposition(|s| matches!(&s.rop, ROp::Rename { to, .. } if to == "t/.durasync-data" || to == "t"))
        .expect("the switch");
    let fsync = sc.steps[..switch]
        .iter()
        .rposition(|s| matches!(&s.rop, ROp::FsyncDir { path } if crate::trace::short(path) == dir))
        .unwrap_or_else(|| panic!("no fsync of {dir} before the switch"));
    let mut steps = sc.steps.clone();
    let moved = steps.remove(switch);
    let name = format!("move `{}` before `{}`", moved.what, steps[fsync].what);
    steps.insert(fsync, moved);
    check_caught(ex, sc, &name, &steps);
}

#[test]
fn every_fsync_and_the_switch_order_of_the_symlink_layout_are_needed() {
    use durasync::durable::Flush;
    let mut ex = Explorer::new();
    // Each fsync dropped (the new lock file's too); the switch moved before
    // the target's fsync that must precede it (the new generation's name,
    // the new links).
    // (With one syncfs the staging is flushed as in any sync: that order is
    // checked by `the_syncfs_and_its_order_before_the_swap_are_needed`.)
    let sc = crate::layout::replace(&mut ex, Flush::Fsync);
    check_mutations(&mut ex, &sc, None);
    check_switch_moved(&mut ex, &sc, "t");
    // A new target: its staging directory's fsync before its rename.
    let sc = crate::layout::create(&mut ex);
    check_mutations(&mut ex, &sc, None);
    check_switch_moved(&mut ex, &sc, "<stage>");
    // A take-over: the first generation's fsyncs, those around
    // `.durasync-data`, then the change's.
    let sc = crate::layout::take_over(&mut ex);
    check_mutations(&mut ex, &sc, None);
    check_switch_moved(&mut ex, &sc, "t");
}
