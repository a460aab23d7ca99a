//! One plugin instance of the agent (a manifest file and what became of
//! it: the last good version, its schedule, its failures) and why a run
//! started.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::config::{Drift, Input};
use super::health::InstanceHealth;
use super::{AgentSettings, Loaded};
use super::{drift, status};
use crate::runtime::manifest::Component;
use crate::services::LogRate;

/// Why a run started (the `trigger` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The agent started.
    Start,
    /// The resync interval passed.
    Interval,
    /// The input file changed.
    Input,
    /// The manifest was added or changed.
    Config,
    /// SIGHUP.
    Reload,
    /// A retry after a failure.
    Retry,
    /// A target it wrote was changed by something else (`drift = "repair"`).
    Drift,
}

impl Trigger {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Interval => "interval",
            Trigger::Input => "input",
            Trigger::Config => "config",
            Trigger::Reload => "reload",
            Trigger::Retry => "retry",
            Trigger::Drift => "drift",
        }
    }
}

/// One manifest file and what became of it.
pub(super) struct Instance {
    pub(super) file: PathBuf,
    /// The plugin's name once it loaded, else the file name.
    pub(super) label: String,
    /// The last good version (kept when a reload fails).
    pub(super) loaded: Option<Arc<Loaded>>,
    /// The text of the last load attempt, to skip unchanged files.
    pub(super) attempted: Option<String>,
    /// Why the last load attempt failed.
    pub(super) load_error: Option<String>,
    pub(super) running: bool,
    /// A trigger that arrived while running: run again right after.
    pub(super) rerun: Option<Trigger>,
    pub(super) due: Option<(Instant, Trigger)>,
    pub(super) failures: u32,
    /// The last run's failure, if it failed.
    pub(super) last_error: Option<String>,
    pub(super) runs: u64,
    /// The manifest was removed while a run was in flight.
    pub(super) removed: bool,
    /// Its manifest is being loaded (compiled) on the loader thread; the
    /// last good version, if any, keeps running meanwhile.
    pub(super) loading: bool,
    /// The bound on its plugin's log volume, shared by its runs and kept
    /// across reloads.
    pub(super) log_rate: Arc<LogRate>,
    /// Its OCI tag was just resolved again: the next interval run goes
    /// ahead without resolving it once more.
    pub(super) tag_checked: bool,
    /// When its run in flight (or its last run) started, and why.
    pub(super) run_started: Option<(Instant, Trigger)>,
    /// Its drift watch.
    pub(super) drift: drift::State,
    /// The last run that ended, the last that committed, the last refusal
    /// (for `/status`).
    pub(super) last_run: Option<status::RunStatus>,
    pub(super) last_commit: Option<status::CommitStatus>,
    pub(super) last_refusal: Option<status::Refusal>,
    /// How its last run stands for the run slots (see `fair.rs`).
    pub(super) standing: super::fair::Standing,
}

impl Instance {
    pub(super) fn new(file: PathBuf, opts: &AgentSettings) -> Instance {
        let label = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Instance {
            loading: false,
            tag_checked: false,
            log_rate: Arc::new(LogRate::new(opts.log_burst_bytes, opts.log_rate_bytes)),
            file,
            label,
            loaded: None,
            attempted: None,
            load_error: None,
            running: false,
            rerun: None,
            due: None,
            failures: 0,
            last_error: None,
            runs: 0,
            removed: false,
            run_started: None,
            drift: drift::State::default(),
            last_run: None,
            last_commit: None,
            last_refusal: None,
            standing: super::fair::Standing::Unproven,
        }
    }

    /// Its drift settings (the default while it is not loaded).
    pub(super) fn drift_config(&self) -> Drift {
        self.loaded.as_ref().map(|l| l.spec.drift).unwrap_or_default()
    }

    /// What `/status` shows of it (the owed actions are filled in by the
    /// board, from the ledger, when asked).
    pub(super) fn status(&self) -> status::InstanceStatus {
        let plugin = self.loaded.as_ref().map(|l| status::PluginStatus {
            reference: l.spec.manifest.wasm.to_string(),
            sha256: l.plugin.sha256.clone(),
            manifest_digest: l.plugin.manifest_digest.clone(),
            signed_by: l.plugin.signed_by.clone(),
            compiler: Some(l.plugin.compiler.name().to_owned()),
        });
        let d = &self.drift;
        let (last_paths, last_more, last_at) = match &d.last {
            Some((paths, more, at)) => (paths.clone(), *more, Some(status::rfc3339(*at))),
            None => (Vec::new(), 0, None),
        };
        status::InstanceStatus {
            instance: self.label.clone(),
            file: self.file.clone(),
            problem: self.health().problem,
            plugin,
            last_run: self.last_run.clone(),
            last_commit: self.last_commit.clone(),
            owed_actions: Vec::new(),
            drift: status::DriftStatus {
                mode: self.drift_config().mode.as_str().to_owned(),
                targets: d.targets.len(),
                unwatched_dirs: d.unwatched,
                seen: d.seen,
                last_at,
                last_paths,
                last_more,
                unrepaired: d.unrepaired.is_some(),
            },
            last_refusal: self.last_refusal.clone(),
            // Filled from the ledger when asked, as the owed actions.
            probations: Vec::new(),
            failed_probes: Vec::new(),
        }
    }

    /// Whether its plugin is named by an OCI tag (not a digest): what the
    /// tag names may change, so the agent resolves it again on the interval.
    pub(super) fn follows_tag(&self) -> bool {
        self.loaded.as_ref().is_some_and(|l| match &l.spec.manifest.wasm {
            Component::Oci(r) => r.digest.is_none(),
            Component::File(_) => false,
        })
    }

    pub(super) fn input_file(&self) -> Option<&Path> {
        match &self.loaded.as_ref()?.spec.input {
            Input::File(p) => Some(p),
            _ => None,
        }
    }

    pub(super) fn health(&self) -> InstanceHealth {
        let sha256 = self.loaded.as_ref().map(|l| l.plugin.sha256.clone());
        let problem = match (&self.loaded, &self.load_error, &self.last_error) {
            (None, _, _) if self.loading => Some("loading".to_owned()),
            (None, Some(e), _) => Some(format!("not loaded: {e}")),
            (None, None, _) => Some("not loaded".to_owned()),
            (Some(l), Some(e), _) => Some(format!(
                "reload failed, still running the previous version (sha256 {}): {e}",
                l.plugin.sha256
            )),
            (Some(_), None, Some(e)) => Some(format!("last run failed ({} in a row): {e}", self.failures)),
            (Some(_), None, None) if self.runs == 0 => Some("not run yet".to_owned()),
            (Some(l), None, None) if l.spec.drift.readyz && self.drift.unrepaired.is_some() => {
                let paths = self.drift.last.as_ref().map(|(p, more, _)| drift::list_paths(p, *more));
                Some(format!("drift seen and not repaired yet: {}", paths.unwrap_or_default()))
            }
            (Some(_), None, None) => None,
        };
        InstanceHealth {
            instance: self.label.clone(),
            file: self.file.clone(),
            sha256,
            failures: self.failures,
            problem,
        }
    }
}
