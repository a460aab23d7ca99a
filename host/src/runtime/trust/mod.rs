//! What makes a plugin from a registry trustworthy, and the chain that
//! proves it before anything is compiled.
//!
//! A reference is trusted in one of four ways (a manifest may combine them):
//! 1. `sha256 = "…"`: the component's bytes are pinned (the layer digest);
//! 2. `oci://…@sha256:…`: the manifest's digest is in the reference;
//! 3. `[verify] keys = […]`: a signature by one of the keys over the
//!    manifest digest — a Sigstore bundle, or a cosign simple-signing
//!    payload (with, optionally, required payload annotations);
//! 4. `[verify] identities = […]` with `trusted_root`: a keyless Sigstore
//!    bundle (a Fulcio certificate for one of the identities, logged in
//!    Rekor), verified offline against the trusted root.
//!
//! Signatures are looked for the way today's tools attach them, in this
//! order: Sigstore bundles through the OCI referrers API, then through the
//! referrers tag schema, then (for keys) cosign's legacy `sha256-<hex>.sig`
//! tag; what was found is cached, so a later load verifies offline.
//!
//! Keys and identities may carry validity windows (rotation), a policy may
//! require several distinct signers ([`Require`]), and revoked key ids and
//! digests never count — a revoked digest is refused at every load, from
//! the cache too ([`Policy::check_revoked`]).
//!
//! A reference with none of them is refused before any network I/O. The
//! chain is code, one link per step of [`verified_component`]: the manifest
//! is the one its digest names (distribution checks it) → the signature
//! payload names that digest and is signed by a trusted key → the manifest
//! has exactly one wasm layer → the layer's bytes are the ones its digest
//! names (distribution) → the bytes' sha256 equals the pin. Each broken link
//! is its own error, naming both digests.

pub mod bundle;
pub mod cosign;
pub mod fulcio;
pub mod keys;
pub mod rekor;
pub mod root;
pub mod sct;

use std::collections::BTreeMap;

use crate::digest::sha256_hex;
use crate::runtime::distribution::{self, Pull, Reference, Registry};

pub use cosign::PublicKey;
pub use fulcio::Identity;
pub use root::TrustedRoot;

/// The trust a manifest (or the command line) gives a reference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// The component's pinned sha256 (64 lowercase hex digits).
    pub sha256: Option<String>,
    /// cosign public keys; a valid signature by any one suffices.
    pub keys: Vec<PublicKey>,
    /// Annotations the signature payload must carry (`optional` section).
    pub annotations: BTreeMap<String, String>,
    /// Keyless signers accepted (a Fulcio certificate's identity and issuer).
    pub identities: Vec<Identity>,
    /// The trusted root keyless bundles are checked against.
    pub trusted_root: Option<std::sync::Arc<TrustedRoot>>,
    /// How many distinct keys and identities must have signed.
    pub require: Require,
    /// Key ids (sha256 of the DER public key, hex) whose signatures never
    /// count.
    pub revoked_keys: Vec<String>,
    /// Manifest digests and component digests (`sha256:<hex>`) refused
    /// whatever signed them, cached or not.
    pub revoked_digests: Vec<String>,
}

/// How many of a policy's keys and identities must have signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Require {
    /// Any one of them (the default).
    #[default]
    Any,
    /// Every key and identity in force now (not revoked, its window open).
    All,
    /// At least this many distinct ones.
    Threshold(usize),
}

/// A validity window (Unix seconds, both ends inclusive): a key or identity
/// rotated in or out. A signature counts only when its signing time falls in
/// it: the transparency log's signed integrated time for a Sigstore bundle,
/// or, for a signature with no proven time (cosign's legacy `.sig`, a
/// key-signed bundle without a trusted root), the time it is checked at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Not before this time.
    pub not_before: Option<i64>,
    /// Not after this time.
    pub not_after: Option<i64>,
}

impl Window {
    /// A window from RFC 3339 times (`2026-01-01T00:00:00Z`); `Err` names
    /// the bad field.
    pub fn parse(not_before: Option<&str>, not_after: Option<&str>) -> Result<Window, (String, String)> {
        let time = |field: &str, t: Option<&str>| -> Result<Option<i64>, (String, String)> {
            let Some(t) = t else { return Ok(None) };
            let at = humantime::parse_rfc3339(t).map_err(|e| {
                (field.to_owned(), format!("{t:?} is not an RFC 3339 UTC time (2026-01-01T00:00:00Z): {e}"))
            })?;
            let secs = at
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|_| (field.to_owned(), format!("{t:?} is before 1970")))?;
            Ok(Some(i64::try_from(secs.as_secs()).unwrap_or(i64::MAX)))
        };
        let w =
            Window { not_before: time("not_before", not_before)?, not_after: time("not_after", not_after)? };
        if let (Some(b), Some(a)) = (w.not_before, w.not_after)
            && b > a
        {
            return Err(("not_after".into(), "is before not_before".into()));
        }
        Ok(w)
    }

    /// Whether `t` falls in the window.
    pub fn contains(&self, t: i64) -> bool {
        self.not_before.is_none_or(|b| t >= b) && self.not_after.is_none_or(|a| t <= a)
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |t: Option<i64>| t.map_or_else(|| "…".to_owned(), rfc3339);
        write!(f, "{} to {}", at(self.not_before), at(self.not_after))
    }
}

/// Which of a policy's keys or identities a signature is by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trusted {
    /// `keys[i]`.
    Key(usize),
    /// `identities[i]`.
    Identity(usize),
}

/// A verified signature: by whom, and when (a proven signing time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedBy {
    /// Which key or identity.
    pub by: Trusted,
    /// Who, for people: a key's source and id, or the certificate's
    /// identity, issuer and log index.
    pub who: String,
    /// The transparency log's signed integrated time (Unix seconds).
    pub time: Option<i64>,
}

/// Unix seconds as an RFC 3339 UTC time.
fn rfc3339(t: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0).unsigned_abs());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The current time, Unix seconds.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Everything trusting can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference has no trust at all.
    #[error(
        "{reference}: refusing a plugin nobody vouches for; give it trust in one of three ways: \
         pin the component with `sha256 = \"<hex>\"`, name the manifest by digest \
         (`oci://REGISTRY/REPO@sha256:<hex>`), or add a `[verify]` table with cosign public keys \
         (`keys = [\"vendor.pub\"]`; `durasync pull --key FILE`) or keyless identities \
         (`identities = [{{ issuer = \"…\", subject_regex = \"…\" }}]` with `trusted_root = \"…\"`)"
    )]
    NoTrust {
        /// The reference.
        reference: String,
    },
    /// Signatures were required and none was found.
    #[error(
        "{reference}: manifest {digest} is not signed (no Sigstore bundle through the referrers API \
         or the referrers tag{}); refusing it",
        if tag.is_empty() { String::new() } else { format!(", no {tag} tag") }
    )]
    NoSignature {
        /// The reference.
        reference: String,
        /// The manifest digest.
        digest: String,
        /// The legacy signature tag looked for (empty: not looked for).
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
    /// Some trusted keys or identities signed, but fewer than required.
    #[error("{reference}: manifest {digest} needs {detail}")]
    TooFewSignatures {
        /// The reference.
        reference: String,
        /// The manifest digest.
        digest: String,
        /// How many were required, who signed, who is missing, why other
        /// signatures did not count.
        detail: String,
    },
    /// The manifest or component digest is revoked.
    #[error("{reference}: {what} {digest} is revoked (listed in `[verify] revoked_digests`); refusing it")]
    Revoked {
        /// The reference.
        reference: String,
        /// Which digest: the manifest's or the component's.
        what: &'static str,
        /// The revoked digest.
        digest: String,
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
    /// Who signed, when signatures were checked: each key (source and key
    /// id) or keyless identity (identity, issuer, log index) that counted,
    /// joined by `; `.
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
        if self.sha256.is_none()
            && reference.digest.is_none()
            && self.keys.is_empty()
            && self.identities.is_empty()
        {
            return Err(Error::NoTrust { reference: reference.to_string() });
        }
        Ok(())
    }

    /// Refuses `digest` (`sha256:<hex>`) when it is revoked; `what` names it.
    pub fn check_revoked(
        &self,
        reference: &Reference,
        what: &'static str,
        digest: &str,
    ) -> Result<(), Error> {
        if self.revoked_digests.iter().any(|d| d == digest) {
            return Err(Error::Revoked { reference: reference.to_string(), what, digest: digest.to_owned() });
        }
        Ok(())
    }

    /// Whether key `i` is revoked.
    fn key_revoked(&self, i: usize) -> bool {
        self.keys.get(i).is_some_and(|k| self.revoked_keys.contains(&k.id()))
    }

    /// The window of a key or identity.
    fn window(&self, by: Trusted) -> Window {
        match by {
            Trusted::Key(i) => self.keys.get(i).map(|k| k.window).unwrap_or_default(),
            Trusted::Identity(i) => self.identities.get(i).map(|k| k.window).unwrap_or_default(),
        }
    }

    /// A key or identity, named for people.
    fn name(&self, by: Trusted) -> String {
        match by {
            Trusted::Key(i) => {
                self.keys.get(i).map_or_else(String::new, |k| format!("{} (key id {})", k.source, k.id()))
            }
            Trusted::Identity(i) => self.identities.get(i).map_or_else(String::new, ToString::to_string),
        }
    }

    /// Every key and identity in force at `t`: not revoked, its window open.
    fn in_force(&self, t: i64) -> Vec<Trusted> {
        let keys = (0..self.keys.len()).filter(|&i| !self.key_revoked(i)).map(Trusted::Key);
        let ids = (0..self.identities.len()).map(Trusted::Identity);
        keys.chain(ids).filter(|&by| self.window(by).contains(t)).collect()
    }

    /// How many distinct signers are needed (never fewer than one: an
    /// unsigned artifact never passes a policy with keys or identities).
    fn need(&self, now: i64) -> usize {
        match self.require {
            Require::Any => 1,
            Require::All => self.in_force(now).len().max(1),
            Require::Threshold(n) => n.max(1),
        }
    }

    /// A verified signature, if it counts: not by a revoked key, signed
    /// within its signer's window. `Err` says why not.
    fn admit(&self, mut s: SignedBy, now: i64) -> Result<SignedBy, String> {
        if let Trusted::Key(i) = s.by {
            let key = &self.keys[i];
            if self.key_revoked(i) {
                return Err(format!(
                    "signed by {} (key id {}), which is revoked (listed in `[verify] revoked_keys`)",
                    key.source,
                    key.id()
                ));
            }
            s.who = format!("{} (key id {})", key.source, key.id());
        }
        let window = self.window(s.by);
        // No proven signing time: the window must hold the time of the check.
        let (t, when) = match s.time {
            Some(t) => (t, "signed (log time)"),
            None => (now, "checked (no proven signing time)"),
        };
        if !window.contains(t) {
            return Err(format!(
                "{} {when} at {}, outside its validity window {window}",
                self.name(s.by),
                rfc3339(t)
            ));
        }
        Ok(s)
    }
}

/// The signatures that counted so far, distinct by signer, and why others
/// did not.
struct Tally<'p> {
    policy: &'p Policy,
    now: i64,
    need: usize,
    signed: Vec<SignedBy>,
    reasons: Vec<String>,
}

impl<'p> Tally<'p> {
    fn new(policy: &'p Policy) -> Tally<'p> {
        let now = now();
        Tally { policy, now, need: policy.need(now), signed: Vec::new(), reasons: Vec::new() }
    }

    /// Count `s` if the policy admits it; true once enough have signed.
    fn add(&mut self, s: SignedBy, context: &str) -> bool {
        match self.policy.admit(s, self.now) {
            Ok(s) if !self.signed.iter().any(|o| o.by == s.by) => self.signed.push(s),
            Ok(_) => {}
            Err(why) => self.reasons.push(format!("{context}{why}")),
        }
        self.done()
    }

    fn done(&self) -> bool {
        self.signed.len() >= self.need
    }

    /// Who signed, or the refusal: nothing found, nothing valid, too few.
    fn finish(self, reference: &Reference, digest: &str, tag: &str) -> Result<String, Error> {
        if self.done() {
            let who: Vec<_> = self.signed.iter().map(|s| s.who.as_str()).collect();
            return Ok(who.join("; "));
        }
        let (reference, digest) = (reference.to_string(), digest.to_owned());
        if self.signed.is_empty() {
            if self.reasons.is_empty() {
                return Err(Error::NoSignature { reference, digest, tag: tag.to_owned() });
            }
            if self.need == 1 {
                return Err(Error::BadSignatures { reference, digest, reasons: self.reasons });
            }
        }
        let need = match self.policy.require {
            Require::All => format!("all {} (require = \"all\")", self.need),
            _ => format!("{} (threshold = {})", self.need, self.need),
        };
        let missing: Vec<_> = self
            .policy
            .in_force(self.now)
            .into_iter()
            .filter(|by| !self.signed.iter().any(|s| s.by == *by))
            .map(|by| self.policy.name(by))
            .collect();
        let signed: Vec<_> = self.signed.iter().map(|s| s.who.as_str()).collect();
        let mut detail = format!(
            "{need} of the trusted signers, has {}: signed by [{}]; missing [{}]; refusing it",
            signed.len(),
            signed.join("; "),
            missing.join("; ")
        );
        if !self.reasons.is_empty() {
            detail.push_str(&format!(" (did not count: {})", self.reasons.join("; ")));
        }
        Err(Error::TooFewSignatures { reference, digest, detail })
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
    // One pull, one deadline: every request below ends by it.
    let pull = registry.pull();
    // Link 1: the manifest is the one its digest names (checked by resolve
    // for a digest reference; for a tag, the digest is computed from it).
    let resolved = pull.resolve(reference)?;
    let digest = resolved.digest.clone();
    // A revoked manifest is refused before anything else, served from the
    // cache (offline) or not: revocation outranks every earlier trust.
    policy.check_revoked(reference, "manifest", &digest)?;
    // Link 2: a signature by a trusted key over that digest, before the
    // component is even downloaded.
    let signed_by = if policy.keys.is_empty() && policy.identities.is_empty() {
        None
    } else {
        Some(verify_signature(&pull, reference, &digest, policy)?)
    };
    // Link 3: exactly one wasm layer; link 4: its bytes match its digest.
    let layer = resolved.manifest.wasm_layer(&digest)?;
    policy.check_revoked(reference, "component", &layer.digest)?;
    let path = pull.blob_file(reference, layer, registry.settings().max_blob_bytes, "wasm layer")?;
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

/// Signatures over `digest` that the policy accepts, as many distinct
/// signers as it requires: Sigstore bundles (through the referrers API, then
/// the referrers tag), then, for keys, cosign's legacy `.sig` tag. Returns
/// who signed (each key's source and id, or each certificate's identity,
/// issuer and log index), or why too few counted (every signature's reason,
/// and who is missing).
pub fn verify_signature(
    registry: &Pull<'_>,
    reference: &Reference,
    digest: &str,
    policy: &Policy,
) -> Result<String, Error> {
    let mut tally = Tally::new(policy);
    let mut unreachable = None;
    match registry.referrers(reference, digest, bundle::MEDIA_TYPES) {
        Ok(found) => {
            for m in &found.manifests {
                if check_bundles(registry, reference, digest, m, found.via, &mut tally)? {
                    return tally.finish(reference, digest, "");
                }
            }
        }
        Err(e) if e.is_refusal() => tally.reasons.push(format!("referrers: {e}")),
        // The registry is down and nothing is cached: the legacy tag may
        // still be (keys only); otherwise this is the error to report.
        Err(e) => unreachable = Some(e),
    }
    let nothing = |t: &Tally<'_>| t.signed.is_empty() && t.reasons.is_empty();
    if policy.keys.is_empty() {
        if let Some(e) = unreachable.filter(|_| nothing(&tally)) {
            return Err(e.into());
        }
        return tally.finish(reference, digest, "");
    }
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let sig = match registry.signature_manifest(reference, digest) {
        Ok(sig) => sig,
        Err(e) => return Err(unreachable.unwrap_or(e).into()),
    };
    let Some(sig) = sig else {
        if let Some(e) = unreachable.filter(|_| nothing(&tally)) {
            return Err(e.into());
        }
        return tally.finish(reference, digest, &tag);
    };
    if sig.manifest.layers.is_empty() {
        tally.reasons.push(format!("the signature manifest {} has no layers", sig.digest));
    }
    for layer in &sig.manifest.layers {
        if layer.media_type != cosign::PAYLOAD_MEDIA_TYPE {
            tally
                .reasons
                .push(format!("layer {} is {}, not a cosign payload", layer.digest, layer.media_type));
            continue;
        }
        let payload =
            match registry.blob(reference, layer, distribution::MAX_PAYLOAD_BYTES, "signature payload") {
                Ok(p) => p,
                Err(e) if e.is_refusal() => {
                    tally.reasons.push(e.to_string());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
        let annotation = layer.annotations.get(cosign::SIGNATURE_ANNOTATION).map(String::as_str);
        match cosign::check(&payload, annotation, digest, &policy.keys, &policy.annotations) {
            Ok(key) => {
                let index = policy.keys.iter().position(|k| std::ptr::eq(k, key)).unwrap_or_default();
                // A legacy signature carries no proven time.
                let s = SignedBy { by: Trusted::Key(index), who: key.source.clone(), time: None };
                if tally.add(s, "") {
                    break;
                }
            }
            Err(why) => tally.reasons.push(why),
        }
    }
    tally.finish(reference, digest, &tag)
}

/// Each Sigstore bundle layer of referrer manifest `m`, verified and
/// counted; true once enough have signed.
fn check_bundles(
    registry: &Pull<'_>,
    reference: &Reference,
    digest: &str,
    m: &distribution::Resolved,
    via: distribution::Via,
    tally: &mut Tally<'_>,
) -> Result<bool, Error> {
    let policy = tally.policy;
    let mut any = false;
    for layer in &m.manifest.layers {
        if !bundle::MEDIA_TYPES.contains(&layer.media_type.as_str()) {
            continue;
        }
        any = true;
        let bytes = match registry.blob(reference, layer, bundle::MAX_BUNDLE_BYTES, "Sigstore bundle") {
            Ok(b) => b,
            Err(e) if e.is_refusal() => {
                tally.reasons.push(format!("bundle {} (from {via}): {e}", layer.digest));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let root = policy.trusted_root.as_deref();
        let context = format!("bundle {} (from {via}): ", layer.digest);
        match bundle::verify(&bytes, digest, &policy.keys, &policy.identities, root) {
            Ok(s) => {
                if tally.add(s, &context) {
                    return Ok(true);
                }
            }
            Err(why) => tally.reasons.push(format!("{context}{why}")),
        }
    }
    if !any {
        tally.reasons.push(format!("referrer {} (from {via}) holds no Sigstore bundle layer", m.digest));
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::pkcs8::EncodePublicKey as _;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn key(seed: u8, name: &str) -> PublicKey {
        let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).unwrap();
        let pem = sk.verifying_key().to_public_key_pem(Default::default()).unwrap();
        PublicKey::from_pem(&pem, name).unwrap()
    }

    fn two_keys(require: Require) -> Policy {
        Policy { keys: vec![key(1, "a.pub"), key(2, "b.pub")], require, ..Policy::default() }
    }

    fn by_key(i: usize, time: Option<i64>) -> SignedBy {
        SignedBy { by: Trusted::Key(i), who: String::new(), time }
    }

    fn reference() -> Reference {
        Reference::parse("oci://r.example/vendor/p:1").unwrap()
    }

    #[test]
    fn require_all_refuses_one_signature_of_two_naming_the_missing_key() {
        let policy = two_keys(Require::All);
        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(0, None), ""));
        let msg = tally.finish(&reference(), D, "").unwrap_err().to_string();
        let b = policy.keys[1].id();
        assert!(
            msg.contains("needs all 2") && msg.contains(&format!("missing [b.pub (key id {b})]")),
            "{msg}"
        );
        assert!(msg.contains("signed by [a.pub (key id"), "{msg}");

        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(0, None), ""));
        // The same key twice is one signer.
        assert!(!tally.add(by_key(0, None), ""));
        assert!(tally.add(by_key(1, None), ""));
        let who = tally.finish(&reference(), D, "").unwrap();
        assert!(who.contains("a.pub (key id") && who.contains("; b.pub (key id"), "{who}");
    }

    #[test]
    fn zero_valid_signatures_are_refused_whatever_the_requirement() {
        for require in [Require::Any, Require::All, Require::Threshold(1), Require::Threshold(2)] {
            let policy = two_keys(require);
            let msg = Tally::new(&policy).finish(&reference(), D, "x.sig").unwrap_err().to_string();
            assert!(msg.contains("is not signed"), "{require:?}: {msg}");
            // Even a policy whose every key is revoked needs one signature.
            let mut policy = two_keys(require);
            policy.revoked_keys = policy.keys.iter().map(PublicKey::id).collect();
            let mut tally = Tally::new(&policy);
            assert!(!tally.add(by_key(0, None), ""));
            assert!(tally.finish(&reference(), D, "").is_err(), "{require:?}");
        }
    }

    #[test]
    fn a_threshold_counts_distinct_signers() {
        let mut policy = two_keys(Require::Threshold(2));
        policy.keys.push(key(3, "c.pub"));
        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(2, None), ""));
        let msg = Tally::finish(tally, &reference(), D, "").unwrap_err().to_string();
        assert!(msg.contains("needs 2 (threshold = 2)") && msg.contains("missing [a.pub"), "{msg}");
        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(2, None), ""));
        assert!(tally.add(by_key(0, None), ""));
    }

    #[test]
    fn a_revoked_keys_signature_does_not_count_and_is_named() {
        let mut policy = two_keys(Require::Any);
        policy.revoked_keys = vec![policy.keys[0].id()];
        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(0, None), "bundle X: "));
        let msg = tally.finish(&reference(), D, "").unwrap_err().to_string();
        assert!(
            msg.contains("bundle X: signed by a.pub")
                && msg.contains("which is revoked")
                && msg.contains("revoked_keys"),
            "{msg}"
        );
        // The other key still counts.
        let mut tally = Tally::new(&policy);
        assert!(tally.add(by_key(1, None), ""));
        // `all` needs only the keys in force.
        let mut policy = two_keys(Require::All);
        policy.revoked_keys = vec![policy.keys[0].id()];
        let mut tally = Tally::new(&policy);
        assert!(tally.add(by_key(1, None), ""));
    }

    #[test]
    fn a_signature_counts_only_when_signed_within_its_keys_window() {
        let w = Window::parse(Some("2026-01-01T00:00:00Z"), Some("2026-06-30T23:59:59Z")).unwrap();
        assert_eq!(w.not_before, Some(1_767_225_600));
        assert!(w.contains(1_767_225_600) && w.contains(w.not_after.unwrap()));
        assert!(!w.contains(1_767_225_599) && !w.contains(w.not_after.unwrap() + 1));
        let mut policy = two_keys(Require::Any);
        policy.keys[0].window = w;
        // A logged signing time inside the window counts, outside does not.
        let mut tally = Tally::new(&policy);
        assert!(tally.add(by_key(0, Some(1_770_000_000)), ""));
        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(0, Some(1_800_000_000)), ""));
        let msg = tally.finish(&reference(), D, "").unwrap_err().to_string();
        assert!(
            msg.contains("a.pub (key id")
                && msg.contains("signed (log time) at 2027-01-15T08:00:00Z")
                && msg.contains("outside its validity window 2026-01-01T00:00:00Z to 2026-06-30T23:59:59Z"),
            "{msg}"
        );
        // No proven time: the window must hold now.
        let mut policy = two_keys(Require::Any);
        policy.keys[0].window = Window { not_before: None, not_after: Some(now() - 60) };
        let mut tally = Tally::new(&policy);
        assert!(!tally.add(by_key(0, None), ""));
        assert!(tally.reasons[0].contains("checked (no proven signing time)"), "{:?}", tally.reasons);
        // Under `all`, a key rotated out is not waited for.
        policy.require = Require::All;
        assert!(Tally::new(&policy).add(by_key(1, None), ""));
    }

    #[test]
    fn bad_windows_name_their_field() {
        assert_eq!(Window::parse(Some("yesterday"), None).unwrap_err().0, "not_before");
        assert_eq!(Window::parse(None, Some("2026-13-01T00:00:00Z")).unwrap_err().0, "not_after");
        let (field, why) =
            Window::parse(Some("2026-02-01T00:00:00Z"), Some("2026-01-01T00:00:00Z")).unwrap_err();
        assert_eq!((field.as_str(), why.as_str()), ("not_after", "is before not_before"));
        assert_eq!(Window::default().to_string(), "… to …");
    }

    #[test]
    fn a_revoked_digest_is_refused_by_name() {
        let policy = Policy { revoked_digests: vec![D.to_owned()], ..Policy::default() };
        let msg = policy.check_revoked(&reference(), "manifest", D).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("manifest {D} is revoked")) && msg.contains("revoked_digests"),
            "{msg}"
        );
        assert!(policy.check_revoked(&reference(), "manifest", &D.replace('0', "f")).is_ok());
    }
}
