//! What one run of a plugin is given (the opened grants, limits, config,
//! input) and what it returns.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::errors::Error;
use super::manifest::Manifest;
use crate::durable::Flush;
use crate::services::{Grant, Hooks, LogRate, Operation, PluginLimits};

/// What a plugin says about itself (`describe`): the contract's plain type.
pub use durasync_contract::Info;

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

/// Everything one `run` call needs besides the plugin. Built from a
/// manifest, then refined with `with_*`, as a [`crate::services::Session`] is.
#[derive(Debug)]
pub struct RunRequest {
    /// The plugin's name (log field, messages).
    pub(crate) name: String,
    /// The granted roots, opened.
    roots: BTreeMap<String, Grant>,
    /// The limits.
    pub(crate) limits: PluginLimits,
    /// The `[config]` table as JSON.
    pub(crate) config_json: String,
    /// The input bytes.
    pub(crate) input: Vec<u8>,
    /// Plan, do not change anything.
    pub(crate) dry_run: bool,
    /// The instance's log rate limit, shared by its runs (the agent's).
    pub(crate) log_rate: Option<Arc<LogRate>>,
    /// How the run's syncs make staged trees durable (the manifest's
    /// `flush`, else `auto`).
    pub(crate) flush: Flush,
    /// The operator's validators and guardrails (none when the manifest
    /// declares none).
    pub(crate) hooks: Option<Arc<dyn Hooks>>,
}

impl RunRequest {
    /// A request for the manifest's roots, limits and config. Each root's
    /// directory is opened now (following links in the operator's own
    /// path); a missing one is a manifest error naming the root.
    pub fn from_manifest(manifest: &Manifest, input: Vec<u8>, dry_run: bool) -> Result<Self, Error> {
        RunRequest::with_hooks(manifest, input, dry_run, run_hooks(manifest))
    }

    /// The same with the run's hooks built by the caller (the agent's
    /// record owed actions and probations in its ledger); `None` only when
    /// the manifest declares no hooks.
    pub fn with_hooks(
        manifest: &Manifest,
        input: Vec<u8>,
        dry_run: bool,
        hooks: Option<Arc<dyn Hooks>>,
    ) -> Result<Self, Error> {
        let mut roots = BTreeMap::new();
        for (name, root) in &manifest.roots {
            let grant = Grant::open(&root.path, root.access, root.special_modes)
                .map_err(|e| Error::Manifest {
                    manifest: manifest.source.display().to_string(),
                    key: format!("roots.{name}.path"),
                    reason: format!("{}: {e}", root.path.display()),
                })?
                .with_attrs(root.attrs.clone())
                .with_layout(root.layout);
            roots.insert(name.clone(), grant);
        }
        Ok(RunRequest {
            name: manifest.name.clone(),
            roots,
            limits: manifest.limits,
            config_json: manifest.config_json.clone(),
            input,
            dry_run,
            log_rate: None,
            flush: manifest.flush.unwrap_or_default(),
            hooks,
        })
    }

    /// The same, under the instance's log rate limit (shared by its runs).
    #[must_use]
    pub fn with_log_rate(mut self, log_rate: Option<Arc<LogRate>>) -> Self {
        self.log_rate = log_rate;
        self
    }

    /// The grants, for one run's session (the fds are shared, not reopened).
    pub(crate) fn grants(&self) -> BTreeMap<String, Grant> {
        self.roots.clone()
    }
}

/// The hooks of one run of `manifest`, if it declares any.
fn run_hooks(manifest: &Manifest) -> Option<Arc<dyn Hooks>> {
    if manifest.hooks.is_empty() {
        return None;
    }
    Some(Arc::new(manifest.run_hooks()))
}
