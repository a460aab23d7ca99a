//! The precompile cache: compiled components keyed by the component's
//! sha256 and the engine's compatibility hash (wasmtime version, target,
//! and every setting that changes generated code, fuel and epochs included).
//!
//! Loading a cached artifact is about a thousand times cheaper than
//! compiling, which is what lets `durasync run` start fast on every
//! reconcile. Any doubt means recompiling: a file that is not a precompiled
//! component, that wasmtime refuses to deserialize (another version or
//! configuration), or that anyone but this user could have written.

#![allow(unsafe_code)]

use std::hash::{Hash, Hasher};

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::{Engine, Precompiled};

use super::compiler::{self, OutOfProcess};

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

    /// The artifact path for a component (`None` when caching is off).
    pub(crate) fn path(&self, engine: &Engine, sha256: &str) -> Option<PathBuf> {
        let mut h = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Some(self.dir.as_ref()?.join(format!("{sha256}-{:016x}.cwasm", h.finish())))
    }

    /// The precompiled component the cache holds for `sha256`, if there is a
    /// trustworthy one (nothing is compiled).
    pub(crate) fn load_cached(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        try_load(engine, &self.path(engine, sha256)?).ok().flatten()
    }

    /// The compiled component for `wasm` (whose sha256 is `sha256`), from the
    /// cache when a trustworthy artifact is there, else compiled (and stored).
    pub(crate) fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        wasm: &[u8],
    ) -> Result<(Component, CacheStatus), LoadError> {
        let Some(path) = self.path(engine, sha256) else {
            return Ok((Component::new(engine, wasm).map_err(LoadError::Invalid)?, CacheStatus::Disabled));
        };
        let status = match try_load(engine, &path) {
            Ok(Some(c)) => return Ok((c, CacheStatus::Hit)),
            Ok(None) => CacheStatus::Miss,
            Err(why) => {
                tracing::info!("cache: {}: {why}; recompiling", path.display());
                CacheStatus::Stale(why)
            }
        };
        if let Some(compiler) = &self.compiler {
            // The compile's memory stays in the child; the artifact it
            // stored is loaded like any cached one (checked the same way).
            compiler.compile(wasm, sha256, &path).map_err(LoadError::Compiler)?;
            return match try_load(engine, &path) {
                Ok(Some(c)) => Ok((c, status)),
                Ok(None) => Err(LoadError::Compiler(format!("{} is gone", path.display()))),
                Err(why) => Err(LoadError::Compiler(format!("its artifact cannot be used: {why}"))),
            };
        }
        let component = Component::new(engine, wasm).map_err(LoadError::Invalid)?;
        if let Err(e) = compiler::store(&component, &path) {
            tracing::warn!("cache: cannot store {}: {e}", path.display());
        }
        Ok((component, status))
    }
}

/// The cached component at `path`: `Ok(None)` when there is none, `Err`
/// with the reason when there is one that must not be used.
fn try_load(engine: &Engine, path: &Path) -> Result<Option<Component>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    trusted(&meta, "artifact")?;
    let dir_meta = std::fs::metadata(path.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
    trusted(&dir_meta, "cache directory")?;
    match Engine::detect_precompiled_file(path) {
        Ok(Some(Precompiled::Component)) => {}
        Ok(_) => return Err("not a precompiled component".into()),
        Err(e) => return Err(format!("{e}")),
    }
    // SAFETY: `Component::deserialize_file` runs the machine code in the
    // file, so the file must have been produced by wasmtime from a component
    // we would compile ourselves. It is: the file sits under a key that
    // names the component's sha256, in a directory that only this user can
    // write (checked above, as is the file's owner and mode), and durasync
    // writes it atomically (temporary file + rename), so it is never seen
    // half written. wasmtime itself checks the version and the engine
    // configuration in the artifact's header and refuses a mismatch, which
    // we turn into a recompile.
    unsafe { Component::deserialize_file(engine, path) }.map(Some).map_err(|e| format!("{e}"))
}

/// Refuse a file or directory that someone other than this user owns or
/// that group or others may write.
pub(crate) fn trusted(meta: &std::fs::Metadata, what: &str) -> Result<(), String> {
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(format!("the {what} is owned by uid {}, not by this user ({uid})", meta.uid()));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(format!("the {what} is writable by group or others"));
    }
    if meta.file_type().is_symlink() {
        return Err(format!("the {what} is a symbolic link"));
    }
    Ok(())
}
