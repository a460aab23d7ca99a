//! `durasync agent`: a node's plugins from one config directory, kept in
//! sync continuously.
//!
//! Every `*.toml` in the directory is one instance: a `durasync run`
//! manifest plus `[input]` and `[schedule]` ([`config`]). The agent holds one
//! warm [`Runtime`] (one engine, the shared precompile cache) and runs each
//! instance in its own thread with a fresh `Store` per run, on these
//! triggers: start, the resync interval, a change of the input file (inotify
//! on its directory, so `kubectl … > tmp && mv tmp file` is seen), a change
//! in the config directory, and SIGHUP.
//!
//! What it guarantees:
//! - Isolation: one instance's trap, timeout, refusal or failing input never
//!   stops or delays another beyond the shared CPU; a failing instance backs
//!   off (exponential, capped) and recovers by itself.
//! - Reloads keep the last good version: a changed manifest that does not
//!   parse, fails its sha256 pin or the policy leaves the previous version
//!   running, and is reported (log, `/readyz`, `reload_failures`).
//! - Shutdown (SIGTERM/SIGINT) stops scheduling and lets in-flight runs
//!   finish within a grace period. A kill at any instant leaves every target
//!   old-or-new: that is the durable core's guarantee, the agent adds none.
//!
//! What it does not do: watch the component file itself (a new component
//! comes with a new pinned sha256, that is a manifest change), or order runs
//! across instances.

pub mod config;
mod daemon;
mod drift;
pub mod health;
mod http;
pub mod input;
mod instance;
pub mod metrics;
mod notify;
mod reload;
pub mod status;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::durable::Flush;
use crate::hooks::actions::{Batch, Runner};
use crate::hooks::probation::{ProbeBatch, Prober};
use crate::hooks::{Ledger, RunHooks};
use crate::runtime::{self, CacheConfig, ErrorKind, Operation, Plugin, RunRequest, Runtime};
use crate::services::{Ended, LogRate};

pub use config::{Drift, DriftMode, Input, Schedule, Spec};
pub use daemon::run;
pub use metrics::RunResult;

/// How the agent is started.
#[derive(Debug, Clone)]
pub struct Options {
    /// The directory of instance manifests.
    pub config_dir: PathBuf,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (none: off).
    pub metrics_addr: Option<String>,
    /// The precompile cache.
    pub cache: CacheConfig,
    /// How long in-flight runs may take to finish after SIGTERM/SIGINT.
    pub grace: Duration,
    /// Most runs in flight at once (each may use up to
    /// [`MAX_THREADS_PER_RUN`] threads); due instances wait for a free slot.
    pub max_runs: usize,
    /// The first runs at start are spread over `[0, start_jitter)`.
    pub start_jitter: Duration,
    /// Each instance's plugin may log this many bytes at once ([`LogRate`]).
    pub log_burst_bytes: u64,
    /// … and this many bytes a second on average.
    pub log_rate_bytes: u64,
    /// How registries are reached for `oci://` plugins (extra CA files,
    /// insecure hosts, mirrors, limits); the blob cache is always the
    /// compile cache's.
    pub registry: runtime::distribution::Settings,
    /// How instances whose manifest has no `flush` make staged trees durable.
    pub flush: Flush,
    /// Where the ledgers of owed actions live (`actions/<instance>.owed`).
    pub state_dir: PathBuf,
}

/// The default of [`Options::state_dir`].
pub const DEFAULT_STATE_DIR: &str = "/var/lib/durasync";

/// The default of [`Options::max_runs`]: enough to keep a small node's cores
/// busy while one run waits on its disk, few enough that a burst of
/// triggers (start, an inotify overflow) cannot start every instance at
/// once.
pub const DEFAULT_MAX_RUNS: usize = 4;

/// The most threads one run may use: its own, the deadline watchdog, the
/// core's writers ([`crate::durable::DEFAULT_THREADS`]) or its removers (as
/// many), its comparers (4) and an input command's two pipe readers. With
/// [`Options::max_runs`] runs in flight the agent's threads are bounded by
/// `max_runs` times this, plus a handful of its own.
pub const MAX_THREADS_PER_RUN: usize = 2 + crate::durable::DEFAULT_THREADS + 4 + 2;

impl Options {
    /// Options for `config_dir` with every other setting at its default.
    pub fn new(config_dir: PathBuf) -> Options {
        Options {
            config_dir,
            metrics_addr: None,
            cache: CacheConfig::Default,
            grace: Duration::from_secs(30),
            max_runs: DEFAULT_MAX_RUNS,
            start_jitter: Duration::from_secs(1),
            log_burst_bytes: crate::services::log_rate::DEFAULT_LOG_BURST_BYTES,
            log_rate_bytes: crate::services::log_rate::DEFAULT_LOG_RATE_BYTES_PER_SEC,
            registry: runtime::distribution::Settings::default(),
            flush: Flush::Auto,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
        }
    }
}

/// Everything the agent can fail with as a whole (one instance's failures
/// are reported, never returned).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config directory is missing, not a directory or unreadable.
    #[error("config directory {dir}: {source}")]
    ConfigDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// More manifests than [`config::MAX_INSTANCES`].
    #[error("config directory {dir} holds more than {max} manifests")]
    TooManyInstances {
        /// The directory.
        dir: PathBuf,
        /// The limit.
        max: usize,
    },
    /// Two manifests name the same plugin.
    #[error("plugin name `{name}` is used by {}; each instance needs its own name", list(.files))]
    DuplicateName {
        /// The shared name.
        name: String,
        /// Every file that uses it.
        files: Vec<PathBuf>,
    },
    /// A manifest or plugin error (loading, or the runtime itself).
    #[error(transparent)]
    Runtime(runtime::Error),
    /// Loading a manifest panicked (a bug, or input nothing else refused):
    /// that instance's load error; the other instances load as usual.
    #[error("loading {}: the loader panicked: {reason}", .file.display())]
    LoadPanic {
        /// The manifest.
        file: PathBuf,
        /// The panic's message.
        reason: String,
    },
    /// Serving metrics failed to start.
    #[error("serving metrics on {addr}: {reason}")]
    Serve {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// Signal handling or inotify could not be set up.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// Runs were still in flight when the shutdown grace period ended.
    #[error("shutdown: {} still running after the grace period of {}", list_names(.instances), humantime::format_duration(*.grace))]
    ShutdownTimeout {
        /// The instances.
        instances: Vec<String>,
        /// The grace period.
        grace: Duration,
    },
}

fn list(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    names.join(" and ")
}

fn list_names(names: &[String]) -> String {
    names.join(", ")
}

impl Error {
    /// The class of failure, for the CLI's exit status: duplicate names and
    /// manifest errors are refusals ([`ErrorKind::Policy`]), the rest I/O.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::DuplicateName { .. } => ErrorKind::Policy,
            Error::Runtime(e) => e.kind(),
            _ => ErrorKind::Io,
        }
    }
}

/// A loaded instance: its manifest and its linked plugin.
pub struct Loaded {
    /// The parsed manifest.
    pub spec: Spec,
    /// The plugin, ready to instantiate (one fresh `Store` per run).
    pub plugin: Plugin,
}

/// Read, parse and load the manifest at `file` with the shared runtime; a
/// manifest without its own `flush` gets `flush` (the agent's `--flush`).
/// Returns the text that was read (also on failure, when it could be read),
/// so a reload can tell an unchanged file from a changed one.
pub fn load(runtime: &Runtime, file: &Path, flush: Flush) -> (Option<String>, Result<Loaded, Error>) {
    let text = match config::read_manifest(file) {
        Ok(t) => t,
        Err(e) => return (None, Err(e)),
    };
    let loaded = Spec::parse(&text, file).and_then(|mut spec| {
        spec.manifest.flush.get_or_insert(flush);
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
    let mut request = match RunRequest::from_manifest(&loaded.spec.manifest, bytes, false) {
        Ok(r) => r,
        Err(e) => return report(result_of(&e), e.to_string(), Vec::new()),
    };
    request.log_rate = log_rate;
    let manifest = &loaded.spec.manifest;
    let owed = match actions.filter(|_| manifest.hooks.needs_ledger()) {
        None => None,
        Some(Err(e)) => return report(RunResult::IoError, format!("run skipped: {e}"), Vec::new()),
        Some(Ok((ledger, runner, prober))) => {
            let hooks = Arc::new(RunHooks::of(manifest).with_ledger(ledger.clone()));
            request.hooks = Some(hooks.clone());
            Some((hooks, ledger, runner, prober))
        }
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

/// What a one-shot run (`durasync run`, `agent --once`) says of a
/// manifest's probes.
pub const PROBES_SKIPPED: &str = "skipped: probation ([[probe]]): only `durasync agent` probes a change and keeps \
     its previous tree; this run did not wait for a probe, and its changes are live unprobed";

/// One summary per manifest of `--once`, in file order.
#[derive(Debug)]
pub struct OnceSummary {
    /// The manifest.
    pub file: PathBuf,
    /// The run, or why the manifest did not load.
    pub outcome: Result<RunReport, String>,
    /// What the run skipped (its manifest's probes and actions: `--once`
    /// keeps no ledger).
    pub skipped: Vec<String>,
}

impl OnceSummary {
    /// Whether the instance loaded and its run succeeded.
    pub fn ok(&self) -> bool {
        matches!(&self.outcome, Ok(r) if r.ok())
    }

    /// The line `--once` prints.
    pub fn line(&self) -> String {
        let line = match &self.outcome {
            Ok(r) => r.summary_line(),
            Err(e) => format!("failed {}: not loaded: {e}", self.file.display()),
        };
        self.skipped.iter().fold(line, |l, s| format!("{l}; {s}"))
    }
}

/// `--once`: load every manifest, run every loaded instance once (in
/// parallel, one thread each), and return a summary per manifest. A missing
/// or unreadable directory and duplicate names are errors; a manifest that
/// does not load is a failed summary.
pub fn run_once(opts: &Options) -> Result<Vec<OnceSummary>, Error> {
    let files = config::manifest_files(&opts.config_dir)?;
    let mut runtime = Runtime::new(&opts.cache).map_err(Error::Runtime)?;
    runtime.set_registry_settings(opts.registry.clone());
    let mut loaded: Vec<(PathBuf, Result<Arc<Loaded>, String>)> = Vec::new();
    for file in files {
        let (_, result) = load(&runtime, &file, opts.flush);
        let result = result.map(Arc::new).map_err(|e| {
            tracing::error!(file = %file.display(), "not loaded: {e}");
            e.to_string()
        });
        loaded.push((file, result));
    }
    check_duplicates(loaded.iter().filter_map(|(f, l)| l.as_ref().ok().map(|l| (f.as_path(), l))))?;
    // At most `max_runs` at once: a pool of that many threads takes the
    // instances in file order.
    let jobs: Vec<(usize, Arc<Loaded>)> =
        loaded.iter().enumerate().filter_map(|(i, (_, l))| l.as_ref().ok().map(|l| (i, l.clone()))).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let reports: std::sync::Mutex<Vec<Option<Result<RunReport, String>>>> =
        std::sync::Mutex::new((0..loaded.len()).map(|_| None).collect());
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    std::thread::scope(|scope| {
        for _ in 0..opts.max_runs.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                tracing::dispatcher::with_default(&dispatch, || {
                    loop {
                        let Some((i, l)) = jobs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                        else {
                            return;
                        };
                        let span = tracing::info_span!("run", instance = %l.spec.manifest.name);
                        let _enter = span.enter();
                        let rate = Arc::new(LogRate::new(opts.log_burst_bytes, opts.log_rate_bytes));
                        let run = std::panic::AssertUnwindSafe(|| run_instance(l, Some(rate), None));
                        let outcome = std::panic::catch_unwind(run)
                            .map_err(|_| "the run's thread panicked".to_owned())
                            .inspect(log_report);
                        reports.lock().unwrap_or_else(|p| p.into_inner())[*i] = Some(outcome);
                    }
                })
            });
        }
    });
    let mut reports = reports.into_inner().unwrap_or_else(|p| p.into_inner());
    let out = loaded
        .into_iter()
        .enumerate()
        .map(|(i, (file, l))| {
            let skipped = match &l {
                Ok(l) if !l.spec.manifest.hooks.probes.is_empty() => vec![PROBES_SKIPPED.to_owned()],
                _ => Vec::new(),
            };
            let outcome = match l {
                Ok(_) => reports[i].take().unwrap_or_else(|| Err("the run's thread panicked".to_owned())),
                Err(e) => Err(e),
            };
            OnceSummary { file, outcome, skipped }
        })
        .collect();
    Ok(out)
}

fn check_duplicates<'a>(loaded: impl Iterator<Item = (&'a Path, &'a Arc<Loaded>)>) -> Result<(), Error> {
    let names: Vec<(&Path, &str)> = loaded.map(|(f, l)| (f, l.spec.manifest.name.as_str())).collect();
    match config::duplicate_names(names).into_iter().next() {
        Some((name, files)) => Err(Error::DuplicateName { name, files }),
        None => Ok(()),
    }
}

/// Spawn a named thread that logs to the caller's `tracing` dispatcher (the
/// agent may run under a scoped one, e.g. for `--log-format json`).
pub(crate) fn spawn_traced<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    std::thread::Builder::new().name(name).spawn(move || tracing::dispatcher::with_default(&dispatch, f))
}
