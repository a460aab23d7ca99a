//! The `durasync` binary: glue over the library. Errors are printed once,
//! as one line with their whole chain, and mapped to documented statuses.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing(&cli.log_settings());
    match cli::run(&cli) {
        Ok(()) => ExitCode::from(cli::exit::OK),
        Err(err) => {
            // Errors carry text a plugin chose (its message, its stderr):
            // control characters escaped, later lines indented.
            eprintln!("durasync: {}", durasync::services::text::escape_lines(&one_line(&err), "  "));
            ExitCode::from(cli::exit::status_of(&err))
        }
    }
}

/// The error chain on one line, each message once: a core error's message
/// already ends with the kernel's error that is also its `source`.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Logs go to standard error; `DURASYNC_LOG` (e.g. `info`, `durasync=debug`)
/// sets the filter, else the command's default (see [`cli::LogSettings`]).
/// Colours only when standard error is a terminal: a file, a pipe or the
/// journal gets plain text.
fn init_tracing(settings: &cli::LogSettings) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("DURASYNC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&settings.default_filter));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    if settings.json {
        fmt.json().with_current_span(true).with_span_list(false).init();
    } else {
        fmt.init();
    }
}
