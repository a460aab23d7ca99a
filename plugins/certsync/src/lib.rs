//! certsync: the cert-sync controller's job as a durasync plugin.
//!
//! Input: what `kubectl get configmaps,secrets -o json` prints. Config: the
//! configmaps and secrets to sync, each `{ name, optional }`. For each one
//! it makes `configmaps/<name>/` (files 0644) or `secrets/<name>/` (files
//! 0600) under the root `certs` hold exactly the object's keys, with one
//! atomic `sync` per object, so a certificate and its key always come from
//! the same generation. An unchanged object writes nothing; a missing
//! optional object's directory is removed durably; a missing required
//! object fails alone (the others still sync) and the run reports every
//! failure together.

mod list;

use durasync_guest::{File, Info, Plugin, Root, RunError};
use serde::Deserialize;

pub use list::{Kind, Objects, parse};

/// The root certsync writes into.
pub const ROOT: &str = "certs";

/// The manifest's `[config]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// ConfigMaps to sync into `configmaps/<name>/`.
    #[serde(default)]
    pub configmaps: Vec<Wanted>,
    /// Secrets to sync into `secrets/<name>/`.
    #[serde(default)]
    pub secrets: Vec<Wanted>,
}

/// One object to sync.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wanted {
    /// Its `metadata.name`, also the name of its directory.
    pub name: String,
    /// When true, an object missing from the input is not an error: its
    /// directory is removed.
    #[serde(default)]
    pub optional: bool,
}

impl Config {
    /// Parse and check the config: names must be usable as one directory
    /// name, and each object is named once.
    pub fn parse(json: &str) -> Result<Config, String> {
        let config: Config = serde_json::from_str(json).map_err(|e| format!("invalid config: {e}"))?;
        for (kind, wanted) in config.wanted() {
            let mut seen = std::collections::BTreeSet::new();
            for w in wanted {
                let n = w.name.as_str();
                if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
                    return Err(format!("invalid config: {kind} name {n:?} is not a plain name"));
                }
                if !seen.insert(n) {
                    return Err(format!("invalid config: {kind} {n:?} is listed twice"));
                }
            }
        }
        Ok(config)
    }

    fn wanted(&self) -> [(Kind, &[Wanted]); 2] {
        [(Kind::ConfigMap, &self.configmaps), (Kind::Secret, &self.secrets)]
    }
}

/// The plugin.
pub struct CertSync;

impl Plugin for CertSync {
    fn describe() -> Info {
        Info::new(
            "certsync",
            env!("CARGO_PKG_VERSION"),
            "Syncs Kubernetes configmaps and secrets into certificate directories, one atomic swap per object",
        )
        .roots([ROOT])
    }

    fn run(config: &str, input: &[u8]) -> Result<String, RunError> {
        // Everything is checked before the first write.
        let config = Config::parse(config)?;
        let objects = parse(input)?;
        let root = Root::open(ROOT)?;

        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (kind, wanted) in config.wanted() {
            for w in wanted {
                match sync_one(&root, &objects, kind, w) {
                    Ok(line) => {
                        durasync_guest::info!("{line}");
                        done.push(line);
                    }
                    Err(line) => {
                        durasync_guest::error!("{line}");
                        failed.push(line);
                    }
                }
            }
        }
        let total = done.len() + failed.len();
        if failed.is_empty() {
            done.insert(0, format!("certsync: {total} object(s) in sync"));
            Ok(done.join("\n"))
        } else {
            let mut lines = vec![format!("certsync: {} of {total} object(s) failed", failed.len())];
            lines.extend(failed);
            lines.extend(done);
            Err(lines.join("\n").into())
        }
    }
}

/// Sync one object; the line for the operator either way.
fn sync_one(root: &Root, objects: &Objects, kind: Kind, w: &Wanted) -> Result<String, String> {
    let path = format!("{}/{}", kind.folder(), w.name);
    let what = format!("{kind} {}", w.name);
    match objects.get(&(kind, w.name.clone())) {
        Some(keys) => {
            let files =
                keys.iter().map(|(key, bytes)| File::new(key.as_str(), bytes.as_slice()).mode(kind.mode()));
            let r = root.sync(&path, files).map_err(|e| format!("{what}: {e}"))?;
            Ok(format!("{what}: {} ({} written, {} removed)", r.outcome, r.written, r.removed))
        }
        None if w.optional => match root.remove(&path) {
            Ok(true) => Ok(format!("{what}: removed (optional, not in the input)")),
            Ok(false) => Ok(format!("{what}: absent (optional, not in the input)")),
            Err(e) => Err(format!("{what}: {e}")),
        },
        None => Err(format!("{what}: required, but not in the input")),
    }
}

durasync_guest::export_plugin!(CertSync);

#[cfg(test)]
mod tests;
