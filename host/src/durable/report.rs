//! What a successful durable operation reports.

use serde::Serialize;

/// What a mutating operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
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
    /// The lowercase word used in CLI output (`replaced`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Replaced => "replaced",
            Outcome::Removed => "removed",
        }
    }
}

/// The result of a successful mutating operation. Once it is returned the
/// change has reached stable storage (the commit fsync returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Report {
    /// What happened to the target.
    pub outcome: Outcome,
    /// Regular files the new contents hold: written, or carried unchanged
    /// from the old contents by a link (see `sync.rs`).
    pub written: u32,
    /// Regular files of the old contents that the new contents no longer hold.
    pub removed: u32,
}

impl Report {
    pub(crate) fn unchanged() -> Self {
        Report { outcome: Outcome::Unchanged, written: 0, removed: 0 }
    }
}
