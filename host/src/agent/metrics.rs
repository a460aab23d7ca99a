//! The agent's Prometheus metrics (`prometheus-client`, OpenMetrics text).
//!
//! Every series is labelled by `durasync_instance` (the plugin's name) and
//! at most one small enumerated label (`result`, `outcome`, `trigger`): no paths, no
//! messages, so cardinality stays at a few series per instance.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `durasync_instance`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceLabel {
    /// The plugin's name.
    pub durasync_instance: String,
}

/// `durasync_instance`, `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The plugin's name.
    pub durasync_instance: String,
    /// One of [`RunResult::label`].
    pub result: String,
}

/// `durasync_instance`, `outcome`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The plugin's name.
    pub durasync_instance: String,
    /// `created`, `replaced`, `unchanged`, `removed`, `failed`, ...
    pub outcome: String,
}

/// `durasync_instance`, `by`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByLabels {
    /// The plugin's name.
    pub durasync_instance: String,
    /// Who refused a change (`validator NAME`, `guard min_files`): one of
    /// the manifest's own hooks, so the values are bounded by it.
    pub by: String,
}

/// `durasync_instance`, `action`, `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// The plugin's name.
    pub durasync_instance: String,
    /// The action's name (one of the manifest's, so bounded by it).
    pub action: String,
    /// `ok`, `failed` or `timeout`.
    pub result: String,
}

/// `durasync_instance`, `trigger`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabels {
    /// The plugin's name.
    pub durasync_instance: String,
    /// Why the run started: `start`, `interval`, `input`, `config`, `reload`, `retry` or `drift`.
    pub trigger: String,
}

/// `durasync_instance`, `sha256`, `manifest_digest` (the info metric).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfoLabels {
    /// The plugin's name.
    pub durasync_instance: String,
    /// The loaded component's sha256.
    pub sha256: String,
    /// The OCI manifest digest it was pulled by (empty for a local file).
    pub manifest_digest: String,
}

/// Which version of a plugin is loaded: what the info metric shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version<'a> {
    /// The component's sha256.
    pub sha256: &'a str,
    /// The OCI manifest digest, for a component from a registry.
    pub manifest_digest: Option<&'a str>,
}

impl<'a> Version<'a> {
    /// The version of a loaded plugin.
    pub fn of(plugin: &'a crate::runtime::Plugin) -> Version<'a> {
        Version { sha256: &plugin.sha256, manifest_digest: plugin.manifest_digest.as_deref() }
    }

    fn labels(self, instance: &str) -> InfoLabels {
        InfoLabels {
            durasync_instance: instance.into(),
            sha256: self.sha256.into(),
            manifest_digest: self.manifest_digest.unwrap_or_default().into(),
        }
    }
}

/// How a run ended, as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    /// The plugin returned `Ok`.
    Ok,
    /// No input could be had (file unreadable, command failed or timed out).
    InputError,
    /// The plugin returned an error.
    PluginError,
    /// The plugin trapped or hit a limit.
    Trap,
    /// The request was refused before the plugin ran (a missing root).
    Refused,
    /// A change was refused before its commit by a validator or guardrail.
    Rejected,
    /// A host I/O failure.
    IoError,
}

impl RunResult {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            RunResult::Ok => "ok",
            RunResult::InputError => "input_error",
            RunResult::PluginError => "plugin_error",
            RunResult::Trap => "trap",
            RunResult::Refused => "refused",
            RunResult::Rejected => "rejected",
            RunResult::IoError => "io_error",
        }
    }
}

/// Every metric the agent keeps.
pub struct Metrics {
    registry: Registry,
    runs: Family<ResultLabels, Counter>,
    duration: Family<InstanceLabel, Histogram, fn() -> Histogram>,
    operations: Family<OutcomeLabels, Counter>,
    files_written: Family<InstanceLabel, Counter>,
    files_removed: Family<InstanceLabel, Counter>,
    bytes_written: Family<InstanceLabel, Counter>,
    last_success: Family<InstanceLabel, Gauge<f64, AtomicU64>>,
    triggers: Family<TriggerLabels, Counter>,
    info: Family<InfoLabels, Gauge>,
    reload_failures: Family<InstanceLabel, Counter>,
    log_dropped: Family<InstanceLabel, Counter>,
    rejections: Family<ByLabels, Counter>,
    actions: Family<ActionLabels, Counter>,
    actions_owed: Family<InstanceLabel, Gauge>,
    probe_attempts: Family<ResultLabels, Counter>,
    probations: Family<ResultLabels, Counter>,
    probation_reverts: Family<InstanceLabel, Counter>,
    probations_open: Family<InstanceLabel, Gauge>,
    drift: Family<InstanceLabel, Counter>,
    instances: Gauge,
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 33 s: a warm unchanged reconcile is ~1 ms, a plugin's
    // default timeout is 30 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry holding the agent's metric families (no series yet).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("durasync_agent");
        let m = Metrics {
            runs: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            operations: Family::default(),
            files_written: Family::default(),
            files_removed: Family::default(),
            bytes_written: Family::default(),
            last_success: Family::default(),
            triggers: Family::default(),
            info: Family::default(),
            reload_failures: Family::default(),
            log_dropped: Family::default(),
            rejections: Family::default(),
            actions: Family::default(),
            actions_owed: Family::default(),
            probe_attempts: Family::default(),
            probations: Family::default(),
            probation_reverts: Family::default(),
            probations_open: Family::default(),
            drift: Family::default(),
            instances: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("runs", "Plugin runs by result", m.runs.clone());
        registry.register(
            "run_duration_seconds",
            "Time from the start of a run (input included) to its end",
            m.duration.clone(),
        );
        registry.register("operations", "Durable operations by outcome", m.operations.clone());
        registry.register("files_written", "Files written by durable operations", m.files_written.clone());
        registry.register(
            "files_removed",
            "Files of old contents removed by durable operations",
            m.files_removed.clone(),
        );
        registry.register(
            "bytes_written",
            "Bytes of file contents written by durable operations that changed something",
            m.bytes_written.clone(),
        );
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the instance's last successful run",
            m.last_success.clone(),
        );
        registry.register("triggers", "What started runs", m.triggers.clone());
        registry.register(
            "plugin_info",
            "The loaded version of each instance's plugin (value 1)",
            m.info.clone(),
        );
        registry.register(
            "reload_failures",
            "Manifest loads that failed (the previous version, if any, kept running)",
            m.reload_failures.clone(),
        );
        registry.register(
            "log_messages_dropped",
            "Plugin log messages dropped by the instance's log rate limit",
            m.log_dropped.clone(),
        );
        registry.register(
            "rejections",
            "Changes refused before their commit by a validator or guardrail of the manifest",
            m.rejections.clone(),
        );
        registry.register("actions", "Actions run after durable changes, by result", m.actions.clone());
        registry.register(
            "actions_owed",
            "Actions owed by committed changes and not yet run successfully (the ledger)",
            m.actions_owed.clone(),
        );
        registry.register(
            "probe_attempts",
            "Probe attempts on changes on probation, by result (ok, failed)",
            m.probe_attempts.clone(),
        );
        registry.register(
            "probations",
            "Probations ended, by result (passed, reverted, failed: nothing to revert to, revert_failed: retried)",
            m.probations.clone(),
        );
        registry.register(
            "probation_reverts",
            "Changes reverted to their previous tree because their probe failed within its window",
            m.probation_reverts.clone(),
        );
        registry.register(
            "probations_open",
            "Changes on probation now (their previous tree kept)",
            m.probations_open.clone(),
        );
        registry.register(
            "drift",
            "Reports of targets the instance wrote changed by something other than durasync (a burst is one)",
            m.drift.clone(),
        );
        registry.register("instances", "Instances loaded", m.instances.clone());
        Metrics { registry, ..m }
    }

    /// Record one finished run.
    /// `ops` are the durable operations' outcomes, files written and removed,
    /// and bytes written.
    pub fn run_finished<'a>(
        &self,
        instance: &str,
        result: RunResult,
        seconds: f64,
        ops: impl IntoIterator<Item = (&'a str, u32, u32, u64)>,
    ) {
        let l = InstanceLabel { durasync_instance: instance.to_owned() };
        self.runs
            .get_or_create(&ResultLabels {
                durasync_instance: l.durasync_instance.clone(),
                result: result.label().into(),
            })
            .inc();
        self.duration.get_or_create(&l).observe(seconds);
        let (mut written, mut removed, mut bytes) = (0u64, 0u64, 0u64);
        for (outcome, w, r, b) in ops {
            self.operations
                .get_or_create(&OutcomeLabels {
                    durasync_instance: l.durasync_instance.clone(),
                    outcome: outcome.into(),
                })
                .inc();
            written += u64::from(w);
            removed += u64::from(r);
            bytes += b;
        }
        self.files_written.get_or_create(&l).inc_by(written);
        self.files_removed.get_or_create(&l).inc_by(removed);
        self.bytes_written.get_or_create(&l).inc_by(bytes);
        if result == RunResult::Ok {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            self.last_success.get_or_create(&l).set(now.as_secs_f64());
        }
    }

    /// Record what started a run.
    pub fn triggered(&self, instance: &str, trigger: &str) {
        self.triggers
            .get_or_create(&TriggerLabels { durasync_instance: instance.into(), trigger: trigger.into() })
            .inc();
    }

    /// An instance loaded `version` (replacing `previous`, if any).
    pub fn loaded(&self, instance: &str, version: Version<'_>, previous: Option<(&str, Version<'_>)>) {
        if let Some((name, old)) = previous {
            self.info.remove(&old.labels(name));
        }
        self.info.get_or_create(&version.labels(instance)).set(1);
    }

    /// An instance was stopped: its info series goes.
    pub fn unloaded(&self, instance: &str, version: Version<'_>) {
        self.info.remove(&version.labels(instance));
    }

    /// A change of a run was refused by `by` (a validator or guardrail).
    pub fn rejected(&self, instance: &str, by: &str) {
        self.rejections.get_or_create(&ByLabels { durasync_instance: instance.into(), by: by.into() }).inc();
    }

    /// An action ended with `result`.
    pub fn action_finished(&self, instance: &str, action: &str, result: &str) {
        let l =
            ActionLabels { durasync_instance: instance.into(), action: action.into(), result: result.into() };
        self.actions.get_or_create(&l).inc();
    }

    /// `n` actions of `instance` are owed.
    pub fn set_actions_owed(&self, instance: &str, n: usize) {
        let g = self.actions_owed.get_or_create(&InstanceLabel { durasync_instance: instance.into() });
        g.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A probe attempt ended with `result`.
    pub fn probe_attempted(&self, instance: &str, result: &str) {
        let l = ResultLabels { durasync_instance: instance.into(), result: result.into() };
        self.probe_attempts.get_or_create(&l).inc();
    }

    /// A probation ended with `result` (`reverted` also counts a revert).
    pub fn probation_ended(&self, instance: &str, result: &str) {
        let l = ResultLabels { durasync_instance: instance.into(), result: result.into() };
        self.probations.get_or_create(&l).inc();
        if result == "reverted" {
            self.probation_reverts.get_or_create(&InstanceLabel { durasync_instance: instance.into() }).inc();
        }
    }

    /// `n` changes of `instance` are on probation.
    pub fn set_probations_open(&self, instance: &str, n: usize) {
        let g = self.probations_open.get_or_create(&InstanceLabel { durasync_instance: instance.into() });
        g.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// `instance`'s targets are watched for drift: its series exists (at 0
    /// until drift is seen).
    pub fn drift_watched(&self, instance: &str) {
        let _ = self.drift.get_or_create(&InstanceLabel { durasync_instance: instance.into() });
    }

    /// Drift of `instance` was reported.
    pub fn drift_seen(&self, instance: &str) {
        self.drift.get_or_create(&InstanceLabel { durasync_instance: instance.into() }).inc();
    }

    /// A manifest failed to load.
    pub fn reload_failed(&self, instance: &str) {
        self.reload_failures.get_or_create(&InstanceLabel { durasync_instance: instance.into() }).inc();
    }

    /// `n` more of an instance's log messages were dropped by its rate limit.
    pub fn log_dropped(&self, instance: &str, n: u64) {
        self.log_dropped.get_or_create(&InstanceLabel { durasync_instance: instance.into() }).inc_by(n);
    }

    /// The number of loaded instances.
    pub fn set_instances(&self, n: usize) {
        self.instances.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_counters_reach_the_text() {
        let m = Metrics::new();
        m.run_finished("a", RunResult::Ok, 0.003, [("created", 2, 1, 300)]);
        m.run_finished("a", RunResult::Trap, 0.5, []);
        let old = Version { sha256: "00ff", manifest_digest: None };
        m.loaded("a", old, None);
        m.loaded("a", Version { sha256: "11ee", manifest_digest: Some("sha256:ab") }, Some(("a", old)));
        let text = m.encode();
        for line in [
            "durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"} 1",
            "durasync_agent_runs_total{durasync_instance=\"a\",result=\"trap\"} 1",
            "durasync_agent_operations_total{durasync_instance=\"a\",outcome=\"created\"} 1",
            "durasync_agent_files_written_total{durasync_instance=\"a\"} 2",
            "durasync_agent_files_removed_total{durasync_instance=\"a\"} 1",
            "durasync_agent_bytes_written_total{durasync_instance=\"a\"} 300",
            "durasync_agent_run_duration_seconds_count{durasync_instance=\"a\"} 2",
            "durasync_agent_plugin_info{durasync_instance=\"a\",sha256=\"11ee\",manifest_digest=\"sha256:ab\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("00ff"), "a replaced version's info series is removed:\n{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
