//! A Rekor transparency-log entry as a Sigstore bundle carries it, checked
//! offline: the log's key is one of the trusted root's; the entry is in the
//! log by its inclusion proof (an RFC 6962 Merkle audit path to a root
//! hash, that root in a checkpoint signed by the log's key) or by its
//! signed entry timestamp (the log's signature over the entry and its
//! integrated time); and the entry's body is this signature (the caller
//! compares it).
//!
//! Note well: only the signed entry timestamp signs the integrated time.
//! An entry proven by an inclusion proof alone has no signed time
//! ([`Checked::signed_time`] is `None`).

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::root::{TrustedRoot, b64};

/// The longest audit path accepted (a tree of 2^64 leaves needs 64).
pub const MAX_PROOF_HASHES: usize = 64;
/// The largest checkpoint note accepted.
pub const MAX_CHECKPOINT_BYTES: usize = 16 * 1024;

/// A bundle's `tlogEntries[]` item.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The entry's index in the whole log (a JSON string of digits; left
    /// out for the first entry, as protobuf's JSON leaves out a zero).
    #[serde(default, deserialize_with = "int")]
    pub log_index: i64,
    /// The log.
    pub log_id: LogId,
    /// The entry's kind (`hashedrekord`, `dsse`) and version.
    pub kind_version: KindVersion,
    /// When the log integrated it (Unix seconds).
    #[serde(deserialize_with = "int")]
    pub integrated_time: i64,
    /// The signed entry timestamp.
    pub inclusion_promise: Option<Promise>,
    /// The inclusion proof.
    pub inclusion_proof: Option<Proof>,
    /// The entry's body (base64 of its canonical JSON).
    pub canonicalized_body: String,
}

/// A log id.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogId {
    /// base64 of the log key's id.
    pub key_id: String,
}

/// Kind and version.
#[derive(Debug, Clone, Deserialize)]
pub struct KindVersion {
    /// `hashedrekord`, `dsse`, …
    pub kind: String,
    /// `0.0.1`, …
    pub version: String,
}

/// A signed entry timestamp.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Promise {
    /// base64 of the log's DER ECDSA signature.
    pub signed_entry_timestamp: String,
}

/// An inclusion proof. Sigstore's JSON is protobuf's, which leaves out a
/// field at its default: a proof for the first leaf has no `logIndex`, and
/// one in a tree of one leaf no `hashes` (as sigstore-js writes them).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proof {
    /// The leaf's index in the tree the proof is for.
    #[serde(default, deserialize_with = "int")]
    pub log_index: i64,
    /// base64 of the tree's root hash.
    pub root_hash: String,
    /// The tree's size.
    #[serde(deserialize_with = "int")]
    pub tree_size: i64,
    /// base64 of each audit-path hash.
    #[serde(default)]
    pub hashes: Vec<String>,
    /// The signed checkpoint.
    pub checkpoint: Option<Checkpoint>,
}

/// A checkpoint (a signed note).
#[derive(Debug, Clone, Deserialize)]
pub struct Checkpoint {
    /// The note's text.
    pub envelope: String,
}

/// Sigstore's JSON writes 64-bit integers as strings; accept both.
fn int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        N(i64),
        S(String),
    }
    match Int::deserialize(d)? {
        Int::N(n) => Ok(n),
        Int::S(s) => s.parse().map_err(|_| serde::de::Error::custom(format!("{s:?} is not an integer"))),
    }
}

/// What a checked entry proves.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The entry's body (its canonical JSON).
    pub body: Vec<u8>,
    /// The integrated time, when the log signed it (the signed entry timestamp).
    pub signed_time: Option<i64>,
    /// The entry's index in the log.
    pub log_index: i64,
    /// The log's base URL.
    pub log: String,
}

/// RFC 6962's leaf hash.
pub fn leaf_hash(body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

/// RFC 6962's interior node hash.
pub fn node_hash(left: &[u8], right: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root hash an audit path gives for leaf `index` of a tree of `size`
/// (RFC 9162, 2.1.3.2), or why the path cannot be one.
pub fn root_from_path(index: u64, size: u64, leaf: [u8; 32], path: &[[u8; 32]]) -> Result<[u8; 32], String> {
    if index >= size {
        return Err(format!("leaf index {index} is not in a tree of {size}"));
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = leaf;
    for p in path {
        if s == 0 {
            return Err("the audit path is longer than the tree is deep".into());
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err("the audit path is shorter than the tree is deep".into());
    }
    Ok(r)
}

/// Check a signed checkpoint note against `key_id`/`key`: its first
/// signature line whose key hint is the log's verifies over the note's
/// text. Returns the tree size and root hash it states.
fn checkpoint(note: &str, key_id: &[u8], key: &super::keys::EcKey) -> Result<(u64, Vec<u8>), String> {
    if note.len() > MAX_CHECKPOINT_BYTES {
        return Err(format!("the checkpoint is larger than {MAX_CHECKPOINT_BYTES} bytes"));
    }
    let (text, sigs) = note.split_once("\n\n").ok_or("the checkpoint has no signature block")?;
    let text = format!("{text}\n");
    let mut lines = text.lines();
    let (_origin, size, root) = (lines.next(), lines.next(), lines.next());
    let size: u64 = size.and_then(|s| s.parse().ok()).ok_or("the checkpoint's tree size is not a number")?;
    let root = b64(root.unwrap_or_default(), "the checkpoint's root hash")?;
    let hint = &key_id[..key_id.len().min(4)];
    let mut seen = false;
    for line in sigs.lines().filter(|l| !l.is_empty()) {
        let Some(rest) = line.strip_prefix("\u{2014} ") else {
            return Err(format!("checkpoint signature line {line:?} does not start with an em dash"));
        };
        let Some((_name, sig)) = rest.rsplit_once(' ') else { continue };
        let Ok(raw) = b64(sig, "a checkpoint signature") else { continue };
        if raw.len() < 5 || &raw[..4] != hint {
            continue;
        }
        seen = true;
        if key.verify(text.as_bytes(), &raw[4..]) {
            return Ok((size, root));
        }
    }
    Err(if seen {
        "the checkpoint's signature by the log key does not verify".into()
    } else {
        "the checkpoint is not signed by the log's key (no signature with its key hint)".into()
    })
}

/// Check `entry` against the trusted root (see the module docs).
pub fn check(entry: &Entry, root: &TrustedRoot) -> Result<Checked, String> {
    let key_id = b64(&entry.log_id.key_id, "logId.keyId")?;
    let log = root.log(&key_id).ok_or_else(|| {
        format!(
            "the log entry's key {} is not a log key of the trusted root {}",
            hex::encode(&key_id),
            root.source
        )
    })?;
    if !log.valid_for.contains(entry.integrated_time) {
        return Err(format!("log key {} was not valid at the entry's integrated time", hex::encode(&key_id)));
    }
    let body = b64(&entry.canonicalized_body, "canonicalizedBody")?;
    if entry.inclusion_promise.is_none() && entry.inclusion_proof.is_none() {
        return Err("the log entry has neither an inclusion proof nor a signed entry timestamp".into());
    }
    // Whatever proof the bundle carries must hold; one is enough.
    if let Some(p) = &entry.inclusion_proof {
        let hashes: Vec<[u8; 32]> = if p.hashes.len() > MAX_PROOF_HASHES {
            return Err(format!("the inclusion proof has over {MAX_PROOF_HASHES} hashes"));
        } else {
            p.hashes
                .iter()
                .map(|h| {
                    b64(h, "an inclusion proof hash")?
                        .try_into()
                        .map_err(|_| "an inclusion proof hash is not 32 bytes".to_owned())
                })
                .collect::<Result<_, String>>()?
        };
        let (index, size) = (u64::try_from(p.log_index), u64::try_from(p.tree_size));
        let (Ok(index), Ok(size)) = (index, size) else {
            return Err("the inclusion proof's index or tree size is negative".into());
        };
        let computed = root_from_path(index, size, leaf_hash(&body), &hashes)
            .map_err(|e| format!("inclusion proof: {e}"))?;
        let stated = b64(&p.root_hash, "inclusionProof.rootHash")?;
        if computed[..] != stated[..] {
            return Err(format!(
                "inclusion proof: the audit path gives root {}, not the proof's {} (a proof for another entry)",
                hex::encode(computed),
                hex::encode(&stated)
            ));
        }
        let cp = p.checkpoint.as_ref().ok_or("the inclusion proof has no signed checkpoint")?;
        let (cp_size, cp_root) = checkpoint(&cp.envelope, &key_id, &log.key)?;
        if cp_size != size || cp_root != stated {
            return Err("the checkpoint is for another tree than the inclusion proof".into());
        }
    }
    let mut signed_time = None;
    if let Some(promise) = &entry.inclusion_promise {
        let sig = b64(&promise.signed_entry_timestamp, "signedEntryTimestamp")?;
        // Rekor signs the canonical JSON of these four fields, keys sorted.
        let signed = format!(
            r#"{{"body":{},"integratedTime":{},"logID":"{}","logIndex":{}}}"#,
            serde_json::Value::String(entry.canonicalized_body.clone()),
            entry.integrated_time,
            hex::encode(&key_id),
            entry.log_index
        );
        if !log.key.verify(signed.as_bytes(), &sig) {
            return Err("the signed entry timestamp does not verify with the log's key".into());
        }
        signed_time = Some(entry.integrated_time);
    }
    Ok(Checked { body, signed_time, log_index: entry.log_index, log: log.base_url.clone() })
}

#[cfg(test)]
mod tests {
    // RFC 6962's MTH and PATH, written the recursive way the RFC states
    // them: a second implementation of what `root_from_path` inverts.
    use super::*;
    use durasync_test_support::sigstore::{mth, path};

    #[test]
    fn every_leaf_of_trees_of_every_size_up_to_33_proves_its_root_and_no_other_leaf_does() {
        for n in 1..=33usize {
            let leaves: Vec<[u8; 32]> = (0..n).map(|i| leaf_hash(format!("entry {i}").as_bytes())).collect();
            let root = mth(&leaves);
            for m in 0..n {
                let p = path(m, &leaves);
                assert_eq!(root_from_path(m as u64, n as u64, leaves[m], &p).unwrap(), root, "{m} of {n}");
                let other = leaf_hash(b"another entry");
                assert_ne!(root_from_path(m as u64, n as u64, other, &p).unwrap(), root);
            }
        }
        assert!(root_from_path(3, 3, [0; 32], &[]).unwrap_err().contains("not in a tree"));
        assert!(root_from_path(0, 4, [0; 32], &[[0; 32]]).unwrap_err().contains("shorter"));
        assert!(root_from_path(0, 1, [0; 32], &[[0; 32]]).unwrap_err().contains("longer"));
    }

    #[test]
    fn a_proof_for_the_first_leaf_of_a_tree_of_one_reads_without_its_zero_index_and_empty_path() {
        // Protobuf's JSON of `logIndex: 0` and `hashes: []`: both left out.
        let entry: Entry = serde_json::from_str(
            r#"{"logIndex": "7", "logId": {"keyId": "AA=="}, "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                "integratedTime": "1", "canonicalizedBody": "e30=",
                "inclusionProof": {"rootHash": "AA==", "treeSize": "1", "checkpoint": {"envelope": ""}}}"#,
        )
        .unwrap();
        let p = entry.inclusion_proof.unwrap();
        assert_eq!((p.log_index, p.tree_size, p.hashes.len()), (0, 1, 0));
        let leaf = leaf_hash(b"{}");
        assert_eq!(root_from_path(p.log_index as u64, p.tree_size as u64, leaf, &[]).unwrap(), leaf);
        let first: Entry = serde_json::from_str(
            r#"{"logId": {"keyId": "AA=="}, "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                "integratedTime": "1", "canonicalizedBody": "e30="}"#,
        )
        .unwrap();
        assert_eq!(first.log_index, 0);
    }
}
