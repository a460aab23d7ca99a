//! One instance: loading its manifest and plugin, and one run of it with
//! its report.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::durable::Flush;
use crate::hooks::Ledger;
use crate::hooks::actions::{Batch, Runner};
use crate::hooks::probation::{ProbeBatch, Prober};
use crate::runtime::{self, ErrorKind, Operation, Plugin, RunRequest, Runtime};
use crate::services::{Ended, LogRate};

use super::config::{self, Spec};
use super::error::Error;
use super::input;
use super::metrics::RunResult;

/// A loaded instance: its manifest and its linked plugin.
pub struct Loaded {
    /// The parsed manifest.
    pub spec: Spec,
    /// The plugin, ready to instantiate (one fresh `Store` per run).
    pub plugin: Plugin,
}

/// Read, parse and load the manifest at `file` with the shared runtime; a
/// given `flush` (the agent's `--flush`) overrides the manifest's own.
/// Returns the text that was read (also on failure, when it could be read),
/// so a reload can tell an unchanged file from a changed one.
pub fn load(runtime: &Runtime, file: &Path, flush: Option<Flush>) -> (Option<String>, Result<Loaded, Error>) {
    let text = match config::read_manifest(file) {
        Ok(t) => t,
        Err(e) => return (None, Err(e)),
    };
    let loaded = Spec::parse(&text, file).and_then(|mut spec| {
        spec.manifest.override_flush(flush);
        let plugin = runtime.load_manifest(&spec.manifest).map_err(Error::Runtime)?;
        Ok(Loaded { spec, plugin })
    });
    (Some(text), loaded)
}

/// Whether the manifest `file` names a component in a registry
/// (`oci://`): its load waits for the network. A manifest that cannot be
/// read or parsed says no (its load fails at once).
pub(crate) fn pulls_from_registry(file: &Path) -> bool {
    config::read_manifest(file)
        .ok()
        .and_then(|text| Spec::parse(&text, file).ok())
        .is_some_and(|spec| matches!(spec.manifest.wasm, runtime::manifest::Component::Oci(_)))
}

/// How one run ended.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The instance (plugin name).
    pub instance: String,
    /// The result class.
    pub result: RunResult,
    /// The plugin's result on success, else the error.
    pub message: String,
    /// Durable operations done (also those done before a failure).
    pub operations: Vec<Operation>,
    /// From the start of reading the input to the end of the run.
    pub elapsed: Duration,
    /// Who refused one of its changes (a validator or guardrail), if that
    /// is why it failed.
    pub rejected_by: Option<String>,
}

impl RunReport {
    /// Whether the run succeeded.
    pub fn ok(&self) -> bool {
        self.result == RunResult::Ok
    }

    /// `3 operations: 1 created, 2 unchanged`.
    pub fn operations_summary(&self) -> String {
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for op in &self.operations {
            *counts.entry(op.outcome.as_str()).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(o, n)| format!("{n} {o}")).collect();
        match self.operations.len() {
            0 => "no operations".to_owned(),
            1 => format!("1 operation: {}", parts.join(", ")),
            n => format!("{n} operations: {}", parts.join(", ")),
        }
    }

    /// One line for a person: `ok NAME: FIRST LINE OF THE RESULT (OPS; MS)`
    /// or `failed NAME: ERROR (OPS; MS)` (the whole error, lines joined).
    pub fn summary_line(&self) -> String {
        let ms = self.elapsed.as_secs_f64() * 1000.0;
        if self.ok() {
            let first = self.message.trim().lines().next().unwrap_or_default();
            format!("ok {}: {first} ({}; {ms:.1} ms)", self.instance, self.operations_summary())
        } else {
            let message = self.message.trim().replace('\n', "; ");
            format!("failed {}: {message} ({}; {ms:.1} ms)", self.instance, self.operations_summary())
        }
    }
}

/// An instance's ledger (owed actions, probations), its action thread and
/// its probing thread (for a manifest that declares `[[action]]` or
/// `[[probe]]`), or why they could not be had.
pub type Actions = Result<(Arc<Ledger>, Runner, Prober), String>;

/// One run of a loaded instance: read its input, open its roots, call the
/// plugin in a fresh store, its log volume also bounded by `log_rate`.
/// With `actions`, the actions its committed changes owe are recorded in
/// the ledger (before each commit point) and handed to the runner after
/// the run (never before). Logs under the caller's span.
pub fn run_instance(loaded: &Loaded, log_rate: Option<Arc<LogRate>>, actions: Option<&Actions>) -> RunReport {
    let start = Instant::now();
    let name = loaded.spec.manifest.name.clone();
    let report = |result, message: String, operations: Vec<Operation>| RunReport {
        instance: name.clone(),
        result,
        message,
        operations,
        elapsed: start.elapsed(),
        rejected_by: None,
    };
    let bytes = match input::read(&loaded.spec.input) {
        Ok(b) => b,
        Err(e) => return report(RunResult::InputError, format!("run skipped: {e}"), Vec::new()),
    };
    let manifest = &loaded.spec.manifest;
    let owed = match actions.filter(|_| manifest.hooks.needs_ledger()) {
        None => None,
        Some(Err(e)) => return report(RunResult::IoError, format!("run skipped: {e}"), Vec::new()),
        Some(Ok((ledger, runner, prober))) => {
            let hooks = Arc::new(manifest.run_hooks().with_ledger(ledger.clone()));
            Some((hooks, ledger, runner, prober))
        }
    };
    let built = match &owed {
        Some((hooks, ..)) => RunRequest::with_hooks(manifest, bytes, false, Some(hooks.clone())),
        None => RunRequest::from_manifest(manifest, bytes, false),
    };
    let request = match built {
        Ok(r) => r.with_log_rate(log_rate),
        Err(e) => return report(result_of(&e), e.to_string(), Vec::new()),
    };
    // A run and a probation's revert never overlap (hooks/probation.rs).
    let changes =
        owed.as_ref().map(|(_, _, _, prober)| prober.changes().lock().unwrap_or_else(|p| p.into_inner()));
    let result = loaded.plugin.run(&request);
    drop(changes);
    // After the run: every change it committed had its commit fsync return.
    if let Some((hooks, ledger, runner, prober)) = owed {
        let names = hooks.take_committed();
        let all_owed = result.is_ok();
        let actions = Arc::new(manifest.hooks.actions.clone());
        if !names.is_empty() || (all_owed && !ledger.is_empty()) {
            runner.send(Batch { actions: actions.clone(), names, all_owed });
        }
        if !manifest.hooks.probes.is_empty() || !ledger.probations().is_empty() {
            let roots = manifest.roots.iter().map(|(n, r)| (n.clone(), r.path.clone())).collect();
            prober.send(ProbeBatch {
                probes: Arc::new(manifest.hooks.probes.clone()),
                actions,
                roots: Arc::new(roots),
            });
        }
    }
    match result {
        Ok(outcome) => report(RunResult::Ok, outcome.result, outcome.operations),
        Err(e) => RunReport {
            rejected_by: e.rejected_by().map(str::to_owned),
            ..report(result_of(&e), e.to_string(), e.operations().to_vec())
        },
    }
}

fn result_of(e: &runtime::Error) -> RunResult {
    match e.kind() {
        ErrorKind::Policy => RunResult::Refused,
        ErrorKind::Trap if e.rejected_by().is_some() => RunResult::Rejected,
        ErrorKind::Trap => RunResult::Trap,
        ErrorKind::Plugin => RunResult::PluginError,
        ErrorKind::Io => RunResult::IoError,
    }
}

/// Log a finished run's operations and result (under the caller's span,
/// which names the instance).
pub(crate) fn log_report(r: &RunReport) {
    for op in &r.operations {
        let error = op.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        let line = format!(
            "{} {}:{}: {} written, {} removed ({:.1} ms){error}",
            op.outcome,
            op.root,
            op.path.escape_debug(),
            op.written,
            op.removed,
            op.ms
        );
        if op.outcome == Ended::Unchanged {
            tracing::debug!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }
    let ms = r.elapsed.as_secs_f64() * 1000.0;
    let message: String = r
        .message
        .trim()
        .replace('\n', "; ")
        .chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect();
    if r.ok() {
        tracing::info!("run ok in {ms:.1} ms ({}): {message}", r.operations_summary());
    } else {
        tracing::warn!(
            result = r.result.label(),
            "run failed in {ms:.1} ms ({}): {message}",
            r.operations_summary()
        );
    }
}
