//! Comparing an existing directory with a requested [`Tree`]: the
//! unchanged check of every operation and the dry-run plan.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::{Error, Result, Step};
use super::parallel;
use super::resolve::open_file_beneath;
use super::sys::{Kind, join, kind_of};
use super::tree::{Node, RequestLimits, Tree};
use super::walk::walk;

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
/// reading file contents at the first difference (enough to decide
/// "unchanged", and `removed` is still exact); with `full` true every
/// differing path is listed.
pub(crate) fn compare(dir: BorrowedFd<'_>, dir_path: &str, new: &Tree, full: bool) -> Result<Plan> {
    compare_in(dir, dir_path, new, full, None)
}

/// The files of a target a sync may carry into its staging tree instead of
/// rewriting them, by relative path: the inode whose bytes were compared.
pub(crate) type Carry = HashMap<String, u64>;

/// Compare like [`compare`] with `full` (every candidate's bytes are read)
/// and also return the files that may be carried: regular files whose
/// bytes and mode are exactly what `new` wants, owned by this process's
/// user (a rewrite would be, and `protected_hardlinks` refuses linking
/// another user's file) and with one link only (`st_nlink == 1`: an inode
/// someone else linked elsewhere must not become reachable from the new
/// tree, so it is rewritten).
pub(crate) fn compare_carrying(dir: BorrowedFd<'_>, dir_path: &str, new: &Tree) -> Result<(Plan, Carry)> {
    let mut carry = Carry::new();
    let plan = compare_in(dir, dir_path, new, true, Some(&mut carry))?;
    Ok((plan, carry))
}

fn compare_in(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    new: &Tree,
    full: bool,
    carry: Option<&mut Carry>,
) -> Result<Plan> {
    let shown = |p: &str, dir: bool| if dir { format!("{p}/") } else { p.to_owned() };
    let mut plan = Plan { exists: true, ..Plan::default() };
    let mut present = std::collections::HashSet::with_capacity(new.len());
    // Files whose kind, mode and size match: only their bytes can differ.
    let mut candidates: Vec<(&str, &[u8])> = Vec::new();
    let mut differs = false;
    walk(dir, dir_path, &mut |seen| {
        let is_dir = seen.kind == Kind::Dir;
        let Some((path, node)) = new.get_key_value(&seen.path) else {
            plan.removed.push(shown(&seen.path, is_dir));
            differs = true;
            return Ok(());
        };
        present.insert(path);
        let same = match node {
            Node::Dir { mode, .. } => is_dir && seen.mode == *mode,
            Node::File { contents, mode } => {
                let same_meta =
                    seen.kind == Kind::File && seen.mode == *mode && seen.size == contents.len() as u64;
                if same_meta {
                    candidates.push((path, contents.as_slice()));
                }
                same_meta
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
    if full || !differs {
        let (changed, same) = changed_contents(dir, dir_path, &candidates, full)?;
        plan.changed.extend(changed);
        if let Some(carry) = carry {
            let uid = rustix::process::geteuid().as_raw();
            carry.extend(
                same.into_iter().filter(|(_, id)| id.nlink == 1 && id.uid == uid).map(|(p, id)| (p, id.ino)),
            );
        }
    }
    plan.removed.sort();
    plan.changed.sort();
    Ok(plan)
}

/// The candidates whose bytes differ from the file at their path beneath
/// `dir`, and those that hold exactly their bytes with the identity of the
/// file read. With `full` false, stops at the first difference found.
#[allow(clippy::type_complexity)]
fn changed_contents(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    candidates: &[(&str, &[u8])],
    full: bool,
) -> Result<(Vec<String>, Vec<(String, FileId)>)> {
    let threads = parallel::per_file_threads(candidates.len());
    let found = AtomicBool::new(false);
    let changed = std::sync::Mutex::new(Vec::new());
    let same = std::sync::Mutex::new(Vec::new());
    parallel::try_for_each(candidates, threads, |(rel, expected)| {
        if !full && found.load(Ordering::Relaxed) {
            return Ok(());
        }
        match file_match(dir, rel, &join(dir_path, rel), expected)? {
            Some(id) => same.lock().unwrap_or_else(|p| p.into_inner()).push(((*rel).to_owned(), id)),
            None => {
                found.store(true, Ordering::Relaxed);
                changed.lock().unwrap_or_else(|p| p.into_inner()).push((*rel).to_owned());
            }
        }
        Ok(())
    })?;
    Ok((
        changed.into_inner().unwrap_or_else(|p| p.into_inner()),
        same.into_inner().unwrap_or_else(|p| p.into_inner()),
    ))
}

/// Whether the directory `target` holds exactly the tree of the directory
/// `src` (names, kinds, modes and bytes), read side by side: the unchanged
/// check of `durasync sync --from`, which never brings the source into
/// memory (each comparison holds at most two chunks of one file). `true`
/// only when the source is also a tree a sync would accept: every path
/// passes [`Tree`]'s rules and `limits`, with nothing but regular files and
/// directories. `false` means "not shown to be the same", never an error:
/// the caller then reads the source as a [`Tree`] and syncs it, which names
/// any problem.
///
/// Per file: a `statat` on each side (the walks); then, only once every
/// kind, mode and size agrees, an `open`, one read of size + 1 bytes (a
/// short read is the end of a regular file) and a `close` on each side,
/// from several threads for larger trees like [`compare`].
pub(crate) fn same_tree(
    src: BorrowedFd<'_>,
    src_path: &str,
    target: BorrowedFd<'_>,
    target_path: &str,
    limits: &RequestLimits,
) -> bool {
    // The walks stop at the first difference with an error nobody sees.
    let stop = || Error::Cancelled { path: String::new() };
    // 1. The source's shape, checked by the rules a sync applies (a tree of
    // empty files: no byte is read), and what each path must be.
    let mut shape = Tree::with_limits(*limits);
    let mut want: HashMap<String, (Kind, u32, u64)> = HashMap::new();
    let mut bytes = 0u64;
    let shaped = walk(src, src_path, &mut |seen| {
        match seen.kind {
            Kind::Dir => shape.add_dir(&seen.path, seen.mode)?,
            Kind::File => {
                bytes += seen.size;
                if bytes > limits.max_bytes {
                    return Err(stop());
                }
                shape.add_file(&seen.path, Vec::new(), seen.mode)?;
            }
            _ => return Err(stop()),
        }
        want.insert(seen.path.clone(), (seen.kind, seen.mode, seen.size));
        Ok(())
    });
    if shaped.is_err() {
        return false;
    }
    drop(shape);
    // 2. The target's metadata, entry by entry: every entry of the source
    // met, nothing else. The bytes of the first few files are compared
    // right away: a tree whose files all changed (a rotation) is then told
    // apart after one file, not after a walk of the whole target.
    let mut files: Vec<(String, u64)> = Vec::new();
    let mut inline = 0usize;
    let mut met = 0usize;
    let walked = walk(target, target_path, &mut |seen| {
        match want.get(&seen.path) {
            Some(&(Kind::File, mode, size))
                if seen.kind == Kind::File && seen.mode == mode && seen.size == size =>
            {
                if inline < SAME_INLINE {
                    inline += 1;
                    if !same_file(src, target, target_path, &seen.path, size) {
                        return Err(stop());
                    }
                } else {
                    files.push((seen.path.clone(), size));
                }
            }
            Some(&(Kind::Dir, mode, _)) if seen.kind == Kind::Dir && seen.mode == mode => {}
            _ => return Err(stop()),
        }
        met += 1;
        Ok(())
    });
    if walked.is_err() || met != want.len() {
        return false;
    }
    // 3. The bytes, only now that nothing else differs.
    let threads = parallel::per_file_threads(files.len());
    parallel::try_for_each(&files, threads, |(rel, size)| {
        if same_file(src, target, target_path, rel, *size) { Ok(()) } else { Err(stop()) }
    })
    .is_ok()
}

/// Whether the regular files at `rel` beneath `src` and `target` both hold
/// exactly `size` bytes, the same ones ([`same_bytes`]); a file that cannot
/// be opened is "not the same".
fn same_file(src: BorrowedFd<'_>, target: BorrowedFd<'_>, target_path: &str, rel: &str, size: u64) -> bool {
    let shown = join(target_path, rel);
    match (open_file_beneath(src, rel, &shown), open_file_beneath(target, rel, &shown)) {
        (Ok(ours), Ok(theirs)) => same_bytes(&ours, &theirs, size),
        _ => false,
    }
}

/// How many files [`same_tree`] compares while it walks the target, before
/// it leaves the rest to the threads.
const SAME_INLINE: usize = 8;

/// The largest read [`same_bytes`] makes.
const SAME_CHUNK: u64 = 1 << 20;

/// Whether the files behind `a` and `b` both hold exactly `size` bytes,
/// the same ones: chunks of at most [`SAME_CHUNK`] read from each side,
/// the last asking one byte more than is left, so that on a regular file
/// (whose reads come back short only at its end) one read per side tells
/// the size too. A read short anywhere else, an error, or a file that is not
/// regular (opened `O_NONBLOCK`) is "not the same".
fn same_bytes(a: &OwnedFd, b: &OwnedFd, size: u64) -> bool {
    let len = size.min(SAME_CHUNK) as usize + 1;
    let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
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

/// Who a file that compared equal is: its inode, link count and owner, from
/// the `fstat` of the fd its bytes were read through.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileId {
    ino: u64,
    nlink: u64,
    uid: u32,
}

/// Whether the regular file at `rel` beneath `dir` holds exactly
/// `expected`: open, `fstat` (still a regular file of that size), one read
/// of that size, close.
pub fn file_holds(dir: BorrowedFd<'_>, rel: &str, path: &str, expected: &[u8]) -> Result<bool> {
    Ok(file_match(dir, rel, path, expected)?.is_some())
}

/// [`file_holds`], returning who the file is when it holds `expected`.
fn file_match(dir: BorrowedFd<'_>, rel: &str, path: &str, expected: &[u8]) -> Result<Option<FileId>> {
    let fd = open_file_beneath(dir, rel, path)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(Step::Read, path, e))?;
    if kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)) != Kind::File
        || st.st_size as u64 != expected.len() as u64
    {
        return Ok(None);
    }
    let id = FileId { ino: st.st_ino, nlink: st.st_nlink, uid: st.st_uid };
    let mut buf = vec![0u8; expected.len()];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::io::read(&fd, &mut buf[filled..]) {
            // Shorter than fstat said: truncated meanwhile, so not equal.
            Ok(0) => return Ok(None),
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io(Step::Read, path, e)),
        }
    }
    Ok((buf == expected).then_some(id))
}
