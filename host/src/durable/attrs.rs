//! What a new inode carries besides bytes and mode: its owner and group,
//! its SELinux label and, on request, the extended attributes and POSIX
//! ACLs of the file it replaces.
//!
//! durasync writes every new or changed file, and every directory of a
//! sync, as a new inode under a temporary name. Left alone, that inode gets
//! the agent's uid and gid and whatever label the policy gives a file
//! created under the *temporary* name, and no extended attributes. An
//! [`Attrs`] policy (per root, from the operator, never from a plugin) says
//! what it gets instead; the operations set it on the staged inode **before
//! its fsync** (or the staging tree's `syncfs`), so no committed tree, and no
//! state a power loss can leave, shows a new inode without it.
//!
//! Order on each staged inode: create → write → `fchown` → `fsetxattr`
//! (label, carried attributes, ACLs) → `fchmod` → fsync. `fchown` comes before
//! `fchmod` because a change of owner clears setuid and setgid bits (also for
//! root, since Linux 2.2.13); the ACL before `fchmod` so the mode the plugin
//! asked for is the one the file keeps (setting an access ACL rewrites the
//! group bits, `fchmod` then rewrites the ACL's mask), and an unchanged-check
//! finds the mode it expects.
//!
//! What is read of the replaced inode is read from the live target before
//! the staging tree exists, through the directory fds the operation holds
//! (`lgetxattr` of `/proc/self/fd/N/NAME`, which never follows a link in
//! `NAME`; an `open` of the file where `/proc` is missing), and bounded:
//! [`MAX_XATTRS`] names and [`MAX_XATTR_BYTES`] per inode, [`MAX_CARRIED_BYTES`]
//! per operation. A file or directory replaced by an entry of another kind
//! carries nothing: the new entry is treated as a new name.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::error::{Error, Result, Step};
use super::sys::{Kind, Sys, join, kind_of};
use super::tree::{Node, Tree};

/// Who a new inode belongs to (owner or group, each on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdRule {
    /// Whatever the process creating it is (its euid or egid): no `fchown`.
    #[default]
    Process,
    /// The id of the inode it replaces; a new name takes its parent
    /// directory's (in the new tree).
    Keep,
    /// This uid or gid.
    Id(u32),
}

/// Which SELinux label (`security.selinux`) a new inode gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LabelRule {
    /// The label of the inode it replaces; a new name takes its parent
    /// directory's (in the new tree). Nothing is set where neither has one
    /// (a kernel without SELinux, a file system without labels).
    #[default]
    Keep,
    /// Whatever the kernel gives a file created under its temporary name.
    Kernel,
    /// This exact context (`system_u:object_r:kubernetes_file_t:s0`).
    Fixed(String),
}

/// The policy of a root: what every inode an operation creates there gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attrs {
    /// The owner of new inodes.
    pub owner: IdRule,
    /// The group of new inodes.
    pub group: IdRule,
    /// The SELinux label of new inodes.
    pub label: LabelRule,
    /// Carry the replaced inode's extended attributes (`preserve = ["xattrs"]`),
    /// all but those named in [`NEVER_CARRIED`] and the ACLs.
    pub xattrs: bool,
    /// Carry the replaced inode's POSIX ACLs (`preserve = ["acl"]`):
    /// `system.posix_acl_access`, and `system.posix_acl_default` of a directory.
    pub acl: bool,
}

impl Default for Attrs {
    /// [`Attrs::DEFAULT`].
    fn default() -> Self {
        Attrs::DEFAULT
    }
}

/// The SELinux label's extended attribute.
pub const LABEL_XATTR: &str = "security.selinux";
/// The access ACL's extended attribute.
pub const ACL_ACCESS: &str = "system.posix_acl_access";
/// A directory's default ACL's extended attribute.
pub const ACL_DEFAULT: &str = "system.posix_acl_default";

/// Attributes never carried to a new inode, whatever the policy: file
/// capabilities and integrity signatures belong to the old bytes (carrying
/// `security.capability` would give the new bytes the old program's
/// privileges). The label has its own rule ([`LabelRule`]).
pub const NEVER_CARRIED: [&str; 4] = [LABEL_XATTR, "security.capability", "security.ima", "security.evm"];

/// The most extended attributes carried from one inode.
pub const MAX_XATTRS: usize = 128;
/// The most bytes of names and values carried from one inode (the kernel's
/// own cap on one value is 64 KiB).
pub const MAX_XATTR_BYTES: usize = 256 << 10;
/// The most bytes of extended attributes one operation carries in all.
pub const MAX_CARRIED_BYTES: u64 = 64 << 20;

/// The largest value or name list the kernel returns (`XATTR_SIZE_MAX`,
/// `XATTR_LIST_MAX`).
const XATTR_MAX: usize = 64 << 10;

impl Attrs {
    /// The policy under which durasync sets nothing: the kernel decides
    /// owner, group and label, nothing is carried.
    pub const fn with_kernel_defaults() -> Attrs {
        Attrs {
            owner: IdRule::Process,
            group: IdRule::Process,
            label: LabelRule::Kernel,
            xattrs: false,
            acl: false,
        }
    }

    /// The default policy, usable where a `'static` reference is needed.
    pub const DEFAULT: Attrs = Attrs {
        owner: IdRule::Process,
        group: IdRule::Process,
        label: LabelRule::Keep,
        xattrs: false,
        acl: false,
    };

    /// Whether this policy reads nothing of the replaced inodes.
    fn reads_old(&self) -> bool {
        self.owner == IdRule::Keep
            || self.group == IdRule::Keep
            || self.label == LabelRule::Keep
            || self.xattrs
            || self.acl
    }

    /// Whether an existing inode with `uid` and `gid` may stay in a new
    /// tree (be carried, or count as unchanged): it has the owner and group
    /// a fixed rule asks for, and with [`IdRule::Process`] the process's
    /// own uid for the owner (a file someone else owns is rewritten).
    pub(crate) fn owner_fits(&self, uid: u32, gid: u32) -> bool {
        let owner = match self.owner {
            IdRule::Process => uid == process_ids().0,
            IdRule::Keep => true,
            IdRule::Id(id) => uid == id,
        };
        let group = match self.group {
            IdRule::Id(id) => gid == id,
            IdRule::Process | IdRule::Keep => true,
        };
        owner && group
    }

    /// Whether an existing inode must be rewritten because its owner or
    /// group is not what a fixed rule asks for (the unchanged check).
    pub(crate) fn owner_differs(&self, uid: u32, gid: u32) -> bool {
        matches!(self.owner, IdRule::Id(id) if id != uid) || matches!(self.group, IdRule::Id(id) if id != gid)
    }
}

/// Parse an owner or group as an operator writes it: `keep`, a number, or
/// a name looked up in the system's user or group database (NSS: the
/// files of the mount namespace durasync runs in, or the directory service
/// they name). `what` is `"owner"` or `"group"`.
pub fn parse_id(value: &str, what: &str) -> std::result::Result<IdRule, String> {
    if value == "keep" {
        return Ok(IdRule::Keep);
    }
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return match value.parse::<u32>() {
            Ok(id) if id != u32::MAX => Ok(IdRule::Id(id)),
            _ => Err(format!("{what} {value:?} is not a valid id (0 to 4294967294)")),
        };
    }
    let looked_up = if what == "group" {
        nix::unistd::Group::from_name(value).map(|g| g.map(|g| g.gid.as_raw()))
    } else {
        nix::unistd::User::from_name(value).map(|u| u.map(|u| u.uid.as_raw()))
    };
    match looked_up {
        Ok(Some(id)) => Ok(IdRule::Id(id)),
        Ok(None) => Err(format!(
            "no {} named {value:?} on this system (use `keep`, a number, or a name in {})",
            if what == "group" { "group" } else { "user" },
            if what == "group" { "/etc/group" } else { "/etc/passwd" }
        )),
        Err(e) => Err(format!("looking up {what} {value:?}: {e}")),
    }
}

/// Parse a label rule: `keep`, `kernel`, or a context (`user:role:type:level`).
pub fn parse_label(value: &str) -> std::result::Result<LabelRule, String> {
    match value {
        "keep" => Ok(LabelRule::Keep),
        "kernel" => Ok(LabelRule::Kernel),
        v if v.split(':').count() >= 3
            && v.len() < 4096
            && v.bytes().all(|b| b.is_ascii_graphic())
            && v.split(':').take(3).all(|p| !p.is_empty()) =>
        {
            Ok(LabelRule::Fixed(v.to_owned()))
        }
        v => Err(format!(
            "label {v:?} is neither \"keep\", \"kernel\" nor an SELinux context (user:role:type[:level])"
        )),
    }
}

/// What one staged inode gets before its fsync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Planned {
    /// `fchown` to these (`None`: leave that id).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `fsetxattr` each, in order (the label first).
    pub xattrs: Vec<(CString, Vec<u8>)>,
}

impl Planned {
    fn is_empty(&self) -> bool {
        self.uid.is_none() && self.gid.is_none() && self.xattrs.is_empty()
    }

    /// The label this inode gets, if any.
    fn label(&self) -> Option<&[u8]> {
        self.xattrs.iter().find(|(n, _)| n.as_bytes() == LABEL_XATTR.as_bytes()).map(|(_, v)| v.as_slice())
    }

    fn bytes(&self) -> u64 {
        self.xattrs.iter().map(|(n, v)| (n.as_bytes().len() + v.len()) as u64).sum()
    }
}

/// What the inode a new entry replaces (or its parent, for a new name) has.
#[derive(Debug, Default)]
struct Old {
    uid: u32,
    gid: u32,
    label: Option<Vec<u8>>,
    carried: Vec<(CString, Vec<u8>)>,
}

/// Where `/proc/self/fd` can name a directory fd: checked once.
fn proc_fd_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| std::path::Path::new("/proc/self/fd").is_dir())
}

/// What was found of the entry a new one replaces.
#[derive(Debug)]
enum Found {
    /// Nothing of the kind wanted is there: the new entry is a new name.
    New,
    /// The entry it replaces (of the kind wanted, or, with `kind_unknown`,
    /// not checked yet: it has no label, and nothing else was needed).
    Old { old: Old, kind_unknown: bool },
}

/// Read what `policy` needs of the entry `name` in `dir` (`"."`: `dir`
/// itself), which a new entry of kind `want` replaces.
///
/// The label alone (the default policy) costs one `lgetxattr` for an
/// unlabelled or missing entry: its kind is read (`statat`) only when it
/// has a label, or later, when its parent's label makes the difference
/// between "keeps none" and "inherits" ([`plan_tree`]).
fn read_found(policy: &Attrs, dir: BorrowedFd<'_>, name: &str, path: &str, want: Kind) -> Result<Found> {
    let stat = || match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::io(Step::Read, path, e)),
    };
    // Without /proc the reader opens the entry: its kind is checked first.
    let needs_stat = policy.owner == IdRule::Keep
        || policy.group == IdRule::Keep
        || policy.xattrs
        || policy.acl
        || !proc_fd_works();
    if !needs_stat {
        // The label rule alone (this function is not called without it).
        let reader = XattrReader::new(dir, name, path, want)?;
        let label = match reader.get_or_missing(c"security.selinux")? {
            None => return Ok(Found::New),
            Some(label) => label,
        };
        if label.is_none() {
            return Ok(Found::Old { old: Old::default(), kind_unknown: true });
        }
        let Some(st) = stat()? else { return Ok(Found::New) };
        if kind_of(FileType::from_raw_mode(st.st_mode as _)) != want {
            return Ok(Found::New);
        }
        return Ok(Found::Old {
            old: Old { uid: st.st_uid, gid: st.st_gid, label, carried: Vec::new() },
            kind_unknown: false,
        });
    }
    let Some(st) = stat()? else { return Ok(Found::New) };
    if kind_of(FileType::from_raw_mode(st.st_mode as _)) != want {
        return Ok(Found::New);
    }
    let mut old = Old { uid: st.st_uid, gid: st.st_gid, ..Old::default() };
    if policy.label == LabelRule::Keep || policy.xattrs || policy.acl {
        let reader = XattrReader::new(dir, name, path, want)?;
        if policy.label == LabelRule::Keep {
            old.label = reader.get(c"security.selinux")?;
        }
        if policy.xattrs || policy.acl {
            old.carried = reader.carried(policy, want == Kind::Dir)?;
        }
    }
    Ok(Found::Old { old, kind_unknown: false })
}

/// [`read_found`] with the kind settled: `None` for a new name.
fn read_old(policy: &Attrs, dir: BorrowedFd<'_>, name: &str, path: &str, want: Kind) -> Result<Option<Old>> {
    match read_found(policy, dir, name, path, want)? {
        Found::New => Ok(None),
        Found::Old { old, kind_unknown: false } => Ok(Some(old)),
        Found::Old { old, kind_unknown: true } => Ok(same_kind(dir, name, path, want)?.then_some(old)),
    }
}

/// Whether the entry `name` in `dir` is of kind `want`.
fn same_kind(dir: BorrowedFd<'_>, name: &str, path: &str, want: Kind) -> Result<bool> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(kind_of(FileType::from_raw_mode(st.st_mode as _)) == want),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(Error::io(Step::Read, path, e)),
    }
}

/// Call `read` (a `getxattr` or `listxattr`) with a small buffer, and again
/// with the kernel's largest when the answer does not fit (`ERANGE`): a label
/// is tens of bytes, and the default policy reads one per replaced file.
fn with_buffer(read: impl Fn(&mut [u8]) -> rustix::io::Result<usize>) -> rustix::io::Result<Vec<u8>> {
    let mut small = [0u8; 256];
    match read(&mut small) {
        Ok(n) => Ok(small[..n].to_vec()),
        Err(rustix::io::Errno::RANGE) => {
            let mut buf = vec![0u8; XATTR_MAX];
            let n = read(&mut buf)?;
            buf.truncate(n);
            Ok(buf)
        }
        Err(e) => Err(e),
    }
}

/// Reads one inode's extended attributes without following a link.
struct XattrReader {
    /// `/proc/self/fd/N/NAME`, or an fd of the inode itself.
    at: At,
    path: String,
}

enum At {
    Proc(CString),
    Fd(std::os::fd::OwnedFd),
}

impl XattrReader {
    fn new(dir: BorrowedFd<'_>, name: &str, path: &str, kind: Kind) -> Result<Self> {
        let at = if proc_fd_works() {
            let p = format!("/proc/self/fd/{}/{name}", dir.as_raw_fd());
            At::Proc(CString::new(p).map_err(|_| Error::invalid_path(path, "contains a NUL byte"))?)
        } else {
            // Without /proc: open the inode itself (a regular file or a
            // directory only; never a device, never through a link).
            let dir_flag = if kind == Kind::Dir { OFlags::DIRECTORY } else { OFlags::empty() };
            let flags =
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(dir, name, flags | dir_flag, Mode::empty())
                .map_err(|e| Error::io(Step::Open, path, e))?;
            At::Fd(fd)
        };
        Ok(XattrReader { at, path: path.to_owned() })
    }

    /// One attribute's value: `None` when there is no such entry, `Some(None)`
    /// when the entry has no such attribute.
    fn get_or_missing(&self, name: &CStr) -> Result<Option<Option<Vec<u8>>>> {
        match self.get(name) {
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(rustix::io::Errno::NOENT.raw_os_error()) =>
            {
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    /// One attribute's value, `None` when the inode has none.
    fn get(&self, name: &CStr) -> Result<Option<Vec<u8>>> {
        let got = with_buffer(|buf| match &self.at {
            At::Proc(p) => rustix::fs::lgetxattr(p.as_c_str(), name, buf),
            At::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
        });
        match got {
            Ok(value) => Ok(Some(value)),
            // No such attribute, or a file system without extended attributes.
            Err(rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP) => Ok(None),
            Err(e) => Err(Error::io(Step::Read, format!("{} (extended attribute {name:?})", self.path), e)),
        }
    }

    /// Every attribute `policy` carries, in the kernel's order.
    fn carried(&self, policy: &Attrs, is_dir: bool) -> Result<Vec<(CString, Vec<u8>)>> {
        let got = with_buffer(|buf| match &self.at {
            At::Proc(p) => rustix::fs::llistxattr(p.as_c_str(), buf),
            At::Fd(fd) => rustix::fs::flistxattr(fd, buf),
        });
        let list = match got {
            Ok(list) => list,
            Err(rustix::io::Errno::OPNOTSUPP) => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(Step::Read, format!("{} (extended attributes)", self.path), e)),
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for raw in list.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let Ok(name) = std::str::from_utf8(raw) else { continue };
            let acl = name == ACL_ACCESS || (is_dir && name == ACL_DEFAULT);
            let wanted = if acl {
                policy.acl
            } else {
                policy.xattrs && !NEVER_CARRIED.contains(&name) && !name.starts_with("system.posix_acl_")
            };
            if !wanted {
                continue;
            }
            let cname = CString::new(raw).expect("split at NUL");
            let Some(value) = self.get(&cname)? else { continue };
            bytes += raw.len() + value.len();
            out.push((cname, value));
            if out.len() > MAX_XATTRS || bytes > MAX_XATTR_BYTES {
                return Err(Error::TooLarge {
                    path: self.path.clone(),
                    what: if out.len() > MAX_XATTRS {
                        "extended attributes to carry"
                    } else {
                        "bytes of extended attributes to carry"
                    },
                    limit: if out.len() > MAX_XATTRS { MAX_XATTRS as u64 } else { MAX_XATTR_BYTES as u64 },
                    actual: if out.len() > MAX_XATTRS { out.len() as u64 } else { bytes as u64 },
                });
            }
        }
        Ok(out)
    }
}

/// What an inode replacing `old` (or, with `old` `None`, a new name under
/// a parent that got `parent`) gets under `policy`.
fn plan_one(policy: &Attrs, old: Option<&Old>, parent: &Planned, parent_ids: (u32, u32)) -> Planned {
    let id = |rule: IdRule, old_id: Option<u32>, parent_id: u32| match rule {
        IdRule::Process => None,
        IdRule::Keep => Some(old_id.unwrap_or(parent_id)),
        IdRule::Id(id) => Some(id),
    };
    let mut planned = Planned {
        uid: id(policy.owner, old.map(|o| o.uid), parent_ids.0),
        gid: id(policy.group, old.map(|o| o.gid), parent_ids.1),
        xattrs: Vec::new(),
    };
    let label = match &policy.label {
        LabelRule::Kernel => None,
        LabelRule::Fixed(c) => Some(c.as_bytes().to_vec()),
        LabelRule::Keep => match old {
            Some(o) => o.label.clone(),
            None => parent.label().map(<[u8]>::to_vec),
        },
    };
    if let Some(label) = label {
        planned.xattrs.push((CString::new(LABEL_XATTR).expect("no NUL"), label));
    }
    if let Some(o) = old {
        planned.xattrs.extend(o.carried.iter().cloned());
    }
    planned
}

/// The ids an inode planned as `planned` ends up with, its own when not
/// set (`own`).
fn ids_of(planned: &Planned, own: (u32, u32)) -> (u32, u32) {
    (planned.uid.unwrap_or(own.0), planned.gid.unwrap_or(own.1))
}

/// The process's effective ids: what a new inode gets without `fchown`.
/// Read once: durasync never changes them, and a compare asks per file.
fn process_ids() -> (u32, u32) {
    static IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *IDS.get_or_init(|| (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()))
}

/// What every staged inode of a sync gets: its root (the target directory),
/// its directories and its files, by relative path. Empty (no lookups, no
/// calls) when the policy sets nothing.
#[derive(Debug, Default)]
pub(crate) struct TreePlan {
    pub root: Planned,
    pub by_path: HashMap<String, Planned>,
}

impl TreePlan {
    /// What the entry at `rel` gets (nothing when not planned).
    pub(crate) fn get(&self, rel: &str) -> Option<&Planned> {
        self.by_path.get(rel)
    }
}

/// Plan the attributes of a sync of `tree` into `name` in `parent`: the
/// staging root replaces `target` (the current target directory, `None`
/// when it is created), each path of `tree` the entry at the same path of
/// the target. Runs before anything is created, so a refusal (a limit, an
/// unreadable attribute) changes nothing.
pub(crate) fn plan_tree(
    policy: &Attrs,
    parent: BorrowedFd<'_>,
    name: &str,
    target: Option<BorrowedFd<'_>>,
    tree: &Tree,
) -> Result<TreePlan> {
    let mut plan = TreePlan::default();
    if *policy == Attrs::with_kernel_defaults() {
        return Ok(plan);
    }
    let reads = policy.reads_old();
    // The parent of the target: what a new target inherits.
    let (above_planned, above_ids) = inherited(policy, parent, ".")?;
    let old_root = match (reads, target) {
        (true, Some(_)) => read_old(policy, parent, name, name, Kind::Dir)?,
        _ => None,
    };
    plan.root = plan_one(policy, old_root.as_ref(), &above_planned, above_ids);
    let root_ids = ids_of(&plan.root, old_root.as_ref().map_or_else(process_ids, |o| (o.uid, o.gid)));
    let mut ids: HashMap<&str, (u32, u32)> = HashMap::new();
    let mut total = plan.root.bytes();
    let entries: Vec<(&str, Kind)> = tree
        .iter()
        .map(|(path, node)| (path, if matches!(node, Node::Dir { .. }) { Kind::Dir } else { Kind::File }))
        .collect();
    // What each entry replaces, read from several threads (nothing here
    // depends on another entry); then planned in the tree's order, parents
    // before children.
    let found = match target.filter(|_| reads) {
        Some(t) => read_all(policy, t, name, &entries)?,
        None => Vec::new(),
    };
    for (i, &(path, want)) in entries.iter().enumerate() {
        let (parent_rel, entry) = path.rsplit_once('/').unwrap_or(("", path));
        let (parent_planned, parent_ids) = if parent_rel.is_empty() {
            (&plan.root, root_ids)
        } else {
            (
                plan.by_path.get(parent_rel).unwrap_or(&plan.root),
                ids.get(parent_rel).copied().unwrap_or(root_ids),
            )
        };
        let old = match found.get(i) {
            None | Some(Found::New) => None,
            Some(Found::Old { old, kind_unknown: false }) => Some(old),
            // Unlabelled, kind not read: it matters only when the parent
            // has a label (keeping "none" and inheriting differ then).
            Some(Found::Old { old, kind_unknown: true }) => {
                let t = target.expect("found only with a target");
                let same = parent_planned.label().is_none() || {
                    let shown = join(name, path);
                    match parent_rel {
                        "" => same_kind(t, entry, &shown, want)?,
                        rel => same_kind(super::resolve::open_beneath(t, rel)?.as_fd(), entry, &shown, want)?,
                    }
                };
                same.then_some(old)
            }
        };
        let planned = plan_one(policy, old, parent_planned, parent_ids);
        if want == Kind::Dir {
            let own = old.map_or_else(process_ids, |o| (o.uid, o.gid));
            ids.insert(path, ids_of(&planned, own));
        }
        total += planned.bytes();
        if total > MAX_CARRIED_BYTES {
            return Err(Error::Limit {
                what: "bytes of extended attributes carried by one operation",
                limit: MAX_CARRIED_BYTES,
                actual: total,
            });
        }
        if !planned.is_empty() {
            plan.by_path.insert(path.to_owned(), planned);
        }
    }
    Ok(plan)
}

/// [`read_found`] of every entry (relative path, kind wanted) of a new tree
/// in the target `target` (shown as `name`), in order: contiguous runs of
/// entries from several threads, each keeping its last parent directory open.
fn read_all(
    policy: &Attrs,
    target: BorrowedFd<'_>,
    name: &str,
    entries: &[(&str, Kind)],
) -> Result<Vec<Found>> {
    let threads = super::parallel::per_file_threads(entries.len());
    let chunk = entries.len().div_ceil(threads.max(1)).max(1);
    let starts: Vec<usize> = (0..entries.len()).step_by(chunk).collect();
    let done = std::sync::Mutex::new(Vec::with_capacity(starts.len()));
    super::parallel::try_for_each(&starts, threads, |&start| {
        let mut out = Vec::with_capacity(chunk);
        // The directory of the target last opened (`None`: not a directory
        // there, so every name under it is new).
        let mut open: Option<(&str, Option<std::os::fd::OwnedFd>)> = None;
        for &(path, want) in &entries[start..(start + chunk).min(entries.len())] {
            let (parent_rel, entry) = path.rsplit_once('/').unwrap_or(("", path));
            let shown = join(name, path);
            let found = if parent_rel.is_empty() {
                read_found(policy, target, entry, &shown, want)?
            } else {
                if open.as_ref().is_none_or(|(p, _)| *p != parent_rel) {
                    let fd = match super::resolve::open_beneath(target, parent_rel) {
                        Ok(fd) => Some(fd),
                        Err(Error::NotFound { .. } | Error::NotADirectory { .. } | Error::Symlink { .. }) => {
                            None
                        }
                        Err(e) => return Err(e),
                    };
                    open = Some((parent_rel, fd));
                }
                match open.as_ref().and_then(|(_, fd)| fd.as_ref()) {
                    Some(fd) => read_found(policy, fd.as_fd(), entry, &shown, want)?,
                    None => Found::New,
                }
            };
            out.push(found);
        }
        done.lock().unwrap_or_else(|p| p.into_inner()).push((start, out));
        Ok(())
    })?;
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(start, _)| *start);
    Ok(done.into_iter().flat_map(|(_, found)| found).collect())
}

/// Plan the attributes of one file `name` in `dir` (`durasync write`, the
/// one-file path of a sync): the file it replaces, or for a new name the
/// directory `dir` itself.
pub(crate) fn plan_file(policy: &Attrs, dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<Planned> {
    if *policy == Attrs::with_kernel_defaults() {
        return Ok(Planned::default());
    }
    let old = if policy.reads_old() { read_old(policy, dir, name, path, Kind::File)? } else { None };
    match old {
        Some(old) => Ok(plan_one(policy, Some(&old), &Planned::default(), process_ids())),
        None => plan_new_dir(policy, dir, path),
    }
}

/// Plan a new name under the directory `parent` (a directory durasync
/// creates in place, a missing parent of a target; a new file of `write`).
pub(crate) fn plan_new_dir(policy: &Attrs, parent: BorrowedFd<'_>, path: &str) -> Result<Planned> {
    if *policy == Attrs::with_kernel_defaults() {
        return Ok(Planned::default());
    }
    let (above, ids) = inherited(policy, parent, path)?;
    Ok(plan_one(policy, None, &above, ids))
}

/// What a new name directly under the directory `dir` inherits from it:
/// its label (as a plan holding only that) and its ids.
fn inherited(policy: &Attrs, dir: BorrowedFd<'_>, path: &str) -> Result<(Planned, (u32, u32))> {
    if !policy.reads_old() {
        return Ok((Planned::default(), process_ids()));
    }
    let labels_only = Attrs { xattrs: false, acl: false, ..policy.clone() };
    let above = read_old(&labels_only, dir, ".", path, Kind::Dir)?;
    let planned = Planned {
        xattrs: above
            .as_ref()
            .and_then(|o| o.label.clone())
            .map(|l| vec![(CString::new(LABEL_XATTR).expect("no NUL"), l)])
            .unwrap_or_default(),
        ..Planned::default()
    };
    Ok((planned, above.as_ref().map_or_else(process_ids, |o| (o.uid, o.gid))))
}

/// Give the staged inode open as `fd` what `planned` says, before its
/// fsync: `fchown`, then each `fsetxattr`. (`fchmod` follows in the caller.)
/// A refusal (the agent may not give files another owner, or set a
/// `security.*` attribute) names what was asked and why; the caller
/// discards what it staged, so nothing changes.
pub(crate) fn apply(sys: &Sys<'_>, fd: BorrowedFd<'_>, path: &str, planned: &Planned) -> Result<()> {
    if planned.uid.is_some() || planned.gid.is_some() {
        sys.chown(fd, path, planned.uid, planned.gid).map_err(|e| {
            refused(e, || {
                let show = |id: Option<u32>| id.map_or_else(|| "-".to_owned(), |i| i.to_string());
                format!(
                    "owner {}:{} (the root's owner/group policy; it needs root or CAP_CHOWN)",
                    show(planned.uid),
                    show(planned.gid)
                )
            })
        })?;
    }
    for (name, value) in &planned.xattrs {
        // A label the kernel already gave the staged inode (from its
        // directory, under an SELinux policy) is not set again: setting
        // one needs the relabel permissions an agent may lack.
        if name.as_bytes() == LABEL_XATTR.as_bytes() && has_label(fd, value) {
            continue;
        }
        sys.set_xattr(fd, path, name, value).map_err(|e| {
            refused(e, || {
                let name = name.to_string_lossy();
                let why = if name.starts_with("security.") || name.starts_with("trusted.") {
                    "it needs CAP_SYS_ADMIN, or the SELinux policy refused the label"
                } else {
                    "the file system or the agent's rights refused it"
                };
                format!("extended attribute {name} (the root's label/preserve policy; {why})")
            })
        })?;
    }
    Ok(())
}

/// Whether the inode open as `fd` has exactly the label `label`.
fn has_label(fd: BorrowedFd<'_>, label: &[u8]) -> bool {
    let mut buf = vec![0u8; label.len() + 1];
    matches!(rustix::fs::fgetxattr(fd, c"security.selinux", &mut buf[..]), Ok(n) if &buf[..n] == label)
}

/// An `EPERM`/`EACCES`/`ENOTSUP` from setting an attribute, as the refusal
/// it is; other errors pass through.
fn refused(e: Error, what: impl FnOnce() -> String) -> Error {
    use rustix::io::Errno;
    match e {
        Error::Io { path, source, .. }
            if [Errno::PERM, Errno::ACCESS, Errno::OPNOTSUPP]
                .iter()
                .any(|n| source.raw_os_error() == Some(n.raw_os_error())) =>
        {
            Error::AttrsRefused { path, what: what(), source }
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_id_takes_keep_numbers_and_names_and_refuses_the_rest() {
        assert_eq!(parse_id("keep", "owner"), Ok(IdRule::Keep));
        assert_eq!(parse_id("1000", "owner"), Ok(IdRule::Id(1000)));
        assert_eq!(parse_id("root", "owner"), Ok(IdRule::Id(0)));
        assert_eq!(parse_id("root", "group"), Ok(IdRule::Id(0)));
        assert!(parse_id("4294967295", "owner").unwrap_err().contains("not a valid id"));
        assert!(parse_id("99999999999", "group").unwrap_err().contains("not a valid id"));
        let e = parse_id("no-such-user-durasync", "owner").unwrap_err();
        assert!(e.contains("no user named") && e.contains("/etc/passwd"), "{e}");
    }

    #[test]
    fn parse_label_takes_keep_kernel_and_contexts_only() {
        assert_eq!(parse_label("keep"), Ok(LabelRule::Keep));
        assert_eq!(parse_label("kernel"), Ok(LabelRule::Kernel));
        assert_eq!(
            parse_label("system_u:object_r:etc_t:s0"),
            Ok(LabelRule::Fixed("system_u:object_r:etc_t:s0".into()))
        );
        for bad in ["", "etc_t", "a::b", "a b:c:d", "keep it"] {
            assert!(parse_label(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_new_name_takes_its_parents_label_and_ids_under_keep() {
        let policy = Attrs { owner: IdRule::Keep, group: IdRule::Keep, ..Attrs::default() };
        let parent = Planned {
            uid: Some(7),
            gid: Some(8),
            xattrs: vec![(CString::new(LABEL_XATTR).unwrap(), b"u:r:t:s0".to_vec())],
        };
        let p = plan_one(&policy, None, &parent, (7, 8));
        assert_eq!((p.uid, p.gid), (Some(7), Some(8)));
        assert_eq!(p.label(), Some(&b"u:r:t:s0"[..]));
        let old = Old { uid: 1, gid: 2, label: None, carried: Vec::new() };
        let p = plan_one(&policy, Some(&old), &parent, (7, 8));
        assert_eq!(
            (p.uid, p.gid, p.label()),
            (Some(1), Some(2), None),
            "the replaced inode's, even unlabelled"
        );
    }

    #[test]
    fn a_label_already_there_is_recognised_so_it_is_not_set_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let fd = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsFd;
        assert!(!has_label(fd.as_fd(), b"u:r:t:s0"), "no label at all");
        let set =
            rustix::fs::fsetxattr(&fd, "security.selinux", b"u:r:t:s0", rustix::fs::XattrFlags::empty());
        if set.is_err() {
            // security.* needs CAP_SYS_ADMIN: CI runs as root.
            assert!(std::env::var_os("CI").is_none(), "setting security.selinux failed under CI: {set:?}");
            return;
        }
        assert!(has_label(fd.as_fd(), b"u:r:t:s0"));
        assert!(!has_label(fd.as_fd(), b"u:r:t"), "a prefix is another label");
        assert!(!has_label(fd.as_fd(), b"u:r:t:s0:c1"), "a longer one too");
    }

    #[test]
    fn fixed_ids_decide_what_may_stay() {
        let policy = Attrs { owner: IdRule::Id(5), group: IdRule::Id(6), ..Attrs::default() };
        assert!(policy.owner_fits(5, 6) && !policy.owner_fits(5, 7) && !policy.owner_fits(4, 6));
        assert!(policy.owner_differs(5, 7) && !policy.owner_differs(5, 6));
        assert!(!Attrs::default().owner_differs(1, 2));
    }
}
