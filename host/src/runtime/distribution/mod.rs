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

pub(crate) mod http;
pub mod layout;
pub mod reference;
mod store;
pub mod tls;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

pub use self::http::Deadline;
use self::http::{Body, Http, Size};
/// The parsers of what a registry sends in its headers (plain functions of
/// strings, for tests and fuzzing): `WWW-Authenticate` parameters, a
/// `Location` resolved and checked, a token realm checked, a URL's
/// `host:port`.
pub use self::http::{authority, parse_challenge, realm_url, redirect_target};
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
    /// this fails the attempt), and the bound of a small request (manifest,
    /// token, HEAD) as a whole, redirects and body included.
    pub timeout: Duration,
    /// Attempts per request (connection failures, timeouts, 5xx, 429).
    pub attempts: u32,
    /// The longest a whole pull (or push) may take: every request, attempt
    /// and pause of it. A blob request is bounded by this alone (besides
    /// each read's `timeout`); a manifest, token or HEAD also by `timeout`
    /// as a whole.
    pub deadline: Duration,
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
/// The default deadline of a whole pull: 256 MiB (the largest blob
/// accepted) at under 1 MB/s; a plugin is usually a few MiB.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
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
            deadline: DEFAULT_DEADLINE,
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
    /// A request (its redirects and body included) took longer than the
    /// timeout (retried, within the pull's deadline).
    #[error("{url}: the request did not complete within {limit} (--timeout){last}")]
    TimedOut {
        /// The request.
        url: String,
        /// The bound (`30 s`).
        limit: String,
        /// The failure before, if any.
        last: String,
    },
    /// The pull (every attempt of every request) took longer than its
    /// deadline.
    #[error("{url}: stopped at the pull's deadline of {limit} (--registry-deadline){last}")]
    Deadline {
        /// The request under way.
        url: String,
        /// The deadline (`300 s`).
        limit: String,
        /// The failure before, if any.
        last: String,
    },
    /// A redirect that is not followed: no host, another scheme than
    /// http(s), HTTPS down to plain HTTP, too many.
    #[error("{url}: refused a redirect: {reason}")]
    Redirect {
        /// The request redirected.
        url: String,
        /// Why.
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
    /// A blob whose length is not the one its descriptor states.
    #[error(
        "{what} {digest}: its descriptor says {stated} bytes, but the blob is {actual} bytes; refusing it"
    )]
    SizeMismatch {
        /// What ("wasm layer").
        what: String,
        /// Its digest.
        digest: String,
        /// The descriptor's size.
        stated: u64,
        /// What came (`1234`, or `more than 1000` when cut off).
        actual: String,
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
            Error::Network { .. } | Error::Transfer { .. } | Error::TimedOut { .. } => true,
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
                | Error::SizeMismatch { .. }
        )
    }

    /// The registry could not be reached in time (after the retries, or at
    /// the pull's deadline): a tag may be served from the cache.
    fn is_unreachable(&self) -> bool {
        self.is_retryable() || matches!(self, Error::Deadline { .. })
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

    fn parsed(digest: &str, bytes: Vec<u8>, offline: bool) -> Result<Resolved, Error> {
        let manifest = ImageManifest::parse(&bytes, digest)?;
        Ok(Resolved { digest: digest.to_owned(), bytes, manifest, offline })
    }

    /// A pull, its deadline starting now.
    pub fn pull(&self) -> Pull<'_> {
        Pull { registry: self, deadline: Deadline::after(self.settings.deadline) }
    }

    /// Push `wasm` as a plugin artifact (the CNCF layout: a
    /// `application/vnd.wasm.config.v0+json` config and one
    /// `application/wasm` layer) to `r`'s tag (or only by digest).
    pub fn push(&self, wasm: &Path, r: &Reference) -> Result<Pushed, Error> {
        let deadline = Deadline::after(self.settings.deadline);
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
        self.upload(r, &config_digest, &Body::Bytes(&config, "application/octet-stream"), deadline)?;
        self.upload(r, &layer, &Body::File(wasm, size), deadline)?;
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
                &Self::scope(r, true),
                &[],
                &Body::Bytes(&bytes, layout::OCI_MANIFEST),
                &[200, 201],
                Size::Small,
                deadline,
                |_| Ok(()),
            )?
            .ok_or_else(|| Error::NotFound { what: format!("repository {}", r.name()) })?;
        Ok(Pushed { digest, layer })
    }

    /// Upload one blob unless the registry has it (monolithic upload: POST
    /// for a location, PUT the bytes with their digest).
    fn upload(&self, r: &Reference, digest: &str, body: &Body<'_>, deadline: Deadline) -> Result<(), Error> {
        let scope = Self::scope(r, true);
        let head = self.url(r, "blobs", digest);
        if self
            .http
            .send("HEAD", &head, &scope, &[], &Body::Empty, &[200], Size::Small, deadline, |_| Ok(()))?
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
                &scope,
                &[],
                &Body::Bytes(&[], "application/octet-stream"),
                &[202],
                Size::Small,
                deadline,
                |resp| {
                    resp.header("location").map(str::to_owned).ok_or_else(|| Error::Status {
                        url: start.clone(),
                        status: 202,
                        detail: "no Location header for the upload".into(),
                    })
                },
            )?
            .ok_or_else(|| Error::NotFound { what: format!("repository {}", r.name()) })?;
        // Checked like a redirect: an http(s) URL with a host, no downgrade.
        let location = http::redirect_target(&start, &location, &self.settings.insecure)
            .map_err(|reason| Error::Redirect { url: start.clone(), reason })?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        self.http
            .send("PUT", &put, &scope, &[], body, &[201, 204], Size::Stream, deadline, |_| Ok(()))?
            .ok_or_else(|| Error::NotFound { what: format!("upload {location}") })?;
        Ok(())
    }
}

/// One pull: every request of it (attempts, redirects, tokens, bodies)
/// ends by its deadline ([`Settings::deadline`], from [`Registry::pull`]).
pub struct Pull<'a> {
    registry: &'a Registry,
    deadline: Deadline,
}

impl Pull<'_> {
    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.registry.settings
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
            if let Some(bytes) = self.registry.store.read(digest, self.registry.settings.max_manifest_bytes) {
                return Registry::parsed(digest, bytes, false);
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
            self.registry.store.put(digest, &bytes)?;
            return Registry::parsed(digest, bytes, false);
        }
        let tag = r.tag.as_deref().unwrap_or("latest");
        let key = format!("{}:{tag}", r.name());
        match self.fetch_manifest(r, tag) {
            Ok(Some((bytes, digest))) => {
                self.registry.store.put(&digest, &bytes)?;
                self.registry.store.set_tag(&key, &digest);
                Registry::parsed(&digest, bytes, false)
            }
            Ok(None) => Err(Error::NotFound { what: r.to_string() }),
            Err(e) if e.is_unreachable() => {
                let cached = self.registry.store.tag(&key).and_then(|d| {
                    let bytes = self.registry.store.read(&d, self.registry.settings.max_manifest_bytes)?;
                    Some((d, bytes))
                });
                match cached {
                    Some((digest, bytes)) => {
                        tracing::warn!("registry unreachable ({e}); {r} resolves to {digest} from the cache");
                        Registry::parsed(&digest, bytes, true)
                    }
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// GET a manifest (`None`: 404) and its computed digest.
    fn fetch_manifest(&self, r: &Reference, target: &str) -> Result<Option<(Vec<u8>, String)>, Error> {
        let url = self.registry.url(r, "manifests", target);
        self.fetch_json(r, &url, layout::ACCEPT, &format!("manifest {r}"))
    }

    /// GET a manifest or index at `url` (`None`: 404), at most
    /// [`Settings::max_manifest_bytes`], and its computed digest.
    fn fetch_json(
        &self,
        r: &Reference,
        url: &str,
        accept: &str,
        what: &str,
    ) -> Result<Option<(Vec<u8>, String)>, Error> {
        let limit = self.registry.settings.max_manifest_bytes;
        self.registry.http.send(
            "GET",
            url,
            &Registry::scope(r, false),
            &[("Accept", accept)],
            &Body::Empty,
            &[200],
            Size::Small,
            self.deadline,
            |resp| {
                let declared = resp.header("content-length").and_then(|l| l.parse::<u64>().ok());
                if declared.is_some_and(|l| l > limit) {
                    return Err(Error::TooLarge { what: what.to_owned(), limit });
                }
                let mut bytes = Vec::new();
                resp.into_reader()
                    .take(limit + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| Error::Transfer { what: format!("{what} {url}"), reason: e.to_string() })?;
                if bytes.len() as u64 > limit {
                    return Err(Error::TooLarge { what: what.to_owned(), limit });
                }
                let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
                Ok((bytes, digest))
            },
        )
    }

    /// The bytes of blob `desc` of repository `r` (see [`Pull::blob_file`]).
    pub fn blob(&self, r: &Reference, desc: &Descriptor, limit: u64, what: &str) -> Result<Vec<u8>, Error> {
        let path = self.blob_file(r, desc, limit, what)?;
        // Re-hashed by `read`: the bytes handed out are the digest's.
        self.registry.store.read(&desc.digest, limit).ok_or_else(|| Error::Cache {
            path: path.display().to_string(),
            reason: "the blob just verified cannot be read back".into(),
        })
    }

    /// The cache file of blob `desc` of repository `r`, held already
    /// (re-hashed as a stream) or streamed into the cache now, checked
    /// against its digest, its descriptor's size (exactly) and `limit`
    /// (checked before anything is fetched). Memory does not grow with the blob.
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
        if let Some(path) = self.registry.store.verified_path(&desc.digest, limit) {
            // Held already: its length is checked all the same (a digest
            // held may come with a descriptor that lies about it).
            let held = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(u64::MAX);
            if held != desc.size {
                return Err(Error::SizeMismatch {
                    what: what.to_owned(),
                    digest: desc.digest.clone(),
                    stated: desc.size,
                    actual: held.to_string(),
                });
            }
            return Ok(path);
        }
        let url = self.registry.url(r, "blobs", &desc.digest);
        let scope = Registry::scope(r, false);
        self.registry
            .http
            .send("GET", &url, &scope, &[], &Body::Empty, &[200], Size::Stream, self.deadline, |resp| {
                let expect = Expect { digest: &desc.digest, size: desc.size, what };
                self.registry.store.write(&expect, &mut self.deadline.bound(resp.into_reader()))
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
                self.registry.store.set_signature(manifest_digest, &res.digest);
                Ok(Some(res))
            }
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) if e.is_unreachable() => match self.registry.store.signature(manifest_digest) {
                Some(d) => self.resolve(&r.with_digest(&d)).map(Some),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// The manifests that refer to `manifest_digest` with `artifact_type`
    /// (OCI 1.1 referrers), found the way registries offer them, in this
    /// order: the referrers API (`GET /v2/NAME/referrers/DIGEST?artifactType=…`);
    /// where a registry has no such API (404, 400, 405), the referrers tag
    /// schema (the `sha256-<hex>` tag holding an image index). The index is
    /// filtered here too (a registry may ignore the filter); at most
    /// [`MAX_REFERRERS_FETCHED`] manifests are fetched, each checked
    /// against its digest. The index found is cached: when the registry
    /// cannot be reached, the one last seen is used if held (its manifests
    /// and their blobs are then served from the cache by digest).
    ///
    /// Note well: an index says nothing about who made the referrers; the
    /// caller verifies what they hold.
    pub fn referrers(
        &self,
        r: &Reference,
        manifest_digest: &str,
        artifact_type: &str,
    ) -> Result<Referrers, Error> {
        // Per repository: the same digest in two repositories has each
        // repository's own referrers.
        let key = format!("{} {manifest_digest} {artifact_type}", r.name());
        let api = format!(
            "{}/v2/{}/referrers/{manifest_digest}?artifactType={}",
            self.registry.http.base(&r.registry),
            r.repository,
            artifact_type.replace('+', "%2B")
        );
        let what = format!("referrers index of {manifest_digest}");
        let fetched = match self.fetch_json(r, &api, layout::OCI_INDEX, &what) {
            Ok(Some(found)) => Ok(Some((found, Via::Api))),
            Ok(None) | Err(Error::Status { status: 400 | 405, .. }) => {
                let tag = self.registry.url(r, "manifests", &manifest_digest.replace(':', "-"));
                self.fetch_json(r, &tag, layout::OCI_INDEX, &what).map(|o| o.map(|f| (f, Via::TagSchema)))
            }
            Err(e) => Err(e),
        };
        let (bytes, index_digest, via) = match fetched {
            Ok(Some(((bytes, digest), via))) => {
                // The index is stored before its digest is recorded: a
                // recorded digest always names a blob that is held.
                self.registry.store.put(&digest, &bytes)?;
                self.registry.store.set_referrers(&key, &digest);
                (bytes, digest, via)
            }
            Ok(None) => return Ok(Referrers { via: Via::TagSchema, manifests: Vec::new() }),
            Err(e) if e.is_unreachable() => {
                let held = self.registry.store.referrers(&key).and_then(|d| {
                    let bytes = self.registry.store.read(&d, self.registry.settings.max_manifest_bytes)?;
                    Some((bytes, d))
                });
                match held {
                    Some((bytes, d)) => {
                        tracing::warn!(
                            "registry unreachable ({e}); the referrers of {manifest_digest} from the cache"
                        );
                        (bytes, d, Via::Cache)
                    }
                    None => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let entries = layout::referrers(&bytes, &index_digest, artifact_type)?;
        let mut manifests = Vec::new();
        for entry in entries.iter().take(MAX_REFERRERS_FETCHED) {
            manifests.push(self.resolve(&r.with_digest(&entry.digest))?);
        }
        Ok(Referrers { via, manifests })
    }
}

/// The most referrers of one artifact type fetched for one manifest (a
/// signature or two per key rotation; a registry must not make a pull
/// fetch thousands).
pub const MAX_REFERRERS_FETCHED: usize = 8;

/// Where referrers were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The registry's referrers API.
    Api,
    /// The referrers tag schema (`sha256-<hex>`), or nothing found.
    TagSchema,
    /// The blob cache (the registry could not be reached).
    Cache,
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Via::Api => "the referrers API",
            Via::TagSchema => "the referrers tag",
            Via::Cache => "the cached referrers",
        })
    }
}

/// Referrers of one artifact type.
#[derive(Debug, Clone)]
pub struct Referrers {
    /// Where they were found.
    pub via: Via,
    /// Their manifests (at most [`MAX_REFERRERS_FETCHED`]), each checked
    /// against its digest.
    pub manifests: Vec<Resolved>,
}
