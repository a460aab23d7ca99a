//! Fulcio signing certificates: the chain to a CA of the trusted root, the
//! validity at the log's (signed) time, and the identity they carry.
//!
//! A Fulcio leaf certificate names the signer in its SubjectAltName (a URI
//! for a CI workflow, an email for a person) and the OIDC issuer that
//! vouched for it in extension 1.3.6.1.4.1.57264.1.8 (a DER UTF8String) or
//! the older 1.3.6.1.4.1.57264.1.1 (the raw bytes). The certificate
//! transparency timestamp (SCT) Fulcio embeds is checked against the
//! trusted root's CT logs ([`super::sct`]).

use std::collections::BTreeSet;

use regex::Regex;
use x509_cert::Certificate;
use x509_cert::der::asn1::{ObjectIdentifier, Utf8StringRef};
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, SubjectAltName};

use super::keys::{EcKey, Hash};
use super::root::TrustedRoot;

const ECDSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const SAN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");
const BASIC_CONSTRAINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.19");
const EXTENDED_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37");
const CODE_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.3");
/// Fulcio's OIDC issuer extension (v2: a DER UTF8String).
pub const ISSUER_V2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// Fulcio's older OIDC issuer extension (v1: the raw bytes).
pub const ISSUER_V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");

/// The longest `subject_regex` accepted, and its compiled size limit.
pub const MAX_REGEX_LEN: usize = 1024;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Who a certificate says signed: the SAN (URI or email) and the OIDC issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The SubjectAltName URIs and emails.
    pub subjects: Vec<String>,
    /// The OIDC issuer.
    pub issuer: String,
}

/// One identity a policy accepts: cosign's `--certificate-oidc-issuer` with
/// `--certificate-identity` or `--certificate-identity-regexp`.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The OIDC issuer, exactly.
    pub issuer: String,
    /// The subject.
    pub subject: Subject,
    /// When its signatures count (the log's signed time must fall in it).
    pub window: super::Window,
}

/// A subject, exact or by regular expression.
#[derive(Debug, Clone)]
pub enum Subject {
    /// Equal to this.
    Exact(String),
    /// Matched by this (unanchored, as cosign's: anchor it with `^…$`).
    Regex(Regex),
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.issuer == other.issuer && self.to_string() == other.to_string() && self.window == other.window
    }
}
impl Eq for Identity {}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.subject {
            Subject::Exact(s) => write!(f, "{{ issuer = {:?}, subject = {s:?} }}", self.issuer),
            Subject::Regex(r) => {
                write!(f, "{{ issuer = {:?}, subject_regex = {:?} }}", self.issuer, r.as_str())
            }
        }
    }
}

impl Identity {
    /// An identity; `subject_regex` is compiled with a size limit.
    pub fn new(issuer: &str, subject: Option<&str>, subject_regex: Option<&str>) -> Result<Identity, String> {
        if issuer.is_empty() {
            return Err("`issuer` is required (the OIDC issuer URL)".into());
        }
        let subject = match (subject, subject_regex) {
            (Some(s), None) if !s.is_empty() => Subject::Exact(s.to_owned()),
            (None, Some(r)) if !r.is_empty() && r.len() <= MAX_REGEX_LEN => Subject::Regex(
                regex::RegexBuilder::new(r)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|e| format!("subject_regex {r:?}: {e}"))?,
            ),
            (None, Some(_)) => return Err(format!("subject_regex must be 1 to {MAX_REGEX_LEN} characters")),
            _ => return Err("exactly one of `subject` or `subject_regex` is required".into()),
        };
        Ok(Identity { issuer: issuer.to_owned(), subject, window: super::Window::default() })
    }

    /// Whether `signer` is this identity.
    pub fn matches(&self, signer: &Signer) -> bool {
        signer.issuer == self.issuer
            && signer.subjects.iter().any(|s| match &self.subject {
                Subject::Exact(e) => s == e,
                Subject::Regex(r) => r.is_match(s),
            })
    }
}

fn extension<'a>(cert: &'a Certificate, oid: &ObjectIdentifier) -> Option<&'a [u8]> {
    cert.tbs_certificate
        .extensions
        .as_deref()?
        .iter()
        .find(|e| &e.extn_id == oid)
        .map(|e| e.extn_value.as_bytes())
}

fn subject_of(cert: &Certificate) -> String {
    cert.tbs_certificate.subject.to_string()
}

/// The certificate's public key.
pub fn public_key(cert: &Certificate) -> Result<EcKey, String> {
    let der = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| format!("certificate {}: {e}", subject_of(cert)))?;
    EcKey::from_spki_der(&der).map_err(|e| format!("certificate {}: {e}", subject_of(cert)))
}

/// Whether `cert` is signed by `issuer`'s key (ECDSA with SHA-256 or SHA-384).
fn signed_by(cert: &Certificate, issuer: &Certificate) -> Result<(), String> {
    let hash = match cert.signature_algorithm.oid {
        ECDSA_SHA256 => Hash::Sha256,
        ECDSA_SHA384 => Hash::Sha384,
        other => {
            return Err(format!("signature algorithm {other} is not supported (ECDSA with SHA-256/384 is)"));
        }
    };
    if cert.tbs_certificate.issuer != issuer.tbs_certificate.subject {
        return Err(format!("issued by {}, not by {}", cert.tbs_certificate.issuer, subject_of(issuer)));
    }
    let tbs = cert.tbs_certificate.to_der().map_err(|e| e.to_string())?;
    let sig = cert.signature.as_bytes().ok_or("the signature has unused bits")?;
    if public_key(issuer)?.verify_prehash(&hash.of(&tbs), sig) {
        Ok(())
    } else {
        Err(format!("the signature of {} by {} does not verify", subject_of(cert), subject_of(issuer)))
    }
}

fn valid_at(cert: &Certificate, t: i64) -> Result<(), String> {
    let v = &cert.tbs_certificate.validity;
    let secs = |d: std::time::Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let (from, to) = (secs(v.not_before.to_unix_duration()), secs(v.not_after.to_unix_duration()));
    if t < from || t > to {
        return Err(format!(
            "certificate {} is valid from {} to {}, not at the log's time {}",
            subject_of(cert),
            v.not_before,
            v.not_after,
            humantime::format_rfc3339(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64)
            ),
        ));
    }
    Ok(())
}

fn is_ca(cert: &Certificate) -> bool {
    extension(cert, &BASIC_CONSTRAINTS).and_then(|b| BasicConstraints::from_der(b).ok()).is_some_and(|b| b.ca)
}

/// Check `leaf` (DER) against the trusted root's CAs at time `t` (Unix
/// seconds, the log's signed time): a chain of signatures to one CA's
/// root, every certificate valid at `t`, the CA's window holding `t`, the
/// issuers CAs, the leaf for code signing, and an SCT from one of the
/// root's CT logs embedded in it (when the root lists CT logs). Returns the
/// leaf's key and the signer it names.
pub fn verify_leaf(leaf_der: &[u8], root: &TrustedRoot, t: i64) -> Result<(EcKey, Signer), String> {
    let leaf = Certificate::from_der(leaf_der)
        .map_err(|e| format!("the signing certificate is not X.509 DER: {e}"))?;
    let mut reasons = Vec::new();
    let mut chained = None;
    for ca in &root.authorities {
        let checked = (|| {
            if !ca.valid_for.contains(t) {
                return Err(format!("CA {} was not valid at the log's time", ca.uri));
            }
            let mut child = &leaf;
            for issuer in &ca.chain {
                signed_by(child, issuer)?;
                if !is_ca(issuer) {
                    return Err(format!("{} is not a CA (basicConstraints)", subject_of(issuer)));
                }
                child = issuer;
            }
            Ok(())
        })();
        match checked {
            Ok(()) => {
                for c in std::iter::once(&leaf).chain(&ca.chain) {
                    valid_at(c, t)?;
                }
                chained = Some(ca);
                break;
            }
            Err(e) => reasons.push(format!("{}: {e}", ca.uri)),
        }
    }
    let Some(ca) = chained else {
        return Err(format!(
            "the signing certificate {} does not chain to a CA of the trusted root {} ({})",
            subject_of(&leaf),
            root.source,
            reasons.join("; ")
        ));
    };
    let eku = extension(&leaf, &EXTENDED_KEY_USAGE).and_then(|b| ExtendedKeyUsage::from_der(b).ok());
    if !eku.is_some_and(|e| e.0.contains(&CODE_SIGNING)) {
        return Err(format!("certificate {} is not for code signing (extendedKeyUsage)", subject_of(&leaf)));
    }
    super::sct::verify(&leaf, &ca.chain, root)?;
    Ok((public_key(&leaf)?, signer(&leaf)?))
}

/// The identity a Fulcio certificate names.
pub fn signer(cert: &Certificate) -> Result<Signer, String> {
    let mut subjects = BTreeSet::new();
    if let Some(b) = extension(cert, &SAN) {
        let san = SubjectAltName::from_der(b).map_err(|e| format!("subjectAltName does not parse: {e}"))?;
        for name in san.0 {
            match name {
                GeneralName::UniformResourceIdentifier(u) => subjects.insert(u.as_str().to_owned()),
                GeneralName::Rfc822Name(m) => subjects.insert(m.as_str().to_owned()),
                _ => false,
            };
        }
    }
    if subjects.is_empty() {
        return Err(format!("certificate {} names no URI or email subject", subject_of(cert)));
    }
    let issuer = if let Some(b) = extension(cert, &ISSUER_V2) {
        Utf8StringRef::from_der(b)
            .map_err(|e| format!("the OIDC issuer extension {ISSUER_V2} is not a UTF8String: {e}"))?
            .as_str()
            .to_owned()
    } else if let Some(b) = extension(cert, &ISSUER_V1) {
        String::from_utf8(b.to_vec())
            .map_err(|_| format!("the OIDC issuer extension {ISSUER_V1} is not UTF-8"))?
    } else {
        return Err(format!("certificate {} names no OIDC issuer (extension {ISSUER_V2})", subject_of(cert)));
    };
    Ok(Signer { subjects: subjects.into_iter().collect(), issuer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_match_issuer_exactly_and_subject_exactly_or_by_regex() {
        let s = Signer {
            subjects: vec!["https://github.com/vendor/plugins/.github/workflows/r.yml@refs/tags/v1".into()],
            issuer: "https://token.actions.githubusercontent.com".into(),
        };
        let by_regex = Identity::new(&s.issuer, None, Some("^https://github.com/vendor/plugins/")).unwrap();
        assert!(by_regex.matches(&s));
        assert!(!Identity::new(&s.issuer, None, Some("^https://github.com/other/")).unwrap().matches(&s));
        assert!(!Identity::new("https://accounts.google.com", None, Some("vendor")).unwrap().matches(&s));
        assert!(Identity::new(&s.issuer, Some(&s.subjects[0]), None).unwrap().matches(&s));
        assert!(!Identity::new(&s.issuer, Some("https://github.com/vendor"), None).unwrap().matches(&s));
        assert!(Identity::new(&s.issuer, None, Some("(")).unwrap_err().contains("subject_regex"));
        assert!(Identity::new(&s.issuer, Some("a"), Some("b")).unwrap_err().contains("exactly one"));
        assert!(Identity::new("", Some("a"), None).unwrap_err().contains("issuer"));
        assert!(Identity::new("i", None, Some(&"a".repeat(MAX_REGEX_LEN + 1))).is_err());
    }
}
