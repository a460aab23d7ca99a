//! Plugins from OCI registries: references, pulling (tag → manifest digest
//! → the one wasm layer, every digest checked), pushing, and the
//! content-addressed cache beside the compile cache.
//!
//! This module fetches; it does not decide what to trust (that is
//! [`crate::runtime::trust`], which holds a [`Registry`] and asks it for
//! manifests, signatures and layers). Every blob it hands out matches the
//! digest it was asked for; **note well**: a tag's manifest is whatever the
//! registry says the tag is now — only a digest in the reference, a pinned
//! sha256 or a signature makes it trustworthy, and that is checked by the
//! caller.
//!
//! Limits: manifests and blobs have a size cap (checked against the
//! descriptor before fetching and counted while streaming), every request a
//! timeout, every failure that may pass a bounded number of attempts with
//! exponential back-off. A node that holds a digest needs no registry: a
//! digest reference is served from the cache without any network I/O, and
//! a tag whose registry cannot be reached falls back to the digest it last
//! resolved to.

mod http;
pub mod layout;
pub mod reference;
mod store;
pub mod tls;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use self::http::{Body, Http};
pub use self::layout::{Descriptor, ImageManifest};
pub use self::reference::Reference;
use self::store::{Expect, Store};
use crate::services::limits::human_bytes;

/// How registries are reached.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The compile cache's directory: blobs go to `<dir>/oci/`. `None`: a
    /// private temporary directory, removed when the [`Registry`] is dropped.
    pub cache_dir: Option<PathBuf>,
    /// Connect, read and write timeout of each request (a stall longer than
    /// this fails the attempt).
    pub timeout: Duration,
    /// Attempts per request (connection failures, timeouts, 5xx, 429).
    pub attempts: u32,
    /// The pause before the second attempt; doubled for each later one.
    pub backoff: Duration,
    /// The largest manifest accepted.
    pub max_manifest_bytes: u64,
    /// The largest component (wasm layer) accepted.
    pub max_blob_bytes: u64,
    /// Registries (`host` or `host:port`) reached over plain HTTP besides
    /// loopback ones.
    pub insecure: Vec<String>,
    /// Extra CA certificates (PEM files) trusted for registries' TLS,
    /// besides the web PKI roots: a private registry's own CA.
    pub ca_files: Vec<PathBuf>,
    /// `(REGISTRY, MIRROR)`: pull `REGISTRY/REPO` from `MIRROR/REPO` (an
    /// air-gapped node's registry). References, cache keys and the trust
    /// checks keep the original name; digests and signatures make the
    /// mirror as trustworthy as the original.
    pub mirrors: Vec<(String, String)>,
}

/// The default timeout of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts per request by default.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// 4 MiB: what the OCI distribution spec asks registries to accept; a
/// plugin's manifest is under 1 KiB.
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// 256 MiB: the largest plugins seen (interpreters bundled into a
/// component) are under 20 MiB; a registry must not fill the disk.
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 256 << 20;
/// A cosign payload is a few hundred bytes.
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cache_dir: None,
            timeout: DEFAULT_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
            backoff: Duration::from_millis(500),
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
            max_blob_bytes: DEFAULT_MAX_BLOB_BYTES,
            insecure: env_list(INSECURE_ENV),
            ca_files: env_list(CA_ENV).into_iter().map(PathBuf::from).collect(),
            mirrors: env_list("DURASYNC_REGISTRY_MIRRORS")
                .into_iter()
                .filter_map(|m| {
                    let (from, to) = m.split_once('=')?;
                    Some((from.trim().to_owned(), to.trim().to_owned()))
                })
                .collect(),
        }
    }
}

/// The registries (comma-separated `host` or `host:port`) reached over
/// plain HTTP besides loopback ones.
pub const INSECURE_ENV: &str = "DURASYNC_INSECURE_REGISTRIES";
/// Extra CA files (comma-separated paths) for registries' TLS.
pub const CA_ENV: &str = "DURASYNC_REGISTRY_CA";

/// A comma-separated environment variable, empty items dropped.
fn env_list(name: &str) -> Vec<String> {
    std::env::var(name)
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Everything pulling and pushing can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference does not parse.
    #[error("invalid reference {reference:?}: {reason}")]
    InvalidReference {
        /// The text.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// The registry could not be reached (connection, TLS, timeout).
    #[error("cannot reach {url}: {reason}")]
    Network {
        /// The request.
        url: String,
        /// Why.
        reason: String,
    },
    /// A TLS handshake failed: the certificate is not trusted (its
    /// problem named), or the registry does not speak TLS.
    #[error("TLS to {url}: {reason}")]
    Tls {
        /// The request.
        url: String,
        /// What was wrong, and what to do.
        reason: String,
    },
    /// An extra CA file cannot be used.
    #[error("registry CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A transfer broke off (a stall past the timeout, a reset).
    #[error("reading {what}: {reason}")]
    Transfer {
        /// What was being read.
        what: String,
        /// Why it stopped.
        reason: String,
    },
    /// The registry answered with an unexpected status.
    #[error("{url}: the registry answered {status}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Status {
        /// The request.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of its body, and a hint.
        detail: String,
    },
    /// The registry holds no such tag, digest or blob.
    #[error("{what} not found in the registry")]
    NotFound {
        /// What was asked for.
        what: String,
    },
    /// A manifest is not one durasync can read.
    #[error("manifest {digest}: {reason}")]
    BadManifest {
        /// Its digest.
        digest: String,
        /// What is wrong.
        reason: String,
    },
    /// A config or layer of a media type a plugin artifact does not have.
    #[error("manifest {digest}: media type {media_type} {reason}")]
    MediaType {
        /// The manifest's digest.
        digest: String,
        /// The media type found.
        media_type: String,
        /// Why it is refused.
        reason: String,
    },
    /// Not exactly one wasm layer.
    #[error("manifest {digest} has {count} wasm layers; a plugin artifact has exactly one")]
    WasmLayers {
        /// The manifest's digest.
        digest: String,
        /// How many it has.
        count: usize,
    },
    /// A manifest or blob is larger than its limit.
    #[error("{what} is larger than the limit of {}", human_bytes(*limit))]
    TooLarge {
        /// What.
        what: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// Content whose digest is not the one asked for.
    #[error("{what}: the registry sent content whose digest is {actual}, not {expected}; refusing it")]
    DigestMismatch {
        /// What ("manifest", "layer").
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// The blob cache cannot be used.
    #[error("blob cache {path}: {reason}")]
    Cache {
        /// The file or directory.
        path: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// A failure that may pass: worth another attempt.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Network { .. } | Error::Transfer { .. } => true,
            Error::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// Content that was refused (not a fetching failure): a digest that
    /// does not match, a media type, a layer count, a size over a limit, a
    /// manifest that does not parse, a reference that does not.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::InvalidReference { .. }
                | Error::BadManifest { .. }
                | Error::MediaType { .. }
                | Error::WasmLayers { .. }
                | Error::TooLarge { .. }
                | Error::DigestMismatch { .. }
        )
    }
}

/// A manifest, resolved and held.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Its digest: computed from its bytes (and equal to the reference's
    /// digest when it names one).
    pub digest: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Parsed.
    pub manifest: ImageManifest,
    /// Served from the cache because the registry could not be reached.
    pub offline: bool,
}

/// What a push produced.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's digest.
    pub digest: String,
    /// The component's digest (`sha256:` + its sha256).
    pub layer: String,
}

/// A registry client with its blob cache.
pub struct Registry {
    http: Http,
    store: Store,
    settings: Settings,
}

impl Registry {
    /// A client; creates the cache directories (0700) when needed and reads
    /// the extra CA files (an error names a file that cannot be used).
    pub fn new(settings: Settings) -> Result<Registry, Error> {
        let store = Store::new(settings.cache_dir.as_deref())?;
        Ok(Registry { http: Http::new(&settings)?, store, settings })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn url(&self, r: &Reference, kind: &str, target: &str) -> String {
        format!("{}/v2/{}/{kind}/{target}", self.http.base(&r.registry), r.repository)
    }

    fn scope(r: &Reference, push: bool) -> String {
        format!("repository:{}:{}", r.repository, if push { "pull,push" } else { "pull" })
    }

    /// The manifest `r` names. A digest reference held in the cache is
    /// served without network I/O, and checked against its digest either
    /// way. A tag is resolved by the registry; when the registry cannot be
    /// reached (after the retries), the digest it last resolved to is used
    /// if held, with `offline` set.
    ///
    /// Note well: this checks that a manifest is the one its digest names;
    /// it does not check who made it (see `trust`).
    pub fn resolve(&self, r: &Reference) -> Result<Resolved, Error> {
        if let Some(digest) = &r.digest {
            if let Some(bytes) = self.store.read(digest, self.settings.max_manifest_bytes) {
                return Self::parsed(digest, bytes, false);
            }
            let (bytes, actual) =
                self.fetch_manifest(r, digest)?.ok_or_else(|| Error::NotFound { what: r.to_string() })?;
            if &actual != digest {
                return Err(Error::DigestMismatch {
                    what: "manifest".into(),
                    expected: digest.clone(),
                    actual,
                });
            }
            self.store.put(digest, &bytes)?;
            return Self::parsed(digest, bytes, false);
        }
        let tag = r.tag.as_deref().unwrap_or("latest");
        let key = format!("{}:{tag}", r.name());
        match self.fetch_manifest(r, tag) {
            Ok(Some((bytes, digest))) => {
                self.store.put(&digest, &bytes)?;
                self.store.set_tag(&key, &digest);
                Self::parsed(&digest, bytes, false)
            }
            Ok(None) => Err(Error::NotFound { what: r.to_string() }),
            Err(e) if e.is_retryable() => {
                let cached = self.store.tag(&key).and_then(|d| {
                    let bytes = self.store.read(&d, self.settings.max_manifest_bytes)?;
                    Some((d, bytes))
                });
                match cached {
                    Some((digest, bytes)) => {
                        tracing::warn!("registry unreachable ({e}); {r} resolves to {digest} from the cache");
                        Self::parsed(&digest, bytes, true)
                    }
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn parsed(digest: &str, bytes: Vec<u8>, offline: bool) -> Result<Resolved, Error> {
        let manifest = ImageManifest::parse(&bytes, digest)?;
        Ok(Resolved { digest: digest.to_owned(), bytes, manifest, offline })
    }

    /// GET a manifest (`None`: 404) and its computed digest.
    fn fetch_manifest(&self, r: &Reference, target: &str) -> Result<Option<(Vec<u8>, String)>, Error> {
        let url = self.url(r, "manifests", target);
        let limit = self.settings.max_manifest_bytes;
        self.http.send(
            "GET",
            &url,
            &r.registry,
            &Self::scope(r, false),
            &[("Accept", layout::ACCEPT)],
            &Body::Empty,
            &[200],
            |resp| {
                let declared = resp.header("content-length").and_then(|l| l.parse::<u64>().ok());
                if declared.is_some_and(|l| l > limit) {
                    return Err(Error::TooLarge { what: format!("manifest {r}"), limit });
                }
                let mut bytes = Vec::new();
                resp.into_reader().take(limit + 1).read_to_end(&mut bytes).map_err(|e| Error::Transfer {
                    what: format!("manifest {url}"),
                    reason: e.to_string(),
                })?;
                if bytes.len() as u64 > limit {
                    return Err(Error::TooLarge { what: format!("manifest {r}"), limit });
                }
                let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
                Ok((bytes, digest))
            },
        )
    }

    /// The bytes of blob `desc` of repository `r` (see [`Registry::blob_file`]).
    pub fn blob(&self, r: &Reference, desc: &Descriptor, limit: u64, what: &str) -> Result<Vec<u8>, Error> {
        let path = self.blob_file(r, desc, limit, what)?;
        // Re-hashed by `read`: the bytes handed out are the digest's.
        self.store.read(&desc.digest, limit).ok_or_else(|| Error::Cache {
            path: path.display().to_string(),
            reason: "the blob just verified cannot be read back".into(),
        })
    }

    /// The cache file of blob `desc` of repository `r`, held already
    /// (re-hashed as a stream) or streamed into the cache now, checked
    /// against its digest and `limit` (the descriptor's size is checked
    /// before anything is fetched). Memory does not grow with the blob.
    pub fn blob_file(
        &self,
        r: &Reference,
        desc: &Descriptor,
        limit: u64,
        what: &str,
    ) -> Result<PathBuf, Error> {
        layout::check_descriptor(desc)?;
        if desc.size > limit {
            return Err(Error::TooLarge {
                what: format!("{what} {} ({} bytes)", desc.digest, desc.size),
                limit,
            });
        }
        if let Some(path) = self.store.verified_path(&desc.digest, limit) {
            return Ok(path);
        }
        let url = self.url(r, "blobs", &desc.digest);
        self.http
            .send("GET", &url, &r.registry, &Self::scope(r, false), &[], &Body::Empty, &[200], |resp| {
                let expect = Expect { digest: &desc.digest, limit: limit.min(desc.size), what };
                self.store.write(&expect, &mut resp.into_reader())
            })?
            .ok_or_else(|| Error::NotFound { what: format!("{what} {} of {r}", desc.digest) })
    }

    /// cosign's signature manifest for `manifest_digest` (the
    /// `sha256-<hex>.sig` tag), `None` when there is none. When the
    /// registry cannot be reached, the one last seen for this digest is
    /// used if held.
    pub fn signature_manifest(
        &self,
        r: &Reference,
        manifest_digest: &str,
    ) -> Result<Option<Resolved>, Error> {
        let tag = format!("{}.sig", manifest_digest.replace(':', "-"));
        let sig_ref = r.with_tag(&tag);
        match self.resolve(&sig_ref) {
            Ok(res) => {
                self.store.set_signature(manifest_digest, &res.digest);
                Ok(Some(res))
            }
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) if e.is_retryable() => match self.store.signature(manifest_digest) {
                Some(d) => self.resolve(&r.with_digest(&d)).map(Some),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Push `wasm` as a plugin artifact (the CNCF layout: a
    /// `application/vnd.wasm.config.v0+json` config and one
    /// `application/wasm` layer) to `r`'s tag (or only by digest).
    pub fn push(&self, wasm: &Path, r: &Reference) -> Result<Pushed, Error> {
        let io =
            |e: std::io::Error| Error::Transfer { what: wasm.display().to_string(), reason: e.to_string() };
        // Hash by streaming: the component is never held in memory whole.
        let mut file = std::fs::File::open(wasm).map_err(io)?;
        let mut hasher = Sha256::new();
        let size = std::io::copy(&mut file, &mut hasher).map_err(io)?;
        let layer = format!("sha256:{}", hex::encode(hasher.finalize()));
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer],
        })
        .to_string()
        .into_bytes();
        let config_digest = format!("sha256:{}", hex::encode(Sha256::digest(&config)));
        self.upload(r, &config_digest, &Body::Bytes(&config, "application/octet-stream"))?;
        self.upload(r, &layer, &Body::File(wasm, size))?;
        let manifest = ImageManifest {
            schema_version: 2,
            media_type: Some(layout::OCI_MANIFEST.into()),
            config: Descriptor {
                media_type: layout::WASM_CONFIG.into(),
                digest: config_digest,
                size: config.len() as u64,
                annotations: Default::default(),
            },
            layers: vec![Descriptor {
                media_type: layout::WASM_LAYER.into(),
                digest: layer.clone(),
                size,
                annotations: Default::default(),
            }],
            annotations: Default::default(),
        };
        let bytes = serde_json::to_vec(&manifest).expect("a manifest serializes");
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        let target = r.tag.clone().unwrap_or_else(|| digest.clone());
        if let Some(d) = &r.digest
            && d != &digest
        {
            return Err(Error::DigestMismatch {
                what: "pushed manifest".into(),
                expected: d.clone(),
                actual: digest,
            });
        }
        let url = self.url(r, "manifests", &target);
        self.http
            .send(
                "PUT",
                &url,
                &r.registry,
                &Self::scope(r, true),
                &[],
                &Body::Bytes(&bytes, layout::OCI_MANIFEST),
                &[200, 201],
                |_| Ok(()),
            )?
            .ok_or_else(|| Error::NotFound { what: format!("repository {}", r.name()) })?;
        Ok(Pushed { digest, layer })
    }

    /// Upload one blob unless the registry has it (monolithic upload: POST
    /// for a location, PUT the bytes with their digest).
    fn upload(&self, r: &Reference, digest: &str, body: &Body<'_>) -> Result<(), Error> {
        let scope = Self::scope(r, true);
        let head = self.url(r, "blobs", digest);
        if self
            .http
            .send("HEAD", &head, &r.registry, &scope, &[], &Body::Empty, &[200], |_| Ok(()))?
            .is_some()
        {
            return Ok(());
        }
        let start = format!("{}/v2/{}/blobs/uploads/", self.http.base(&r.registry), r.repository);
        let location = self
            .http
            .send(
                "POST",
                &start,
                &r.registry,
                &scope,
                &[],
                &Body::Bytes(&[], "application/octet-stream"),
                &[202],
                |resp| {
                    resp.header("location").map(str::to_owned).ok_or_else(|| Error::Status {
                        url: start.clone(),
                        status: 202,
                        detail: "no Location header for the upload".into(),
                    })
                },
            )?
            .ok_or_else(|| Error::NotFound { what: format!("repository {}", r.name()) })?;
        let location = if location.starts_with('/') {
            format!("{}{location}", self.http.base(&r.registry))
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        self.http
            .send("PUT", &put, &r.registry, &scope, &[], body, &[201, 204], |_| Ok(()))?
            .ok_or_else(|| Error::NotFound { what: format!("upload {location}") })?;
        Ok(())
    }
}
