//! The `durasync` command line: parse, call the library, print, exit.

pub mod agent;
pub mod doctor;
pub mod exit;
pub mod native;
pub mod plugin;
pub mod registry;
pub mod status;
pub mod testing;

use clap::{Parser, Subcommand};
use durasync::runtime::PLUGIN_LOG_TARGET;

/// Atomic, crash-durable directory and file updates.
#[derive(Debug, Parser)]
#[command(name = "durasync", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Make a directory hold exactly the files of another, atomically and durably.
    Sync(native::SyncArgs),
    /// Replace one file atomically and durably.
    Write(native::WriteArgs),
    /// Put back a target's previous contents, kept by `sync`/`write --keep-previous`.
    Rollback(native::RollbackArgs),
    /// Remove durasync leftovers (staging, temporary files) after a crash.
    Recover(native::RecoverArgs),
    /// Run a sandboxed plugin once, as its manifest grants.
    Run(plugin::RunArgs),
    /// Precompile plugins into the cache ahead of time (e.g. at package install).
    Compile(plugin::CompileArgs),
    /// Show a plugin's sha256, WIT version, imports, exports, policy verdict and `describe`.
    Inspect(plugin::InspectArgs),
    /// Fetch a plugin from an OCI registry into the cache; print its digests; verify with --key.
    Pull(registry::PullArgs),
    /// Publish a component to an OCI registry (the CNCF wasm artifact layout).
    Push(registry::PushArgs),
    /// Keep every plugin instance of a config directory in sync, continuously.
    Agent(agent::AgentArgs),
    /// Show what a running agent holds (its `/status`): a table, or `--json`.
    Status(status::StatusArgs),
    /// Check whether a sync works where targets or a manifest's roots are (renameat2, mounts, space, …).
    Doctor(doctor::DoctorArgs),
    /// Serve a plugin's `fs` and `log` calls as JSON lines on stdio (the language shims' test harness).
    Harness(testing::HarnessArgs),
    /// Run a built plugin's golden cases (input, config, starting and expected trees) through the runtime.
    Test(testing::TestArgs),
    /// (internal) Compile the component on stdin into a cache artifact: the agent's compile child.
    #[command(name = plugin::COMPILE_CHILD, hide = true)]
    CompileChild(plugin::CompileChildArgs),
}

/// How the process logs (to standard error; `DURASYNC_LOG` overrides the
/// filter): the agent at `info`; `run` and `test` at `warn` but the
/// plugin's own messages (target [`PLUGIN_LOG_TARGET`]) at `info`, as the
/// guide promises them to the operator; every other command at `warn`. The
/// agent's `--log-format json` makes every line a JSON object, those of
/// the runtime's own threads too.
pub struct LogSettings {
    /// The filter when `DURASYNC_LOG` is not set.
    pub default_filter: String,
    /// One JSON object per line.
    pub json: bool,
}

impl Cli {
    /// The log settings of the parsed command.
    pub fn log_settings(&self) -> LogSettings {
        match &self.command {
            Command::Agent(a) => {
                LogSettings { default_filter: "info".into(), json: a.log_format == agent::LogFormat::Json }
            }
            Command::Run(_) | Command::Test(_) => {
                LogSettings { default_filter: format!("warn,{PLUGIN_LOG_TARGET}=info"), json: false }
            }
            _ => LogSettings { default_filter: "warn".into(), json: false },
        }
    }
}

/// Run one parsed command.
pub fn run(cli: &Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Sync(args) => native::sync(args),
        Command::Write(args) => native::write(args),
        Command::Rollback(args) => native::rollback(args),
        Command::Recover(args) => native::recover(args),
        Command::Run(args) => plugin::run(args),
        Command::Compile(args) => plugin::compile(args),
        Command::CompileChild(args) => plugin::compile_child(args),
        Command::Inspect(args) => plugin::inspect(args),
        Command::Pull(args) => registry::pull(args),
        Command::Push(args) => registry::push(args),
        Command::Agent(args) => agent::run(args),
        Command::Status(args) => status::status(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Harness(args) => testing::harness(args),
        Command::Test(args) => testing::test(args),
    }
}
