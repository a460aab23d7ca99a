//! Validators, guardrails and actions: what an operator (never a plugin)
//! declares in a manifest around the changes a plugin makes.
//!
//! - [`config`]: the manifest tables, parsed strictly;
//! - [`pattern`]: which changed paths a hook applies to;
//! - [`command`]: running an operator's command with a timeout;
//! - [`http`]: one bounded HTTP request to a daemon on the node (an HTTP
//!   action, a probe);
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
mod hook_gate;
pub mod http;
pub mod ledger;
pub mod pattern;
pub mod probation;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use config::{Action, ActionRun, Guard, Probe, ProbeCheck, Validator};

pub use ledger::Ledger;

use crate::durable::Gate;

/// What one manifest declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookSpec {
    /// `[[validate]]`, in manifest order.
    pub validators: Vec<Validator>,
    /// Guardrails by root name (only roots that set one).
    pub guards: BTreeMap<String, Guard>,
    /// `[[action]]`, in manifest order.
    pub actions: Vec<Action>,
    /// `[[probe]]`, in manifest order.
    pub probes: Vec<Probe>,
}

impl HookSpec {
    /// Whether nothing is declared (a run then gets no hooks at all).
    pub fn is_empty(&self) -> bool {
        self.validators.is_empty()
            && self.guards.is_empty()
            && self.actions.is_empty()
            && self.probes.is_empty()
    }

    /// Whether the agent keeps a ledger for these hooks (owed actions,
    /// probations).
    pub fn needs_ledger(&self) -> bool {
        !self.actions.is_empty() || !self.probes.is_empty()
    }

    /// The names of the actions a change of `path` in `root`, or of
    /// anything below it, owes ([`pattern::may_cover_below`]).
    pub fn actions_for(&self, root: &str, path: &str) -> Vec<String> {
        self.actions
            .iter()
            .filter(|a| a.root == root && pattern::may_cover_below(&a.path, path))
            .map(|a| a.name.clone())
            .collect()
    }

    /// What would run for a change of `path` in `root` (or below it), one
    /// line each (`durasync run --dry-run`).
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
        for v in self.validators.iter().filter(|v| v.root == root && pattern::may_cover_below(&v.path, path))
        {
            out.push(format!("validator {}: {}", v.name, v.command.join(" ")));
        }
        for a in self.actions.iter().filter(|a| a.root == root && pattern::may_cover_below(&a.path, path)) {
            out.push(format!("action {} (after the change is durable): {}", a.name, a.run.describe()));
        }
        if let Some(p) = probation::probe_for(&self.probes, root, path) {
            let what = match &p.check {
                ProbeCheck::Command(argv) => argv.join(" "),
                ProbeCheck::Http(url) => format!("GET {url}"),
            };
            out.push(format!(
                "probe {} (agent only: every {} until it passes, reverted after {}): {what}",
                p.name,
                humantime::format_duration(p.interval),
                humantime::format_duration(p.within)
            ));
        }
        out
    }
}

/// A gate running one validator for the target `name` in the directory
/// `dir` (the native CLI's `--validate`).
pub fn validator_gate<'a>(v: &'a Validator, dir: &std::path::Path, name: &str) -> impl Gate + 'a {
    let root_dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    hook_gate::HookGate {
        root: String::new(),
        root_dir,
        path: name.to_owned(),
        guard: None,
        validators: vec![v],
        actions: Vec::new(),
        ledger: None,
        probe: None,
        run: None,
    }
}

/// What one run has done to each root so far, for the guardrails that
/// bound a whole run and for the actions owed.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    /// Per root: its regular files when the run first changed it (the
    /// plugin's files only), and the files the run's accepted changes
    /// removed since.
    removed: std::sync::Mutex<BTreeMap<String, (u64, u64)>>,
    /// The actions owed by the last change a gate accepted (taken when it
    /// is committed).
    accepted: std::sync::Mutex<Option<Vec<String>>>,
}

impl RunState {
    /// Refuse removing `removing` more files of `root` (at `dir`) when the
    /// run's removals would then pass `max` of the files the root held when
    /// the run first changed it; else count them.
    pub(crate) fn remove_files(
        &self,
        root: &str,
        dir: &std::path::Path,
        max: f64,
        removing: u64,
    ) -> Result<(), crate::durable::Refusal> {
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        let (start, so_far) = match removed.get(root) {
            Some(&counts) => counts,
            None => {
                // Before the run's first change of this root: what it holds at the start.
                let start = count_files(dir).map_err(|e| crate::durable::Refusal {
                    by: "guard max_removed_fraction".into(),
                    reason: format!("counting the files of root `{root}`: {e}"),
                })?;
                *removed.entry(root.to_owned()).or_insert((start, 0))
            }
        };
        let total = so_far + removing;
        if removing > 0 && total as f64 > max * start as f64 {
            let earlier =
                if so_far > 0 { format!(" ({so_far} by its earlier changes)") } else { String::new() };
            return Err(crate::durable::Refusal {
                by: "guard max_removed_fraction".into(),
                reason: format!(
                    "this run would remove {total} of the {start} files root `{root}` held at its start{earlier}, \
                     more than roots.{root}.max_removed_fraction = {max}"
                ),
            });
        }
        removed.insert(root.to_owned(), (start, total));
        Ok(())
    }

    pub(crate) fn accept(&self, names: Option<Vec<String>>) {
        *self.accepted.lock().unwrap_or_else(|p| p.into_inner()) = names;
    }

    fn take_accepted(&self) -> Option<Vec<String>> {
        self.accepted.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The regular files beneath `dir` (or 1 for a regular file), durasync's
/// own entries left out; 0 when nothing is there.
fn count_files(dir: &std::path::Path) -> Result<u64, crate::durable::Error> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(crate::durable::Error::io(crate::durable::Step::Read, dir.display().to_string(), e));
        }
    };
    if !meta.is_dir() {
        return Ok(u64::from(meta.is_file()));
    }
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::CLOEXEC
            | rustix::fs::OFlags::NOFOLLOW,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| crate::durable::Error::io(crate::durable::Step::Read, dir.display().to_string(), e))?;
    crate::durable::walk::count_files(std::os::fd::AsFd::as_fd(&fd), &dir.display().to_string())
}

/// One run's hooks: the manifest's, with each root's host directory (what
/// `{staged}` and `{target}` are made of).
#[derive(Debug)]
pub struct RunHooks {
    hooks: Arc<HookSpec>,
    roots: BTreeMap<String, PathBuf>,
    /// Where owed actions are recorded (the agent's); without one, actions
    /// are not run (`durasync run` is one-shot and has no runner).
    ledger: Option<Arc<Ledger>>,
    /// The actions owed by this run's committed changes.
    committed: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// What the run's changes did so far.
    state: RunState,
}

impl RunHooks {
    /// The hooks of a run whose roots are the directories `roots` (made
    /// absolute here, so a validator's working directory does not matter).
    pub fn new(hooks: Arc<HookSpec>, roots: BTreeMap<String, PathBuf>) -> RunHooks {
        let roots = roots.into_iter().map(|(n, p)| (n, std::path::absolute(&p).unwrap_or(p))).collect();
        RunHooks { hooks, roots, ledger: None, committed: Default::default(), state: RunState::default() }
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

    fn refusal_for_removal(&self, root: &str, path: &str) -> Result<(), crate::durable::Refusal> {
        let Some(guard) = self.hooks.guards.get(root) else { return Ok(()) };
        if let Some(min) = guard.min_files
            && min > 0
        {
            return Err(crate::durable::Refusal {
                by: "guard min_files".into(),
                reason: format!("a removal leaves no files there, fewer than roots.{root}.min_files = {min}"),
            });
        }
        if let (Some(max), Some(dir)) = (guard.max_removed_fraction, self.roots.get(root)) {
            let removing = count_files(&dir.join(path)).map_err(|e| crate::durable::Refusal {
                by: "guard max_removed_fraction".into(),
                reason: format!("counting the files of {root}:{path}: {e}"),
            })?;
            self.state.remove_files(root, dir, max, removing)?;
        }
        Ok(())
    }
}

impl crate::services::Hooks for RunHooks {
    fn gate<'a>(&'a self, root: &str, path: &str) -> Option<Box<dyn Gate + 'a>> {
        self.state.accept(None);
        let validators: Vec<&Validator> = self
            .hooks
            .validators
            .iter()
            .filter(|v| v.root == root && pattern::may_cover_below(&v.path, path))
            .collect();
        let guard = self.hooks.guards.get(root).copied();
        let actions: Vec<&Action> = match &self.ledger {
            Some(_) => self
                .hooks
                .actions
                .iter()
                .filter(|a| a.root == root && pattern::may_cover_below(&a.path, path))
                .collect(),
            None => Vec::new(),
        };
        let probe = match &self.ledger {
            Some(_) => probation::probe_for(&self.hooks.probes, root, path),
            None => None,
        };
        if validators.is_empty() && guard.is_none() && actions.is_empty() && probe.is_none() {
            return None;
        }
        let root_dir = self.roots.get(root)?.clone();
        let path = path.to_owned();
        Some(Box::new(hook_gate::HookGate {
            root: root.to_owned(),
            root_dir,
            path,
            guard,
            validators,
            actions,
            ledger: self.ledger.as_deref(),
            probe,
            run: Some(&self.state),
        }))
    }

    fn removal(&self, root: &str, path: &str) -> Result<(), crate::durable::Refusal> {
        self.state.accept(None);
        self.refusal_for_removal(root, path)?;
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
            self.state.accept(Some(names));
        }
        Ok(())
    }

    fn exchange(&self, root: &str, a: &str, b: &str) -> Result<(), crate::durable::Refusal> {
        // An exchange swaps two trees the plugin made, neither staged nor
        // made durable by durasync: there is no staged copy to show a
        // validator, no count before and after for a guardrail, and no
        // commit after which an action is owed (the plugin's own fsync
        // decides). So where any hook covers either side (or anything
        // below it), it is refused: the plugin uses sync or write-file,
        // which pass every hook, there.
        let refuse = |by: String, side: &str| crate::durable::Refusal {
            by,
            reason: format!(
                "an exchange would change {root}:{side}, which it covers, with nothing staged to check; \
                 use sync or write-file there"
            ),
        };
        if let Some(g) = self.hooks.guards.get(root).filter(|g| !g.is_empty()) {
            let by = if g.min_files.is_some() { "guard min_files" } else { "guard max_removed_fraction" };
            return Err(refuse(by.into(), a));
        }
        for side in [a, b] {
            if let Some(v) = self
                .hooks
                .validators
                .iter()
                .find(|v| v.root == root && pattern::may_cover_below(&v.path, side))
            {
                return Err(refuse(format!("validator {}", v.name), side));
            }
            if let Some(act) =
                self.hooks.actions.iter().find(|x| x.root == root && pattern::may_cover_below(&x.path, side))
            {
                return Err(refuse(format!("action {}", act.name), side));
            }
            if let Some(p) = probation::probe_for(&self.hooks.probes, root, side) {
                return Err(refuse(format!("probe {}", p.name), side));
            }
        }
        Ok(())
    }

    fn committed(&self, root: &str, path: &str) {
        let Some(ledger) = &self.ledger else { return };
        // The actions the accepting gate (or removal) found owed; without
        // one (no gate was asked), whatever may cover the path.
        let names = self.state.take_accepted().unwrap_or_else(|| self.hooks.actions_for(root, path));
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
        let hooks = HookSpec { actions: vec![action], ..HookSpec::default() };
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
