//! The engine, the linker and the cache: compiling a component (or loading
//! it precompiled), checking it against the policy and linking it.

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use super::cache::{self, CacheConfig, CacheStatus};
use super::call::Plugin;
use super::errors::Error;
use super::manifest::Manifest;
use super::policy::{self, Interface};
use super::request::sha256_hex;
use super::state::State;
use super::{bindings, wasi};

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

impl Runtime {
    /// An engine with fuel and epoch interruption and a linker holding only
    /// the allowlisted imports.
    pub fn new(cache: &CacheConfig) -> Result<Self, Error> {
        let mut config = Config::new();
        // Fuel: deterministic CPU budget. Epochs: the wall-clock deadline.
        config.consume_fuel(true).epoch_interruption(true).wasm_component_model(true);
        let engine = Engine::new(&config).map_err(|e| Error::engine("creating the wasm engine", e))?;
        let mut linker = Linker::new(&engine);
        wasi::add_allowed_imports(&mut linker).map_err(|e| Error::engine("linking host functions", e))?;
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
        Ok(Plugin::new(pre, self.engine.clone(), compiled.sha256, compiled.interface))
    }

    /// Read the manifest's component and check it against the pinned sha256
    /// (before compiling anything).
    pub fn read_pinned(manifest: &Manifest) -> Result<Vec<u8>, Error> {
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
        Ok(wasm)
    }

    /// Read the manifest's component, check it against the pinned sha256
    /// (before compiling anything), compile, check the policy, link.
    pub fn load_manifest(&self, manifest: &Manifest) -> Result<Plugin, Error> {
        let wasm = Self::read_pinned(manifest)?;
        // The policy is checked on the import section before compiling: a
        // refused plugin costs no compile and leaves no cache file.
        Self::check_policy(&manifest.name, &wasm)?;
        let compiled = self.compile(&manifest.name, &wasm)?;
        self.link(&manifest.name, compiled)
    }

    /// Compile the manifest's component into the cache ahead of time (after
    /// checking its pin and the policy), so a later `run` loads it
    /// precompiled. Returns what the cache did and where the artifact is.
    pub fn precompile(&self, manifest: &Manifest) -> Result<(CacheStatus, std::path::PathBuf), Error> {
        let wasm = Self::read_pinned(manifest)?;
        // The policy is checked on the import section before compiling: a
        // refused plugin costs no compile and leaves no cache file.
        Self::check_policy(&manifest.name, &wasm)?;
        let compiled = self.compile(&manifest.name, &wasm)?;
        let status = compiled.cache.clone();
        let path = self.cache.path(&self.engine, &compiled.sha256);
        self.link(&manifest.name, compiled)?;
        let no_cache = |why: String| Error::Io {
            what: format!("caching {}", manifest.name),
            source: std::io::Error::other(why),
        };
        let path = path.ok_or_else(|| {
            no_cache("no cache directory: set XDG_CACHE_HOME or HOME, or pass --cache-dir".into())
        })?;
        if !path.is_file() {
            return Err(no_cache(format!(
                "the compiled component could not be stored as {}",
                path.display()
            )));
        }
        Ok((status, path))
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
