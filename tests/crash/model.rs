//! The weak persistence model the crash explorer replays traces into.
//!
//! Deliberately weaker than any real file system:
//! - a file's data and metadata (mode, owner, group, extended attributes)
//!   are durable only after fsync of that file; until then a crash may bring
//!   back its durable version or any later version (data and metadata chosen
//!   independently; the metadata as it was after some `chmod`, `chown` or
//!   `setxattr`), and a file created since its last fsync comes back with its
//!   durable contents — empty — and its creation mode, the process's owner
//!   and group and no extended attributes;
//! - a directory's entries (and its metadata, as for a file) are durable
//!   only after fsync of that
//!   directory; until then a crash keeps its last-fsynced entries plus **any
//!   subset** of the later changes, applied in their order (subsets, not just
//!   prefixes: no ordering between changes of one directory is assumed, which
//!   is weaker than a journal). Every subset is covered, however many
//!   changes are pending (see [`Model::entry_choices`] for how, without
//!   enumerating 2^k subsets);
//! - a file whose data was never fsynced may come back empty, as any prefix
//!   of what was written (a few are enumerated: empty, half, all but the
//!   last byte) or zero-filled at its size (the size reached the disk, the
//!   data did not);
//! - a rename or an exchange is one change of its directory: all of it or
//!   none of it; it too is durable only once its directory is fsynced; a
//!   rename across directories is one change of each, independently;
//! - a `syncfs` is an fsync of every inode; a failed one is a failed fsync
//!   of every inode with pending changes (which of them the kernel dropped
//!   is unknown, so all of them may be lost, for good);
//! - a failed fsync ("fsyncgate") persists nothing of that inode's pending
//!   changes, and they never will be: the running system still sees them,
//!   but a later fsync of the inode succeeds without persisting them (only
//!   changes made after the failure);
//! - the model tracks inodes, so an exchange moves whole subtrees and an
//!   fsync through an fd reaches the inode it was opened on, wherever that
//!   inode is named now;
//! - a hard link (`linkat`, an unchanged file carried into staging) is one
//!   more entry for an existing inode: a change of the new name's directory,
//!   durable only once that directory is fsynced. Both names show the
//!   inode's states. Link counts are not modelled: the model assumes the
//!   count persists with the entry (a journaled file system; on ext4
//!   without a journal `e2fsck` repairs it after a crash, see docs/guarantees.md,
//!   "What is outside the promise").
//!
//! - a kept previous (`durasync::durable::previous`) is valid when its
//!   entry's own inode is the one its name states; the model tracks which
//!   inode each keep name was made for (the target's, when the keep-sync
//!   created its staging) and shows keep entries under canonical names
//!   ([`canonical_keeps`]): valid ones `.durasync-keep.1.<t>` (`2`, … if
//!   more), stale ones `.durasync-keep.18446744073709551615.<t>` (counting
//!   down). [`materialise`] gives a valid one its real inode's name and
//!   [`snapshot`] maps real names back, so a materialised state keeps its
//!   valid previouses valid for the real recovery.
//!
//! Recorded operations name paths; [`lower`] resolves each one, in trace
//! order, to the inodes it touched, so a reordered trace (a mutation) still
//! fsyncs the inode the real code's fd referred to.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::rc::Rc;

use durasync::durable::names::{LOCK_NAME, keep_name, parse_keep};
use rustix::fs::XattrFlags;

use crate::trace::ROp;

/// Most states one inode's subtree (or one directory's entry sets) may
/// contribute at one crash point; above it an even sample is kept, reported
/// as `capped`, and every exploration asserts that nothing was capped: the
/// scenarios stay below, so every allowed state is explored.
pub const STATES_CAP: usize = 50_000;

/// The mode `openat(O_CREAT, 0600)` gives under the usual umask (022/077).
const CREATE_MODE: u32 = 0o600;
/// The mode `mkdirat(0700)` gives under the usual umask.
const MKDIR_MODE: u32 = 0o700;

/// An inode's owner and group (uid, gid).
pub type Owner = (u32, u32);

/// The extended attributes of an inode the model follows (see [`modelled`]),
/// by name.
pub type Xattrs = BTreeMap<String, Vec<u8>>;

/// Whether the model follows the extended attribute `name`: the SELinux
/// label and the `user.*` namespace (what durasync sets or carries in the
/// scenarios). Others (ACLs, `trusted.*`) are neither read nor compared;
/// nor is the label where SELinux runs ([`selinux_enabled`]): the kernel
/// then labels every new inode, which the model does not predict.
pub fn modelled(name: &str) -> bool {
    (name == "security.selinux" && !selinux_enabled()) || name.starts_with("user.")
}

/// Whether SELinux runs here (`selinuxfs` mounted), checked once.
pub fn selinux_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| Path::new("/sys/fs/selinux/enforce").exists())
}

/// The owner and group of what this process creates: what a new inode has
/// without `fchown` (0:0 when running as root).
pub fn process_owner() -> Owner {
    (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw())
}

/// A concrete tree as it sits on disk: what is materialised and compared.
/// Symbolic links carry no owner or attributes here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Disk {
    File { data: Vec<u8>, mode: u32, owner: Owner, xattrs: Xattrs },
    Dir { mode: u32, owner: Owner, xattrs: Xattrs, entries: BTreeMap<String, Disk> },
    Link { target: String },
}

impl Disk {
    /// An empty directory with `mode`, the process's owner and no attributes.
    pub fn dir(mode: u32) -> Disk {
        Disk::Dir { mode, owner: process_owner(), xattrs: Xattrs::new(), entries: BTreeMap::new() }
    }

    /// A file with `data` and `mode`, the process's owner and no attributes.
    pub fn file(data: &[u8], mode: u32) -> Disk {
        Disk::File { data: data.to_vec(), mode, owner: process_owner(), xattrs: Xattrs::new() }
    }

    /// This file or directory owned by `uid`:`gid`.
    pub fn owned(mut self, uid: u32, gid: u32) -> Disk {
        match &mut self {
            Disk::File { owner, .. } | Disk::Dir { owner, .. } => *owner = (uid, gid),
            Disk::Link { .. } => panic!("links carry no owner in the model"),
        }
        self
    }

    /// This file or directory with the extended attribute `name` = `value`.
    pub fn xattr(mut self, name: &str, value: &str) -> Disk {
        assert!(modelled(name), "the model does not follow {name}");
        match &mut self {
            Disk::File { xattrs, .. } | Disk::Dir { xattrs, .. } => {
                xattrs.insert(name.to_owned(), value.as_bytes().to_vec());
            }
            Disk::Link { .. } => panic!("links carry no attributes in the model"),
        }
        self
    }

    /// Insert `node` at the relative path `path`, creating missing
    /// directories with mode 0755.
    pub fn insert(&mut self, path: &str, node: Disk) {
        let (head, rest) = match path.split_once('/') {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        let Disk::Dir { entries, .. } = self else { panic!("insert {path} into a non-directory") };
        match rest {
            None => {
                entries.insert(head.to_owned(), node);
            }
            Some(rest) => {
                entries.entry(head.to_owned()).or_insert_with(|| Disk::dir(0o755)).insert(rest, node)
            }
        }
    }

    /// The node at a relative path, if any.
    pub fn get(&self, path: &str) -> Option<&Disk> {
        let mut node = self;
        for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
            match node {
                Disk::Dir { entries, .. } => node = entries.get(part)?,
                _ => return None,
            }
        }
        Some(node)
    }

    /// Every path beneath this node whose last component satisfies `pred`.
    pub fn paths_where(&self, pred: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        self.walk("", &mut |path, name, _| {
            if pred(name) {
                out.push(path.to_owned());
            }
        });
        out
    }

    fn walk(&self, prefix: &str, f: &mut dyn FnMut(&str, &str, &Disk)) {
        if let Disk::Dir { entries, .. } = self {
            for (name, child) in entries {
                let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
                f(&path, name, child);
                child.walk(&path, f);
            }
        }
    }

    /// A one-line description: `755{a="x":644, big=40B:600@1000:1000[user.k=v]}`;
    /// the owner (`@uid:gid`) and the attributes (`[name=value, …]`) only
    /// where they are not the defaults (the process's owner, none).
    pub fn describe(&self) -> String {
        match self {
            Disk::File { data, mode, owner, xattrs } => {
                let shown = if data.len() <= 12 {
                    format!("{:?}", String::from_utf8_lossy(data))
                } else {
                    format!("{}B", data.len())
                };
                format!("{shown}:{mode:o}{}", describe_meta(*owner, xattrs))
            }
            Disk::Link { target } => format!("->{target}"),
            Disk::Dir { mode, owner, xattrs, entries } => {
                let inner: Vec<String> = entries
                    .iter()
                    .map(|(n, c)| format!("{}={}", crate::trace::short(n), c.describe()))
                    .collect();
                format!("{mode:o}{}{{{}}}", describe_meta(*owner, xattrs), inner.join(", "))
            }
        }
    }
}

/// `@uid:gid` unless the process's, then `[name=value, …]` unless none.
fn describe_meta(owner: Owner, xattrs: &Xattrs) -> String {
    let mut out = String::new();
    if owner != process_owner() {
        out.push_str(&format!("@{}:{}", owner.0, owner.1));
    }
    if !xattrs.is_empty() {
        let shown: Vec<String> = xattrs.iter().map(|(n, v)| format!("{n}={}", show_value(v))).collect();
        out.push_str(&format!("[{}]", shown.join(", ")));
    }
    out
}

/// An attribute's value for messages: its text when short and printable
/// (a label, a small `user.*` value), else its length.
pub fn show_value(value: &[u8]) -> String {
    // A label as the kernel returns it may end in a NUL.
    let text = value.strip_suffix(&[0]).unwrap_or(value);
    match std::str::from_utf8(text) {
        Ok(t) if t.len() <= 40 && t.chars().all(|c| c.is_ascii_graphic()) => t.to_owned(),
        _ => format!("({} B)", value.len()),
    }
}

/// Describe an optional node (`missing` for none).
pub fn describe(node: Option<&Disk>) -> String {
    node.map_or_else(|| "missing".to_owned(), Disk::describe)
}

/// Read a real directory tree (names, bytes, modes, owners, the
/// [`modelled`] extended attributes, link targets; no following of links).
pub fn snapshot(path: &Path) -> Disk {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    let mode = meta.permissions().mode() & 0o7777;
    let owner = (meta.uid(), meta.gid());
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = std::fs::read_link(path).expect("readlink");
        Disk::Link { target: target.to_string_lossy().into_owned() }
    } else if ft.is_dir() {
        let mut real = Vec::new();
        for entry in std::fs::read_dir(path).expect("read_dir") {
            let entry = entry.expect("dir entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(entry.path()).expect("stat entry");
            let valid = (meta.is_dir() || meta.is_file()) && parse_keep(&name) == Some(meta.ino());
            real.push((name, valid, entry.path()));
        }
        let entries = canonical_keeps(real).into_iter().map(|(name, p)| (name, snapshot(&p))).collect();
        Disk::Dir { mode, owner, xattrs: read_xattrs(path), entries }
    } else {
        assert!(ft.is_file(), "{}: unexpected file type (mode {:o})", path.display(), meta.mode());
        Disk::File { data: std::fs::read(path).expect("read file"), mode, owner, xattrs: read_xattrs(path) }
    }
}

/// The [`modelled`] extended attributes of the file or directory at `path`
/// (`lgetxattr`: never through a link). None on a file system without them.
fn read_xattrs(path: &Path) -> Xattrs {
    let mut list = vec![0u8; 64 << 10];
    let n = match rustix::fs::llistxattr(path, &mut list[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::OPNOTSUPP) => return Xattrs::new(),
        Err(e) => panic!("listxattr {}: {e}", path.display()),
    };
    let mut out = Xattrs::new();
    for raw in list[..n].split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let name = String::from_utf8(raw.to_vec()).expect("a UTF-8 attribute name");
        if !modelled(&name) {
            continue;
        }
        let mut value = vec![0u8; 64 << 10];
        match rustix::fs::lgetxattr(path, name.as_str(), &mut value[..]) {
            Ok(len) => {
                value.truncate(len);
                out.insert(name, value);
            }
            // Removed between the list and the read: not there.
            Err(rustix::io::Errno::NODATA) => {}
            Err(e) => panic!("getxattr {} {name}: {e}", path.display()),
        }
    }
    out
}

/// Give the file or directory at `path` (created by this process) `owner`
/// and `xattrs`: `lchown` only where the owner is not the process's (so a
/// tree with default owners needs no privilege), then one `lsetxattr` each.
/// Before its mode: a change of owner clears setuid and setgid bits.
fn set_meta(path: &Path, owner: Owner, xattrs: &Xattrs) {
    if owner != process_owner() {
        std::os::unix::fs::lchown(path, Some(owner.0), Some(owner.1))
            .unwrap_or_else(|e| panic!("chown {} to {}:{}: {e}", path.display(), owner.0, owner.1));
    }
    for (name, value) in xattrs {
        rustix::fs::lsetxattr(path, name.as_str(), value, XattrFlags::empty())
            .unwrap_or_else(|e| panic!("setxattr {} {name}: {e}", path.display()));
    }
}

/// Write `node` at `path` (which must not exist). Owners, attributes and
/// then modes are set after the contents (a directory's after its entries),
/// so a read-only directory can still be filled; setting an owner other
/// than the process's needs root.
pub fn materialise(node: &Disk, path: &Path) {
    match node {
        Disk::File { data, mode, owner, xattrs } => {
            std::fs::write(path, data).expect("write file");
            set_meta(path, *owner, xattrs);
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode)).expect("chmod file");
        }
        Disk::Link { target } => std::os::unix::fs::symlink(target, path).expect("symlink"),
        Disk::Dir { mode, owner, xattrs, entries } => {
            std::fs::create_dir(path).expect("mkdir");
            for (name, child) in entries {
                materialise(child, &path.join(name));
                // A valid previous is named after its own (new) inode.
                if let Some((_, target)) = canonical_valid(name) {
                    let ino = std::fs::symlink_metadata(path.join(name)).expect("stat").ino();
                    std::fs::rename(path.join(name), path.join(keep_name(ino, target))).expect("rename keep");
                }
            }
            set_meta(path, *owner, xattrs);
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode)).expect("chmod dir");
        }
    }
}

/// Canonical keep numbers: valid previouses count up from 1, stale keep
/// entries down from `u64::MAX`; no real inode number of a materialised
/// state is ever this large or this small.
const CANON_SPAN: u64 = 1000;

/// The target of a keep entry's (embedded) name and its stated number.
fn keep_parts(name: &str) -> Option<(u64, &str)> {
    let n = parse_keep(name)?;
    let rest = name.strip_prefix(".durasync-keep.")?;
    let target = rest.split_once('.').map(|(_, t)| t);
    Some((n, target.unwrap_or_else(|| panic!("model: hashed keep names are not modelled: {name}"))))
}

/// A canonical valid keep name: its rank (1, 2, …) and target.
pub fn canonical_valid(name: &str) -> Option<(u64, &str)> {
    keep_parts(name).filter(|(n, _)| (1..=CANON_SPAN).contains(n))
}

/// Whether `name` is a canonical stale keep entry (recovery must remove it).
pub fn canonical_stale(name: &str) -> bool {
    keep_parts(name).is_some_and(|(n, _)| n > u64::MAX - CANON_SPAN)
}

/// Rename the keep entries among a directory's `(name, valid, value)`
/// entries to their canonical names (see the module docs): per target, in
/// the order of their real names, valid ones `1, 2, …`, stale ones
/// `u64::MAX, u64::MAX - 1, …`. Other names are kept.
pub fn canonical_keeps<T>(mut entries: Vec<(String, bool, T)>) -> Vec<(String, T)> {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen: HashMap<(String, bool), u64> = HashMap::new();
    entries
        .into_iter()
        .map(|(name, valid, v)| match keep_parts(&name) {
            None => (name, v),
            Some((_, target)) => {
                let k = seen.entry((target.to_owned(), valid)).or_insert(0);
                *k += 1;
                let n = if valid { *k } else { u64::MAX - (*k - 1) };
                (keep_name(n, target), v)
            }
        })
        .collect()
}

type Ino = usize;

#[derive(Debug, Clone)]
enum Kind {
    File,
    Dir,
    Link(String),
}

/// One change of a directory's entries: every name it sets, atomically.
type Change = Vec<(String, Option<Ino>)>;

/// An inode's metadata: one version of it, as after one `chmod`, `chown`
/// or `setxattr`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Meta {
    mode: u32,
    owner: Owner,
    xattrs: Xattrs,
}

impl Meta {
    /// What a new inode gets: `mode`, the process's owner, no attributes.
    fn new(mode: u32) -> Meta {
        Meta { mode, owner: process_owner(), xattrs: Xattrs::new() }
    }
}

#[derive(Debug, Clone)]
struct Inode {
    kind: Kind,
    /// File data: `[durable, later versions...]`.
    data: Vec<Vec<u8>>,
    /// Metadata: `[durable, later versions...]`.
    metas: Vec<Meta>,
    /// Directory entries as of the last fsync.
    entries: BTreeMap<String, Ino>,
    /// Changes since the last fsync, in order.
    changes: Vec<Change>,
    /// After a failed fsync: what the running system sees (entries, data,
    /// metadata) as of that failure, which no crash state will ever show.
    lost: Option<Lost>,
}

/// What a failed fsync made unpersistable but left visible.
#[derive(Debug, Clone)]
struct Lost {
    entries: BTreeMap<String, Ino>,
    data: Vec<u8>,
    meta: Meta,
}

impl Inode {
    fn new(kind: Kind, meta: Meta) -> Inode {
        Inode {
            kind,
            data: vec![Vec::new()],
            metas: vec![meta],
            entries: BTreeMap::new(),
            changes: Vec::new(),
            lost: None,
        }
    }

    /// The data the running system sees.
    fn visible_data(&self) -> &Vec<u8> {
        match (&self.lost, self.data.len()) {
            (Some(lost), 1) => &lost.data,
            _ => self.data.last().expect("data"),
        }
    }

    /// The metadata the running system sees.
    fn visible_meta(&self) -> &Meta {
        match (&self.lost, self.metas.len()) {
            (Some(lost), 1) => &lost.meta,
            _ => self.metas.last().expect("meta"),
        }
    }

    /// A new version of the metadata: the visible one changed by `change`.
    fn change_meta(&mut self, change: impl FnOnce(&mut Meta)) {
        let mut meta = self.visible_meta().clone();
        change(&mut meta);
        self.metas.push(meta);
    }

    /// Whether anything of this inode is not durable yet.
    fn has_pending(&self) -> bool {
        !self.changes.is_empty() || self.data.len() > 1 || self.metas.len() > 1
    }

    fn current_entries(&self) -> BTreeMap<String, Ino> {
        let mut e = self.lost.as_ref().map_or_else(|| self.entries.clone(), |l| l.entries.clone());
        for change in &self.changes {
            apply(&mut e, change);
        }
        e
    }
}

fn apply(entries: &mut BTreeMap<String, Ino>, change: &Change) {
    for (name, ino) in change {
        match ino {
            Some(i) => entries.insert(name.clone(), *i),
            None => entries.remove(name),
        };
    }
}

/// An operation on inodes: a recorded operation with its paths resolved.
#[derive(Debug, Clone)]
pub enum IOp {
    /// A new file or directory `ino` named `name` in `dir`.
    New {
        dir: Ino,
        name: String,
        ino: Ino,
        is_dir: bool,
        /// For a keep name: the inode (its target's, now) that makes it valid.
        keep_of: Option<Ino>,
    },
    /// A new symbolic link `ino` named `name` in `dir`, holding `target`
    /// (immutable: only its entry is ever pending).
    NewLink {
        dir: Ino,
        name: String,
        ino: Ino,
        target: String,
    },
    Write {
        ino: Ino,
        data: Vec<u8>,
    },
    Chmod {
        ino: Ino,
        mode: u32,
    },
    /// `fchown` (`None`: that id stays).
    Chown {
        ino: Ino,
        uid: Option<u32>,
        gid: Option<u32>,
    },
    /// `fsetxattr` of one attribute (one the model does not follow, see
    /// [`modelled`], changes nothing it compares).
    SetXattr {
        ino: Ino,
        name: String,
        value: Vec<u8>,
    },
    /// fsync of a file or directory inode.
    Fsync {
        ino: Ino,
    },
    /// A failed fsync of a file or directory inode.
    FsyncFail {
        ino: Ino,
    },
    /// `syncfs`: an fsync of every inode of the file system.
    SyncFs,
    /// A failed `syncfs`: a failed fsync of every inode with pending
    /// changes (any of them may have been dropped, and never persist).
    SyncFsFail,
    /// One atomic change of `dir`'s entries (rename, exchange, unlink, rmdir).
    Entries {
        dir: Ino,
        change: Change,
    },
    /// A rename across directories (the one-file fast path: the temporary
    /// file in the parent over a file inside the target): one change of each
    /// directory, each durable only with its own directory's fsync, and
    /// independently of the other (weaker than a journal, which commits both
    /// together): a crash may show the new name, the old name, both (a second
    /// name of the inode) or neither.
    Move {
        from: Ino,
        from_name: String,
        to: Ino,
        to_name: String,
        ino: Ino,
    },
    /// An operation with no effect on the model (locking an existing lock file).
    Nothing,
}

/// One step of a lowered trace: the inode operation and what it was.
#[derive(Debug, Clone)]
pub struct Step {
    pub op: IOp,
    pub what: String,
    pub rop: ROp,
}

/// The state of a file system under the weak model.
#[derive(Debug, Clone)]
pub struct Model {
    inodes: HashMap<Ino, Inode>,
    root: Ino,
    next: Ino,
    /// Keep names by directory and name: the inode that makes the entry a
    /// valid previous (the target's when its keep-sync made the staging).
    keeps: HashMap<(Ino, String), Ino>,
}

/// How an enumeration went.
#[derive(Debug, Default, Clone, Copy)]
pub struct EnumStats {
    /// Subtrees or directories whose states were sampled to [`STATES_CAP`]
    /// (asserted to be zero by every exploration).
    pub capped: usize,
    /// The most changes pending in one directory at one crash point (all
    /// of their subsets are covered).
    pub max_pending: usize,
}

impl Model {
    /// A model whose every entry is durable, built from a real snapshot.
    pub fn from_disk(root: &Disk) -> Model {
        let mut m = Model { inodes: HashMap::new(), root: 0, next: 0, keeps: HashMap::new() };
        m.root = m.add(root);
        m
    }

    fn add(&mut self, node: &Disk) -> Ino {
        let ino = self.next;
        self.next += 1;
        let inode = match node {
            Disk::File { data, mode, owner, xattrs } => {
                let meta = Meta { mode: *mode, owner: *owner, xattrs: xattrs.clone() };
                Inode { data: vec![data.clone()], ..Inode::new(Kind::File, meta) }
            }
            Disk::Link { target } => Inode::new(Kind::Link(target.clone()), Meta::new(0o777)),
            Disk::Dir { mode, owner, xattrs, entries } => {
                let meta = Meta { mode: *mode, owner: *owner, xattrs: xattrs.clone() };
                let mut inode = Inode::new(Kind::Dir, meta);
                for (name, child) in entries {
                    let c = self.add(child);
                    inode.entries.insert(name.clone(), c);
                    // A canonical valid previous is valid here too.
                    if canonical_valid(name).is_some() {
                        self.keeps.insert((ino, name.clone()), c);
                    }
                }
                inode
            }
        };
        self.inodes.insert(ino, inode);
        ino
    }

    /// The inode at a path, resolved through the current (not durable) entries.
    fn resolve(&self, path: &str) -> Option<Ino> {
        let mut ino = self.root;
        for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
            ino = *self.inodes[&ino].current_entries().get(part)?;
        }
        Some(ino)
    }

    fn must(&self, path: &str, what: &ROp) -> Ino {
        self.resolve(path).unwrap_or_else(|| panic!("model: {path} does not exist for `{what}`"))
    }

    /// The directory inode holding `path` and its last name.
    fn parent_of(&self, path: &str, what: &ROp) -> (Ino, String, String) {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        (self.must(dir, what), name.to_owned(), dir.to_owned())
    }

    fn fresh(&mut self) -> Ino {
        self.next += 1;
        self.next - 1
    }

    /// Resolve one recorded operation against the current state.
    fn lower_one(&mut self, rop: &ROp) -> IOp {
        match rop {
            ROp::Lock { dir } => {
                let d = self.must(dir, rop);
                if self.inodes[&d].current_entries().contains_key(LOCK_NAME) {
                    IOp::Nothing
                } else {
                    IOp::New {
                        dir: d,
                        name: LOCK_NAME.to_owned(),
                        ino: self.fresh(),
                        is_dir: false,
                        keep_of: None,
                    }
                }
            }
            ROp::Mkdir { path } | ROp::Create { path } => {
                let ino = self.fresh();
                let (dir, name, _) = self.parent_of(path, rop);
                // A keep-sync's staging names the target it will keep.
                let keep_of =
                    keep_parts(&name).and_then(|(_, t)| self.inodes[&dir].current_entries().get(t).copied());
                IOp::New { dir, name, ino, is_dir: matches!(rop, ROp::Mkdir { .. }), keep_of }
            }
            ROp::Write { path, data } => IOp::Write { ino: self.must(path, rop), data: data.clone() },
            ROp::Chmod { path, mode } => IOp::Chmod { ino: self.must(path, rop), mode: *mode },
            ROp::Chown { path, uid, gid } => IOp::Chown { ino: self.must(path, rop), uid: *uid, gid: *gid },
            ROp::SetXattr { path, name, value } => {
                IOp::SetXattr { ino: self.must(path, rop), name: name.clone(), value: value.clone() }
            }
            ROp::FsyncFile { path } | ROp::FsyncDir { path } => IOp::Fsync { ino: self.must(path, rop) },
            ROp::FsyncFail { path } => IOp::FsyncFail { ino: self.must(path, rop) },
            // The fd's directory must exist; what is flushed is everything.
            ROp::Syncfs { path } => {
                self.must(path, rop);
                IOp::SyncFs
            }
            ROp::SyncfsFail { path } => {
                self.must(path, rop);
                IOp::SyncFsFail
            }
            // One more entry for an existing inode, in the directory of `to`:
            // a change of that directory, durable once it is fsynced.
            ROp::Link { from, to } => {
                let ino = self.must(from, rop);
                let (dir, name, _) = self.parent_of(to, rop);
                IOp::Entries { dir, change: vec![(name, Some(ino))] }
            }
            ROp::Exchange { a, b } => {
                let (da, na, pa) = self.parent_of(a, rop);
                let (db, nb, pb) = self.parent_of(b, rop);
                // The core only exchanges siblings; a cross-directory exchange
                // would be one change of two directories, which this model
                // does not represent.
                assert_eq!((da, &pa), (db, &pb), "model: exchange across directories in `{rop}`");
                let (ia, ib) = (self.must(a, rop), self.must(b, rop));
                IOp::Entries { dir: da, change: vec![(na, Some(ib)), (nb, Some(ia))] }
            }
            ROp::Rename { from, to, .. } => {
                let (df, nf, pf) = self.parent_of(from, rop);
                let (dt, nt, pt) = self.parent_of(to, rop);
                let ino = self.must(from, rop);
                if (df, &pf) != (dt, &pt) {
                    return IOp::Move { from: df, from_name: nf, to: dt, to_name: nt, ino };
                }
                IOp::Entries { dir: df, change: vec![(nf, None), (nt, Some(ino))] }
            }
            ROp::Symlink { path, target } => {
                let ino = self.fresh();
                let (dir, name, _) = self.parent_of(path, rop);
                IOp::NewLink { dir, name, ino, target: target.clone() }
            }
            ROp::Unlink { path } | ROp::Rmdir { path } => {
                let (dir, name, _) = self.parent_of(path, rop);
                self.must(path, rop);
                IOp::Entries { dir, change: vec![(name, None)] }
            }
        }
    }

    /// Apply one inode operation.
    pub fn apply(&mut self, op: &IOp) {
        match op {
            IOp::New { dir, name, ino, is_dir, keep_of } => {
                if let Some(target) = keep_of {
                    self.keeps.insert((*dir, name.clone()), *target);
                }
                let inode = if *is_dir {
                    Inode::new(Kind::Dir, Meta::new(MKDIR_MODE))
                } else {
                    Inode::new(Kind::File, Meta::new(CREATE_MODE))
                };
                self.inodes.insert(*ino, inode);
                self.next = self.next.max(ino + 1);
                self.inode(*dir).changes.push(vec![(name.clone(), Some(*ino))]);
            }
            IOp::NewLink { dir, name, ino, target } => {
                self.inodes.insert(*ino, Inode::new(Kind::Link(target.clone()), Meta::new(0o777)));
                self.next = self.next.max(ino + 1);
                self.inode(*dir).changes.push(vec![(name.clone(), Some(*ino))]);
            }
            IOp::Write { ino, data } => self.inode(*ino).data.push(data.clone()),
            IOp::Chmod { ino, mode } => self.inode(*ino).change_meta(|m| m.mode = *mode),
            IOp::Chown { ino, uid, gid } => {
                let inode = self.inode(*ino);
                let is_dir = matches!(inode.kind, Kind::Dir);
                inode.change_meta(|m| {
                    m.owner = (uid.unwrap_or(m.owner.0), gid.unwrap_or(m.owner.1));
                    // As Linux does, for root too: a chown clears setuid, and
                    // setgid with group execute, of anything but a directory.
                    if !is_dir {
                        m.mode &= !0o4000;
                        if m.mode & 0o010 != 0 {
                            m.mode &= !0o2000;
                        }
                    }
                });
            }
            IOp::SetXattr { ino, name, value } if modelled(name) => {
                self.inode(*ino).change_meta(|m| {
                    m.xattrs.insert(name.clone(), value.clone());
                });
            }
            IOp::SetXattr { .. } => {}
            IOp::Fsync { ino } => {
                let inode = self.inode(*ino);
                // Only what changed since the last (failed or not) fsync persists.
                let changes = std::mem::take(&mut inode.changes);
                for change in &changes {
                    apply(&mut inode.entries, change);
                }
                if let Some(lost) = &mut inode.lost {
                    for change in &changes {
                        apply(&mut lost.entries, change);
                    }
                }
                // Data or metadata written since the last fsync is durable
                // now (and is what the running system sees, lost or not).
                if inode.data.len() > 1 {
                    let data = inode.data.pop().expect("data");
                    if let Some(lost) = &mut inode.lost {
                        lost.data.clone_from(&data);
                    }
                    inode.data = vec![data];
                }
                if inode.metas.len() > 1 {
                    let meta = inode.metas.pop().expect("meta");
                    if let Some(lost) = &mut inode.lost {
                        lost.meta = meta.clone();
                    }
                    inode.metas = vec![meta];
                }
            }
            IOp::FsyncFail { ino } => {
                let inode = self.inode(*ino);
                let entries = inode.current_entries();
                let (data, meta) = (inode.visible_data().clone(), inode.visible_meta().clone());
                inode.changes.clear();
                inode.data.truncate(1);
                inode.metas.truncate(1);
                inode.lost = Some(Lost { entries, data, meta });
            }
            IOp::SyncFs => {
                let mut all: Vec<Ino> = self.inodes.keys().copied().collect();
                all.sort_unstable();
                for ino in all {
                    self.apply(&IOp::Fsync { ino });
                }
            }
            IOp::SyncFsFail => {
                let mut pending: Vec<Ino> =
                    self.inodes.iter().filter(|(_, i)| i.has_pending()).map(|(n, _)| *n).collect();
                pending.sort_unstable();
                for ino in pending {
                    self.apply(&IOp::FsyncFail { ino });
                }
            }
            IOp::Entries { dir, change } => self.inode(*dir).changes.push(change.clone()),
            IOp::Move { from, from_name, to, to_name, ino } => {
                self.inode(*from).changes.push(vec![(from_name.clone(), None)]);
                self.inode(*to).changes.push(vec![(to_name.clone(), Some(*ino))]);
            }
            IOp::Nothing => {}
        }
    }

    fn inode(&mut self, ino: Ino) -> &mut Inode {
        self.inodes.get_mut(&ino).unwrap_or_else(|| panic!("model: inode {ino} does not exist yet"))
    }

    /// The state as the running system sees it (every change, latest versions).
    pub fn current(&self) -> Disk {
        self.current_of(self.root)
    }

    fn current_of(&self, ino: Ino) -> Disk {
        let inode = &self.inodes[&ino];
        let Meta { mode, owner, xattrs } = inode.visible_meta().clone();
        match &inode.kind {
            Kind::File => Disk::File { data: inode.visible_data().clone(), mode, owner, xattrs },
            Kind::Link(t) => Disk::Link { target: t.clone() },
            Kind::Dir => Disk::Dir {
                mode,
                owner,
                xattrs,
                entries: self
                    .canonical(ino, inode.current_entries())
                    .into_iter()
                    .map(|(n, i)| (n, self.current_of(i)))
                    .collect(),
            },
        }
    }

    /// `entries` of the directory `dir` with keep entries under their
    /// canonical names: valid when the entry holds the inode its keep name
    /// was made for.
    fn canonical(&self, dir: Ino, entries: BTreeMap<String, Ino>) -> Vec<(String, Ino)> {
        let tagged = entries
            .into_iter()
            .map(|(name, i)| {
                let kind_ok = !matches!(self.inodes[&i].kind, Kind::Link(_));
                let valid = kind_ok && self.keeps.get(&(dir, name.clone())) == Some(&i);
                (name, valid, i)
            })
            .collect();
        canonical_keeps(tagged)
    }

    /// Every state a crash now may leave on disk, deduplicated.
    pub fn crash_states(&self, stats: &mut EnumStats) -> Vec<Disk> {
        let mut memo = HashMap::new();
        let mut stack = BTreeSet::new();
        self.states_of(self.root, &mut memo, &mut stack, stats).as_ref().clone()
    }

    fn states_of(
        &self,
        ino: Ino,
        memo: &mut HashMap<Ino, Rc<Vec<Disk>>>,
        stack: &mut BTreeSet<Ino>,
        stats: &mut EnumStats,
    ) -> Rc<Vec<Disk>> {
        if let Some(s) = memo.get(&ino) {
            return s.clone();
        }
        assert!(stack.insert(ino), "model: directory cycle through inode {ino}");
        let inode = &self.inodes[&ino];
        let metas: BTreeSet<&Meta> = inode.metas.iter().collect();
        let mut out: BTreeSet<Disk> = BTreeSet::new();
        match &inode.kind {
            Kind::Link(t) => {
                out.insert(Disk::Link { target: t.clone() });
            }
            Kind::File => {
                let mut datas: BTreeSet<Vec<u8>> = inode.data.iter().cloned().collect();
                // Data never fsynced: any of it may be missing, or only its size.
                for later in &inode.data[1..] {
                    let n = later.len();
                    for cut in [0, n / 2, n.saturating_sub(1)] {
                        datas.insert(later[..cut].to_vec());
                    }
                    datas.insert(vec![0; n]);
                }
                for data in datas {
                    for m in &metas {
                        let (mode, owner, xattrs) = (m.mode, m.owner, m.xattrs.clone());
                        out.insert(Disk::File { data: data.clone(), mode, owner, xattrs });
                    }
                }
            }
            Kind::Dir => {
                for entries in self.entry_choices(inode, stats) {
                    let entries = self.canonical(ino, entries);
                    // The product of every child's possible states.
                    let mut partial: Vec<BTreeMap<String, Disk>> = vec![BTreeMap::new()];
                    for (name, child) in &entries {
                        let child_states = self.states_of(*child, memo, stack, stats);
                        let mut next = Vec::with_capacity(partial.len() * child_states.len());
                        for p in &partial {
                            for c in child_states.iter() {
                                let mut p = p.clone();
                                p.insert(name.clone(), c.clone());
                                next.push(p);
                            }
                        }
                        partial = sample(next, stats);
                    }
                    for m in &metas {
                        for p in &partial {
                            let (mode, owner, xattrs) = (m.mode, m.owner, m.xattrs.clone());
                            out.insert(Disk::Dir { mode, owner, xattrs, entries: p.clone() });
                        }
                    }
                }
            }
        }
        stack.remove(&ino);
        let states = Rc::new(sample(out.into_iter().collect(), stats));
        memo.insert(ino, states.clone());
        states
    }

    /// The entry sets a crash may leave in a directory: its durable entries
    /// with **any subset** of its pending changes applied, in their order.
    ///
    /// Computed without enumerating the 2^k subsets, and exactly equal to
    /// that enumeration. Let `R_i` be the set of entry maps that the subsets
    /// of the first `i` changes give (`R_0` = the durable entries alone).
    /// Then `R_i = R_(i-1) ∪ { c_i applied to r : r ∈ R_(i-1) }`:
    /// - ⊆: a subset `S` of the first `i` changes either leaves out `c_i`
    ///   (then `S` is a subset of the first `i-1` and its result is in
    ///   `R_(i-1)`), or holds it; applied in order, `c_i` comes last, so the
    ///   result is `c_i` applied to the result of `S \ {c_i}`, a subset of
    ///   the first `i-1`, whose result is in `R_(i-1)`;
    /// - ⊇: every `r ∈ R_(i-1)` is the result of some subset `S'` of the
    ///   first `i-1` changes, which is itself a subset of the first `i`; and
    ///   `c_i` applied to `r` is the result of `S' ∪ {c_i}` (in order, `c_i`
    ///   last).
    ///
    /// By induction `R_k` is exactly the set of results of all 2^k subsets.
    /// The work is `k` times the number of *distinct* results (what must be
    /// explored anyway), not 2^k: changes of different names commute, so
    /// `k` independent creations give 2^k distinct maps either way, while
    /// `k` changes of one name give only `k + 1`. Above [`STATES_CAP`]
    /// distinct maps the set is sampled and counted as `capped`, which the
    /// explorations assert never happens. `entry_choices_cover_every_subset`
    /// below checks the equality against brute force.
    fn entry_choices(&self, inode: &Inode, stats: &mut EnumStats) -> BTreeSet<BTreeMap<String, Ino>> {
        stats.max_pending = stats.max_pending.max(inode.changes.len());
        let (sets, capped) = subset_results(&inode.entries, &inode.changes);
        if capped {
            stats.capped += 1;
        }
        sets
    }
}

/// The results of applying every subset of `changes` (in order) to
/// `entries`, as proved in [`Model::entry_choices`]; `true` when the set
/// grew past [`STATES_CAP`] and was sampled.
fn subset_results(
    entries: &BTreeMap<String, Ino>,
    changes: &[Change],
) -> (BTreeSet<BTreeMap<String, Ino>>, bool) {
    let mut results: BTreeSet<BTreeMap<String, Ino>> = BTreeSet::from([entries.clone()]);
    let mut capped = false;
    for change in changes {
        let with: Vec<BTreeMap<String, Ino>> = results
            .iter()
            .map(|r| {
                let mut r = r.clone();
                apply(&mut r, change);
                r
            })
            .collect();
        results.extend(with);
        if results.len() > STATES_CAP {
            capped = true;
            let mut dummy = EnumStats::default();
            results = sample(results.into_iter().collect(), &mut dummy).into_iter().collect();
        }
    }
    (results, capped)
}

/// Keep at most [`STATES_CAP`] states, evenly spread, first and last included.
fn sample<T: Clone>(v: Vec<T>, stats: &mut EnumStats) -> Vec<T> {
    if v.len() <= STATES_CAP {
        return v;
    }
    stats.capped += 1;
    let n = v.len();
    (0..STATES_CAP).map(|i| v[i * (n - 1) / (STATES_CAP - 1)].clone()).collect()
}

/// Resolve a recorded trace, in order, into inode operations, starting from
/// `initial`. Panics if the trace names something the model does not hold
/// (the recording missed an operation).
pub fn lower(initial: &Model, trace: &[ROp]) -> Vec<Step> {
    let mut m = initial.clone();
    trace
        .iter()
        .map(|rop| {
            let op = m.lower_one(rop);
            m.apply(&op);
            Step { op, what: rop.to_string(), rop: rop.clone() }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The brute force the model's subset computation must equal: every
    /// one of the 2^k subsets, applied in order.
    fn brute(entries: &BTreeMap<String, Ino>, changes: &[Change]) -> BTreeSet<BTreeMap<String, Ino>> {
        (0u32..(1 << changes.len()))
            .map(|mask| {
                let mut e = entries.clone();
                for (i, c) in changes.iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        apply(&mut e, c);
                    }
                }
                e
            })
            .collect()
    }

    #[test]
    fn owner_and_attributes_are_durable_only_after_the_inodes_fsync() {
        let mut root = Disk::dir(0o755);
        root.insert("f", Disk::file(b"f", 0o644));
        let mut m = Model::from_disk(&root);
        let f = m.resolve("f").expect("f");
        m.apply(&IOp::Chown { ino: f, uid: Some(7), gid: None });
        m.apply(&IOp::SetXattr { ino: f, name: "user.a".into(), value: b"1".to_vec() });
        // Not followed by the model: no version of its own.
        m.apply(&IOp::SetXattr { ino: f, name: "trusted.b".into(), value: b"2".to_vec() });
        let owned = Disk::file(b"f", 0o644).owned(7, process_owner().1);
        let labelled = owned.clone().xattr("user.a", "1");
        let files = |m: &Model| -> BTreeSet<Disk> {
            let mut stats = EnumStats::default();
            m.crash_states(&mut stats).iter().map(|s| s.get("f").expect("f").clone()).collect()
        };
        assert_eq!(files(&m), BTreeSet::from([Disk::file(b"f", 0o644), owned, labelled.clone()]));
        m.apply(&IOp::Fsync { ino: f });
        assert_eq!(files(&m), BTreeSet::from([labelled]));
    }

    #[test]
    fn entry_choices_cover_every_subset() {
        // Deterministic pseudo-random change lists over few names (so that
        // changes overlap, as renames and exchanges do), up to 14 changes:
        // above the 10 the old enumeration stopped at.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        let names = ["a", "b", "c", "d", "e"];
        for round in 0..200 {
            let entries: BTreeMap<String, Ino> =
                names.iter().take(next(4)).enumerate().map(|(i, n)| (n.to_string(), i)).collect();
            let k = 1 + round % 14;
            let changes: Vec<Change> = (0..k)
                .map(|_| {
                    (0..1 + next(2))
                        .map(|_| {
                            let name = names[next(names.len() as u64)].to_string();
                            let ino = if next(3) == 0 { None } else { Some(10 + next(6)) };
                            (name, ino)
                        })
                        .collect()
                })
                .collect();
            let (got, capped) = subset_results(&entries, &changes);
            assert!(!capped);
            assert_eq!(got, brute(&entries, &changes), "round {round}: {entries:?} {changes:?}");
        }
        // Many independent creations: every one of the 2^14 subsets is distinct.
        let changes: Vec<Change> = (0..14).map(|i| vec![(format!("f{i}"), Some(i))]).collect();
        let (got, capped) = subset_results(&BTreeMap::new(), &changes);
        assert!(!capped);
        assert_eq!(got.len(), 1 << 14);
        assert_eq!(got, brute(&BTreeMap::new(), &changes));
    }
}
