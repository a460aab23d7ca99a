//! The gate a sync or write-file is given when the operator declared
//! guardrails, validators or actions that may cover its path. It learns
//! from the core which paths the change adds, rewrites or removes
//! ([`Staged::changed`]) and applies exactly the hooks whose pattern covers
//! one of them ([`pattern::covers`]): `min_files` first (cheap, from the
//! counts the core already has), then each validator in manifest order on
//! the staged copy (the first refusal wins), then `max_removed_fraction`
//! for the whole run, then the owed actions, recorded durably.
//!
//! The staged copy a validator is shown is written afresh (no hard link to
//! a live file) and, once every validator accepted, checked by the core to
//! be untouched since it was made durable ([`Gate::exposes_staged`],
//! `durable/gate.rs`): a validator cannot change the live tree, and what
//! goes live is what it checked, durably. Guardrails are decided on the request's counts, which
//! that comparison proves are the staged tree's.

use std::path::PathBuf;

use super::command;
use super::config::{Action, Guard, Probe, Validator};
use super::ledger::{Ledger, ProbationRecord};
use super::{RunState, pattern, probation};
use crate::durable::{Gate, Options, Refusal, Staged, StagedKind};

pub(super) struct HookGate<'a> {
    pub(super) root: String,
    /// The root's host directory.
    pub(super) root_dir: PathBuf,
    /// The changed path below the root.
    pub(super) path: String,
    pub(super) guard: Option<Guard>,
    /// The validators that may cover the path or something below it; those
    /// covering a changed path run.
    pub(super) validators: Vec<&'a Validator>,
    /// The same for actions (only with a ledger).
    pub(super) actions: Vec<&'a Action>,
    pub(super) ledger: Option<&'a Ledger>,
    /// The probe covering the path (only with a ledger): the change goes on
    /// probation (`probation.rs`).
    pub(super) probe: Option<&'a Probe>,
    /// The run's state (none for the native CLI's `--validate`).
    pub(super) run: Option<&'a RunState>,
}

impl Gate for HookGate<'_> {
    fn check(&self, staged: &Staged<'_>) -> Result<(), Refusal> {
        let changed: Vec<String> = staged
            .changed
            .iter()
            .map(|rel| if rel.is_empty() { self.path.clone() } else { format!("{}/{rel}", self.path) })
            .collect();
        let covered = |p: &str| changed.iter().any(|c| pattern::covers(p, c));
        if let Some(min) = self.guard.and_then(|g| g.min_files)
            && staged.kind == StagedKind::Dir
        {
            self.check_min_files(min, staged)?;
        }
        let validators: Vec<&Validator> =
            self.validators.iter().copied().filter(|v| covered(&v.path)).collect();
        self.validate(staged, &validators)?;
        if let (Some(max), Some(run)) = (self.guard.and_then(|g| g.max_removed_fraction), self.run) {
            run.remove_files(&self.root, &self.root_dir, max, staged.removed_files)?;
        }
        // Contents that failed their probe are refused; others open (or
        // renew) a probation, durably, before the swap (probation.rs,
        // "Ordering").
        if let (Some(probe), Some(ledger)) = (self.probe, self.ledger) {
            self.open_probation(probe, ledger, staged)?;
        }
        // Accepted: the actions this change owes are recorded, durably,
        // before the gate returns — and so before the core's swap and its
        // commit fsync (ledger.rs, "Ordering"). A ledger that cannot be
        // written refuses the change: no change without its owed record.
        let names: Vec<String> =
            self.actions.iter().filter(|a| covered(&a.path)).map(|a| a.name.clone()).collect();
        if let Some(ledger) = self.ledger
            && !names.is_empty()
        {
            ledger
                .owe(&names, &Options::default())
                .map_err(|e| Refusal { by: "action ledger".into(), reason: e.to_string() })?;
        }
        if let Some(run) = self.run {
            run.accept(Some(names));
        }
        Ok(())
    }

    /// Only a validator is shown the staged copy; guardrails and the ledger
    /// read nothing of it.
    fn exposes_staged(&self) -> bool {
        !self.validators.is_empty()
    }

    /// A probe covers the path and no probation is open for it: the tree
    /// the change replaces is the last known good one, kept until the probe
    /// passes. With a probation open, the previous tree kept then stays
    /// (it is still the last known good one) and the unproven tree is
    /// replaced as usual.
    fn keep_previous(&self) -> bool {
        match (self.probe, self.ledger) {
            (Some(_), Some(ledger)) => ledger.probation(&self.root, &self.path).is_none(),
            _ => false,
        }
    }
}

impl HookGate<'_> {
    fn validate(&self, staged: &Staged<'_>, validators: &[&Validator]) -> Result<(), Refusal> {
        if validators.is_empty() {
            return Ok(());
        }
        // Both live in the same directory of the root: the staged copy is a
        // sibling of the target (see the durable core).
        let dir = match self.path.rsplit_once('/') {
            Some((parent, _)) => self.root_dir.join(parent),
            None => self.root_dir.clone(),
        };
        let staged_path = dir.join(staged.staging).display().to_string();
        let target = self.root_dir.join(&self.path).display().to_string();
        for v in validators {
            let argv = command::substitute(&v.command, &staged_path, &target);
            match command::run(&argv, v.timeout_ms) {
                Ok(()) => tracing::debug!(validator = %v.name, path = %self.path, "accepted"),
                Err(failure) => {
                    tracing::warn!(validator = %v.name, root = %self.root, path = %self.path, "refused: {failure}");
                    return Err(Refusal {
                        by: format!("validator {}", v.name),
                        reason: format!("`{}` {failure}", v.command[0]),
                    });
                }
            }
        }
        Ok(())
    }

    fn open_probation(&self, probe: &Probe, ledger: &Ledger, staged: &Staged<'_>) -> Result<(), Refusal> {
        let by = || format!("probe {}", probe.name);
        let shown = self.root_dir.join(&self.path).display().to_string();
        let digest = crate::digest::tree_digest(staged.parent, staged.staging, &shown)
            .map_err(|e| Refusal { by: by(), reason: format!("cannot digest the new contents: {e}") })?;
        if let Some(failed) = ledger.failed(&self.root, &self.path, &digest) {
            tracing::warn!(root = %self.root, path = %self.path, "refused: {}", probation::refusal(&failed).reason);
            return Err(probation::refusal(&failed));
        }
        let open = ledger.probation(&self.root, &self.path);
        let now = probation::now_ms();
        let within = u64::try_from(probe.within.as_millis()).unwrap_or(u64::MAX);
        let rec = ProbationRecord {
            root: self.root.clone(),
            path: self.path.clone(),
            probe: probe.name.clone(),
            digest,
            opened_ms: now,
            until_ms: now.saturating_add(within),
            // A previous tree exists: the one kept by the probation still
            // open, or the one this change replaces.
            kept: open.map_or(staged.old_files.is_some(), |o| o.kept),
        };
        ledger
            .open_probation(rec, &Options::default())
            .map_err(|e| Refusal { by: "probation ledger".into(), reason: e.to_string() })
    }

    fn check_min_files(&self, min: u64, staged: &Staged<'_>) -> Result<(), Refusal> {
        let root = &self.root;
        if staged.files < min {
            return Err(Refusal {
                by: "guard min_files".into(),
                reason: format!(
                    "the new contents hold {} files, fewer than roots.{root}.min_files = {min}",
                    staged.files
                ),
            });
        }
        Ok(())
    }
}
