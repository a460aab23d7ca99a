//! `durasync agent`: run every plugin instance of a config directory,
//! continuously (or once with `--once`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use durasync::agent::{self, AgentSettings};
use durasync::runtime::CacheConfig;

use super::exit;

/// `--once` found at least one instance that failed to load or run.
pub const ONCE_FAILED: u8 = 13;

/// `durasync agent --config-dir DIR`
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The directory of instance manifests (`*.toml`: a `durasync run`
    /// manifest plus `[input]` and `[schedule]`).
    #[arg(long, value_name = "DIR")]
    pub config_dir: PathBuf,
    /// Serve `/metrics`, `/healthz` and `/readyz` on ADDR (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Run every instance once, print one line each, exit non-zero (13) if any failed.
    #[arg(long)]
    pub once: bool,
    /// Log lines as text or as one JSON object each (for collectors).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// How long in-flight runs may take to finish after SIGTERM/SIGINT.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Where compiled plugins are cached (default `$XDG_CACHE_HOME/durasync`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile plugins at every load; never read or write the cache.
    #[arg(long, conflicts_with = "cache_dir")]
    pub no_cache: bool,
    /// Most plugin runs in flight at once; due instances wait for a slot.
    #[arg(long, value_name = "N", default_value_t = agent::DEFAULT_MAX_RUNS as u16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_concurrent_runs: u16,
    /// Spread the first runs at start over a random delay below this (0s: none).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub start_jitter: Duration,
    /// Bytes of log messages each instance's plugin may send at once.
    #[arg(long, value_name = "BYTES", default_value_t = durasync::services::log_rate::DEFAULT_LOG_BURST_BYTES)]
    pub log_burst_bytes: u64,
    /// Bytes of log messages a second each instance's plugin may send on average.
    #[arg(long, value_name = "BYTES", default_value_t = durasync::services::log_rate::DEFAULT_LOG_RATE_BYTES_PER_SEC)]
    pub log_rate_bytes: u64,
    #[command(flatten)]
    pub tls: super::registry::TlsArgs,
    /// How every instance's syncs make their staged trees durable, over the
    /// manifests' own `flush`: `auto` (syncfs or per-file fsync, chosen per
    /// batch), `fsync`, `syncfs`. Unset: each manifest's `flush`, else `auto`.
    #[arg(long, value_name = "auto|fsync|syncfs")]
    pub flush: Option<durasync::durable::Flush>,
    /// Where the ledgers of owed actions are kept (`actions/<instance>.owed`):
    /// an action owed when the agent stopped runs after its next start.
    #[arg(long, value_name = "DIR", default_value = agent::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

pub fn run(args: &AgentArgs) -> Result<()> {
    let cache = if args.no_cache {
        CacheConfig::Disabled
    } else {
        args.cache_dir.clone().map_or(CacheConfig::Default, CacheConfig::Dir)
    };
    let opts = AgentSettings {
        metrics_addr: args.metrics_addr.clone(),
        cache,
        grace: args.grace,
        max_runs: usize::from(args.max_concurrent_runs),
        start_jitter: args.start_jitter,
        log_burst_bytes: args.log_burst_bytes,
        log_rate_bytes: args.log_rate_bytes,
        registry: args.tls.apply(Default::default())?,
        flush: args.flush,
        state_dir: args.state_dir.clone(),
        // A compile's memory leaves with a child of this binary.
        compiler: Some(durasync::runtime::compiler::OutOfProcess::this_binary(super::plugin::COMPILE_CHILD)),
        ..AgentSettings::new(args.config_dir.clone())
    };
    // The log format and the agent's `info` default are set up by `main`
    // (`Cli::log_settings`), for every thread of the process.
    if args.once { once(&opts) } else { agent::run(&opts).map_err(into_anyhow) }
}

fn once(opts: &AgentSettings) -> Result<()> {
    let summaries = agent::run_once(opts).map_err(into_anyhow)?;
    let failed = summaries.iter().filter(|s| !s.ok()).count();
    for s in &summaries {
        println!("{}", s.line());
    }
    if failed > 0 {
        return Err(anyhow::Error::new(exit::Status(ONCE_FAILED)))
            .context(format!("{failed} of {} instances failed", summaries.len()));
    }
    Ok(())
}

/// The agent's error, carrying its exit status: a runtime error maps as
/// for `run`, duplicate names are a refusal (12), the rest I/O (1).
pub(super) fn into_anyhow(e: agent::Error) -> anyhow::Error {
    match e {
        agent::Error::Runtime(e) => anyhow::Error::new(e),
        e @ agent::Error::DuplicateName { .. } => {
            anyhow::Error::new(exit::Status(exit::POLICY)).context(e.to_string())
        }
        e => anyhow::Error::new(e),
    }
}
