//! What durasync needs to know of the file system holding a directory and
//! of the running kernel: the file system's kind (for error messages and
//! the flush choice), whether its unlinks wait for the device, how much
//! other data on its device is dirty, and whether the kernel's `syncfs`
//! reports write-back errors. Everything here only reads (`fstatfs`,
//! `fstat`, `/proc`, `/sys`); nothing here changes anything.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

/// The file system holding a file, from `fstatfs`'s `f_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// ext2, ext3 or ext4 (one magic number for all three).
    Ext4,
    /// xfs.
    Xfs,
    /// btrfs.
    Btrfs,
    /// tmpfs: nothing on it survives a power loss.
    Tmpfs,
    /// NFS.
    Nfs,
    /// overlayfs (a container's root).
    Overlayfs,
    /// CIFS/SMB.
    Cifs,
    /// Any FUSE file system.
    Fuse,
    /// NTFS.
    Ntfs,
    /// vfat.
    Vfat,
    /// ZFS.
    Zfs,
    /// Lustre.
    Lustre,
    /// 9p (a VM's shared folder).
    NineP,
    /// pstore.
    Pstore,
    /// f2fs.
    F2fs,
    /// Any other, by its magic number.
    Other(u64),
}

impl FsKind {
    /// The kind of the file system holding `fd`; `None` when `fstatfs`
    /// fails.
    pub fn of(fd: BorrowedFd<'_>) -> Option<FsKind> {
        rustix::fs::fstatfs(fd).ok().map(|st| FsKind::from_magic(st.f_type as u64))
    }

    /// The kind whose `f_type` magic number is `magic`.
    pub fn from_magic(magic: u64) -> FsKind {
        match magic {
            0xEF53 => FsKind::Ext4,
            0x5846_5342 => FsKind::Xfs,
            0x9123_683E => FsKind::Btrfs,
            0x0102_1994 => FsKind::Tmpfs,
            0x6969 => FsKind::Nfs,
            0x794C_7630 => FsKind::Overlayfs,
            0xFF53_4D42 | 0xFE53_4D42 => FsKind::Cifs,
            0x6573_5546 => FsKind::Fuse,
            0x5346_544E => FsKind::Ntfs,
            0x4d44 => FsKind::Vfat,
            0x2FC1_2FC1 => FsKind::Zfs,
            0x0BD0_0BD0 => FsKind::Lustre,
            0x0102_1997 => FsKind::NineP,
            0x6165_676C => FsKind::Pstore,
            0xF2F5_2010 => FsKind::F2fs,
            other => FsKind::Other(other),
        }
    }

    /// Whether its `syncfs` writes back and commits all data and metadata,
    /// so durasync may trust it with a batch's files: ext4, xfs, btrfs,
    /// and tmpfs (where nothing is durable, and `syncfs` is as much a no-op
    /// as `fsync`). A FUSE file system's `syncfs` may do nothing at all,
    /// NFS's is not known to commit.
    pub fn syncfs_trusted(self) -> bool {
        matches!(self, FsKind::Ext4 | FsKind::Xfs | FsKind::Btrfs | FsKind::Tmpfs)
    }
}

impl fmt::Display for FsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FsKind::Ext4 => "ext2/3/4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
            FsKind::Tmpfs => "tmpfs",
            FsKind::Nfs => "nfs",
            FsKind::Overlayfs => "overlayfs",
            FsKind::Cifs => "cifs/smb",
            FsKind::Fuse => "fuse",
            FsKind::Ntfs => "ntfs",
            FsKind::Vfat => "vfat",
            FsKind::Zfs => "zfs",
            FsKind::Lustre => "lustre",
            FsKind::NineP => "9p",
            FsKind::Pstore => "pstorefs",
            FsKind::F2fs => "f2fs",
            FsKind::Other(magic) => return write!(f, "file system type {magic:#x}"),
        };
        f.write_str(name)
    }
}

/// The name of the file system holding `fd`, for "unsupported" errors.
pub(crate) fn fs_name(fd: BorrowedFd<'_>) -> String {
    FsKind::of(fd).map_or_else(|| "unknown file system".to_owned(), |k| k.to_string())
}

/// Whether an unlink on the file system holding `fd` waits for the device:
/// ext4 mounted with the `discard` option, which issues each freed
/// extent's discard in line. Unlinks from several threads overlap those
/// waits there; everywhere else they only contend for the directory's lock
/// (measured per file system in BENCHMARKS.md, "Removal threads").
pub(crate) fn unlinks_wait_for_discards(fd: BorrowedFd<'_>) -> bool {
    let Ok(st) = rustix::fs::fstat(fd) else { return false };
    FsKind::of(fd) == Some(FsKind::Ext4)
        && read_mountinfo().is_some_and(|info| {
            mount_options(&info, rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev))
                .is_some_and(|opts| opts.split(',').any(|o| o == "discard"))
        })
}

/// The most of `/proc/self/mountinfo` read (a node with thousands of
/// container mounts has a few hundred KiB).
const MAX_MOUNTINFO_BYTES: u64 = 4 << 20;

/// The largest statistics file read (they are a few hundred bytes).
const MAX_STATS_BYTES: u64 = 64 << 10;

/// The text of `/proc/self/mountinfo` (at most [`MAX_MOUNTINFO_BYTES`]).
pub(crate) fn read_mountinfo() -> Option<String> {
    read_small("/proc/self/mountinfo", MAX_MOUNTINFO_BYTES).ok()
}

/// The super-block options (`rw,discard,…`) of the file system whose device
/// is `major:minor`, from the text of `/proc/self/mountinfo` (`ID PARENT
/// MAJ:MIN ROOT POINT OPTIONS [TAGS…] - TYPE SOURCE SUPER_OPTIONS`).
fn mount_options(mountinfo: &str, major: u32, minor: u32) -> Option<&str> {
    let dev = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        (head.split(' ').nth(2)? == dev).then(|| tail.split(' ').nth(2))?
    })
}

/// Whether the running kernel's `syncfs` reports write-back errors (5.8+).
pub(crate) fn kernel_reports_syncfs_errors() -> bool {
    let Ok(release) = read_small("/proc/sys/kernel/osrelease", MAX_STATS_BYTES) else { return false };
    release_at_least(&release, (5, 8))
}

/// Whether a kernel release string (`6.1.0-18-amd64`) is at least `want`.
fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (major, minor) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// Bytes dirty or under write-back that a `syncfs` of the file system
/// holding `dir` would wait for, and where the number came from: the
/// device's write-back statistics when the kernel shows them, else the
/// machine's (an upper bound). `None` when neither can be read.
pub(crate) fn other_dirty(dir: BorrowedFd<'_>) -> Option<(u64, &'static str)> {
    if let Ok(st) = rustix::fs::fstat(dir) {
        let dev = format!("{}:{}", rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        for (base, source) in [
            ("/sys/class/bdi", "the device's write-back statistics"),
            ("/sys/kernel/debug/bdi", "the device's write-back statistics (debugfs)"),
        ] {
            if let Some(bytes) =
                read_small(&format!("{base}/{dev}/stats"), MAX_STATS_BYTES).ok().and_then(|t| bdi_dirty(&t))
            {
                return Some((bytes, source));
            }
        }
    }
    let meminfo = read_small("/proc/meminfo", MAX_STATS_BYTES).ok()?;
    Some((meminfo_dirty(&meminfo)?, "/proc/meminfo, the whole machine"))
}

/// `BdiReclaimable` + `BdiWriteback` (kB) of a bdi `stats` file, in bytes.
fn bdi_dirty(text: &str) -> Option<u64> {
    Some((kb_field(text, "BdiReclaimable:")? + kb_field(text, "BdiWriteback:")?) * 1024)
}

/// `Dirty` + `Writeback` (kB) of `/proc/meminfo`, in bytes.
fn meminfo_dirty(text: &str) -> Option<u64> {
    Some((kb_field(text, "Dirty:")? + kb_field(text, "Writeback:")?) * 1024)
}

/// The number after `key` at the start of a line (`Dirty:   1234 kB`).
fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())?
        .parse()
        .ok()
}

/// A small text file from `/proc` or `/sys`, at most `max` bytes of it.
fn read_small(path: &str, max: u64) -> io::Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(max).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.44-fc-v1045\n", (5, 8)));
        assert!(release_at_least("5.8.0", (5, 8)));
        assert!(!release_at_least("5.7.19-generic", (5, 8)));
        assert!(!release_at_least("4.19.0", (5, 8)));
        assert!(!release_at_least("garbage", (5, 8)));
    }

    #[test]
    fn dirty_bytes_come_from_the_bdi_stats_or_meminfo() {
        let bdi =
            "BdiWriteback:              128 kB\nBdiReclaimable:           2048 kB\nDirtyThresh:  9 kB\n";
        assert_eq!(bdi_dirty(bdi), Some((128 + 2048) * 1024));
        let meminfo = "MemTotal: 1 kB\nDirty:            326392 kB\nWriteback:             8 kB\n";
        assert_eq!(meminfo_dirty(meminfo), Some((326_392 + 8) * 1024));
        assert_eq!(meminfo_dirty("MemTotal: 1 kB\n"), None);
        assert_eq!(bdi_dirty("BdiWriteback: x kB\nBdiReclaimable: 1 kB\n"), None);
    }

    #[test]
    fn mount_options_are_the_super_block_options_of_the_device() {
        let info = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict\n\
                    40 27 7:2 / /mnt/x rw,relatime shared:5 - xfs /dev/loop2 rw,inode64\n\
                    41 27 0:45 / /mnt/b rw - btrfs /dev/loop3 rw,discard=async,subvol=/";
        assert_eq!(mount_options(info, 254, 0), Some("rw,discard,resv_strict"));
        assert_eq!(mount_options(info, 7, 2), Some("rw,inode64"), "optional tags before the separator");
        assert_eq!(mount_options(info, 0, 45), Some("rw,discard=async,subvol=/"));
        assert_eq!(mount_options(info, 8, 1), None);
        assert_eq!(mount_options("garbage without a separator", 254, 0), None);
    }

    #[test]
    fn file_system_kinds_name_themselves_and_only_local_ones_are_trusted_with_syncfs() {
        assert_eq!(FsKind::from_magic(0xEF53).to_string(), "ext2/3/4");
        assert_eq!(FsKind::from_magic(0x6969), FsKind::Nfs);
        assert_eq!(FsKind::from_magic(0x1234).to_string(), "file system type 0x1234");
        assert!(FsKind::Btrfs.syncfs_trusted());
        assert!(!FsKind::Fuse.syncfs_trusted() && !FsKind::Nfs.syncfs_trusted());
    }
}
