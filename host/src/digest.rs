//! SHA-256 digests as durasync writes them: lowercase hex (a manifest's
//! `sha256`, cache keys, ledger names), OCI's `sha256:<hex>` form (blob and
//! manifest digests), and the one digest of a tree's contents (what a
//! probation holds a change to, what `/status` says a root holds).

use std::os::fd::BorrowedFd;

use sha2::{Digest, Sha256};

use crate::durable;

/// The SHA-256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The OCI digest of `bytes`: `sha256:` and [`sha256_hex`].
pub fn oci_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// The most entries a tree digest reads; a larger tree gets none.
pub const MAX_TREE_DIGEST_ENTRIES: u64 = 100_000;
/// The most bytes a tree digest reads; a larger tree gets none.
pub const MAX_TREE_DIGEST_BYTES: u64 = 1 << 30;

/// `sha256:HEX` of the contents at `name` in `parent` (a directory tree or
/// one regular file): every path, kind, mode and byte, in walk order,
/// durasync's own entries left out. The same contents give the same digest
/// wherever they live (a staged tree and the same tree after its swap),
/// whatever their inodes or times. A symbolic link or other special file
/// in the tree is an error naming it; so is a tree of more than
/// [`MAX_TREE_DIGEST_ENTRIES`] entries or [`MAX_TREE_DIGEST_BYTES`] bytes.
/// `shown` names the contents in errors.
pub fn tree_digest(parent: BorrowedFd<'_>, name: &str, shown: &str) -> Result<String, durable::Error> {
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut entries, mut bytes) = (0u64, 0u64);
    durable::walk::for_each_entry(parent, name, shown, &mut |path, mode, file| {
        entries += 1;
        if entries > MAX_TREE_DIGEST_ENTRIES {
            return Err(durable::Error::Limit {
                what: "entries in a tree digest",
                limit: MAX_TREE_DIGEST_ENTRIES,
                actual: entries,
            });
        }
        // Each entry is framed (kind, path length, path, mode): no two
        // different trees hash the same sequence of bytes.
        hash.update(if file.is_some() { b"f" } else { b"d" });
        hash.update((path.len() as u64).to_le_bytes());
        hash.update(path.as_bytes());
        hash.update(mode.to_le_bytes());
        if let Some(fd) = file {
            let mut len = 0u64;
            let mut body = Sha256::new();
            loop {
                match rustix::io::read(fd, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        body.update(&buf[..n]);
                        len += n as u64;
                        bytes += n as u64;
                        if bytes > MAX_TREE_DIGEST_BYTES {
                            return Err(durable::Error::Limit {
                                what: "bytes in a tree digest",
                                limit: MAX_TREE_DIGEST_BYTES,
                                actual: bytes,
                            });
                        }
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        let p = if path.is_empty() { shown.to_owned() } else { format!("{shown}/{path}") };
                        return Err(durable::Error::io(durable::Step::Read, p, e));
                    }
                }
            }
            hash.update(len.to_le_bytes());
            hash.update(body.finalize());
        }
        Ok(())
    })?;
    Ok(format!("sha256:{}", hex::encode(hash.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_lowercase_hex_and_oci_digests_name_their_algorithm() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(sha256_hex(b""), empty);
        assert_eq!(oci_digest(b""), format!("sha256:{empty}"));
    }
}
