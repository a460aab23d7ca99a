//! The engine, the linker and the cache: compiling a component (or loading
//! it precompiled), checking it against the policy and linking it.

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use std::sync::OnceLock;

use super::bindings;
use super::cache::{self, CacheConfig, CacheStatus};
use super::call::Plugin;
use super::compiler::{self, Compiler, OutOfProcess};
use super::distribution::{self, Registry};
use super::errors::Error;
use super::manifest::{Component as Source, Manifest};
use super::pins::{FileState, Pins};
use super::policy::{self, Interface};
use super::state::{self, State};
use super::trust;
use crate::digest::sha256_hex;

/// The engines, the linkers and the cache. Build one per process.
pub struct Runtime {
    /// Cranelift's engine: every load prefers its artifacts.
    engine: Engine,
    linker: Linker<State>,
    /// Winch's engine and linker, for a first start's artifact, made on
    /// first use (a warm start never needs them).
    winch: OnceLock<(Engine, Linker<State>)>,
    cache: cache::Cache,
    /// How registries are reached (the blob cache sits in the compile
    /// cache's directory).
    registry_settings: distribution::Settings,
    /// Created on the first `oci://` component.
    registry: OnceLock<Registry>,
    /// Verified pins of component files, remembered in the cache (none
    /// when caching is off).
    pins: Option<Pins>,
}

/// A component's bytes, checked against its manifest's pin or trust policy.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component.
    pub bytes: Vec<u8>,
    /// Its sha256 (lowercase hex).
    pub sha256: String,
    /// The manifest digest, for a component from a registry.
    pub manifest_digest: Option<String>,
    /// Who signed, when signatures were verified: each key as `FILE (key id
    /// HEX)`, each keyless certificate as `IDENTITY (issuer …, LOG log index
    /// N)`, joined by `; `.
    pub signed_by: Option<String>,
    /// The state of the local file the bytes were read from, when nothing
    /// changed it while it was read: remembered with the pin once the
    /// component has loaded ([`super::pins`]).
    file_state: Option<FileState>,
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
    /// The compiler of its code.
    pub compiler: Compiler,
}

impl Runtime {
    /// Engines with fuel and epoch interruption (one per [`Compiler`]) and
    /// a linker holding only the allowlisted imports.
    pub fn new(cache: &CacheConfig) -> Result<Self, Error> {
        let engine = compiler::engine(Compiler::Cranelift)?;
        let linker = Self::linker(&engine)?;
        let cache = cache::Cache::new(cache);
        let registry_settings =
            distribution::Settings { cache_dir: cache.dir().map(Into::into), ..Default::default() };
        let pins = cache.dir().map(Pins::in_cache);
        Ok(Runtime {
            engine,
            linker,
            winch: OnceLock::new(),
            cache,
            registry_settings,
            registry: OnceLock::new(),
            pins,
        })
    }

    /// A linker of `engine` holding only the allowlisted imports.
    fn linker(engine: &Engine) -> Result<Linker<State>, Error> {
        let mut linker = Linker::new(engine);
        state::add_allowed_imports(&mut linker).map_err(|e| Error::engine("linking host functions", e))?;
        Ok(linker)
    }

    /// Winch's engine and linker (made on the first call).
    fn winch(&self) -> Result<&(Engine, Linker<State>), Error> {
        if let Some(w) = self.winch.get() {
            return Ok(w);
        }
        let engine = compiler::engine(Compiler::Winch)?;
        let linker = Self::linker(&engine)?;
        Ok(self.winch.get_or_init(|| (engine, linker)))
    }

    /// The engine and linker of `compiler`.
    fn engine_of(&self, compiler: Compiler) -> Result<(&Engine, &Linker<State>), Error> {
        match compiler {
            Compiler::Cranelift => Ok((&self.engine, &self.linker)),
            Compiler::Winch => {
                let (engine, linker) = self.winch()?;
                Ok((engine, linker))
            }
        }
    }

    /// Change how registries are reached (timeouts, limits, retries);
    /// the cache directory stays the compile cache's.
    pub fn set_registry_settings(&mut self, settings: distribution::Settings) {
        self.registry_settings =
            distribution::Settings { cache_dir: self.registry_settings.cache_dir.clone(), ..settings };
        self.registry = OnceLock::new();
    }

    /// The registry client (its blob cache beside the compile cache).
    pub fn registry(&self) -> Result<&Registry, Error> {
        if let Some(r) = self.registry.get() {
            return Ok(r);
        }
        let r = Registry::new(self.registry_settings.clone()).map_err(trust::Error::from)?;
        Ok(self.registry.get_or_init(|| r))
    }

    /// Compile the components the cache does not hold in a child process
    /// (see `compiler.rs`): the agent's memory then never carries a compile.
    /// A load that finds nothing cached then runs Winch's artifact and
    /// replaces it with Cranelift's in the background (see `cache.rs`).
    pub fn compile_out_of_process(&mut self, compiler: OutOfProcess) {
        self.cache.set_compiler(compiler);
    }

    /// Compile `wasm` (or load it from the cache). Refuses a precompiled
    /// artifact or a core module: only components are plugins.
    pub fn compile(&self, label: &str, wasm: &[u8]) -> Result<Compiled, Error> {
        self.compile_tiered(label, wasm, true)
    }

    /// `f` given the engines a cache load may use: Cranelift's, and Winch's
    /// made only if the load asks for it.
    fn with_engines<R>(&self, f: impl FnOnce(&cache::Engines<'_>) -> R) -> R {
        let winch = || self.winch().map(|(e, _)| e.clone()).map_err(|e| e.to_string());
        f(&cache::Engines { cranelift: &self.engine, winch: &winch })
    }

    /// [`Runtime::compile`]; `tiered`: a miss may be compiled by Winch first
    /// (with a compile child).
    fn compile_tiered(&self, label: &str, wasm: &[u8], tiered: bool) -> Result<Compiled, Error> {
        let policy = |reason: String| Error::Policy { plugin: label.to_owned(), reason };
        // Read from the binary (no compile): also refuses a precompiled
        // artifact, a core module or a file that is not wasm.
        let interface = Interface::parse(wasm).map_err(policy)?;
        let sha256 = sha256_hex(wasm);
        let loaded = self.with_engines(|engines| self.cache.load(engines, &sha256, wasm, tiered));
        let (component, cache, compiler) = loaded.map_err(|e| match e {
            cache::LoadError::Invalid(e) => policy(format!("it is not a valid component: {e:#}")),
            cache::LoadError::Compiler(why) => {
                Error::Io { what: format!("compiling {label}"), source: std::io::Error::other(why) }
            }
        })?;
        Ok(Compiled { component, sha256, interface, cache, compiler })
    }

    /// Check a compiled component against the policy and link it.
    pub fn link(&self, label: &str, compiled: Compiled) -> Result<Plugin, Error> {
        let policy = |reason: String| Error::Policy { plugin: label.to_owned(), reason };
        let violations = compiled.interface.violations();
        if !violations.is_empty() {
            return Err(policy(violations.join("; ")));
        }
        let (engine, linker) = self.engine_of(compiled.compiler)?;
        let instance_pre = linker.instantiate_pre(&compiled.component).map_err(|e| {
            let version = compiled.interface.wit_version().unwrap_or("an unknown version");
            policy(format!(
                "it was built against durasync:plugin@{version} and needs something this host \
                 ({}) does not provide: {e:#}",
                policy::HOST_WIT_PACKAGE
            ))
        })?;
        let pre = bindings::PluginPre::new(instance_pre)
            .map_err(|e| policy(format!("its exports do not match world durasync:plugin/plugin: {e:#}")))?;
        Ok(Plugin::new(pre, engine.clone(), compiled.sha256, compiled.interface, compiled.compiler))
    }

    /// The manifest's component, checked before anything is compiled: a
    /// file against its pinned sha256; an `oci://` reference through the
    /// trust chain (pin, digest or signature; see [`trust`]), from the blob
    /// cache when it holds the digest.
    pub fn read_component(&self, manifest: &Manifest) -> Result<Fetched, Error> {
        match &manifest.wasm {
            Source::File(path) => {
                let io = |e| Error::Io { what: format!("reading {}", path.display()), source: e };
                let mut file = std::fs::File::open(path).map_err(io)?;
                let before = file.metadata().map_err(io)?;
                let mut wasm = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut wasm).map_err(io)?;
                let actual = sha256_hex(&wasm);
                let expected = manifest.sha256.clone().unwrap_or_default();
                if actual != expected {
                    return Err(Error::Sha256Mismatch { wasm: path.display().to_string(), expected, actual });
                }
                // Only a state nothing changed while it was read may be
                // remembered: the sha256 then belongs to exactly that state.
                let state = FileState::of(&before);
                let unchanged = file.metadata().is_ok_and(|after| FileState::of(&after) == state);
                let file_state = unchanged.then_some(state);
                Ok(Fetched {
                    bytes: wasm,
                    sha256: actual,
                    manifest_digest: None,
                    signed_by: None,
                    file_state,
                })
            }
            Source::Oci(reference) => {
                let v = trust::verified_component(self.registry()?, reference, &manifest.policy())?;
                tracing::info!(
                    plugin = %manifest.name,
                    reference = %reference,
                    manifest_digest = %v.manifest_digest,
                    sha256 = %v.sha256,
                    signed_by = v.signed_by.as_deref().unwrap_or("-"),
                    offline = v.offline,
                    "component verified"
                );
                let bytes = v.read()?;
                Ok(Fetched {
                    bytes,
                    sha256: v.sha256,
                    manifest_digest: Some(v.manifest_digest),
                    signed_by: v.signed_by,
                    file_state: None,
                })
            }
        }
    }

    /// Read the manifest's component, check it against the pinned sha256
    /// (before compiling anything), compile, check the policy, link.
    ///
    /// A component file whose verified pin is remembered (`runtime/pins.rs`)
    /// and whose precompiled artifact is cached (Cranelift's, or Winch's
    /// while its upgrade runs or after it failed) is neither read nor hashed:
    /// one `stat` of the file, then the artifact is loaded and linked (its
    /// imports checked against the policy, as always).
    pub fn load_manifest(&self, manifest: &Manifest) -> Result<Plugin, Error> {
        if let Some(plugin) = self.load_remembered(manifest)? {
            return Ok(plugin);
        }
        let fetched = self.read_component(manifest)?;
        // The policy is checked on the import section before compiling: a
        // refused plugin costs no compile and leaves no cache file.
        Self::check_policy(&manifest.name, &fetched.bytes)?;
        let compiled = self.compile(&manifest.name, &fetched.bytes)?;
        let mut plugin = self.link(&manifest.name, compiled)?;
        plugin.manifest_digest.clone_from(&fetched.manifest_digest);
        plugin.signed_by.clone_from(&fetched.signed_by);
        self.remember(&fetched);
        Ok(plugin)
    }

    /// Remember a verified pin of a component that loaded (best effort).
    fn remember(&self, fetched: &Fetched) {
        if let (Some(pins), Some(state)) = (&self.pins, &fetched.file_state) {
            pins.remember(state, &fetched.sha256);
        }
    }

    /// The plugin of a local component file whose current state was verified
    /// against this very pin before and whose artifact is cached; `None`
    /// when any of that is not so (the caller then reads and hashes).
    fn load_remembered(&self, manifest: &Manifest) -> Result<Option<Plugin>, Error> {
        let (Source::File(path), Some(pinned), Some(pins)) = (&manifest.wasm, &manifest.sha256, &self.pins)
        else {
            return Ok(None);
        };
        let Ok(meta) = std::fs::metadata(path) else { return Ok(None) };
        if !pins.remembers(&FileState::of(&meta), pinned) {
            return Ok(None);
        }
        let Some((component, compiler)) = self.with_engines(|e| self.cache.load_without_bytes(e, pinned))
        else {
            return Ok(None);
        };
        let interface = Interface::of(&component, self.engine_of(compiler)?.0);
        let compiled =
            Compiled { component, sha256: pinned.clone(), interface, cache: CacheStatus::Hit, compiler };
        self.link(&manifest.name, compiled).map(Some)
    }

    /// The same plugin on Cranelift's code, once `plugin` runs Winch's and
    /// the background compile has stored Cranelift's artifact (see
    /// `cache.rs`); `None` otherwise (a `stat` of the missing artifact).
    /// A long-running caller swaps it in between runs.
    pub fn upgraded(&self, label: &str, plugin: &Plugin) -> Option<Plugin> {
        if plugin.compiler != Compiler::Winch {
            return None;
        }
        let component = self.cache.load_cached(&self.engine, &plugin.sha256)?;
        let compiled = Compiled {
            component,
            sha256: plugin.sha256.clone(),
            interface: plugin.interface.clone(),
            cache: CacheStatus::Hit,
            compiler: Compiler::Cranelift,
        };
        let mut upgraded = self
            .link(label, compiled)
            .map_err(|e| tracing::warn!("keeping Winch's code of {label}: {e}"))
            .ok()?;
        upgraded.manifest_digest.clone_from(&plugin.manifest_digest);
        upgraded.signed_by.clone_from(&plugin.signed_by);
        Some(upgraded)
    }

    /// Compile the manifest's component into the cache ahead of time (after
    /// checking its pin and the policy), so a later `run` loads it
    /// precompiled. Returns what the cache did and where the artifact is.
    /// Always Cranelift's artifact: ahead of time, nobody waits for it.
    pub fn precompile(&self, manifest: &Manifest) -> Result<(CacheStatus, std::path::PathBuf), Error> {
        let fetched = self.read_component(manifest)?;
        // The policy is checked on the import section before compiling: a
        // refused plugin costs no compile and leaves no cache file.
        Self::check_policy(&manifest.name, &fetched.bytes)?;
        let compiled = self.compile_tiered(&manifest.name, &fetched.bytes, false)?;
        let status = compiled.cache.clone();
        let path = self.cache.path(&self.engine, Compiler::Cranelift, &compiled.sha256);
        self.link(&manifest.name, compiled)?;
        self.remember(&fetched);
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

    /// Cranelift's engine (for tests that need to precompile with it).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}
