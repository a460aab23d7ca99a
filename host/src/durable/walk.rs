//! Walking a directory on disk through directory fds, never following a
//! link: the reader of CLI sources and of targets to compare against.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::cancel::Cancel;
use super::error::{Error, Result, Step};
use super::resolve::open_file_beneath;
use super::source::Source;
use super::sys::{Kind, join, kind_at, kind_of, open_dir, open_file};
use super::tree::{MODE_MASK, RequestLimits, Tree};

/// One entry met while walking a directory on disk.
pub(crate) struct Seen<'a> {
    /// Path relative to the walked directory.
    pub path: String,
    /// The directory holding it, open while it is visited.
    pub dir: BorrowedFd<'a>,
    /// Its name in `dir`.
    pub name: &'a str,
    /// What it is: the type its directory entry gives (`d_type`), or, on a
    /// file system that gives none, what a `statat` says.
    pub kind: Kind,
    /// A directory's permission bits, from the `fstat` of the fd the walk
    /// enters it through; `0` for anything else. A regular file's mode and
    /// size come from the `fstat` of the fd it is read through
    /// ([`open_stat`]), so a walk costs no `stat` per file.
    pub mode: u32,
}

/// How many levels of a walk keep their directory fd open. A deeper level's
/// fd is closed on the way down and the directory is reopened through `..`
/// on the way back up, checked against the device and inode recorded on the
/// way down; so a walk holds at most this many fds (and one listing) at any
/// depth, and a tree thousands of levels deep cannot exhaust `RLIMIT_NOFILE`
/// (1024 by default) even with a removal running on 16 threads.
pub(crate) const FD_WINDOW: usize = 16;

/// One directory below the root of a [`DirStack`].
struct Level {
    /// Its name in the level above.
    name: String,
    /// Its fd; `None` once it fell out of the [`FD_WINDOW`].
    fd: Option<OwnedFd>,
    /// Its device and inode, to check a reopening through `..`.
    id: (u64, u64),
    /// The length of the stack's path before this level was appended.
    prev_len: usize,
}

/// The chain of directories from a root fd down to the one a walk is in,
/// without recursion: memory grows by one name per level and open fds stay
/// below [`FD_WINDOW`] whatever the depth.
pub(crate) struct DirStack<'r> {
    root: BorrowedFd<'r>,
    root_path: String,
    levels: Vec<Level>,
    /// The shown path of the current directory (`root_path/a/b`).
    path: String,
    /// Where the path relative to the root starts in `path`.
    rel_start: usize,
}

impl<'r> DirStack<'r> {
    /// A stack standing at `root`, shown as `root_path` in messages.
    pub(crate) fn new(root: BorrowedFd<'r>, root_path: &str) -> Self {
        let rel_start = if root_path == "." || root_path.is_empty() { 0 } else { root_path.len() + 1 };
        DirStack {
            root,
            root_path: root_path.to_owned(),
            levels: Vec::new(),
            path: root_path.to_owned(),
            rel_start,
        }
    }

    /// The fd of the current directory.
    pub(crate) fn top(&self) -> BorrowedFd<'_> {
        match self.levels.last() {
            Some(level) => level.fd.as_ref().expect("the current level always holds its fd").as_fd(),
            None => self.root,
        }
    }

    /// How many levels below the root the current directory is.
    pub(crate) fn depth(&self) -> usize {
        self.levels.len()
    }

    /// The current directory's path as shown in messages.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The current directory's path relative to the root (`""` at the root).
    pub(crate) fn rel(&self) -> &str {
        if self.levels.is_empty() { "" } else { &self.path[self.rel_start..] }
    }

    /// The shown path of `name` in the current directory.
    pub(crate) fn child_path(&self, name: &str) -> String {
        join(&self.path, name)
    }

    /// Enter the subdirectory `name` of the current directory (never
    /// through a link); returns its permission bits.
    pub(crate) fn push(&mut self, name: &str) -> Result<u32> {
        let shown = self.child_path(name);
        let fd = open_dir(self.top(), name, &shown)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(Step::Read, &shown, e))?;
        let prev_len = if self.levels.is_empty() { 0 } else { self.path.len() };
        self.path = shown;
        self.levels.push(Level { name: name.to_owned(), fd: Some(fd), id: (st.st_dev, st.st_ino), prev_len });
        // Close the fd that just left the window; `pop` reopens it through `..`.
        if self.levels.len() > FD_WINDOW {
            let out = self.levels.len() - 1 - FD_WINDOW;
            self.levels[out].fd = None;
        }
        Ok(st.st_mode & MODE_MASK)
    }

    /// Leave the current directory for the one above; returns the name of
    /// the directory left. A parent whose fd was closed is reopened through
    /// `..` from the child, and refused unless it is the same directory
    /// (device and inode) the walk went down through: a tree moved during
    /// the walk is an error, never a way out of the root.
    pub(crate) fn pop(&mut self) -> Result<String> {
        let level = self.levels.pop().expect("pop below the root of a walk");
        if level.prev_len == 0 {
            self.path.clone_from(&self.root_path);
        } else {
            self.path.truncate(level.prev_len);
        }
        if let Some(parent) = self.levels.last_mut()
            && parent.fd.is_none()
        {
            let child = level.fd.as_ref().expect("the current level always holds its fd");
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(child, "..", flags, Mode::empty())
                .map_err(|e| Error::io(Step::Open, &self.path, e))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(Step::Read, &self.path, e))?;
            if (st.st_dev, st.st_ino) != parent.id {
                return Err(Error::io(
                    Step::Open,
                    &self.path,
                    std::io::Error::other("the directory was moved during the walk"),
                ));
            }
            parent.fd = Some(fd);
        }
        Ok(level.name)
    }
}

/// Walk `dir` depth first, parents before children, names sorted, without
/// following links. Every entry is visited, durasync's reserved names too:
/// a source holding one is refused by [`Tree`]'s path rules, and a target
/// holding one differs from every tree. `dir_path` is
/// used in messages. Iterative: memory grows with the listings of the
/// directories on the current path, open fds are bounded ([`FD_WINDOW`]).
///
/// The kinds come from the listings (`d_type`, which ext4, xfs, btrfs and
/// tmpfs all give), so the walk itself makes no system call per file: only
/// `getdents` per directory and an `open` + `fstat` per subdirectory it
/// enters. An entry whose type the listing does not give is `statat`ed.
///
/// A directory holding more than `max_listing` entries is refused with
/// [`Error::TooLarge`] as soon as its listing passes that many, so no
/// listing larger than that is ever held.
pub(crate) fn walk(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    max_listing: usize,
    visit: &mut dyn FnMut(&Seen<'_>) -> Result<()>,
) -> Result<()> {
    let mut stack = DirStack::new(dir, dir_path);
    // The entries still to visit in each directory of the path, last first.
    let mut pending = vec![sorted_desc(list_entries(dir, dir_path, max_listing)?)];
    while let Some(entries) = pending.last_mut() {
        let Some(entry) = entries.pop() else {
            pending.pop();
            if !pending.is_empty() {
                stack.pop()?;
            }
            continue;
        };
        let path = join(stack.rel(), &entry.name);
        let kind = entry_kind(stack.top(), &entry, &stack.child_path(&entry.name))?;
        if kind != Kind::Dir {
            visit(&Seen { path, dir: stack.top(), name: &entry.name, kind, mode: 0 })?;
            continue;
        }
        match enter_listed(&mut stack, &entry.name)? {
            Ok(mode) => {
                // Entered already: `dir` is the directory itself, `name` `.`.
                visit(&Seen { path, dir: stack.top(), name: ".", kind, mode })?;
                pending.push(sorted_desc(list_entries(stack.top(), stack.path(), max_listing)?));
            }
            Err(now) => visit(&Seen { path, dir: stack.top(), name: &entry.name, kind: now, mode: 0 })?,
        }
    }
    Ok(())
}

fn sorted_desc(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_unstable_by(|a, b| b.name.cmp(&a.name));
    entries
}

/// A name read from a directory, with the kind its entry gives.
pub(crate) struct Entry {
    pub name: String,
    /// From `d_type`; `None` where the file system does not say
    /// (`DT_UNKNOWN`): ask `statat`.
    pub kind: Option<Kind>,
}

/// Enter `name`, which the listing gave as a directory: `Ok` with its
/// permission bits, or `Err` with what it is now when it was replaced by
/// something else (or removed) since it was listed; then it is visited as
/// that, never followed.
fn enter_listed(stack: &mut DirStack<'_>, name: &str) -> Result<std::result::Result<u32, Kind>> {
    match stack.push(name) {
        Ok(mode) => Ok(Ok(mode)),
        Err(e @ (Error::NotADirectory { .. } | Error::Symlink { .. } | Error::NotFound { .. })) => {
            match kind_at(stack.top(), name, &stack.child_path(name))?.0 {
                Kind::Dir => Err(e),
                now => Ok(Err(now)),
            }
        }
        Err(e) => Err(e),
    }
}

/// What `entry` of `dir` is: what its listing said, or where the file
/// system did not say, what a `statat` says.
fn entry_kind(dir: BorrowedFd<'_>, entry: &Entry, path: &str) -> Result<Kind> {
    match entry.kind {
        Some(kind) => Ok(kind),
        None => Ok(kind_at(dir, &entry.name, path)?.0),
    }
}

/// The entries of a directory, without `.` and `..`; more than `max` is
/// [`Error::TooLarge`]. Names that are not UTF-8 are an error: durasync
/// cannot name them back to the kernel faithfully.
fn list_entries(dir: BorrowedFd<'_>, dir_path: &str, max: usize) -> Result<Vec<Entry>> {
    let entries = read_entries(dir, dir_path, max.saturating_add(1), &mut |name| {
        Err(Error::InvalidPath {
            path: join(dir_path, &String::from_utf8_lossy(name.to_bytes())),
            reason: "names must be valid UTF-8",
        })
    })?;
    if entries.len() > max {
        return Err(Error::TooLarge {
            path: dir_path.to_owned(),
            what: "entries in one directory",
            limit: max as u64,
            actual: entries.len() as u64,
        });
    }
    Ok(entries)
}

/// The most entries one directory of a source can hold: every file and
/// directory a sync may hold.
fn source_listing_max(limits: &RequestLimits) -> usize {
    usize::try_from(limits.max_files.saturating_add(limits.max_dirs)).unwrap_or(usize::MAX)
}

/// The names in a directory, refused with [`Error::TooLarge`] once the directory
/// turns out to hold more than `max` entries (so no listing larger than
/// that is ever built), and with [`Error::Cancelled`] once `cancel` says so.
pub(crate) fn list_names_at_most(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    max: u64,
    cancel: &Cancel<'_>,
) -> Result<Vec<String>> {
    cancel.check(dir_path)?;
    let cap = usize::try_from(max).unwrap_or(usize::MAX).saturating_add(1);
    let names = read_names(dir, dir_path, cap, &mut |name| {
        Err(Error::InvalidPath {
            path: join(dir_path, &String::from_utf8_lossy(name.to_bytes())),
            reason: "names must be valid UTF-8",
        })
    })?;
    cancel.check(dir_path)?;
    if names.len() as u64 > max {
        return Err(Error::TooLarge {
            path: dir_path.to_owned(),
            what: "entries in one listing",
            limit: max,
            actual: names.len() as u64,
        });
    }
    Ok(names)
}

/// The UTF-8 names in a directory, passing over any other: for scans that
/// look only for durasync's own names (leftovers, lock files, markers, all
/// ASCII), so a stray entry with a non-UTF-8 name beside a target never
/// stops an operation or a recovery.
pub(crate) fn list_own_names(dir: BorrowedFd<'_>, dir_path: &str) -> Result<Vec<String>> {
    read_names(dir, dir_path, usize::MAX, &mut |_| Ok(None))
}

/// Up to `max` names of `dir`, without `.` and `..`, in directory order.
/// A name that is not UTF-8 is handed to `other`, which refuses it (an
/// error), passes over it (`None`) or gives the UTF-8 name it now has
/// (`Some`, after renaming it).
pub(crate) fn read_names(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    max: usize,
    other: &mut dyn FnMut(&std::ffi::CStr) -> Result<Option<String>>,
) -> Result<Vec<String>> {
    Ok(read_entries(dir, dir_path, max, other)?.into_iter().map(|e| e.name).collect())
}

/// [`read_names`] with the kind each entry gives.
pub(crate) fn read_entries(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    max: usize,
    other: &mut dyn FnMut(&std::ffi::CStr) -> Result<Option<String>>,
) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let reader = rustix::fs::Dir::read_from(dir).map_err(|e| Error::io(Step::Read, dir_path, e))?;
    for entry in reader {
        let entry = entry.map_err(|e| Error::io(Step::Read, dir_path, e))?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let kind = match entry.file_type() {
            rustix::fs::FileType::Unknown => None,
            known => Some(kind_of(known)),
        };
        match std::str::from_utf8(name.to_bytes()) {
            Ok(s) => out.push(Entry { name: s.to_owned(), kind }),
            Err(_) => out.extend(other(name)?.map(|name| Entry { name, kind })),
        }
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

/// Read a regular file completely, refusing anything else and anything
/// over `max` bytes: its size from `fstat` is checked before any buffer is
/// allocated (a sparse file may claim terabytes), and the bytes actually
/// read are checked again (a file may grow while it is read). `cancel` is
/// checked between reads.
pub(crate) fn read_file_at(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &str,
    max: u64,
    cancel: &Cancel<'_>,
) -> Result<Vec<u8>> {
    let fd: OwnedFd = open_file(dir, name, path)?;
    read_open_file(&fd, path, max, cancel)
}

/// What the `fstat` of an open file says, reduced to what the core needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    pub size: u64,
    pub ino: u64,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
}

/// `fstat` of `fd`.
fn meta_of(fd: &OwnedFd, path: &str) -> Result<Meta> {
    let st = rustix::fs::fstat(fd).map_err(|e| Error::io(Step::Read, path, e))?;
    Ok(Meta {
        kind: kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)),
        mode: st.st_mode & MODE_MASK,
        size: st.st_size as u64,
        ino: st.st_ino,
        nlink: st.st_nlink,
        uid: st.st_uid,
        gid: st.st_gid,
    })
}

/// Open the entry at the checked relative path `rel` beneath `dir` for
/// reading ([`open_file_beneath`]) and `fstat` it: what it is is for the
/// caller to judge.
pub(crate) fn open_stat(dir: BorrowedFd<'_>, rel: &str, path: &str) -> Result<(OwnedFd, Meta)> {
    let fd = open_file_beneath(dir, rel, path)?;
    let meta = meta_of(&fd, path)?;
    Ok((fd, meta))
}

/// [`read_file_at`] of a file already opened for reading.
pub(crate) fn read_open_file(fd: &OwnedFd, path: &str, max: u64, cancel: &Cancel<'_>) -> Result<Vec<u8>> {
    let meta = meta_of(fd, path)?;
    if meta.kind != Kind::File {
        return Err(Error::NotAFile { path: path.to_owned() });
    }
    read_sized(fd, path, meta.size, max, cancel)
}

/// Read the regular file behind `fd`, whose `fstat` gave `size`, refusing
/// more than `max` bytes (before any buffer is allocated when `size` is
/// over it already).
fn read_sized(fd: &OwnedFd, path: &str, size: u64, max: u64, cancel: &Cancel<'_>) -> Result<Vec<u8>> {
    let too_large = |actual: u64| Error::TooLarge {
        path: path.to_owned(),
        what: "bytes in one read",
        limit: max,
        actual,
    };
    if size > max {
        return Err(too_large(size));
    }
    // Read straight into the result, one byte more than `fstat` said: a
    // read that returns fewer bytes than it asked for reached the end of the
    // file, so a file of the size `fstat` gave needs one read, not a second
    // one that returns 0 (the unchanged check reads every source file).
    // Should the file grow meanwhile, the buffer grows in steps of at most
    // 1 MiB, never past `max` + 1.
    let mut buf: Vec<u8> = Vec::with_capacity(size as usize + 1);
    loop {
        cancel.check(path)?;
        if buf.len() == buf.capacity() {
            let room = (buf.len() as u64 + 1).min(1 << 20).min(max + 1 - buf.len() as u64);
            buf.reserve_exact(room as usize);
        }
        match rustix::io::read(fd, rustix::buffer::spare_capacity(&mut buf)) {
            Ok(0) => break,
            Ok(_) if buf.len() as u64 > max => return Err(too_large(buf.len() as u64)),
            Ok(_) if buf.len() as u64 == size && buf.len() < buf.capacity() => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io(Step::Read, path, e)),
        }
    }
    Ok(buf)
}

/// Read the tree at `name` in `parent` (a CLI source): every regular file
/// with its size and mode, every directory with its mode; the bytes stay
/// in the source and are read when a sync compares or stages them
/// ([`Node::Source`](super::tree::Node::Source), see `source.rs`), so the
/// tree holds the names, not the contents. Anything else (a symlink, a
/// fifo, a device) is an error naming it. Limits are enforced as the tree
/// is read: paths, counts and bytes (each file's size from a `statat`
/// through its directory's fd, never following a link) while walking.
pub fn read_tree(parent: BorrowedFd<'_>, name: &str, path: &str, limits: &RequestLimits) -> Result<Tree> {
    match kind_at(parent, name, path)?.0 {
        Kind::Dir => {}
        Kind::Missing => return Err(Error::NotFound { path: path.to_owned() }),
        Kind::Symlink => return Err(Error::Symlink { path: path.to_owned() }),
        _ => return Err(Error::NotADirectory { path: path.to_owned() }),
    }
    let root = open_dir(parent, name, path)?;
    // The walk borrows the root; the tree keeps a second fd of it.
    let mut tree = Tree::from_source(*limits, Source::new(super::resolve::reopen(root.as_fd())?, path));
    walk(root.as_fd(), path, source_listing_max(limits), &mut |seen| {
        let shown = join(path, &seen.path);
        match seen.kind {
            Kind::Dir => tree.add_dir(&seen.path, seen.mode),
            Kind::File => {
                // Its names are checked before anything is asked of the file.
                tree.check_limits(limits)?;
                let st = rustix::fs::statat(seen.dir, seen.name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| super::sys::kind_error(e, &shown, Step::Read))?;
                match kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode as _)) {
                    Kind::File => tree.add_source_file(&seen.path, st.st_size as u64, st.st_mode & MODE_MASK),
                    // Replaced since it was listed.
                    now => Err(unsupported(now, &shown).unwrap_or(Error::NotAFile { path: shown })),
                }
            }
            other => unsupported(other, &shown).map_or(Ok(()), Err),
        }
    })?;
    Ok(tree)
}

/// Why an entry of kind `kind` at `path` cannot be in a source: a link, a
/// fifo, a socket or a device; `None` for a file, a directory or nothing.
fn unsupported(kind: Kind, path: &str) -> Option<Error> {
    match kind {
        Kind::Symlink => Some(Error::UnsupportedEntry { path: path.to_owned(), kind: "symbolic link" }),
        Kind::Other(kind) => Some(Error::UnsupportedEntry { path: path.to_owned(), kind }),
        Kind::File | Kind::Dir | Kind::Missing => None,
    }
}

/// The regular files beneath `dir`, durasync's own entries (its lock file,
/// leftovers and everything in them) left out: what a guardrail counts as a
/// root's files. (The walk still enters a leftover: a staging tree is small
/// next to the root it stages for.)
// Used by the hooks' guardrails and by a revert's report.
pub(crate) fn count_files(dir: BorrowedFd<'_>, dir_path: &str) -> Result<u64> {
    let mut n = 0;
    walk(dir, dir_path, usize::MAX, &mut |seen| {
        // Nothing in a staging tree or another leftover counts either.
        if seen.kind == Kind::File && !super::names::is_reserved_path(&seen.path) {
            n += 1;
        }
        Ok(())
    })?;
    Ok(n)
}

/// What [`for_each_entry`] calls per entry: its path, its mode, and for a
/// regular file an fd to read it through.
pub(crate) type EntryVisit<'v> = dyn FnMut(&str, u32, Option<&OwnedFd>) -> Result<()> + 'v;

/// Every entry beneath `dir`, in walk order (each directory's entries by
/// name), durasync's own entries (its lock file, leftovers and everything
/// in them) left out: a directory as `(path, mode, None)`, a regular file
/// as `(path, mode, Some(fd))` opened for reading beneath `dir`. Anything
/// else (a symlink, a fifo) is an error naming it. What a content digest
/// of a tree is made of: the same bytes, modes and names give the same
/// sequence, wherever the tree lives (staged or swapped in).
///
/// `name` in `parent` may also be one regular file: then it is the one
/// entry `("", mode, Some(fd))`. Missing, it is [`Error::NotFound`].
// Used by the hooks' probation digests only (the `runtime` feature).
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) fn for_each_entry(
    parent: BorrowedFd<'_>,
    name: &str,
    dir_path: &str,
    visit: &mut EntryVisit<'_>,
) -> Result<()> {
    match kind_at(parent, name, dir_path)?.0 {
        Kind::Dir => {}
        Kind::File => {
            let fd = open_file(parent, name, dir_path)?;
            let meta = meta_of(&fd, dir_path)?;
            if meta.kind != Kind::File {
                return Err(Error::NotAFile { path: dir_path.to_owned() });
            }
            return visit("", meta.mode, Some(&fd));
        }
        Kind::Missing => return Err(Error::NotFound { path: dir_path.to_owned() }),
        other => {
            return Err(unsupported(other, dir_path).unwrap_or(Error::NotAFile { path: dir_path.to_owned() }));
        }
    }
    let root = open_dir(parent, name, dir_path)?;
    let dir = root.as_fd();
    walk(dir, dir_path, usize::MAX, &mut |seen| {
        if super::names::is_reserved_path(&seen.path) {
            return Ok(());
        }
        let shown = join(dir_path, &seen.path);
        match seen.kind {
            Kind::Dir => visit(&seen.path, seen.mode, None),
            Kind::File => {
                let (fd, meta) = open_stat(dir, &seen.path, &shown)?;
                if meta.kind != Kind::File {
                    return Err(unsupported(meta.kind, &shown).unwrap_or(Error::NotAFile { path: shown }));
                }
                visit(&seen.path, meta.mode, Some(&fd))
            }
            other => Err(unsupported(other, &shown).unwrap_or(Error::NotAFile { path: shown })),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn seen(root: &std::path::Path) -> Vec<(String, Kind, u32)> {
        let fd = open_dir(rustix::fs::CWD, root.to_str().unwrap(), "root").unwrap();
        let mut out = Vec::new();
        walk(fd.as_fd(), "root", usize::MAX, &mut |s| {
            out.push((s.path.clone(), s.kind, s.mode));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn a_walk_takes_kinds_from_the_listings_and_directory_modes_from_their_fds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::set_permissions(root.join("d"), std::fs::Permissions::from_mode(0o750)).unwrap();
        std::fs::write(root.join("d/f"), b"x").unwrap();
        std::fs::write(root.join("a"), b"y").unwrap();
        symlink("a", root.join("link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(
            seen(root),
            [
                ("a".to_owned(), Kind::File, 0),
                ("d".to_owned(), Kind::Dir, 0o750),
                ("d/f".to_owned(), Kind::File, 0),
                ("fifo".to_owned(), Kind::Other("fifo"), 0),
                ("link".to_owned(), Kind::Symlink, 0),
            ]
        );
    }

    #[test]
    fn a_directory_replaced_after_the_listing_is_visited_as_what_is_there_now() {
        // The walk reads a listing first and enters each directory of it
        // afterwards: `d` is a link by then, and is never followed.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::create_dir(dir.path().join("e")).unwrap();
        std::fs::write(dir.path().join("d/secret"), b"x").unwrap();
        let fd = open_dir(rustix::fs::CWD, dir.path().to_str().unwrap(), "root").unwrap();
        let listed: Vec<_> =
            list_entries(fd.as_fd(), "root", 2).unwrap().into_iter().map(|e| e.kind).collect();
        assert_eq!(listed, [Some(Kind::Dir), Some(Kind::Dir)]);
        std::fs::rename(dir.path().join("d"), dir.path().join("elsewhere")).unwrap();
        symlink("elsewhere", dir.path().join("d")).unwrap();
        std::fs::remove_dir(dir.path().join("e")).unwrap();
        let mut stack = DirStack::new(fd.as_fd(), "root");
        assert_eq!(enter_listed(&mut stack, "d").unwrap(), Err(Kind::Symlink));
        assert_eq!(enter_listed(&mut stack, "e").unwrap(), Err(Kind::Missing));
        assert_eq!(stack.depth(), 0, "nothing was entered");
        std::fs::set_permissions(dir.path().join("elsewhere"), std::fs::Permissions::from_mode(0o711))
            .unwrap();
        assert_eq!(enter_listed(&mut stack, "elsewhere").unwrap(), Ok(0o711));
        assert_eq!(stack.depth(), 1);
    }

    #[test]
    fn an_entry_whose_listing_gives_no_kind_is_statted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        symlink("d", dir.path().join("l")).unwrap();
        let fd = open_dir(rustix::fs::CWD, dir.path().to_str().unwrap(), "root").unwrap();
        let unknown = |name: &str| Entry { name: name.to_owned(), kind: None };
        assert_eq!(entry_kind(fd.as_fd(), &unknown("d"), "d").unwrap(), Kind::Dir);
        assert_eq!(entry_kind(fd.as_fd(), &unknown("l"), "l").unwrap(), Kind::Symlink);
        assert_eq!(entry_kind(fd.as_fd(), &unknown("gone"), "gone").unwrap(), Kind::Missing);
        // A kind the listing gave is taken as it is.
        let listed = Entry { name: "d".to_owned(), kind: Some(Kind::File) };
        assert_eq!(entry_kind(fd.as_fd(), &listed, "d").unwrap(), Kind::File);
    }
}
