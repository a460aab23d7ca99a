//! The gate a sync or write-file is given when the operator declared
//! guardrails or validators for its path: guardrails first (cheap, from the
//! comparison the core already made), then each validator in manifest
//! order on the staged copy. The first refusal wins.

use std::path::PathBuf;

use super::command;
use super::config::{Guard, Validator};
use super::ledger::Ledger;
use crate::durable::{Gate, Options, Refusal, Staged, StagedKind};

pub(super) struct HookGate<'a> {
    pub(super) root: String,
    /// The root's host directory.
    pub(super) root_dir: PathBuf,
    /// The changed path below the root.
    pub(super) path: String,
    pub(super) guard: Option<Guard>,
    pub(super) validators: Vec<&'a Validator>,
    /// The ledger and the actions this change owes.
    pub(super) owe: Option<(&'a Ledger, Vec<String>)>,
}

impl Gate for HookGate<'_> {
    fn check(&self, staged: &Staged<'_>) -> Result<(), Refusal> {
        if let Some(guard) = self.guard
            && staged.kind == StagedKind::Dir
        {
            self.check_guard(guard, staged)?;
        }
        self.validate(staged)?;
        // Accepted: the actions this change owes are recorded, durably,
        // before the gate returns — and so before the core's swap and its
        // commit fsync (ledger.rs, "Ordering"). A ledger that cannot be
        // written refuses the change: no change without its owed record.
        if let Some((ledger, names)) = &self.owe {
            ledger
                .owe(names, &Options::default())
                .map_err(|e| Refusal { by: "action ledger".into(), reason: e.to_string() })?;
        }
        Ok(())
    }
}

impl HookGate<'_> {
    fn validate(&self, staged: &Staged<'_>) -> Result<(), Refusal> {
        if self.validators.is_empty() {
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
        for v in &self.validators {
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

    fn check_guard(&self, guard: Guard, staged: &Staged<'_>) -> Result<(), Refusal> {
        let root = &self.root;
        if let Some(min) = guard.min_files
            && staged.files < min
        {
            return Err(Refusal {
                by: "guard min_files".into(),
                reason: format!(
                    "the new contents hold {} files, fewer than roots.{root}.min_files = {min}",
                    staged.files
                ),
            });
        }
        if let (Some(max), Some(old)) = (guard.max_removed_fraction, staged.old_files)
            && old > 0
            && staged.removed_files as f64 > max * old as f64
        {
            return Err(Refusal {
                by: "guard max_removed_fraction".into(),
                reason: format!(
                    "it would remove {} of the {old} files there, more than roots.{root}.max_removed_fraction = {max}",
                    staged.removed_files
                ),
            });
        }
        Ok(())
    }
}
