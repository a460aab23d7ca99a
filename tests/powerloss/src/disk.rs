//! The volatile disk: a FUSE file system of one file, `disk.img`, whose
//! bytes are a [`VolatileImage`]. A loop device attached (buffered) to that
//! file turns the file system's flushes into `fsync` of it, so the image
//! sees exactly the writes and barriers a real disk would.
//!
//! What persists: only `fsync`/`fdatasync` of the served file (FUSE_FSYNC)
//! flushes the cache. A `close` (FUSE_FLUSH) does not: a loop device closes
//! the file on detach, which must not rescue writes the file system never
//! flushed. After a cut every request fails with EIO, as a dead disk's would.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};

use crate::image::{CutMode, CutPlan, Error, Stats, VolatileImage};

/// The name of the one file the disk serves.
pub const IMAGE_NAME: &str = "disk.img";

const ROOT: INodeNo = INodeNo(1);
const IMAGE: INodeNo = INodeNo(2);
/// The kernel may cache attributes this long; the image's size never
/// changes, and nothing else about it matters.
const TTL: Duration = Duration::from_secs(1);

/// The control side of a mounted disk: arm a cut, cut now, read the counts.
/// Cheap to clone; every clone drives the same image.
#[derive(Clone, Debug)]
pub struct PowerSwitch(Arc<Mutex<VolatileImage>>);

impl PowerSwitch {
    fn image(&self) -> MutexGuard<'_, VolatileImage> {
        // A panic while serving a request leaves the image as it was (every
        // mutation is one step under the lock), so a poisoned lock is usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reset the counts and cut by `plan` in `mode` from now on.
    pub fn arm(&self, plan: CutPlan, mode: CutMode) {
        self.image().arm(plan, mode);
    }

    /// Cut the power now (idempotent).
    pub fn cut(&self) -> Result<(), Error> {
        self.image().cut()
    }

    /// Counts since arming, and whether the power is cut.
    pub fn stats(&self) -> Stats {
        self.image().stats()
    }
}

/// A mounted volatile disk. Dropping it unmounts the FUSE file system
/// (detach any loop device from [`VolatileDisk::image_path`] first).
#[derive(Debug)]
pub struct VolatileDisk {
    switch: PowerSwitch,
    mountpoint: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl VolatileDisk {
    /// Serve `backing` (opened read-write; its length is the image's size)
    /// as `MOUNTPOINT/disk.img`. Needs root (or a FUSE setup allowing it).
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<Self> {
        let file = File::options().read(true).write(true).open(backing)?;
        let image = VolatileImage::new(file).map_err(io::Error::other)?;
        let switch = PowerSwitch(Arc::new(Mutex::new(image)));
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("durasync-volatile".into()), MountOption::RW];
        let fs = Served { switch: switch.clone() };
        let session = fuser::spawn_mount(fs, mountpoint, &config)?;
        Ok(Self { switch, mountpoint: mountpoint.to_path_buf(), session: Some(session) })
    }

    /// The served image file.
    pub fn image_path(&self) -> PathBuf {
        self.mountpoint.join(IMAGE_NAME)
    }

    /// The power switch of this disk.
    pub fn switch(&self) -> PowerSwitch {
        self.switch.clone()
    }
}

impl Drop for VolatileDisk {
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && let Err(e) = session.umount_and_join()
        {
            // Still held (a loop device not yet released): detach lazily so
            // the mount point is free; the kernel ends the session when the
            // last user lets go.
            tracing::warn!("unmounting {}: {e}; detaching lazily", self.mountpoint.display());
            let _ = rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

/// The FUSE side: a root directory holding one file.
struct Served {
    switch: PowerSwitch,
}

impl Served {
    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            IMAGE => (FileType::RegularFile, 0o600, self.switch.image().size(), 1),
            _ => return None,
        };
        let now = SystemTime::UNIX_EPOCH;
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

fn errno(e: &Error) -> Errno {
    match e {
        Error::PowerCut | Error::Backing(_) => Errno::EIO,
        Error::OutOfRange { .. } => Errno::EFBIG,
    }
}

impl Filesystem for Served {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match (parent, name == IMAGE_NAME) {
            (ROOT, true) => reply.entry(&TTL, &self.attr(IMAGE).expect("the image"), Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The image never changes size; times and owners are not kept.
        match self.attr(ino) {
            Some(attr) if size.is_none_or(|s| s == attr.size) => reply.attr(&TTL, &attr),
            Some(_) => reply.error(Errno::EPERM),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != IMAGE {
            return reply.error(Errno::EISDIR);
        }
        // Direct I/O: every read and write reaches the image (no FUSE page
        // cache could answer a read after the cut, or hold a write back).
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.switch.image().read(offset, u64::from(size)) {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.switch.image().write(offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Ordering: the image persists every cached page before this reply;
        // the loop device (and so the file system) learns the flush is done
        // only then.
        match self.switch.image().flush() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close is not a barrier: nothing is persisted here.
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (IMAGE, FileType::RegularFile, IMAGE_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
