//! The sandboxed plugin runtime: a wasmtime engine with fuel and epoch
//! interruption, a linker that provides only the allowlisted imports, the
//! WIT adapter over [`crate::services`] (which calls [`crate::durable`]),
//! the manifest and the precompile cache. It knows nothing of the command
//! line.
//!
//! A plugin may do exactly what its manifest grants — write durably under
//! its granted roots, through the host — and nothing else: no file system,
//! no network, no clocks or randomness, bounded CPU, wall-clock time,
//! memory, writes, log and output. Every call gets a fresh `Store`, so a
//! trapped instance is never reused.
//!
//! One concept per file: [`engine`](Runtime) (compile, cache, link),
//! `call.rs` (a call in a fresh store and what its failure means),
//! `limiter.rs` (memory limiter, watchdog), `state.rs` (the store's data and
//! the view the hosts borrow), `wasi.rs` (the WASI surface), `fs.rs` and
//! `log.rs` (the WIT adapters), `errors.rs`, [`manifest`], [`policy`],
//! [`cache`].
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
mod call;
mod capture;
mod engine;
mod errors;
mod fs;
mod limiter;
mod log;
pub mod manifest;
pub mod policy;
mod state;
mod wasi;

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

pub use crate::services::limits;
pub use crate::services::{Access, Changes, Limits, Operation};
pub use cache::{CacheConfig, CacheStatus};
pub use call::Plugin;
pub use engine::{Compiled, Runtime};
pub use errors::{Error, ErrorKind, TrapReason};
pub use manifest::Manifest;
pub use policy::Interface;

use crate::services::Grant;

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
    roots: BTreeMap<String, Grant>,
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
            let grant =
                Grant::open(&root.path, root.access, root.special_modes).map_err(|e| Error::Manifest {
                    manifest: manifest.source.display().to_string(),
                    key: format!("roots.{name}.path"),
                    reason: format!("{}: {e}", root.path.display()),
                })?;
            roots.insert(name.clone(), grant);
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

    /// The grants, for one run's session (the fds are shared, not reopened).
    pub(crate) fn grants(&self) -> BTreeMap<String, Grant> {
        self.roots.clone()
    }
}

/// The sha256 of some bytes, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
