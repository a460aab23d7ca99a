//! The record of every durable operation a plugin asked for, as `durasync
//! run` reports it, and what a dry run would change.

use serde::Serialize;

use crate::durable::{Outcome, Plan, Report};

/// One durable operation a plugin asked for, as reported by `durasync run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operation {
    /// The root's name.
    pub root: String,
    /// The path beneath the root (`a <-> b` for an exchange).
    pub path: String,
    /// `sync`, `write-file`, `remove`, `exchange` or `fsync`.
    pub op: &'static str,
    /// `created`, `replaced`, `unchanged`, `removed`, `exchanged`,
    /// `fsynced`, or `failed`.
    pub outcome: &'static str,
    /// Files written.
    pub written: u32,
    /// Files of the old contents removed.
    pub removed: u32,
    /// Bytes of file contents written (0 when nothing changed; a changed
    /// sync counts its whole new tree).
    pub bytes: u64,
    /// How long the host took, in milliseconds.
    pub ms: f64,
    /// Why it failed (`outcome` = `failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// In a dry run: what would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Changes>,
}

impl Operation {
    /// The report the plugin received, when the operation succeeded: an
    /// `exchange`, an `fsync` and a `remove` of nothing report `unchanged`
    /// with no files.
    pub fn report(&self) -> Option<Report> {
        let outcome = match self.outcome {
            "failed" => return None,
            "created" => Outcome::Created,
            "replaced" => Outcome::Replaced,
            "removed" => Outcome::Removed,
            _ => Outcome::Unchanged,
        };
        Some(Report { outcome, written: self.written, removed: self.removed })
    }
}

/// The names a dry-run operation would add, change and remove (directories
/// end in `/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Paths that would appear.
    pub added: Vec<String>,
    /// Paths whose bytes, mode or kind would change.
    pub changed: Vec<String>,
    /// Paths that would disappear.
    pub removed: Vec<String>,
}

impl From<Plan> for Changes {
    fn from(p: Plan) -> Self {
        Changes { added: p.added, changed: p.changed, removed: p.removed }
    }
}

/// What a recorded operation did.
pub(crate) struct Done {
    pub outcome: &'static str,
    pub written: u32,
    pub removed: u32,
    pub bytes: u64,
    pub plan: Option<Changes>,
}

impl Done {
    pub fn of(report: &Report, plan: Option<Changes>) -> Self {
        Done {
            outcome: report.outcome.as_str(),
            written: report.written,
            removed: report.removed,
            bytes: 0,
            plan,
        }
    }

    pub fn just(outcome: &'static str) -> Self {
        Done { outcome, written: 0, removed: 0, bytes: 0, plan: None }
    }
}
