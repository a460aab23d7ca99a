//! Read-only access beneath a directory handle (`read-file`, `list-dir`).

use std::os::fd::{AsFd, BorrowedFd};

use super::cancel::Cancel;
use super::error::{Error, Result};
use super::names::is_reserved;
use super::resolve::{open_beneath, split_last};
use super::sys::{Kind, kind_at};
use super::walk::{list_names_at_most, read_file_at};

/// What one read-only call may bring into memory. The file system, not the
/// caller, decides how large a file (a sparse one claims any size for free)
/// or a directory is: both are checked against these before anything is
/// allocated in proportion to them, and refused with
/// [`Error::TooLarge`] naming the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Most bytes [`read_file`] returns.
    pub max_bytes: u64,
    /// Most entries [`list_dir`] returns.
    pub max_entries: u64,
}

impl Default for ReadLimits {
    /// 64 MiB (a certificate bundle or a manifest is kilobytes) and 100 000
    /// entries (a sync writes at most 100 000 files; 255-byte names make
    /// that at most ~25 MiB of names).
    fn default() -> Self {
        ReadLimits { max_bytes: 64 << 20, max_entries: 100_000 }
    }
}

/// How many entries [`list_dir`] classifies between two looks at its
/// cancellation.
const CANCEL_EVERY: usize = 1024;

// What a directory entry is and one entry of [`list_dir`]: the contract's
// plain types (WIT `entry-kind`, `entry`), so the services and both front
// doors return the core's value without converting it.
pub use durasync_contract::{Entry, EntryKind};

/// The bytes of the regular file at `rel` beneath `root`, or `None` when
/// nothing is there (nor at any missing parent). A link is an error, and so
/// is a file over `limits.max_bytes` (checked with `fstat` before anything
/// is allocated, and again while reading, should it grow). `cancel` is
/// checked between reads.
pub fn read_file(
    root: BorrowedFd<'_>,
    rel: &str,
    limits: &ReadLimits,
    cancel: &Cancel<'_>,
) -> Result<Option<Vec<u8>>> {
    let (parent_rel, name) = split_last(rel)?;
    let parent = match open_beneath(root, parent_rel) {
        Ok(fd) => fd,
        Err(Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    match kind_at(parent.as_fd(), name, rel)?.0 {
        Kind::Missing => Ok(None),
        Kind::File => read_file_at(parent.as_fd(), name, rel, limits.max_bytes, cancel).map(Some),
        // The symlink layout's link of a top-level name: the file in the
        // current generation (`layout.rs`); any other link is refused.
        Kind::Symlink => match super::linked::hop(parent.as_fd(), name, rel)? {
            Some(generation) => match kind_at(generation.as_fd(), name, rel)?.0 {
                Kind::Missing => Ok(None),
                Kind::File => read_file_at(generation.as_fd(), name, rel, limits.max_bytes, cancel).map(Some),
                _ => Err(Error::NotAFile { path: rel.to_owned() }),
            },
            None => Err(Error::Symlink { path: rel.to_owned() }),
        },
        _ => Err(Error::NotAFile { path: rel.to_owned() }),
    }
}

/// The entries of the directory at `rel` beneath `root`, sorted by name,
/// without durasync's own bookkeeping entries. A directory holding more
/// than `limits.max_entries` entries is refused as soon as the listing
/// passes that many; `cancel` is checked while reading and classifying.
pub fn list_dir(
    root: BorrowedFd<'_>,
    rel: &str,
    limits: &ReadLimits,
    cancel: &Cancel<'_>,
) -> Result<Vec<Entry>> {
    let dir = open_beneath(root, rel)?;
    let shown = if rel.is_empty() { "." } else { rel };
    // A directory in the symlink layout lists as its current generation.
    let dir = super::linked::current_generation(dir.as_fd(), shown)?.unwrap_or(dir);
    let mut names = list_names_at_most(dir.as_fd(), shown, limits.max_entries, cancel)?;
    names.retain(|n| !is_reserved(n));
    names.sort();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            if i % CANCEL_EVERY == CANCEL_EVERY - 1 {
                cancel.check(shown)?;
            }
            let kind = match kind_at(dir.as_fd(), &name, &name)?.0 {
                Kind::File => EntryKind::File,
                Kind::Dir => EntryKind::Directory,
                Kind::Symlink => EntryKind::Symlink,
                _ => EntryKind::Other,
            };
            Ok(Entry { name, kind })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::time::Instant;

    use super::*;

    fn dir() -> (tempfile::TempDir, std::fs::File) {
        let tmp = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(tmp.path()).unwrap();
        (tmp, fd)
    }

    #[test]
    fn a_file_over_the_read_limit_is_refused_by_its_size_before_anything_is_read() {
        let (tmp, fd) = dir();
        std::fs::File::create(tmp.path().join("sparse")).unwrap().set_len(1 << 40).unwrap();
        std::fs::write(tmp.path().join("small"), b"12345").unwrap();
        let limits = ReadLimits { max_bytes: 4, ..ReadLimits::default() };
        let err = read_file(fd.as_fd(), "sparse", &limits, &Cancel::NEVER).unwrap_err();
        assert_eq!(
            err.to_string(),
            "sparse: limit exceeded: bytes in one read: 1099511627776 is over the limit of 4"
        );
        assert!(matches!(
            read_file(fd.as_fd(), "small", &limits, &Cancel::NEVER),
            Err(Error::TooLarge { .. })
        ));
        let limits = ReadLimits { max_bytes: 5, ..ReadLimits::default() };
        assert_eq!(read_file(fd.as_fd(), "small", &limits, &Cancel::NEVER).unwrap().unwrap(), b"12345");
    }

    #[test]
    fn a_directory_over_the_entry_limit_is_refused_and_one_at_it_is_listed() {
        let (tmp, fd) = dir();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        for i in 0..10 {
            std::fs::write(tmp.path().join(format!("d/{i}")), b"").unwrap();
        }
        let at = ReadLimits { max_entries: 10, ..ReadLimits::default() };
        assert_eq!(list_dir(fd.as_fd(), "d", &at, &Cancel::NEVER).unwrap().len(), 10);
        let under = ReadLimits { max_entries: 9, ..ReadLimits::default() };
        let err = list_dir(fd.as_fd(), "d", &under, &Cancel::NEVER).unwrap_err();
        assert_eq!(err.to_string(), "d: limit exceeded: entries in one listing: 10 is over the limit of 9");
    }

    #[test]
    fn reads_and_listings_stop_at_a_passed_deadline() {
        let (tmp, fd) = dir();
        std::fs::write(tmp.path().join("f"), b"x").unwrap();
        let past = Cancel::at(Instant::now());
        let limits = ReadLimits::default();
        assert!(matches!(read_file(fd.as_fd(), "f", &limits, &past), Err(Error::Cancelled { .. })));
        assert!(matches!(list_dir(fd.as_fd(), "", &limits, &past), Err(Error::Cancelled { .. })));
    }
}
