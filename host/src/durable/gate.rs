//! The gate: a check of the complete new contents, staged and durable
//! beside the target, **before** the swap makes them the target's.
//!
//! The core knows nothing of what a gate does (the agent's validators,
//! guardrails and owed-action ledger live in `crate::hooks`); it only
//! promises when a gate is asked and what a refusal does:
//!
//! - a sync asks once, after its staging tree is written and fsynced and
//!   before the target is marked or swapped; a `write_file` asks once, after
//!   its temporary sibling is written and fsynced and before the rename;
//! - an operation that changes nothing (unchanged) asks no gate;
//! - with a gate, a sync always stages the complete tree (the one-file path
//!   has no staged tree to show), carrying unchanged files by hard link —
//!   except for a gate that [`exposes`](Gate::exposes_staged) the staged
//!   copy to a program (a validator): then every file is written afresh, so
//!   nothing the program does to the staged copy can reach a live file;
//! - after such a gate accepted, the staged copy is checked again and
//!   refused if anything of it changed ("what goes live is what was
//!   checked, durably"): every entry's `Stamp` (inode, ctime, mode, size,
//!   links), taken before the gate and again after it, and every byte and
//!   mode compared with the request. The ctime is what proves an inode
//!   untouched, also by an edit undone (identical bytes, but maybe not yet
//!   on the disk): before the gate, the core waits until the clock is past
//!   every staged entry's ctime (`wait_past`), so any later change gets
//!   a later ctime. Nothing is fsynced again: unchanged inodes are exactly
//!   what the staging's fsyncs made durable. (Only if the clock did not
//!   get there in time — set back meanwhile — is the staged copy flushed
//!   again after the check.)
//! - a refusal removes what was staged and returns [`super::Error::Refused`]
//!   (crate::durable::Error::Refused): the target is byte-for-byte unchanged.
//!
//! Everything a gate does happens before the commit point, under the lock
//! of the target's parent; durability ordering of anything the gate writes
//! elsewhere (the owed-action ledger) is the gate's own affair, but it is
//! complete when the gate returns, so it precedes the swap.

use std::os::fd::BorrowedFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What kind of thing is staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagedKind {
    /// A complete directory tree (a sync).
    Dir,
    /// One regular file (a `write_file`).
    File,
}

/// The new contents as a gate sees them.
#[derive(Debug, Clone, Copy)]
pub struct Staged<'a> {
    /// The directory holding both the target and the staged copy.
    pub parent: BorrowedFd<'a>,
    /// The target's name in `parent`.
    pub target: &'a str,
    /// The staged copy's name in `parent` (a directory for a sync, a file
    /// for a `write_file`), complete and durable.
    pub staging: &'a str,
    /// What is staged.
    pub kind: StagedKind,
    /// Regular files of the new contents.
    pub files: u64,
    /// Regular files the target holds now (`None`: the target is created).
    pub old_files: Option<u64>,
    /// Regular files of the target the new contents no longer hold
    /// (durasync's own entries, a lock file, not counted).
    pub removed_files: u64,
    /// Every path the change adds, rewrites or removes, relative to the
    /// target (`""`: the target itself, always listed; directories without
    /// a trailing `/`; durasync's own entries left out). It may name more
    /// than changed (a rewritten tree's files not compared), never less.
    pub changed: &'a [String],
}

/// Why a gate refused a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Who refused (`validator json`, `guard min_files`): a short name an
    /// operator finds in the manifest.
    pub by: String,
    /// Why, for a person (a validator's exit status and stderr tail).
    pub reason: String,
}

/// A check run before the swap (see the module docs for when and what a
/// refusal does). It must be callable from any thread.
pub trait Gate: Sync {
    /// Accept (`Ok`) or refuse the staged contents.
    fn check(&self, staged: &Staged<'_>) -> Result<(), Refusal>;

    /// Whether `check` may hand the staged copy to something that could
    /// change it (a validator's command). The core then carries nothing by
    /// hard link and re-checks and re-flushes the staged copy after an
    /// accepting check (see the module docs). `true` unless a gate knows
    /// better: only reading the counts, it costs nothing.
    fn exposes_staged(&self) -> bool {
        true
    }

    /// Whether the sync or write this gate guards keeps the contents it
    /// replaces as the target's previous (see `previous.rs`), as if
    /// [`Options::keep_previous`](super::Options::keep_previous) were set:
    /// a gate knows when a probe covers the path. `false` unless a gate
    /// says so.
    fn keep_previous(&self) -> bool {
        false
    }
}

/// What the kernel says of one staged entry: any change of its bytes,
/// mode, links or (for a directory) entries sets its ctime anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    ino: u64,
    ctime: (i64, i64),
    mode: u32,
    size: i64,
    nlink: u64,
}

impl Stamp {
    // The field types of `stat` differ between architectures.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn of(st: &rustix::fs::Stat) -> Stamp {
        Stamp {
            ino: st.st_ino as u64,
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
            mode: st.st_mode as u32,
            size: st.st_size as i64,
            nlink: st.st_nlink as u64,
        }
    }

    /// The stamp of `rel` in `dir` (not followed if a link); `shown`
    /// names it in an error.
    pub(super) fn at(dir: BorrowedFd<'_>, rel: &str, shown: &str) -> super::Result<Stamp> {
        rustix::fs::statat(dir, rel, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| Stamp::of(&st))
            .map_err(|e| super::Error::io(super::Step::Read, shown, e))
    }

    /// The latest ctime of `stamps`.
    pub(super) fn newest<'a>(stamps: impl IntoIterator<Item = &'a Stamp>) -> (i64, i64) {
        stamps.into_iter().map(|s| s.ctime).max().unwrap_or((0, 0))
    }
}

/// The longest tick of the coarse clock Linux stamps inodes with
/// (`CONFIG_HZ` is at least 100), with a margin.
const CLOCK_TICK: Duration = Duration::from_millis(11);
/// How long [`wait_past`] waits at most.
const CLOCK_WAIT: Duration = Duration::from_millis(100);

/// Wait until the clock inode timestamps come from is past `newest` (a
/// ctime): from then on, any change of an inode gives it a later ctime, so
/// an equal ctime proves it unchanged. The precise clock past `newest` by
/// one coarse tick puts the coarse one past it. `false` when that did not
/// happen within [`CLOCK_WAIT`] (the clock was set back): the caller then
/// cannot trust equal ctimes and flushes after its check instead.
pub(super) fn wait_past(newest: (i64, i64)) -> bool {
    let newest = Duration::new(newest.0.max(0) as u64, newest.1.clamp(0, 999_999_999) as u32) + CLOCK_TICK;
    let start = std::time::Instant::now();
    loop {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        if now > newest {
            return true;
        }
        if start.elapsed() >= CLOCK_WAIT {
            return false;
        }
        std::thread::sleep((newest - now).min(Duration::from_millis(2)));
    }
}

/// What a refusal of a staged copy changed after its gate accepted says.
pub(super) fn changed_after_check(target: &str, what: &str) -> super::Error {
    super::Error::Refused {
        path: target.to_owned(),
        by: "the staged-copy check".into(),
        reason: format!(
            "a validator changed the staged contents ({what}); what goes live must be exactly what was checked"
        ),
    }
}

/// The paths a sync changes, for [`Staged::changed`]: the target itself,
/// then what `plan` adds, changes and removes — or, with `plan` `None` (a
/// created target) or `complete` false (a plan that may miss changed
/// files), every path of `tree` and what the plan removes.
pub(super) fn changed_paths(
    plan: Option<&super::diff::Plan>,
    complete: bool,
    tree: &super::Tree,
) -> Vec<String> {
    let mut out = vec![String::new()];
    let plain = |p: &String| p.strip_suffix('/').unwrap_or(p).to_owned();
    match plan {
        Some(plan) if complete => {
            out.extend(plan.added.iter().chain(&plan.changed).chain(&plan.removed).map(plain));
        }
        _ => {
            out.extend(tree.iter().map(|(p, _)| p.to_owned()));
            out.extend(plan.iter().flat_map(|p| p.removed.iter()).map(plain));
        }
    }
    out.retain(|p| !super::names::is_reserved_path(p));
    out
}

/// Ask `opts.gate`, if any, about the staged copy `staging` of `target`;
/// `plan` is how the target differs (`None`: the target is created),
/// `changed` what [`changed_paths`] made of it.
/// A refusal becomes [`super::Error::Refused`]; the caller removes what it staged.
#[allow(clippy::too_many_arguments)]
pub(super) fn ask(
    gate: Option<&dyn Gate>,
    parent: BorrowedFd<'_>,
    target: &str,
    staging: &str,
    kind: StagedKind,
    files: u64,
    plan: Option<&super::diff::Plan>,
    changed: &[String],
) -> super::Result<()> {
    let Some(gate) = gate else { return Ok(()) };
    let added = plan.map_or(0, |p| p.added.iter().filter(|a| !a.ends_with('/')).count() as u64);
    // durasync's own files (the lock a write left there) are not the
    // plugin's: their removal counts for no guardrail.
    let removed_files = plan.map_or(0, |p| {
        p.removed.iter().filter(|r| !r.ends_with('/') && !super::names::is_reserved_path(r)).count() as u64
    });
    let old_files =
        plan.filter(|p| p.exists).map(|_| files + removed_files - added.min(files + removed_files));
    let staged = Staged { parent, target, staging, kind, files, old_files, removed_files, changed };
    gate.check(&staged).map_err(|r| super::Error::Refused {
        path: target.to_owned(),
        by: r.by,
        reason: r.reason,
    })
}
