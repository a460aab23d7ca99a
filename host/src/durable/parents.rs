//! Creating the missing parents of a target, durably, with the root's
//! owner, group and label (`create_dirs_beneath`): the one place durasync
//! creates directories in place rather than in a staging tree.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::Options;
use super::attrs;
use super::error::{Error, Result, Step};
use super::names::split_rel_path_or_self;
use super::resolve::{open_component, reopen};
use super::sys::{Sys, join};
use super::tree::IMPLIED_DIR_MODE;

/// Like [`open_beneath`](super::open_beneath), but create missing directories (mode 0755) and
/// make their creation durable: each new directory and the directory that
/// first names it are fsynced, deepest first, before this returns.
pub fn create_dirs_beneath(root: BorrowedFd<'_>, rel: &str, opts: &Options<'_>) -> Result<OwnedFd> {
    let parts = split_rel_path_or_self(rel)?;
    let sys = Sys::new(opts.probe);
    let mut chain: Vec<(OwnedFd, String)> = vec![(reopen(root)?, ".".to_owned())];
    let mut first_new = None;
    for part in parts {
        let (parent, parent_path) = chain.last().expect("chain starts with the root");
        let path = join(parent_path, part);
        let fd = match open_component(parent.as_fd(), part, &path) {
            Ok(fd) => fd,
            Err(Error::NotFound { .. }) => {
                first_new.get_or_insert(chain.len());
                match sys.mkdir(parent.as_fd(), part, &path, IMPLIED_DIR_MODE) {
                    // Its owner, label and attributes before the fsyncs below;
                    // refused, the new (empty) directory is removed again.
                    Ok(fd) => {
                        let given = attrs::plan_new_dir(opts.attrs, parent.as_fd(), &path)
                            .and_then(|planned| attrs::apply(&sys, fd.as_fd(), &path, &planned));
                        if let Err(e) = given {
                            let _ = sys.rmdir(parent.as_fd(), part, &path);
                            return Err(e);
                        }
                        fd
                    }
                    // Created meanwhile by someone else: use theirs.
                    Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                        open_component(parent.as_fd(), part, &path)?
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        chain.push((fd, path));
    }
    if let Some(first) = first_new {
        // New entries are durable only once their directories are fsynced:
        // the new ones deepest first, then the old directory naming the first.
        for (fd, path) in chain[first - 1..].iter().rev() {
            sys.fsync_dir(fd.as_fd(), path, Step::FsyncDir)?;
        }
    }
    Ok(chain.pop().expect("chain starts with the root").0)
}
