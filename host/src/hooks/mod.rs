//! Validators, guardrails and actions: what an operator (never a plugin)
//! declares in a manifest around the changes a plugin makes.
//!
//! - [`config`]: the manifest tables, parsed strictly;
//! - [`pattern`]: which changed paths a hook applies to;
//! - [`command`]: running an operator's command with a timeout;
//! - `gate.rs`: the [`crate::durable::Gate`] a sync or write is given:
//!   guardrails, then validators, on the staged copy before the swap.
//!
//! The durable core only knows "a gate is asked before the swap"; the
//! services only know the [`crate::services::Hooks`] trait; this module is
//! the one place that knows what the operator declared.

pub mod command;
pub mod config;
mod gate;
pub mod pattern;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use config::{Guard, Validator};

use crate::durable::Gate;

/// What one manifest declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    /// `[[validate]]`, in manifest order.
    pub validators: Vec<Validator>,
    /// Guardrails by root name (only roots that set one).
    pub guards: BTreeMap<String, Guard>,
}

impl Hooks {
    /// Whether nothing is declared (a run then gets no hooks at all).
    pub fn is_empty(&self) -> bool {
        self.validators.is_empty() && self.guards.is_empty()
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
        out
    }
}

/// A gate running one validator for the target `name` in the directory
/// `dir` (the native CLI's `--validate`).
pub fn validator_gate<'a>(v: &'a Validator, dir: &std::path::Path, name: &str) -> impl Gate + 'a {
    let root_dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    gate::HookGate { root: String::new(), root_dir, path: name.to_owned(), guard: None, validators: vec![v] }
}

/// One run's hooks: the manifest's, with each root's host directory (what
/// `{staged}` and `{target}` are made of).
#[derive(Debug)]
pub struct RunHooks {
    hooks: Arc<Hooks>,
    roots: BTreeMap<String, PathBuf>,
}

impl RunHooks {
    /// The hooks of a run whose roots are the directories `roots` (made
    /// absolute here, so a validator's working directory does not matter).
    pub fn new(hooks: Arc<Hooks>, roots: BTreeMap<String, PathBuf>) -> RunHooks {
        let roots = roots.into_iter().map(|(n, p)| (n, std::path::absolute(&p).unwrap_or(p))).collect();
        RunHooks { hooks, roots }
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
        if validators.is_empty() && guard.is_none() {
            return None;
        }
        let root_dir = self.roots.get(root)?.clone();
        Some(Box::new(gate::HookGate {
            root: root.to_owned(),
            root_dir,
            path: path.to_owned(),
            guard,
            validators,
        }))
    }

    fn committed(&self, _root: &str, _path: &str) {}
}
