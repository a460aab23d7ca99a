//! Compiling a component in a short-lived child process, so the memory a
//! compile takes leaves with it.
//!
//! Cranelift compiling an 18 MB Python component peaks at about 400 MiB,
//! and the allocator keeps most of it in a long-running process: an agent
//! that compiled its plugins itself carried that memory for its whole life
//! and, under a container's memory limit, was killed before the compile
//! ended. With an [`OutOfProcess`] compiler set ([`super::Runtime::compile_out_of_process`]),
//! a cache miss runs the compiler instead: a child of the same binary (the
//! running executable, `/proc/self/exe`, so an upgrade on disk cannot slip
//! in another engine) reads the component on stdin, checks its sha256,
//! compiles it at a lower CPU priority with the same engine settings and
//! writes the artifact into the cache atomically; the parent then loads
//! that artifact like any cached one (its header is checked by wasmtime).
//! The child is killed, with its process group, at a deadline.
//!
//! A failed compile (a crash, the kernel's OOM killer, the deadline) is an
//! error naming how the child ended; it is never retried in the parent,
//! which would take the memory this exists to keep out.
//!
//! Two compilers: [`Compiler::Winch`], wasmtime's baseline compiler,
//! compiles an 18 MB Python component in about 0.15 of [`Compiler::Cranelift`]'s
//! time (`BENCHMARKS.md`, "A first start"); Cranelift's code runs faster. A cache miss with a compile child is
//! compiled by Winch, so the first run starts soon; a background compile by
//! Cranelift then replaces that artifact ([`super::upgrade`]).
//!
//! Here too, so that the child and the runtime share them: the engine's
//! settings (`config`) and how an artifact is stored (`store`).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use super::errors::Error;
use crate::digest::sha256_hex;
use crate::spawn::child::{Ended, supervise};

/// Which of wasmtime's compilers made an artifact. An artifact loads only
/// into an engine of the compiler that made it: wasmtime records the
/// calling convention (`winch_callable`) in the artifact's header and
/// refuses a mismatch, and the cache keeps the two apart by file name too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compiler {
    /// Wasmtime's optimizing compiler: slower to compile, faster code.
    Cranelift,
    /// Wasmtime's baseline compiler (x86_64): a single pass, no
    /// optimization; the first start of a component not yet compiled.
    Winch,
}

impl Compiler {
    /// The name the compile child takes (`--compiler NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Cranelift => "cranelift",
            Compiler::Winch => "winch",
        }
    }
}

impl std::str::FromStr for Compiler {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cranelift" => Ok(Compiler::Cranelift),
            "winch" => Ok(Compiler::Winch),
            _ => Err(format!("unknown compiler {s:?}: cranelift or winch")),
        }
    }
}

/// How a compile child is started: the program and the arguments before
/// `--compiler NAME --artifact PATH --sha256 HEX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfProcess {
    /// The program to run.
    pub program: PathBuf,
    /// Its first arguments (the subcommand that calls [`serve`]).
    pub args: Vec<OsString>,
    /// When the child is killed.
    pub timeout: Duration,
}

/// The longest a compile may take: an 18 MB component compiles in tens of
/// seconds on two cores; ten minutes is a stuck child, not a slow one.
pub const COMPILE_TIMEOUT: Duration = Duration::from_secs(600);

/// The most bytes of a child's standard error kept for the message.
const STDERR_KEPT: usize = 16 << 10;

/// The niceness the child compiles at: a node's other work goes first.
const NICE: i32 = 10;

/// The most bytes a compile child reads from stdin: the largest component
/// durasync loads from a registry or a file.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

impl OutOfProcess {
    /// This very executable with `subcommand` (the CLI's hidden one that
    /// calls [`serve`]).
    pub fn this_binary(subcommand: &str) -> OutOfProcess {
        OutOfProcess {
            program: PathBuf::from("/proc/self/exe"),
            args: vec![subcommand.into()],
            timeout: COMPILE_TIMEOUT,
        }
    }

    /// Compile `wasm` (sha256 `sha256`) in a child that stores the artifact
    /// at `artifact`. `Ok` once the child exited successfully and the file
    /// is there; the caller loads it.
    pub(crate) fn compile(
        &self,
        compiler: Compiler,
        wasm: &[u8],
        sha256: &str,
        artifact: &Path,
    ) -> Result<(), String> {
        let started = Instant::now();
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .arg("--compiler")
            .arg(compiler.name())
            .arg("--artifact")
            .arg(artifact)
            .arg("--sha256")
            .arg(sha256)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env("DURASYNC_LOG", "warn")
            .env("NO_COLOR", "1")
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting the compiler ({}): {e}", self.program.display()))?;
        let stderr: OwnedFd = child.stderr.take().expect("piped").into();
        let mut stdin = child.stdin.take().expect("piped");
        let mut kept = Vec::new();
        // The pipe is drained by the child as it reads; written from a
        // thread so a child that stops reading cannot block the caller
        // past the deadline (it is killed, the write then fails).
        let ended = std::thread::scope(|scope| {
            scope.spawn(move || {
                let _ = stdin.write_all(wasm);
            });
            supervise(&mut child, vec![stderr], started + self.timeout, &mut |_, chunk| {
                let room = STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                true
            })
        });
        let said = String::from_utf8_lossy(&kept).trim().to_owned();
        let said = if said.is_empty() { String::new() } else { format!(": {said}") };
        match ended {
            Ok(Ended::Exited(status)) if status.success() => {}
            Ok(Ended::Exited(status)) => {
                use std::os::unix::process::ExitStatusExt;
                return Err(match status.signal() {
                    Some(9) => format!(
                        "the compiler was killed (SIGKILL: out of memory, or killed by someone){said}"
                    ),
                    Some(sig) => format!("the compiler died of signal {sig}{said}"),
                    None => format!("the compiler failed ({status}){said}"),
                });
            }
            Ok(Ended::TimedOut) => {
                return Err(format!("the compiler did not finish within {:?} and was killed", self.timeout));
            }
            Ok(Ended::Stopped) => return Err("the compiler was stopped".into()),
            Err(e) => return Err(format!("watching the compiler: {e}")),
        }
        if !artifact.is_file() {
            return Err(format!("the compiler exited but left no artifact at {}", artifact.display()));
        }
        tracing::info!(
            sha256,
            compiler = compiler.name(),
            ms = started.elapsed().as_millis() as u64,
            "compiled in a child process: {}",
            artifact.display()
        );
        Ok(())
    }
}

/// The child's side: read the component from stdin (at most
/// [`MAX_COMPONENT_BYTES`]), check that its sha256 is `sha256`, compile it
/// with `compiler` and the runtime's engine settings at a lower priority and
/// store the artifact at `artifact` (temporary file, fsync, rename).
///
/// One compile at a time per cache directory: the child holds
/// [`COMPILE_LOCK`] there while it compiles, waiting for it first, so a
/// first start's compile and a background one never add their memory.
pub fn serve(compiler: Compiler, artifact: &Path, sha256: &str) -> Result<(), Error> {
    // Best effort: a compile at normal priority is still a compile.
    let _ = rustix::process::nice(NICE);
    be_the_first_oom_victim();
    let wasm = read_component(sha256)?;
    let _lock = lock_compiles(artifact.parent().unwrap_or(Path::new(".")))?;
    let engine = engine(compiler)?;
    let component =
        Component::new(&engine, &wasm).map_err(|e| Error::engine("compiling the component", e))?;
    store(&component, artifact)
        .map_err(|e| Error::Io { what: format!("storing {}", artifact.display()), source: e })
}

/// Ask the kernel's OOM killer to take this process before any other in its
/// memory cgroup (`oom_score_adj` 1000, which any process may set for
/// itself): under a container's limit, a compile is what goes, not the
/// agent that runs the plugins already loaded. Its parent names the kill
/// (see the module's comment). Best effort: without `/proc` the kernel
/// chooses by size alone.
pub(crate) fn be_the_first_oom_victim() {
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
}

/// The lock file in a cache directory that the one compile running there
/// holds (`flock`, exclusive).
pub const COMPILE_LOCK: &str = ".compile.lock";

/// Wait for and take `dir`'s compile lock (creating `dir`); released when
/// the file is closed, at the latest when the child exits.
fn lock_compiles(dir: &Path) -> Result<std::fs::File, Error> {
    let path = dir.join(COMPILE_LOCK);
    let io = |e: std::io::Error| Error::Io { what: format!("locking {}", path.display()), source: e };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).map_err(|e| io(e.into()))?;
    Ok(file)
}

/// The component on stdin (at most [`MAX_COMPONENT_BYTES`]), checked
/// against `sha256`.
pub(crate) fn read_component(sha256: &str) -> Result<Vec<u8>, Error> {
    let mut wasm = Vec::new();
    let io = |what: &str, e: std::io::Error| Error::Io { what: what.to_owned(), source: e };
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::io::stdin().lock(), MAX_COMPONENT_BYTES + 1),
        &mut wasm,
    )
    .map_err(|e| io("reading the component from stdin", e))?;
    if wasm.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(io("reading the component from stdin", std::io::Error::other("larger than 256 MiB")));
    }
    let actual = sha256_hex(&wasm);
    if actual != sha256 {
        return Err(Error::Sha256Mismatch { wasm: "stdin".into(), expected: sha256.to_owned(), actual });
    }
    Ok(wasm)
}

/// An engine of `compiler` with the settings every engine of this binary
/// shares (a compile child's included: its artifacts must load here).
pub fn engine(compiler: Compiler) -> Result<wasmtime::Engine, Error> {
    wasmtime::Engine::new(&config(compiler)).map_err(|e| Error::engine("creating the wasm engine", e))
}

/// The engine's settings: fuel (the deterministic CPU budget) and epochs
/// (the wall-clock deadline), both supported by Winch on x86_64.
fn config(compiler: Compiler) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.consume_fuel(true).epoch_interruption(true).wasm_component_model(true);
    config.strategy(match compiler {
        Compiler::Cranelift => wasmtime::Strategy::Cranelift,
        Compiler::Winch => wasmtime::Strategy::Winch,
    });
    config
}

/// Store an artifact atomically: a private temporary file renamed into place.
pub(crate) fn store(component: &Component, path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let bytes = component.serialize().map_err(|e| std::io::Error::other(format!("{e}")))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("artifact");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(&bytes)?;
        // The rename may only ever publish a complete file.
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
