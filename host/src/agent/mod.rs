//! `durasync agent`: a node's plugins from one config directory, kept in
//! sync continuously.
//!
//! Every `*.toml` in the directory is one instance: a `durasync run`
//! manifest plus `[input]` and `[schedule]` ([`config`]). The agent holds one
//! warm [`Runtime`](crate::runtime::Runtime) (one engine, the shared precompile cache) and runs each
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
mod error;
mod fair;
pub mod health;
mod http;
pub mod input;
mod instance;
pub mod metrics;
mod notify;
mod once;
mod reload;
mod run;
pub mod status;
mod watch;

use std::path::PathBuf;
use std::time::Duration;

use crate::durable::Flush;
use crate::runtime::{self, CacheConfig};

pub use config::{Drift, DriftMode, Input, Schedule, Spec};
pub use daemon::run;
pub use error::Error;
pub use metrics::RunResult;
pub use once::{OnceSummary, PROBES_SKIPPED, run_once};
pub use run::{Actions, Loaded, RunReport, load, run_instance};
pub(crate) use run::{log_report, pulls_from_registry};

/// How the agent is started.
#[derive(Debug, Clone)]
pub struct AgentSettings {
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
    /// Each instance's plugin may log this many bytes at once ([`LogRate`](crate::services::LogRate)).
    pub log_burst_bytes: u64,
    /// … and this many bytes a second on average.
    pub log_rate_bytes: u64,
    /// How registries are reached for `oci://` plugins (extra CA files,
    /// insecure hosts, mirrors, limits); the blob cache is always the
    /// compile cache's.
    pub registry: runtime::distribution::Settings,
    /// `--flush`: how every instance's syncs make staged trees durable, over
    /// the manifests' own `flush` ([`crate::runtime::Manifest::override_flush`]).
    pub flush: Option<Flush>,
    /// Where the ledgers of owed actions live (`actions/<instance>.owed`).
    pub state_dir: PathBuf,
    /// Where components the cache does not hold are compiled: in a child
    /// process when set (the CLI sets it), so a compile's memory is never
    /// the agent's ([`runtime::compiler`]).
    pub compiler: Option<runtime::compiler::OutOfProcess>,
}

/// The default of [`AgentSettings::state_dir`].
pub const DEFAULT_STATE_DIR: &str = "/var/lib/durasync";

/// The default of [`AgentSettings::max_runs`]: enough to keep a small node's cores
/// busy while one run waits on its disk, few enough that a burst of
/// triggers (start, an inotify overflow) cannot start every instance at
/// once.
pub const DEFAULT_MAX_RUNS: usize = 4;

/// The most threads one run may use: its own, the deadline watchdog, the
/// core's writers ([`crate::durable::DEFAULT_THREADS`]) or its removers (as
/// many), its comparers (4) and an input command's two pipe readers. With
/// [`AgentSettings::max_runs`] runs in flight the agent's threads are bounded by
/// `max_runs` times this, plus a handful of its own.
pub const MAX_THREADS_PER_RUN: usize = 2 + crate::durable::DEFAULT_THREADS + 4 + 2;

impl AgentSettings {
    /// The settings for `config_dir` with every other one at its default.
    pub fn new(config_dir: PathBuf) -> AgentSettings {
        AgentSettings {
            config_dir,
            metrics_addr: None,
            cache: CacheConfig::Default,
            grace: Duration::from_secs(30),
            max_runs: DEFAULT_MAX_RUNS,
            start_jitter: Duration::from_secs(1),
            log_burst_bytes: crate::services::log_rate::DEFAULT_LOG_BURST_BYTES,
            log_rate_bytes: crate::services::log_rate::DEFAULT_LOG_RATE_BYTES_PER_SEC,
            registry: runtime::distribution::Settings::default(),
            flush: None,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            compiler: None,
        }
    }
}
