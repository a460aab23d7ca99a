//! The mutating calls of interface `fs`, as a typed name.

use core::fmt;

/// Which durable operation a plugin asked for: the mutating methods of WIT
/// resource `dir`, the ones the host records (`durasync run --json`'s
/// `"op"`). Reads (`read-file`, `list-dir`) and `open-dir` change nothing
/// and are not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `sync`: replace a directory atomically.
    Sync,
    /// `write-file`: replace one file atomically.
    WriteFile,
    /// `remove`: durably remove a file or a tree.
    Remove,
    /// `exchange`: the raw `RENAME_EXCHANGE` primitive.
    Exchange,
    /// `fsync`: the raw fsync primitive.
    Fsync,
}

impl Op {
    /// The WIT name (`sync`, `write-file`, …), as the host prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Sync => "sync",
            Op::WriteFile => "write-file",
            Op::Remove => "remove",
            Op::Exchange => "exchange",
            Op::Fsync => "fsync",
        }
    }

    /// Whether the call writes file contents (`sync`, `write-file`).
    pub fn writes_contents(self) -> bool {
        matches!(self, Op::Sync | Op::WriteFile)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_print_their_wit_method_names() {
        let all = [Op::Sync, Op::WriteFile, Op::Remove, Op::Exchange, Op::Fsync];
        let names: alloc::vec::Vec<_> = all.iter().map(|o| o.as_str()).collect();
        assert_eq!(names, ["sync", "write-file", "remove", "exchange", "fsync"]);
        assert!(Op::WriteFile.writes_contents() && !Op::Remove.writes_contents());
    }
}
