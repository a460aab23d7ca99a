//! WIT `file`: one regular file of a directory `sync`.

use alloc::string::String;
use alloc::vec::Vec;

/// The default mode of a [`File`]: readable by everyone, writable by the owner.
pub const DEFAULT_MODE: u32 = 0o644;

/// One regular file of a directory `sync` (WIT `file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Path relative to the synced directory: plain names joined by `/`.
    pub name: String,
    /// The exact bytes the file will hold.
    pub contents: Vec<u8>,
    /// Permission bits, applied exactly (the host's umask does not change them).
    pub mode: u32,
}

impl File {
    /// A file named `name` holding `contents`, with mode [`DEFAULT_MODE`] (0644).
    pub fn new(name: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        File { name: name.into(), contents: contents.into(), mode: DEFAULT_MODE }
    }

    /// The same file with permission bits `mode` (`0o600`, `0o755`, …).
    #[must_use]
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_has_the_default_mode_until_one_is_given() {
        let f = File::new("a", *b"x");
        assert_eq!((f.name.as_str(), f.contents.as_slice(), f.mode), ("a", &b"x"[..], 0o644));
        assert_eq!(f.mode(0o600).mode, 0o600);
    }
}
