//! The source directory of a tree read from disk (`durasync sync --from`):
//! its files' bytes stay there, and are read when a sync compares or
//! stages them, never held whole.
//!
//! [`read_tree`](super::read_tree) records each file's size and mode from
//! a `statat` during its walk; the [`Tree`](super::Tree) keeps those and
//! one open fd of the source root. A sync then reads each file beneath that
//! root when it needs the bytes: the unchanged check compares it with the
//! target's file chunk by chunk, staging copies it through one buffer per
//! thread ([`COPY_CHUNK`]). Memory is a constant plus the names, whatever
//! the files hold.
//!
//! # A source that changes during a sync
//!
//! A sync reads each source file when it stages it, not at one instant, so
//! what it commits is, file by file, what each file held when it was
//! copied. A copy is refused with [`Error::SourceChanged`] (the staging
//! tree is discarded, nothing changed) when the file:
//!
//! - has another size than the walk saw, or is no longer a regular file
//!   (removed: [`Error::NotFound`]);
//! - grows or shrinks while it is copied (more or fewer bytes read than
//!   its size);
//! - is written while it is copied: its size, `mtime` or `ctime` differs
//!   between the `fstat` before the first read and the one after the last.
//!
//! So no torn file (part old bytes, part new) reaches the committed tree
//! through a write the kernel records in the file's times. Those times are
//! as coarse as the kernel's clock tick (a few ms): a write within the tick
//! of the file's previous write leaves them as they were and is not seen.
//! A file rewritten whole between the walk and its copy, at the same size,
//! is staged with its new bytes; one the compare found equal to the
//! target's file is carried as compared (the target's inode); files and
//! directories added after the walk are not in this sync, and the next one
//! picks them up.

use std::cell::RefCell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::error::{Error, Result, Step};
use super::resolve::open_file_beneath;
use super::sys::{Kind, Sys, join, kind_of};

/// The largest read (and write) of a copy: each copying thread holds one
/// buffer of this size, whatever the files hold.
pub(crate) const COPY_CHUNK: usize = 1 << 20;

/// The source directory of a tree.
#[derive(Debug)]
pub(crate) struct Source {
    /// The source root, open since the walk.
    root: OwnedFd,
    /// The root as shown in messages.
    path: String,
}

/// Where the bytes of one file of a [`Tree`](super::Tree) are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bytes<'t> {
    /// In memory.
    Held(&'t [u8]),
    /// In the tree's source directory at the file's path, this many.
    Source(&'t Source, u64),
}

impl Bytes<'_> {
    /// How many bytes the file holds.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Bytes::Held(b) => b.len() as u64,
            Bytes::Source(_, size) => *size,
        }
    }

    /// Write these bytes, of the tree's file at `rel`, into `fd`, a freshly
    /// created file shown as `path`: from memory, or copied from the
    /// source ([`Source::copy_to`], refused when the source file changed).
    pub(crate) fn write_to(&self, sys: &Sys<'_>, fd: BorrowedFd<'_>, path: &str, rel: &str) -> Result<()> {
        match self {
            Bytes::Held(data) => sys.write_all(fd, path, data),
            Bytes::Source(source, size) => source.copy_to(sys, rel, *size, fd, path),
        }
    }
}

thread_local! {
    /// Each thread's copy buffer, kept across files (at most [`COPY_CHUNK`]
    /// + 1 bytes).
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Source {
    pub(crate) fn new(root: OwnedFd, path: &str) -> Self {
        Source { root, path: path.to_owned() }
    }

    /// The path of `rel` as shown in messages.
    pub(crate) fn shown(&self, rel: &str) -> String {
        join(&self.path, rel)
    }

    /// Open the file at `rel` beneath the root (never through a link):
    /// refused unless it is still a regular file of `size` bytes, as the
    /// walk saw it.
    pub(crate) fn open(&self, rel: &str, size: u64) -> Result<OwnedFd> {
        let shown = self.shown(rel);
        let fd = open_file_beneath(self.root.as_fd(), rel, &shown)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(Step::Read, &shown, e))?;
        if kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)) != Kind::File {
            return Err(Error::SourceChanged { path: shown, what: "it is no longer a regular file" });
        }
        if st.st_size as u64 != size {
            return Err(Error::SourceChanged { path: shown, what: "its size changed since it was listed" });
        }
        Ok(fd)
    }

    /// Copy the file at `rel` (`size` bytes, as walked) into `out`, a
    /// freshly created file shown as `out_path`, in chunks of at most
    /// [`COPY_CHUNK`] bytes. Refused with [`Error::SourceChanged`] when the
    /// file changes size or is written while it is copied (see the module).
    pub(crate) fn copy_to(
        &self,
        sys: &Sys<'_>,
        rel: &str,
        size: u64,
        out: BorrowedFd<'_>,
        out_path: &str,
    ) -> Result<()> {
        let fd = self.open(rel, size)?;
        let shown = self.shown(rel);
        let before = times(&fd, &shown)?;
        BUF.with_borrow_mut(|buf| {
            let cap = (size as usize).min(COPY_CHUNK) + 1;
            if buf.len() < cap {
                buf.resize(cap, 0);
            }
            let mut copied = 0u64;
            loop {
                // One byte more than is left: a short read then ends the
                // file, and a byte past its size shows it grew.
                let want = ((size - copied) as usize).min(COPY_CHUNK - 1) + 1;
                let n = match rustix::io::read(&fd, &mut buf[..want]) {
                    Ok(n) => n,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(Error::io(Step::Read, &shown, e)),
                };
                if copied + n as u64 > size {
                    return Err(Error::SourceChanged {
                        path: shown.clone(),
                        what: "it grew while it was copied",
                    });
                }
                if n == 0 {
                    if copied < size {
                        return Err(Error::SourceChanged {
                            path: shown.clone(),
                            what: "it shrank while it was copied",
                        });
                    }
                    break;
                }
                sys.write_all(out, out_path, &buf[..n])?;
                copied += n as u64;
                if copied == size && n < want {
                    break;
                }
            }
            Ok(())
        })?;
        if times(&fd, &shown)? != before {
            return Err(Error::SourceChanged { path: shown, what: "it was written while it was copied" });
        }
        Ok(())
    }
}

/// What tells that a file was written: its size, `mtime` and `ctime`.
fn times(fd: &OwnedFd, path: &str) -> Result<[i64; 5]> {
    let st = rustix::fs::fstat(fd).map_err(|e| Error::io(Step::Read, path, e))?;
    Ok([
        st.st_size as i64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ])
}
