//! How a sync makes its staging tree durable before the swap: the flush
//! strategy.
//!
//! Two correct primitives, with different costs:
//!
//! - **fsync**: one `fsync` per new or changed file and per staging
//!   directory (N + D + 1 before the swap), issued from
//!   [`super::DEFAULT_THREADS`] threads so the block layer merges device
//!   flushes. Its cost grows with the batch, not with anyone else's dirty
//!   data. On btrfs they contend on the log tree and are slow however they
//!   are issued, so the thread count is kept and `auto` avoids fsyncs on
//!   btrfs instead.
//! - **syncfs**: the files and directories are written without any fsync,
//!   then **one** `syncfs(2)` on the staging directory's fd writes back and
//!   commits everything dirty on that file system: the batch's data, modes
//!   and entries included (for 1000 files about half the time of 16-thread
//!   fsyncs on ext4 and a tenth on btrfs). Its cost
//!   grows with everyone else's dirty data on that file system, and it
//!   pushes that data out too.
//!
//! After either, the swap and the commit fsync of the parent are the same.
//! The figures behind these choices are in BENCHMARKS.md ("Flush
//! strategies on ext4, xfs and btrfs", "The syncfs floor").
//!
//! `syncfs` reports write-back errors (any since the fd was opened, on that
//! file system) only since Linux 5.8; before, it returned 0 whatever
//! happened, so it is never used there. The fd is the staging directory's,
//! opened before the batch's first write, so every write-back error of the
//! batch is reported (and any other process's on the same file system in
//! that window: the batch then fails, conservatively). A failed `syncfs`
//! is a failed flush of the whole batch, handled like a failed file fsync:
//! it happens before the swap, so nothing changed; the staging tree is
//! discarded and a retry writes every file into fresh inodes (the failed
//! batch's pages may have been marked clean without reaching the disk,
//! "fsyncgate"; nothing of it is ever reused). The commit fsync and its
//! unsynced marker are unchanged.
//!
//! [`Flush::Auto`] picks per batch (`choose`): `syncfs` only when all of
//! these hold, else `fsync`:
//!
//! - the file system is ext4, xfs or btrfs (`fstatfs` `f_type`): local file
//!   systems whose `syncfs` writes back and commits everything (a FUSE file
//!   system's `syncfs` may do nothing at all, NFS's is not known to commit);
//! - the kernel is 5.8 or later (error reporting, above);
//! - the batch writes at least [`SYNCFS_MIN_FILES`] files (for a few files
//!   their own fsyncs cost about one flush anyway, and touch no one else);
//! - on ext4 and xfs, the other dirty data that `syncfs` would have to
//!   write back is at most [`SYNCFS_MAX_OTHER_DIRTY`] (on btrfs, `syncfs`
//!   beat parallel fsyncs even with another writer keeping ≥ 1 GiB dirty):
//!   the device's own write-back statistics
//!   (`BdiReclaimable` + `BdiWriteback` of `/sys/class/bdi/MAJ:MIN/stats`,
//!   or of debugfs' `/sys/kernel/debug/bdi/MAJ:MIN/stats`) when the kernel
//!   shows them, else `Dirty` + `Writeback` of `/proc/meminfo`, the whole
//!   machine's: an upper bound of the device's share, so the fallback can
//!   only pick fsync more often, never syncfs when the device is busy.
//!
//! The one-file fast path and the single-file `write` always fsync their
//! one file: one fsync is the floor for one file, and it never writes back
//! another process's data.

use std::fmt;
use std::os::fd::BorrowedFd;
use std::str::FromStr;

use super::error::{Error, Result};
use super::fsinfo::{self, FsKind};

/// How a sync makes its staging tree durable before the swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flush {
    /// Choose per batch from the file system and its other dirty data
    /// (see the module documentation).
    #[default]
    Auto,
    /// One fsync per new or changed file and per staging directory.
    Fsync,
    /// One `syncfs` of the file system for the whole staging tree. Refused
    /// (nothing changed) on file systems and kernels where it cannot be
    /// trusted to persist the batch or report its errors.
    Syncfs,
}

impl Flush {
    /// The setting's name, as the CLI and manifests spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Flush::Auto => "auto",
            Flush::Fsync => "fsync",
            Flush::Syncfs => "syncfs",
        }
    }
}

impl fmt::Display for Flush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Flush {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Flush::Auto),
            "fsync" => Ok(Flush::Fsync),
            "syncfs" => Ok(Flush::Syncfs),
            other => Err(format!("must be \"auto\", \"fsync\" or \"syncfs\", not {other:?}")),
        }
    }
}

/// [`Flush::Auto`] uses `syncfs` only for batches of at least this many
/// files to write. A few files' own fsyncs cost about one device flush,
/// like the `syncfs`, and never write back another process's data; from
/// tens of files on, parallel fsyncs cost several flushes and journal
/// commits (1000 files: about 2× one `syncfs` on ext4 and xfs, 15× on
/// btrfs).
pub const SYNCFS_MIN_FILES: usize = 32;

/// [`Flush::Auto`] uses `syncfs` only while at most this much other data
/// is dirty or under write-back on the device (32 MiB). `syncfs` waits for
/// all of it: at the few hundred MB/s of a node's disk, 32 MiB is about
/// the time a batch's parallel fsyncs of 1000 small files take anyway
/// (BENCHMARKS.md), and a busy writer's gigabytes would make the sync wait
/// for them, and push them out early.
pub const SYNCFS_MAX_OTHER_DIRTY: u64 = 32 << 20;

/// What a batch uses, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chosen {
    /// One `syncfs` (`true`) or per-entry fsyncs (`false`).
    pub syncfs: bool,
    /// Threads writing (and, with fsync, fsyncing) the files.
    pub threads: usize,
    /// Why, for the debug log.
    pub why: String,
}

/// Decide how the batch of `writes` files in the directory `dir` (the
/// target's parent) is flushed under `flush`; `threads` is the caller's
/// thread setting. A forced [`Flush::Syncfs`] where it cannot be trusted
/// is [`Error::FlushUnsupported`], before anything is written.
pub(crate) fn choose(
    flush: Flush,
    dir: BorrowedFd<'_>,
    path: &str,
    writes: usize,
    threads: usize,
) -> Result<Chosen> {
    let kind = FsKind::of(dir).filter(|k| k.syncfs_trusted());
    let fsync = |why: String| Chosen { syncfs: false, threads, why };
    // Without fsyncs, writing the batch never waits for the disk: it is CPU
    // work in the page cache, and creating names in one directory takes its
    // lock in turn, so threads beyond the CPUs only spin on that lock
    // (`rwsem_spin_on_owner` was 6 % of a 1000-file sync's profile with 16).
    let syncfs = |why: String| Chosen { syncfs: true, threads: super::parallel::cpu_threads(threads), why };
    let kernel_ok = fsinfo::kernel_reports_syncfs_errors();
    match flush {
        Flush::Fsync => Ok(fsync("--flush fsync".into())),
        Flush::Syncfs => {
            let unsupported = |reason: String| Error::FlushUnsupported {
                path: path.to_owned(),
                fs: fsinfo::fs_name(dir),
                reason,
            };
            if kind.is_none() {
                return Err(unsupported(
                    "its syncfs is not known to write back and commit every file (only ext4, xfs, btrfs and \
                     tmpfs are trusted with it)"
                        .into(),
                ));
            }
            if !kernel_ok {
                return Err(unsupported("before Linux 5.8 syncfs does not report write errors".into()));
            }
            Ok(syncfs("--flush syncfs".into()))
        }
        Flush::Auto => {
            let Some(kind) = kind.filter(|k| *k != FsKind::Tmpfs) else {
                return Ok(fsync("auto: syncfs is used only on ext4, xfs and btrfs".into()));
            };
            if !kernel_ok {
                return Ok(fsync("auto: syncfs reports write errors only since Linux 5.8".into()));
            }
            if writes < SYNCFS_MIN_FILES {
                return Ok(fsync(format!("auto: {writes} files to write, fewer than {SYNCFS_MIN_FILES}")));
            }
            if kind == FsKind::Btrfs {
                // Its fsyncs contend on the log tree; one syncfs was faster
                // even beside another writer's gigabyte of dirty data.
                return Ok(syncfs(format!("auto: btrfs, {writes} files")));
            }
            match fsinfo::other_dirty(dir) {
                Some((bytes, source)) if bytes <= SYNCFS_MAX_OTHER_DIRTY => {
                    Ok(syncfs(format!("auto: {kind}, {writes} files, {bytes} bytes dirty ({source})")))
                }
                Some((bytes, source)) => Ok(fsync(format!(
                    "auto: {bytes} bytes of other data dirty ({source}), over {SYNCFS_MAX_OTHER_DIRTY}"
                ))),
                None => Ok(fsync("auto: the dirty data on the device is unknown".into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn settings_parse_and_print_by_name() {
        for f in [Flush::Auto, Flush::Fsync, Flush::Syncfs] {
            assert_eq!(f.as_str().parse::<Flush>(), Ok(f));
        }
        let err = "fdatasync".parse::<Flush>().unwrap_err();
        assert_eq!(err, "must be \"auto\", \"fsync\" or \"syncfs\", not \"fdatasync\"");
    }

    #[test]
    fn fsync_is_always_allowed_and_small_batches_never_use_syncfs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        let c = choose(Flush::Fsync, dir.as_fd(), "t", 1000, 16).unwrap();
        assert!(!c.syncfs);
        let c = choose(Flush::Auto, dir.as_fd(), "t", SYNCFS_MIN_FILES - 1, 16).unwrap();
        assert!(!c.syncfs, "{c:?}");
    }

    #[test]
    fn forced_syncfs_is_refused_where_it_cannot_be_trusted() {
        // /proc is no file system syncfs is trusted on.
        let proc = std::fs::File::open("/proc/self").unwrap();
        let err = choose(Flush::Syncfs, proc.as_fd(), "t", 10, 16).unwrap_err();
        assert!(matches!(err, Error::FlushUnsupported { .. }), "{err}");
        assert!(err.to_string().contains("--flush syncfs"), "{err}");
        let c = choose(Flush::Auto, proc.as_fd(), "t", 1000, 16).unwrap();
        assert!(!c.syncfs, "{c:?}");
    }
}
