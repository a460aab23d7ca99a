//! The symlink layout (`durasync::durable::layout`) under the explorer: a
//! change of a target in the layout (per-file fsyncs and one syncfs), a
//! target created in it, and a directory taken over into it. What is
//! checked is what a reader sees through the layout's links
//! ([`layout_view`]): old or new at every crash point, only new from the
//! commit fsync on; and that recovery leaves one generation, the one
//! `.durasync-data` names, and no dangling link.

use std::os::fd::BorrowedFd;

use durasync::durable::names::{DATA_LINK, entry_link};
use durasync::durable::{self, Flush, Layout, Options};

use crate::explorer::{Explorer, Outcome, Scenario, layout_view};
use crate::model::Disk;
use crate::scenarios::{dir, explore_ok, file, record, to_tree};
use crate::trace::{ROp, Recorder, short};

/// A generation name for hand-made initial states.
const GEN: &str = ".durasync-gen.00000000000000a1";

/// A directory with `mode` in the symlink layout holding `tree`: its
/// generation, `.durasync-data` and one link per top-level name.
fn in_layout(mode: u32, tree: &Disk) -> Disk {
    let Disk::Dir { entries, .. } = tree else { panic!("not a directory") };
    let mut d = Disk::dir(mode);
    d.insert(DATA_LINK, Disk::Link { target: GEN.into() });
    d.insert(GEN, tree.clone());
    for name in entries.keys() {
        d.insert(name, Disk::Link { target: entry_link(name) });
    }
    d
}

fn sync_call(tree: durable::Tree, flush: Flush) -> impl FnOnce(BorrowedFd<'_>) -> Vec<ROp> {
    move |root| {
        let rec = Recorder::new();
        let opts = Options { probe: &rec, flush, layout: Layout::Symlink, ..Options::default() };
        durable::sync_dir(root, "t", &tree, &opts).expect("sync in the symlink layout");
        rec.take()
    }
}

/// `record`, the target then checked through its links.
fn record_linked(ex: &mut Explorer, name: &str, initial: Disk, new: &Disk, flush: Flush) -> Scenario {
    let mut sc = record(ex, name, initial, "t", sync_call(to_tree(new), flush));
    sc.expect.linked = true;
    sc.expect.old = sc.expect.old.as_ref().map(layout_view);
    sc.expect.new = sc.expect.new.as_ref().map(layout_view);
    assert_eq!(sc.expect.new.as_ref(), Some(new), "{name}: what a reader sees after the sync");
    sc
}

/// A change of a target in the layout: a file rewritten, one carried
/// unchanged, one removed, one added, a subdirectory's file changed.
pub fn replace(ex: &mut Explorer, flush: Flush) -> Scenario {
    let old = dir(
        0o750,
        &[("x", file("old x", 0o644)), ("y", file("same", 0o600)), ("sub/z", file("old z", 0o640))],
    );
    let new = dir(
        0o750,
        &[("a", file("new a", 0o644)), ("y", file("same", 0o600)), ("sub/z", file("new z", 0o640))],
    );
    let name = match flush {
        Flush::Syncfs => "sync in the symlink layout (syncfs)",
        _ => "sync in the symlink layout",
    };
    record_linked(ex, name, dir(0o755, &[("t", in_layout(0o750, &old))]), &new, flush)
}

/// A target created in the layout.
pub fn create(ex: &mut Explorer) -> Scenario {
    let new = dir(0o755, &[("a", file("new a", 0o644)), ("sub/b", file("new b", 0o600))]);
    record_linked(ex, "a target created in the symlink layout", dir(0o755, &[]), &new, Flush::Fsync)
}

/// A directory of plain files taken over into the layout, then changed.
pub fn take_over(ex: &mut Explorer) -> Scenario {
    let old = dir(0o755, &[("f", file("baked f", 0o644)), ("g", file("baked g", 0o600))]);
    let new = dir(0o755, &[("f", file("new f", 0o644)), ("h", file("new h", 0o644))]);
    record_linked(
        ex,
        "a directory taken over into the symlink layout",
        dir(0o755, &[("t", old)]),
        &new,
        Flush::Fsync,
    )
}

/// One-file forms of [`create`] and [`take_over`], whose fsyncs come in one
/// order (the strace audit compares the binary's sequence with them).
pub fn one_file(ex: &mut Explorer, take_over: bool) -> Scenario {
    let new = dir(0o755, &[("f", file("new f", 0o644))]);
    let (name, initial) = if take_over {
        (
            "a one-file directory taken over into the symlink layout",
            dir(0o755, &[("t", dir(0o755, &[("f", file("baked f", 0o644))]))]),
        )
    } else {
        ("a one-file target created in the symlink layout", dir(0o755, &[]))
    };
    record_linked(ex, name, initial, &new, Flush::Fsync)
}

/// The crash point right after the first operation matching `pred` at or
/// after step `from`.
fn point_after(sc: &Scenario, from: usize, pred: impl Fn(&ROp) -> bool) -> usize {
    from + sc.steps[from..].iter().position(|s| pred(&s.rop)).expect("operation in trace") + 1
}

/// The new contents appear exactly with the switch (the rename over
/// `t/.durasync-data`, or of the staging directory to `t` for a new target)
/// and are certain exactly from the commit fsync (of `t`, or of the parent).
fn assert_switch_window(sc: &Scenario, out: &Outcome, created: bool) {
    let switch = if created {
        point_after(sc, 0, |op| matches!(op, ROp::Rename { to, .. } if to == "t"))
    } else {
        let last = sc
            .steps
            .iter()
            .rposition(
                |s| matches!(&s.rop, ROp::Rename { to, replace: true, .. } if to == "t/.durasync-data"),
            )
            .expect("the switch");
        last + 1
    };
    let commit_dir = if created { "." } else { "t" };
    let commit = point_after(sc, switch, |op| matches!(op, ROp::FsyncDir { path } if path == commit_dir));
    assert_eq!(
        out.stats.first_new,
        Some(switch),
        "{}: the new contents appear only with the switch",
        sc.name
    );
    assert_eq!(
        out.stats.new_only_from,
        Some(commit),
        "{}: certain exactly from the commit fsync on",
        sc.name
    );
}

#[test]
fn a_sync_in_the_symlink_layout_is_old_or_new_through_its_links_at_every_crash_point() {
    let mut ex = Explorer::new();
    for flush in [Flush::Fsync, Flush::Syncfs] {
        let sc = replace(&mut ex, flush);
        let out = explore_ok(&mut ex, &sc);
        assert_switch_window(&sc, &out, false);
        assert!(out.stats.recovery_runs > 0, "no crashed state had leftovers to recover");
        // The unchanged file is carried (a hard link), never rewritten.
        assert!(
            sc.steps.iter().any(|s| matches!(&s.rop, ROp::Link { to, .. } if short(to) == "t/<gen>/y")),
            "{}: y was not carried",
            sc.name
        );
    }
}

#[test]
fn a_target_created_in_the_symlink_layout_appears_whole_or_not_at_all_at_every_crash_point() {
    let mut ex = Explorer::new();
    let sc = create(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_switch_window(&sc, &out, true);
}

#[test]
fn a_directory_taken_over_into_the_symlink_layout_shows_its_old_files_until_the_switch_at_every_crash_point()
{
    let mut ex = Explorer::new();
    let sc = take_over(&mut ex);
    let out = explore_ok(&mut ex, &sc);
    assert_switch_window(&sc, &out, false);
    // Each baked file became a link, by a rename over it.
    for f in ["t/f", "t/g"] {
        assert!(
            sc.steps.iter().any(|s| matches!(&s.rop, ROp::Rename { to, replace: true, .. } if to == f)),
            "{f} was not linked over"
        );
    }
}
