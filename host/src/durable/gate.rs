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
//!   has no staged tree to show), carrying unchanged files by hard link;
//! - a refusal removes what was staged and returns [`super::Error::Refused`]
//!   (crate::durable::Error::Refused): the target is byte-for-byte unchanged.
//!
//! Everything a gate does happens before the commit point, under the lock
//! of the target's parent; durability ordering of anything the gate writes
//! elsewhere (the owed-action ledger) is the gate's own affair, but it is
//! complete when the gate returns, so it precedes the swap.

use std::os::fd::BorrowedFd;

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
    /// Regular files of the target the new contents no longer hold.
    pub removed_files: u64,
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
}

/// Ask `opts.gate`, if any, about the staged copy `staging` of `target`;
/// `plan` is how the target differs (`None`: the target is created).
/// A refusal becomes [`super::Error::Refused`]; the caller removes what it staged.
pub(super) fn ask(
    gate: Option<&dyn Gate>,
    parent: BorrowedFd<'_>,
    target: &str,
    staging: &str,
    kind: StagedKind,
    files: u64,
    plan: Option<&super::diff::Plan>,
) -> super::Result<()> {
    let Some(gate) = gate else { return Ok(()) };
    let added = plan.map_or(0, |p| p.added.iter().filter(|a| !a.ends_with('/')).count() as u64);
    let removed_files = plan.map_or(0, |p| u64::from(p.removed_files()));
    let old_files =
        plan.filter(|p| p.exists).map(|_| files + removed_files - added.min(files + removed_files));
    let staged = Staged { parent, target, staging, kind, files, old_files, removed_files };
    gate.check(&staged).map_err(|r| super::Error::Refused {
        path: target.to_owned(),
        by: r.by,
        reason: r.reason,
    })
}
