//! `durasync agent`: run every plugin instance of a config directory,
//! continuously (or once with `--once`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use durasync::agent::{self, Options};
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
    let opts = Options {
        config_dir: args.config_dir.clone(),
        metrics_addr: args.metrics_addr.clone(),
        cache,
        grace: args.grace,
    };
    // The log format and the agent's `info` default are set up by `main`
    // (`Cli::log_settings`), for every thread of the process.
    if args.once { once(&opts) } else { agent::run(&opts).map_err(into_anyhow) }
}

fn once(opts: &Options) -> Result<()> {
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
fn into_anyhow(e: agent::Error) -> anyhow::Error {
    match e {
        agent::Error::Runtime(e) => anyhow::Error::new(e),
        e @ agent::Error::DuplicateName { .. } => {
            anyhow::Error::new(exit::Status(exit::POLICY)).context(e.to_string())
        }
        e => anyhow::Error::new(e),
    }
}
