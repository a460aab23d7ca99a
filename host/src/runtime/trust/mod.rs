//! What makes a plugin from a registry trustworthy, and the chain that
//! proves it before anything is compiled.
//!
//! A reference is trusted in one of three ways (a manifest may combine them):
//! 1. `sha256 = "…"`: the component's bytes are pinned (the layer digest);
//! 2. `oci://…@sha256:…`: the manifest's digest is in the reference;
//! 3. `[verify] keys = […]`: a cosign signature by one of the keys over the
//!    manifest digest (and, optionally, required payload annotations).
//!
//! A reference with none of them is refused before any network I/O. The
//! chain is code, one link per step of [`verified_component`]: the manifest
//! is the one its digest names (distribution checks it) → the signature
//! payload names that digest and is signed by a trusted key → the manifest
//! has exactly one wasm layer → the layer's bytes are the ones its digest
//! names (distribution) → the bytes' sha256 equals the pin. Each broken link
//! is its own error, naming both digests.

pub mod cosign;

use std::collections::BTreeMap;

use crate::runtime::distribution::{self, Reference, Registry};
use crate::runtime::request::sha256_hex;

pub use cosign::PublicKey;

/// The trust a manifest (or the command line) gives a reference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// The component's pinned sha256 (64 lowercase hex digits).
    pub sha256: Option<String>,
    /// cosign public keys; a valid signature by any one suffices.
    pub keys: Vec<PublicKey>,
    /// Annotations the signature payload must carry (`optional` section).
    pub annotations: BTreeMap<String, String>,
}

/// Everything trusting can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference has no trust at all.
    #[error(
        "{reference}: refusing a plugin nobody vouches for; give it trust in one of three ways: \
         pin the component with `sha256 = \"<hex>\"`, name the manifest by digest \
         (`oci://REGISTRY/REPO@sha256:<hex>`), or add a `[verify]` table with cosign public keys \
         (`keys = [\"vendor.pub\"]`; `durasync pull --key FILE`)"
    )]
    NoTrust {
        /// The reference.
        reference: String,
    },
    /// Signatures were required and none was found.
    #[error("{reference}: manifest {digest} is not signed (no {tag} tag); refusing it")]
    NoSignature {
        /// The reference.
        reference: String,
        /// The manifest digest.
        digest: String,
        /// The signature tag looked for.
        tag: String,
    },
    /// Signatures were found and none passed.
    #[error("{reference}: no valid signature for manifest {digest}; refusing it: {}", reasons.join("; "))]
    BadSignatures {
        /// The reference.
        reference: String,
        /// The manifest digest.
        digest: String,
        /// Why each signature did not count.
        reasons: Vec<String>,
    },
    /// The component is not the pinned one.
    #[error("{reference}: the component's sha256 is {actual}, but the manifest pins {expected}; refusing it")]
    Sha256Mismatch {
        /// The reference.
        reference: String,
        /// The pin.
        expected: String,
        /// The component's.
        actual: String,
    },
    /// Fetching failed or the content was refused.
    #[error(transparent)]
    Distribution(#[from] distribution::Error),
}

impl Error {
    /// A refusal (something was not trustworthy), as opposed to a failure to
    /// fetch (the registry is down, the disk is full).
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::Distribution(e) => e.is_refusal(),
            _ => true,
        }
    }
}

/// A component whose chain of trust was checked; its bytes stay in the
/// blob cache until [`Verified::read`] (a pull never holds them in memory).
#[derive(Debug, Clone)]
pub struct Verified {
    /// The component's file in the blob cache.
    pub path: std::path::PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256 (lowercase hex).
    pub sha256: String,
    /// The manifest digest that was proven (log it, export it, pin it).
    pub manifest_digest: String,
    /// The key whose signature was verified, when one was.
    pub signed_by: Option<String>,
    /// Served from the cache because the registry could not be reached.
    pub offline: bool,
}

impl Verified {
    /// The component's bytes, hashed again as they are read: what is handed
    /// to the compiler is exactly what was verified.
    pub fn read(&self) -> Result<Vec<u8>, Error> {
        let bytes = std::fs::read(&self.path).map_err(|e| distribution::Error::Cache {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        })?;
        let actual = sha256_hex(&bytes);
        if actual != self.sha256 {
            return Err(distribution::Error::DigestMismatch {
                what: format!("cached component {}", self.path.display()),
                expected: format!("sha256:{}", self.sha256),
                actual: format!("sha256:{actual}"),
            }
            .into());
        }
        Ok(bytes)
    }
}

impl Policy {
    /// Whether `reference` with this policy is trusted at all (checked
    /// before any network I/O).
    pub fn require_trust(&self, reference: &Reference) -> Result<(), Error> {
        if self.sha256.is_none() && reference.digest.is_none() && self.keys.is_empty() {
            return Err(Error::NoTrust { reference: reference.to_string() });
        }
        Ok(())
    }
}

/// Verified bytes for `reference`: refuses a reference without trust before
/// any network I/O, then walks the chain (see the module docs). Nothing is
/// compiled or loaded here.
pub fn verified_component(
    registry: &Registry,
    reference: &Reference,
    policy: &Policy,
) -> Result<Verified, Error> {
    policy.require_trust(reference)?;
    fetch_component(registry, reference, policy)
}

/// Like [`verified_component`] without the trust requirement: for `durasync
/// pull`, which fills the cache and prints the digests to pin. Whatever the
/// policy holds is still checked.
pub fn fetch_component(
    registry: &Registry,
    reference: &Reference,
    policy: &Policy,
) -> Result<Verified, Error> {
    // Link 1: the manifest is the one its digest names (checked by resolve
    // for a digest reference; for a tag, the digest is computed from it).
    let resolved = registry.resolve(reference)?;
    let digest = resolved.digest.clone();
    // Link 2: a signature by a trusted key over that digest, before the
    // component is even downloaded.
    let signed_by = if policy.keys.is_empty() {
        None
    } else {
        Some(verify_signature(registry, reference, &digest, policy)?)
    };
    // Link 3: exactly one wasm layer; link 4: its bytes match its digest.
    let layer = resolved.manifest.wasm_layer(&digest)?;
    let path = registry.blob_file(reference, layer, registry.settings().max_blob_bytes, "wasm layer")?;
    // Link 5: the bytes are the pinned ones. The layer's digest is the
    // sha256 of exactly these bytes (checked as they were stored or read).
    let sha256 = layer.digest.trim_start_matches("sha256:").to_owned();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(layer.size);
    if let Some(pin) = &policy.sha256
        && pin != &sha256
    {
        return Err(Error::Sha256Mismatch {
            reference: reference.to_string(),
            expected: pin.clone(),
            actual: sha256,
        });
    }
    Ok(Verified { path, size, sha256, manifest_digest: digest, signed_by, offline: resolved.offline })
}

/// A signature over `digest` by one of the policy's keys: the source of the
/// key that verified, or why none did (every signature's reason).
pub fn verify_signature(
    registry: &Registry,
    reference: &Reference,
    digest: &str,
    policy: &Policy,
) -> Result<String, Error> {
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let Some(sig) = registry.signature_manifest(reference, digest)? else {
        return Err(Error::NoSignature { reference: reference.to_string(), digest: digest.to_owned(), tag });
    };
    let mut reasons = Vec::new();
    for layer in &sig.manifest.layers {
        if layer.media_type != cosign::PAYLOAD_MEDIA_TYPE {
            reasons.push(format!("layer {} is {}, not a cosign payload", layer.digest, layer.media_type));
            continue;
        }
        let payload =
            match registry.blob(reference, layer, distribution::MAX_PAYLOAD_BYTES, "signature payload") {
                Ok(p) => p,
                Err(e) if e.is_refusal() => {
                    reasons.push(e.to_string());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
        let annotation = layer.annotations.get(cosign::SIGNATURE_ANNOTATION).map(String::as_str);
        match cosign::check(&payload, annotation, digest, &policy.keys, &policy.annotations) {
            Ok(key) => return Ok(key),
            Err(why) => reasons.push(why),
        }
    }
    if reasons.is_empty() {
        reasons.push(format!("the signature manifest {} has no layers", sig.digest));
    }
    Err(Error::BadSignatures { reference: reference.to_string(), digest: digest.to_owned(), reasons })
}
