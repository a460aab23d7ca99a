//! Validators, guardrails and actions: what an operator (never a plugin)
//! declares in a manifest around the changes a plugin makes.
//!
//! - [`config`]: the manifest tables, parsed strictly;
//! - [`pattern`]: which changed paths a hook applies to;
//! - [`command`]: running an operator's command with a timeout;
//! - `gate.rs`: the [`crate::durable::Gate`] a sync or write is given:
//!   guardrails, then validators, on the staged copy before the swap, then
//!   the owed actions recorded durably in the [`ledger`];
//! - [`actions`]: the agent's per-instance thread running owed actions.
//!
//! The durable core only knows "a gate is asked before the swap"; the
//! services only know the [`crate::services::Hooks`] trait; this module is
//! the one place that knows what the operator declared.

pub mod actions;
pub mod command;
pub mod config;
mod gate;
pub mod ledger;
pub mod pattern;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use config::{Action, ActionRun, Guard, Validator};
pub use ledger::Ledger;

use crate::durable::Gate;

/// What one manifest declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    /// `[[validate]]`, in manifest order.
    pub validators: Vec<Validator>,
    /// Guardrails by root name (only roots that set one).
    pub guards: BTreeMap<String, Guard>,
    /// `[[action]]`, in manifest order.
    pub actions: Vec<Action>,
}

impl Hooks {
    /// Whether nothing is declared (a run then gets no hooks at all).
    pub fn is_empty(&self) -> bool {
        self.validators.is_empty() && self.guards.is_empty() && self.actions.is_empty()
    }

    /// The names of the actions a change of `path` in `root` owes.
    pub fn actions_for(&self, root: &str, path: &str) -> Vec<String> {
        self.actions
            .iter()
            .filter(|a| a.root == root && pattern::matches(&a.path, path))
            .map(|a| a.name.clone())
            .collect()
    }

    /// What would run for a change of `path` in `root`, one line each
    /// (`durasync run --dry-run`).
    pub fn describe(&self, root: &str, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(g) = self.guards.get(root) {
            if let Some(n) = g.min_files {
                out.push(format!("guard roots.{root}.min_files = {n}"));
            }
            if let Some(f) = g.max_removed_fraction {
                out.push(format!("guard roots.{root}.max_removed_fraction = {f}"));
            }
        }
        for v in self.validators.iter().filter(|v| v.root == root && pattern::matches(&v.path, path)) {
            out.push(format!("validator {}: {}", v.name, v.command.join(" ")));
        }
        for a in self.actions.iter().filter(|a| a.root == root && pattern::matches(&a.path, path)) {
            let what = match &a.run {
                ActionRun::Command(argv) => argv.join(" "),
                ActionRun::Signal { signal, pidfile } => {
                    format!("SIG{signal} to the pid in {}", pidfile.display())
                }
            };
            out.push(format!("action {} (after the change is durable): {what}", a.name));
        }
        out
    }
}

/// A gate running one validator for the target `name` in the directory
/// `dir` (the native CLI's `--validate`).
pub fn validator_gate<'a>(v: &'a Validator, dir: &std::path::Path, name: &str) -> impl Gate + 'a {
    let root_dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    gate::HookGate {
        root: String::new(),
        root_dir,
        path: name.to_owned(),
        guard: None,
        validators: vec![v],
        owe: None,
    }
}

/// One run's hooks: the manifest's, with each root's host directory (what
/// `{staged}` and `{target}` are made of).
#[derive(Debug)]
pub struct RunHooks {
    hooks: Arc<Hooks>,
    roots: BTreeMap<String, PathBuf>,
    /// Where owed actions are recorded (the agent's); without one, actions
    /// are not run (`durasync run` is one-shot and has no runner).
    ledger: Option<Arc<Ledger>>,
    /// The actions owed by this run's committed changes.
    committed: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl RunHooks {
    /// The hooks of a run whose roots are the directories `roots` (made
    /// absolute here, so a validator's working directory does not matter).
    pub fn new(hooks: Arc<Hooks>, roots: BTreeMap<String, PathBuf>) -> RunHooks {
        let roots = roots.into_iter().map(|(n, p)| (n, std::path::absolute(&p).unwrap_or(p))).collect();
        RunHooks { hooks, roots, ledger: None, committed: Default::default() }
    }

    /// The hooks of one run of `manifest`.
    pub fn of(manifest: &crate::runtime::Manifest) -> RunHooks {
        let roots = manifest.roots.iter().map(|(n, r)| (n.clone(), r.path.clone())).collect();
        RunHooks::new(Arc::new(manifest.hooks.clone()), roots)
    }

    /// The same, recording owed actions in `ledger`.
    #[must_use]
    pub fn with_ledger(mut self, ledger: Arc<Ledger>) -> RunHooks {
        self.ledger = Some(ledger);
        self
    }

    /// The actions owed by this run's committed changes (each once).
    pub fn take_committed(&self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut *self.committed.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl crate::services::Hooks for RunHooks {
    fn gate<'a>(&'a self, root: &str, path: &str) -> Option<Box<dyn Gate + 'a>> {
        let validators: Vec<&Validator> = self
            .hooks
            .validators
            .iter()
            .filter(|v| v.root == root && pattern::matches(&v.path, path))
            .collect();
        let guard = self.hooks.guards.get(root).copied();
        let owe = match &self.ledger {
            Some(l) => Some((l.as_ref(), self.hooks.actions_for(root, path))).filter(|(_, n)| !n.is_empty()),
            None => None,
        };
        if validators.is_empty() && guard.is_none() && owe.is_none() {
            return None;
        }
        let root_dir = self.roots.get(root)?.clone();
        let path = path.to_owned();
        Some(Box::new(gate::HookGate { root: root.to_owned(), root_dir, path, guard, validators, owe }))
    }

    fn removal(&self, root: &str, path: &str) -> Result<(), crate::durable::Refusal> {
        if let Some(min) = self.hooks.guards.get(root).and_then(|g| g.min_files)
            && min > 0
        {
            return Err(crate::durable::Refusal {
                by: "guard min_files".into(),
                reason: format!("a removal leaves no files there, fewer than roots.{root}.min_files = {min}"),
            });
        }
        // Accepted: the actions the removal owes are recorded, durably,
        // before the caller removes anything — so before the removal's
        // commit fsync, as a gate records a sync's (ledger.rs, "Ordering").
        // A ledger that cannot be written refuses the removal.
        if let Some(ledger) = &self.ledger {
            let names = self.hooks.actions_for(root, path);
            if !names.is_empty() {
                ledger.owe(&names, &crate::durable::Options::default()).map_err(|e| {
                    crate::durable::Refusal { by: "action ledger".into(), reason: e.to_string() }
                })?;
            }
        }
        Ok(())
    }

    fn committed(&self, root: &str, path: &str) {
        let Some(ledger) = &self.ledger else { return };
        let names = self.hooks.actions_for(root, path);
        if names.is_empty() {
            return;
        }
        // Already owed before the commit (by the gate of a sync or write,
        // by `removal` for a removal), so this writes nothing; it only owes
        // again what a later change re-owed meanwhile.
        if let Err(e) = ledger.owe(&names, &crate::durable::Options::default()) {
            tracing::error!("{e}");
        }
        self.committed.lock().unwrap_or_else(|p| p.into_inner()).extend(names);
    }
}

#[cfg(test)]
mod tests {
    use super::config::{Action, ActionRun};
    use super::*;
    use crate::services::Hooks as _;

    fn hooks_with_action(ledger: Arc<Ledger>) -> RunHooks {
        let action = Action {
            name: "reload".into(),
            root: "conf".into(),
            path: "**".into(),
            run: ActionRun::Command(vec!["true".into()]),
            timeout_ms: 1000,
        };
        let hooks = Hooks { actions: vec![action], ..Hooks::default() };
        RunHooks::new(Arc::new(hooks), BTreeMap::from([("conf".into(), PathBuf::from("/nonexistent"))]))
            .with_ledger(ledger)
    }

    #[test]
    fn a_removal_owes_its_actions_durably_before_anything_is_removed() {
        let state = tempfile::tempdir().unwrap();
        let ledger = Arc::new(Ledger::open(state.path(), "inst").unwrap());
        let hooks = hooks_with_action(ledger.clone());
        assert!(ledger.is_empty());
        hooks.removal("conf", "old/app.conf").unwrap();
        // Owed before the caller's removal, and on disk: a ledger reopened
        // (the agent after a kill -9) still owes it.
        assert_eq!(ledger.owed().iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["reload"]);
        drop(ledger);
        let reopened = Ledger::open(state.path(), "inst").unwrap();
        assert_eq!(reopened.owed().len(), 1);
        // Its commit adds no second record.
        hooks.committed("conf", "old/app.conf");
        assert_eq!(hooks.take_committed().into_iter().collect::<Vec<_>>(), ["reload"]);
    }
}
