//! `/status`: what a node holds, per instance, in one JSON document (served
//! on the metrics address; `durasync status` reads it). Prometheus has the
//! counts; this has the facts a person asks for first: which plugin, when
//! it last ran and committed, what its trees are now (a digest per root),
//! what it still owes, what drifted, what was refused last.
//!
//! [`InstanceStatus`] is a plain struct: a new fact is one field (and the
//! line that fills it in `Instance::status` in `agent/instance.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::hooks::Ledger;

/// The longest message kept for a run or a refusal (the log has the rest).
pub const MAX_MESSAGE_CHARS: usize = 512;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The agent's version.
    pub version: String,
    /// Its config directory.
    pub config_dir: PathBuf,
    /// When it started (RFC 3339, UTC).
    pub started: String,
    /// Every instance, in manifest file order.
    pub instances: Vec<InstanceStatus>,
}

/// One instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// The plugin's name (the file name when it never loaded).
    pub instance: String,
    /// Its manifest.
    pub file: PathBuf,
    /// Why it is not ready (as `/readyz` says), if it is not.
    pub problem: Option<String>,
    /// The plugin running now, if one loaded.
    pub plugin: Option<PluginStatus>,
    /// The last run that ended.
    pub last_run: Option<RunStatus>,
    /// The last run that committed a change.
    pub last_commit: Option<CommitStatus>,
    /// Actions owed by committed changes, not yet run successfully.
    pub owed_actions: Vec<OwedAction>,
    /// The drift watch.
    pub drift: DriftStatus,
    /// The last change refused (validator, guardrail, policy).
    pub last_refusal: Option<Refusal>,
    /// Changes on probation now: each one's previous tree is kept until
    /// its probe passes, or swapped back when the window ends.
    #[serde(default)]
    pub probations: Vec<ProbationStatus>,
    /// Contents that failed their probe and were reverted: refused until
    /// the input changes.
    #[serde(default)]
    pub failed_probes: Vec<FailedProbe>,
}

/// A change on probation (from the instance's ledger).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbationStatus {
    /// `ROOT:PATH` of the change.
    pub target: String,
    /// The probe that decides it.
    pub probe: String,
    /// The new contents' digest.
    pub digest: String,
    /// When it went on probation (RFC 3339).
    pub since: String,
    /// When its window ends (RFC 3339).
    pub until: String,
    /// Whether a previous tree is kept to go back to.
    pub kept: bool,
}

/// Contents that failed their probe (from the instance's ledger).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedProbe {
    /// `ROOT:PATH` of the change.
    pub target: String,
    /// The probe that failed.
    pub probe: String,
    /// The contents' digest.
    pub digest: String,
    /// When it failed (RFC 3339).
    pub at: String,
    /// The end of the probe's output.
    pub output: String,
}

/// RFC 3339 of a ledger's Unix milliseconds.
fn ms(at_ms: u64) -> String {
    rfc3339(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(at_ms))
}

/// Which plugin an instance runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginStatus {
    /// The manifest's `wasm`: a file or an `oci://` reference.
    pub reference: String,
    /// The component's sha256.
    pub sha256: String,
    /// The OCI manifest digest it was pulled by.
    pub manifest_digest: Option<String>,
    /// Who signed, when signatures were verified: each key as `FILE (key id
    /// HEX)`, each keyless certificate as `IDENTITY (issuer …, LOG log index
    /// N)`, joined by `; `.
    pub signed_by: Option<String>,
    /// Whose code runs: `cranelift`, or `winch` on a first start while
    /// Cranelift's compile of it runs in the background (swapped in before
    /// the first run after that compile is stored).
    #[serde(default)]
    pub compiler: Option<String>,
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    /// When it ended (RFC 3339).
    pub at: String,
    /// What started it (`start`, `interval`, `input`, `drift`, …).
    pub trigger: String,
    /// How it ended (`ok`, `rejected`, `trap`, …).
    pub result: String,
    /// How long it took.
    pub elapsed_ms: f64,
    /// Its operations, counted by outcome.
    pub operations: String,
    /// The plugin's result or the error (first [`MAX_MESSAGE_CHARS`]).
    pub message: String,
}

/// The last commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitStatus {
    /// When the run that committed ended (RFC 3339).
    pub at: String,
    /// Per root written since the agent started: the digest of its tree
    /// after that root's last commit ([`root_digest`]), or why there is none.
    pub roots: BTreeMap<String, String>,
}

/// An owed action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedAction {
    /// The action's name.
    pub action: String,
    /// Its ledger sequence number.
    pub seq: u64,
}

/// The drift watch of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftStatus {
    /// `repair`, `report` or `off`.
    pub mode: String,
    /// Targets watched.
    pub targets: usize,
    /// Directories that could not be watched (over the bound).
    pub unwatched_dirs: usize,
    /// Drift reports so far.
    pub seen: u64,
    /// When drift was last reported (RFC 3339).
    pub last_at: Option<String>,
    /// The paths of the last report.
    pub last_paths: Vec<PathBuf>,
    /// How many more paths the last report counted.
    pub last_more: u64,
    /// Drift was reported and no successful run started since.
    pub unrepaired: bool,
}

/// A refused change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// When (RFC 3339).
    pub at: String,
    /// Who refused it (`validator NAME`, `guard min_files`, `policy`).
    pub by: String,
    /// Why.
    pub message: String,
}

/// RFC 3339 (UTC, seconds) of `t`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `message`, cut at [`MAX_MESSAGE_CHARS`].
pub fn bounded(message: &str) -> String {
    let m = message.trim();
    match m.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &m[..i]),
        None => m.to_owned(),
    }
}

/// What `/status` serves, replaced by the agent's loop after every change;
/// the owed actions are read from each ledger when asked.
pub struct Board {
    config_dir: PathBuf,
    started: SystemTime,
    instances: Mutex<Vec<(InstanceStatus, Option<Arc<Ledger>>)>>,
}

impl Board {
    /// An empty board for an agent on `config_dir`, started now.
    pub fn new(config_dir: PathBuf) -> Board {
        Board { config_dir, started: SystemTime::now(), instances: Mutex::default() }
    }

    /// Replace the snapshot.
    pub fn set(&self, instances: Vec<(InstanceStatus, Option<Arc<Ledger>>)>) {
        *self.instances.lock().unwrap_or_else(|p| p.into_inner()) = instances;
    }

    /// The document now.
    pub fn snapshot(&self) -> NodeStatus {
        let instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        NodeStatus {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            config_dir: self.config_dir.clone(),
            started: rfc3339(self.started),
            instances: instances
                .iter()
                .map(|(s, ledger)| {
                    let mut s = s.clone();
                    if let Some(l) = ledger {
                        s.owed_actions =
                            l.owed().into_iter().map(|(action, seq)| OwedAction { action, seq }).collect();
                        s.probations = l
                            .probations()
                            .into_iter()
                            .map(|r| ProbationStatus {
                                target: format!("{}:{}", r.root, r.path),
                                probe: r.probe,
                                digest: r.digest,
                                since: ms(r.opened_ms),
                                until: ms(r.until_ms),
                                kept: r.kept,
                            })
                            .collect();
                        s.failed_probes = l
                            .failures()
                            .into_iter()
                            .map(|f| FailedProbe {
                                target: format!("{}:{}", f.root, f.path),
                                probe: f.probe,
                                digest: f.digest,
                                at: ms(f.at_ms),
                                output: f.tail,
                            })
                            .collect();
                    }
                    s
                })
                .collect(),
        }
    }

    /// The JSON body of `/status`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.snapshot()).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// The digest of the tree under `root` ([`crate::digest::tree_digest`]: the
/// same digest a probation holds the change to), or why there is none.
pub fn root_digest(root: &Path) -> Result<String, String> {
    use rustix::fs::{Mode, OFlags};
    let parent = match root.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = root.file_name().and_then(|n| n.to_str()).ok_or("a root whose name is not UTF-8")?;
    let fd = rustix::fs::open(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{}: {e}", parent.display()))?;
    crate::digest::tree_digest(std::os::fd::AsFd::as_fd(&fd), name, &root.display().to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_digest_follows_contents_names_and_modes_and_ignores_durasync_s_own_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        std::fs::create_dir_all(r.join("secrets/tls")).unwrap();
        std::fs::write(r.join("secrets/tls/tls.crt"), "crt").unwrap();
        std::fs::set_permissions(r.join("secrets/tls/tls.crt"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let d0 = root_digest(r).unwrap();
        assert!(d0.starts_with("sha256:") && d0.len() == 7 + 64, "{d0}");
        std::fs::write(r.join(".durasync.lock"), "").unwrap();
        std::fs::create_dir(r.join("secrets/.durasync-stage-0123456789abcdef")).unwrap();
        assert_eq!(root_digest(r).unwrap(), d0, "durasync's own entries are not the tree");
        std::fs::write(r.join("secrets/tls/tls.crt"), "crx").unwrap();
        let d1 = root_digest(r).unwrap();
        assert_ne!(d1, d0);
        std::fs::set_permissions(r.join("secrets/tls/tls.crt"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        assert_ne!(root_digest(r).unwrap(), d1);
        std::fs::write(r.join("secrets/tls/tls.crt"), "crt").unwrap();
        std::fs::set_permissions(r.join("secrets/tls/tls.crt"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert_eq!(root_digest(r).unwrap(), d0, "the same tree again gives the same digest");
        assert!(root_digest(&r.join("missing")).unwrap_err().contains("missing"));
    }

    #[test]
    fn messages_are_cut_at_their_bound() {
        assert_eq!(bounded(" short "), "short");
        let long = "é".repeat(MAX_MESSAGE_CHARS + 5);
        let b = bounded(&long);
        assert_eq!(b.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(b.ends_with('…'));
    }
}
