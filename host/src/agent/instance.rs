//! One plugin instance of the agent (a manifest file and what became of
//! it: the last good version, its schedule, its failures) and why a run
//! started.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::config::Input;
use super::health::InstanceHealth;
use super::{Loaded, Options};
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
}

impl Instance {
    pub(super) fn new(file: PathBuf, opts: &Options) -> Instance {
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
