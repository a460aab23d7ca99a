//! Comparing an existing directory with a requested [`Tree`]: the
//! unchanged check of every operation and the dry-run plan.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::attrs::Attrs;
use super::error::{Error, Result, Step};
use super::parallel;
use super::source::Bytes;
use super::sys::{Kind, join};
use super::tree::{Node, Tree};
use super::walk::{Meta, open_stat, walk};

/// How an existing directory differs from a requested tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Whether the target exists now.
    pub exists: bool,
    /// Paths the new tree adds (directories end in `/`).
    pub added: Vec<String>,
    /// Paths in both whose bytes, mode or kind differ.
    pub changed: Vec<String>,
    /// Paths the new tree no longer holds (directories end in `/`).
    pub removed: Vec<String>,
}

impl Plan {
    /// Whether the target already holds exactly the requested tree.
    pub fn is_unchanged(&self) -> bool {
        self.exists && self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// The plan for a target that does not exist yet: every path is added.
    pub fn creating(tree: &Tree) -> Plan {
        let added = tree
            .iter()
            .map(
                |(path, node)| {
                    if matches!(node, Node::Dir { .. }) { format!("{path}/") } else { path.to_owned() }
                },
            )
            .collect();
        Plan { added, ..Plan::default() }
    }

    /// How many regular files of the old tree the new one no longer holds.
    pub fn removed_files(&self) -> u32 {
        self.removed.iter().filter(|p| !p.ends_with('/')).count() as u32
    }
}

/// Compare the existing directory `dir` with `new`. With `full` false, stops
/// opening files at the first difference (enough to decide "unchanged";
/// `added` and `removed` are still exact, `changed` may miss files); with
/// `full` true every differing path is listed.
///
/// A regular file whose owner or group is not what a fixed rule of `attrs`
/// asks for is changed (a sync rewrites it with the right ones).
pub(crate) fn compare(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    new: &Tree,
    full: bool,
    attrs: &Attrs,
) -> Result<Plan> {
    compare_in(dir, dir_path, new, full, attrs, None)
}

/// The files of a target a sync may carry into its staging tree instead of
/// rewriting them, by relative path: the inode whose bytes were compared.
pub(crate) type Carry = HashMap<String, u64>;

/// Compare like [`compare`] with `full` and also return the files that may
/// be carried (every candidate's bytes are read, unless a sample shows the
/// tree was rewritten, see [`skip_rewritten`]: `changed` then names files
/// that were not read): regular files whose
/// bytes and mode are exactly what `new` wants, with the owner and group a
/// rewrite would give them under `attrs` (by default this process's user:
/// `protected_hardlinks` also refuses linking another user's file, see
/// [`Attrs::owner_fits`]) and with one link only (`st_nlink == 1`: an inode
/// someone else linked elsewhere must not become reachable from the new
/// tree, so it is rewritten).
pub(crate) fn compare_carrying(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    new: &Tree,
    attrs: &Attrs,
) -> Result<(Plan, Carry)> {
    let mut carry = Carry::new();
    let plan = compare_in(dir, dir_path, new, true, attrs, Some(&mut carry))?;
    Ok((plan, carry))
}

fn compare_in(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    new: &Tree,
    full: bool,
    attrs: &Attrs,
    carry: Option<&mut Carry>,
) -> Result<Plan> {
    let shown = |p: &str, dir: bool| if dir { format!("{p}/") } else { p.to_owned() };
    let mut plan = Plan { exists: true, ..Plan::default() };
    let mut present = std::collections::HashSet::with_capacity(new.len());
    // Files in both: their mode, size and bytes are compared once opened.
    let mut candidates: Vec<(&str, Bytes<'_>, u32)> = Vec::new();
    let mut differs = false;
    // A target's listings are not limited: whatever it holds, a sync
    // replaces it (and its removal reads it in batches).
    walk(dir, dir_path, usize::MAX, &mut |seen| {
        let is_dir = seen.kind == Kind::Dir;
        let Some((path, node)) = new.get_key_value(&seen.path) else {
            plan.removed.push(shown(&seen.path, is_dir));
            differs = true;
            return Ok(());
        };
        present.insert(path);
        let same = match new.file(node) {
            None => is_dir && matches!(node, Node::Dir { mode, .. } if seen.mode == *mode),
            Some((bytes, mode)) => {
                let file = seen.kind == Kind::File;
                if file {
                    candidates.push((path, bytes, mode));
                }
                file
            }
        };
        if !same {
            plan.changed.push(shown(&seen.path, matches!(node, Node::Dir { .. })));
            differs = true;
        }
        Ok(())
    })?;
    for (path, node) in new.iter() {
        if !present.contains(path) {
            plan.added.push(shown(path, matches!(node, Node::Dir { .. })));
        }
    }
    if carry.is_some() {
        plan.changed.extend(skip_rewritten(dir, dir_path, &mut candidates)?);
    }
    if full || !differs {
        let (changed, carried) = changed_contents(dir, dir_path, &candidates, full, attrs, carry.is_some())?;
        plan.changed.extend(changed);
        if let Some(carry) = carry {
            carry.reserve(carried.len());
            carry.extend(carried);
        }
    }
    plan.removed.sort();
    plan.changed.sort();
    Ok(plan)
}

/// A sync compares a sample of its small candidates first once it has at
/// least this many.
const SAMPLE_FROM: usize = 64;

/// How many small candidates, spread evenly over the tree, are sampled.
const SAMPLE: usize = 16;

/// Candidates up to this size are small: reading one to compare it costs
/// about what writing it afresh costs (an `open`, one read and a `close`
/// against a `create`, one write and a `close`, and a page of write-back).
const SMALL: usize = 64 << 10;

/// When a sync's tree was rewritten (a rotation: every file has new
/// bytes), comparing each file only to find it changed is wasted work that
/// costs about as much as writing it. So once there are [`SAMPLE_FROM`]
/// small candidates, [`SAMPLE`] of them spread evenly over the tree are
/// compared first; when every one of those differs, all small candidates
/// are taken out of `candidates` and returned as changed, to be written
/// afresh without being read. Anything else (one sampled file the same)
/// leaves `candidates` alone, and every file is compared as usual.
///
/// Only what a sync carries is affected, never a result: a file that is
/// in fact unchanged is then written into a fresh inode instead of being
/// linked, as a marked target's files always are. Were a fraction `p` of
/// the small files unchanged and spread at random, all sampled ones would
/// differ with probability `(1 - p)^16` (under 3 % for `p` = 0.2); a
/// layout with every unchanged file between the sampled ones (a test
/// builds one on purpose) is rewritten whole: slower, never wrong. The
/// one-file path and the unchanged answer are never taken on a skipped
/// compare: 16 files differ. Larger files are always compared (rewriting
/// one writes all its bytes back to the disk).
fn skip_rewritten(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    candidates: &mut Vec<(&str, Bytes<'_>, u32)>,
) -> Result<Vec<String>> {
    let small: Vec<usize> =
        (0..candidates.len()).filter(|&i| candidates[i].1.len() <= SMALL as u64).collect();
    if small.len() < SAMPLE_FROM {
        return Ok(Vec::new());
    }
    for k in 0..SAMPLE {
        let (rel, expected, mode) = candidates[small[k * small.len() / SAMPLE]];
        if file_match(dir, rel, &join(dir_path, rel), expected, Some(mode))?.is_some() {
            return Ok(Vec::new());
        }
    }
    let mut skipped = Vec::with_capacity(small.len());
    candidates.retain(|(rel, expected, _)| {
        let is_small = expected.len() <= SMALL as u64;
        if is_small {
            skipped.push((*rel).to_owned());
        }
        !is_small
    });
    Ok(skipped)
}

/// The candidates whose mode, size or bytes differ from the file at their
/// path beneath `dir`, with those whose bytes and mode match but whose
/// owner or group is not what a fixed rule of `attrs` asks for (a sync
/// rewrites them); and, with `carrying`, the files a sync may carry (see
/// [`compare_carrying`]) with the inode read. With `full` false, stops at
/// the first difference found.
#[allow(clippy::type_complexity)]
fn changed_contents(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    candidates: &[(&str, Bytes<'_>, u32)],
    full: bool,
    attrs: &Attrs,
    carrying: bool,
) -> Result<(Vec<String>, Vec<(String, u64)>)> {
    let threads = parallel::per_file_threads(candidates.len());
    let found = AtomicBool::new(false);
    let changed = std::sync::Mutex::new(Vec::new());
    let carry = std::sync::Mutex::new(Vec::new());
    parallel::try_for_each(candidates, threads, |(rel, expected, mode)| {
        if !full && found.load(Ordering::Relaxed) {
            return Ok(());
        }
        match file_match(dir, rel, &join(dir_path, rel), *expected, Some(*mode))? {
            // Right bytes and mode, wrong owner for a fixed rule: rewritten.
            Some(meta) if attrs.owner_differs(meta.uid, meta.gid) => {
                changed.lock().unwrap_or_else(|p| p.into_inner()).push((*rel).to_owned());
            }
            Some(meta) => {
                if carrying && meta.nlink == 1 && attrs.owner_fits(meta.uid, meta.gid) {
                    carry.lock().unwrap_or_else(|p| p.into_inner()).push(((*rel).to_owned(), meta.ino));
                }
            }
            None => {
                found.store(true, Ordering::Relaxed);
                changed.lock().unwrap_or_else(|p| p.into_inner()).push((*rel).to_owned());
            }
        }
        Ok(())
    })?;
    Ok((
        changed.into_inner().unwrap_or_else(|p| p.into_inner()),
        carry.into_inner().unwrap_or_else(|p| p.into_inner()),
    ))
}

/// The largest read a comparison makes.
const SAME_CHUNK: u64 = 1 << 20;

thread_local! {
    /// Each thread's two comparison buffers, kept across files (at most
    /// [`SAME_CHUNK`] + 1 bytes each): a buffer allocated per file costs
    /// its page faults (and, in a thread's own malloc arena, an
    /// `mprotect`) every time.
    static BUFS: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Grow a [`BUFS`] buffer to at least `len` bytes.
fn at_least(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// Whether the files behind `a` and `b` both hold exactly `size` bytes,
/// the same ones: chunks of at most [`SAME_CHUNK`] read from each side,
/// the last asking one byte more than is left, so that on a regular file
/// (whose reads come back short only at its end) one read per side tells
/// the size too. A read short anywhere else, an error, or a file that is not
/// regular (opened `O_NONBLOCK`) is "not the same".
fn same_bytes(a: &OwnedFd, b: &OwnedFd, size: u64) -> bool {
    BUFS.with_borrow_mut(|(x, y)| {
        let len = size.min(SAME_CHUNK) as usize + 1;
        at_least(x, len);
        at_least(y, len);
        let mut left = size;
        loop {
            let last = left <= SAME_CHUNK;
            let want = if last { left as usize + 1 } else { SAME_CHUNK as usize };
            let (Some(n), Some(m)) = (read_once(a, &mut x[..want]), read_once(b, &mut y[..want])) else {
                return false;
            };
            let expect = if last { left as usize } else { want };
            if n != expect || m != expect || x[..n] != y[..n] {
                return false;
            }
            if last {
                return true;
            }
            left -= SAME_CHUNK;
        }
    })
}

/// One `read` into `buf` (again only when interrupted); `None` on an error.
fn read_once(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(n) => return Some(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

/// Whether the regular file at `rel` beneath `dir` holds exactly
/// `expected`: open, `fstat` (still a regular file of that size), one read
/// of that size, close.
pub fn file_holds(dir: BorrowedFd<'_>, rel: &str, path: &str, expected: &[u8]) -> Result<bool> {
    Ok(file_match(dir, rel, path, Bytes::Held(expected), None)?.is_some())
}

/// [`file_holds`] for the bytes of a tree's file (in memory, or read from
/// its source beside the target's, chunk by chunk), also requiring the
/// permission bits `mode` when given; returns what the `fstat` of the file
/// read says when it holds them.
fn file_match(
    dir: BorrowedFd<'_>,
    rel: &str,
    path: &str,
    expected: Bytes<'_>,
    mode: Option<u32>,
) -> Result<Option<Meta>> {
    let (fd, meta) = open_stat(dir, rel, path)?;
    if meta.kind != Kind::File || meta.size != expected.len() || mode.is_some_and(|m| m != meta.mode) {
        return Ok(None);
    }
    let same = match expected {
        Bytes::Held(expected) => holds_bytes(&fd, path, expected)?,
        // A source file that cannot be opened, or no longer has the size
        // the walk saw, is "not the same": staging it names the problem.
        Bytes::Source(source, size) => source.open(rel, size).is_ok_and(|src| same_bytes(&src, &fd, size)),
    };
    Ok(same.then_some(meta))
}

/// Whether the file behind `fd` starts with exactly `expected`, read in
/// chunks of at most [`SAME_CHUNK`] into this thread's buffer (a file
/// shorter than that, truncated meanwhile, does not).
fn holds_bytes(fd: &OwnedFd, path: &str, expected: &[u8]) -> Result<bool> {
    BUFS.with_borrow_mut(|(buf, _)| {
        at_least(buf, expected.len().min(SAME_CHUNK as usize));
        for want in expected.chunks(SAME_CHUNK as usize) {
            let mut filled = 0;
            while filled < want.len() {
                match rustix::io::read(fd, &mut buf[filled..want.len()]) {
                    Ok(0) => return Ok(false),
                    Ok(n) => filled += n,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(Error::io(Step::Read, path, e)),
                }
            }
            if buf[..want.len()] != *want {
                return Ok(false);
            }
        }
        Ok(true)
    })
}
