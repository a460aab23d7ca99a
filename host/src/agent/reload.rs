//! Reloading the agent's config directory: changed manifests are loaded
//! again (a failure keeps the last good version), removed ones stop after
//! their run in flight, names stay unique; then the watches and the
//! published state (`/readyz`, metrics, systemd status) follow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::daemon::{Daemon, LoadBatch};
use super::health::InstanceHealth;
use super::instance::{Instance, Trigger};
use super::metrics::Version;
use super::{Error, config};

impl Daemon {
    /// Re-read the config directory. Changed manifests are loaded again
    /// (every one when `force`) on the loader thread, and applied when they
    /// are back ([`Daemon::apply_loaded`]); a removed manifest stops its
    /// instance after any in-flight run. While a batch is loading, the
    /// reload waits for it (and then sees every change made meanwhile).
    pub(super) fn reload(&mut self, force: bool) {
        if self.loading {
            self.reload_queued = Some(self.reload_queued.unwrap_or(false) || force);
            return;
        }
        let files = match config::manifest_files(&self.opts.config_dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!("reload skipped, every instance keeps running as it was: {e}");
                return;
            }
        };
        let present: BTreeSet<&PathBuf> = files.iter().collect();
        let gone: Vec<PathBuf> = self.instances.keys().filter(|f| !present.contains(f)).cloned().collect();
        for file in gone {
            let inst = self.instances.get_mut(&file).expect("listed");
            if inst.running {
                tracing::info!(instance = %inst.label, "manifest removed: stopping after the run in flight");
                inst.removed = true;
                inst.due = None;
                inst.rerun = None;
            } else {
                tracing::info!(instance = %inst.label, "manifest removed: stopped");
                if let Some(l) = &inst.loaded {
                    self.metrics.unloaded(&inst.label, Version::of(&l.plugin));
                }
                self.instances.remove(&file);
                self.drift.arm(&file, &BTreeMap::new());
            }
        }
        // Load what changed.
        let mut changed = Vec::new();
        for file in files {
            // A manifest removed and put back while its last run was in
            // flight is loaded again, whatever its text.
            let previous = self.instances.get(&file).filter(|i| !i.removed).and_then(|i| i.attempted.clone());
            let text = config::read_manifest(&file).ok();
            if !force && text.is_some() && text == previous {
                continue;
            }
            let inst = match self.instances.remove(&file) {
                Some(inst) => inst,
                None => self.new_instance(file.clone()),
            };
            self.instances.insert(file.clone(), Instance { loading: true, ..inst });
            changed.push(file);
        }
        if !changed.is_empty() {
            self.dispatch_load(changed, force, false);
        }
        self.sync_watches();
        self.refresh();
    }

    /// Apply reloaded manifests as they come back from the loader: a
    /// failure keeps the previous version; names stay unique.
    ///
    /// Each manifest is applied when it arrives, except one that takes a
    /// name still held by another instance of the same dispatch that has
    /// not been applied yet (two manifests swapping names in one edit):
    /// that one waits for the dispatch's last manifest, and those that
    /// waited are then decided together, as one batch.
    pub(super) fn apply_loaded(&mut self, batch: LoadBatch) {
        let LoadBatch { force, refresh, last, attempts, .. } = batch;
        let mut now = Vec::new();
        for attempt in attempts {
            let (file, _, result) = &attempt;
            let in_flux = result.as_ref().is_ok_and(|l| {
                self.instances.values().any(|i| {
                    i.file != *file && i.loading && i.loaded.is_some() && i.label == l.spec.manifest.name
                })
            });
            if in_flux { self.deferred_loads.push(attempt) } else { now.push(attempt) }
        }
        if !now.is_empty() {
            self.apply_attempts(now, force, refresh);
        }
        if last {
            let waited = std::mem::take(&mut self.deferred_loads);
            if !waited.is_empty() {
                self.apply_attempts(waited, force, refresh);
            }
        }
        self.sync_watches();
        self.refresh();
    }

    /// Decide `attempts` together (see [`Daemon::apply_loaded`]).
    fn apply_attempts(&mut self, attempts: Vec<super::daemon::Attempt>, force: bool, refresh: bool) {
        // Names must stay unique: a name held by another file that keeps
        // its version, or wanted by two changed files, is refused.
        let mut wanted: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for (file, _, result) in &attempts {
            if let Ok(l) = result {
                wanted.entry(l.spec.manifest.name.clone()).or_default().push(file.clone());
            }
        }
        let changing: BTreeSet<PathBuf> =
            attempts.iter().filter(|(_, _, r)| r.is_ok()).map(|(f, _, _)| f.clone()).collect();
        for (file, text, result) in attempts {
            let result = result.and_then(|l| {
                let name = &l.spec.manifest.name;
                let holder = self.instances.values().find(|i| {
                    i.file != file && !changing.contains(&i.file) && i.loaded.is_some() && i.label == *name
                });
                let mut files: Vec<PathBuf> = wanted[name].clone();
                if let Some(h) = holder {
                    files.insert(0, h.file.clone());
                }
                if files.len() > 1 {
                    return Err(Error::DuplicateName { name: name.clone(), files });
                }
                Ok(l)
            });
            if !self.instances.contains_key(&file) {
                let inst = self.new_instance(file.clone());
                self.instances.insert(file.clone(), inst);
            }
            let inst = self.instances.get_mut(&file).expect("inserted");
            inst.attempted = text;
            inst.removed = false;
            inst.loading = false;
            let trigger = match (refresh, force) {
                (true, _) => Trigger::Interval,
                (false, true) => Trigger::Reload,
                (false, false) => Trigger::Config,
            };
            // A tag resolved again on the interval: the run it was due for
            // happens right after, whatever the resolution gave.
            inst.tag_checked = refresh;
            match result {
                Ok(l)
                    if refresh
                        && inst.loaded.as_ref().is_some_and(|p| p.plugin.sha256 == l.plugin.sha256) =>
                {
                    tracing::debug!(instance = %inst.label, "its tag still names the running version");
                    inst.load_error = None;
                    inst.due = Some((Instant::now(), trigger));
                }
                Ok(l) => {
                    let previous = inst.loaded.clone().map(|p| (inst.label.clone(), p));
                    inst.label = l.spec.manifest.name.clone();
                    self.metrics.loaded(
                        &inst.label,
                        Version::of(&l.plugin),
                        previous.as_ref().map(|(n, p)| (n.as_str(), Version::of(&p.plugin))),
                    );
                    tracing::info!(instance = %inst.label, file = %file.display(), sha256 = %l.plugin.sha256, "loaded");
                    inst.loaded = Some(Arc::new(l));
                    inst.load_error = None;
                    inst.failures = 0;
                    inst.last_error = None;
                    if inst.running {
                        inst.rerun = Some(trigger);
                    } else {
                        inst.due = Some((Instant::now(), trigger));
                    }
                }
                Err(e) => {
                    self.metrics.reload_failed(&inst.label);
                    // A revocation of the very version running stops it: a
                    // revoked plugin is not kept as "the last good version"
                    // (a run in flight finishes; no new one starts).
                    let running_revoked = revoked_digest(&e).is_some_and(|d| {
                        inst.loaded.as_ref().is_some_and(|l| {
                            l.plugin.manifest_digest.as_deref() == Some(d)
                                || d.strip_prefix("sha256:") == Some(l.plugin.sha256.as_str())
                        })
                    });
                    if running_revoked && let Some(l) = inst.loaded.take() {
                        tracing::error!(instance = %inst.label, "its running version is revoked, stopped: {e}");
                        self.metrics.unloaded(&inst.label, Version::of(&l.plugin));
                        inst.due = None;
                        inst.rerun = None;
                    } else if inst.loaded.is_some() {
                        tracing::error!(instance = %inst.label, "reload failed, the previous version keeps running: {e}");
                    } else {
                        tracing::error!(instance = %inst.label, file = %file.display(), "not loaded: {e}");
                    }
                    inst.load_error = Some(e.to_string());
                    if refresh && inst.loaded.is_some() {
                        inst.due = Some((Instant::now(), trigger));
                    }
                }
            }
        }
    }

    /// Watch the config directory and every input file's directory.
    pub(super) fn sync_watches(&mut self) {
        let mut dirs = BTreeSet::from([self.opts.config_dir.clone()]);
        for inst in self.instances.values() {
            if let Some(dir) = inst.input_file().and_then(Path::parent) {
                dirs.insert(dir.to_path_buf());
            }
        }
        self.watches_incomplete = !self.watcher.set(&dirs);
    }

    /// Publish the state: `/readyz`, the instance gauge, systemd's status
    /// (and `READY=1` once every instance that loaded has run once).
    pub(super) fn refresh(&mut self) {
        let health: Vec<InstanceHealth> = self.instances.values().map(Instance::health).collect();
        let statuses = self
            .instances
            .values()
            .map(|i| {
                let ledger = self
                    .actions
                    .get(&i.label)
                    .and_then(|a| a.as_ref().as_ref().ok())
                    .map(|(l, _, _)| l.clone());
                (i.status(), ledger)
            })
            .collect();
        self.status.set(statuses);
        let loaded = self.instances.values().filter(|i| i.loaded.is_some()).count();
        let failing = health.iter().filter(|h| h.problem.is_some()).count();
        self.metrics.set_instances(loaded);
        self.health.set(health);
        let status = format!(
            "{} instances, {} ready, {} not ready",
            self.instances.len(),
            self.instances.len() - failing,
            failing
        );
        let first_round_done = self
            .instances
            .values()
            .all(|i| !i.loading && (i.loaded.is_none() || (i.runs > 0 && !i.running) || i.removed));
        if !self.ready_sent && first_round_done {
            self.ready_sent = true;
            tracing::info!("first round done: {status}");
            self.notifier.ready(&status);
        } else if self.ready_sent {
            self.notifier.status(&status);
        }
    }
}

/// The digest a load was refused for because `[verify] revoked_digests`
/// lists it.
fn revoked_digest(e: &Error) -> Option<&str> {
    match e {
        Error::Runtime(crate::runtime::Error::Trust(crate::runtime::trust::Error::Revoked {
            digest,
            ..
        })) => Some(digest),
        _ => None,
    }
}
