//! Sigstore test material, made the way the real services make it, on
//! loopback and offline: a Fulcio-like CA (P-384 root and intermediate) and
//! leaf certificates with Fulcio's extensions, made by `openssl`, each with
//! an embedded SCT of a certificate transparency log (RFC 6962, the SCT
//! list encoded here by hand, a second implementation of what the verifier
//! parses); a
//! Rekor-like log (P-256 key, an RFC 6962 tree of entries, a signed
//! checkpoint, a signed entry timestamp); Sigstore bundles in the
//! `messageSignature` and `dsseEnvelope` forms; and the `trusted_root.json`
//! naming the CA and the log.
//!
//! Used by the library's unit tests (`runtime::trust`) and the oci tests.
//! The Merkle tree is built here the recursive way RFC 6962 states it, a
//! second implementation of what the verifier inverts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::signature::hazmat::PrehashSigner as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// GitHub Actions' OIDC issuer.
pub const GITHUB: &str = "https://token.actions.githubusercontent.com";
/// A workflow identity under `https://github.com/vendor/plugins/`.
pub const WORKFLOW: &str = "https://github.com/vendor/plugins/.github/workflows/release.yml@refs/tags/v1.4";
/// The bundle v0.3 media type.
pub const V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The bundle v0.1 media type.
pub const V01: &str = "application/vnd.dev.sigstore.bundle+json;version=0.1";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Now, in Unix seconds.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn der_of(dir: &Path, pem: &str) -> Vec<u8> {
    let der = format!("{pem}.der");
    openssl(dir, &["x509", "-in", pem, "-outform", "DER", "-out", &der]);
    std::fs::read(dir.join(der)).unwrap()
}

/// PEM text of a DER certificate.
pub fn cert_pem(der: &[u8]) -> String {
    let body = b64(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))
}

/// A log: its key and key id.
pub struct Log {
    /// The signing key.
    pub key: SigningKey,
    /// SHA-256 of its DER SubjectPublicKeyInfo.
    pub id: Vec<u8>,
    /// Its DER SubjectPublicKeyInfo.
    pub spki: Vec<u8>,
}

impl Log {
    /// A log key from a seed byte.
    pub fn new(seed: u8) -> Log {
        let key = SigningKey::from_slice(&[seed; 32]).unwrap();
        let spki = key.verifying_key().to_public_key_der().unwrap().as_bytes().to_vec();
        Log { id: Sha256::digest(&spki).to_vec(), spki, key }
    }
}

/// A leaf certificate and its key.
pub struct Leaf {
    /// The certificate (DER).
    pub der: Vec<u8>,
    /// Its key.
    pub key: SigningKey,
}

/// A test CA: root and intermediate, made by openssl in `dir`, and the
/// certificate transparency log whose SCTs its leaves embed.
pub struct Pki {
    dir: PathBuf,
    /// The intermediate, then the root (DER).
    pub chain: Vec<Vec<u8>>,
    /// The CT log the trusted root lists.
    pub ct_log: Log,
    serial: std::cell::Cell<u8>,
}

/// The SCT a leaf embeds.
pub enum Sct<'a> {
    /// One of the Pki's CT log, valid.
    Logged,
    /// One of this log (a log the trusted root need not list).
    By(&'a Log),
    /// One whose signature is over another time than it states.
    Forged,
    /// None: no SCT list extension.
    Without,
}

/// Whether `openssl` can be run.
pub fn have_openssl() -> bool {
    Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success())
}

impl Pki {
    /// A root (P-384, self-signed) and an intermediate (P-384) in `dir`.
    pub fn new(dir: &Path) -> Pki {
        std::fs::write(
            dir.join("ext.cnf"),
            "[inter]\nbasicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n",
        )
        .unwrap();
        openssl(dir, &["ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", "ca.key"]);
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
                "-subj",
                "/O=durasync-test/CN=test-fulcio-root",
                "-days",
                "3650",
                "-sha384",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-out",
                "ca.pem",
            ],
        );
        openssl(dir, &["ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", "inter.key"]);
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                "inter.key",
                "-subj",
                "/O=durasync-test/CN=test-fulcio-intermediate",
                "-out",
                "inter.csr",
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "inter.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "2",
                "-days",
                "3650",
                "-sha384",
                "-extfile",
                "ext.cnf",
                "-extensions",
                "inter",
                "-out",
                "inter.pem",
            ],
        );
        let chain = vec![der_of(dir, "inter.pem"), der_of(dir, "ca.pem")];
        Pki { dir: dir.to_path_buf(), chain, ct_log: Log::new(21), serial: std::cell::Cell::new(10) }
    }

    /// A leaf for `san` (`URI:…` or `email:…`) with the OIDC issuer in the
    /// v2 and the older raw v1 extension (with `v1_issuer`, the v1 only), valid for
    /// `days` from now, with a valid SCT of the Pki's CT log.
    pub fn leaf(&self, san: &str, issuer: &str, v1_issuer: bool, days: u32) -> Leaf {
        self.leaf_with(san, issuer, v1_issuer, days, Sct::Logged)
    }

    /// A leaf as [`Pki::leaf`], with the SCT `sct` says.
    pub fn leaf_with(&self, san: &str, issuer: &str, v1_issuer: bool, days: u32, sct: Sct<'_>) -> Leaf {
        let n = self.serial.get() + 1;
        self.serial.set(n);
        let dir = &self.dir;
        let key = SigningKey::from_slice(&[n; 32]).unwrap();
        let key_pem = key.to_pkcs8_pem(Default::default()).unwrap();
        std::fs::write(dir.join(format!("leaf{n}.key")), key_pem.as_bytes()).unwrap();
        // Fulcio writes both: the raw v1 extension (the one sigstore-python's
        // identity policy reads) and the v2 UTF8String.
        let v1 = format!("1.3.6.1.4.1.57264.1.1=DER:{}", hex::encode(issuer));
        let issuer_ext =
            if v1_issuer { v1 } else { format!("{v1}\n1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:{issuer}") };
        std::fs::write(
            dir.join(format!("leaf{n}.cnf")),
            format!(
                "[leaf]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
                 extendedKeyUsage=codeSigning\nsubjectAltName={san}\n{issuer_ext}\n"
            ),
        )
        .unwrap();
        let (k, csr, pem, cnf) =
            (format!("leaf{n}.key"), format!("leaf{n}.csr"), format!("leaf{n}.pem"), format!("leaf{n}.cnf"));
        openssl(dir, &["req", "-new", "-key", &k, "-subj", "/O=sigstore.dev", "-out", &csr]);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "inter.pem",
                "-CAkey",
                "inter.key",
                "-set_serial",
                &n.to_string(),
                "-days",
                &days.to_string(),
                "-sha384",
                "-extfile",
                &cnf,
                "-extensions",
                "leaf",
                "-out",
                &pem,
            ],
        );
        let der = der_of(dir, &pem);
        Leaf { der: self.with_sct(&der, &sct, n), key }
    }

    /// `der` (a leaf openssl signed) with an SCT list extension appended to
    /// its TBSCertificate, signed again by the intermediate: the log signed
    /// the TBSCertificate without it (RFC 6962's precertificate entry).
    fn with_sct(&self, der: &[u8], sct: &Sct<'_>, n: u8) -> Vec<u8> {
        use x509_cert::der::asn1::{BitString, ObjectIdentifier, OctetString};
        use x509_cert::der::{Decode as _, Encode as _};
        let log = match sct {
            Sct::Without => return der.to_vec(),
            Sct::By(l) => l,
            Sct::Logged | Sct::Forged => &self.ct_log,
        };
        let mut cert = x509_cert::Certificate::from_der(der).unwrap();
        let precert = cert.tbs_certificate.to_der().unwrap();
        let issuer = x509_cert::Certificate::from_der(&self.chain[0]).unwrap();
        let issuer_key_hash =
            Sha256::digest(issuer.tbs_certificate.subject_public_key_info.to_der().unwrap());
        let stated = (now() as u64) * 1000;
        let signed_time = if matches!(sct, Sct::Forged) { stated - 1000 } else { stated };
        let mut signed = vec![0u8, 0u8];
        signed.extend_from_slice(&signed_time.to_be_bytes());
        signed.extend_from_slice(&1u16.to_be_bytes());
        signed.extend_from_slice(&issuer_key_hash);
        signed.extend_from_slice(&(precert.len() as u32).to_be_bytes()[1..]);
        signed.extend_from_slice(&precert);
        signed.extend_from_slice(&0u16.to_be_bytes());
        let sig: Signature = log.key.sign(&signed);
        let sig = sig.to_der().as_bytes().to_vec();
        // SignedCertificateTimestamp: version, log id, time, no extensions,
        // SHA-256 (4) with ECDSA (3), the signature; in a list of u16-length
        // items, itself u16-length prefixed, in a DER OCTET STRING.
        let mut one = vec![0u8];
        one.extend_from_slice(&log.id);
        one.extend_from_slice(&stated.to_be_bytes());
        one.extend_from_slice(&0u16.to_be_bytes());
        one.extend_from_slice(&[4, 3]);
        one.extend_from_slice(&(sig.len() as u16).to_be_bytes());
        one.extend_from_slice(&sig);
        let mut list = ((one.len() + 2) as u16).to_be_bytes().to_vec();
        list.extend_from_slice(&(one.len() as u16).to_be_bytes());
        list.extend_from_slice(&one);
        let value = OctetString::new(list).unwrap().to_der().unwrap();
        cert.tbs_certificate.extensions.get_or_insert_with(Vec::new).push(x509_cert::ext::Extension {
            extn_id: ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.2"),
            critical: false,
            extn_value: OctetString::new(value).unwrap(),
        });
        let tbs = cert.tbs_certificate.to_der().unwrap();
        let (tbs_file, sig_file) = (format!("leaf{n}.tbs"), format!("leaf{n}.tbs.sig"));
        std::fs::write(self.dir.join(&tbs_file), &tbs).unwrap();
        openssl(&self.dir, &["dgst", "-sha384", "-sign", "inter.key", "-out", &sig_file, &tbs_file]);
        cert.signature = BitString::from_bytes(&std::fs::read(self.dir.join(&sig_file)).unwrap()).unwrap();
        cert.to_der().unwrap()
    }

    /// `trusted_root.json` naming this CA, `logs` and the CT log.
    pub fn trusted_root(&self, logs: &[&Log]) -> String {
        let listed = |logs: &[&Log], url: &str| -> Vec<Value> {
            logs.iter()
                .map(|l| {
                    json!({
                        "baseUrl": url,
                        "hashAlgorithm": "SHA2_256",
                        "publicKey": {
                            "rawBytes": b64(&l.spki),
                            "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                            "validFor": {"start": "2020-01-01T00:00:00Z"}
                        },
                        "logId": {"keyId": b64(&l.id)}
                    })
                })
                .collect()
        };
        let tlogs = listed(logs, "https://rekor.test");
        let ctlogs = listed(&[&self.ct_log], "https://ctfe.test");
        json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": tlogs,
            "certificateAuthorities": [{
                "subject": {"organization": "durasync-test", "commonName": "test-fulcio"},
                "uri": "https://fulcio.test",
                "certChain": {"certificates": self.chain.iter().map(|c| json!({"rawBytes": b64(c)})).collect::<Vec<_>>()},
                "validFor": {"start": "2020-01-01T00:00:00Z"}
            }],
            "ctlogs": ctlogs,
            "timestampAuthorities": []
        })
        .to_string()
    }
}

fn leaf_hash(body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

fn node(l: &[u8], r: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

/// RFC 6962's MTH.
pub fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves.len() {
        1 => leaves[0],
        n => {
            let k = n.next_power_of_two() / 2;
            node(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

/// RFC 6962's PATH(m, D[n]).
pub fn path(m: usize, leaves: &[[u8; 32]]) -> Vec<[u8; 32]> {
    let n = leaves.len();
    if n <= 1 {
        return vec![];
    }
    let k = n.next_power_of_two() / 2;
    let (mut p, other) = if m < k {
        (path(m, &leaves[..k]), mth(&leaves[k..]))
    } else {
        (path(m - k, &leaves[k..]), mth(&leaves[..k]))
    };
    p.push(other);
    p
}

/// Where an entry sits: index 5 of a tree of 11 (global index 1005).
const AT: usize = 5;
const SIZE: usize = 11;

/// A `tlogEntries[]` item for `body` in `log` at `time`, with an inclusion
/// proof and checkpoint (`proof`) and a signed entry timestamp (`set`).
pub fn tlog_entry(log: &Log, kind: &str, body: &[u8], time: i64, proof: bool, set: bool) -> Value {
    let mut leaves: Vec<[u8; 32]> =
        (0..SIZE).map(|i| leaf_hash(format!("other entry {i}").as_bytes())).collect();
    leaves[AT] = leaf_hash(body);
    let root = mth(&leaves);
    let log_index = 1000 + AT as i64;
    let body_b64 = b64(body);
    let mut entry = json!({
        "logIndex": log_index.to_string(),
        "logId": {"keyId": b64(&log.id)},
        "kindVersion": {"kind": kind, "version": "0.0.1"},
        "integratedTime": time.to_string(),
        "canonicalizedBody": body_b64,
    });
    if proof {
        let note = format!("rekor.test - 42\n{SIZE}\n{}\n", b64(&root));
        let sig: Signature = log.key.sign(note.as_bytes());
        let mut raw = log.id[..4].to_vec();
        raw.extend_from_slice(sig.to_der().as_bytes());
        let envelope = format!("{note}\n\u{2014} rekor.test {}\n", b64(&raw));
        entry["inclusionProof"] = json!({
            "logIndex": AT.to_string(),
            "rootHash": b64(&root),
            "treeSize": SIZE.to_string(),
            "hashes": path(AT, &leaves).iter().map(|h| b64(h)).collect::<Vec<_>>(),
            "checkpoint": {"envelope": envelope},
        });
    }
    if set {
        let signed = format!(
            r#"{{"body":"{body_b64}","integratedTime":{time},"logID":"{}","logIndex":{log_index}}}"#,
            hex::encode(&log.id)
        );
        let sig: Signature = log.key.sign(signed.as_bytes());
        entry["inclusionPromise"] = json!({"signedEntryTimestamp": b64(sig.to_der().as_bytes())});
    }
    entry
}

/// Who signs a bundle.
pub enum By<'a> {
    /// A Fulcio leaf (keyless).
    Cert(&'a Leaf),
    /// A cosign key.
    Key(&'a SigningKey),
}

/// How a bundle is made.
pub struct Make<'a> {
    /// The signer.
    pub by: By<'a>,
    /// The manifest digest signed (`sha256:<hex>`).
    pub digest: String,
    /// A DSSE in-toto statement instead of a message signature.
    pub dsse: bool,
    /// The log's integrated time.
    pub time: i64,
    /// The log.
    pub log: &'a Log,
    /// v0.1 (a chain, a signed entry timestamp only) instead of v0.3.
    pub v01: bool,
}

/// A bundle as `make` says.
pub fn bundle(make: &Make<'_>) -> Value {
    let hex_digest = make.digest.trim_start_matches("sha256:");
    let (sk, verifier_pem) = match &make.by {
        By::Cert(l) => (&l.key, cert_pem(&l.der)),
        By::Key(k) => (*k, k.verifying_key().to_public_key_pem(Default::default()).unwrap()),
    };
    let (content_key, content, kind, body) = if make.dsse {
        let statement = json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "registry.test/vendor/plugin", "digest": {"sha256": hex_digest}}],
            "predicateType": "https://sigstore.dev/cosign/sign/v1",
            "predicate": {}
        })
        .to_string();
        let pt = "application/vnd.in-toto+json";
        let mut pae = format!("DSSEv1 {} {pt} {} ", pt.len(), statement.len()).into_bytes();
        pae.extend_from_slice(statement.as_bytes());
        let sig: Signature = sk.sign(&pae);
        let sig = sig.to_der().as_bytes().to_vec();
        let body = json!({
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": hex::encode(Sha256::digest(b"envelope"))},
                "payloadHash": {"algorithm": "sha256", "value": hex::encode(Sha256::digest(statement.as_bytes()))},
                "signatures": [{"signature": b64(&sig), "verifier": b64(verifier_pem.as_bytes())}]
            }
        });
        let env = json!({"payload": b64(statement.as_bytes()), "payloadType": pt, "signatures": [{"sig": b64(&sig), "keyid": ""}]});
        ("dsseEnvelope", env, "dsse", body)
    } else {
        let digest = hex::decode(hex_digest).unwrap();
        let sig: Signature = sk.sign_prehash(&digest).unwrap();
        let sig = sig.to_der().as_bytes().to_vec();
        let body = json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hex_digest}},
                "signature": {"content": b64(&sig), "publicKey": {"content": b64(verifier_pem.as_bytes())}}
            }
        });
        let ms = json!({"messageDigest": {"algorithm": "SHA2_256", "digest": b64(&digest)}, "signature": b64(&sig)});
        ("messageSignature", ms, "hashedrekord", body)
    };
    let body = body.to_string();
    let entry = tlog_entry(make.log, kind, body.as_bytes(), make.time, !make.v01, true);
    let mut material = json!({"tlogEntries": [entry]});
    match (&make.by, make.v01) {
        (By::Cert(l), false) => material["certificate"] = json!({"rawBytes": b64(&l.der)}),
        (By::Cert(l), true) => {
            material["x509CertificateChain"] = json!({"certificates": [{"rawBytes": b64(&l.der)}]})
        }
        (By::Key(_), _) => material["publicKey"] = json!({"hint": "vendor"}),
    }
    let mut b = json!({"mediaType": if make.v01 { V01 } else { V03 }, "verificationMaterial": material});
    b[content_key] = content;
    b
}
