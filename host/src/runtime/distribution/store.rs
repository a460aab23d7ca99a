//! The content-addressed blob cache, beside the compile cache:
//! `<cache>/oci/blobs/sha256/<hex>` holds manifests, components and
//! signature payloads under their own digest; `<cache>/oci/tags/<key>`
//! remembers the digest a tag last resolved to (for a node whose registry
//! is down) and `<cache>/oci/signatures/<hex>` the digest of the signature
//! manifest of a manifest.
//!
//! The same rules as the compile cache: directories 0700 and files 0600,
//! and nothing is used that another user owns or that group or others may
//! write. A blob is re-hashed on every read: its name is a claim, not a
//! proof. An index entry (tag or signature) is only a hint: whatever it
//! points at is checked again against the trust policy.
//!
//! Every file is written to a private temporary name, fsynced and renamed
//! into place, so a crash never leaves a half-written blob under a digest.
//! The directory itself is not fsynced: losing a just-written entry after a
//! power loss only means fetching it again.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Error;
use crate::runtime::cache::trusted;

/// The blob store.
pub(crate) struct Store {
    root: PathBuf,
    /// A private directory of this process, removed on drop (`--no-cache`).
    temporary: bool,
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// How a blob arrives: an expected digest and a size limit.
pub(crate) struct Expect<'a> {
    /// `sha256:…` (already checked to be well-formed).
    pub digest: &'a str,
    /// The most bytes accepted.
    pub limit: u64,
    /// What it is, for messages ("manifest", "layer").
    pub what: &'a str,
}

impl Store {
    /// The store under `cache_dir`, or a private temporary one when there
    /// is no cache directory.
    pub(crate) fn new(cache_dir: Option<&Path>) -> Result<Store, Error> {
        let (root, temporary) = match cache_dir {
            Some(d) => (d.join("oci"), false),
            None => {
                let mut rnd = [0u8; 8];
                rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty())
                    .map_err(|e| cache_err(Path::new("/tmp"), e.into()))?;
                (std::env::temp_dir().join(format!("durasync-oci-{}", hex::encode(rnd))), true)
            }
        };
        for sub in ["blobs/sha256", "tags", "signatures"] {
            let dir = root.join(sub);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| cache_err(&dir, e))?;
        }
        for dir in [
            root.clone(),
            root.join("blobs"),
            root.join("blobs/sha256"),
            root.join("tags"),
            root.join("signatures"),
        ] {
            let meta = std::fs::symlink_metadata(&dir).map_err(|e| cache_err(&dir, e))?;
            trusted(&meta, "blob cache directory")
                .map_err(|why| Error::Cache { path: dir.display().to_string(), reason: why })?;
        }
        Ok(Store { root, temporary })
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        // `digest` was checked by `check_digest`: `sha256:` and 64 hex digits.
        self.root.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
    }

    /// The cached blob `digest`, re-hashed, or `None` when it is not held
    /// (or not trustworthy: then it is removed and fetched again).
    pub(crate) fn read(&self, digest: &str, limit: u64) -> Option<Vec<u8>> {
        let path = self.trusted_blob(digest, limit)?;
        let bytes = std::fs::read(&path).ok()?;
        self.holds(&path, digest, Sha256::digest(&bytes).into()).then_some(bytes)
    }

    /// The path of cached blob `digest` after hashing it as a stream
    /// (memory does not grow with the blob), or `None` when it is not held
    /// or not trustworthy (then it is removed and fetched again).
    pub(crate) fn verified_path(&self, digest: &str, limit: u64) -> Option<PathBuf> {
        let path = self.trusted_blob(digest, limit)?;
        let mut hasher = Sha256::new();
        std::io::copy(&mut std::fs::File::open(&path).ok()?, &mut hasher).ok()?;
        self.holds(&path, digest, hasher.finalize().into()).then_some(path)
    }

    /// The path of blob `digest` when the cache holds one this user alone
    /// could have written, no larger than `limit`.
    fn trusted_blob(&self, digest: &str, limit: u64) -> Option<PathBuf> {
        let path = self.blob_path(digest);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if let Err(why) = trusted(&meta, "cached blob") {
            tracing::warn!("oci cache: {}: {why}; fetching it again", path.display());
            return None;
        }
        (meta.len() <= limit).then_some(path)
    }

    /// Whether the blob at `path`, whose bytes hash to `sha256`, is `digest`;
    /// one that is not is removed (and fetched again).
    fn holds(&self, path: &Path, digest: &str, sha256: [u8; 32]) -> bool {
        let actual = format!("sha256:{}", hex::encode(sha256));
        if actual != digest {
            tracing::warn!("oci cache: {} holds {actual}; removing it", path.display());
            let _ = std::fs::remove_file(path);
            return false;
        }
        true
    }

    /// Whether blob `digest` is held (not re-hashed: use [`Store::read`]).
    pub(crate) fn has(&self, digest: &str) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Stream `body` into the cache, hashing and counting as it comes
    /// (memory does not grow with the blob). Refused, and nothing kept,
    /// when it is over the limit or its digest is not the expected one.
    pub(crate) fn write(&self, expect: &Expect<'_>, body: &mut dyn Read) -> Result<PathBuf, Error> {
        let path = self.blob_path(expect.digest);
        let tmp = self.tmp_path(&path);
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| cache_err(&tmp, e))?;
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = body.read(&mut buf).map_err(|e| Error::Transfer {
                    what: format!("{} {}", expect.what, expect.digest),
                    reason: e.to_string(),
                })?;
                if n == 0 {
                    break;
                }
                total += n as u64;
                if total > expect.limit {
                    return Err(Error::TooLarge {
                        what: format!("{} {}", expect.what, expect.digest),
                        limit: expect.limit,
                    });
                }
                hasher.update(&buf[..n]);
                f.write_all(&buf[..n]).map_err(|e| cache_err(&tmp, e))?;
            }
            let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
            if actual != expect.digest {
                return Err(Error::DigestMismatch {
                    what: expect.what.to_owned(),
                    expected: expect.digest.to_owned(),
                    actual,
                });
            }
            // The rename may only ever publish a complete, verified blob.
            f.sync_all().map_err(|e| cache_err(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| cache_err(&path, e))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map(|()| path)
    }

    /// Store bytes already held and verified (a manifest).
    pub(crate) fn put(&self, digest: &str, bytes: &[u8]) -> Result<(), Error> {
        if self.has(digest) {
            return Ok(());
        }
        let expect = Expect { digest, limit: bytes.len() as u64, what: "manifest" };
        self.write(&expect, &mut &bytes[..]).map(drop)
    }

    /// The digest tag `key` last resolved to.
    pub(crate) fn tag(&self, key: &str) -> Option<String> {
        self.read_index("tags", key)
    }

    /// Remember that tag `key` resolved to `digest`.
    pub(crate) fn set_tag(&self, key: &str, digest: &str) {
        self.write_index("tags", key, digest);
    }

    /// The digest of the signature manifest last seen for `manifest`.
    pub(crate) fn signature(&self, manifest: &str) -> Option<String> {
        self.read_index("signatures", manifest)
    }

    /// Remember the signature manifest of `manifest`.
    pub(crate) fn set_signature(&self, manifest: &str, digest: &str) {
        self.write_index("signatures", manifest, digest);
    }

    fn index_path(&self, kind: &str, key: &str) -> PathBuf {
        // Keys are hashed: a tag or a registry name never becomes a path.
        self.root.join(kind).join(hex::encode(Sha256::digest(key.as_bytes())))
    }

    fn read_index(&self, kind: &str, key: &str) -> Option<String> {
        let path = self.index_path(kind, key);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        trusted(&meta, "cache index entry").ok()?;
        let text = std::fs::read_to_string(&path).ok()?;
        let digest = text.trim().to_owned();
        super::reference::check_digest(&digest).ok()?;
        Some(digest)
    }

    fn write_index(&self, kind: &str, key: &str, digest: &str) {
        let path = self.index_path(kind, key);
        let tmp = self.tmp_path(&path);
        let written = (|| {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(digest.as_bytes())?;
            // Only a complete entry is ever renamed into place.
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!("oci cache: cannot write {}: {e}", path.display());
        }
    }

    fn tmp_path(&self, path: &Path) -> PathBuf {
        let mut rnd = [0u8; 6];
        let _ = rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty());
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("blob");
        path.with_file_name(format!(".{name}.tmp-{}-{}", std::process::id(), hex::encode(rnd)))
    }
}

fn cache_err(path: &Path, e: std::io::Error) -> Error {
    Error::Cache { path: path.display().to_string(), reason: e.to_string() }
}
