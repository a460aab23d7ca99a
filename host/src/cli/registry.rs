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
}

impl TlsArgs {
    /// `settings` with these flags added to what the environment gave;
    /// every CA file is read now, so a bad one is reported before anything
    /// else is done (its path and what is wrong with it).
    pub fn apply(&self, mut settings: Settings) -> Result<Settings> {
        settings.ca_files.extend(self.registry_ca.iter().cloned());
        settings.insecure.extend(self.insecure_registries.iter().cloned());
        distribution::tls::extra_roots(&settings.ca_files)?;
        Ok(settings)
    }
}

/// How a registry is reached (shared by `pull` and `push`).
#[derive(Debug, Args, Clone)]
pub struct RegistryArgs {
    /// Timeout of each request, in seconds (a transfer that stalls longer fails the attempt).
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
    let policy = key_policy(&args.keys)?;
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
