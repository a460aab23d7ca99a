//! WIT `outcome` and `report`: what a successful mutating call did.

use core::fmt;

/// What a mutating call did (WIT `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The target already held exactly the requested contents: nothing was
    /// written and nothing was fsynced.
    Unchanged,
    /// The target did not exist and now does.
    Created,
    /// The target existed and was atomically replaced.
    Replaced,
    /// The target existed and was durably removed.
    Removed,
}

impl Outcome {
    /// The lowercase WIT name the host prints (`unchanged`, `created`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Replaced => "replaced",
            Outcome::Removed => "removed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a successful mutating call (WIT `report`). When it is
/// returned the change has reached stable storage (the commit fsync
/// returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// What happened to the target.
    pub outcome: Outcome,
    /// Regular files the new contents hold: written, or carried unchanged
    /// from the old contents.
    pub written: u32,
    /// Regular files of the old contents that the new contents no longer hold.
    pub removed: u32,
}

impl Report {
    /// Nothing was changed: [`Outcome::Unchanged`], no files.
    pub fn unchanged() -> Self {
        Report { outcome: Outcome::Unchanged, written: 0, removed: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn outcomes_print_their_lowercase_wit_names() {
        let all = [Outcome::Unchanged, Outcome::Created, Outcome::Replaced, Outcome::Removed];
        let words: alloc::vec::Vec<_> = all.iter().map(|o| format!("{o}")).collect();
        assert_eq!(words, ["unchanged", "created", "replaced", "removed"]);
        assert_eq!(Report::unchanged().outcome, Outcome::Unchanged);
    }
}
