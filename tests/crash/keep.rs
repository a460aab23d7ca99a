//! Keeping the previous tree (`Options::keep_previous`) and reverting to
//! it (`durable::revert`), explored at every crash point: the target is
//! old or new, and the previous — a keep entry beside it, valid by the
//! inode rule (see `model.rs` for how the model tracks it) — is what the
//! sequence promises: once a keep-sync's swap can have reached the disk,
//! the old tree; while a revert has not, still the previous; never two.

use durasync::durable::names::keep_name;
use durasync::durable::{self, Flush, Options};

use crate::explorer::{Explorer, Prev, Scenario};
use crate::model::Disk;
use crate::scenarios::{dir, explore_ok, file, record, to_tree};
use crate::trace::{ROp, Recorder};

/// The canonical name of the valid previous of `t` in an initial state.
fn previous_of_t() -> String {
    keep_name(1, "t")
}

fn keep_opts(rec: &Recorder) -> Options<'_> {
    Options { probe: rec, flush: Flush::Fsync, keep_previous: true, ..Options::default() }
}

fn old_tree() -> Disk {
    dir(0o750, &[("x", file("old x", 0o644)), ("sub/y", file("old y", 0o600))])
}

fn new_tree() -> Disk {
    dir(0o750, &[("a", file("new a", 0o640))])
}

/// A keep-sync of `new_tree` over `t`, from `initial`.
fn keep_sync(ex: &mut Explorer, name: &str, initial: Disk) -> Scenario {
    let tree = to_tree(&new_tree());
    record(ex, name, initial, "t", move |root| {
        let rec = Recorder::new();
        durable::sync_dir(root, "t", &tree, &keep_opts(&rec)).expect("keep-sync");
        rec.take()
    })
}

/// A keep-sync replacing `t`, which has no previous yet.
pub fn keep_first(ex: &mut Explorer) -> Scenario {
    let mut sc = keep_sync(ex, "keep-sync", dir(0o755, &[("t", old_tree())]));
    assert_eq!(sc.expect.new.as_ref(), Some(&new_tree()));
    sc.expect.previous = Some(Prev { when_old: vec![None], when_new: vec![Some(old_tree())] });
    sc
}

/// A keep-sync replacing `t`, whose older previous must go first.
pub fn keep_second(ex: &mut Explorer) -> Scenario {
    let older = dir(0o700, &[("z", file("older z", 0o644))]);
    let initial = dir(0o755, &[("t", old_tree()), (&previous_of_t(), older.clone())]);
    let mut sc = keep_sync(ex, "keep-sync replacing an older previous", initial);
    // Until the swap the older previous may still be there, or already
    // retired; once the new tree can be the target, only the old tree.
    sc.expect.previous = Some(Prev { when_old: vec![Some(older), None], when_new: vec![Some(old_tree())] });
    sc
}

/// A revert of `t` (the bad tree) to its previous (the good one).
pub fn revert(ex: &mut Explorer) -> Scenario {
    let good = old_tree();
    let initial = dir(0o755, &[("t", new_tree()), (&previous_of_t(), good.clone())]);
    let mut sc = record(ex, "revert", initial, "t", |root| {
        let rec = Recorder::new();
        durable::revert(root, "t", &Options { probe: &rec, ..Options::default() }).expect("revert");
        rec.take()
    });
    assert_eq!(sc.expect.new.as_ref(), Some(&good));
    // Not reverted: the previous still valid. Reverted: none any more.
    sc.expect.previous = Some(Prev { when_old: vec![Some(good)], when_new: vec![None] });
    sc
}

/// A revert of a removed `t`: the previous renamed back into place.
pub fn revert_missing(ex: &mut Explorer) -> Scenario {
    let good = old_tree();
    let initial = dir(0o755, &[(&previous_of_t(), good.clone())]);
    let mut sc = record(ex, "revert of a removed target", initial, "t", |root| {
        let rec = Recorder::new();
        durable::revert(root, "t", &Options { probe: &rec, ..Options::default() }).expect("revert");
        rec.take()
    });
    assert_eq!((sc.expect.old.as_ref(), sc.expect.new.as_ref()), (None, Some(&good)));
    sc.expect.previous = Some(Prev { when_old: vec![Some(good)], when_new: vec![None] });
    sc
}

/// A keep-write replacing the file `t`, then (from its result) a revert.
pub fn keep_write(ex: &mut Explorer) -> Scenario {
    let old = file("old pod", 0o600);
    let mut sc = record(ex, "keep-write", dir(0o755, &[("t", old.clone())]), "t", |root| {
        let rec = Recorder::new();
        durable::write_file(root, "t", b"new pod", Some(0o644), &keep_opts(&rec)).expect("keep-write");
        rec.take()
    });
    assert_eq!(sc.expect.new, Some(file("new pod", 0o644)));
    sc.expect.previous = Some(Prev { when_old: vec![None], when_new: vec![Some(old)] });
    sc
}

/// A revert of the file `t` to its previous.
pub fn revert_file(ex: &mut Explorer) -> Scenario {
    let good = file("good pod", 0o600);
    let initial = dir(0o755, &[("t", file("bad pod", 0o644)), (&previous_of_t(), good.clone())]);
    let mut sc = record(ex, "revert of a file", initial, "t", |root| {
        let rec = Recorder::new();
        durable::revert(root, "t", &Options { probe: &rec, ..Options::default() }).expect("revert");
        rec.take()
    });
    sc.expect.previous = Some(Prev { when_old: vec![Some(good)], when_new: vec![None] });
    sc
}

/// The crash point right after the last operation matching `pred`.
fn after_last(sc: &Scenario, pred: impl Fn(&ROp) -> bool) -> usize {
    sc.steps.iter().rposition(|s| pred(&s.rop)).expect("operation in trace") + 1
}

/// The target is new no earlier than right after the exchange and only new
/// from the commit fsync of the parent on.
fn assert_window(sc: &Scenario, out: &crate::explorer::Outcome) {
    let swap = after_last(sc, |op| {
        matches!(op, ROp::Exchange { .. }) || matches!(op, ROp::Rename { to, .. } if to == "t")
    });
    let commit = after_last(sc, |op| matches!(op, ROp::FsyncDir { path } if path == "."));
    assert_eq!(out.stats.first_new, Some(swap), "{}: new only with the swap", sc.name);
    assert_eq!(out.stats.new_only_from, Some(commit), "{}: certain from the commit fsync", sc.name);
}

#[test]
fn a_keep_sync_is_old_or_new_and_keeps_the_old_tree_once_swapped_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = keep_first(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_window(&sc, &out);
    assert!(out.stats.recovery_runs > 0, "no crashed state had a stale keep staging to recover");
}

#[test]
fn a_keep_sync_replacing_an_older_previous_never_leaves_two_at_any_crash_point() {
    let mut ex = Explorer::new();
    let sc = keep_second(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_window(&sc, &out);
    // The older previous is retired (renamed to trash) and that made
    // durable before the exchange.
    let retire =
        sc.steps.iter().position(|s| matches!(&s.rop, ROp::Rename { from, .. } if from == &previous_of_t()));
    let exchange = sc.steps.iter().position(|s| matches!(s.rop, ROp::Exchange { .. }));
    let (retire, exchange) = (retire.expect("the older previous is retired"), exchange.expect("an exchange"));
    assert!(
        sc.steps[retire..exchange].iter().any(|s| matches!(&s.rop, ROp::FsyncDir { path } if path == ".")),
        "an fsync of the parent between retiring the older previous and the exchange"
    );
}

#[test]
fn a_revert_is_old_or_reverted_and_the_previous_stays_valid_until_it_is_at_every_crash_point() {
    let mut ex = Explorer::new();
    for sc in [revert(&mut ex), revert_missing(&mut ex), revert_file(&mut ex)] {
        let out = explore_ok(&mut ex, &sc);
        assert_window(&sc, &out);
    }
}

#[test]
fn a_keep_write_is_old_or_new_and_keeps_the_old_file_once_exchanged_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = keep_write(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_window(&sc, &out);
}
