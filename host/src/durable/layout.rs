//! The symlink layout: a target directory whose contents change by one
//! plain rename of a link, for file systems where `RENAME_EXCHANGE` fails —
//! overlayfs for a directory of a lower layer (a target baked into an
//! image: `EXDEV`), NFS and many FUSE file systems (`EINVAL`) — in the
//! style of kubelet's AtomicWriter. Opt-in per root (`layout = "symlink"`,
//! `sync --layout symlink`); a directory once in the layout stays in it.
//!
//! # On disk
//!
//! ```text
//! target/
//!   .durasync.lock
//!   .durasync-data -> .durasync-gen.9f86d081884c7d65     the current generation
//!   .durasync-gen.9f86d081884c7d65/                     the tree itself
//!   tls.crt -> .durasync-data/tls.crt                    one link per top-level name
//!   sub -> .durasync-data/sub
//! ```
//!
//! The target directory itself is never renamed, so it may be a directory
//! of a lower layer or a mount point. A reader opening `target/tls.crt`
//! follows two links into the current generation; durasync's own readers
//! (`read-file`, `list-dir`, the unchanged check) follow exactly these
//! links and no other (see `linked.rs`).
//!
//! # A change
//!
//! Under the parent's lock and the target's own:
//!
//! 1. the new generation `.durasync-gen.<new>` is built beside the current
//!    one exactly as a sync builds its staging tree (`sync.rs`: unchanged
//!    files carried by a hard link from the current generation, the rest
//!    written, all of it made durable by fsyncs or one `syncfs`);
//! 2. a link for every top-level name the current tree lacks
//!    (`name -> .durasync-data/name`): it dangles until the switch, so a
//!    reader sees no such name, as in the old tree; and a temporary link to
//!    the new generation;
//! 3. fsync of the target: the new generation's name, the new links and the
//!    temporary link reach the disk **before** the switch can, so no crash
//!    state has `.durasync-data` naming what is not there;
//! 4. the target is marked unsynced (`marker.rs`, inside the target);
//! 5. the switch: the temporary link renamed over `.durasync-data` (a plain
//!    rename, atomic on every file system);
//! 6. fsync of the target: the **commit point**; then unmark;
//! 7. off the durability path: the old generation and the links of names
//!    the new tree lacks (they dangle now: a reader sees no such name) are
//!    removed, by the same leftover removal any later operation or
//!    `durasync recover` runs.
//!
//! A new target is built whole as a staging directory beside it (its
//! generation, its links, `.durasync-data`), fsynced, and renamed into place
//! with `RENAME_NOREPLACE` (a plain rename where the file system refuses
//! the flag would replace a target created meanwhile, so that is refused),
//! then the parent is fsynced.
//!
//! # Taking over a directory
//!
//! A directory not yet in the layout (a directory of the image's lower
//! layer, say) is taken over before its first change, without a reader
//! ever seeing anything but its contents: its files are copied into a first
//! generation (made durable), `.durasync-data` is made to name it (fsync
//! before and after), then each file is replaced by a link to its own copy
//! (a plain rename of a link over a file: the same bytes before and after)
//! (the change that follows fsyncs the directory before its switch). A crash in between leaves some files real,
//! some links, all showing the old contents; the next change finds them
//! (a file whose copy in the current generation holds the same bytes and
//! mode) and finishes the job. Only regular files can be taken over: a
//! directory cannot be replaced by a link atomically, so a subdirectory (or
//! anything else) in place is refused, naming it, before anything changes.
//!
//! # Limits of the layout
//!
//! - A gate (validators, guardrails, actions) is asked about the complete,
//!   durable new generation before the links are made and the switch, as
//!   in any sync; a validator is shown it at `<target>/.durasync-gen.<new>`.
//!   Keeping the previous contents (`keep_previous`, a probe's rollback) is
//!   refused for now; so is a single-file write of a top-level name
//!   (`write` of `target/name`): it would be a real file where the layout
//!   has a link. A write deeper down (`target/sub/file`)
//!   replaces the file inside the current generation, atomically, as in any
//!   directory.
//! - The links themselves carry the process's owner and the kernel's label;
//!   the policy's owner, group and label apply to every generation and to
//!   what is in it (`attrs.rs`).

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd};

use super::Options;
use super::attrs;
use super::cancel::Cancel;
use super::diff::{Carry, compare, compare_carrying, file_holds};
use super::error::{Error, Result, Step, committed, flags_unsupported, unsupported_or};
use super::flush::choose as choose_flush;
use super::gate;
use super::linked::{current_name, kind_name, read_link};
use super::lock::lock;
use super::marker::{is_marked, mark_in, unmark_in};
use super::names::{DATA_LINK, LOCK_NAME, Leftover, entry_link, gen_name, is_reserved, leftover_name};
use super::recover::{remove_leftovers, remove_leftovers_or_defer, remove_tree};
use super::report::{Outcome, Report};
use super::staging::{Carried, FILL_MODE, Generation, ask_gate, build_staging};
use super::sys::{Kind, Sys, join, kind_at, open_dir};
use super::tree::{IMPLIED_DIR_MODE, Tree};
use super::walk::{list_own_names, read_file_at};

/// How a sync replaces a target directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// The staging tree is exchanged with the target (`RENAME_EXCHANGE`).
    #[default]
    Exchange,
    /// The target holds links into generations; a change renames one link
    /// (this module).
    Symlink,
}

impl std::str::FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "exchange" => Ok(Layout::Exchange),
            "symlink" => Ok(Layout::Symlink),
            other => Err(format!("unknown layout {other:?} (exchange or symlink)")),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Exchange => "exchange",
            Layout::Symlink => "symlink",
        })
    }
}

/// A directory's entries, as the layout sorts them.
#[derive(Debug, Default)]
struct Entries {
    /// Top-level names whose entry is the layout's link.
    linked: BTreeSet<String>,
    /// Entries that are neither durasync's nor the layout's links: (name, kind).
    foreign: Vec<(String, Kind)>,
}

fn entries(dir: BorrowedFd<'_>, shown: &str) -> Result<Entries> {
    let mut out = Entries::default();
    for name in list_own_names(dir, shown)? {
        if is_reserved(&name) {
            continue;
        }
        let path = join(shown, &name);
        match kind_at(dir, &name, &path)?.0 {
            Kind::Symlink if read_link(dir, &name, &path)? == Some(entry_link(&name)) => {
                out.linked.insert(name);
            }
            kind => out.foreign.push((name, kind)),
        }
    }
    Ok(out)
}

/// The top-level names of `tree`.
fn top_names(tree: &Tree) -> BTreeSet<&str> {
    tree.iter().map(|(p, _)| p).filter(|p| !p.contains('/')).collect()
}

/// [`super::sync_dir`] for a target in the symlink layout (or to be put in
/// it): see the module. The caller has validated the name and the tree and
/// checked the target is not a link or a non-directory.
pub(crate) fn sync_linked(
    parent: BorrowedFd<'_>,
    name: &str,
    tree: &Tree,
    opts: &Options<'_>,
) -> Result<Report> {
    if opts.keep_previous || opts.gate.is_some_and(|g| g.keep_previous()) {
        return Err(Error::Layout {
            path: name.to_owned(),
            reason:
                "keeping the previous contents (--keep-previous, a probe's rollback) is not supported in \
                     this layout"
                    .into(),
        });
    }
    let sys = Sys::new(opts.probe);
    let _lock = lock(&sys, parent, ".")?;
    remove_leftovers_or_defer(&sys, parent)?;
    // Checked again under the lock, as `sync_dir` checked it before.
    let exists = match kind_at(parent, name, name)?.0 {
        Kind::Dir => true,
        Kind::Missing => false,
        Kind::Symlink => return Err(Error::Symlink { path: name.to_owned() }),
        _ => return Err(Error::NotADirectory { path: name.to_owned() }),
    };
    if !exists {
        return create_linked(&sys, parent, name, tree, opts);
    }
    let dir = open_dir(parent, name, name)?;
    let dir = dir.as_fd();
    let new_lock = kind_at(dir, LOCK_NAME, &join(name, LOCK_NAME))?.0 == Kind::Missing;
    let _dir_lock = lock(&sys, dir, name)?;
    let mut lock_pending = new_lock;
    // Leftovers of an earlier change (a temporary link, an older
    // generation, links of names since removed) go first, unless the last
    // change's commit fsync failed: then the generation on disk may still
    // be the older one, and they wait for this change's commit.
    remove_leftovers_or_defer_in(&sys, dir, name)?;
    let marked = is_marked(dir, DATA_LINK)?;
    let current = match current_name(dir, name)? {
        Some(g) => g,
        None => {
            lock_durable(&sys, dir, name, &mut lock_pending)?;
            take_over(&sys, parent, name, dir, opts)?
        }
    };
    let shown_current = join(name, &current);
    let (current_fd, gen_mode) =
        (open_dir(dir, &current, &shown_current)?, kind_at(dir, &current, &shown_current)?.1);
    let found = entries(dir, name)?;
    if !found.foreign.is_empty() {
        lock_durable(&sys, dir, name, &mut lock_pending)?;
    }
    finish_take_over(&sys, dir, name, current_fd.as_fd(), &found, opts)?;
    let found = entries(dir, name)?;

    let (plan, carry) = if marked {
        (compare(current_fd.as_fd(), &shown_current, tree, false, opts.attrs)?, Carry::new())
    } else {
        compare_carrying(current_fd.as_fd(), &shown_current, tree, opts.attrs)?
    };
    let top = top_names(tree);
    let missing: Vec<&str> = top.iter().copied().filter(|n| !found.linked.contains(*n)).collect();
    if plan.is_unchanged() && !marked && missing.is_empty() {
        return Ok(Report::unchanged());
    }

    // What each inode of the new generation gets besides bytes and mode,
    // read from the current generation before anything is created.
    let attr_plan = attrs::plan_tree(opts.attrs, dir, &current, Some(current_fd.as_fd()), tree)?;
    // A gate that shows the staged generation to a program (a validator)
    // gets fresh copies only, as in any sync (`sync.rs`): a carried file is
    // a hard link to the live one.
    let exposed = opts.gate.is_some_and(|g| g.exposes_staged());
    let carried = (!marked && !exposed).then(|| Carried {
        target: current_fd.as_fd(),
        name: &shown_current,
        files: &carry,
    });
    let carried_count = carried.as_ref().map_or(0, |c| c.files.len());
    let flush = choose_flush(opts.flush, dir, name, tree.file_count() - carried_count, opts.threads)?;
    tracing::debug!(target = name, syncfs = flush.syncfs, threads = flush.threads, why = %flush.why, "flush");
    let new_gen = gen_name();
    let shown_new = join(name, &new_gen);
    let tmp = leftover_name(Leftover::Tmp);
    let shown_tmp = join(name, &tmp);

    // 1–3: the new generation, durable; the links of new names; the
    // temporary link to the generation; then the target's fsync, so the
    // switch can only reach the disk after all of them.
    lock_durable(&sys, dir, name, &mut lock_pending)?;
    let stage = sys.mkdir(dir, &new_gen, &shown_new, FILL_MODE)?;
    let staged = build_staging(
        &sys,
        stage.as_fd(),
        &shown_new,
        gen_mode,
        tree,
        carried.as_ref(),
        &attr_plan,
        &flush,
        opts,
    )
    .and_then(|()| opts.cancel.check(name))
    .and_then(|()| {
        let staged = Generation { dir, dir_path: name, fd: stage.as_fd(), name: &new_gen };
        let changed = gate::changed_paths(Some(&plan), !marked, tree);
        ask_gate(&sys, parent, name, &staged, tree, Some(&plan), &changed, &flush, opts)
    })
    .and_then(|()| {
        for top in &missing {
            sys.symlink(dir, top, &join(name, top), &entry_link(top))?;
        }
        sys.symlink(dir, &tmp, &shown_tmp, &new_gen)?;
        sys.fsync_dir(dir, name, Step::FsyncDir)
    });
    drop(stage);
    if let Err(e) = staged {
        // The links made dangle (a reader sees no such name): the next
        // change or `recover` removes them with the rest.
        let _ = sys.unlink(dir, &tmp, &shown_tmp);
        let _ = remove_tree(&sys, dir, &new_gen, &shown_new, &Cancel::NEVER);
        return Err(e);
    }
    // 4. Marked before the switch, unmarked only once the commit fsync
    // returned: a failure in between leaves the mark for the retry.
    let new_mark = match mark_in(&sys, dir, name, DATA_LINK) {
        Ok(new) => new,
        Err(e) => {
            let _ = sys.unlink(dir, &tmp, &shown_tmp);
            let _ = remove_tree(&sys, dir, &new_gen, &shown_new, &Cancel::NEVER);
            return Err(e);
        }
    };
    // 5. The switch: one plain rename of a link, atomic on every file system.
    if let Err(e) = sys.rename(dir, &tmp, &shown_tmp, DATA_LINK, &join(name, DATA_LINK), true) {
        let _ = sys.unlink(dir, &tmp, &shown_tmp);
        let _ = remove_tree(&sys, dir, &new_gen, &shown_new, &Cancel::NEVER);
        if new_mark {
            let _ = unmark_in(&sys, dir, name, DATA_LINK);
        }
        return Err(e);
    }
    // 6. Commit point: the target's entries, and so the switch, reach the disk.
    committed(sys.fsync_dir(dir, name, Step::FsyncParent), false)?;
    committed(unmark_in(&sys, dir, name, DATA_LINK), true)?;
    // 7. Off the durability path: the old generation, and the links of
    // names the new tree lacks (dangling now). Deferred leftovers too: the
    // switch is durable, so none of them can be the contents on disk.
    committed(remove_leftovers(&sys, dir, name), true)?;
    Ok(Report {
        outcome: Outcome::Replaced,
        written: tree.file_count() as u32,
        removed: plan.removed_files(),
    })
}

/// Make the lock file just created in `dir` durable (once: `pending` is
/// cleared) before durasync makes its first entry there. Recovery removes
/// durasync's entries only in a directory holding a lock file
/// (`recover.rs`); an unchanged answer makes none and needs no fsync.
fn lock_durable(sys: &Sys<'_>, dir: BorrowedFd<'_>, name: &str, pending: &mut bool) -> Result<()> {
    if std::mem::take(pending) {
        sys.fsync_dir(dir, name, Step::FsyncDir)?;
    }
    Ok(())
}

/// `remove_leftovers_or_defer` for the target directory `dir` (shown as
/// `shown`), whose own marker is the one of [`DATA_LINK`].
fn remove_leftovers_or_defer_in(sys: &Sys<'_>, dir: BorrowedFd<'_>, shown: &str) -> Result<bool> {
    if is_marked(dir, DATA_LINK)? {
        return Ok(true);
    }
    remove_leftovers(sys, dir, shown)?;
    Ok(false)
}

/// A new target in the layout: built whole as a staging directory beside
/// it, made durable, renamed into place.
fn create_linked(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    tree: &Tree,
    opts: &Options<'_>,
) -> Result<Report> {
    // Decided before anything is created, so a refusal changes nothing.
    let attr_plan = attrs::plan_tree(opts.attrs, parent, name, None, tree)?;
    let flush = choose_flush(opts.flush, parent, name, tree.file_count(), opts.threads)?;
    let staging = leftover_name(Leftover::Stage);
    let stage = sys.mkdir(parent, &staging, &staging, FILL_MODE)?;
    let generation = gen_name();
    let shown_gen = join(&staging, &generation);
    // Born with its lock file (durable with the rest of its entries), so
    // that recovery may remove what a later change leaves in it.
    let built = lock(sys, stage.as_fd(), &staging)
        .and_then(|_| sys.mkdir(stage.as_fd(), &generation, &shown_gen, FILL_MODE))
        .and_then(|g| {
            build_staging(
                sys,
                g.as_fd(),
                &shown_gen,
                IMPLIED_DIR_MODE,
                tree,
                None,
                &attr_plan,
                &flush,
                opts,
            )?;
            opts.cancel.check(name)?;
            let staged =
                Generation { dir: stage.as_fd(), dir_path: &staging, fd: g.as_fd(), name: &generation };
            let changed = gate::changed_paths(None, true, tree);
            ask_gate(sys, parent, name, &staged, tree, None, &changed, &flush, opts)?;
            for top in top_names(tree) {
                sys.symlink(stage.as_fd(), top, &join(&staging, top), &entry_link(top))?;
            }
            sys.symlink(stage.as_fd(), DATA_LINK, &join(&staging, DATA_LINK), &generation)?;
            attrs::apply(sys, stage.as_fd(), &staging, &attr_plan.root)?;
            sys.chmod(stage.as_fd(), &staging, IMPLIED_DIR_MODE)?;
            // The target's entries (its generation, its links) durable before
            // the rename can make it reachable.
            sys.fsync_dir(stage.as_fd(), &staging, Step::FsyncDir)
        });
    drop(stage);
    if let Err(e) = built {
        let _ = remove_tree(sys, parent, &staging, &staging, &Cancel::NEVER);
        return Err(e);
    }
    // Never over a target created meanwhile (see `rename_new`).
    if let Err(e) = rename_new(sys, parent, &staging, &staging, name, name) {
        let _ = remove_tree(sys, parent, &staging, &staging, &Cancel::NEVER);
        return Err(unsupported_or(e, parent, false));
    }
    // Commit point: the parent's entry for the new target reaches the disk.
    committed(sys.fsync_dir(parent, ".", Step::FsyncParent), false)?;
    Ok(Report { outcome: Outcome::Created, written: tree.file_count() as u32, removed: 0 })
}

/// Put the existing directory `dir` (`name` in `parent`), not in the layout
/// yet, in it, showing its contents throughout (see the module's "Taking
/// over a directory"). Returns its first generation's name.
fn take_over(
    sys: &Sys<'_>,
    parent: BorrowedFd<'_>,
    name: &str,
    dir: BorrowedFd<'_>,
    opts: &Options<'_>,
) -> Result<String> {
    let found = entries(dir, name)?;
    // Anything but a regular file in place is refused before any change.
    if let Some((entry, kind)) = found.foreign.iter().find(|(_, k)| *k != Kind::File) {
        return Err(Error::Layout {
            path: join(name, entry),
            reason: format!(
                "a {} in place: a directory is taken over by replacing each entry with a link, which is \
                 atomic for regular files only; move it away first",
                kind_name(*kind)
            ),
        });
    }
    // Its contents as they are: the first generation.
    let mut old = Tree::with_limits(opts.limits);
    for (file, _) in &found.foreign {
        let path = join(name, file);
        let bytes = read_file_at(dir, file, &path, opts.limits.max_bytes, &opts.cancel)?;
        old.add_file(file, bytes, kind_at(dir, file, &path)?.1)?;
    }
    old.check_limits(&opts.limits)?;
    let attr_plan = attrs::plan_tree(opts.attrs, parent, name, Some(dir), &old)?;
    let flush = choose_flush(opts.flush, dir, name, old.file_count(), opts.threads)?;
    let dir_mode = kind_at(parent, name, name)?.1;
    let generation = gen_name();
    let shown_gen = join(name, &generation);
    let built = sys.mkdir(dir, &generation, &shown_gen, FILL_MODE).and_then(|g| {
        build_staging(sys, g.as_fd(), &shown_gen, dir_mode, &old, None, &attr_plan, &flush, opts)
    });
    if let Err(e) = built {
        let _ = remove_tree(sys, dir, &generation, &shown_gen, &Cancel::NEVER);
        return Err(e);
    }
    let tmp = leftover_name(Leftover::Tmp);
    let shown_tmp = join(name, &tmp);
    sys.symlink(dir, &tmp, &shown_tmp, &generation)?;
    // The generation's name durable before the link that names it.
    sys.fsync_dir(dir, name, Step::FsyncDir)?;
    rename_new(sys, dir, &tmp, &shown_tmp, DATA_LINK, &join(name, DATA_LINK))?;
    // `.durasync-data` durable before any name becomes a link through it.
    sys.fsync_dir(dir, name, Step::FsyncDir)?;
    let files: Vec<&str> = found.foreign.iter().map(|(f, _)| f.as_str()).collect();
    link_over(sys, dir, name, &files)?;
    Ok(generation)
}

/// Rename `from` to the missing name `to` in `dir`, never over something
/// made meanwhile: `RENAME_NOREPLACE`; where the file system refuses
/// renameat2's flags (many FUSE file systems, NFS), a plain rename once `to`
/// is checked missing — under the lock only another program could make it
/// since, and a plain rename of a directory is refused by the kernel over a
/// file or a non-empty directory.
fn rename_new(
    sys: &Sys<'_>,
    dir: BorrowedFd<'_>,
    from: &str,
    from_path: &str,
    to: &str,
    to_path: &str,
) -> Result<()> {
    match sys.rename(dir, from, from_path, to, to_path, false) {
        Err(e) if flags_unsupported(&e) => {
            if kind_at(dir, to, to_path)?.0 != Kind::Missing {
                return Err(e);
            }
            sys.rename(dir, from, from_path, to, to_path, true)
        }
        other => other,
    }
}

/// Replace each regular file `files` of `dir` by the layout's link to its
/// copy in the current generation. Not fsynced here: whichever of these
/// renames a crash keeps, a reader sees the same bytes, and the change that
/// follows fsyncs `dir` before its switch.
fn link_over(sys: &Sys<'_>, dir: BorrowedFd<'_>, name: &str, files: &[&str]) -> Result<()> {
    for file in files {
        let tmp = leftover_name(Leftover::Tmp);
        let shown_tmp = join(name, &tmp);
        sys.symlink(dir, &tmp, &shown_tmp, &entry_link(file))?;
        // A file replaced by a link to a copy of it: a reader sees the same
        // bytes before and after the rename.
        sys.rename(dir, &tmp, &shown_tmp, file, &join(name, file), true)?;
    }
    Ok(())
}

/// Before a change of a directory in the layout: every entry must be the
/// layout's link, except regular files a take-over left (its copy in the
/// current generation holds the same bytes and mode), which are linked over
/// now. Anything else is refused, naming it: it is not durasync's to
/// replace or remove.
fn finish_take_over(
    sys: &Sys<'_>,
    dir: BorrowedFd<'_>,
    name: &str,
    current: BorrowedFd<'_>,
    found: &Entries,
    opts: &Options<'_>,
) -> Result<()> {
    let mut left = Vec::new();
    for (entry, kind) in &found.foreign {
        let path = join(name, entry);
        let copied = *kind == Kind::File && kind_at(current, entry, &path)?.0 == Kind::File && {
            let bytes = read_file_at(dir, entry, &path, opts.limits.max_bytes, &opts.cancel)?;
            let (_, mode) = kind_at(dir, entry, &path)?;
            kind_at(current, entry, &path)?.1 == mode && file_holds(current, entry, &path, &bytes)?
        };
        if !copied {
            return Err(Error::Layout {
                path,
                reason: format!(
                    "a {} that is not the layout's (every entry here is a link into {DATA_LINK}); move it away",
                    kind_name(*kind)
                ),
            });
        }
        left.push(entry.as_str());
    }
    link_over(sys, dir, name, &left)
}
