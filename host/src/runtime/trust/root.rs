//! Sigstore's trusted root (`trusted_root.json`, as Sigstore's TUF
//! repository distributes it): the certificate authorities (Fulcio) whose
//! chains may issue signing certificates, the transparency logs (Rekor)
//! whose keys sign checkpoints and signed entry timestamps, and the
//! certificate transparency logs (`ctlogs`) whose keys sign the SCTs
//! Fulcio embeds in its certificates, each with its validity window.
//!
//! Read once when a manifest is parsed; nothing in it is fetched. Note well:
//! the file is trusted as given (a node gets it from its own TUF client or
//! its image); its TUF metadata is not checked here. `timestampAuthorities`
//! are read past, not used (RFC 3161 timestamps are not verified).

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::der::Decode as _;
use x509_cert::spki::SubjectPublicKeyInfoRef;

use super::keys::EcKey;

/// The largest `trusted_root.json` read (Sigstore's public one is ~10 KiB).
pub const MAX_TRUSTED_ROOT_BYTES: u64 = 1 << 20;
/// The most CAs, logs, and certificates per chain a trusted root may list.
pub const MAX_ENTRIES: usize = 64;

/// A validity window in Unix seconds (`end` open when absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Inclusive start.
    pub start: i64,
    /// Inclusive end, if any.
    pub end: Option<i64>,
}

impl Window {
    /// Whether `t` (Unix seconds) is within the window.
    pub fn contains(&self, t: i64) -> bool {
        t >= self.start && self.end.is_none_or(|e| t <= e)
    }
}

/// A certificate authority: its chain (nearest the leaf first, the root
/// last), DER, parsed.
#[derive(Debug, Clone)]
pub struct Authority {
    /// Its URI (messages).
    pub uri: String,
    /// The chain.
    pub chain: Vec<Certificate>,
    /// When it may have issued certificates.
    pub valid_for: Window,
}

/// A transparency log (Rekor) or a certificate transparency log.
#[derive(Debug, Clone)]
pub struct Log {
    /// Its base URL (messages).
    pub base_url: String,
    /// Its key id (the SHA-256 of its DER public key, or as the root states it).
    pub key_id: Vec<u8>,
    /// Its key.
    pub key: EcKey,
    /// When its key signed.
    pub valid_for: Window,
}

/// A parsed trusted root.
#[derive(Debug, Clone)]
pub struct TrustedRoot {
    /// Where it was read from (messages).
    pub source: String,
    /// Fulcio CAs.
    pub authorities: Vec<Authority>,
    /// Rekor logs.
    pub logs: Vec<Log>,
    /// Certificate transparency logs (their SCTs are checked when the root
    /// lists any; see [`super::sct`]).
    pub ct_logs: Vec<Log>,
}

impl PartialEq for TrustedRoot {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}
impl Eq for TrustedRoot {}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRoot {
    media_type: Option<String>,
    #[serde(default)]
    tlogs: Vec<RawLog>,
    #[serde(default)]
    ctlogs: Vec<RawLog>,
    #[serde(default)]
    certificate_authorities: Vec<RawCa>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLog {
    #[serde(default)]
    base_url: String,
    hash_algorithm: Option<String>,
    public_key: RawKey,
    log_id: RawLogId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKey {
    raw_bytes: String,
    key_details: Option<String>,
    valid_for: Option<RawWindow>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLogId {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCa {
    #[serde(default)]
    uri: String,
    cert_chain: RawChain,
    valid_for: Option<RawWindow>,
}

#[derive(Deserialize)]
struct RawChain {
    certificates: Vec<RawCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct RawWindow {
    start: String,
    end: Option<String>,
}

/// Standard base64 (what Sigstore's JSON uses for bytes).
pub(crate) fn b64(text: &str, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("{what} is not base64: {e}"))
}

/// RFC 3339 (`2021-10-07T13:56:59Z`, fractions allowed) to Unix seconds.
pub(crate) fn rfc3339(text: &str, what: &str) -> Result<i64, String> {
    let t = humantime::parse_rfc3339(text)
        .map_err(|e| format!("{what} {text:?} is not an RFC 3339 time: {e}"))?;
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs();
    i64::try_from(secs).map_err(|_| format!("{what} {text:?} is out of range"))
}

fn window(w: Option<&RawWindow>, what: &str) -> Result<Window, String> {
    let Some(w) = w else {
        return Err(format!("{what} has no validFor window"));
    };
    let start = rfc3339(&w.start, &format!("{what} validFor.start"))?;
    let end = w.end.as_deref().map(|e| rfc3339(e, &format!("{what} validFor.end"))).transpose()?;
    Ok(Window { start, end })
}

impl TrustedRoot {
    /// Parse `trusted_root.json`; `source` names it in messages. Refuses
    /// (naming the entry) a key or certificate that does not parse, a
    /// window that is not RFC 3339, more than [`MAX_ENTRIES`] of anything,
    /// a root with no CA and no log.
    pub fn parse(bytes: &[u8], source: &str) -> Result<TrustedRoot, String> {
        let raw: RawRoot =
            serde_json::from_slice(bytes).map_err(|e| format!("not a Sigstore trusted root: {e}"))?;
        if let Some(mt) = &raw.media_type
            && !mt.starts_with("application/vnd.dev.sigstore.trustedroot")
        {
            return Err(format!("mediaType is {mt:?}, not a Sigstore trusted root"));
        }
        if raw.tlogs.len() > MAX_ENTRIES
            || raw.ctlogs.len() > MAX_ENTRIES
            || raw.certificate_authorities.len() > MAX_ENTRIES
        {
            return Err(format!("more than {MAX_ENTRIES} tlogs, ctlogs or certificateAuthorities"));
        }
        if raw.tlogs.is_empty() && raw.certificate_authorities.is_empty() {
            return Err("lists no tlogs and no certificateAuthorities".into());
        }
        let mut logs = Vec::new();
        for (i, l) in raw.tlogs.iter().enumerate() {
            logs.extend(log(l, &format!("tlogs[{i}]"))?);
        }
        let mut ct_logs = Vec::new();
        for (i, l) in raw.ctlogs.iter().enumerate() {
            ct_logs.extend(log(l, &format!("ctlogs[{i}]"))?);
        }
        let mut authorities = Vec::new();
        for (i, ca) in raw.certificate_authorities.iter().enumerate() {
            let what = format!("certificateAuthorities[{i}] ({})", ca.uri);
            let certs = &ca.cert_chain.certificates;
            if certs.is_empty() || certs.len() > MAX_ENTRIES {
                return Err(format!("{what}: a chain of 1 to {MAX_ENTRIES} certificates is needed"));
            }
            let mut chain = Vec::new();
            for (j, c) in certs.iter().enumerate() {
                let der = b64(&c.raw_bytes, &format!("{what} certificate {j}"))?;
                chain.push(
                    Certificate::from_der(&der)
                        .map_err(|e| format!("{what} certificate {j} is not X.509 DER: {e}"))?,
                );
            }
            let valid_for = window(ca.valid_for.as_ref(), &what)?;
            authorities.push(Authority { uri: ca.uri.clone(), chain, valid_for });
        }
        Ok(TrustedRoot { source: source.to_owned(), authorities, logs, ct_logs })
    }

    /// Read and parse `path` (at most [`MAX_TRUSTED_ROOT_BYTES`]).
    pub fn read(path: &std::path::Path) -> Result<TrustedRoot, String> {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TRUSTED_ROOT_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if bytes.len() as u64 > MAX_TRUSTED_ROOT_BYTES {
            return Err(format!("{}: larger than {MAX_TRUSTED_ROOT_BYTES} bytes", path.display()));
        }
        let source = path.display().to_string();
        TrustedRoot::parse(&bytes, &source).map_err(|e| format!("{source}: {e}"))
    }

    /// The log whose key id is `key_id`.
    pub fn log(&self, key_id: &[u8]) -> Option<&Log> {
        self.logs.iter().find(|l| l.key_id == key_id)
    }

    /// The certificate transparency log whose key id is `key_id`.
    pub fn ct_log(&self, key_id: &[u8]) -> Option<&Log> {
        self.ct_logs.iter().find(|l| l.key_id == key_id)
    }
}

/// One `tlogs[]` or `ctlogs[]` item; `what` names it in messages. `None`
/// for a key of a type not verified here — a SubjectPublicKeyInfo of
/// another algorithm, or `keyDetails` naming one (Rekor v2's Ed25519 logs, a
/// PKCS#1 RSA CT log, as Sigstore's public roots list them): that log is
/// left out, so its entries and SCTs count as from an unknown log, and the
/// rest of the root is still used (sigstore-python does the same).
fn log(l: &RawLog, what: &str) -> Result<Option<Log>, String> {
    let what = format!("{what} ({})", l.base_url);
    if let Some(h) = &l.hash_algorithm
        && h != "SHA2_256"
    {
        return Err(format!("{what}: hashAlgorithm {h} is not supported (SHA2_256 is)"));
    }
    let der = b64(&l.public_key.raw_bytes, &format!("{what} publicKey.rawBytes"))?;
    let key_id = b64(&l.log_id.key_id, &format!("{what} logId.keyId"))?;
    let valid_for = window(l.public_key.valid_for.as_ref(), &format!("{what} publicKey"))?;
    let key = match EcKey::from_spki_der(&der) {
        Ok(key) => key,
        Err(_)
            if SubjectPublicKeyInfoRef::from_der(&der).is_ok()
                || l.public_key.key_details.as_deref().is_some_and(|d| !d.starts_with("PKIX_ECDSA_")) =>
        {
            tracing::debug!("{what}: a key that is not ECDSA P-256/P-384; this log is left out");
            return Ok(None);
        }
        Err(e) => return Err(format!("{what} publicKey: {e}")),
    };
    Ok(Some(Log { base_url: l.base_url.clone(), key_id, key, valid_for }))
}

/// The key id Sigstore gives a key: the SHA-256 of its DER
/// SubjectPublicKeyInfo.
pub fn key_id(spki_der: &[u8]) -> Vec<u8> {
    Sha256::digest(spki_der).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_times_parse_and_bound() {
        assert_eq!(rfc3339("1970-01-01T00:01:00Z", "t").unwrap(), 60);
        assert_eq!(rfc3339("2021-10-07T13:56:59.000Z", "t").unwrap(), 1_633_615_019);
        assert!(rfc3339("yesterday", "t").unwrap_err().contains("RFC 3339"));
        let w = Window { start: 10, end: Some(20) };
        assert!(w.contains(10) && w.contains(20) && !w.contains(9) && !w.contains(21));
        assert!(Window { start: 10, end: None }.contains(i64::MAX));
    }

    #[test]
    fn a_root_that_is_not_one_is_refused_by_name() {
        assert!(TrustedRoot::parse(b"[]", "r").unwrap_err().contains("not a Sigstore trusted root"));
        assert!(TrustedRoot::parse(b"{}", "r").unwrap_err().contains("no tlogs"));
        let bad_key = br#"{"tlogs":[{"baseUrl":"https://log","publicKey":{"rawBytes":"AAAA",
            "validFor":{"start":"2020-01-01T00:00:00Z"}},"logId":{"keyId":"AAAA"}}]}"#;
        assert!(TrustedRoot::parse(bad_key, "r").unwrap_err().contains("tlogs[0] (https://log) publicKey"));
        let bad_cert = br#"{"certificateAuthorities":[{"uri":"https://ca","certChain":{"certificates":
            [{"rawBytes":"AAAA"}]},"validFor":{"start":"2020-01-01T00:00:00Z"}}]}"#;
        assert!(TrustedRoot::parse(bad_cert, "r").unwrap_err().contains("not X.509 DER"));
    }

    #[test]
    fn a_log_whose_key_is_not_ecdsa_is_left_out_and_the_rest_is_used() {
        use p256::pkcs8::EncodePublicKey as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        // An Ed25519 SubjectPublicKeyInfo (Rekor v2's public logs).
        let mut ed25519 = hex::decode("302a300506032b6570032100").unwrap();
        ed25519.extend_from_slice(&[9; 32]);
        let p256 = p256::ecdsa::SigningKey::from_slice(&[3; 32]).unwrap();
        let p256 = p256.verifying_key().to_public_key_der().unwrap();
        let entry = |url: &str, der: &[u8]| {
            serde_json::json!({"baseUrl": url, "publicKey": {"rawBytes": b64(der),
                "validFor": {"start": "2020-01-01T00:00:00Z"}}, "logId": {"keyId": b64(&key_id(der))}})
        };
        let mut json = serde_json::json!({
            "tlogs": [entry("https://rekor", p256.as_bytes()), entry("https://rekor-v2", &ed25519)],
            "ctlogs": [entry("https://ctfe-ed", &ed25519), entry("https://ctfe", p256.as_bytes()),
                entry("https://ctfe-rsa", b"PKCS#1")],
        });
        json["ctlogs"][2]["publicKey"]["keyDetails"] = "PKCS1_RSA_PKCS1V5".into();
        let root = TrustedRoot::parse(json.to_string().as_bytes(), "r").unwrap();
        let urls = |logs: &[Log]| logs.iter().map(|l| l.base_url.clone()).collect::<Vec<_>>();
        assert_eq!(urls(&root.logs), ["https://rekor"]);
        assert_eq!(urls(&root.ct_logs), ["https://ctfe"]);
    }
}
