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

mod error;
pub(crate) mod http;
pub mod layout;
pub mod reference;
mod settings;
mod store;
pub mod tls;

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use self::error::Error;
pub use self::http::Deadline;
use self::http::{Body, Http, Size};
/// The parsers of what a registry sends in its headers (plain functions of
/// strings, for tests and fuzzing): `WWW-Authenticate` parameters, a
/// `Location` resolved and checked, a token realm checked, a URL's
/// `host:port`.
pub use self::http::{authority, parse_challenge, realm_url, redirect_target};
pub use self::layout::{Descriptor, ImageManifest};
pub use self::reference::Reference;
pub use self::settings::{
    CA_ENV, DEFAULT_ATTEMPTS, DEFAULT_DEADLINE, DEFAULT_MAX_BLOB_BYTES, DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_TIMEOUT, INSECURE_ENV, MAX_PAYLOAD_BYTES, Settings,
};
use self::store::{Expect, Store};

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
        let config_digest = crate::digest::oci_digest(&config);
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
        let digest = crate::digest::oci_digest(&bytes);
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
                let digest = crate::digest::oci_digest(&bytes);
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
    /// registry cannot be reached, the one last seen for this digest in
    /// this repository is used if held (the same digest in another
    /// repository has that repository's own `.sig` tag, or none). The entry
    /// follows the tag: a re-signed digest (cosign appends to the `.sig`
    /// manifest, a new digest under the same tag) replaces it at the next
    /// reachable resolve.
    pub fn signature_manifest(
        &self,
        r: &Reference,
        manifest_digest: &str,
    ) -> Result<Option<Resolved>, Error> {
        let tag = format!("{}.sig", manifest_digest.replace(':', "-"));
        let sig_ref = r.with_tag(&tag);
        let key = format!("{} {manifest_digest}", r.name());
        match self.resolve(&sig_ref) {
            Ok(res) => {
                self.registry.store.set_signature(&key, &res.digest);
                Ok(Some(res))
            }
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) if e.is_unreachable() => match self.registry.store.signature(&key) {
                Some(d) => self.resolve(&r.with_digest(&d)).map(Some),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// The manifests that refer to `manifest_digest` with one of
    /// `artifact_types` (OCI 1.1 referrers), found the way registries offer
    /// them, in this order: the referrers API (`GET /v2/NAME/referrers/DIGEST`,
    /// with `?artifactType=…` when one type is asked for: the API filters by
    /// one); where a registry has no such API (404, 400, 405), the referrers
    /// tag schema (the `sha256-<hex>` tag holding an image index). The index
    /// is filtered here (a registry may ignore the filter); at most
    /// [`MAX_REFERRERS_FETCHED`] manifests are fetched, each checked
    /// against its digest. The index found is cached: when the registry
    /// cannot be reached, the one last seen is used if held (its manifests
    /// and their blobs are then served from the cache by digest); it is
    /// held under the first of `artifact_types`.
    ///
    /// Note well: an index says nothing about who made the referrers; the
    /// caller verifies what they hold.
    pub fn referrers(
        &self,
        r: &Reference,
        manifest_digest: &str,
        artifact_types: &[&str],
    ) -> Result<Referrers, Error> {
        // Per repository: the same digest in two repositories has each
        // repository's own referrers.
        let key =
            format!("{} {manifest_digest} {}", r.name(), artifact_types.first().copied().unwrap_or_default());
        let filter = match artifact_types {
            [one] => {
                format!(
                    "?artifactType={}",
                    url::form_urlencoded::byte_serialize(one.as_bytes()).collect::<String>()
                )
            }
            _ => String::new(),
        };
        let api = format!(
            "{}/v2/{}/referrers/{manifest_digest}{filter}",
            self.registry.http.base(&r.registry),
            r.repository,
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
        let entries = layout::referrers(&bytes, &index_digest, artifact_types)?;
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
