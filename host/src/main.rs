//! The `durasync` binary: glue over the library. Errors are printed once,
//! as one line with their whole chain, and mapped to documented statuses.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing();
    match cli::run(&cli) {
        Ok(()) => ExitCode::from(cli::exit::OK),
        Err(err) => {
            eprintln!("durasync: {err:#}");
            ExitCode::from(cli::exit::status_of(&err))
        }
    }
}

/// Logs go to standard error; `DURASYNC_LOG` (e.g. `info`, `durasync=debug`)
/// sets the filter, `warn` by default.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DURASYNC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
}
