//! cosign's key-based signatures: the simple-signing payload and the ECDSA
//! P-256 / SHA-256 signature over it.
//!
//! For a manifest digest D, cosign pushes the tag `sha256-<hex of D>.sig`:
//! a manifest whose layers (`application/vnd.dev.cosign.simplesigning.v1+json`)
//! are payloads like
//! `{"critical":{"identity":{"docker-reference":R},"image":{"docker-manifest-digest":D},
//! "type":"cosign container image signature"},"optional":{…}}`, each with the
//! base64 DER signature in the layer annotation `dev.cosignproject.cosign/signature`.
//! Keyless signatures come as Sigstore bundles (`bundle.rs`).

use std::collections::BTreeMap;

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;

/// A signature layer's media type.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign payload.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";

/// A cosign public key (PEM, `-----BEGIN PUBLIC KEY-----`, ECDSA P-256).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// Where it was read from (messages).
    pub source: String,
    /// When its signatures count (rotation).
    pub window: super::Window,
    key: VerifyingKey,
}

impl PublicKey {
    /// Parse a PEM public key; `source` names it in messages.
    pub fn from_pem(pem: &str, source: &str) -> Result<PublicKey, String> {
        let key = VerifyingKey::from_public_key_pem(pem.trim()).map_err(|e| {
            format!("not an ECDSA P-256 public key in PEM (`-----BEGIN PUBLIC KEY-----`): {e}")
        })?;
        Ok(PublicKey { source: source.to_owned(), window: super::Window::default(), key })
    }

    /// The key, for Sigstore bundles.
    pub(crate) fn ec(&self) -> super::keys::EcKey {
        super::keys::EcKey::P256(self.key)
    }

    /// Its key id: the sha256 of its DER SubjectPublicKeyInfo, lowercase
    /// hex (what `[verify] revoked_keys` lists; `sha256sum` of the DER form
    /// of the PEM file).
    pub fn id(&self) -> String {
        crate::digest::sha256_hex(&self.spki_der())
    }

    /// Its DER SubjectPublicKeyInfo.
    pub(crate) fn spki_der(&self) -> Vec<u8> {
        use p256::pkcs8::EncodePublicKey as _;
        self.key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default()
    }

    /// Whether `signature` (base64 of DER) is this key's over `payload`.
    fn verifies(&self, payload: &[u8], signature: &Signature) -> bool {
        self.key.verify(payload, signature).is_ok()
    }
}

/// The payload fields durasync checks.
#[derive(Debug)]
struct Payload {
    digest: String,
    kind: String,
    optional: BTreeMap<String, serde_json::Value>,
}

fn parse_payload(bytes: &[u8]) -> Result<Payload, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("the payload is not JSON: {e}"))?;
    let critical = v.get("critical").ok_or("the payload has no `critical` section")?;
    let digest = critical
        .pointer("/image/docker-manifest-digest")
        .and_then(|d| d.as_str())
        .ok_or("the payload has no critical.image.docker-manifest-digest")?;
    let kind = critical.get("type").and_then(|t| t.as_str()).unwrap_or_default();
    let optional = match v.get("optional") {
        Some(serde_json::Value::Object(o)) => o.clone().into_iter().collect(),
        _ => BTreeMap::new(),
    };
    Ok(Payload { digest: digest.to_owned(), kind: kind.to_owned(), optional })
}

/// Check one signature layer: its signature annotation against `keys`,
/// then its payload against `manifest_digest` and the required
/// `annotations`. Returns the key that signed; `Err` says why this
/// signature does not count.
///
/// Note well: the payload's `docker-reference` is not compared with the
/// reference pulled (mirrors and re-tagging change it; the digest is what
/// the signature binds).
pub fn check<'k>(
    payload: &[u8],
    signature_b64: Option<&str>,
    manifest_digest: &str,
    keys: &'k [PublicKey],
    annotations: &BTreeMap<String, String>,
) -> Result<&'k PublicKey, String> {
    let b64 = signature_b64.ok_or_else(|| format!("no {SIGNATURE_ANNOTATION} annotation"))?;
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("the signature is not base64: {e}"))?;
    let sig = Signature::from_der(&der).map_err(|e| format!("the signature is not DER ECDSA: {e}"))?;
    let key = keys.iter().find(|k| k.verifies(payload, &sig)).ok_or_else(|| {
        let names: Vec<_> = keys.iter().map(|k| k.source.as_str()).collect();
        format!("signed by none of the trusted keys ({})", names.join(", "))
    })?;
    let p = parse_payload(payload)?;
    if p.kind != PAYLOAD_TYPE {
        return Err(format!("the payload's critical.type is {:?}, not {PAYLOAD_TYPE:?}", p.kind));
    }
    if p.digest != manifest_digest {
        return Err(format!("the payload signs digest {}, not {manifest_digest}", p.digest));
    }
    for (k, want) in annotations {
        match p.optional.get(k) {
            Some(serde_json::Value::String(got)) if got == want => {}
            Some(other) => return Err(format!("annotation {k} is {other}, not {want:?}")),
            None => return Err(format!("the payload lacks the required annotation {k}={want:?}")),
        }
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::Signer as _;
    use p256::pkcs8::EncodePublicKey as _;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn key(seed: u8) -> (SigningKey, PublicKey) {
        let sk = SigningKey::from_slice(&[seed; 32]).unwrap();
        let pem = sk.verifying_key().to_public_key_pem(Default::default()).unwrap();
        (sk.clone(), PublicKey::from_pem(&pem, &format!("key{seed}")).unwrap())
    }

    fn payload(digest: &str, optional: &str) -> Vec<u8> {
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"r/x"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"{PAYLOAD_TYPE}"}},"optional":{optional}}}"#
        )
        .into_bytes()
    }

    fn sign(sk: &SigningKey, p: &[u8]) -> String {
        let sig: Signature = sk.sign(p);
        base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
    }

    #[test]
    fn a_signature_by_a_trusted_key_over_this_digest_counts() {
        let (sk, pk) = key(7);
        let p = payload(D, r#"{"channel":"stable"}"#);
        let ann = BTreeMap::from([("channel".to_owned(), "stable".to_owned())]);
        assert_eq!(check(&p, Some(&sign(&sk, &p)), D, &[pk], &ann).unwrap().source, "key7");
    }

    #[test]
    fn each_broken_link_is_named() {
        let (sk, pk) = key(7);
        let keys = vec![pk];
        let (other, _) = key(9);
        let none = BTreeMap::new();
        let p = payload(D, "null");
        let why = |r: Result<&PublicKey, String>| r.unwrap_err();
        assert!(
            why(check(&p, Some(&sign(&other, &p)), D, &keys, &none)).contains("none of the trusted keys")
        );
        let d2 = D.replace('0', "f");
        let p2 = payload(&d2, "null");
        assert!(why(check(&p2, Some(&sign(&sk, &p2)), D, &keys, &none)).contains("signs digest"));
        assert!(why(check(&p, None, D, &keys, &none)).contains("annotation"));
        assert!(why(check(&p, Some("%%"), D, &keys, &none)).contains("base64"));
        let ann = BTreeMap::from([("channel".to_owned(), "stable".to_owned())]);
        assert!(why(check(&p, Some(&sign(&sk, &p)), D, &keys, &ann)).contains("channel"));
        let mut tampered = p.clone();
        tampered.push(b' ');
        assert!(why(check(&tampered, Some(&sign(&sk, &p)), D, &keys, &none)).contains("none of the trusted"));
        assert!(
            PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", "k").is_err()
        );
    }

    #[test]
    fn a_key_id_is_the_sha256_of_its_der_public_key() {
        let (sk, pk) = key(7);
        let der = sk.verifying_key().to_public_key_der().unwrap();
        assert_eq!(pk.id(), crate::digest::sha256_hex(der.as_bytes()));
        assert_ne!(pk.id(), key(9).1.id());
        assert_eq!(pk.id().len(), 64);
    }

    #[test]
    fn a_key_id_is_what_openssl_gives_for_the_pem_file() {
        let (sk, pk) = key(11);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pub");
        std::fs::write(&path, sk.verifying_key().to_public_key_pem(Default::default()).unwrap()).unwrap();
        let Ok(out) = std::process::Command::new("openssl")
            .args(["pkey", "-pubin", "-outform", "DER", "-in"])
            .arg(&path)
            .output()
        else {
            return; // no openssl here
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(pk.id(), crate::digest::sha256_hex(&out.stdout));
    }
}
