//! Sigstore bundles (v0.1 to v0.3, JSON), verified offline.
//!
//! A bundle holds what was signed — a `messageSignature` (a signature over
//! the artifact, here the OCI manifest, whose digest it states) or a
//! `dsseEnvelope` (an in-toto statement whose subject digest must be the
//! manifest's) — and the verification material: a public key hint (checked
//! against `[verify] keys`) or a Fulcio certificate (checked against the
//! trusted root's CAs and the `[verify] identities`), and Rekor log entries.
//!
//! One link per step, each failure named: the bundle's media type → the
//! digest it signs is the manifest's → (keyless) a log entry of a trusted
//! log with a valid proof and a signed time → the certificate chains to a
//! trusted CA and is valid at that time → the signature verifies with the
//! certificate's (or a trusted) key → the log entry's body is this very
//! signature, key and digest → the certificate's identity is one the
//! policy names.

use base64::Engine as _;
use serde::Deserialize;

use super::cosign::PublicKey;
use super::fulcio::{self, Identity};
use super::keys::EcKey;
use super::rekor;
use super::root::{TrustedRoot, b64};
use super::{SignedBy, Trusted};

/// The bundle media types read (v0.1, v0.2, v0.3 in both spellings). A
/// referrer holding a bundle has its media type as artifact type: cosign's
/// bundles are the first; sigstore-js's message signatures are v0.2.
pub const MEDIA_TYPES: &[&str] = &[
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
];
/// The largest bundle read (one with a certificate chain and a proof is
/// under 10 KiB).
pub const MAX_BUNDLE_BYTES: u64 = 256 * 1024;
/// The most log entries, DSSE signatures, in-toto subjects looked at.
pub const MAX_ITEMS: usize = 16;
/// The in-toto payload type.
pub const IN_TOTO: &str = "application/vnd.in-toto+json";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    media_type: String,
    verification_material: Material,
    message_signature: Option<MessageSignature>,
    dsse_envelope: Option<Envelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    certificate: Option<RawBytes>,
    x509_certificate_chain: Option<Chain>,
    public_key: Option<serde_json::Value>,
    #[serde(default)]
    tlog_entries: Vec<rekor::Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytes {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct Chain {
    certificates: Vec<RawBytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageSignature {
    message_digest: Option<MessageDigest>,
    signature: String,
}

#[derive(Deserialize)]
struct MessageDigest {
    algorithm: String,
    digest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    payload: String,
    payload_type: String,
    signatures: Vec<DsseSignature>,
}

#[derive(Deserialize)]
struct DsseSignature {
    sig: String,
}

#[derive(Deserialize)]
struct Statement {
    #[serde(rename = "_type")]
    kind: String,
    subject: Vec<StatementSubject>,
}

#[derive(Deserialize)]
struct StatementSubject {
    #[serde(default)]
    digest: std::collections::BTreeMap<String, String>,
}

/// What is signed: the bytes (or digest) and the signatures over them.
enum Signed {
    /// A signature over the artifact: its SHA-256 digest.
    Message { digest: Vec<u8>, sig: Vec<u8> },
    /// DSSE: the pre-authentication encoding and each signature.
    Dsse { pae: Vec<u8>, payload: Vec<u8>, sigs: Vec<Vec<u8>> },
}

impl Signed {
    /// The first signature `key` verifies.
    fn verified_by(&self, key: &EcKey) -> Option<&[u8]> {
        match self {
            // A message signature is over the artifact hashed with SHA-256;
            // a P-384 key would hash with SHA-384, which the digest cannot give.
            Signed::Message { digest, sig } => {
                (matches!(key, EcKey::P256(_)) && key.verify_prehash(digest, sig)).then_some(sig.as_slice())
            }
            Signed::Dsse { pae, sigs, .. } => sigs.iter().find(|s| key.verify(pae, s)).map(Vec::as_slice),
        }
    }
}

/// DSSE's pre-authentication encoding.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut v = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// Verify `bytes` (a bundle) for the manifest `digest` (`sha256:<hex>`):
/// by one of `keys`, or keylessly by a certificate from a CA of `root` for
/// one of `identities`. Returns who signed (which key or identity, a key's
/// source or the certificate's identity, issuer and log index, and the
/// log's signed time when there is one); `Err` says which link broke.
pub fn verify(
    bytes: &[u8],
    digest: &str,
    keys: &[PublicKey],
    identities: &[Identity],
    root: Option<&TrustedRoot>,
) -> Result<SignedBy, String> {
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(format!("the bundle is larger than {MAX_BUNDLE_BYTES} bytes"));
    }
    let bundle: Bundle = serde_json::from_slice(bytes).map_err(|e| format!("not a Sigstore bundle: {e}"))?;
    if !MEDIA_TYPES.contains(&bundle.media_type.as_str()) {
        return Err(format!(
            "the bundle's mediaType is {:?}, not a Sigstore bundle v0.1 to v0.3",
            bundle.media_type
        ));
    }
    let hex_digest =
        digest.strip_prefix("sha256:").ok_or_else(|| format!("{digest} is not a sha256 digest"))?;
    let want = hex::decode(hex_digest).map_err(|e| format!("{digest}: {e}"))?;
    let signed = signed_content(&bundle, digest, hex_digest, &want)?;
    let m = &bundle.verification_material;
    if m.tlog_entries.len() > MAX_ITEMS {
        return Err(format!("the bundle has over {MAX_ITEMS} log entries"));
    }
    let leaf = match (&m.certificate, &m.x509_certificate_chain) {
        (Some(c), _) => Some(b64(&c.raw_bytes, "the certificate")?),
        (None, Some(chain)) => Some(b64(
            &chain.certificates.first().ok_or("the certificate chain is empty")?.raw_bytes,
            "the certificate",
        )?),
        (None, None) => None,
    };
    match leaf {
        Some(leaf) => keyless(&signed, hex_digest, &leaf, &m.tlog_entries, identities, root),
        None if m.public_key.is_some() => keyed(&signed, hex_digest, keys, &m.tlog_entries, root),
        None => Err("the bundle has neither a certificate nor a public key".into()),
    }
}

/// The digest check and what the signatures are over.
fn signed_content(bundle: &Bundle, digest: &str, hex_digest: &str, want: &[u8]) -> Result<Signed, String> {
    match (&bundle.message_signature, &bundle.dsse_envelope) {
        (Some(ms), None) => {
            let md = ms.message_digest.as_ref().ok_or("the message signature states no messageDigest")?;
            if md.algorithm != "SHA2_256" {
                return Err(format!("messageDigest algorithm {} is not SHA2_256", md.algorithm));
            }
            let got = b64(&md.digest, "messageDigest.digest")?;
            if got != want {
                return Err(format!("the bundle signs digest sha256:{}, not {digest}", hex::encode(&got)));
            }
            Ok(Signed::Message { digest: got, sig: b64(&ms.signature, "the signature")? })
        }
        (None, Some(env)) => {
            if env.payload_type != IN_TOTO {
                return Err(format!("the DSSE payloadType is {:?}, not {IN_TOTO:?}", env.payload_type));
            }
            let payload = b64(&env.payload, "the DSSE payload")?;
            let st: Statement = serde_json::from_slice(&payload)
                .map_err(|e| format!("the DSSE payload is not an in-toto statement: {e}"))?;
            if !st.kind.starts_with("https://in-toto.io/Statement/") {
                return Err(format!("the DSSE payload's _type is {:?}, not an in-toto statement", st.kind));
            }
            if st.subject.len() > MAX_ITEMS || env.signatures.len() > MAX_ITEMS {
                return Err(format!("over {MAX_ITEMS} subjects or signatures"));
            }
            if !st.subject.iter().any(|s| s.digest.get("sha256").map(String::as_str) == Some(hex_digest)) {
                let named: Vec<_> = st
                    .subject
                    .iter()
                    .filter_map(|s| s.digest.get("sha256"))
                    .map(|h| format!("sha256:{h}"))
                    .collect();
                return Err(format!(
                    "the in-toto statement's subjects are [{}], not {digest}",
                    named.join(", ")
                ));
            }
            let sigs =
                env.signatures.iter().map(|s| b64(&s.sig, "a DSSE signature")).collect::<Result<_, _>>()?;
            Ok(Signed::Dsse { pae: pae(&env.payload_type, &payload), payload, sigs })
        }
        _ => Err("the bundle has not exactly one of messageSignature and dsseEnvelope".into()),
    }
}

/// A PEM block's DER.
fn pem_der(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).map(str::trim).collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// Whether the log entry's body is this signature by `verifier` (DER: a
/// certificate or a SubjectPublicKeyInfo) over this digest or payload.
fn body_matches(
    body: &[u8],
    kind: &str,
    signed: &Signed,
    sig: &[u8],
    hex_digest: &str,
    verifier: &[u8],
) -> Result<(), String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the log entry's body is not JSON: {e}"))?;
    let s = |p: &str| v.pointer(p).and_then(|x| x.as_str()).unwrap_or_default();
    let pem_is =
        |b: &str| b64(b, "a log entry key").ok().and_then(|p| pem_der(&p)).is_some_and(|d| d == verifier);
    let sig_is = |b: &str| b64(b, "a log entry signature").is_ok_and(|x| x == sig);
    let body_kind = s("/kind");
    if body_kind != kind {
        return Err(format!("the log entry's body is a {body_kind:?}, not the {kind:?} it is listed as"));
    }
    match (kind, signed) {
        ("hashedrekord", Signed::Message { .. }) => {
            if s("/spec/data/hash/algorithm") != "sha256" || s("/spec/data/hash/value") != hex_digest {
                return Err(format!(
                    "the log entry is for digest sha256:{}, not this bundle's",
                    s("/spec/data/hash/value")
                ));
            }
            if !sig_is(s("/spec/signature/content")) || !pem_is(s("/spec/signature/publicKey/content")) {
                return Err("the log entry is for another signature or key than this bundle's".into());
            }
            Ok(())
        }
        ("dsse", Signed::Dsse { payload, .. }) => {
            // What a signer proposes (`spec.proposedContent`) is not what
            // Rekor stores, and no log entry of Rekor's has it.
            if v.pointer("/spec/payloadHash").is_none() {
                return Err("the log entry's DSSE body has no payloadHash: it is not the form Rekor stores \
                            (a signer's proposal, spec.proposedContent, is not)"
                    .into());
            }
            if s("/spec/payloadHash/value") != crate::digest::sha256_hex(payload) {
                return Err("the log entry is for another DSSE payload than this bundle's".into());
            }
            let sigs = v.pointer("/spec/signatures").and_then(|x| x.as_array()).cloned().unwrap_or_default();
            let ours = sigs.iter().any(|e| {
                sig_is(e.get("signature").and_then(|x| x.as_str()).unwrap_or_default())
                    && pem_is(e.get("verifier").and_then(|x| x.as_str()).unwrap_or_default())
            });
            if !ours {
                return Err("the log entry is for another signature or key than this bundle's".into());
            }
            Ok(())
        }
        (k, _) => Err(format!("a log entry of kind {k:?} does not match this bundle's content")),
    }
}

fn keyless(
    signed: &Signed,
    hex_digest: &str,
    leaf: &[u8],
    entries: &[rekor::Entry],
    identities: &[Identity],
    root: Option<&TrustedRoot>,
) -> Result<SignedBy, String> {
    let Some(root) = root.filter(|_| !identities.is_empty()) else {
        return Err(
            "a keyless bundle (a certificate), but the policy has no `identities` and `trusted_root`".into(),
        );
    };
    if entries.is_empty() {
        return Err("a keyless bundle without a transparency log entry".into());
    }
    let mut reasons = Vec::new();
    for entry in entries {
        let attempt = (|| {
            let checked = rekor::check(entry, root)?;
            let time = checked.signed_time.ok_or(
                "the log entry's integrated time is not signed (no signed entry timestamp; \
                 timestamp authorities are not supported): the certificate's validity cannot be checked",
            )?;
            let (key, signer) = fulcio::verify_leaf(leaf, root, time)?;
            let sig =
                signed.verified_by(&key).ok_or("the signature does not verify with the certificate's key")?;
            body_matches(&checked.body, &entry.kind_version.kind, signed, sig, hex_digest, leaf)?;
            // The first identity that matches and whose window holds the
            // log time; else the first that matches (its window refuses it,
            // by name, when the signature is counted).
            let matching = |i: &&Identity| i.matches(&signer);
            let in_window = identities.iter().position(|i| matching(&i) && i.window.contains(time));
            let Some(index) = in_window.or_else(|| identities.iter().position(|i| matching(&i))) else {
                let policy: Vec<_> = identities.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "the certificate's identity {} (issuer {}) is none of the policy's: {}",
                    signer.subjects.join(", "),
                    signer.issuer,
                    policy.join(", ")
                ));
            };
            let who = format!(
                "{} (issuer {}, {} log index {})",
                signer.subjects.join(", "),
                signer.issuer,
                checked.log,
                checked.log_index
            );
            Ok(SignedBy { by: Trusted::Identity(index), who, time: Some(time) })
        })();
        match attempt {
            Ok(who) => return Ok(who),
            Err(e) => reasons.push(e),
        }
    }
    Err(reasons.join("; "))
}

fn keyed(
    signed: &Signed,
    hex_digest: &str,
    keys: &[PublicKey],
    entries: &[rekor::Entry],
    root: Option<&TrustedRoot>,
) -> Result<SignedBy, String> {
    let found = keys.iter().enumerate().find_map(|(i, k)| Some((i, k, signed.verified_by(&k.ec())?)));
    let Some((index, key, sig)) = found else {
        let names: Vec<_> = keys.iter().map(|k| k.source.as_str()).collect();
        return Err(format!("the bundle is signed by none of the trusted keys ({})", names.join(", ")));
    };
    // With a trusted root, the log entries a key-signed bundle carries are
    // checked too, and the first signed integrated time is the signing time
    // a key's validity window is held against. Without a root the bundle's
    // times are unproven: the signature has no time (see `Policy::admit`).
    let mut time = None;
    if let Some(root) = root {
        for entry in entries {
            let checked = rekor::check(entry, root)?;
            body_matches(&checked.body, &entry.kind_version.kind, signed, sig, hex_digest, &key.spki_der())?;
            time = time.or(checked.signed_time);
        }
    }
    Ok(SignedBy { by: Trusted::Key(index), who: key.source.clone(), time })
}

#[cfg(test)]
mod tests {
    use super::*;
    use durasync_test_support::sigstore::{self as fixtures, By, GITHUB, Log, Make, Pki, Sct, WORKFLOW};
    use p256::pkcs8::EncodePublicKey as _;
    use serde_json::Value;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const D2: &str = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    fn policy() -> Vec<Identity> {
        vec![Identity::new(GITHUB, None, Some("^https://github.com/vendor/plugins/")).unwrap()]
    }

    #[test]
    fn a_corpus_of_good_and_tampered_bundles_is_each_accepted_or_refused_for_its_reason() {
        if !fixtures::have_openssl() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path());
        let log = Log::new(7);
        let root = TrustedRoot::parse(pki.trusted_root(&[&log]).as_bytes(), "trusted_root.json").unwrap();
        let good = pki.leaf(&format!("URI:{WORKFLOW}"), GITHUB, false, 1);
        let attacker = pki.leaf(
            "URI:https://github.com/attacker/plugins/.github/workflows/r.yml@refs/heads/main",
            GITHUB,
            false,
            1,
        );
        let google = pki.leaf(&format!("URI:{WORKFLOW}"), "https://accounts.google.com", false, 1);
        let person = pki.leaf("email:release@vendor.example", "https://accounts.google.com", true, 1);
        let now = fixtures::now();
        let make = |by: By<'_>, dsse: bool, time: i64, log: &Log, v01: bool| -> Value {
            fixtures::bundle(&Make { by, digest: D.to_owned(), dsse, time, log, v01 })
        };
        let ids = policy();
        let check = |b: &Value, digest: &str, ids: &[Identity]| {
            verify(b.to_string().as_bytes(), digest, &[], ids, Some(&root)).map(|s| s.who)
        };

        // Good: v0.3 message signature and DSSE, v0.1 with a chain and a
        // signed entry timestamp only, the older issuer extension and an email.
        for (dsse, v01) in [(false, false), (true, false), (false, true), (true, true)] {
            let who = check(&make(By::Cert(&good), dsse, now, &log, v01), D, &ids)
                .unwrap_or_else(|e| panic!("dsse {dsse} v01 {v01}: {e}"));
            assert!(
                who.contains(WORKFLOW) && who.contains(GITHUB) && who.contains("log index 1005"),
                "{who}"
            );
        }
        // Of two matching identities, the one whose window holds the log time
        // is credited (and the log time is the signing time).
        let mut closed = ids[0].clone();
        closed.window = super::super::Window { not_before: None, not_after: Some(now - 1) };
        let b = make(By::Cert(&good), false, now, &log, false).to_string();
        let s = verify(b.as_bytes(), D, &[], &[closed.clone(), ids[0].clone()], Some(&root)).unwrap();
        assert_eq!((s.by, s.time), (Trusted::Identity(1), Some(now)));
        let s = verify(b.as_bytes(), D, &[], &[closed], Some(&root)).unwrap();
        assert_eq!(s.by, Trusted::Identity(0));
        let email =
            [Identity::new("https://accounts.google.com", Some("release@vendor.example"), None).unwrap()];
        assert!(
            check(&make(By::Cert(&person), false, now, &log, false), D, &email).unwrap().contains("release@")
        );

        let refused = |b: &Value, digest: &str, why: &str| {
            let e = check(b, digest, &ids).expect_err(why);
            assert!(e.contains(why), "expected {why:?} in: {e}");
        };
        // Another identity, another issuer.
        refused(&make(By::Cert(&attacker), false, now, &log, false), D, "is none of the policy's");
        refused(
            &make(By::Cert(&google), false, now, &log, false),
            D,
            "(issuer https://accounts.google.com) is none",
        );
        // The certificate (valid for a day from now) expired at the log's time.
        refused(&make(By::Cert(&good), false, now + 3 * 86_400, &log, false), D, "not at the log's time");
        refused(&make(By::Cert(&good), true, now - 86_400, &log, false), D, "not at the log's time");
        // An inclusion proof for another entry.
        let mut b = make(By::Cert(&good), false, now, &log, false);
        let other = make(By::Cert(&good), true, now, &log, false);
        b["verificationMaterial"]["tlogEntries"][0]["inclusionProof"] =
            other["verificationMaterial"]["tlogEntries"][0]["inclusionProof"].clone();
        refused(&b, D, "a proof for another entry");
        // A log key not in the trusted root.
        refused(
            &make(By::Cert(&good), false, now, &Log::new(9), false),
            D,
            "is not a log key of the trusted root",
        );
        // The artifact digest swapped: the bundle signs another manifest.
        refused(&make(By::Cert(&good), false, now, &log, false), D2, "the bundle signs digest");
        refused(&make(By::Cert(&good), true, now, &log, false), D2, "the in-toto statement's subjects are");
        // A bundle of another media type.
        let mut b = make(By::Cert(&good), false, now, &log, false);
        b["mediaType"] = "application/vnd.dev.sigstore.bundle.v0.4+json".into();
        refused(&b, D, "mediaType");
        // No signed time: the proof alone does not sign the integrated time.
        let mut b = make(By::Cert(&good), false, now, &log, false);
        b["verificationMaterial"]["tlogEntries"][0].as_object_mut().unwrap().remove("inclusionPromise");
        refused(&b, D, "integrated time is not signed");
        // A signed entry timestamp over another time.
        let mut b = make(By::Cert(&good), false, now, &log, false);
        b["verificationMaterial"]["tlogEntries"][0]["integratedTime"] = (now - 60).to_string().into();
        refused(&b, D, "signed entry timestamp does not verify");
        // A certificate from a CA the root does not name.
        let other_dir = tempfile::tempdir().unwrap();
        let rogue = Pki::new(other_dir.path()).leaf(&format!("URI:{WORKFLOW}"), GITHUB, false, 1);
        refused(
            &make(By::Cert(&rogue), false, now, &log, false),
            D,
            "does not chain to a CA of the trusted root",
        );
        // Certificate transparency: no SCT, an SCT of a log the root does
        // not list, an SCT signed over another time than it states; a root
        // listing no CT logs checks none.
        let sct_leaf = |sct| pki.leaf_with(&format!("URI:{WORKFLOW}"), GITHUB, false, 1, sct);
        let without = sct_leaf(Sct::Without);
        let (unknown_ct, forged) = (Log::new(22), sct_leaf(Sct::Forged));
        let other_ct = sct_leaf(Sct::By(&unknown_ct));
        // After the leaves are made: each is valid from the second it is made.
        let now = fixtures::now();
        refused(
            &make(By::Cert(&without), false, now, &log, false),
            D,
            "carries no signed certificate timestamp",
        );
        refused(
            &make(By::Cert(&other_ct), false, now, &log, false),
            D,
            "that is not a CT log of the trusted root",
        );
        refused(
            &make(By::Cert(&forged), false, now, &log, false),
            D,
            "the SCT of CT log https://ctfe.test does not verify",
        );
        let mut no_ct: Value = serde_json::from_str(&pki.trusted_root(&[&log])).unwrap();
        no_ct["ctlogs"] = serde_json::json!([]);
        let no_ct = TrustedRoot::parse(no_ct.to_string().as_bytes(), "no-ct.json").unwrap();
        let b = make(By::Cert(&without), false, now, &log, false).to_string();
        assert!(verify(b.as_bytes(), D, &[], &ids, Some(&no_ct)).is_ok());

        // Another signature than the certificate's key made, and a log
        // entry for another signature.
        let mut b = make(By::Cert(&good), false, now, &log, false);
        b["messageSignature"] =
            make(By::Cert(&attacker), false, now, &log, false)["messageSignature"].clone();
        refused(&b, D, "does not verify with the certificate's key");
        let mut b = make(By::Cert(&good), false, now, &log, false);
        b["verificationMaterial"]["tlogEntries"] =
            make(By::Cert(&attacker), false, now, &log, false)["verificationMaterial"]["tlogEntries"].clone();
        refused(&b, D, "another signature or key");
        // Keyless needs a policy; a policy of keys does not take a certificate.
        let e = verify(
            make(By::Cert(&good), false, now, &log, false).to_string().as_bytes(),
            D,
            &[],
            &[],
            Some(&root),
        );
        assert!(e.unwrap_err().contains("no `identities`"));

        // Key-based bundles: by one of the keys, its log entry checked too.
        let sk = p256::ecdsa::SigningKey::from_slice(&[42; 32]).unwrap();
        let pem = sk.verifying_key().to_public_key_pem(Default::default()).unwrap();
        let key = PublicKey::from_pem(&pem, "vendor.pub").unwrap();
        for dsse in [false, true] {
            let b = make(By::Key(&sk), dsse, now, &log, false).to_string();
            // With the root, the log's signed time is the signing time.
            let logged = verify(b.as_bytes(), D, std::slice::from_ref(&key), &[], Some(&root)).unwrap();
            assert_eq!(
                (logged.who.as_str(), logged.time, logged.by),
                ("vendor.pub", Some(now), Trusted::Key(0))
            );
            let no_root = verify(b.as_bytes(), D, std::slice::from_ref(&key), &[], None).unwrap();
            assert_eq!((no_root.who.as_str(), no_root.time), ("vendor.pub", None));
            let other = PublicKey::from_pem(
                &p256::ecdsa::SigningKey::from_slice(&[43; 32])
                    .unwrap()
                    .verifying_key()
                    .to_public_key_pem(Default::default())
                    .unwrap(),
                "other.pub",
            )
            .unwrap();
            assert!(
                verify(b.as_bytes(), D, &[other], &[], None)
                    .unwrap_err()
                    .contains("none of the trusted keys (other.pub)")
            );
        }
        let b = make(By::Key(&sk), false, now, &Log::new(9), false).to_string();
        assert!(verify(b.as_bytes(), D, &[key], &[], Some(&root)).unwrap_err().contains("not a log key"));
        // Size bound.
        let huge = vec![b' '; MAX_BUNDLE_BYTES as usize + 1];
        assert!(verify(&huge, D, &[], &ids, Some(&root)).unwrap_err().contains("larger than"));
    }
}
