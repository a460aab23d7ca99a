//! installer: the static-pod installer's job as a durasync plugin.
//!
//! For revision `R` of pod `P` it writes, under the root `resources`:
//! `P-R/configmaps/<name>/` and `P-R/secrets/<name>/` (one atomic `sync`
//! each; `*.sh` files 0755 in configmaps and 0700 in secrets, every other
//! file 0600), then the pod manifest `P-pod.yaml` twice, each with the
//! durable single-file write: into `P-R/` and into the root `manifests`
//! (what the kubelet reads). Nothing is ever deleted first, so the kubelet
//! sees the old manifest or the new one, never none.
//!
//! Input: a Kubernetes `List` (`kubectl get configmaps,secrets -o json`)
//! holding the revisioned objects, named as upstream names them:
//! `<name>-R` for each resource and `P-pod-R` for the pod configmap (key
//! `pod.yaml`, in which every `REVISION` becomes `R`). Everything is
//! checked before the first write: a missing required object or a
//! malformed List fails the run and writes nothing.

// The List parser is certsync's: one parser for both plugins.
#[path = "../../certsync/src/list.rs"]
mod list;

use durasync_guest::{File, Info, Plugin, Root, RunError};
use list::{Kind, Objects};
use serde::Deserialize;

/// The root that holds every revision's resources.
pub const RESOURCES: &str = "resources";
/// The root the kubelet reads static pod manifests from.
pub const MANIFESTS: &str = "manifests";

/// The manifest's `[config]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The pod's name prefix (`kube-apiserver`).
    pub pod: String,
    /// The revision to install.
    pub revision: u64,
    /// ConfigMaps of the revision (`<name>-<revision>` in the input).
    #[serde(default)]
    pub configmaps: Vec<Wanted>,
    /// Secrets of the revision (`<name>-<revision>` in the input).
    #[serde(default)]
    pub secrets: Vec<Wanted>,
}

/// One resource of the revision.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wanted {
    /// Its name without the revision suffix; also its directory's name.
    pub name: String,
    /// When true, an object missing from the input is skipped.
    #[serde(default)]
    pub optional: bool,
}

/// The mode upstream gives a resource file: scripts executable (by the
/// owner only for secrets), everything else 0600.
pub fn mode(kind: Kind, key: &str) -> u32 {
    match (kind, key.ends_with(".sh")) {
        (Kind::ConfigMap, true) => 0o755,
        (Kind::Secret, true) => 0o700,
        (_, false) => 0o600,
    }
}

fn plain(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(format!("invalid config: {what} {name:?} is not a plain name"));
    }
    Ok(())
}

/// What one install writes: each resource directory, then the manifest.
struct Plan {
    revision_dir: String,
    resources: Vec<(String, Vec<File>)>,
    manifest_name: String,
    manifest: Vec<u8>,
    skipped: Vec<String>,
}

fn plan(config: &Config, objects: &Objects) -> Result<Plan, String> {
    plain("pod", &config.pod)?;
    let revision_dir = format!("{}-{}", config.pod, config.revision);
    let mut resources = Vec::new();
    let mut skipped = Vec::new();
    let mut missing = Vec::new();
    for (kind, wanted) in [(Kind::ConfigMap, &config.configmaps), (Kind::Secret, &config.secrets)] {
        for w in wanted {
            plain(&kind.to_string(), &w.name)?;
            let source = format!("{}-{}", w.name, config.revision);
            match objects.get(&(kind, source.clone())) {
                Some(keys) => {
                    let files =
                        keys.iter().map(|(k, v)| File::new(k.as_str(), v.as_slice()).mode(mode(kind, k)));
                    resources.push((format!("{revision_dir}/{}/{}", kind.folder(), w.name), files.collect()));
                }
                None if w.optional => skipped.push(format!("{kind} {source}")),
                None => missing.push(format!("{kind} {source}")),
            }
        }
    }
    let pod_source = format!("{}-pod-{}", config.pod, config.revision);
    let pod = objects.get(&(Kind::ConfigMap, pod_source.clone()));
    let manifest = match pod.map(|keys| keys.get("pod.yaml")) {
        Some(Some(bytes)) => {
            let text = String::from_utf8(bytes.clone())
                .map_err(|_| format!("configmap {pod_source}: pod.yaml is not UTF-8"))?;
            text.replace("REVISION", &config.revision.to_string()).into_bytes()
        }
        Some(None) => return Err(format!("configmap {pod_source} has no key pod.yaml")),
        None => {
            missing.push(format!("configmap {pod_source}"));
            Vec::new()
        }
    };
    if !missing.is_empty() {
        return Err(format!(
            "revision {} is incomplete, nothing written: missing {}",
            config.revision,
            missing.join(", ")
        ));
    }
    Ok(Plan { revision_dir, resources, manifest_name: format!("{}-pod.yaml", config.pod), manifest, skipped })
}

/// The plugin.
pub struct Installer;

impl Plugin for Installer {
    fn describe() -> Info {
        Info::new(
            "installer",
            env!("CARGO_PKG_VERSION"),
            "Installs a static pod revision: its resources, then its manifest, each change atomic and durable",
        )
        .roots([RESOURCES, MANIFESTS])
    }

    fn run(config: &str, input: &[u8]) -> Result<String, RunError> {
        let config: Config = serde_json::from_str(config).map_err(|e| format!("invalid config: {e}"))?;
        // Everything is checked before the first write.
        let plan = plan(&config, &list::parse(input)?)?;
        let resources = Root::open(RESOURCES)?;
        let manifests = Root::open(MANIFESTS)?;

        let mut lines = vec![format!("installer: {} revision {}", config.pod, config.revision)];
        for (path, files) in plan.resources {
            let r = resources.sync(&path, files).map_err(|e| format!("{path}: {e}"))?;
            lines.push(format!("{path}: {} ({} written, {} removed)", r.outcome, r.written, r.removed));
        }
        for s in plan.skipped {
            durasync_guest::info!("{s}: optional, not in the input, skipped");
            lines.push(format!("{s}: optional, not in the input, skipped"));
        }
        // The revision's own copy first, the kubelet's copy last: the
        // kubelet must never see a manifest whose resources are not durable.
        let copy = format!("{}/{}", plan.revision_dir, plan.manifest_name);
        let r = resources.write_file(&copy, &plan.manifest, 0o600).map_err(|e| format!("{copy}: {e}"))?;
        lines.push(format!("{copy}: {}", r.outcome));
        let r = manifests
            .write_file(&plan.manifest_name, &plan.manifest, 0o600)
            .map_err(|e| format!("manifests/{}: {e}", plan.manifest_name))?;
        lines.push(format!("manifests/{}: {}", plan.manifest_name, r.outcome));
        Ok(lines.join("\n"))
    }
}

durasync_guest::export_plugin!(Installer);

#[cfg(test)]
mod tests;
