//! `durasync doctor`: what a target's place can do, checked before a sync
//! needs it. Each check says what it found; [`Examination::verdict`] turns
//! them into one line: whether a sync of this target works here.
//!
//! Everything is read (`fstatfs`, `fstat`, `fstatvfs`, `/proc/self/mountinfo`,
//! `/sys/fs/selinux`, the target's `security.selinux`) except one probe:
//! in a staging directory beside the target (a reserved name, so recovery
//! removes it if the probe is cut short), two empty directories are
//! exchanged with `renameat2(RENAME_EXCHANGE)` and one is renamed with
//! `RENAME_NOREPLACE`, under the parent's lock, through the core's one
//! door for changes. The target itself is never touched: where a swap of
//! the target would fail for reasons of its own (a mount point, a directory
//! of an overlayfs lower layer), that is read from `mountinfo`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::Options;
use super::flush::{self, Flush};
use super::fsinfo::{self, FsKind};
use super::layout::Layout;
use super::lock::lock;
use super::names::{Leftover, leftover_name};
use super::sys::{READ_FLAGS, Sys};

/// The most entries of a target counted for its size; a larger target is
/// reported as "at least" this.
pub const MAX_COUNTED_ENTRIES: u64 = 1_000_000;

/// What the target is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A directory (what `sync` replaces).
    Dir,
    /// A regular file (what `write` replaces).
    File,
    /// Nothing yet: a sync creates it.
    Missing,
    /// Anything else (a link, a device): durasync refuses it.
    Other,
}

/// What one check found: fine, worth knowing, or a sync will fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Fine.
    Ok(String),
    /// Works, with a caveat the operator should know.
    Warn(String),
    /// A sync of this target fails here (or loses the guarantee).
    Fail(String),
}

impl Finding {
    /// The text, whatever the severity.
    pub fn text(&self) -> &str {
        match self {
            Finding::Ok(t) | Finding::Warn(t) | Finding::Fail(t) => t,
        }
    }

    /// `ok`, `warn` or `fail`.
    pub fn severity(&self) -> &'static str {
        match self {
            Finding::Ok(_) => "ok",
            Finding::Warn(_) => "warn",
            Finding::Fail(_) => "fail",
        }
    }
}

/// Everything `durasync doctor` says of one target.
#[derive(Debug, Clone)]
pub struct Examination {
    /// The target, as given.
    pub path: PathBuf,
    /// What it is now.
    pub kind: TargetKind,
    /// Each check, in a fixed order: `(name, finding)`.
    pub checks: Vec<(&'static str, Finding)>,
}

impl Examination {
    /// `fail` if any check fails, else `warn` if any warns, else `ok`.
    pub fn verdict(&self) -> &'static str {
        let worst = |s: &str| self.checks.iter().any(|(_, f)| f.severity() == s);
        if worst("fail") {
            "fail"
        } else if worst("warn") {
            "warn"
        } else {
            "ok"
        }
    }

    /// One line: the verdict, the target and the reasons of the worst
    /// findings (or the file system, when all is well).
    pub fn summary(&self) -> String {
        let verdict = self.verdict();
        let reasons: Vec<&str> =
            self.checks.iter().filter(|(_, f)| f.severity() == verdict).map(|(_, f)| f.text()).collect();
        let shown = if verdict == "ok" {
            self.checks.iter().find(|(n, _)| *n == "file system").map_or("", |(_, f)| f.text()).to_owned()
        } else {
            reasons.join("; ")
        };
        format!("{verdict}: {}: {shown}", self.path.display())
    }
}

/// Examine the target `path` (absolute or relative to the working
/// directory): a directory `sync` replaces or a file `write` replaces,
/// from its parent. Never fails: what cannot be checked is a finding.
pub fn examine(path: &Path) -> Examination {
    examine_with(path, Layout::Exchange)
}

/// [`examine`] for a sync in `layout` (a target already in the symlink
/// layout is examined in it whatever `layout` says: it stays in it).
pub fn examine_with(path: &Path, layout: Layout) -> Examination {
    let (parent, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(p), Some(n)) => (if p.as_os_str().is_empty() { Path::new(".") } else { p }, n),
        _ => {
            let checks =
                vec![("target", Finding::Fail("not a path durasync can sync to (no file name)".into()))];
            return Examination { path: path.to_owned(), kind: TargetKind::Other, checks };
        }
    };
    examine_in(path, parent, Some(name), layout)
}

/// Examine a plugin's root `root`: the directory its targets are synced
/// into (a target is an entry below it, never the root itself), whose
/// syncs use `layout` (the manifest's `[roots.NAME] layout`).
pub fn examine_root(root: &Path, layout: Layout) -> Examination {
    examine_in(root, root, None, layout)
}

/// The checks for `name` in `parent` (a target), or for `parent` itself as
/// the place targets are synced into (`name` = `None`).
fn examine_in(shown: &Path, parent: &Path, name: Option<&str>, layout: Layout) -> Examination {
    let mut checks = Vec::new();
    let parent_fd =
        match rustix::fs::open(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let what = match name {
                    Some(_) => format!(
                        "its parent {} cannot be opened: {e} (a sync creates the target, not its parent)",
                        parent.display()
                    ),
                    None => format!("the root {} cannot be opened: {e}", parent.display()),
                };
                checks.push(("parent", Finding::Fail(what)));
                return Examination { path: shown.to_owned(), kind: TargetKind::Missing, checks };
            }
        };
    let dir = parent_fd.as_fd();
    let target = name.map(|n| rustix::fs::statat(dir, n, AtFlags::SYMLINK_NOFOLLOW).ok());
    let kind = match &target {
        None => TargetKind::Dir,
        Some(None) => TargetKind::Missing,
        Some(Some(st)) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Directory => TargetKind::Dir,
            rustix::fs::FileType::RegularFile => TargetKind::File,
            _ => TargetKind::Other,
        },
    };
    match &target {
        Some(st) => checks.push(("target", target_finding(kind, st.as_ref()))),
        None => checks.push(("root", root_finding(dir))),
    }
    let linked = layout == Layout::Symlink
        || name.is_some_and(|n| kind == TargetKind::Dir && super::linked::is_linked(dir, n).unwrap_or(false));
    if linked {
        checks.push(("layout", layout_finding(dir, name, kind)));
    }
    let fs = FsKind::of(dir);
    let mount = Mount::of(dir);
    checks.push(("file system", fs_finding(fs, mount.as_ref())));
    if name.is_some() {
        let finding = mount_point_finding(shown, kind, mount.as_ref());
        checks.push(("mount point", if linked { never_moved(finding) } else { finding }));
    }
    if let Some(finding) = overlay_finding(shown, kind, name.is_none(), mount.as_ref()) {
        checks.push(("overlayfs", if linked { never_moved(finding) } else { finding }));
    }
    if linked {
        checks.push(("links and rename", probe_links(dir, &parent.display().to_string())));
    } else {
        checks.push(("renameat2", probe_renames(dir, &parent.display().to_string())));
    }
    checks.push(("write permission", writable_finding(dir, parent)));
    let (files, bytes) = match name {
        Some(n) => size_of(dir, n, kind),
        None => size_of(dir, ".", TargetKind::Dir),
    };
    checks.push(("free space", space_finding(dir, files, bytes)));
    checks.push(("syncfs errors", syncfs_finding()));
    checks.push(("flush", flush_finding(dir, files)));
    let inode = name.unwrap_or(".");
    if kind != TargetKind::Missing {
        checks.push(("O_NOATIME", noatime_finding(dir, inode)));
    }
    checks.push(("SELinux", selinux_finding(dir, inode, kind)));
    Examination { path: shown.to_owned(), kind, checks }
}

/// A finding about moving the target (a mount point, a lower-layer
/// directory), for a sync in the symlink layout, which never moves it.
fn never_moved(finding: Finding) -> Finding {
    match finding {
        Finding::Fail(why) | Finding::Warn(why) => {
            Finding::Ok(format!("the symlink layout never moves the target, so this is no obstacle: {why}"))
        }
        ok => ok,
    }
}

/// In the symlink layout: a target already in it, or one it can take over
/// (regular files only: `layout.rs`, "Taking over a directory").
fn layout_finding(dir: BorrowedFd<'_>, name: Option<&str>, kind: TargetKind) -> Finding {
    let Some(name) = name else {
        return Finding::Ok(
            "the symlink layout: each target below the root keeps links into generations".into(),
        );
    };
    match kind {
        TargetKind::Missing => {
            return Finding::Ok("the symlink layout: a sync creates the target in it".into());
        }
        TargetKind::Dir => {}
        _ => return Finding::Fail("the symlink layout needs a directory".into()),
    }
    if super::linked::is_linked(dir, name).unwrap_or(false) {
        return Finding::Ok("in the symlink layout".into());
    }
    let Ok(target) = super::sys::open_dir(dir, name, name) else {
        return Finding::Warn("the target cannot be opened to see whether it can be taken over".into());
    };
    let names = super::walk::list_own_names(target.as_fd(), name).unwrap_or_default();
    let blocking: Vec<String> = names
        .into_iter()
        .filter(|n| !super::names::is_reserved(n))
        .filter(|n| {
            super::sys::kind_at(target.as_fd(), n, n).map_or(true, |(k, _)| k != super::sys::Kind::File)
        })
        .collect();
    if blocking.is_empty() {
        Finding::Ok("not in the symlink layout yet: its files are taken over at the first sync".into())
    } else {
        Finding::Fail(format!(
            "not in the symlink layout, and it cannot be taken over: {} is not a regular file (a directory cannot be replaced by a link atomically)",
            blocking.join(", ")
        ))
    }
}

/// What the symlink layout needs of the file system: a symbolic link and a
/// plain rename over another one, tried in a staging directory beside the
/// target (removed again).
fn probe_links(dir: BorrowedFd<'_>, dir_path: &str) -> Finding {
    let sys = Sys::new(&super::NoProbe);
    let Ok(_lock) = lock(&sys, dir, dir_path) else {
        return Finding::Fail("the parent's lock file cannot be created there (no write permission?)".into());
    };
    let stage = leftover_name(Leftover::Stage);
    let Ok(stage_fd) = sys.mkdir(dir, &stage, &stage, 0o700) else {
        return Finding::Fail("no directory can be created beside the target".into());
    };
    let s = stage_fd.as_fd();
    let result = (|| -> Result<(), String> {
        sys.symlink(s, "a", "a", "x").map_err(|e| format!("symbolic links refused ({})", errno_of(&e)))?;
        sys.symlink(s, "b", "b", "y").map_err(|e| format!("symbolic links refused ({})", errno_of(&e)))?;
        sys.rename(s, "b", "b", "a", "a", true)
            .map_err(|e| format!("a rename over a link refused ({})", errno_of(&e)))?;
        Ok(())
    })();
    for name in ["a", "b"] {
        let _ = sys.unlink(s, name, name);
    }
    drop(stage_fd);
    let _ = sys.rmdir(dir, &stage, &stage);
    match result {
        Ok(()) => Finding::Ok(
            "symbolic links and a plain rename over one work here (all the symlink layout needs)".into(),
        ),
        Err(e) => Finding::Fail(format!("{e}: the symlink layout cannot work here")),
    }
}

fn root_finding(dir: BorrowedFd<'_>) -> Finding {
    match rustix::fs::fstat(dir) {
        Ok(st) => Finding::Ok(format!(
            "a directory (owner {}:{}, mode {:o}); its entries are the targets",
            st.st_uid,
            st.st_gid,
            st.st_mode & 0o7777
        )),
        Err(e) => Finding::Warn(format!("cannot be read: {e}")),
    }
}

fn target_finding(kind: TargetKind, st: Option<&rustix::fs::Stat>) -> Finding {
    let owner =
        |st: &rustix::fs::Stat| format!("owner {}:{}, mode {:o}", st.st_uid, st.st_gid, st.st_mode & 0o7777);
    match (kind, st) {
        (TargetKind::Dir, Some(st)) => Finding::Ok(format!("a directory ({})", owner(st))),
        (TargetKind::File, Some(st)) => Finding::Ok(format!(
            "a regular file ({}; `sync` needs a directory, `write` replaces a file)",
            owner(st)
        )),
        (TargetKind::Missing, _) => Finding::Ok("missing: a sync creates it".into()),
        _ => Finding::Fail(
            "neither a directory nor a regular file (a link or a device): durasync refuses it".into(),
        ),
    }
}

fn fs_finding(fs: Option<FsKind>, mount: Option<&Mount>) -> Finding {
    let module = mount.map_or_else(String::new, |m| format!(", mounted as {}", m.fs_type));
    match fs {
        None => Finding::Warn("its file system cannot be identified (fstatfs failed)".into()),
        Some(FsKind::Tmpfs) => Finding::Warn(format!("tmpfs{module}: nothing on it survives a power loss")),
        Some(k @ (FsKind::Ext4 | FsKind::Xfs | FsKind::Btrfs)) => Finding::Ok(format!("{k}{module}")),
        Some(k @ (FsKind::Nfs | FsKind::Fuse | FsKind::Cifs | FsKind::NineP | FsKind::Overlayfs)) => {
            Finding::Warn(format!(
                "{k}{module}: durasync's guarantee holds where its renames and fsyncs do what they say; this file system is not one durasync is tested to be durable on"
            ))
        }
        Some(k) => Finding::Warn(format!("{k}{module}: not a file system durasync is tested on")),
    }
}

fn mount_point_finding(path: &Path, kind: TargetKind, mount: Option<&Mount>) -> Finding {
    let Some(m) = mount else { return Finding::Warn("/proc/self/mountinfo cannot be read".into()) };
    let canonical = std::fs::canonicalize(path).ok();
    let is_mount = kind != TargetKind::Missing
        && canonical.as_deref().is_some_and(|c| m.all_points.iter().any(|p| p == c));
    if is_mount {
        Finding::Fail(
            "the target is a mount point: a swap onto it fails with EBUSY; mount its parent instead (a hostPath of the directory that holds it), or use the symlink layout (layout = \"symlink\"), which never moves the target".into(),
        )
    } else {
        Finding::Ok("not a mount point".into())
    }
}

fn overlay_finding(path: &Path, kind: TargetKind, root: bool, mount: Option<&Mount>) -> Option<Finding> {
    let m = mount?;
    if m.fs_type != "overlay" || kind != TargetKind::Dir {
        return None;
    }
    let canonical = std::fs::canonicalize(path).ok()?;
    let rel = canonical.strip_prefix(&m.point).ok()?;
    let lower = m.option("lowerdir").map(split_lowerdirs).unwrap_or_default();
    let in_lower = lower.iter().find(|l| std::fs::symlink_metadata(Path::new(l).join(rel)).is_ok());
    let redirect = m.option("redirect_dir").is_some_and(|v| v == "on" || v == "follow");
    Some(match in_lower {
        Some(layer) if root => Finding::Warn(format!(
            "the root comes from the lower layer {layer}: a target below it that also does cannot be swapped \
             (overlayfs refuses to move a lower-layer directory: EXDEV) unless the root uses the symlink layout; \
             new targets can"
        )),
        Some(layer) if !redirect => Finding::Fail(format!(
            "the target is a directory of the lower layer {layer}: overlayfs refuses to move it (EXDEV), so a sync fails; \
             the symlink layout (layout = \"symlink\") takes it over, or write it from an upper-layer directory or a volume"
        )),
        Some(layer) => Finding::Warn(format!(
            "the target is a directory of the lower layer {layer}; redirect_dir lets overlayfs move it"
        )),
        None => Finding::Ok("the target is in the upper layer".into()),
    })
}

/// `lowerdir=a:b\:c` → `["a", "b:c"]` (a colon in a path is escaped).
fn split_lowerdirs(value: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.last_mut().unwrap().extend(chars.next()),
            ':' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// The exchange and no-replace renames, on two empty directories in a
/// fresh staging directory of `dir`, under its lock; everything made is
/// removed again.
fn probe_renames(dir: BorrowedFd<'_>, dir_path: &str) -> Finding {
    let opts = Options::default();
    let sys = Sys::new(opts.probe);
    let Ok(_lock) = lock(&sys, dir, dir_path) else {
        return Finding::Fail("the parent's lock file cannot be created there (no write permission?)".into());
    };
    let stage = leftover_name(Leftover::Stage);
    let Ok(stage_fd) = sys.mkdir(dir, &stage, &stage, 0o700) else {
        return Finding::Fail("no directory can be created beside the target".into());
    };
    let s = stage_fd.as_fd();
    let result = (|| -> Result<(), String> {
        sys.mkdir(s, "a", "a", 0o700).map_err(|e| e.to_string())?;
        sys.mkdir(s, "b", "b", 0o700).map_err(|e| e.to_string())?;
        sys.exchange(s, "a", "a", s, "b", "b").map_err(|e| {
            format!("RENAME_EXCHANGE refused ({}): a sync of an existing target fails here", errno_of(&e))
        })?;
        sys.rename(s, "a", "a", "c", "c", false).map_err(|e| {
            format!("RENAME_NOREPLACE refused ({}): a sync of a new target fails here", errno_of(&e))
        })?;
        Ok(())
    })();
    for name in ["a", "b", "c"] {
        let _ = sys.rmdir(s, name, name);
    }
    drop(stage_fd);
    let _ = sys.rmdir(dir, &stage, &stage);
    match result {
        Ok(()) => Finding::Ok("RENAME_EXCHANGE and RENAME_NOREPLACE work here".into()),
        Err(e) => Finding::Fail(e),
    }
}

fn errno_of(e: &super::Error) -> String {
    match e {
        super::Error::Io { source, .. } => source.raw_os_error().map_or_else(
            || source.to_string(),
            |n| format!("{:?}, {source}", rustix::io::Errno::from_raw_os_error(n)),
        ),
        other => other.to_string(),
    }
}

fn writable_finding(dir: BorrowedFd<'_>, parent: &Path) -> Finding {
    match rustix::fs::accessat(
        dir,
        ".",
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        AtFlags::EACCESS,
    ) {
        Ok(()) => Finding::Ok(format!("{} is writable", parent.display())),
        Err(e) => Finding::Fail(format!("{} is not writable: {e}", parent.display())),
    }
}

/// Files and bytes of the target now (at most [`MAX_COUNTED_ENTRIES`]).
fn size_of(dir: BorrowedFd<'_>, name: &str, kind: TargetKind) -> (u64, u64) {
    match kind {
        TargetKind::File => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_or((1, 0), |st| (1, st.st_size as u64)),
        TargetKind::Dir => {
            let (mut files, mut bytes) = (0u64, 0u64);
            let mut stack = vec![PathBuf::from(name)];
            let base = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir)));
            while let Some(rel) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(base.join(&rel)) else { continue };
                for e in entries.flatten() {
                    files += 1;
                    if files >= MAX_COUNTED_ENTRIES {
                        return (files, bytes);
                    }
                    match e.file_type() {
                        Ok(t) if t.is_dir() => stack.push(rel.join(e.file_name())),
                        Ok(t) if t.is_file() => bytes += e.metadata().map_or(0, |m| m.len()),
                        _ => {}
                    }
                }
            }
            (files, bytes)
        }
        _ => (0, 0),
    }
}

fn space_finding(dir: BorrowedFd<'_>, files: u64, bytes: u64) -> Finding {
    let Ok(st) = rustix::fs::fstatvfs(dir) else {
        return Finding::Warn("free space cannot be read (fstatvfs failed)".into());
    };
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let inodes = st.f_favail;
    // A full replace writes a whole new tree beside the old one before the
    // old one is removed.
    let need =
        format!("a full replace of the target now needs about {bytes} bytes and {files} inodes beside it");
    if free < bytes {
        Finding::Fail(format!("{free} bytes free: {need}"))
    } else if st.f_files > 0 && inodes < files {
        Finding::Fail(format!("{inodes} inodes free: {need}"))
    } else if st.f_files == 0 {
        Finding::Ok(format!("{free} bytes free, inodes not limited by this file system ({need})"))
    } else {
        Finding::Ok(format!("{free} bytes and {inodes} inodes free ({need})"))
    }
}

fn syncfs_finding() -> Finding {
    if fsinfo::kernel_reports_syncfs_errors() {
        Finding::Ok("the kernel's syncfs reports write-back errors (Linux 5.8 or later)".into())
    } else {
        Finding::Warn("the kernel's syncfs does not report write-back errors (before Linux 5.8): `auto` uses fsync, `--flush syncfs` is refused".into())
    }
}

fn flush_finding(dir: BorrowedFd<'_>, files: u64) -> Finding {
    let writes = usize::try_from(files).unwrap_or(usize::MAX).max(1);
    match flush::choose(Flush::Auto, dir, ".", writes, super::DEFAULT_THREADS) {
        Ok(c) => Finding::Ok(format!(
            "a full replace with `auto` would use {} ({})",
            if c.syncfs { "syncfs" } else { "fsync" },
            c.why
        )),
        Err(e) => Finding::Warn(format!("`auto` cannot choose: {e}")),
    }
}

fn noatime_finding(dir: BorrowedFd<'_>, name: &str) -> Finding {
    let opened: rustix::io::Result<OwnedFd> =
        rustix::fs::openat(dir, name, READ_FLAGS | OFlags::NOATIME, Mode::empty());
    match opened {
        Ok(_) => Finding::Ok("reads need no access-time update (O_NOATIME allowed)".into()),
        Err(rustix::io::Errno::PERM) => Finding::Warn(
            "O_NOATIME is refused (not the target's owner, no CAP_FOWNER): durasync's reads may set access times".into(),
        ),
        Err(e) => Finding::Warn(format!("the target cannot be opened for reading: {e}")),
    }
}

fn selinux_finding(dir: BorrowedFd<'_>, name: &str, kind: TargetKind) -> Finding {
    let mode = match std::fs::read_to_string("/sys/fs/selinux/enforce") {
        Ok(v) if v.trim() == "1" => "enforcing",
        Ok(_) => "permissive",
        Err(_) => "off (no selinuxfs)",
    };
    let label = if kind == TargetKind::Missing {
        None
    } else {
        let mut buf = vec![0u8; 4096];
        let path = format!("/proc/self/fd/{}/{name}", std::os::fd::AsRawFd::as_raw_fd(&dir));
        rustix::fs::lgetxattr(path.as_str(), "security.selinux", &mut buf)
            .ok()
            .map(|n| String::from_utf8_lossy(&buf[..n]).trim_end_matches('\0').to_owned())
    };
    match label {
        Some(l) => Finding::Ok(format!("{mode}; the target's label is {l}")),
        None => Finding::Ok(format!("{mode}; the target has no label")),
    }
}

/// The mount that holds a directory, from `/proc/self/mountinfo`.
struct Mount {
    /// Its mount point.
    point: PathBuf,
    /// The file system type as mounted (`ext4`, `overlay`, `nfs4`).
    fs_type: String,
    /// The super-block options.
    options: String,
    /// Every mount point of the namespace (to tell whether a path is one).
    all_points: Vec<PathBuf>,
}

impl Mount {
    fn of(dir: BorrowedFd<'_>) -> Option<Mount> {
        // By path, not by device: btrfs gives each subvolume's files an
        // anonymous device that mountinfo does not show.
        let info = fsinfo::read_mountinfo()?;
        let dir_path =
            std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir))).ok()?;
        let mut all_points = Vec::new();
        let mut best: Option<Mount> = None;
        for line in info.lines() {
            let Some((head, tail)) = line.split_once(" - ") else { continue };
            let fields: Vec<&str> = head.split(' ').collect();
            let Some(point) = fields.get(4).map(|p| PathBuf::from(unescape_octal(p))) else { continue };
            all_points.push(point.clone());
            if !dir_path.starts_with(&point) {
                continue;
            }
            let mut t = tail.split(' ');
            let fs_type = t.next().unwrap_or("").to_owned();
            let options = t.nth(1).unwrap_or("").to_owned();
            // The longest matching mount point holds it; of mounts on the
            // same point, the later one (it hides the earlier).
            if best.as_ref().is_none_or(|b| point.as_os_str().len() >= b.point.as_os_str().len()) {
                best = Some(Mount { point, fs_type, options, all_points: Vec::new() });
            }
        }
        best.map(|b| Mount { all_points, ..b })
    }

    fn option(&self, key: &str) -> Option<&str> {
        self.options.split(',').find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowerdirs_split_at_unescaped_colons() {
        assert_eq!(split_lowerdirs("/a:/b\\:c:/d"), vec!["/a", "/b:c", "/d"]);
        assert_eq!(split_lowerdirs(""), Vec::<String>::new());
    }

    #[test]
    fn mount_points_unescape_their_octal_escapes() {
        assert_eq!(unescape_octal("/mnt/with\\040space"), "/mnt/with space");
        assert_eq!(unescape_octal("/plain"), "/plain");
        assert_eq!(unescape_octal("/end\\04"), "/end\\04");
    }

    #[test]
    fn a_writable_directory_of_this_machine_examines_without_failing_and_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("t")).unwrap();
        std::fs::write(tmp.path().join("t/f"), "x").unwrap();
        let e = examine(&tmp.path().join("t"));
        assert_eq!(e.kind, TargetKind::Dir);
        let probe = e.checks.iter().find(|(n, _)| *n == "renameat2").unwrap();
        assert!(matches!(probe.1, Finding::Ok(_)), "{e:?}");
        let mut left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec![".durasync.lock", "t"], "only the lock file is left beside the target");
        let missing = examine(&tmp.path().join("nope"));
        assert_eq!(missing.kind, TargetKind::Missing);
        let orphan = examine(&tmp.path().join("no/such/dir"));
        assert_eq!(orphan.verdict(), "fail");
        assert!(orphan.summary().contains("cannot be opened"), "{}", orphan.summary());
    }
}
