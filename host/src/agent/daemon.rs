//! The agent's loop: one thread owns every instance's state and decides
//! when each runs. It never does slow work itself: loading manifests
//! (compiling a component can take tens of seconds) and runs happen on
//! threads of their own and report back through the same bounded channel
//! as inotify and signals. So the loop always turns: it pings systemd's
//! watchdog and beats the heart `/healthz` reads, whatever the plugins do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use super::config::{self, DriftMode};
use super::drift::{self, Seen, Watches};
use super::fair;
use super::health::Health;
use super::http::MetricsServer;
use super::instance::{Instance, Trigger};
use super::metrics::{Metrics, Version};
use super::notify::Notifier;
use super::status::{self, Board};
use super::watch::{Change, Watcher};
use super::{AgentSettings, Error, Loaded, RunReport, load, log_report, run_instance};
use crate::hooks::Ledger;
use crate::hooks::actions::{Observer, Runner};
use crate::hooks::ledger::ProbationRecord;
use crate::hooks::probation::{ProbeObserver, Prober};
use crate::runtime::Runtime;
use crate::spawn::spawn_traced;

/// How long the config directory must be quiet before a reload: an editor
/// or `cp` writes a manifest in several steps.
const CONFIG_SETTLE: Duration = Duration::from_millis(50);

/// Most events waiting for the loop. A sender blocks while the queue is
/// full: a run's or the loader's thread for a moment, the inotify reader
/// until the loop catches up (meanwhile the kernel's own queue fills and
/// overflows, and an overflow resyncs every instance). Memory stays bounded
/// whatever the rate of file-system events.
const EVENT_QUEUE: usize = 1024;

/// The loop wakes at least this often, to beat the heart `/healthz` reads.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// One manifest load: the file, the text read (if any), the result.
pub(super) type Attempt = (PathBuf, Option<String>, Result<Loaded, Error>);

/// What the loader thread hands back: every manifest it was asked for.
pub(super) struct LoadBatch {
    /// A SIGHUP reload (every manifest, `Trigger::Reload`).
    pub(super) force: bool,
    /// The first load at start (duplicate names are fatal then).
    pub(super) initial: bool,
    /// An OCI tag resolved again on its instance's interval.
    pub(super) refresh: bool,
    /// The loader's last message for this dispatch: each manifest comes
    /// back on its own as soon as it is loaded (a slow pull holds no other
    /// instance `loading`), and the last one ends the dispatch.
    pub(super) last: bool,
    pub(super) attempts: Vec<Attempt>,
}

pub(super) enum Event {
    Watch(Change),
    Signal(i32),
    /// A run ended; `digests`: its written roots' tree digests, when it
    /// committed a change.
    Done {
        file: PathBuf,
        report: RunReport,
        digests: BTreeMap<String, String>,
    },
    /// Drift events wait in the drift watch's queue.
    DriftReady,
    /// An instance's prober swapped `root:path` back to its previous tree:
    /// durasync's own change, never drift.
    Reverted {
        instance: String,
        root: String,
        path: String,
    },
    Loaded(LoadBatch),
}

pub(super) struct Daemon {
    pub(super) opts: AgentSettings,
    pub(super) runtime: Arc<Runtime>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) health: Arc<Health>,
    pub(super) status: Arc<Board>,
    /// The drift watch of every instance's targets.
    pub(super) drift: Watches,
    pub(super) notifier: Notifier,
    pub(super) watcher: Watcher,
    pub(super) tx: SyncSender<Event>,
    /// A load batch is on the loader thread.
    pub(super) loading: bool,
    /// Reloaded manifests waiting for the end of their dispatch (see
    /// [`Daemon::apply_loaded`]).
    pub(super) deferred_loads: Vec<Attempt>,
    /// A reload asked for while a batch was loading (`true`: forced).
    pub(super) reload_queued: Option<bool>,
    pub(super) instances: BTreeMap<PathBuf, Instance>,
    /// When a quiet config directory should be reloaded.
    reload_at: Option<Instant>,
    /// `READY=1` was sent (after the first round).
    pub(super) ready_sent: bool,
    /// A directory could not be watched: retry at the next opportunity.
    pub(super) watches_incomplete: bool,
    /// Each instance's ledger and action thread, by plugin name (kept
    /// across reloads: what is owed stays owed).
    pub(super) actions: BTreeMap<String, Arc<super::Actions>>,
}

/// Run the agent until SIGTERM or SIGINT. Returns after in-flight runs
/// finished (or the grace period ended, which is an error naming them).
pub fn run(opts: &AgentSettings) -> Result<(), Error> {
    let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE);
    // Signals first: a SIGTERM during start-up must not kill the process
    // between two durable steps of a first run.
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGTERM, SIGINT])
        .map_err(|e| Error::Setup { what: "installing signal handlers", source: e })?;
    let sig_tx = tx.clone();
    spawn_traced("signals".into(), move || {
        for sig in signals.forever() {
            if sig_tx.send(Event::Signal(sig)).is_err() {
                return;
            }
        }
    })
    .map_err(|e| Error::Setup { what: "starting the signal thread", source: e })?;

    let mut opts = opts.clone();
    // Absolute, so inotify's paths and the manifests' relative paths agree
    // whatever the working directory.
    opts.config_dir = std::fs::canonicalize(&opts.config_dir)
        .map_err(|e| Error::ConfigDir { dir: opts.config_dir.clone(), source: e })?;
    let opts = &opts;
    let mut watcher = Watcher::start(tx.clone(), Event::Watch)
        .map_err(|e| Error::Setup { what: "starting inotify", source: e })?;
    // Watch before listing: a manifest written while the others load is seen.
    watcher.set(&BTreeSet::from([opts.config_dir.clone()]));
    let files = config::manifest_files(&opts.config_dir)?;
    let mut runtime = Runtime::new(&opts.cache).map_err(Error::Runtime)?;
    if let Some(compiler) = &opts.compiler {
        runtime.compile_out_of_process(compiler.clone());
    }
    runtime.set_registry_settings(opts.registry.clone());
    let runtime = Arc::new(runtime);
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let status = Arc::new(Board::new(opts.config_dir.clone()));
    let drift = Watches::start(tx.clone(), || Event::DriftReady)
        .map_err(|e| Error::Setup { what: "starting the drift watch", source: e })?;
    // Served from the start: `/healthz` answers while the first manifests
    // compile, and `/readyz` says which are still loading.
    let _server = match &opts.metrics_addr {
        Some(addr) => {
            let server = MetricsServer::start(addr, metrics.clone(), health.clone(), status.clone())?;
            tracing::info!("serving /metrics, /healthz, /readyz and /status on http://{}", server.addr);
            Some(server)
        }
        None => None,
    };
    let mut d = Daemon {
        opts: opts.clone(),
        runtime,
        metrics,
        health,
        status,
        drift,
        notifier: Notifier::from_env(),
        watcher,
        tx,
        loading: false,
        deferred_loads: Vec::new(),
        reload_queued: None,
        instances: BTreeMap::new(),
        reload_at: None,
        ready_sent: false,
        watches_incomplete: false,
        actions: BTreeMap::new(),
    };
    d.start(files);
    d.run(rx)
}

impl Daemon {
    /// Every manifest starts "loading"; the loader thread loads them all.
    fn start(&mut self, files: Vec<PathBuf>) {
        for file in &files {
            let mut inst = self.new_instance(file.clone());
            inst.loading = true;
            self.instances.insert(file.clone(), inst);
        }
        self.refresh();
        self.dispatch_load(files, false, true);
    }

    /// An instance for `file`, not loaded yet, with its own log rate limit.
    pub(super) fn new_instance(&self, file: PathBuf) -> Instance {
        Instance::new(file, &self.opts)
    }

    /// Load `files` on a thread of their own; the loop gets an
    /// [`Event::Loaded`] with every result.
    pub(super) fn dispatch_load(&mut self, files: Vec<PathBuf>, force: bool, initial: bool) {
        self.dispatch(files, force, initial, false);
    }

    /// Load `files` on the loader thread; the batch comes back flagged as
    /// asked (see [`LoadBatch`]).
    fn dispatch(&mut self, files: Vec<PathBuf>, force: bool, initial: bool, refresh: bool) {
        let runtime = self.runtime.clone();
        let tx = self.tx.clone();
        let flush = self.opts.flush;
        let spawned = spawn_traced("load".into(), move || {
            // One manifest after another (a compile's memory is not
            // multiplied), each behind `catch_unwind`: a panic while loading
            // one manifest is that manifest's load error, never the batch's,
            // so the others load and the loader thread lives on.
            // Each result is sent as soon as it is known, and manifests whose
            // component is a local file load before those pulled from a
            // registry: a slow registry (up to its pull's deadline) holds
            // back only the registry manifests after it, never a local one.
            let (local, pulled): (Vec<PathBuf>, Vec<PathBuf>) =
                files.into_iter().partition(|f| !super::pulls_from_registry(f));
            let files: Vec<PathBuf> = local.into_iter().chain(pulled).collect();
            let total = files.len();
            if total == 0 {
                let _ = tx.send(Event::Loaded(LoadBatch {
                    force,
                    initial,
                    refresh,
                    last: true,
                    attempts: vec![],
                }));
            }
            for (i, file) in files.into_iter().enumerate() {
                let loaded =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(&runtime, &file, flush)));
                let (text, result) = loaded.unwrap_or_else(|panic| {
                    let reason = panic_message(&*panic);
                    tracing::error!(file = %file.display(), "loading panicked: {reason}");
                    (None, Err(Error::LoadPanic { file: file.clone(), reason }))
                });
                let attempts = vec![(file, text, result)];
                let last = i + 1 == total;
                if tx.send(Event::Loaded(LoadBatch { force, initial, refresh, last, attempts })).is_err() {
                    return;
                }
            }
        });
        match spawned {
            Ok(_) => self.loading = true,
            Err(e) => {
                // Tried again shortly, through the reload path.
                tracing::error!("cannot start a thread to load manifests: {e}; retrying in 1 s");
                self.reload_at = Some(Instant::now() + Duration::from_secs(1));
                if initial {
                    self.reload_queued = Some(false);
                }
            }
        }
    }

    /// The first batch (its manifests one by one as they load): like any
    /// reload, except that two manifests with the same name stop the agent
    /// (exit 12), as a bad start must be loud.
    fn apply_initial(&mut self, batch: LoadBatch) -> Result<(), Error> {
        let loaded = self
            .instances
            .values()
            .filter(|i| i.loaded.is_some())
            .map(|i| (i.file.as_path(), i.label.as_str()));
        let names = batch.attempts.iter().filter_map(|(file, _, r)| {
            r.as_ref().ok().map(|l| (file.as_path(), l.spec.manifest.name.as_str()))
        });
        if let Some((name, files)) = config::duplicate_names(loaded.chain(names)).into_iter().next() {
            return Err(Error::DuplicateName { name, files });
        }
        let now = Instant::now();
        for (file, text, result) in batch.attempts {
            let mut inst = self.instances.remove(&file).unwrap_or_else(|| self.new_instance(file.clone()));
            inst.attempted = text;
            inst.loading = false;
            match result {
                Ok(l) => {
                    inst.label = l.spec.manifest.name.clone();
                    self.metrics.loaded(&inst.label, Version::of(&l.plugin), None);
                    tracing::info!(instance = %inst.label, file = %file.display(), sha256 = %l.plugin.sha256, "loaded");
                    inst.loaded = Some(Arc::new(l));
                    // Spread the first runs: a fleet of agents restarted at
                    // once must not hit its inputs' servers at one instant.
                    inst.due = Some((now + jitter(self.opts.start_jitter), Trigger::Start));
                }
                Err(e) => {
                    tracing::error!(instance = %inst.label, file = %file.display(), "not loaded: {e}");
                    self.metrics.reload_failed(&inst.label);
                    inst.load_error = Some(e.to_string());
                }
            }
            self.instances.insert(file, inst);
        }
        if batch.last {
            tracing::info!(
                "agent started: {} of {} manifests in {} loaded",
                self.instances.values().filter(|i| i.loaded.is_some()).count(),
                self.instances.len(),
                self.opts.config_dir.display()
            );
        }
        self.sync_watches();
        self.refresh();
        Ok(())
    }

    fn run(mut self, rx: Receiver<Event>) -> Result<(), Error> {
        let mut shutdown: Option<Instant> = None;
        loop {
            let now = Instant::now();
            self.health.beat();
            self.notifier.ping_if_due(now);
            if shutdown.is_none() {
                if self.reload_at.is_some_and(|at| at <= now) {
                    self.reload_at = None;
                    self.reload(false);
                }
                self.report_drift(now);
                self.start_due(now);
            }
            let running: Vec<String> =
                self.instances.values().filter(|i| i.running).map(|i| i.label.clone()).collect();
            if let Some(deadline) = shutdown {
                if running.is_empty() {
                    tracing::info!("shut down: no run in flight");
                    self.notifier.stopping("stopped");
                    return Ok(());
                }
                if now >= deadline {
                    self.notifier.stopping("stopping: grace period over");
                    return Err(Error::ShutdownTimeout { instances: running, grace: self.opts.grace });
                }
            }
            let wake = self.next_wake(shutdown);
            let event = match wake {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(ev) => ev,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
                },
                None => rx.recv().expect("the loop holds a sender"),
            };
            match event {
                Event::Done { file, report, digests } => self.finished(&file, report, digests),
                Event::DriftReady => {
                    self.drain_drift();
                    self.drift.ack();
                }
                Event::Reverted { instance, root, path } => self.reverted(&instance, &root, &path),
                Event::Loaded(batch) => {
                    let last = batch.last;
                    if last {
                        self.loading = false;
                    }
                    if batch.initial {
                        self.apply_initial(batch)?;
                    } else {
                        self.apply_loaded(batch);
                    }
                    if last
                        && let Some(force) = self.reload_queued.take()
                        && shutdown.is_none()
                    {
                        self.reload(force);
                    }
                }
                Event::Watch(change) => self.changed(change),
                Event::Signal(SIGHUP) if shutdown.is_none() => {
                    tracing::info!("SIGHUP: reloading every manifest");
                    self.reload(true);
                }
                Event::Signal(SIGHUP) => {}
                Event::Signal(sig) => {
                    if shutdown.is_none() {
                        let n = self.instances.values().filter(|i| i.running).count();
                        let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                        tracing::info!(
                            "{name}: no new runs; waiting up to {} for {n} in-flight run(s)",
                            humantime::format_duration(self.opts.grace)
                        );
                        self.notifier.stopping(&format!("stopping: {n} run(s) in flight"));
                        shutdown = Some(Instant::now() + self.opts.grace);
                    }
                }
            }
        }
    }

    /// The earliest of: a due run (while a run may start), a pending
    /// reload, a watchdog ping, the next heartbeat, the end of the grace
    /// period.
    fn next_wake(&self, shutdown: Option<Instant>) -> Option<Instant> {
        let mut wake = Some(Instant::now() + HEARTBEAT);
        let ping = self.notifier.next_ping();
        let (proven, unproven) = self.running_by_standing();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        consider(ping);
        match shutdown {
            Some(deadline) => consider(Some(deadline)),
            None => {
                consider(self.reload_at);
                for inst in self.instances.values() {
                    consider(inst.drift.report_at(&inst.drift_config()));
                    let may_start = fair::may_start(inst.standing, proven, unproven, self.opts.max_runs);
                    if may_start && !inst.running && inst.loaded.is_some() {
                        consider(inst.due.map(|(t, _)| t));
                    }
                }
            }
        }
        wake
    }

    /// How many runs are in flight.
    fn running(&self) -> usize {
        self.instances.values().filter(|i| i.running).count()
    }

    /// The runs in flight of proven and of unproven instances (`fair.rs`).
    fn running_by_standing(&self) -> (usize, usize) {
        let running = self.instances.values().filter(|i| i.running);
        running.fold((0, 0), |(p, u), i| match i.standing {
            fair::Standing::Proven => (p + 1, u),
            fair::Standing::Unproven => (p, u + 1),
        })
    }

    /// Start loaded, idle instances whose time has come while fewer than
    /// `max_runs` runs are in flight, as `fair.rs` decides: proven
    /// instances first, and never the slots kept for them to the others;
    /// the rest wait for a run to finish.
    fn start_due(&mut self, now: Instant) {
        if self.running() >= self.opts.max_runs {
            return;
        }
        let due: Vec<fair::Due<PathBuf>> = self
            .instances
            .values()
            .filter(|i| !i.running && i.loaded.is_some())
            .filter_map(|i| {
                let (at, _) = i.due.filter(|(t, _)| *t <= now)?;
                Some(fair::Due { at, standing: i.standing, key: i.file.clone() })
            })
            .collect();
        let (proven, unproven) = self.running_by_standing();
        for file in fair::pick(due, proven, unproven, self.opts.max_runs) {
            self.start_run(&file);
        }
    }

    /// A plugin on Winch's code (a first start) moves to Cranelift's once
    /// the background compile stored it (runtime/upgrade.rs). `/status` says
    /// so before the log does, so whoever reads the log line and then asks
    /// `/status` sees the same compiler.
    fn take_upgrade(&mut self, file: &Path) {
        let Some(inst) = self.instances.get_mut(file) else { return };
        let Some(l) = &inst.loaded else { return };
        let Some(plugin) = self.runtime.upgraded(&inst.label, &l.plugin) else { return };
        let (label, sha256) = (inst.label.clone(), plugin.sha256.clone());
        inst.loaded = Some(Arc::new(Loaded { spec: l.spec.clone(), plugin }));
        self.refresh();
        tracing::info!(instance = %label, sha256 = %sha256, "now running Cranelift's code");
    }

    fn start_run(&mut self, file: &Path) {
        self.take_upgrade(file);
        let Some(inst) = self.instances.get_mut(file) else { return };
        // A plugin named by an OCI tag: on its interval the tag is resolved
        // again first, on the loader thread (a new digest that verifies is
        // swapped in, anything else keeps the last good version); the run
        // follows when that is back. Skipped while another batch loads.
        if inst.due.is_some_and(|(_, t)| t == Trigger::Interval)
            && inst.follows_tag()
            && !std::mem::take(&mut inst.tag_checked)
            && !self.loading
        {
            inst.due = None;
            inst.loading = true;
            self.dispatch(vec![file.to_path_buf()], false, false, true);
            return;
        }
        let (Some(loaded), Some((_, trigger))) = (inst.loaded.clone(), inst.due.take()) else { return };
        inst.running = true;
        let started = Instant::now();
        inst.run_started = Some((started, trigger));
        if trigger == Trigger::Drift {
            inst.drift.last_drift_run = Some(started);
        }
        self.metrics.triggered(&inst.label, trigger.label());
        let tx = self.tx.clone();
        let file_owned = file.to_path_buf();
        let name = loaded.spec.manifest.name.clone();
        let log_rate = inst.log_rate.clone();
        let actions = if !loaded.spec.manifest.hooks.needs_ledger() {
            None
        } else {
            let (opts, metrics, health) = (&self.opts, &self.metrics, &self.health);
            let schedule = loaded.spec.schedule;
            // A ledger that could not be opened (a corrupt line, a state
            // dir not writable yet) is not kept: each run tries again, so
            // the instance recovers by itself (at its back-off) once the
            // cause is gone. An opened one, with its action thread, stays.
            match self.actions.get(&name) {
                Some(a) if a.is_ok() => Some(a.clone()),
                _ => {
                    let tx = self.tx.clone();
                    let a = Arc::new(start_actions(opts, metrics, health, tx, &name, schedule));
                    self.actions.insert(name.clone(), a.clone());
                    Some(a)
                }
            }
        };
        let spawned = spawn_traced(format!("run {name}"), move || {
            let span = tracing::info_span!("run", instance = %name);
            let _enter = span.enter();
            tracing::debug!(trigger = trigger.label(), "run started");
            let report = run_instance(&loaded, Some(log_rate), actions.as_deref());
            log_report(&report);
            // The digests of the roots it changed, read here (not in the
            // loop, which must keep turning); none for a run that changed
            // nothing, so an unchanged resync costs what it did.
            let digests = changed_roots(&report)
                .into_iter()
                .filter_map(|root| {
                    let path = &loaded.spec.manifest.roots.get(&root)?.path;
                    let digest = status::root_digest(path).unwrap_or_else(|e| format!("none: {e}"));
                    Some((root, digest))
                })
                .collect();
            // The loop may be gone at shutdown after the grace period.
            let _ = tx.send(Event::Done { file: file_owned, report, digests });
        });
        if let Err(e) = spawned {
            tracing::error!(instance = %inst.label, "cannot start a run thread: {e}");
            inst.running = false;
            inst.failures = inst.failures.saturating_add(1);
            let wait = inst
                .loaded
                .as_ref()
                .map_or(config::DEFAULT_BACKOFF_MIN, |l| l.spec.schedule.backoff(inst.failures));
            inst.due = Some((Instant::now() + wait, Trigger::Retry));
        }
    }

    /// A run ended: the instance's state and the published state first,
    /// its counters last, so whoever reads a run's counter finds `/readyz`
    /// already saying how that run ended.
    fn finished(&mut self, file: &Path, report: RunReport, digests: BTreeMap<String, String>) {
        // Every event of the run's own system calls is in the drift queue
        // by now (they returned before `Done` was sent): drained while the
        // instance still counts as running, each is a run-window event.
        self.drain_drift();
        let Some(inst) = self.instances.get_mut(file) else { return };
        let label = inst.label.clone();
        let (dropped, dropped_bytes) = inst.log_rate.take_dropped();
        if dropped > 0 {
            tracing::warn!(
                instance = %label,
                "{dropped} log messages ({dropped_bytes} bytes) were dropped over the instance's log rate limit"
            );
        }
        self.settle(file, &report, digests);
        self.metrics.log_dropped(&label, dropped);
        if let Some(by) = &report.rejected_by {
            self.metrics.rejected(&report.instance, by);
        }
        self.metrics.run_finished(
            &report.instance,
            report.result,
            report.elapsed.as_secs_f64(),
            report.operations.iter().map(|o| (o.outcome.as_str(), o.written, o.removed, o.bytes)),
        );
    }

    /// The instance's state after a run, and the published state.
    fn settle(&mut self, file: &Path, report: &RunReport, digests: BTreeMap<String, String>) {
        let Some(inst) = self.instances.get_mut(file) else { return };
        inst.running = false;
        inst.runs += 1;
        let ended = std::time::SystemTime::now();
        let trigger = inst.run_started.map_or("start", |(_, t)| t.label());
        inst.last_run = Some(status::RunStatus {
            at: status::rfc3339(ended),
            trigger: trigger.to_owned(),
            result: report.result.label().to_owned(),
            elapsed_ms: report.elapsed.as_secs_f64() * 1000.0,
            operations: report.operations_summary(),
            message: status::bounded(&report.message),
        });
        if !digests.is_empty() {
            let mut roots = inst.last_commit.take().map(|c| c.roots).unwrap_or_default();
            roots.extend(digests);
            inst.last_commit = Some(status::CommitStatus { at: status::rfc3339(ended), roots });
        }
        if matches!(report.result, super::RunResult::Rejected | super::RunResult::Refused) {
            inst.last_refusal = Some(status::Refusal {
                at: status::rfc3339(ended),
                by: report.rejected_by.clone().unwrap_or_else(|| "policy".to_owned()),
                message: status::bounded(&report.message),
            });
        }
        if inst.removed {
            self.drift.arm(file, &BTreeMap::new());
            tracing::info!(instance = %inst.label, "stopped: its manifest was removed");
            if let Some(l) = &inst.loaded {
                self.metrics.unloaded(&inst.label, Version::of(&l.plugin));
            }
            self.instances.remove(file);
            self.refresh();
            return;
        }
        let now = Instant::now();
        let schedule = inst.loaded.as_ref().map(|l| l.spec.schedule).unwrap_or_default();
        let timeout = inst
            .loaded
            .as_ref()
            .map_or(Duration::MAX, |l| Duration::from_millis(l.spec.manifest.limits.timeout_ms));
        inst.standing = fair::Standing::after_run(report.ok(), report.elapsed, timeout);
        if report.ok() {
            if inst.failures > 0 {
                tracing::info!(instance = %inst.label, "recovered after {} failed run(s)", inst.failures);
            }
            inst.failures = 0;
            inst.last_error = None;
            inst.due = Some((now + schedule.interval, Trigger::Interval));
            // A success that started after the drift was reported wrote the
            // plugin's desired state back.
            if let (Some(seen), Some((started, _))) = (inst.drift.unrepaired, inst.run_started)
                && started >= seen
            {
                inst.drift.unrepaired = None;
            }
        } else {
            inst.failures = inst.failures.saturating_add(1);
            inst.last_error = Some(report.message.clone());
            let wait = schedule.backoff(inst.failures);
            tracing::info!(
                instance = %inst.label,
                "retrying in {} (failure {} in a row)",
                humantime::format_duration(wait),
                inst.failures
            );
            inst.due = Some((now + wait, Trigger::Retry));
        }
        if let Some(trigger) = inst.rerun.take() {
            inst.due = Some((now, trigger));
        }
        self.after_run_drift(file, report);
        if !report.ok() || self.watches_incomplete {
            self.sync_watches();
        }
        self.refresh();
    }

    /// `instance`'s prober reverted `root:path`: what the drift queue holds
    /// of that target is the revert's own doing (its exchange, and the
    /// failed tree's removal through the old watch), and the watch is armed
    /// again on the tree now live.
    fn reverted(&mut self, instance: &str, root: &str, path: &str) {
        self.drain_drift();
        let Some((file, inst)) = self.instances.iter_mut().find(|(_, i)| i.label == instance) else { return };
        let Some(root_dir) = inst.loaded.as_ref().and_then(|l| l.spec.manifest.roots.get(root)) else {
            return;
        };
        let target =
            if path.is_empty() || path == "." { root_dir.path.clone() } else { root_dir.path.join(path) };
        inst.drift.forget_under(&target);
        let file = file.clone();
        if !inst.running {
            self.arm_drift(&file);
        }
    }

    /// Read the drift queue and hand each event to its instance.
    fn drain_drift(&mut self) {
        let now = Instant::now();
        for seen in self.drift.drain() {
            match seen {
                Seen::Path { instance, target, path } => {
                    if let Some(inst) = self.instances.get_mut(&instance)
                        && inst.drift_config().mode != DriftMode::Off
                    {
                        inst.drift.seen(target, path, inst.running, now);
                    }
                }
                Seen::Overflow => {
                    tracing::warn!(
                        "the drift watch's queue overflowed: every watched target counts as changed"
                    );
                    for inst in self.instances.values_mut() {
                        if inst.drift_config().mode != DriftMode::Off && !inst.drift.targets.is_empty() {
                            inst.drift.overflowed(inst.running, now);
                        }
                    }
                }
            }
        }
    }

    /// After a run: the targets it wrote, what came during it (kept only
    /// for targets it did not change), and its watches armed again on the
    /// paths (an exchange moved the watched inodes aside).
    fn after_run_drift(&mut self, file: &Path, report: &RunReport) {
        let Some(inst) = self.instances.get_mut(file) else { return };
        let Some(loaded) = inst.loaded.clone() else { return };
        if loaded.spec.drift.mode == DriftMode::Off {
            inst.drift.targets.clear();
            inst.drift.clear_pending();
            self.drift.arm(file, &BTreeMap::new());
            return;
        }
        let changed = drift::apply_run(&loaded.spec.manifest, &report.operations, &mut inst.drift.targets);
        inst.drift.run_ended(&changed, Instant::now());
        self.arm_drift(file);
    }

    /// Arm `file`'s drift watch on its targets now.
    fn arm_drift(&mut self, file: &Path) {
        let Some(inst) = self.instances.get_mut(file) else { return };
        let missed = self.drift.arm(file, &inst.drift.targets);
        if missed > 0 && inst.drift.unwatched == 0 {
            tracing::warn!(
                instance = %inst.label,
                "{missed} directories of its targets are not watched for drift (over {} per instance, or refused by the kernel); \
                 changes there are seen at its next run",
                drift::MAX_WATCHED_DIRS
            );
        }
        inst.drift.unwatched = missed;
        if !inst.drift.targets.is_empty() {
            self.metrics.drift_watched(&inst.label);
        }
    }

    /// Report the drift whose time has come; repair it (run the instance,
    /// at most once per `min_gap`) or, for `report`, arm the watch again
    /// (a directory someone created is watched from now on).
    fn report_drift(&mut self, now: Instant) {
        let files: Vec<PathBuf> = self
            .instances
            .values()
            .filter(|i| i.drift.report_at(&i.drift_config()).is_some_and(|t| t <= now))
            .map(|i| i.file.clone())
            .collect();
        for file in &files {
            let Some(inst) = self.instances.get_mut(file) else { continue };
            let cfg = inst.drift_config();
            let Some((paths, more)) = inst.drift.take_due(&cfg, now) else { continue };
            let list = drift::list_paths(&paths, more);
            let label = inst.label.clone();
            match cfg.mode {
                DriftMode::Repair => {
                    tracing::warn!(instance = %label, "drift: changed by something other than durasync, repairing: {list}");
                    let at = inst.drift.last_drift_run.map_or(now, |t| (t + cfg.min_gap).max(now));
                    if inst.running {
                        inst.rerun = Some(Trigger::Drift);
                    } else if inst.due.is_none_or(|(t, _)| t > at) {
                        inst.due = Some((at, Trigger::Drift));
                    }
                }
                DriftMode::Report => {
                    tracing::warn!(instance = %label, "drift: changed by something other than durasync (reported only): {list}");
                    if !inst.running {
                        self.arm_drift(file);
                    }
                }
                DriftMode::Off => {}
            }
            self.metrics.drift_seen(&label);
        }
        if !files.is_empty() {
            self.refresh();
        }
    }

    /// An inotify event: a manifest changed (reload soon) or an input file
    /// was replaced (run its instances now).
    fn changed(&mut self, change: Change) {
        match change {
            Change::Overflow => {
                tracing::warn!("inotify queue overflowed: reloading and running every instance");
                self.reload_at = Some(Instant::now());
                let files: Vec<PathBuf> = self.instances.keys().cloned().collect();
                for f in files {
                    self.trigger(&f, Trigger::Input);
                }
            }
            Change::Gone { wd } => {
                if let Some(dir) = self.watcher.dir_of(wd) {
                    tracing::warn!("{} is no longer watched (removed or unmounted)", dir.display());
                }
                self.watcher.forget(wd);
                self.watches_incomplete = true;
            }
            Change::Entry { wd, name, complete } => {
                let Some(dir) = self.watcher.dir_of(wd).map(Path::to_path_buf) else { return };
                // Any entry of the config directory, not only `*.toml`: a
                // manifest may be a symlink through another entry, as in
                // kubelet's ConfigMap volume (`a.toml -> ..data/a.toml`,
                // `..data -> ..<timestamp>`, an update renaming a new
                // `..data` over the old). A reload only loads manifests
                // whose text changed, so an unrelated entry costs a read.
                if dir == self.opts.config_dir {
                    self.reload_at = Some(Instant::now() + CONFIG_SETTLE);
                }
                if !complete {
                    return;
                }
                // `..data` is what Kubernetes' atomic writer swaps for a
                // mounted ConfigMap or Secret.
                let path = dir.join(&name);
                let hits: Vec<PathBuf> = self
                    .instances
                    .values()
                    .filter(|i| {
                        i.input_file()
                            .is_some_and(|p| p == path || (p.parent() == Some(&dir) && name == "..data"))
                    })
                    .map(|i| i.file.clone())
                    .collect();
                for f in hits {
                    self.trigger(&f, Trigger::Input);
                }
            }
        }
    }

    /// Run now, or right after the run in flight.
    fn trigger(&mut self, file: &Path, trigger: Trigger) {
        let Some(inst) = self.instances.get_mut(file) else { return };
        if inst.loaded.is_none() {
            return;
        }
        if inst.running {
            inst.rerun = Some(trigger);
        } else {
            tracing::debug!(instance = %inst.label, "{} changed", trigger.label());
            inst.due = Some((Instant::now(), trigger));
        }
    }
}

/// The roots in which `report`'s operations changed something.
fn changed_roots(report: &RunReport) -> BTreeSet<String> {
    use crate::services::Ended;
    report
        .operations
        .iter()
        .filter(|o| matches!(o.outcome, Ended::Created | Ended::Replaced | Ended::Removed | Ended::Exchanged))
        .map(|o| o.root.clone())
        .collect()
}

/// Open an instance's ledger of owed actions and start its action thread
/// (retries back off like its runs).
fn start_actions(
    opts: &AgentSettings,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    tx: SyncSender<Event>,
    name: &str,
    schedule: config::Schedule,
) -> super::Actions {
    struct Observe {
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        instance: String,
    }
    impl Observer for Observe {
        fn finished(&self, action: &str, result: &str, problem: Option<&str>) {
            // `/readyz` first, then the counter (as for runs: whoever reads
            // the counter finds `/readyz` already saying how it ended).
            self.health.set_action_problem(&self.instance, action, problem);
            self.metrics.action_finished(&self.instance, action, result);
        }
        fn dropped(&self, action: &str) {
            self.health.set_action_problem(&self.instance, action, None);
        }
        fn owed(&self, n: usize) {
            self.metrics.set_actions_owed(&self.instance, n);
        }
    }
    let ledger = Arc::new(Ledger::open(&opts.state_dir.join("actions"), name).map_err(|e| e.to_string())?);
    let observer =
        Arc::new(Observe { metrics: metrics.clone(), health: health.clone(), instance: name.to_owned() });
    let retry = (schedule.backoff_min, schedule.backoff_max);
    let runner = Runner::start(name, ledger.clone(), retry, observer)
        .map_err(|e| format!("cannot start the action thread: {e}"))?;
    let observer = Arc::new(ObserveProbes {
        metrics: metrics.clone(),
        health: health.clone(),
        instance: name.to_owned(),
        tx,
    });
    metrics.set_probations_open(name, ledger.probations().len());
    let prober = Prober::start(name, ledger.clone(), runner.clone(), observer)
        .map_err(|e| format!("cannot start the probing thread: {e}"))?;
    Ok((ledger, runner, prober))
}

/// A prober's news: metrics, `/readyz`, (in the prober) the log, and to
/// the loop a revert, so its drift watch knows the change for its own.
struct ObserveProbes {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    instance: String,
    tx: SyncSender<Event>,
}

impl ProbeObserver for ObserveProbes {
    fn attempted(&self, _rec: &ProbationRecord, result: Result<(), &str>) {
        self.metrics.probe_attempted(&self.instance, if result.is_ok() { "ok" } else { "failed" });
    }
    fn passed(&self, _rec: &ProbationRecord) {
        self.metrics.probation_ended(&self.instance, "passed");
    }
    fn reverted(&self, rec: &ProbationRecord, reverted: bool, _problem: &str) {
        if reverted {
            // Called right after the revert's commit: its events are in
            // the drift queue already, and the loop (which never waits on
            // a prober) drops them before they settle into a report.
            let _ = self.tx.send(Event::Reverted {
                instance: self.instance.clone(),
                root: rec.root.clone(),
                path: rec.path.clone(),
            });
        }
        self.metrics.probation_ended(&self.instance, if reverted { "reverted" } else { "failed" });
    }
    fn revert_failed(&self, _rec: &ProbationRecord, _error: &str) {
        self.metrics.probation_ended(&self.instance, "revert_failed");
    }
    fn state(&self, problem: Option<String>, open: usize) {
        // `/readyz` first, then the gauge (as for runs).
        self.health.set_probation_problem(&self.instance, problem.as_deref());
        self.metrics.set_probations_open(&self.instance, open);
    }
}

/// A random delay in `[0, max)`, from the kernel's random source.
fn jitter(max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    let mut bytes = [0u8; 8];
    match rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => Duration::from_nanos(u64::from_ne_bytes(bytes) % nanos),
        _ => Duration::ZERO,
    }
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_below_its_bound_and_is_zero_for_zero() {
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        let max = Duration::from_millis(10);
        let draws: Vec<Duration> = (0..100).map(|_| jitter(max)).collect();
        assert!(draws.iter().all(|d| *d < max));
        assert!(draws.iter().any(|d| *d != draws[0]), "random, not constant");
    }
}
