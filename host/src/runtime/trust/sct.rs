//! The signed certificate timestamp (SCT, RFC 6962) a Fulcio certificate
//! embeds: a certificate transparency log's promise that it logged the
//! certificate, checked against the trusted root's `ctlogs`.
//!
//! Fulcio logs a precertificate before it issues the certificate, and
//! embeds the log's SCT in extension 1.3.6.1.4.1.11129.2.4.2. The log
//! signed (RFC 6962, section 3.2) the SCT's version, time and extensions
//! over the issuer's key hash (the SHA-256 of the issuing CA's DER
//! SubjectPublicKeyInfo) and the certificate's TBSCertificate without that
//! extension. A log is found by its key id (the SHA-256 of its DER public
//! key), as cosign and sigstore-python find it.
//!
//! Note well: with a trusted root that lists no `ctlogs`, nothing here is
//! checked (there is no key to check an SCT with); the Rekor entry remains
//! the proof that the signature was logged. A certificate issued through a
//! precertificate signing certificate (a CA certificate with the
//! certificate transparency extended key usage) is checked against the
//! next CA up, as sigstore-python does, without rewriting the issuer.

use x509_cert::Certificate;
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::ExtendedKeyUsage;
use x509_cert::ext::pkix::sct::{
    HashAlgorithm, SignatureAlgorithm, SignedCertificateTimestamp, SignedCertificateTimestampList, Version,
};

use super::keys::{EcKey, Hash};
use super::root::{Log, TrustedRoot};

/// The embedded SCT list extension.
pub const SCT_LIST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.2");
/// The extended key usage of a precertificate signing certificate.
const PRECERT_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.4");
const EXTENDED_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37");
/// The most SCTs looked at in one certificate (Fulcio embeds one).
pub const MAX_SCTS: usize = 16;

/// A verified SCT: the log that signed it and when (Unix milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// The CT log's base URL.
    pub log: String,
    /// The SCT's time, Unix milliseconds.
    pub timestamp: u64,
}

fn is_precert_signer(cert: &Certificate) -> bool {
    cert.tbs_certificate
        .extensions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|e| e.extn_id == EXTENDED_KEY_USAGE)
        .and_then(|e| ExtendedKeyUsage::from_der(e.extn_value.as_bytes()).ok())
        .is_some_and(|eku| eku.0.contains(&PRECERT_SIGNING))
}

/// Check the SCTs `leaf` embeds: one must be signed by a CT log of `root`
/// whose window holds the SCT's time, over `leaf` as a precertificate
/// issued by `chain[0]` (the CA that issued it, nearest first). `Ok(None)`
/// when the root lists no CT logs (nothing can be checked). `Err` names
/// what is missing or why each SCT failed.
pub fn verify(
    leaf: &Certificate,
    chain: &[Certificate],
    root: &TrustedRoot,
) -> Result<Option<Logged>, String> {
    if root.ct_logs.is_empty() {
        return Ok(None);
    }
    let subject = leaf.tbs_certificate.subject.to_string();
    let Some(ext) =
        leaf.tbs_certificate.extensions.as_deref().unwrap_or_default().iter().find(|e| e.extn_id == SCT_LIST)
    else {
        return Err(format!(
            "certificate {subject} carries no signed certificate timestamp (extension {SCT_LIST}), \
             and the trusted root {} lists CT logs",
            root.source
        ));
    };
    let scts = SignedCertificateTimestampList::from_der(ext.extn_value.as_bytes())
        .map_err(|e| e.to_string())
        .and_then(|list| list.parse_timestamps().map_err(|e| format!("{e:?}")))
        .and_then(|list| {
            if list.len() > MAX_SCTS {
                return Err(format!("over {MAX_SCTS} SCTs"));
            }
            list.iter()
                .map(|s| s.parse_timestamp().map_err(|e| format!("{e:?}")))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| format!("certificate {subject}: its SCT list does not parse: {e}"))?;
    if scts.is_empty() {
        return Err(format!("certificate {subject}: its SCT list is empty"));
    }
    let issuer = match chain {
        [pre, next, ..] if is_precert_signer(pre) => next,
        [first, ..] => first,
        [] => return Err("no issuer to check the SCT against".into()),
    };
    let issuer_key_hash = Hash::Sha256.of(&issuer
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| format!("the issuer's key: {e}"))?);
    let tbs = precertificate_tbs(leaf)?;
    let mut reasons = Vec::new();
    for sct in &scts {
        match check_one(sct, &issuer_key_hash, &tbs, root) {
            Ok(log) => return Ok(Some(Logged { log: log.base_url.clone(), timestamp: sct.timestamp })),
            Err(e) => reasons.push(e),
        }
    }
    Err(format!(
        "certificate {subject} has no valid SCT from a CT log of the trusted root {} ({})",
        root.source,
        reasons.join("; ")
    ))
}

/// The leaf's TBSCertificate without the SCT list extension, DER: what the
/// log signed as the precertificate.
fn precertificate_tbs(leaf: &Certificate) -> Result<Vec<u8>, String> {
    let mut tbs = leaf.tbs_certificate.clone();
    if let Some(exts) = tbs.extensions.as_mut() {
        exts.retain(|e| e.extn_id != SCT_LIST);
        if exts.is_empty() {
            tbs.extensions = None;
        }
    }
    tbs.to_der().map_err(|e| format!("the certificate's TBSCertificate does not encode: {e}"))
}

/// RFC 6962's `digitally-signed` input of a precertificate entry.
fn signed_data(
    sct: &SignedCertificateTimestamp,
    issuer_key_hash: &[u8],
    tbs: &[u8],
) -> Result<Vec<u8>, String> {
    let len =
        u32::try_from(tbs.len()).ok().filter(|n| *n < 1 << 24).ok_or("the TBSCertificate is too large")?;
    let ext = sct.extensions.as_slice();
    let ext_len = u16::try_from(ext.len()).map_err(|_| "the SCT's extensions are too large")?;
    let mut v = Vec::with_capacity(tbs.len() + ext.len() + 64);
    v.push(0); // sct_version v1
    v.push(0); // signature_type certificate_timestamp
    v.extend_from_slice(&sct.timestamp.to_be_bytes());
    v.extend_from_slice(&1u16.to_be_bytes()); // entry_type precert_entry
    v.extend_from_slice(issuer_key_hash);
    v.extend_from_slice(&len.to_be_bytes()[1..]);
    v.extend_from_slice(tbs);
    v.extend_from_slice(&ext_len.to_be_bytes());
    v.extend_from_slice(ext);
    Ok(v)
}

fn check_one<'r>(
    sct: &SignedCertificateTimestamp,
    issuer_key_hash: &[u8],
    tbs: &[u8],
    root: &'r TrustedRoot,
) -> Result<&'r Log, String> {
    let id = &sct.log_id.key_id;
    let Some(log) = root.ct_log(id) else {
        return Err(format!("an SCT of log {} that is not a CT log of the trusted root", hex::encode(id)));
    };
    if sct.version != Version::V1 {
        return Err(format!("the SCT of CT log {} is not version 1", log.base_url));
    }
    let alg = &sct.signature.algorithm;
    let hash = match (&log.key, &alg.hash, &alg.signature) {
        (EcKey::P256(_), HashAlgorithm::Sha256, SignatureAlgorithm::Ecdsa) => Hash::Sha256,
        (EcKey::P384(_), HashAlgorithm::Sha384, SignatureAlgorithm::Ecdsa) => Hash::Sha384,
        (_, h, s) => {
            return Err(format!(
                "the SCT of CT log {} is signed with {s:?} and {h:?}, not the log key's ECDSA",
                log.base_url
            ));
        }
    };
    let secs = i64::try_from(sct.timestamp / 1000).unwrap_or(i64::MAX);
    if !log.valid_for.contains(secs) {
        return Err(format!("CT log {} was not valid at the SCT's time", log.base_url));
    }
    let data = signed_data(sct, issuer_key_hash, tbs)?;
    if !log.key.verify_prehash(&hash.of(&data), sct.signature.signature.as_slice()) {
        return Err(format!("the SCT of CT log {} does not verify", log.base_url));
    }
    Ok(log)
}
