//! The call path: one call of a plugin's export in a fresh store, under the
//! run's limits, and what its failure means.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use super::capture::Capture;
use super::errors::{Error, TrapReason, panic_message};
use super::limiter::{MemoryLimiter, Watchdog};
use super::policy::Interface;
use super::request::{Info, RunOutcome, RunRequest};
use super::state::State;
use super::{bindings, wasi};
use crate::services::{Operation, PluginLimits, Session, limits};

/// A loaded plugin: compiled, checked against the policy and linked.
pub struct Plugin {
    pre: bindings::PluginPre<State>,
    engine: Engine,
    /// Its sha256, lowercase hex.
    pub sha256: String,
    /// Its imports and exports.
    pub interface: Interface,
    /// The manifest digest it was pulled by, for a component from a
    /// registry.
    pub manifest_digest: Option<String>,
    /// Who signed, verified at load (see `trust::Verified::signed_by`).
    pub signed_by: Option<String>,
}

/// What a call left behind: the session and the guest's stdio.
struct AfterCall {
    session: Session,
    stdout: Capture,
    stderr: Capture,
}

impl Plugin {
    pub(crate) fn new(
        pre: bindings::PluginPre<State>,
        engine: Engine,
        sha256: String,
        interface: Interface,
    ) -> Self {
        Plugin { pre, engine, sha256, interface, manifest_digest: None, signed_by: None }
    }

    /// Call `describe` with default limits and no roots.
    pub fn describe(&self, name: &str) -> Result<Info, Error> {
        let session = Session::new(name, BTreeMap::new(), PluginLimits::default(), true);
        let (result, left) = self.call(session, |store, p| p.call_describe(store));
        let info = result.map_err(|e| match trap_error(e, left) {
            Err(error) => error,
            Ok(operations) => exit_zero_error(name, operations),
        })?;
        Ok(Info { name: info.name, version: info.version, summary: info.summary, roots: info.roots })
    }

    /// Call `run` once with the request's roots, limits, config and input.
    pub fn run(&self, req: &RunRequest) -> Result<RunOutcome, Error> {
        let session = Session::new(&req.name, req.grants(), req.limits, req.dry_run)
            .with_log_rate(req.log_rate.clone())
            .with_flush(req.flush)
            .with_hooks(req.hooks.clone());
        let (result, left) = self.call(session, |store, p| p.call_run(store, &req.config_json, &req.input));
        let returned = match result {
            Ok(r) => r,
            Err(e) => {
                return match trap_error(e, left) {
                    Err(error) => Err(error),
                    // `wasi:cli/exit` with status 0: the plugin ended on purpose.
                    Ok(operations) => Ok(RunOutcome {
                        plugin: req.name.clone(),
                        result: "exited with status 0 without returning a result".into(),
                        operations,
                    }),
                };
            }
        };
        let AfterCall { mut session, stderr, .. } = left;
        let operations = session.take_operations();
        let log = session.log_budget();
        if log.dropped > 0 {
            tracing::warn!(
                plugin = %req.name,
                "{} log messages ({} bytes) were dropped over the log limit of {} bytes (limits.log_bytes)",
                log.dropped,
                log.dropped_bytes,
                req.limits.log_bytes
            );
        }
        let stderr = stderr_tail(&stderr.text());
        let trap = |reason| Error::Trap {
            plugin: req.name.clone(),
            reason,
            operations: operations.clone(),
            stderr: stderr.clone(),
        };
        if let Some(message) = session.limit_hit() {
            return Err(trap(TrapReason::Limit { message: message.to_owned() }));
        }
        if let Some((by, message)) = session.rejected() {
            return Err(trap(TrapReason::Rejected { by: by.to_owned(), message: message.to_owned() }));
        }
        let len = match &returned {
            Ok(s) | Err(s) => s.len() as u64,
        };
        if len > req.limits.output_bytes {
            return Err(trap(TrapReason::Output { len, limit: req.limits.output_bytes }));
        }
        match returned {
            Ok(result) => Ok(RunOutcome { plugin: req.name.clone(), result, operations }),
            Err(message) => Err(Error::Plugin { plugin: req.name.clone(), message, operations, stderr }),
        }
    }

    /// One call in a fresh store under the session's limits.
    fn call<R>(
        &self,
        session: Session,
        f: impl FnOnce(&mut Store<State>, &bindings::Plugin) -> wasmtime::Result<R>,
    ) -> (wasmtime::Result<R>, AfterCall) {
        let limits = *session.limits();
        let (stdout, stderr) = (Capture::new(), Capture::new());
        let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
        let state = State {
            // No arguments, no environment, no preopens, no sockets: WASI
            // gives captured stdio, clocks and randomness, nothing else.
            wasi: wasi::empty_ctx(stdout.clone(), stderr.clone()),
            clock: wasi::CallClock::new(deadline, &self.engine),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(limits.memory_bytes),
            session: session.with_deadline(deadline),
            timed_out: false,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Our per-call data limit is wasmtime's hostcall fuel, so a guest
        // handing over too much is stopped naming `limits.call_bytes`.
        store.set_hostcall_fuel(usize::try_from(limits.call_bytes).unwrap_or(usize::MAX));
        let fuel = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |mut ctx| {
            if Instant::now() >= deadline {
                ctx.data_mut().timed_out = true;
                return Err(wasmtime::Error::msg("deadline reached"));
            }
            // Another call's watchdog bumped the epoch: keep going.
            Ok(UpdateDeadline::Continue(1))
        });
        let watchdog = Watchdog::start(&self.engine, Duration::from_millis(limits.timeout_ms));
        let result = fuel.and_then(|()| {
            let instance = self.pre.instantiate(&mut store)?;
            f(&mut store, &instance)
        });
        drop(watchdog);
        // Fuel is deterministic where time is not: what the call cost the
        // guest, comparable across runs (`DURASYNC_LOG=durasync=debug`).
        if let Ok(left) = store.get_fuel() {
            let used = limits.fuel.unwrap_or(u64::MAX) - left;
            tracing::debug!(plugin = %store.data().session.plugin(), fuel = used, "the call used {used} fuel units");
        }
        let state = store.into_data();
        let classified = match result {
            Ok(r) => Ok(r),
            Err(e) => Err(Classified {
                error: e,
                timed_out: state.timed_out || state.session.timed_out(),
                memory: state.limiter.hit,
            }
            .into()),
        };
        (classified, AfterCall { session: state.session, stdout, stderr })
    }
}

/// The error for a failed call, or the operations of a plugin that called
/// `wasi:cli/exit` with status 0 (not a failure).
fn trap_error(e: wasmtime::Error, left: AfterCall) -> Result<Vec<Operation>, Error> {
    let AfterCall { mut session, stdout, stderr } = left;
    let stderr = stderr.text();
    let out = stdout.text();
    if !out.is_empty() {
        tracing::debug!(plugin = %session.plugin(), "guest stdout: {}", crate::services::text::escape_all(&out));
    }
    let limits = *session.limits();
    let plugin = session.plugin().to_owned();
    let operations = session.take_operations();
    let tail = stderr_tail(&stderr);
    let reason = match e.downcast_ref::<Classified>() {
        Some(c) if c.timed_out => TrapReason::Timeout { ms: limits.timeout_ms },
        Some(c) if c.memory => TrapReason::Memory { limit: limits.memory_bytes },
        Some(c) if c.error.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) => {
            TrapReason::Fuel { budget: limits.fuel.unwrap_or(u64::MAX) }
        }
        Some(c) if c.error.downcast_ref::<wasmtime_wasi::I32Exit>().is_some() => {
            let status = c.error.downcast_ref::<wasmtime_wasi::I32Exit>().map_or(1, |x| x.0);
            if status == 0 {
                return Ok(operations);
            }
            return Err(Error::Plugin {
                plugin,
                message: format!("exited with status {status} (wasi:cli/exit)"),
                operations,
                stderr: tail,
            });
        }
        Some(c) if is_hostcall_fuel(&c.error) => TrapReason::Limit {
            message: format!(
                "handed the host more than {} of data in one call (limits.call_bytes)",
                limits::human_bytes(limits.call_bytes)
            ),
        },
        Some(c) => match panic_message(&stderr) {
            Some(message) => TrapReason::Panic { message },
            None => {
                TrapReason::Other { message: trap_reason(&c.error), backtrace: backtrace(&c.error).into() }
            }
        },
        None => TrapReason::Other { message: trap_reason(&e), backtrace: backtrace(&e).into() },
    };
    // A panic's message already is the end of its stderr; what the guest
    // wrote before it (a Python or JavaScript traceback, when the language
    // runtime turns an uncaught exception into a panic) is shown.
    let tail =
        if matches!(reason, TrapReason::Panic { .. }) { stderr_tail(before_panic(&stderr)) } else { tail };
    Err(Error::Trap { plugin, reason, operations, stderr: tail })
}

/// `describe` has no way to end on purpose: an exit there is an error.
fn exit_zero_error(name: &str, _: Vec<Operation>) -> Error {
    Error::Plugin {
        plugin: name.to_owned(),
        message: "exited with status 0 from `describe` without describing itself".into(),
        operations: Vec::new(),
        stderr: String::new(),
    }
}

/// wasmtime's "hostcall fuel" error (its type is private).
fn is_hostcall_fuel(e: &wasmtime::Error) -> bool {
    e.chain().any(|c| c.to_string().contains("fuel allocated for hostcalls"))
}

/// Most lines and bytes of a guest's stderr shown with an error.
const STDERR_TAIL_LINES: usize = 20;
const STDERR_TAIL_BYTES: usize = 4096;
/// Most wasm backtrace lines shown with a trap.
const BACKTRACE_LINES: usize = 12;

/// The last lines of a guest's stderr (where a traceback ends).
fn stderr_tail(stderr: &str) -> String {
    let trimmed = stderr.trim_end();
    let lines: Vec<&str> = trimmed.lines().collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    let mut tail = lines[start..].join("\n");
    if tail.len() > STDERR_TAIL_BYTES {
        let mut cut = tail.len() - STDERR_TAIL_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = format!("…{}", &tail[cut..]);
    }
    tail
}

/// A guest's stderr up to the line where its (last) panic is reported.
fn before_panic(stderr: &str) -> &str {
    match stderr.rfind("panicked at ") {
        Some(at) => &stderr[..stderr[..at].rfind('\n').map_or(0, |nl| nl + 1)],
        None => stderr,
    }
}

/// Why a call trapped, in one line: the trap itself, not where it was,
/// with a hint where the trap has one known cause.
fn trap_reason(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<Trap>() {
        Some(trap @ Trap::CannotLeaveComponent) => format!("{trap}{CANNOT_LEAVE_HINT}"),
        Some(trap) => trap.to_string(),
        None => e.root_cause().to_string(),
    }
}

/// The hint for wasmtime's trap `cannot leave component instance` (the
/// guest called out while the host was handing it a call's results, inside
/// `cabi_realloc`): in a Go plugin it is the garbage collector reading the
/// clock there (wasmtime issue 14318), which the Go helper package
/// prevents.
const CANNOT_LEAVE_HINT: &str = " (in a Go plugin, the garbage collector ran inside a host call: make host calls \
     through the helper package \"wit_component/durasync\" (guest-sdk/go/durasync), which turns automatic \
     collection off and collects between calls)";

/// The first frames of a trap's wasm backtrace (empty when it has none).
fn backtrace(e: &wasmtime::Error) -> String {
    let Some(bt) = e.downcast_ref::<wasmtime::WasmBacktrace>() else {
        return String::new();
    };
    let text = bt.to_string();
    let frames: Vec<&str> = text.lines().skip(1).filter(|l| !l.trim().is_empty()).collect();
    let mut out = frames.iter().take(BACKTRACE_LINES).copied().collect::<Vec<_>>().join("\n");
    if frames.len() > BACKTRACE_LINES {
        out.push_str(&format!("\n  … {} more lines", frames.len() - BACKTRACE_LINES));
    }
    out
}

/// A failed call with what the store knew about why.
#[derive(Debug)]
struct Classified {
    error: wasmtime::Error,
    timed_out: bool,
    memory: bool,
}

impl std::fmt::Display for Classified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Classified {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cannot_leave_trap_names_the_go_helper_package_and_no_other_trap_gets_a_hint() {
        let reason = |trap: Trap| trap_reason(&wasmtime::Error::new(trap));
        let hinted = reason(Trap::CannotLeaveComponent);
        assert!(
            hinted.starts_with("wasm trap: cannot leave component instance (in a Go plugin,"),
            "{hinted}"
        );
        assert!(hinted.contains("\"wit_component/durasync\" (guest-sdk/go/durasync)"), "{hinted}");
        for other in [Trap::UnreachableCodeReached, Trap::MemoryOutOfBounds, Trap::StackOverflow] {
            assert_eq!(reason(other), other.to_string());
        }
        let text = wasmtime::Error::msg("cannot leave component instance, said a host function");
        assert!(!trap_reason(&text).contains("Go"), "only the trap itself gets the hint");
    }
}
