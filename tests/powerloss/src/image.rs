//! The volatile image: one disk image whose writes live in memory until a
//! flush persists them to the backing file, and a power switch that drops
//! every unpersisted write and fails every later request.
//!
//! This is the device model the power-loss lab cuts: what a disk with a
//! volatile write cache promises, and nothing more. A write is acknowledged
//! once it is in the cache (here: a map of dirty pages); only a flush
//! (`fsync` of the served file, which a loop device issues for every
//! `REQ_PREFLUSH`/FUA the file system above it sends) makes earlier writes
//! survive a cut. A cut may optionally persist a random subset of the dirty
//! pages first (a cache that had written some of its pages back, in any
//! order, before it died): the file systems must survive that too, because
//! real devices do it.
//!
//! The backing file is never fsynced: the simulated power cut drops the
//! cache, not the host's page cache, so what reached the backing file is
//! what the "platter" holds.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The cache granule: a 4 KiB page, the block size of every file system the
/// lab formats, so a torn cut never splits one of their blocks.
pub const PAGE: u64 = 4096;

/// Why a request to the image failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The power has been cut: every request fails from then on, as a dead
    /// disk's would.
    #[error("the power is cut: the image answers every request with EIO")]
    PowerCut,
    /// A request past the end of the image (the image never grows).
    #[error("request for bytes {offset}..{end} is past the end of the {size}-byte image")]
    OutOfRange {
        /// First byte asked for.
        offset: u64,
        /// One past the last byte asked for.
        end: u64,
        /// The image's size.
        size: u64,
    },
    /// Reading or writing the backing file failed.
    #[error("backing file: {0}")]
    Backing(#[from] std::io::Error),
}

/// When the power goes off by itself (besides [`VolatileImage::cut`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutPlan {
    /// Only when told.
    Never,
    /// When the n-th write since arming arrives: that write and every
    /// unpersisted one before it are dropped (n ≥ 1).
    AtWrite(u64),
    /// Right after the n-th flush since arming has persisted and been
    /// acknowledged: whatever the file system writes next is lost (n ≥ 1).
    AfterFlush(u64),
}

/// What a cut does with the unpersisted pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Every unpersisted write is dropped.
    DropAll,
    /// A pseudo-random subset (chosen by the seed, about half) of the dirty
    /// pages is persisted first, the rest dropped: a write cache that had
    /// written back some pages, in no particular order, when it died.
    Tear(u64),
}

/// Counts since the image was opened (or last armed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Writes acknowledged since arming.
    pub writes: u64,
    /// Flushes persisted since arming.
    pub flushes: u64,
    /// Whether the power is cut.
    pub cut: bool,
    /// Dirty pages dropped by the cut (0 before it).
    pub dropped_pages: u64,
    /// Dirty pages a torn cut persisted (0 before it, or for `DropAll`).
    pub torn_pages: u64,
}

/// One image file: the backing file holds what is persisted, `dirty` what
/// is only in the volatile cache. The cache is bounded by the image: at
/// most one page per page of the (fixed-size) image.
#[derive(Debug)]
pub struct VolatileImage {
    backing: File,
    size: u64,
    dirty: BTreeMap<u64, Box<[u8]>>,
    plan: CutPlan,
    mode: CutMode,
    stats: Stats,
}

impl VolatileImage {
    /// Serve `backing` (its current length is the image's size, fixed).
    pub fn new(backing: File) -> Result<Self, Error> {
        let size = backing.metadata()?.len();
        Ok(Self {
            backing,
            size,
            dirty: BTreeMap::new(),
            plan: CutPlan::Never,
            mode: CutMode::DropAll,
            stats: Stats::default(),
        })
    }

    /// The image's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Counts so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Arm a cut: reset the write and flush counts and cut by `plan` in
    /// `mode`. Arming a cut image changes nothing (the power stays off).
    pub fn arm(&mut self, plan: CutPlan, mode: CutMode) {
        if self.stats.cut {
            return;
        }
        self.plan = plan;
        self.mode = mode;
        self.stats.writes = 0;
        self.stats.flushes = 0;
    }

    /// Cut the power now (idempotent): drop (or tear) every unpersisted
    /// write; every later request fails with [`Error::PowerCut`].
    pub fn cut(&mut self) -> Result<(), Error> {
        if self.stats.cut {
            return Ok(());
        }
        self.stats.cut = true;
        let dirty = std::mem::take(&mut self.dirty);
        let mut state = match self.mode {
            CutMode::DropAll => None,
            CutMode::Tear(seed) => Some(seed | 1),
        };
        for (page, bytes) in dirty {
            let keep = match state.as_mut() {
                None => false,
                Some(s) => xorshift(s) & 1 == 1,
            };
            if keep {
                self.backing.write_all_at(&bytes, page * PAGE)?;
                self.stats.torn_pages += 1;
            } else {
                self.stats.dropped_pages += 1;
            }
        }
        Ok(())
    }

    /// Read `len` bytes at `offset`: the cached page where there is one,
    /// the backing file elsewhere. Reads are clipped at the end of the
    /// image, as a file's are.
    pub fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
        self.powered()?;
        let end = offset.saturating_add(len).min(self.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            let page = pos / PAGE;
            let in_page = pos % PAGE;
            let take = (PAGE - in_page).min(end - pos);
            match self.dirty.get(&page) {
                Some(bytes) => out.extend_from_slice(&bytes[in_page as usize..(in_page + take) as usize]),
                None => {
                    let start = out.len();
                    out.resize(start + take as usize, 0);
                    self.backing.read_exact_at(&mut out[start..], pos)?;
                }
            }
            pos += take;
        }
        Ok(out)
    }

    /// Write `data` at `offset` into the cache (nothing reaches the backing
    /// file until a flush). Counts toward [`CutPlan::AtWrite`], which cuts
    /// before this write is taken.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.powered()?;
        let end = offset.saturating_add(data.len() as u64);
        if end > self.size {
            return Err(Error::OutOfRange { offset, end, size: self.size });
        }
        self.stats.writes += 1;
        if self.plan == CutPlan::AtWrite(self.stats.writes) {
            self.cut()?;
            return Err(Error::PowerCut);
        }
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let page = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let take = (PAGE as usize - in_page).min(rest.len());
            if !self.dirty.contains_key(&page) {
                let mut bytes = vec![0u8; PAGE as usize].into_boxed_slice();
                // A whole-page write needs no old bytes; a partial one keeps
                // the rest of the page as persisted. The last page of an
                // image whose size is not a multiple of PAGE reads short.
                if take < PAGE as usize {
                    let valid = (self.size - page * PAGE).min(PAGE) as usize;
                    self.backing.read_exact_at(&mut bytes[..valid], page * PAGE)?;
                }
                self.dirty.insert(page, bytes);
            }
            let bytes = self.dirty.get_mut(&page).expect("inserted above");
            bytes[in_page..in_page + take].copy_from_slice(&rest[..take]);
            pos += take as u64;
            rest = &rest[take..];
        }
        Ok(())
    }

    /// Persist every cached page to the backing file (a flush). Counts
    /// toward [`CutPlan::AfterFlush`], which cuts once this flush has
    /// persisted, so the flush itself still succeeds.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.powered()?;
        // Ordering: pages are written in offset order, all before the flush
        // is acknowledged; a cut can only come after (same lock).
        for (page, bytes) in std::mem::take(&mut self.dirty) {
            let valid = (self.size - page * PAGE).min(PAGE) as usize;
            self.backing.write_all_at(&bytes[..valid], page * PAGE)?;
        }
        self.stats.flushes += 1;
        if self.plan == CutPlan::AfterFlush(self.stats.flushes) {
            self.cut()?;
        }
        Ok(())
    }

    /// Pages in the cache, not yet persisted.
    pub fn dirty_pages(&self) -> usize {
        self.dirty.len()
    }

    fn powered(&self) -> Result<(), Error> {
        if self.stats.cut { Err(Error::PowerCut) } else { Ok(()) }
    }
}

/// A small deterministic generator (xorshift64): which pages a torn cut
/// keeps must be reproducible from the round's seed.
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(size: usize) -> (tempfile::NamedTempFile, VolatileImage) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), vec![b'.'; size]).unwrap();
        let img =
            VolatileImage::new(File::options().read(true).write(true).open(file.path()).unwrap()).unwrap();
        (file, img)
    }

    fn on_disk(file: &tempfile::NamedTempFile) -> Vec<u8> {
        std::fs::read(file.path()).unwrap()
    }

    #[test]
    fn writes_are_read_back_but_reach_the_backing_file_only_at_a_flush() {
        let (file, mut img) = image(3 * PAGE as usize);
        img.write(PAGE - 2, b"abcd").unwrap();
        assert_eq!(img.read(PAGE - 3, 6).unwrap(), b".abcd.");
        assert_eq!(on_disk(&file), vec![b'.'; 3 * PAGE as usize], "nothing persisted before the flush");
        img.flush().unwrap();
        let disk = on_disk(&file);
        assert_eq!(&disk[PAGE as usize - 3..PAGE as usize + 3], b".abcd.");
        assert_eq!(img.dirty_pages(), 0);
    }

    #[test]
    fn a_cut_drops_every_unpersisted_write_and_fails_every_later_request() {
        let (file, mut img) = image(2 * PAGE as usize);
        img.write(0, b"kept").unwrap();
        img.flush().unwrap();
        img.write(4, b"lost").unwrap();
        img.write(PAGE, b"lost too").unwrap();
        img.cut().unwrap();
        let disk = on_disk(&file);
        assert_eq!(&disk[..8], b"kept....");
        assert_eq!(&disk[PAGE as usize..PAGE as usize + 8], b"........");
        assert_eq!(img.stats().dropped_pages, 2);
        assert!(matches!(img.read(0, 1), Err(Error::PowerCut)));
        assert!(matches!(img.write(0, b"x"), Err(Error::PowerCut)));
        assert!(matches!(img.flush(), Err(Error::PowerCut)));
        assert_eq!(on_disk(&file), disk, "nothing changes after the cut");
    }

    #[test]
    fn a_cut_after_the_nth_flush_persists_that_flush_and_acknowledges_it() {
        let (file, mut img) = image(PAGE as usize);
        img.arm(CutPlan::AfterFlush(2), CutMode::DropAll);
        img.write(0, b"1").unwrap();
        img.flush().unwrap();
        img.write(1, b"2").unwrap();
        img.flush().expect("the second flush persists and is acknowledged");
        assert!(img.stats().cut);
        assert!(matches!(img.write(2, b"3"), Err(Error::PowerCut)));
        assert_eq!(&on_disk(&file)[..3], b"12.");
    }

    #[test]
    fn a_cut_at_the_nth_write_drops_it_and_everything_unflushed_before_it() {
        let (file, mut img) = image(PAGE as usize);
        img.write(0, b"a").unwrap();
        img.flush().unwrap();
        img.arm(CutPlan::AtWrite(3), CutMode::DropAll);
        img.write(1, b"b").unwrap();
        img.write(2, b"c").unwrap();
        assert!(matches!(img.write(3, b"d"), Err(Error::PowerCut)));
        assert_eq!(&on_disk(&file)[..4], b"a...");
        assert_eq!(img.stats().writes, 3);
    }

    #[test]
    fn a_torn_cut_persists_some_whole_pages_and_drops_the_others() {
        let pages = 64;
        let (file, mut img) = image(pages * PAGE as usize);
        img.arm(CutPlan::Never, CutMode::Tear(7));
        for p in 0..pages as u64 {
            img.write(p * PAGE, &vec![b'x'; PAGE as usize]).unwrap();
        }
        img.cut().unwrap();
        let s = img.stats();
        assert_eq!(s.torn_pages + s.dropped_pages, pages as u64);
        assert!(s.torn_pages > 0 && s.dropped_pages > 0, "{s:?}");
        let disk = on_disk(&file);
        for chunk in disk.chunks(PAGE as usize) {
            assert!(chunk.iter().all(|&b| b == b'x') || chunk.iter().all(|&b| b == b'.'), "a page was split");
        }
        let kept = disk.chunks(PAGE as usize).filter(|c| c[0] == b'x').count() as u64;
        assert_eq!(kept, s.torn_pages);
    }

    #[test]
    fn a_request_past_the_end_is_refused_and_reads_are_clipped() {
        let (_file, mut img) = image(PAGE as usize + 10);
        assert!(matches!(img.write(PAGE + 8, b"abc"), Err(Error::OutOfRange { .. })));
        img.write(PAGE + 8, b"ab").unwrap();
        assert_eq!(img.read(PAGE + 7, 100).unwrap(), b".ab");
        img.flush().unwrap();
        assert_eq!(img.size(), PAGE + 10);
    }
}
