//! What a manifest grants a plugin: named roots, each an open directory
//! with an access level, and the checks every call starts with.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use super::error::{Error, Result};
use crate::durable::{Attrs, Layout};

/// How a plugin may use a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write.
    ReadWrite,
    /// Read only: every mutating call fails with `read-only`.
    ReadOnly,
}

impl Access {
    /// `rw` or `ro`, as written in a manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadWrite => "rw",
            Access::ReadOnly => "ro",
        }
    }
}

/// One root granted to a run: an open directory, its access, and whether
/// files may carry setuid, setgid and sticky bits there.
#[derive(Debug, Clone)]
pub struct Grant {
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) access: Access,
    pub(crate) special_modes: bool,
    /// What every inode written there gets besides bytes and mode.
    pub(crate) attrs: Arc<Attrs>,
    /// How a sync replaces a directory there.
    pub(crate) layout: Layout,
}

impl Grant {
    /// Open the directory at `path` (following links in the operator's own
    /// path: the operator chose it) and grant it with `access`.
    pub fn open(path: &Path, access: Access, special_modes: bool) -> std::io::Result<Grant> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Grant {
            fd: Arc::new(fd),
            access,
            special_modes,
            attrs: Arc::new(Attrs::default()),
            layout: Layout::default(),
        })
    }

    /// The root's owner, group, label and preserve policy (the operator's:
    /// `[roots.NAME] owner`, `group`, `label`, `preserve`).
    pub fn with_attrs(mut self, attrs: Attrs) -> Grant {
        self.attrs = Arc::new(attrs);
        self
    }

    /// How a sync replaces a directory there (the operator's `[roots.NAME]
    /// layout`).
    pub fn with_layout(mut self, layout: Layout) -> Grant {
        self.layout = layout;
        self
    }

    /// The access it grants.
    pub fn access(&self) -> Access {
        self.access
    }
}

/// A `dir` handle: a directory fd beneath a granted root, where it is, and
/// what the grant allows through it.
#[derive(Debug)]
pub struct Dir {
    /// The root's name (reports, messages).
    pub(crate) root: String,
    /// The directory's path relative to the root (`""` for the root).
    pub(crate) rel: String,
    /// How many levels below the root it is (components of `rel`).
    pub(crate) depth: usize,
    /// The directory itself; every guest path is resolved beneath it.
    pub(crate) fd: OwnedFd,
    /// Whether the plugin may write through it.
    pub(crate) access: Access,
    /// Whether files may get setuid, setgid and sticky bits.
    pub(crate) special_modes: bool,
    /// The root's policy for the inodes written through it.
    pub(crate) attrs: Arc<Attrs>,
    /// How a sync replaces a directory through it.
    pub(crate) layout: Layout,
}

impl Dir {
    /// The root's name.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Its path relative to the root (`""` for the root).
    pub fn path(&self) -> &str {
        &self.rel
    }

    /// `path` (relative to this handle) as a path from the root.
    pub(crate) fn full(&self, path: &str) -> String {
        join(&self.rel, path)
    }

    /// The permission check every mutating call starts with.
    pub(crate) fn writable(&self) -> Result<()> {
        match self.access {
            Access::ReadWrite => Ok(()),
            Access::ReadOnly => Err(Error::ReadOnly(format!(
                "root `{}` is granted read-only; the manifest must say access = \"rw\" to write to it",
                self.root
            ))),
        }
    }

    /// A handle whose directory was removed (by the plugin itself through
    /// another handle, or by someone else) is `not-found`, not an I/O
    /// error about the lock file the core would fail to create there.
    pub(crate) fn still_there(&self) -> Result<()> {
        match rustix::fs::fstat(self.fd.as_fd()) {
            Ok(st) if st.st_nlink == 0 => Err(Error::NotFound(format!(
                "the directory `{}` of this handle was removed; open it again",
                shown(&self.root, &self.rel)
            ))),
            _ => Ok(()),
        }
    }
}

/// `root:path` as reports and messages show it.
pub(crate) fn shown(root: &str, rel: &str) -> String {
    if rel.is_empty() { format!("{root}:.") } else { format!("{root}:{rel}") }
}

/// `b` beneath `a` (`""` and `"."` name `a` itself).
pub(crate) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty() || b == ".") {
        (_, true) => a.to_owned(),
        (true, false) => b.to_owned(),
        (false, false) => format!("{a}/{b}"),
    }
}

/// How many components a checked relative path has (`""`/`"."`: none).
pub(crate) fn components(path: &str) -> usize {
    if path.is_empty() || path == "." { 0 } else { path.split('/').count() }
}
