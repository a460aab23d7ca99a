//! The sandboxed plugin runtime: a wasmtime engine with fuel and epoch
//! interruption, a linker that provides only the allowlisted imports, the
//! host side of the WIT contract over [`crate::durable`], the manifest and
//! the precompile cache. It knows nothing of the command line.
//!
//! A plugin may do exactly what its manifest grants — write durably under
//! its granted roots, through the host — and nothing else: WASI is linked
//! over a context that grants nothing (no directory, no network, no
//! environment; real clocks and randomness, see [`policy`]), with bounded
//! CPU, wall-clock time, memory, writes, log and output. Every call gets a
//! fresh `Store`, so a trapped instance is never reused.
//!
//! ```no_run
//! # fn main() -> Result<(), durasync::runtime::Error> {
//! use durasync::runtime::{CacheConfig, Manifest, RunRequest, Runtime};
//! let manifest = Manifest::load("plugin.toml".as_ref())?;
//! let runtime = Runtime::new(&CacheConfig::Default)?;
//! let plugin = runtime.load_manifest(&manifest)?;
//! let outcome = plugin.run(&RunRequest::from_manifest(&manifest, Vec::new(), false)?)?;
//! println!("{}", outcome.result);
//! # Ok(()) }
//! ```

mod bindings;
pub mod cache;
mod capture;
mod errors;
mod fs;
pub mod limits;
mod log;
pub mod manifest;
pub mod policy;
mod wasi;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub use cache::{CacheConfig, CacheStatus};
pub use errors::{Error, ErrorKind, TrapReason};
pub use fs::{Changes, Operation};
pub use limits::Limits;
pub use manifest::{Access, Manifest};
pub use policy::Interface;

use capture::Capture;
use fs::{GrantedRoot, HasHost, HostState, HostView};

/// What a plugin says about itself (`describe`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Info {
    /// A short machine-friendly name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One sentence for a person.
    pub summary: String,
    /// The root names it opens.
    pub roots: Vec<String>,
}

/// A successful run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The plugin's name (from the manifest).
    pub plugin: String,
    /// The message `run` returned.
    pub result: String,
    /// Every durable operation it asked for, in order.
    pub operations: Vec<Operation>,
}

/// Everything one `run` call needs besides the plugin.
#[derive(Debug)]
pub struct RunRequest {
    /// The plugin's name (log field, messages).
    pub name: String,
    /// The granted roots, opened.
    roots: BTreeMap<String, GrantedRoot>,
    /// The limits.
    pub limits: Limits,
    /// The `[config]` table as JSON.
    pub config_json: String,
    /// The input bytes.
    pub input: Vec<u8>,
    /// Plan, do not change anything.
    pub dry_run: bool,
}

impl RunRequest {
    /// A request for the manifest's roots, limits and config. Each root's
    /// directory is opened now (following links in the operator's own
    /// path); a missing one is a manifest error naming the root.
    pub fn from_manifest(manifest: &Manifest, input: Vec<u8>, dry_run: bool) -> Result<Self, Error> {
        let mut roots = BTreeMap::new();
        for (name, root) in &manifest.roots {
            let fd = open_root_dir(&root.path).map_err(|e| Error::Manifest {
                manifest: manifest.source.display().to_string(),
                key: format!("roots.{name}.path"),
                reason: format!("{}: {e}", root.path.display()),
            })?;
            roots.insert(name.clone(), GrantedRoot { fd: Arc::new(fd), access: root.access });
        }
        Ok(RunRequest {
            name: manifest.name.clone(),
            roots,
            limits: manifest.limits,
            config_json: manifest.config_json.clone(),
            input,
            dry_run,
        })
    }
}

fn open_root_dir(path: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    Ok(fd)
}

/// The engine, the linker and the cache. Build one per process.
pub struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    cache: cache::Cache,
}

/// A compiled component that has not been checked against the policy yet.
pub struct Compiled {
    component: Component,
    /// Its sha256, lowercase hex.
    pub sha256: String,
    /// Its imports and exports.
    pub interface: Interface,
    /// What the cache did.
    pub cache: CacheStatus,
}

/// A loaded plugin: compiled, checked against the policy and linked.
pub struct Plugin {
    pre: bindings::PluginPre<State>,
    engine: Engine,
    /// Its sha256, lowercase hex.
    pub sha256: String,
    /// Its imports and exports.
    pub interface: Interface,
}

/// The sha256 of some bytes, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Runtime {
    /// An engine with fuel and epoch interruption and a linker holding only
    /// the allowlisted imports.
    pub fn new(cache: &CacheConfig) -> Result<Self, Error> {
        let mut config = Config::new();
        // Fuel: deterministic CPU budget. Epochs: the wall-clock deadline.
        config.consume_fuel(true).epoch_interruption(true).wasm_component_model(true);
        let engine = Engine::new(&config).map_err(|e| Error::engine("creating the wasm engine", e))?;
        let mut linker = Linker::new(&engine);
        add_allowed_imports(&mut linker).map_err(|e| Error::engine("linking host functions", e))?;
        Ok(Runtime { engine, linker, cache: cache::Cache::new(cache) })
    }

    /// Compile `wasm` (or load it from the cache). Refuses a precompiled
    /// artifact or a core module: only components are plugins.
    pub fn compile(&self, label: &str, wasm: &[u8]) -> Result<Compiled, Error> {
        let policy = |reason: String| Error::Policy { plugin: label.to_owned(), reason };
        // Read from the binary (no compile): also refuses a precompiled
        // artifact, a core module or a file that is not wasm.
        let interface = Interface::parse(wasm).map_err(policy)?;
        let sha256 = sha256_hex(wasm);
        let (component, cache) = self
            .cache
            .load(&self.engine, &sha256, wasm)
            .map_err(|e| policy(format!("it is not a valid component: {e:#}")))?;
        Ok(Compiled { component, sha256, interface, cache })
    }

    /// Check a compiled component against the policy and link it.
    pub fn link(&self, label: &str, compiled: Compiled) -> Result<Plugin, Error> {
        let policy = |reason: String| Error::Policy { plugin: label.to_owned(), reason };
        let violations = compiled.interface.violations();
        if !violations.is_empty() {
            return Err(policy(violations.join("; ")));
        }
        let instance_pre = self.linker.instantiate_pre(&compiled.component).map_err(|e| {
            let version = compiled.interface.wit_version().unwrap_or("an unknown version");
            policy(format!(
                "it was built against durasync:plugin@{version} and needs something this host \
                 ({}) does not provide: {e:#}",
                policy::HOST_WIT_PACKAGE
            ))
        })?;
        let pre = bindings::PluginPre::new(instance_pre)
            .map_err(|e| policy(format!("its exports do not match world durasync:plugin/plugin: {e:#}")))?;
        Ok(Plugin {
            pre,
            engine: self.engine.clone(),
            sha256: compiled.sha256,
            interface: compiled.interface,
        })
    }

    /// Read the manifest's component, check it against the pinned sha256
    /// (before compiling anything), compile, check the policy, link.
    pub fn load_manifest(&self, manifest: &Manifest) -> Result<Plugin, Error> {
        let wasm = std::fs::read(&manifest.wasm)
            .map_err(|e| Error::Io { what: format!("reading {}", manifest.wasm.display()), source: e })?;
        let actual = sha256_hex(&wasm);
        if actual != manifest.sha256 {
            return Err(Error::Sha256Mismatch {
                wasm: manifest.wasm.display().to_string(),
                expected: manifest.sha256.clone(),
                actual,
            });
        }
        // The policy is checked on the import section before compiling: a
        // refused plugin costs no compile and leaves no cache file.
        Self::check_policy(&manifest.name, &wasm)?;
        let compiled = self.compile(&manifest.name, &wasm)?;
        self.link(&manifest.name, compiled)
    }

    /// Check `wasm` against the import policy from its binary alone,
    /// without compiling it (milliseconds, no cache file): its imports and
    /// exports, or a policy error naming every violation.
    pub fn check_policy(label: &str, wasm: &[u8]) -> Result<Interface, Error> {
        let policy = |reason: String| Error::Policy { plugin: label.to_owned(), reason };
        let interface = Interface::parse(wasm).map_err(policy)?;
        let violations = interface.violations();
        if !violations.is_empty() {
            return Err(policy(violations.join("; ")));
        }
        Ok(interface)
    }

    /// The engine (for tests that need to precompile with it).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// Everything a `Store` holds for one call.
pub(crate) struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    host: HostState,
    clock: wasi::CallClock,
    timed_out: bool,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The contract and the WASI interfaces of [`policy::PROVIDED_WASI`], over
/// the empty context of [`wasi::empty_ctx`].
fn add_allowed_imports(l: &mut Linker<State>) -> wasmtime::Result<()> {
    bindings::Plugin::add_to_linker::<State, HasHost>(l, |s| HostView {
        table: &mut s.table,
        state: &mut s.host,
    })?;
    wasi::add_to_linker(l, |s| wasi::ClockView { table: &mut s.table, clock: &s.clock })
}

/// Caps memories and tables; remembers that a memory grow was refused, so
/// the trap that follows is reported as the memory limit.
struct MemoryLimiter {
    memory_bytes: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.hit = true;
            // Trap right here rather than let the guest's allocator abort
            // later with a less precise message.
            return Err(wasmtime::Error::msg("memory limit reached"));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= limits::MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        limits::MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        limits::MAX_TABLES
    }

    fn memories(&self) -> usize {
        limits::MAX_MEMORIES
    }
}

/// Bumps the engine's epoch once a call's deadline passes, and again every
/// [`limits::EPOCH_RETRY_MS`] until the call ends (dropping it stops it).
struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(engine: &Engine, timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<()>();
        let engine = engine.clone();
        let thread = std::thread::spawn(move || {
            let mut wait = timeout;
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                engine.increment_epoch();
                wait = Duration::from_millis(limits::EPOCH_RETRY_MS);
            }
        });
        Watchdog { stop: Some(tx), thread: Some(thread) }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a call left behind: the host state and the guest's stdio.
struct Leftovers {
    host: HostState,
    stdout: Capture,
    stderr: Capture,
}

impl Plugin {
    /// Call `describe` with default limits and no roots.
    pub fn describe(&self, name: &str) -> Result<Info, Error> {
        let host = HostState::new(name, BTreeMap::new(), Limits::default(), true);
        let (result, left) = self.call(host, |store, p| p.call_describe(store));
        let info = result.map_err(|e| self.trap_error(e, left))?;
        Ok(Info { name: info.name, version: info.version, summary: info.summary, roots: info.roots })
    }

    /// Call `run` once with the request's roots, limits, config and input.
    pub fn run(&self, req: &RunRequest) -> Result<RunOutcome, Error> {
        let host = HostState::new(&req.name, req.roots.clone(), req.limits, req.dry_run);
        let (result, left) = self.call(host, |store, p| p.call_run(store, &req.config_json, &req.input));
        let returned = match result {
            Ok(r) => r,
            Err(e) => return Err(self.trap_error(e, left)),
        };
        let Leftovers { host, .. } = left;
        let operations = host.operations;
        let trap = |reason| Error::Trap { plugin: req.name.clone(), reason, operations: operations.clone() };
        if host.log.dropped > 0 {
            tracing::warn!(
                plugin = %req.name,
                "{} log messages ({} bytes) were dropped over the log limit of {} bytes (limits.log_bytes)",
                host.log.dropped,
                host.log.dropped_bytes,
                req.limits.log_bytes
            );
        }
        if let Some(message) = host.limit_hit {
            return Err(trap(TrapReason::Limit { message }));
        }
        let len = match &returned {
            Ok(s) | Err(s) => s.len() as u64,
        };
        if len > req.limits.output_bytes {
            return Err(trap(TrapReason::Output { len, limit: req.limits.output_bytes }));
        }
        match returned {
            Ok(result) => Ok(RunOutcome { plugin: req.name.clone(), result, operations }),
            Err(message) => Err(Error::Plugin { plugin: req.name.clone(), message, operations }),
        }
    }

    /// One call in a fresh store under the host state's limits.
    fn call<R>(
        &self,
        host: HostState,
        f: impl FnOnce(&mut Store<State>, &bindings::Plugin) -> wasmtime::Result<R>,
    ) -> (wasmtime::Result<R>, Leftovers) {
        let limits = host.limits;
        let (stdout, stderr) = (Capture::new(), Capture::new());
        let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
        // No arguments, no environment, no preopens, no sockets: WASI gives
        // captured stdio, clocks and randomness, nothing else.
        let wasi = wasi::empty_ctx(stdout.clone(), stderr.clone());
        let state = State {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                hit: false,
            },
            host,
            clock: wasi::CallClock::new(deadline, &self.engine),
            timed_out: false,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
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
        let state = store.into_data();
        let classified = match result {
            Ok(r) => Ok(r),
            Err(e) => {
                Err(Classified { error: e, timed_out: state.timed_out, memory: state.limiter.hit }.into())
            }
        };
        (classified, Leftovers { host: state.host, stdout, stderr })
    }

    fn trap_error(&self, e: wasmtime::Error, left: Leftovers) -> Error {
        let Leftovers { host, stdout, stderr } = left;
        let stderr = stderr.text();
        let out = stdout.text();
        if !out.is_empty() {
            tracing::debug!(plugin = %host.plugin, "guest stdout: {out}");
        }
        let limits = host.limits;
        let reason = match e.downcast_ref::<Classified>() {
            Some(c) if c.timed_out => TrapReason::Timeout { ms: limits.timeout_ms },
            Some(c) if c.memory => TrapReason::Memory { limit: limits.memory_bytes },
            Some(c) if c.error.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) => {
                TrapReason::Fuel { budget: limits.fuel.unwrap_or(u64::MAX) }
            }
            Some(c) => match errors::panic_message(&stderr) {
                Some(message) => TrapReason::Panic { message },
                None => {
                    let mut message = format!("{:#}", c.error);
                    if !stderr.trim().is_empty() {
                        message.push_str(&format!("; its stderr: {}", stderr.trim()));
                    }
                    TrapReason::Other { message }
                }
            },
            None => TrapReason::Other { message: format!("{e:#}") },
        };
        let _ = &self.engine;
        Error::Trap { plugin: host.plugin, reason, operations: host.operations }
    }
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
