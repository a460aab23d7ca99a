//! Reading a directory in the symlink layout (see [`super::layout`]): which
//! generation is current, and following the layout's own links — and no
//! other — into it. What readers and recovery need, apart from the code
//! that changes such a directory.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::error::{Error, Result, Step};
use super::names::{DATA_LINK, entry_link, is_gen};
use super::sys::{Kind, join, kind_at, open_dir};

/// Whether the directory `name` in `parent` is in the symlink layout (it
/// holds `.durasync-data`). A missing or non-directory target is not.
pub(crate) fn is_linked(parent: BorrowedFd<'_>, name: &str) -> Result<bool> {
    if kind_at(parent, name, name)?.0 != Kind::Dir {
        return Ok(false);
    }
    let dir = open_dir(parent, name, name)?;
    Ok(kind_at(dir.as_fd(), DATA_LINK, &join(name, DATA_LINK))?.0 != Kind::Missing)
}

/// What the link `name` in `dir` holds; `None` when it is not a link, is
/// missing, or holds a name that is not UTF-8.
pub(crate) fn read_link(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<Option<String>> {
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => Ok(target.into_string().ok()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::io(Step::Read, path, e)),
    }
}

/// The current generation of `dir` (shown as `shown`): the name
/// `.durasync-data` holds, checked to be a generation directory beside it.
/// `None` when `dir` is not in the layout.
pub(crate) fn current_name(dir: BorrowedFd<'_>, shown: &str) -> Result<Option<String>> {
    let data_path = join(shown, DATA_LINK);
    match kind_at(dir, DATA_LINK, &data_path)?.0 {
        Kind::Missing => return Ok(None),
        Kind::Symlink => {}
        other => {
            return Err(Error::Layout {
                path: data_path,
                reason: format!("is a {}, not a link", kind_name(other)),
            });
        }
    }
    match read_link(dir, DATA_LINK, &data_path)? {
        Some(g) if is_gen(&g) && kind_at(dir, &g, &join(shown, &g))?.0 == Kind::Dir => Ok(Some(g)),
        Some(g) => Err(Error::Layout {
            path: data_path,
            reason: format!("names {g:?}, which is not a generation directory beside it"),
        }),
        None => Err(Error::Layout { path: data_path, reason: "holds a name that is not UTF-8".into() }),
    }
}

/// The current generation of `dir` (shown as `shown`), open, when `dir` is
/// in the symlink layout: what a reader of `dir` sees.
pub(crate) fn current_generation(dir: BorrowedFd<'_>, shown: &str) -> Result<Option<OwnedFd>> {
    match current_name(dir, shown)? {
        Some(g) => open_dir(dir, &g, &join(shown, &g)).map(Some),
        None => Ok(None),
    }
}

/// When the entry `name` of `dir` is the layout's link to it
/// (`name -> .durasync-data/name` in a directory in the layout): the
/// current generation, in which the caller opens `name` instead. Any other
/// link is `None`, and stays refused by the caller.
pub(crate) fn hop(dir: BorrowedFd<'_>, name: &str, path: &str) -> Result<Option<OwnedFd>> {
    if read_link(dir, name, path)?.as_deref() != Some(entry_link(name).as_str()) {
        return Ok(None);
    }
    current_generation(dir, path)
}

/// How a kind reads in messages.
pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Missing => "missing entry",
        Kind::File => "regular file",
        Kind::Dir => "directory",
        Kind::Symlink => "symbolic link",
        Kind::Other(what) => what,
    }
}
