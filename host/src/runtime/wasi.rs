//! The WASI side of the linker and of each call's context: which WASI
//! interfaces are linked, and the `WasiCtx` a plugin gets. Kept apart from
//! the engine and the call path so the sandbox's WASI surface is one file.

use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtx;

use super::bindings;
use super::capture::Capture;
use super::state::{HasHost, HasIo, State};

/// Exactly the allowlisted imports (see [`super::policy`]): the contract,
/// `wasi:io/*` and `wasi:cli/*`. No filesystem, sockets, clocks, random.
pub(crate) fn add_allowed_imports(l: &mut Linker<State>) -> wasmtime::Result<()> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::p2::bindings::cli;
    use wasmtime_wasi::p2::bindings::sync::io as wasi_io;

    bindings::Plugin::add_to_linker::<State, HasHost>(l, State::host)?;
    wasi_io::error::add_to_linker::<State, HasIo>(l, |s| &mut s.table)?;
    wasi_io::poll::add_to_linker::<State, HasIo>(l, |s| &mut s.table)?;
    wasi_io::streams::add_to_linker::<State, HasIo>(l, |s| &mut s.table)?;
    cli::exit::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::environment::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::stdin::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::stdout::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::stderr::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_input::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_output::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_stdin::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_stdout::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_stderr::add_to_linker::<State, WasiCli>(l, State::cli)?;
    Ok(())
}

/// The context of one call: stdout and stderr go to the capture sinks.
pub(crate) fn call_ctx(stdout: &Capture, stderr: &Capture) -> WasiCtx {
    // No arguments, no environment, no preopens (and no filesystem
    // interface linked at all): stdio is the only thing WASI gives.
    WasiCtx::builder().stdout(stdout.clone()).stderr(stderr.clone()).build()
}
