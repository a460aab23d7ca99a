//! The plugin manifest, `plugin.toml`: which component to load (pinned by
//! its sha256), which roots it may use and how, its limits and its config.
//!
//! ```toml
//! name = "certsync"                 # required
//! wasm = "certsync.wasm"            # required, relative to the manifest's directory,
//!                                   # or "oci://REGISTRY/REPO:TAG" / "oci://REGISTRY/REPO@sha256:…"
//! sha256 = "<64 lowercase hex>"     # required for a file; a mismatch refuses to load
//! flush = "auto"                    # optional: "auto", "fsync" or "syncfs" (durable::Flush)
//! [verify]                          # oci:// only: cosign signature policy
//! keys = ["vendor.pub"]             # PEM public keys; a signature by any one suffices, or
//! # keys = [{ path = "new.pub", not_before = "2026-01-01T00:00:00Z", not_after = "…" }]
//! annotations = { channel = "stable" }  # optional: required payload annotations
//! require = "any"                   # optional: "any" (default) or "all"; or threshold = N
//! revoked_keys = ["<sha256 hex of a key's DER>"]  # optional: these keys' signatures never count
//! revoked_digests = ["sha256:…"]    # optional: manifest or component digests always refused
//! [roots.certs]                     # one table per granted root
//! path = "/var/lib/certs"           # absolute, or relative to the manifest's directory
//! access = "rw"                     # "rw" or "ro"
//! special_modes = false             # allow setuid, setgid, sticky bits (default false)
//! owner = "root"                    # optional: owner of every file written ("keep", a name or an id)
//! group = "kube"                    # optional: group of every file written (same forms)
//! label = "keep"                    # optional: SELinux label: "keep" (default), "kernel" or a context
//! preserve = ["xattrs", "acl"]      # optional: carry the replaced file's xattrs and POSIX ACLs
//! layout = "exchange"               # optional: "symlink" where RENAME_EXCHANGE fails (overlayfs, NFS, FUSE)
//! [limits]                          # all optional
//! fuel = 10_000_000_000             # or "unlimited"
//! timeout_ms = 30_000
//! memory_bytes = 268_435_456
//! write_bytes = 1_073_741_824
//! write_files = 100_000
//! log_bytes = 1_048_576
//! output_bytes = 1_048_576
//! call_bytes = 67_108_864           # data handed to the host in one call
//! read_bytes = 16_777_216           # bytes one read-file may return
//! [config]                          # any table, handed to the plugin's `run` as JSON
//! # and the operator's hooks: `[[validate]]`, `roots.NAME.min_files`, … (`crate::hooks::config`)
//! ```
//!
//! An `oci://` component needs trust: a `sha256` pin, a digest in the
//! reference or a `[verify]` table (refused at parse time, before any
//! network I/O, otherwise).
//!
//! Parsing is strict: an unknown key or a value of the wrong type or range
//! is an error that names the key (`limits.fuel`), so a typo never silently
//! falls back to a default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::distribution::Reference;
use super::distribution::reference::SCHEME;
use super::errors::Error;
use super::trust::{self, PublicKey};
use crate::hooks::{HookSpec, config};
pub use crate::services::Access;
use crate::services::PluginLimits;

/// One granted root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// The host directory (already resolved against the manifest's folder).
    pub path: PathBuf,
    /// How the plugin may use it.
    pub access: Access,
    /// Whether the plugin may give files setuid, setgid and sticky bits
    /// there (`special_modes = true`; refused by default).
    pub special_modes: bool,
    /// What every inode written there gets besides bytes and mode (`owner`,
    /// `group`, `label`, `preserve`); a plugin cannot choose it.
    pub attrs: crate::durable::Attrs,
    /// How a sync replaces a directory there (`layout`: `exchange` by
    /// default, or `symlink` where `RENAME_EXCHANGE` fails; see
    /// `durable::layout`).
    pub layout: crate::durable::Layout,
}

/// A parsed, validated manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Where the manifest was read from.
    pub source: PathBuf,
    /// The plugin's name (log field, reports).
    pub name: String,
    /// Where the component comes from.
    pub wasm: Component,
    /// The pinned sha256 of the component, 64 lowercase hex digits
    /// (always present for a file).
    pub sha256: Option<String>,
    /// The `[verify]` table: cosign keys and required annotations.
    pub verify: Verify,
    /// Granted roots by name.
    pub roots: BTreeMap<String, Root>,
    /// Limits, defaults filled in.
    pub limits: PluginLimits,
    /// The `[config]` table as JSON (`{}` when absent).
    pub config_json: String,
    /// How the plugin's syncs make staged trees durable (`flush`); `None`:
    /// the runner's default (`durasync run --flush`, `durasync agent
    /// --flush`, else `auto`).
    pub flush: Option<crate::durable::Flush>,
    /// Validators and guardrails (`[[validate]]`, `roots.NAME.min_files`, …).
    pub hooks: HookSpec,
}

/// Where a component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Component {
    /// A local file (resolved against the manifest's folder).
    File(PathBuf),
    /// An OCI artifact.
    Oci(Reference),
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Component::File(p) => write!(f, "{}", p.display()),
            Component::Oci(r) => write!(f, "{r}"),
        }
    }
}

/// The `[verify]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verify {
    /// cosign public keys.
    pub keys: Vec<PublicKey>,
    /// Annotations the signature payload must carry.
    pub annotations: BTreeMap<String, String>,
    /// Keyless signers accepted.
    pub identities: Vec<trust::Identity>,
    /// The trusted root for keyless bundles (and key-signed bundles' log entries).
    pub trusted_root: Option<std::sync::Arc<trust::TrustedRoot>>,
    /// How many distinct keys and identities must have signed.
    pub require: trust::Require,
    /// Revoked key ids.
    pub revoked_keys: Vec<String>,
    /// Revoked manifest and component digests.
    pub revoked_digests: Vec<String>,
}

/// The most keys a `[verify]` table may list.
pub const MAX_KEYS: usize = 32;
/// The most identities a `[verify]` table may list.
pub const MAX_IDENTITIES: usize = 32;
/// The most entries `revoked_keys` and `revoked_digests` may each list.
pub const MAX_REVOKED: usize = 1024;
/// The largest public key file read.
const MAX_KEY_BYTES: u64 = 16 * 1024;

const TOP_KEYS: &[&str] = &[
    "name", "wasm", "sha256", "flush", "verify", "roots", "limits", "config", "validate", "action", "probe",
];
const VERIFY_KEYS: &[&str] = &[
    "keys",
    "annotations",
    "identities",
    "trusted_root",
    "require",
    "threshold",
    "revoked_keys",
    "revoked_digests",
];
const KEY_KEYS: &[&str] = &["path", "not_before", "not_after"];
const IDENTITY_KEYS: &[&str] = &["issuer", "subject", "subject_regex", "not_before", "not_after"];
const ROOT_KEYS: &[&str] = &[
    "path",
    "access",
    "special_modes",
    "owner",
    "group",
    "label",
    "preserve",
    "layout",
    "min_files",
    "max_removed_fraction",
];
const LIMIT_KEYS: &[&str] = &[
    "fuel",
    "timeout_ms",
    "memory_bytes",
    "write_bytes",
    "write_files",
    "log_bytes",
    "output_bytes",
    "call_bytes",
    "read_bytes",
];

impl Manifest {
    /// The validators, guardrails and actions of one run of this manifest,
    /// over its roots.
    pub fn run_hooks(&self) -> crate::hooks::RunHooks {
        let roots = self.roots.iter().map(|(n, r)| (n.clone(), r.path.clone())).collect();
        crate::hooks::RunHooks::new(std::sync::Arc::new(self.hooks.clone()), roots)
    }

    /// The one precedence rule for `flush`: a command line's `--flush`
    /// (`durasync run`, `durasync agent`) wins over the manifest's own
    /// `flush`, which wins over `auto`.
    pub fn override_flush(&mut self, command_line: Option<crate::durable::Flush>) {
        if let Some(flush) = command_line {
            self.flush = Some(flush);
        }
    }

    /// Read and validate the manifest at `path`.
    pub fn load(path: &Path) -> Result<Manifest, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Io { what: format!("reading manifest {}", path.display()), source: e })?;
        Manifest::parse(&text, path)
    }

    /// Validate manifest `text`; relative paths are resolved against the
    /// folder of `source`.
    pub fn parse(text: &str, source: &Path) -> Result<Manifest, Error> {
        let bad = |key: &str, why: String| Error::Manifest {
            manifest: source.display().to_string(),
            key: key.to_owned(),
            reason: why,
        };
        let table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| bad("(syntax)", e.message().to_owned()))?;
        check_keys(&table, "", TOP_KEYS).map_err(|k| bad(&k, unknown(TOP_KEYS)))?;
        let base = source.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() { PathBuf::from(".") } else { base };

        let name = required_str(&table, "name").map_err(|w| bad("name", w))?;
        if name.trim().is_empty() || name.chars().any(char::is_control) {
            return Err(bad("name", "must be a non-empty name without control characters".into()));
        }
        let wasm = required_str(&table, "wasm").map_err(|w| bad("wasm", w))?;
        if wasm.is_empty() {
            return Err(bad("wasm", "must name the component file".into()));
        }
        let component = if wasm.starts_with(SCHEME) {
            Component::Oci(Reference::parse(&wasm).map_err(|e| bad("wasm", e.to_string()))?)
        } else {
            Component::File(base.join(&wasm))
        };
        let sha256 = match (&component, table.get("sha256")) {
            (Component::Oci(_), None) => None,
            _ => {
                let sha256 = required_str(&table, "sha256").map_err(|w| bad("sha256", w))?;
                if sha256.len() != 64 || !sha256.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    return Err(bad("sha256", "must be 64 lowercase hexadecimal digits".into()));
                }
                Some(sha256)
            }
        };
        let verify = match table.get("verify") {
            None => Verify::default(),
            Some(_) if matches!(component, Component::File(_)) => {
                return Err(bad(
                    "verify",
                    "applies only to an `oci://` component (a file is pinned by sha256)".into(),
                ));
            }
            Some(toml::Value::Table(t)) => parse_verify(t, &base).map_err(|(k, w)| bad(&k, w))?,
            Some(_) => return Err(bad("verify", "must be a table".into())),
        };
        if let Component::Oci(r) = &component {
            let policy = trust::Policy {
                sha256: sha256.clone(),
                keys: verify.keys.clone(),
                identities: verify.identities.clone(),
                ..trust::Policy::default()
            };
            policy.require_trust(r).map_err(|e| bad("wasm", e.to_string()))?;
        }

        let mut roots = BTreeMap::new();
        let mut guards = Vec::new();
        match table.get("roots") {
            None => {}
            Some(toml::Value::Table(t)) => {
                for (root_name, value) in t {
                    let key = format!("roots.{root_name}");
                    check_root_name(root_name).map_err(|w| bad(&key, w))?;
                    let toml::Value::Table(rt) = value else {
                        return Err(bad(&key, "must be a table with `path` and `access`".into()));
                    };
                    check_keys(rt, &key, ROOT_KEYS).map_err(|k| bad(&k, unknown(ROOT_KEYS)))?;
                    let path_key = format!("{key}.path");
                    let p = required_str(rt, "path").map_err(|w| bad(&path_key, w))?;
                    if p.is_empty() {
                        return Err(bad(&path_key, "must name a directory".into()));
                    }
                    let access_key = format!("{key}.access");
                    let access = match required_str(rt, "access").map_err(|w| bad(&access_key, w))?.as_str() {
                        "rw" => Access::ReadWrite,
                        "ro" => Access::ReadOnly,
                        other => {
                            return Err(bad(&access_key, format!("must be \"rw\" or \"ro\", not {other:?}")));
                        }
                    };
                    let special_modes = match rt.get("special_modes") {
                        None => false,
                        Some(toml::Value::Boolean(b)) => *b,
                        Some(other) => {
                            return Err(bad(
                                &format!("{key}.special_modes"),
                                format!("must be true or false, not {}", other.type_str()),
                            ));
                        }
                    };
                    let attrs = parse_root_attrs(rt, &key).map_err(|(k, w)| bad(&k, w))?;
                    let layout = match rt.get("layout") {
                        None => crate::durable::Layout::default(),
                        Some(toml::Value::String(s)) => {
                            s.parse().map_err(|w| bad(&format!("{key}.layout"), w))?
                        }
                        Some(other) => {
                            return Err(bad(
                                &format!("{key}.layout"),
                                format!("must be \"exchange\" or \"symlink\", not {}", other.type_str()),
                            ));
                        }
                    };
                    guards.push((
                        root_name.clone(),
                        config::parse_guard(rt, &key).map_err(|(k, w)| bad(&k, w))?,
                    ));
                    roots.insert(
                        root_name.clone(),
                        Root { path: base.join(p), access, special_modes, attrs, layout },
                    );
                }
            }
            Some(_) => return Err(bad("roots", "must be a table of `[roots.NAME]` tables".into())),
        }

        let mut limits = PluginLimits::default();
        match table.get("limits") {
            None => {}
            Some(toml::Value::Table(t)) => {
                check_keys(t, "limits", LIMIT_KEYS).map_err(|k| bad(&k, unknown(LIMIT_KEYS)))?;
                for (k, v) in t {
                    let key = format!("limits.{k}");
                    if k == "fuel" && v.as_str() == Some("unlimited") {
                        limits.fuel = None;
                        continue;
                    }
                    let n = positive(v).map_err(|w| bad(&key, w))?;
                    match k.as_str() {
                        "fuel" => limits.fuel = Some(n),
                        "timeout_ms" => limits.timeout_ms = n,
                        "memory_bytes" => limits.memory_bytes = n,
                        "write_bytes" => limits.write_bytes = n,
                        "write_files" => limits.write_files = n,
                        "log_bytes" => limits.log_bytes = n,
                        "output_bytes" => limits.output_bytes = n,
                        "call_bytes" => limits.call_bytes = n,
                        "read_bytes" => limits.read_bytes = n,
                        _ => unreachable!("checked by check_keys"),
                    }
                }
            }
            Some(_) => return Err(bad("limits", "must be a table".into())),
        }

        let config_json = match table.get("config") {
            None => "{}".to_owned(),
            Some(v @ toml::Value::Table(_)) => serde_json::to_string(v)
                .map_err(|e| bad("config", format!("cannot be turned into JSON: {e}")))?,
            Some(_) => return Err(bad("config", "must be a table".into())),
        };

        let flush = match table.get("flush") {
            None => None,
            Some(toml::Value::String(s)) => Some(s.parse().map_err(|w| bad("flush", w))?),
            Some(other) => return Err(bad("flush", format!("must be a string, not {}", other.type_str()))),
        };

        let root_names: Vec<&str> = roots.keys().map(String::as_str).collect();
        let validators =
            config::parse_validators(table.get("validate"), &root_names).map_err(|(k, w)| bad(&k, w))?;
        let actions =
            config::parse_actions(table.get("action"), &root_names, &base).map_err(|(k, w)| bad(&k, w))?;
        let probes = config::parse_probes(table.get("probe"), &root_names).map_err(|(k, w)| bad(&k, w))?;
        // A probe's rollback needs the previous contents kept, which the
        // symlink layout does not do yet (`durable::layout`).
        if let Some(p) = probes.iter().find(|p| roots[&p.root].layout == crate::durable::Layout::Symlink) {
            return Err(bad(
                &format!("roots.{}.layout", p.root),
                format!(
                    "\"symlink\" cannot be used with the probe {:?} on this root: a probe's rollback keeps the \
                     previous contents, which this layout does not do yet",
                    p.name
                ),
            ));
        }
        let hooks = HookSpec { validators, guards: config::guards(guards), actions, probes };

        Ok(Manifest {
            hooks,
            flush,
            source: source.to_path_buf(),
            name,
            wasm: component,
            sha256,
            verify,
            roots,
            limits,
            config_json,
        })
    }

    /// The trust policy of an `oci://` component.
    pub fn policy(&self) -> trust::Policy {
        trust::Policy {
            sha256: self.sha256.clone(),
            keys: self.verify.keys.clone(),
            annotations: self.verify.annotations.clone(),
            identities: self.verify.identities.clone(),
            trusted_root: self.verify.trusted_root.clone(),
            require: self.verify.require,
            revoked_keys: self.verify.revoked_keys.clone(),
            revoked_digests: self.verify.revoked_digests.clone(),
        }
    }

    /// Point root `name` at `path` (`--root NAME=PATH`), keeping its access,
    /// or grant it read-write when the manifest does not name it.
    pub fn override_root(&mut self, name: &str, path: PathBuf) -> Result<(), Error> {
        check_root_name(name).map_err(|why| Error::Manifest {
            manifest: "--root".into(),
            key: name.to_owned(),
            reason: why,
        })?;
        let (access, special_modes, attrs, layout) = self
            .roots
            .get(name)
            .map_or((Access::ReadWrite, false, Default::default(), Default::default()), |r| {
                (r.access, r.special_modes, r.attrs.clone(), r.layout)
            });
        self.roots.insert(name.to_owned(), Root { path, access, special_modes, attrs, layout });
        Ok(())
    }
}

/// A root's `owner`, `group`, `label` and `preserve` (see `durable::attrs`):
/// names are looked up now, so an unknown user is a manifest error naming
/// the key.
fn parse_root_attrs(rt: &toml::Table, key: &str) -> Result<crate::durable::Attrs, (String, String)> {
    use crate::durable::attrs::{parse_id, parse_label};
    let mut attrs = crate::durable::Attrs::default();
    let text = |name: &str| -> Result<Option<String>, (String, String)> {
        match rt.get(name) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(toml::Value::Integer(i)) if name != "label" => Ok(Some(i.to_string())),
            Some(other) => {
                Err((format!("{key}.{name}"), format!("must be a string, not {}", other.type_str())))
            }
        }
    };
    if let Some(v) = text("owner")? {
        attrs.owner = parse_id(&v, "owner").map_err(|w| (format!("{key}.owner"), w))?;
    }
    if let Some(v) = text("group")? {
        attrs.group = parse_id(&v, "group").map_err(|w| (format!("{key}.group"), w))?;
    }
    if let Some(v) = text("label")? {
        attrs.label = parse_label(&v).map_err(|w| (format!("{key}.label"), w))?;
    }
    match rt.get("preserve") {
        None => {}
        Some(toml::Value::Array(items)) => {
            for item in items {
                match item.as_str() {
                    Some("xattrs") => attrs.xattrs = true,
                    Some("acl") => attrs.acl = true,
                    _ => {
                        return Err((
                            format!("{key}.preserve"),
                            format!("may list only \"xattrs\" and \"acl\", not {item}"),
                        ));
                    }
                }
            }
        }
        Some(other) => {
            return Err((
                format!("{key}.preserve"),
                format!("must be a list such as [\"xattrs\", \"acl\"], not {}", other.type_str()),
            ));
        }
    }
    Ok(attrs)
}

/// The `[verify]` table: keys read and parsed now, so a bad key file is a
/// manifest error naming it.
fn parse_verify(t: &toml::Table, base: &Path) -> Result<Verify, (String, String)> {
    check_keys(t, "verify", VERIFY_KEYS).map_err(|k| (k, unknown(VERIFY_KEYS)))?;
    let mut verify = Verify::default();
    match t.get("keys") {
        None if t.contains_key("identities") => {}
        None => {
            return Err((
                "verify.keys".into(),
                "is required unless `identities` is given: a list of cosign public key files".into(),
            ));
        }
        Some(toml::Value::Array(a)) if !a.is_empty() && a.len() <= MAX_KEYS => {
            for (i, v) in a.iter().enumerate() {
                let name = format!("verify.keys[{i}]");
                let (p, window) = match v {
                    toml::Value::String(p) => (p.as_str(), trust::Window::default()),
                    toml::Value::Table(t) => {
                        check_keys(t, &name, KEY_KEYS).map_err(|k| (k, unknown(KEY_KEYS)))?;
                        let Some(p) = t.get("path").and_then(|p| p.as_str()) else {
                            return Err((format!("{name}.path"), "is required: the key file's name".into()));
                        };
                        (p, window(t, &name)?)
                    }
                    other => {
                        return Err((
                            name,
                            format!(
                                "must be a file name or a `{{ path, not_before, not_after }}` table, not {}",
                                other.type_str()
                            ),
                        ));
                    }
                };
                let path = base.join(p);
                let mut key = read_key(&path).map_err(|w| (name, w))?;
                key.window = window;
                verify.keys.push(key);
            }
        }
        Some(_) => {
            return Err(("verify.keys".into(), format!("must be a list of 1 to {MAX_KEYS} key files")));
        }
    }
    match t.get("annotations") {
        None => {}
        Some(toml::Value::Table(a)) => {
            for (k, v) in a {
                let Some(v) = v.as_str() else {
                    return Err((
                        format!("verify.annotations.{k}"),
                        format!("must be a string, not {}", v.type_str()),
                    ));
                };
                verify.annotations.insert(k.clone(), v.to_owned());
            }
        }
        Some(_) => return Err(("verify.annotations".into(), "must be a table of strings".into())),
    }
    match t.get("trusted_root") {
        None => {}
        Some(toml::Value::String(p)) => {
            let root =
                trust::TrustedRoot::read(&base.join(p)).map_err(|w| ("verify.trusted_root".to_owned(), w))?;
            verify.trusted_root = Some(std::sync::Arc::new(root));
        }
        Some(other) => {
            return Err((
                "verify.trusted_root".into(),
                format!("must be a file name, not {}", other.type_str()),
            ));
        }
    }
    match t.get("identities") {
        None => {}
        Some(toml::Value::Array(a)) if !a.is_empty() && a.len() <= MAX_IDENTITIES => {
            if verify.trusted_root.is_none() {
                return Err((
                    "verify.trusted_root".into(),
                    "is required with `identities`: the Sigstore trusted_root.json keyless signatures \
                     are checked against"
                        .into(),
                ));
            }
            for (i, v) in a.iter().enumerate() {
                let key = format!("verify.identities[{i}]");
                let Some(it) = v.as_table() else {
                    return Err((key, "must be a table `{ issuer = \"…\", subject_regex = \"…\" }`".into()));
                };
                check_keys(it, &key, IDENTITY_KEYS).map_err(|k| (k, unknown(IDENTITY_KEYS)))?;
                let text = |k: &str| match it.get(k) {
                    None => Ok(None),
                    Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
                    Some(other) => {
                        Err((format!("{key}.{k}"), format!("must be a string, not {}", other.type_str())))
                    }
                };
                let issuer = text("issuer")?.unwrap_or_default();
                let mut identity = trust::Identity::new(issuer, text("subject")?, text("subject_regex")?)
                    .map_err(|w| (key.clone(), w))?;
                identity.window = window(it, &key)?;
                verify.identities.push(identity);
            }
        }
        Some(_) => {
            return Err((
                "verify.identities".into(),
                format!(
                    "must be a list of 1 to {MAX_IDENTITIES} `{{ issuer, subject | subject_regex }}` tables"
                ),
            ));
        }
    }
    let signers = verify.keys.len() + verify.identities.len();
    verify.require = match (t.get("require"), t.get("threshold")) {
        (Some(_), Some(_)) => {
            return Err(("verify.threshold".into(), "cannot be given with `require`: use one".into()));
        }
        (None, None) => trust::Require::Any,
        (Some(toml::Value::String(r)), None) if r == "any" => trust::Require::Any,
        (Some(toml::Value::String(r)), None) if r == "all" => trust::Require::All,
        (Some(_), None) => {
            return Err((
                "verify.require".into(),
                "must be \"any\" or \"all\" (or give `threshold = N` instead)".into(),
            ));
        }
        (None, Some(toml::Value::Integer(n)))
            if *n >= 1 && usize::try_from(*n).is_ok_and(|n| n <= signers) =>
        {
            trust::Require::Threshold(usize::try_from(*n).unwrap_or(1))
        }
        (None, Some(_)) => {
            return Err((
                "verify.threshold".into(),
                format!("must be a whole number from 1 to {signers} (the keys and identities listed)"),
            ));
        }
    };
    verify.revoked_keys = hex_list(t, "revoked_keys", "", "the sha256 of a key's DER public key")?;
    verify.revoked_digests = hex_list(t, "revoked_digests", "sha256:", "a manifest or component digest")?;
    Ok(verify)
}

/// A `not_before`/`not_after` window of table `t` (`name` names it).
fn window(t: &toml::Table, name: &str) -> Result<trust::Window, (String, String)> {
    let mut text = [None, None];
    for (slot, field) in text.iter_mut().zip(["not_before", "not_after"]) {
        *slot = match t.get(field) {
            None => None,
            Some(toml::Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                return Err((
                    format!("{name}.{field}"),
                    format!("must be an RFC 3339 time string, not {}", other.type_str()),
                ));
            }
        };
    }
    trust::Window::parse(text[0], text[1]).map_err(|(field, why)| (format!("{name}.{field}"), why))
}

/// `[verify] KEY`: up to [`MAX_REVOKED`] strings, each `prefix` and 64
/// lowercase hex digits.
fn hex_list(t: &toml::Table, key: &str, prefix: &str, what: &str) -> Result<Vec<String>, (String, String)> {
    let name = format!("verify.{key}");
    let Some(v) = t.get(key) else { return Ok(Vec::new()) };
    let Some(a) = v.as_array().filter(|a| a.len() <= MAX_REVOKED) else {
        return Err((name, format!("must be a list of at most {MAX_REVOKED} strings")));
    };
    let mut out = Vec::with_capacity(a.len());
    for (i, v) in a.iter().enumerate() {
        let hex = v.as_str().and_then(|s| s.strip_prefix(prefix));
        match hex {
            Some(h) if h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
                out.push(format!("{prefix}{h}"));
            }
            _ => {
                return Err((
                    format!("{name}[{i}]"),
                    format!("must be {prefix}<64 lowercase hex digits>: {what}"),
                ));
            }
        }
    }
    Ok(out)
}

/// Read a cosign public key file (PEM), with a size limit.
pub fn read_key(path: &Path) -> Result<PublicKey, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_KEY_BYTES).read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    PublicKey::from_pem(&text, &path.display().to_string()).map_err(|w| format!("{}: {w}", path.display()))
}

fn unknown(known: &[&str]) -> String {
    format!("unknown key (known keys: {})", known.join(", "))
}

/// The first key of `table` not in `known`, as a dotted key.
fn check_keys(table: &toml::Table, prefix: &str, known: &[&str]) -> Result<(), String> {
    match table.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) if prefix.is_empty() => Err(k.clone()),
        Some(k) => Err(format!("{prefix}.{k}")),
        None => Ok(()),
    }
}

fn required_str(table: &toml::Table, key: &str) -> Result<String, String> {
    match table.get(key) {
        None => Err("is required".into()),
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("must be a string, not {}", other.type_str())),
    }
}

fn positive(v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(n) if *n > 0 => Ok(*n as u64),
        toml::Value::Integer(n) => Err(format!("must be a positive integer, not {n}")),
        other => Err(format!("must be a positive integer, not {}", other.type_str())),
    }
}

fn check_root_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("a root name must be 1 to 64 characters".into());
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err("a root name may hold only ASCII letters, digits, `-` and `_`".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "abababababababababababababababababababababababababababababababab";

    fn parse(text: &str) -> Result<Manifest, Error> {
        Manifest::parse(text, Path::new("/etc/durasync/p/plugin.toml"))
    }

    #[test]
    fn a_full_manifest_parses_with_paths_beside_it() {
        let m = parse(&format!(
            "name = \"certsync\"\nwasm = \"c.wasm\"\nsha256 = \"{SHA}\"\n\
             [roots.certs]\npath = \"certs\"\naccess = \"ro\"\n\
             [limits]\nfuel = \"unlimited\"\ntimeout_ms = 5\n[config]\na = [1, 2]\n"
        ))
        .unwrap();
        assert_eq!(m.wasm, Component::File("/etc/durasync/p/c.wasm".into()));
        assert_eq!(
            m.roots["certs"],
            Root {
                path: "/etc/durasync/p/certs".into(),
                access: Access::ReadOnly,
                special_modes: false,
                attrs: Default::default(),
                layout: Default::default()
            }
        );
        assert_eq!(m.limits.fuel, None);
        assert_eq!(m.limits.timeout_ms, 5);
        assert_eq!(m.limits.memory_bytes, PluginLimits::default().memory_bytes);
        assert_eq!(m.config_json, r#"{"a":[1,2]}"#);
        assert_eq!(m.flush, None, "no `flush`: the runner's default");
    }

    #[test]
    fn a_roots_owner_group_label_and_preserve_parse_and_bad_ones_name_the_key() {
        use crate::durable::{IdRule, LabelRule};
        let head = format!(
            "name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n[roots.certs]\npath = \"c\"\naccess = \"rw\"\n"
        );
        let m = parse(&format!(
            "{head}owner = \"root\"\ngroup = 1000\nlabel = \"system_u:object_r:cert_t:s0\"\npreserve = [\"xattrs\", \"acl\"]\n"
        ))
        .unwrap();
        let attrs = &m.roots["certs"].attrs;
        assert_eq!((attrs.owner, attrs.group), (IdRule::Id(0), IdRule::Id(1000)));
        assert_eq!(attrs.label, LabelRule::Fixed("system_u:object_r:cert_t:s0".into()));
        assert!(attrs.xattrs && attrs.acl);
        let m = parse(&format!("{head}owner = \"keep\"\n")).unwrap();
        assert_eq!(m.roots["certs"].attrs.owner, IdRule::Keep);
        assert_eq!(m.roots["certs"].layout, crate::durable::Layout::Exchange, "the exchange, by default");
        let m = parse(&format!("{head}layout = \"symlink\"\n")).unwrap();
        assert_eq!(m.roots["certs"].layout, crate::durable::Layout::Symlink);
        let probed = format!(
            "{head}layout = \"symlink\"\n[[probe]]\nname = \"web\"\nroot = \"certs\"\nhttp = \"http://127.0.0.1:1/\"\n"
        );
        let e = parse(&probed).unwrap_err().to_string();
        assert!(e.contains("roots.certs.layout") && e.contains("probe \"web\""), "{e}");
        assert_eq!(
            m.roots["certs"].attrs.label,
            LabelRule::Keep,
            "the label of what it replaces, by default"
        );
        for (extra, key, says) in [
            ("owner = \"no-such-user-durasync\"", "roots.certs.owner", "no user named"),
            ("group = \"no-such-group-durasync\"", "roots.certs.group", "no group named"),
            ("owner = true", "roots.certs.owner", "must be a string"),
            ("label = \"etc_t\"", "roots.certs.label", "SELinux context"),
            ("preserve = [\"all\"]", "roots.certs.preserve", "only \"xattrs\" and \"acl\""),
            ("layout = \"swap\"", "roots.certs.layout", "exchange or symlink"),
            ("layout = 1", "roots.certs.layout", "must be \"exchange\" or \"symlink\""),
            ("preserve = \"xattrs\"", "roots.certs.preserve", "must be a list"),
        ] {
            let e = parse(&format!("{head}{extra}\n")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn the_flush_setting_parses_by_name() {
        for flush in
            [crate::durable::Flush::Auto, crate::durable::Flush::Fsync, crate::durable::Flush::Syncfs]
        {
            let m =
                parse(&format!("name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\nflush = \"{flush}\"\n"))
                    .unwrap();
            assert_eq!(m.flush, Some(flush));
        }
    }

    #[test]
    fn bad_manifests_name_the_key() {
        let head = format!("name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n");
        let table = [
            (format!("{head}colour = 1\n"), "colour"),
            (format!("{head}[limits]\nfule = 1\n"), "limits.fule"),
            (format!("{head}[limits]\nfuel = -1\n"), "limits.fuel"),
            (format!("{head}[limits]\ntimeout_ms = \"1s\"\n"), "limits.timeout_ms"),
            (format!("{head}[roots.c]\npath = \"/x\"\naccess = \"rwx\"\n"), "roots.c.access"),
            (format!("{head}[roots.c]\npath = \"/x\"\n"), "roots.c.access"),
            (format!("{head}[roots.c]\npath = \"/x\"\naccess = \"rw\"\nmode = 1\n"), "roots.c.mode"),
            (
                format!("{head}[roots.c]\npath = \"/x\"\naccess = \"rw\"\nspecial_modes = 1\n"),
                "roots.c.special_modes",
            ),
            (format!("{head}[limits]\ncall_bytes = 0\n"), "limits.call_bytes"),
            (format!("{head}[roots.\"a b\"]\npath = \"/x\"\naccess = \"rw\"\n"), "roots.a b"),
            (format!("{head}config = 3\n"), "config"),
            (format!("{head}flush = \"fdatasync\"\n"), "flush"),
            (format!("{head}flush = 1\n"), "flush"),
            ("wasm = \"x.wasm\"\n".to_owned(), "name"),
            (format!("name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{}\"\n", SHA.to_uppercase()), "sha256"),
        ];
        for (text, key) in table {
            let err = parse(&text).unwrap_err();
            let Error::Manifest { key: got, .. } = &err else { panic!("{text}: {err}") };
            assert_eq!(got, key, "{text}: {err}");
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn oci_components_need_trust_named_three_ways() {
        let err = parse("name = \"x\"\nwasm = \"oci://127.0.0.1:1/a/b:1\"\n").unwrap_err().to_string();
        for way in ["sha256 =", "@sha256:", "[verify]"] {
            assert!(err.contains(way), "{err}");
        }
        let m =
            parse(&format!("name = \"x\"\nwasm = \"oci://r.example/a:1\"\nsha256 = \"{SHA}\"\n")).unwrap();
        assert!(matches!(m.wasm, Component::Oci(_)));
        let by_digest = format!("name = \"x\"\nwasm = \"oci://r.example/a@sha256:{SHA}\"\n");
        assert_eq!(parse(&by_digest).unwrap().sha256, None);
        let err = parse(&format!("{by_digest}[verify]\nkeys = [\"missing.pub\"]\n")).unwrap_err();
        assert!(err.to_string().contains("verify.keys") && err.to_string().contains("missing.pub"), "{err}");
        let err = parse(&format!("{by_digest}[verify]\nkey = [\"a.pub\"]\n")).unwrap_err();
        assert!(err.to_string().contains("verify.key"), "{err}");
        let file =
            format!("name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n[verify]\nkeys = [\"a.pub\"]\n");
        assert!(parse(&file).unwrap_err().to_string().contains("oci://"));
    }

    #[test]
    fn verify_takes_key_windows_a_requirement_and_revocations_strictly() {
        use p256::pkcs8::EncodePublicKey as _;
        let dir = tempfile::tempdir().unwrap();
        for (seed, name) in [(1u8, "old.pub"), (2, "new.pub")] {
            let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).unwrap();
            let pem = sk.verifying_key().to_public_key_pem(Default::default()).unwrap();
            std::fs::write(dir.path().join(name), pem).unwrap();
        }
        let (old, new) = (dir.path().join("old.pub"), dir.path().join("new.pub"));
        let head = "name = \"x\"\nwasm = \"oci://r.example/a:1\"\n[verify]\n";
        let keys = format!(
            "keys = [\"{}\", {{ path = \"{}\", not_before = \"2026-01-01T00:00:00Z\" }}]\n",
            old.display(),
            new.display()
        );
        let revoked = format!("revoked_keys = [\"{SHA}\"]\nrevoked_digests = [\"sha256:{SHA}\"]\n");
        let m = parse(&format!("{head}{keys}require = \"all\"\n{revoked}")).unwrap();
        let policy = m.policy();
        assert_eq!(policy.keys.len(), 2);
        assert_eq!(policy.keys[0].window, trust::Window::default());
        assert_eq!(policy.keys[1].window.not_before, Some(1_767_225_600));
        assert_eq!(policy.require, trust::Require::All);
        assert_eq!(policy.revoked_keys, vec![SHA.to_owned()]);
        assert_eq!(policy.revoked_digests, vec![format!("sha256:{SHA}")]);
        assert_eq!(parse(&format!("{head}{keys}")).unwrap().policy().require, trust::Require::Any);
        let t = parse(&format!("{head}{keys}threshold = 2\n")).unwrap();
        assert_eq!(t.policy().require, trust::Require::Threshold(2));

        let why = |text: String| parse(&text).unwrap_err().to_string();
        let cases = [
            (format!("{keys}threshold = 3\n"), "verify.threshold", "1 to 2"),
            (format!("{keys}threshold = 0\n"), "verify.threshold", "1 to 2"),
            (format!("{keys}require = \"all\"\nthreshold = 1\n"), "verify.threshold", "with `require`"),
            (format!("{keys}require = \"most\"\n"), "verify.require", "\"any\" or \"all\""),
            (format!("{keys}revoked_keys = [\"abc\"]\n"), "verify.revoked_keys[0]", "64 lowercase hex"),
            (format!("{keys}revoked_digests = [\"{SHA}\"]\n"), "verify.revoked_digests[0]", "sha256:"),
            (format!("{keys}revoked_digests = \"sha256:{SHA}\"\n"), "verify.revoked_digests", "list"),
            (
                format!("keys = [{{ path = \"{}\", not_after = \"soon\" }}]\n", old.display()),
                "verify.keys[0].not_after",
                "RFC 3339",
            ),
            (
                format!("keys = [{{ path = \"{}\", until = \"x\" }}]\n", old.display()),
                "verify.keys[0].until",
                "unknown key",
            ),
            (
                "keys = [{ not_before = \"2026-01-01T00:00:00Z\" }]\n".to_owned(),
                "verify.keys[0].path",
                "required",
            ),
            ("keys = [1]\n".to_owned(), "verify.keys[0]", "not integer"),
        ];
        for (text, key, what) in cases {
            let e = why(format!("{head}{text}"));
            assert!(e.contains(key) && e.contains(what), "{text}: {e}");
        }
        let many: Vec<String> = (0..=MAX_REVOKED).map(|_| format!("\"{SHA}\"")).collect();
        let e = why(format!("{head}{keys}revoked_keys = [{}]\n", many.join(",")));
        assert!(e.contains("verify.revoked_keys") && e.contains("at most 1024"), "{e}");
    }

    #[test]
    fn keyless_identities_need_a_trusted_root_and_bad_ones_name_the_key() {
        use base64::Engine as _;
        use p256::pkcs8::EncodePublicKey as _;
        let dir = tempfile::tempdir().unwrap();
        let der = p256::ecdsa::SigningKey::from_slice(&[7; 32])
            .unwrap()
            .verifying_key()
            .to_public_key_der()
            .unwrap();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let root = dir.path().join("trusted_root.json");
        std::fs::write(
            &root,
            serde_json::json!({"tlogs": [{"baseUrl": "https://log", "publicKey": {"rawBytes": b64(der.as_bytes()),
                "validFor": {"start": "2020-01-01T00:00:00Z"}}, "logId": {"keyId": b64(&[1; 32])}}]})
            .to_string(),
        )
        .unwrap();
        let head = "name = \"x\"\nwasm = \"oci://r.example/a:1\"\n[verify]\n";
        let id = "identities = [{ issuer = \"https://i\", subject_regex = \"^https://github.com/v/\" }]\n";
        let tr = format!("trusted_root = \"{}\"\n", root.display());
        let m = parse(&format!("{head}{id}{tr}")).unwrap();
        let policy = m.policy();
        assert_eq!(policy.identities.len(), 1);
        assert_eq!(policy.trusted_root.as_ref().unwrap().logs.len(), 1);
        assert!(policy.keys.is_empty());
        let why = |text: String| parse(&text).unwrap_err().to_string();
        assert!(why(format!("{head}{id}")).contains("verify.trusted_root"));
        let e = why(format!("{head}identities = [{{ issuer = \"i\", subject_regex = \"(\" }}]\n{tr}"));
        assert!(e.contains("verify.identities[0]") && e.contains("subject_regex"), "{e}");
        let e = why(format!("{head}identities = [{{ issuer = \"i\", subject = \"s\", san = \"s\" }}]\n{tr}"));
        assert!(e.contains("verify.identities[0].san"), "{e}");
        let e = why(format!("{head}identities = []\n{tr}"));
        assert!(e.contains("verify.identities"), "{e}");
        let e = why(format!("{head}{id}trusted_root = \"missing.json\"\n"));
        assert!(e.contains("verify.trusted_root") && e.contains("missing.json"), "{e}");
        assert!(why(format!("{head}trusted_root = \"{}\"\n", root.display())).contains("verify.keys"));
    }

    #[test]
    fn hook_tables_parse_and_bad_ones_name_the_key() {
        use crate::hooks::ActionRun;
        let head = format!(
            "name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n[roots.c]\npath = \"/c\"\naccess = \"rw\"\n"
        );
        let m = parse(&format!(
            "{head}min_files = 2\n[[validate]]\nroot = \"c\"\ncommand = [\"/usr/bin/v\", \"{{staged}}\"]\n\
             [[action]]\nroot = \"c\"\npath = \"a/*\"\nsignal = \"SIGHUP\"\npidfile = \"p.pid\"\n"
        ))
        .unwrap();
        let v = &m.hooks.validators[0];
        assert_eq!((v.name.as_str(), v.path.as_str(), v.timeout_ms), ("v", "**", 30_000));
        let a = &m.hooks.actions[0];
        assert_eq!(a.name, "SIGHUP");
        assert_eq!(
            a.run,
            ActionRun::Signal { signal: "HUP".into(), pidfile: "/etc/durasync/p/p.pid".into() }
        );
        assert_eq!(m.hooks.guards["c"].min_files, Some(2));
        assert_eq!(m.hooks.actions_for("c", "a/b"), ["SIGHUP"]);
        assert!(m.hooks.actions_for("c", "b/a").is_empty());
        let cmd = "command = [\"v\"]\n";
        let table = [
            (format!("{head}[[validate]]\nroot = \"d\"\n{cmd}"), "validate[0].root"),
            (format!("{head}[[validate]]\nroot = \"c\"\n"), "validate[0].command"),
            (format!("{head}[[validate]]\nroot = \"c\"\n{cmd}timeout_ms = 0\n"), "validate[0].timeout_ms"),
            (format!("{head}[[validate]]\nroot = \"c\"\n{cmd}path = \"../x\"\n"), "validate[0].path"),
            (format!("{head}[[validate]]\nroot = \"c\"\n{cmd}cmd = 1\n"), "validate[0].cmd"),
            (
                format!("{head}[[validate]]\nroot = \"c\"\n{cmd}[[validate]]\nroot = \"c\"\n{cmd}"),
                "validate[1].name",
            ),
            (
                format!("{head}[[action]]\nroot = \"c\"\n{cmd}signal = \"HUP\"\npidfile = \"p\"\n"),
                "action[0]",
            ),
            (
                format!("{head}[[action]]\nroot = \"c\"\nsignal = \"KILL\"\npidfile = \"p\"\n"),
                "action[0].signal",
            ),
            (
                format!("{head}[[action]]\nroot = \"c\"\nurl = \"http://10.1.2.3/-/reload\"\n"),
                "action[0].url",
            ),
            (format!("{head}[[action]]\nroot = \"c\"\nurl = \"file:///x\"\n"), "action[0].url"),
            (format!("{head}[[action]]\nroot = \"c\"\nurl = \"http://[::1]/\"\n{cmd}"), "action[0]"),
            (format!("{head}[[action]]\nroot = \"c\"\n{cmd}method = \"GET\"\n"), "action[0].method"),
            (
                format!("{head}[[action]]\nroot = \"c\"\nurl = \"http://localhost/\"\nmethod = \"TRACE\"\n"),
                "action[0].method",
            ),
            (
                format!("{head}[[action]]\nroot = \"c\"\nurl = \"http://localhost/\"\nexpect = 99\n"),
                "action[0].expect",
            ),
            (
                format!("{head}[[action]]\nroot = \"c\"\nurl = \"http://localhost/\"\nexpect = []\n"),
                "action[0].expect",
            ),
            (
                format!("{head}[[action]]\nroot = \"c\"\nurl = \"http://localhost/\"\nallow_remote = 1\n"),
                "action[0].allow_remote",
            ),
            (format!("{head}max_removed_fraction = 2\n"), "roots.c.max_removed_fraction"),
            (format!("{head}min_files = -1\n"), "roots.c.min_files"),
            (format!("{head}validate = 1\n"), "roots.c.validate"),
        ];
        for (text, key) in table {
            let err = parse(&text).unwrap_err();
            let Error::Manifest { key: got, .. } = &err else { panic!("{text}: {err}") };
            assert_eq!(got, key, "{text}: {err}");
        }
    }

    #[test]
    fn an_http_action_parses_with_its_defaults_and_is_described() {
        use crate::hooks::ActionRun;
        let head = format!(
            "name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n[roots.c]\npath = \"/c\"\naccess = \"rw\"\n"
        );
        let m = parse(&format!(
            "{head}[[action]]\nroot = \"c\"\nurl = \"http://LOCALHOST:9090/-/reload\"\n\
             [[action]]\nname = \"envoy\"\nroot = \"c\"\nurl = \"https://10.0.0.5:9901/x\"\nallow_remote = true\n\
             method = \"put\"\nexpect = [200, 204]\n"
        ))
        .unwrap();
        let (a, b) = (&m.hooks.actions[0], &m.hooks.actions[1]);
        assert_eq!(a.name, "reload");
        assert_eq!(
            a.run,
            ActionRun::Http {
                method: "POST".into(),
                url: "http://localhost:9090/-/reload".into(),
                expect: vec![],
                allow_remote: false
            }
        );
        assert_eq!(
            b.run,
            ActionRun::Http {
                method: "PUT".into(),
                url: "https://10.0.0.5:9901/x".into(),
                expect: vec![200, 204],
                allow_remote: true
            }
        );
        assert_eq!(
            m.hooks.describe("c", "f"),
            [
                "action reload (after the change is durable): POST http://localhost:9090/-/reload (expects 2xx)",
                "action envoy (after the change is durable): PUT https://10.0.0.5:9901/x (expects 200 or 204)",
            ]
        );
    }

    #[test]
    fn root_overrides_keep_access_or_default_to_rw() {
        let mut m = parse(&format!(
            "name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n[roots.c]\npath = \"/c\"\naccess = \"ro\"\n"
        ))
        .unwrap();
        m.override_root("c", "/elsewhere".into()).unwrap();
        m.override_root("d", "/d".into()).unwrap();
        assert_eq!(
            m.roots["c"],
            Root {
                path: "/elsewhere".into(),
                access: Access::ReadOnly,
                special_modes: false,
                attrs: Default::default(),
                layout: Default::default()
            }
        );
        assert_eq!(m.roots["d"].access, Access::ReadWrite);
        assert!(m.override_root("../x", "/x".into()).is_err());
    }
}
