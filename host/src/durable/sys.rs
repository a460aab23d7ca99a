//! The core's only door to the kernel for changes: one small method per
//! mutating system call, each wrapped in the [`Probe`] hooks and each
//! returning an [`Error`] that names its step and path.
//!
//! Every call is relative to a directory fd; no method takes an absolute or
//! multi-component path, so a concurrent rename of an ancestor cannot
//! redirect a write. Every open uses `O_NOFOLLOW` and `O_CLOEXEC`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use super::error::{Error, Result, Step};
use super::probe::{Probe, SysOp};

/// The mutating system calls, observed by a probe.
#[derive(Clone, Copy)]
pub(crate) struct Sys<'p> {
    probe: &'p dyn Probe,
}

/// Join a logical path for messages and probes (`.` is the anchor itself).
pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent == "." || parent.is_empty() { name.to_owned() } else { format!("{parent}/{name}") }
}

impl<'p> Sys<'p> {
    pub(crate) fn new(probe: &'p dyn Probe) -> Self {
        Sys { probe }
    }

    /// Run one observed call: `before` may veto it with an injected error.
    pub(super) fn observe<T>(
        &self,
        op: SysOp<'_>,
        step: Step,
        path: &str,
        call: impl FnOnce() -> io::Result<T>,
    ) -> Result<T> {
        self.probe.before(&op).map_err(|e| Error::io(step, path, e))?;
        let value = call().map_err(|e| Error::io(step, path, e))?;
        self.probe.after(&op);
        Ok(value)
    }

    /// `mkdirat` then open the new directory (`O_DIRECTORY|O_NOFOLLOW`) and
    /// set its exact mode, so the umask never decides it. When opening or
    /// setting the mode fails, the new directory is removed again, so a
    /// failure leaves nothing behind.
    pub(crate) fn mkdir(&self, dir: BorrowedFd<'_>, name: &str, path: &str, mode: u32) -> Result<OwnedFd> {
        self.observe(SysOp::Mkdir { path }, Step::Mkdir, path, || {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(io::Error::from)
        })?;
        let opened = open_dir(dir, name, path).and_then(|fd| self.chmod(&fd, path, mode).map(|()| fd));
        if opened.is_err() {
            let _ = self.rmdir(dir, name, path);
        }
        opened
    }

    /// A new empty file, `O_CREAT|O_EXCL|O_NOFOLLOW`: never an existing file,
    /// never through a link.
    pub(crate) fn create(&self, dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<OwnedFd> {
        self.observe(SysOp::Create { path }, Step::Create, path, || {
            rustix::fs::openat(
                dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(io::Error::from)
        })
    }

    /// Write all of `data` to a freshly created file.
    pub(crate) fn write_all(&self, fd: BorrowedFd<'_>, path: &str, data: &[u8]) -> Result<()> {
        self.observe(SysOp::Write { path, data }, Step::Write, path, || {
            let mut rest = data;
            while !rest.is_empty() {
                match rustix::io::write(fd, rest) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => rest = &rest[n..],
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        })
    }

    /// Set exact permission bits with `fchmod` (the umask does not apply).
    pub(crate) fn chmod(&self, fd: impl AsFd, path: &str, mode: u32) -> Result<()> {
        self.observe(SysOp::Chmod { path, mode }, Step::Chmod, path, || {
            rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(io::Error::from)
        })
    }

    /// `fchown` a staged file or directory (`None` leaves that id), before
    /// its fsync and before its `fchmod` (a change of owner clears setuid
    /// and setgid bits).
    pub(crate) fn chown(
        &self,
        fd: BorrowedFd<'_>,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        self.observe(SysOp::Chown { path, uid, gid }, Step::Chown, path, || {
            let uid = uid.map(rustix::fs::Uid::from_raw_unchecked);
            let gid = gid.map(rustix::fs::Gid::from_raw_unchecked);
            rustix::fs::fchown(fd, uid, gid).map_err(io::Error::from)
        })
    }

    /// `fsetxattr` of one extended attribute (a label, a carried attribute,
    /// an ACL) on a staged file or directory, before its fsync.
    pub(crate) fn set_xattr(
        &self,
        fd: BorrowedFd<'_>,
        path: &str,
        name: &std::ffi::CStr,
        value: &[u8],
    ) -> Result<()> {
        let shown = name.to_str().unwrap_or("(not UTF-8)");
        self.observe(SysOp::SetXattr { path, name: shown, value }, Step::SetXattr, path, || {
            rustix::fs::fsetxattr(fd, name, value, rustix::fs::XattrFlags::empty()).map_err(io::Error::from)
        })
    }

    /// `fsync` a regular file on the fd that wrote it.
    pub(crate) fn fsync_file(&self, fd: BorrowedFd<'_>, path: &str) -> Result<()> {
        self.observe(SysOp::FsyncFile { path }, Step::FsyncFile, path, || {
            rustix::fs::fsync(fd).map_err(io::Error::from)
        })
    }

    /// `fsync` a directory; `step` tells a commit fsync from the others.
    pub(crate) fn fsync_dir(&self, fd: BorrowedFd<'_>, path: &str, step: Step) -> Result<()> {
        self.observe(SysOp::FsyncDir { path }, step, path, || rustix::fs::fsync(fd).map_err(io::Error::from))
    }

    /// `syncfs` of the file system holding `fd`: writes back and commits
    /// everything dirty there, and reports any write-back error on that
    /// file system since `fd` was opened (Linux 5.8+, see `flush.rs`).
    pub(crate) fn syncfs(&self, fd: BorrowedFd<'_>, path: &str) -> Result<()> {
        self.observe(SysOp::Syncfs { path }, Step::Syncfs, path, || {
            rustix::fs::syncfs(fd).map_err(io::Error::from)
        })
    }

    /// `linkat(dir_from, from, dir_to, to, 0)`: a new name for the inode at
    /// `from`. Without `AT_SYMLINK_FOLLOW` a symbolic link at `from` would be
    /// linked itself, never followed, so callers check what they linked.
    pub(crate) fn link(
        &self,
        dir_from: BorrowedFd<'_>,
        from: &str,
        from_path: &str,
        dir_to: BorrowedFd<'_>,
        to: &str,
        to_path: &str,
    ) -> Result<()> {
        self.observe(SysOp::Link { from: from_path, to: to_path }, Step::Link, to_path, || {
            rustix::fs::linkat(dir_from, from, dir_to, to, AtFlags::empty()).map_err(io::Error::from)
        })
    }

    /// `renameat2(RENAME_EXCHANGE)`: both names must exist; they swap in one step.
    pub(crate) fn exchange(
        &self,
        dir_a: BorrowedFd<'_>,
        a: &str,
        path_a: &str,
        dir_b: BorrowedFd<'_>,
        b: &str,
        path_b: &str,
    ) -> Result<()> {
        self.observe(SysOp::Exchange { a: path_a, b: path_b }, Step::Exchange, path_b, || {
            rustix::fs::renameat_with(dir_a, a, dir_b, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
        })
    }

    /// `renameat2(from, to, RENAME_NOREPLACE)` unless `replace`, in which
    /// case plain `renameat(2)` atomically replaces an existing `to` (and
    /// works on file systems without `renameat2` flags).
    pub(crate) fn rename(
        &self,
        dir: BorrowedFd<'_>,
        from: &str,
        from_path: &str,
        to: &str,
        to_path: &str,
        replace: bool,
    ) -> Result<()> {
        self.rename_between(dir, from, from_path, dir, to, to_path, replace)
    }

    /// Plain `renameat(2)` of `from` in `dir_from` over `to` in `dir_to`,
    /// another directory of the same file system: `to` is replaced in one
    /// atomic step (the one-file fast path of a sync).
    pub(crate) fn replace_into(
        &self,
        dir_from: BorrowedFd<'_>,
        from: &str,
        from_path: &str,
        dir_to: BorrowedFd<'_>,
        to: &str,
        to_path: &str,
    ) -> Result<()> {
        self.rename_between(dir_from, from, from_path, dir_to, to, to_path, true)
    }

    /// Plain `renameat(2)` of an entry whose name is not UTF-8 to `to` in the
    /// same directory (recovery, inside a leftover it removes; the probe sees
    /// the old name lossily).
    pub(crate) fn rename_raw(
        &self,
        dir: BorrowedFd<'_>,
        from: &std::ffi::CStr,
        from_path: &str,
        to: &str,
        to_path: &str,
    ) -> Result<()> {
        self.rename_between(dir, from, from_path, dir, to, to_path, true)
    }

    /// The one observed rename: plain `renameat(2)` when `replace`, else
    /// `renameat2(RENAME_NOREPLACE)`.
    #[allow(clippy::too_many_arguments)]
    fn rename_between(
        &self,
        dir_from: BorrowedFd<'_>,
        from: impl rustix::path::Arg,
        from_path: &str,
        dir_to: BorrowedFd<'_>,
        to: &str,
        to_path: &str,
        replace: bool,
    ) -> Result<()> {
        let op = SysOp::Rename { from: from_path, to: to_path, replace };
        self.observe(op, Step::Rename, to_path, || {
            if replace {
                rustix::fs::renameat(dir_from, from, dir_to, to).map_err(io::Error::from)
            } else {
                rustix::fs::renameat_with(dir_from, from, dir_to, to, RenameFlags::NOREPLACE)
                    .map_err(io::Error::from)
            }
        })
    }

    /// `symlinkat(target, dir, name)`: a new symbolic link (never replaces
    /// an existing name).
    pub(crate) fn symlink(&self, dir: BorrowedFd<'_>, name: &str, path: &str, target: &str) -> Result<()> {
        self.observe(SysOp::Symlink { path, target }, Step::Symlink, path, || {
            rustix::fs::symlinkat(target, dir, name).map_err(io::Error::from)
        })
    }

    /// `unlinkat` of a file, link or other non-directory.
    pub(crate) fn unlink(&self, dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<()> {
        self.observe(SysOp::Unlink { path }, Step::Remove, path, || {
            rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(io::Error::from)
        })
    }

    /// `unlinkat(AT_REMOVEDIR)` of an empty directory.
    pub(crate) fn rmdir(&self, dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<()> {
        self.observe(SysOp::Rmdir { path }, Step::Remove, path, || {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(io::Error::from)
        })
    }
}

/// Open a directory beneath `dir` without following a link
/// (`O_DIRECTORY|O_NOFOLLOW`, [`without_atime`]). Reading only; not
/// observed.
pub(crate) fn open_dir(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<OwnedFd> {
    without_atime(|noatime| {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | noatime;
        rustix::fs::openat(dir, name, flags, Mode::empty())
    })
    .map_err(|e| kind_error(e, path, Step::Open))
}

/// How a regular file is opened for reading: never through a link, and
/// never waiting. A fifo (or a device) a neighbour swapped in after the
/// entry was checked would block a plain `open` until some writer came;
/// `O_NONBLOCK` makes that open return at once, and the read or `fstat`
/// that follows refuses it. On a regular file it changes nothing.
pub(crate) const READ_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC).union(OFlags::NONBLOCK);

/// Open a regular file beneath `dir` for reading ([`READ_FLAGS`],
/// [`without_atime`]).
pub(crate) fn open_file(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<OwnedFd> {
    without_atime(|noatime| rustix::fs::openat(dir, name, READ_FLAGS | noatime, Mode::empty()))
        .map_err(|e| kind_error(e, path, Step::Open))
}

/// Call `open` with `O_NOATIME`, and again without it if the kernel
/// refuses that flag (`EPERM`: it is only for the file's owner or a
/// process with `CAP_FOWNER`). What durasync reads (a source, a target it
/// compares, a plugin's reads) never gets a new access time: with
/// `relatime`, the first read after a change would dirty every inode read,
/// and the next `syncfs` (or the kernel's write-back) would write them all
/// out (measured in BENCHMARKS.md).
pub(crate) fn without_atime<T>(open: impl Fn(OFlags) -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    match open(OFlags::NOATIME) {
        Err(rustix::io::Errno::PERM) => open(OFlags::empty()),
        other => other,
    }
}

/// Map the errnos that mean "wrong kind of entry" to typed errors.
pub(crate) fn kind_error(e: rustix::io::Errno, path: &str, step: Step) -> Error {
    match e {
        rustix::io::Errno::NOENT => Error::NotFound { path: path.to_owned() },
        rustix::io::Errno::LOOP => Error::Symlink { path: path.to_owned() },
        rustix::io::Errno::NOTDIR => Error::NotADirectory { path: path.to_owned() },
        other => Error::io(step, path, other),
    }
}

/// What is at `name` in `dir`, without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Missing,
    File,
    Dir,
    Symlink,
    Other(&'static str),
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)` reduced to what the core needs.
pub(crate) fn kind_at(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<(Kind, u32)> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let mode = st.st_mode;
            Ok((kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)), mode & 0o7777))
        }
        Err(rustix::io::Errno::NOENT) => Ok((Kind::Missing, 0)),
        Err(e) => Err(Error::io(Step::Open, path, e)),
    }
}

pub(crate) fn kind_of(ft: rustix::fs::FileType) -> Kind {
    use rustix::fs::FileType as T;
    match ft {
        T::RegularFile => Kind::File,
        T::Directory => Kind::Dir,
        T::Symlink => Kind::Symlink,
        T::Fifo => Kind::Other("fifo"),
        T::Socket => Kind::Other("socket"),
        T::CharacterDevice => Kind::Other("character device"),
        T::BlockDevice => Kind::Other("block device"),
        T::Unknown => Kind::Other("file of unknown type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ask_for_no_access_time_and_open_again_without_it_where_that_is_refused() {
        let tried = std::sync::Mutex::new(Vec::new());
        let got = without_atime(|flags| {
            tried.lock().unwrap().push(flags);
            if flags.contains(OFlags::NOATIME) { Err(rustix::io::Errno::PERM) } else { Ok(7) }
        });
        assert_eq!(got, Ok(7));
        assert_eq!(*tried.lock().unwrap(), [OFlags::NOATIME, OFlags::empty()]);
        // Any other error is the open's own: not retried.
        let calls = std::sync::atomic::AtomicU32::new(0);
        let got: rustix::io::Result<()> = without_atime(|_| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(rustix::io::Errno::NOENT)
        });
        assert_eq!((got, calls.into_inner()), (Err(rustix::io::Errno::NOENT), 1));
    }
}
