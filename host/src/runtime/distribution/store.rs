//! The content-addressed blob cache, beside the compile cache:
//! `<cache>/oci/blobs/sha256/<hex>` holds manifests, components and
//! signature payloads under their own digest; `<cache>/oci/tags/<key>`
//! remembers the digest a tag last resolved to (for a node whose registry
//! is down), `<cache>/oci/signatures/<key>` the digest of the signature
//! manifest of a manifest in one repository (its `.sig` tag), and
//! `<cache>/oci/referrers/<key>` the referrers index of a manifest in one
//! repository.
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
//! power loss only means fetching it again. A writer killed before its
//! rename leaves its temporary file: opening the cache removes those whose
//! pid no longer runs.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Error;
use crate::runtime::artifact::trusted;

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

/// How a blob arrives: an expected digest and length.
pub(crate) struct Expect<'a> {
    /// `sha256:…` (already checked to be well-formed).
    pub digest: &'a str,
    /// Its exact length (its descriptor's size, already checked against
    /// the limit): more is cut off, and more or less is refused.
    pub size: u64,
    /// What it is, for messages ("manifest", "layer").
    pub what: &'a str,
}

/// The cache's directories below its root: blobs, and the small index
/// entries (a tag's, a signature tag's, a referrers index's last digest).
const INDEX_DIRS: [&str; 4] = ["blobs/sha256", "tags", "signatures", "referrers"];

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
        for sub in INDEX_DIRS {
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
            root.join("referrers"),
        ] {
            let meta = std::fs::symlink_metadata(&dir).map_err(|e| cache_err(&dir, e))?;
            trusted(&meta, "blob cache directory")
                .map_err(|why| Error::Cache { path: dir.display().to_string(), reason: why })?;
        }
        for sub in INDEX_DIRS {
            remove_stale_temporaries(&root.join(sub));
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
                if total > expect.size {
                    return Err(size_mismatch(expect, format!("at least {total}")));
                }
                hasher.update(&buf[..n]);
                f.write_all(&buf[..n]).map_err(|e| cache_err(&tmp, e))?;
            }
            if total != expect.size {
                return Err(size_mismatch(expect, total.to_string()));
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
        let expect = Expect { digest, size: bytes.len() as u64, what: "manifest" };
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

    /// The digest of the signature manifest last seen for `key` (a
    /// repository and a manifest digest).
    pub(crate) fn signature(&self, key: &str) -> Option<String> {
        self.read_index("signatures", key)
    }

    /// Remember the signature manifest of `key` (a repository and a
    /// manifest digest), replacing the one before.
    pub(crate) fn set_signature(&self, key: &str, digest: &str) {
        self.write_index("signatures", key, digest);
    }

    /// The digest of the referrers index last seen for `key`.
    pub(crate) fn referrers(&self, key: &str) -> Option<String> {
        self.read_index("referrers", key)
    }

    /// Remember the referrers index of `key`.
    pub(crate) fn set_referrers(&self, key: &str, digest: &str) {
        self.write_index("referrers", key, digest);
    }

    fn index_path(&self, kind: &str, key: &str) -> PathBuf {
        // Keys are hashed: a tag or a registry name never becomes a path.
        self.root.join(kind).join(crate::digest::sha256_hex(key.as_bytes()))
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

fn size_mismatch(expect: &Expect<'_>, actual: String) -> Error {
    Error::SizeMismatch {
        what: expect.what.to_owned(),
        digest: expect.digest.to_owned(),
        stated: expect.size,
        actual,
    }
}

/// Remove the temporary files (`.NAME.tmp-PID-RANDOM`, see
/// [`Store::tmp_path`]) that writers which no longer run left in `dir`: a
/// pull killed part-way never renames or removes its file. A file whose
/// pid is alive is left alone (a pull under way beside this one); a pid
/// reused since only delays the removal to a later start. This rather than
/// `O_TMPFILE` + `linkat`: those need a filesystem that has them and
/// `/proc` (or `CAP_DAC_READ_SEARCH`) to give the file a name, and a cache
/// directory may be on anything.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temporary_pid) else { continue };
        let dead = match rustix::process::Pid::from_raw(pid) {
            Some(pid) => rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH),
            None => false,
        };
        if dead {
            let path = entry.path();
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!("oci cache: removed {}, left by a pull that was stopped", path.display())
                }
                Err(e) => tracing::warn!("oci cache: cannot remove {}: {e}", path.display()),
            }
        }
    }
}

/// The writer's pid in a temporary file's name `.NAME.tmp-PID-HEX`.
fn temporary_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.rsplit_once(".tmp-")?;
    let (pid, rnd) = tail.split_once('-')?;
    if rnd.is_empty() || !rnd.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse::<i32>().ok().filter(|p| *p > 0)
}

fn cache_err(path: &Path, e: std::io::Error) -> Error {
    Error::Cache { path: path.display().to_string(), reason: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_temporary_names_give_a_pid() {
        assert_eq!(temporary_pid(".0123abcd.tmp-4242-00ff00ff00ff"), Some(4242));
        assert_eq!(temporary_pid(".a.b.tmp-7-ab"), Some(7));
        for name in [
            "0123.tmp-4242-00ff",
            ".x.tmp-abc-00ff",
            ".x.tmp-0-00ff",
            ".x.tmp--1-00",
            ".x.tmp-12-",
            ".x.tmp-12-zz",
            ".x",
            "",
        ] {
            assert_eq!(temporary_pid(name), None, "{name}");
        }
    }
}
