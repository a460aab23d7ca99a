//! The precompile cache: compiled components keyed by the component's
//! sha256 and the engine's compatibility hash (wasmtime version, target,
//! and every setting that changes generated code, fuel and epochs included).
//!
//! Artifacts are also keyed by the compiler that made them
//! ([`Compiler`]): a Winch artifact is named `SHA256-HASH-winch.cwasm`, a
//! Cranelift one `SHA256-HASH.cwasm`, and each is loaded only into an engine
//! of its compiler (wasmtime refuses the other engine's artifact too).
//!
//! With a compile child ([`OutOfProcess`]), a miss is tiered: Winch
//! compiles the component (about a tenth of Cranelift's time for an 18 MB
//! Python component) and its artifact is loaded and run; a background
//! compile with Cranelift then replaces it ([`super::upgrade`]). A load
//! uses the Cranelift artifact when there is one, else the Winch artifact
//! (starting the upgrade again if it is not under way), else compiles.
//!
//! Loading a cached artifact is about a thousand times cheaper than
//! compiling, which is what lets `durasync run` start fast on every
//! reconcile. Any doubt means recompiling: a file that is not a precompiled
//! component, that wasmtime refuses to deserialize (another version or
//! configuration), or that anyone but this user could have written.

use std::hash::{Hash, Hasher};

use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::artifact::try_load;
use super::compiler::{self, Compiler, OutOfProcess};
use super::upgrade;

/// Where compiled components are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheConfig {
    /// `$XDG_CACHE_HOME/durasync`, else `$HOME/.cache/durasync`.
    Default,
    /// An explicit directory (`--cache-dir`).
    Dir(PathBuf),
    /// No cache: always compile (`--no-cache`).
    Disabled,
}

/// What the cache did for one load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheStatus {
    /// Loaded a precompiled artifact.
    Hit,
    /// Nothing cached: compiled, and stored when possible.
    Miss,
    /// An artifact was there but not usable (the reason): recompiled.
    Stale(String),
    /// Caching is off: compiled.
    Disabled,
}

pub(crate) struct Cache {
    dir: Option<PathBuf>,
    /// Where a miss is compiled: in a child process when set.
    compiler: Option<OutOfProcess>,
}

/// The engines a load may use, one per compiler.
pub(crate) struct Engines<'a> {
    /// Cranelift's: the artifacts every load prefers.
    pub cranelift: &'a Engine,
    /// Winch's, made on first use (a warm load never needs it).
    pub winch: &'a dyn Fn() -> Result<Engine, String>,
}

/// Why [`Cache::load`] has no component.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// wasmtime refused the bytes.
    Invalid(wasmtime::Error),
    /// The compile child failed (how it ended).
    Compiler(String),
}

impl CacheConfig {
    /// The directory this configuration names (`None`: caching is off, or
    /// neither `XDG_CACHE_HOME` nor `HOME` is set).
    pub fn dir(&self) -> Option<PathBuf> {
        match self {
            CacheConfig::Disabled => None,
            CacheConfig::Dir(d) => Some(d.clone()),
            CacheConfig::Default => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| Path::new(&h).join(".cache"))
                })
                .map(|d| d.join("durasync")),
        }
    }
}

impl Cache {
    pub(crate) fn new(config: &CacheConfig) -> Self {
        Cache { dir: config.dir(), compiler: None }
    }

    /// Compile misses in a child process from now on.
    pub(crate) fn set_compiler(&mut self, compiler: OutOfProcess) {
        self.compiler = Some(compiler);
    }

    /// The cache directory (`None` when caching is off).
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The artifact path for a component compiled by `engine`, an engine of
    /// `compiler` (`None` when caching is off).
    pub(crate) fn path(&self, engine: &Engine, compiler: Compiler, sha256: &str) -> Option<PathBuf> {
        let mut h = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let suffix = match compiler {
            Compiler::Cranelift => "",
            Compiler::Winch => "-winch",
        };
        Some(self.dir.as_ref()?.join(format!("{sha256}-{:016x}{suffix}.cwasm", h.finish())))
    }

    /// The Cranelift artifact the cache holds for `sha256`, if there is a
    /// trustworthy one (nothing is compiled; a Winch artifact is not
    /// returned: its load goes through [`Cache::load`], which needs the
    /// component's bytes to start the upgrade).
    pub(crate) fn load_cached(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        try_load(engine, &self.path(engine, Compiler::Cranelift, sha256)?).ok().flatten()
    }

    /// The artifact a load of `sha256` would use that needs no component
    /// bytes, and its compiler: the Cranelift artifact, else the Winch one
    /// while its upgrade is under way (the cache's upgrade lock is held) or
    /// after it failed. `None` when the load would start an upgrade, which
    /// reads the component.
    pub(crate) fn load_without_bytes(
        &self,
        engines: &Engines,
        sha256: &str,
    ) -> Option<(Component, Compiler)> {
        let cranelift = self.path(engines.cranelift, Compiler::Cranelift, sha256)?;
        if let Ok(Some(c)) = try_load(engines.cranelift, &cranelift) {
            return Some((c, Compiler::Cranelift));
        }
        self.compiler.as_ref()?;
        let dir = cranelift.parent()?;
        if upgrade::failed(&cranelift).is_none() && !upgrade::under_way(dir) {
            return None;
        }
        let engine = &(engines.winch)().ok()?;
        let component = try_load(engine, &self.path(engine, Compiler::Winch, sha256)?).ok().flatten()?;
        Some((component, Compiler::Winch))
    }

    /// The compiled component for `wasm` (whose sha256 is `sha256`) and the
    /// compiler that made it, from the cache when a trustworthy artifact is
    /// there, else compiled (and stored). `tiered`: with a compile child, a
    /// miss is compiled by Winch and upgraded in the background (see the
    /// module docs); otherwise by Cranelift.
    pub(crate) fn load(
        &self,
        engines: &Engines,
        sha256: &str,
        wasm: &[u8],
        tiered: bool,
    ) -> Result<(Component, CacheStatus, Compiler), LoadError> {
        let engine = engines.cranelift;
        let Some(path) = self.path(engine, Compiler::Cranelift, sha256) else {
            let component = Component::new(engine, wasm).map_err(LoadError::Invalid)?;
            return Ok((component, CacheStatus::Disabled, Compiler::Cranelift));
        };
        let status = match try_load(engine, &path) {
            Ok(Some(c)) => return Ok((c, CacheStatus::Hit, Compiler::Cranelift)),
            Ok(None) => CacheStatus::Miss,
            Err(why) => {
                tracing::info!("cache: {}: {why}; recompiling", path.display());
                CacheStatus::Stale(why)
            }
        };
        let Some(child) = &self.compiler else {
            let component = Component::new(engine, wasm).map_err(LoadError::Invalid)?;
            if let Err(e) = compiler::store(&component, &path) {
                tracing::warn!("cache: cannot store {}: {e}", path.display());
            }
            return Ok((component, status, Compiler::Cranelift));
        };
        if tiered {
            match self.load_winch(engines, child, sha256, wasm, &path) {
                Ok(Some(c)) => return Ok((c, status, Compiler::Winch)),
                Ok(None) => {}
                Err(why) => {
                    tracing::warn!("cache: Winch cannot compile {sha256}: {why}; compiling with Cranelift")
                }
            }
        }
        // The compile's memory stays in the child; the artifact it
        // stored is loaded like any cached one (checked the same way).
        compile_and_load(child, Compiler::Cranelift, engine, wasm, sha256, &path)
            .map(|c| (c, status, Compiler::Cranelift))
    }

    /// The Winch artifact for `wasm`, from the cache or compiled in the
    /// child, with the upgrade to Cranelift (`cranelift`, its artifact's
    /// path) started unless an earlier one failed. `Ok(None)`: no cache
    /// directory to tier in.
    fn load_winch(
        &self,
        engines: &Engines,
        child: &OutOfProcess,
        sha256: &str,
        wasm: &[u8],
        cranelift: &Path,
    ) -> Result<Option<Component>, String> {
        let engine = &(engines.winch)()?;
        let Some(path) = self.path(engine, Compiler::Winch, sha256) else { return Ok(None) };
        let component = match try_load(engine, &path) {
            Ok(Some(c)) => c,
            other => {
                if let Err(why) = other {
                    tracing::info!("cache: {}: {why}; recompiling", path.display());
                }
                compile_and_load(child, Compiler::Winch, engine, wasm, sha256, &path).map_err(
                    |e| match e {
                        LoadError::Compiler(why) => why,
                        LoadError::Invalid(e) => format!("{e:#}"),
                    },
                )?
            }
        };
        match upgrade::failed(cranelift) {
            Some(why) => tracing::info!(
                "cache: running the Winch artifact of {sha256}: its Cranelift compile failed: {why}"
            ),
            None => upgrade::start(child, wasm, sha256, cranelift, &path),
        }
        Ok(Some(component))
    }
}

/// Compile `wasm` with `compiler` in the child, which stores it at `path`,
/// and load that artifact.
fn compile_and_load(
    child: &OutOfProcess,
    compiler: Compiler,
    engine: &Engine,
    wasm: &[u8],
    sha256: &str,
    path: &Path,
) -> Result<Component, LoadError> {
    child.compile(compiler, wasm, sha256, path).map_err(LoadError::Compiler)?;
    match try_load(engine, path) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(LoadError::Compiler(format!("{} is gone", path.display()))),
        Err(why) => Err(LoadError::Compiler(format!("its artifact cannot be used: {why}"))),
    }
}
