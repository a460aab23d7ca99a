//! Sigstore test material, made the way the real services make it, on
//! loopback and offline: a Fulcio-like CA (P-384 root and intermediate) and
//! leaf certificates with Fulcio's extensions, made by `openssl`; a
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

/// A test CA: root and intermediate, made by openssl in `dir`.
pub struct Pki {
    dir: PathBuf,
    /// The intermediate, then the root (DER).
    pub chain: Vec<Vec<u8>>,
    serial: std::cell::Cell<u8>,
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
        Pki { dir: dir.to_path_buf(), chain, serial: std::cell::Cell::new(10) }
    }

    /// A leaf for `san` (`URI:…` or `email:…`) with the OIDC issuer in the
    /// v2 extension (or, with `v1_issuer`, the older raw one), valid for
    /// `days` from now.
    pub fn leaf(&self, san: &str, issuer: &str, v1_issuer: bool, days: u32) -> Leaf {
        let n = self.serial.get() + 1;
        self.serial.set(n);
        let dir = &self.dir;
        let key = SigningKey::from_slice(&[n; 32]).unwrap();
        let key_pem = key.to_pkcs8_pem(Default::default()).unwrap();
        std::fs::write(dir.join(format!("leaf{n}.key")), key_pem.as_bytes()).unwrap();
        let issuer_ext = if v1_issuer {
            format!("1.3.6.1.4.1.57264.1.1=DER:{}", hex::encode(issuer))
        } else {
            format!("1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:{issuer}")
        };
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
        Leaf { der: der_of(dir, &pem), key }
    }

    /// `trusted_root.json` naming this CA and `logs`.
    pub fn trusted_root(&self, logs: &[&Log]) -> String {
        let tlogs: Vec<Value> = logs
            .iter()
            .map(|l| {
                json!({
                    "baseUrl": "https://rekor.test",
                    "hashAlgorithm": "SHA2_256",
                    "publicKey": {
                        "rawBytes": b64(&l.spki),
                        "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                        "validFor": {"start": "2020-01-01T00:00:00Z"}
                    },
                    "logId": {"keyId": b64(&l.id)}
                })
            })
            .collect();
        json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": tlogs,
            "certificateAuthorities": [{
                "subject": {"organization": "durasync-test", "commonName": "test-fulcio"},
                "uri": "https://fulcio.test",
                "certChain": {"certificates": self.chain.iter().map(|c| json!({"rawBytes": b64(c)})).collect::<Vec<_>>()},
                "validFor": {"start": "2020-01-01T00:00:00Z"}
            }],
            "ctlogs": [],
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
