//! The distribution commands: `pull` (fill the blob cache, print the
//! digests to pin, verify when keys are given) and `push` (the vendor side).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;

use durasync::runtime::distribution::{self, Reference, Registry, Settings};
use durasync::runtime::manifest::read_key;
use durasync::runtime::trust::{self, Policy};
use durasync::runtime::{self, CacheConfig, Runtime};

use super::exit;

/// Registries' TLS and plain HTTP, for every command that may pull
/// (`pull`, `push`, `run`, `compile`, `inspect`, `agent`), added to the
/// environment's `DURASYNC_REGISTRY_CA` and `DURASYNC_INSECURE_REGISTRIES`.
#[derive(Debug, Args, Clone, Default)]
pub struct TlsArgs {
    /// A PEM file of CA certificates trusted for registries' TLS besides the web PKI roots (a private
    /// registry's CA). Repeatable; adds to DURASYNC_REGISTRY_CA (comma-separated files).
    #[arg(long = "registry-ca", value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    /// A registry (`host` or `host:port`) reached over plain HTTP; loopback registries always are.
    /// Repeatable; adds to DURASYNC_INSECURE_REGISTRIES (comma-separated).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    pub insecure_registries: Vec<String>,
    /// The longest a whole pull from a registry may take, in seconds (every request, retry and
    /// redirect of it; an agent's instance stays `loading` no longer). Default: 300.
    #[arg(long = "registry-deadline", value_name = "SECONDS")]
    pub registry_deadline: Option<u64>,
}

impl TlsArgs {
    /// `settings` with these flags added to what the environment gave;
    /// every CA file is read now, so a bad one is reported before anything
    /// else is done (its path and what is wrong with it).
    pub fn apply(&self, mut settings: Settings) -> Result<Settings> {
        settings.ca_files.extend(self.registry_ca.iter().cloned());
        settings.insecure.extend(self.insecure_registries.iter().cloned());
        if let Some(secs) = self.registry_deadline {
            settings.deadline = Duration::from_secs(secs.max(1));
        }
        distribution::tls::extra_roots(&settings.ca_files)?;
        Ok(settings)
    }
}

/// How a registry is reached (shared by `pull` and `push`).
#[derive(Debug, Args, Clone)]
pub struct RegistryArgs {
    /// Timeout of each request, in seconds: a transfer that stalls longer fails the attempt, and a
    /// manifest or token request must complete within it (a blob, within --registry-deadline).
    #[arg(long, value_name = "SECONDS", default_value_t = distribution::DEFAULT_TIMEOUT.as_secs())]
    pub timeout: u64,
    /// Attempts per request (connection failures, timeouts, 5xx, 429), with exponential back-off.
    #[arg(long, value_name = "N", default_value_t = distribution::DEFAULT_ATTEMPTS)]
    pub attempts: u32,
    /// The largest component accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = distribution::DEFAULT_MAX_BLOB_BYTES)]
    pub max_bytes: u64,
    /// Where blobs are cached (default `$XDG_CACHE_HOME/durasync`, beside compiled plugins).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

impl RegistryArgs {
    /// The settings these flags give (an error names a bad CA file).
    pub fn settings(&self) -> Result<Settings> {
        self.tls.apply(Settings {
            cache_dir: self.cache_config().dir(),
            timeout: Duration::from_secs(self.timeout.max(1)),
            attempts: self.attempts.max(1),
            max_blob_bytes: self.max_bytes,
            ..Settings::default()
        })
    }

    /// The compile cache these flags name.
    pub fn cache_config(&self) -> CacheConfig {
        self.cache_dir.clone().map_or(CacheConfig::Default, CacheConfig::Dir)
    }
}

/// `durasync pull REF`
#[derive(Debug, Args)]
pub struct PullArgs {
    /// `oci://REGISTRY/REPO:TAG` or `…@sha256:…` (the `oci://` is optional).
    pub reference: String,
    /// A cosign public key (PEM): the manifest must carry a valid signature
    /// by one of the keys given.
    #[arg(long = "key", value_name = "FILE")]
    pub keys: Vec<PathBuf>,
    /// Sigstore's trusted root (`trusted_root.json`): keyless bundles are
    /// verified against its CAs and logs, offline.
    #[arg(long = "trusted-root", value_name = "FILE")]
    pub trusted_root: Option<PathBuf>,
    /// The OIDC issuer a keyless signer's certificate must name (with
    /// --certificate-identity or --certificate-identity-regexp; cosign's flags).
    #[arg(long = "certificate-oidc-issuer", value_name = "URL", requires = "trusted_root")]
    pub issuer: Option<String>,
    /// The signer's identity (the certificate's SAN URI or email), exactly.
    #[arg(long = "certificate-identity", value_name = "SUBJECT", requires = "issuer")]
    pub subject: Option<String>,
    /// A regular expression the signer's identity must match (unanchored: use `^…$`).
    #[arg(
        long = "certificate-identity-regexp",
        value_name = "REGEX",
        requires = "issuer",
        conflicts_with = "subject"
    )]
    pub subject_regex: Option<String>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `durasync push FILE.wasm REF`
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component.
    pub wasm: PathBuf,
    /// `oci://REGISTRY/REPO:TAG` (the `oci://` is optional).
    pub reference: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Parse a reference given on the command line (a usage error when bad).
pub fn reference(text: &str) -> Result<Reference> {
    Reference::parse(text).map_err(|e| anyhow::Error::new(exit::Status(exit::USAGE)).context(e.to_string()))
}

/// The policy given by `--key` flags.
pub fn key_policy(keys: &[PathBuf]) -> Result<Policy> {
    let mut policy = Policy::default();
    for k in keys {
        let key = read_key(k)
            .map_err(|why| anyhow::Error::new(exit::Status(exit::POLICY)).context(format!("--key {why}")))?;
        policy.keys.push(key);
    }
    Ok(policy)
}

pub fn pull(args: &PullArgs) -> Result<()> {
    let r = reference(&args.reference)?;
    let mut policy = key_policy(&args.keys)?;
    let refuse = |why: String| anyhow::Error::new(exit::Status(exit::POLICY)).context(why);
    if let Some(path) = &args.trusted_root {
        let root = trust::TrustedRoot::read(path).map_err(|w| refuse(format!("--trusted-root {w}")))?;
        policy.trusted_root = Some(std::sync::Arc::new(root));
    }
    if let Some(issuer) = &args.issuer {
        let identity = trust::Identity::new(issuer, args.subject.as_deref(), args.subject_regex.as_deref())
            .map_err(|w| refuse(format!("--certificate-identity: {w}")))?;
        policy.identities.push(identity);
    }
    let registry =
        Registry::new(args.registry.settings()?).map_err(trust::Error::from).map_err(runtime::Error::from)?;
    let v = trust::fetch_component(&registry, &r, &policy).map_err(runtime::Error::from)?;
    let pinned = r.with_digest(&v.manifest_digest);
    if args.json {
        let out = json!({
            "reference": r.to_string(),
            "manifest_digest": v.manifest_digest,
            "sha256": v.sha256,
            "bytes": v.size,
            "signed_by": v.signed_by,
            "offline": v.offline,
            "pinned": pinned.to_string(),
        });
        println!("{out}");
    } else {
        println!("reference:       {r}");
        println!("manifest digest: {}", v.manifest_digest);
        println!("sha256:          {}", v.sha256);
        println!("size:            {} bytes", v.size);
        if let Some(k) = &v.signed_by {
            println!("signed by:       {k}");
        }
        if v.offline {
            println!("offline:         the registry could not be reached; served from the cache");
        }
        println!("pin it with:     wasm = \"{pinned}\"");
    }
    Ok(())
}

pub fn push(args: &PushArgs) -> Result<()> {
    let r = reference(&args.reference)?;
    if r.tag.is_none() {
        return Err(anyhow::Error::new(exit::Status(exit::USAGE))
            .context(format!("{r}: push needs a tag (`:TAG`); the digest is printed after the push")));
    }
    // Only a component the host would load is worth publishing: the import
    // policy is checked from the binary (no compile) before any upload.
    let wasm = std::fs::read(&args.wasm).with_context(|| format!("reading {}", args.wasm.display()))?;
    Runtime::check_policy(&args.wasm.display().to_string(), &wasm)?;
    drop(wasm);
    let registry =
        Registry::new(args.registry.settings()?).map_err(trust::Error::from).map_err(runtime::Error::from)?;
    let pushed = registry.push(&args.wasm, &r).map_err(trust::Error::from).map_err(runtime::Error::from)?;
    println!("pushed {r}");
    println!("manifest digest: {}", pushed.digest);
    println!("sha256:          {}", pushed.layer.trim_start_matches("sha256:"));
    println!("pin it with:     wasm = \"{}\"", r.with_digest(&pushed.digest));
    Ok(())
}
