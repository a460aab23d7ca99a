//! The record of every durable operation a plugin asked for, as `durasync
//! run` reports it, and what a dry run would change.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::durable::{Outcome, Plan, Report};
pub use durasync_contract::Op;

/// One durable operation a plugin asked for, as reported by `durasync run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operation {
    /// The root's name.
    pub root: String,
    /// The path beneath the root (`a <-> b` for an exchange).
    pub path: String,
    /// Which call it was; serialized as its WIT name (`sync`,
    /// `write-file`, `remove`, `exchange`, `fsync`).
    #[serde(serialize_with = "wit_name")]
    pub op: Op,
    /// How it ended.
    pub outcome: Ended,
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

/// [`Op`] as its WIT name: the contract crate has no serde.
fn wit_name<S: Serializer>(op: &Op, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(op.as_str())
}

/// How a recorded operation ended: the contract's [`Outcome`] of a
/// `sync`, `write-file` or `remove`, what the raw primitives did, or
/// `failed`. Serialized (and printed) as the lowercase word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ended {
    /// Nothing needed changing (also a `remove` of nothing).
    Unchanged,
    /// The target did not exist and now does.
    Created,
    /// The target existed and was atomically replaced.
    Replaced,
    /// The target existed and was durably removed.
    Removed,
    /// An `exchange` swapped its two entries.
    Exchanged,
    /// An `fsync` returned.
    Fsynced,
    /// The call failed ([`Operation::error`] says why).
    Failed,
}

impl Ended {
    /// The lowercase word (`created`, `exchanged`, `failed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Unchanged => "unchanged",
            Ended::Created => "created",
            Ended::Replaced => "replaced",
            Ended::Removed => "removed",
            Ended::Exchanged => "exchanged",
            Ended::Fsynced => "fsynced",
            Ended::Failed => "failed",
        }
    }
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Outcome> for Ended {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Unchanged => Ended::Unchanged,
            Outcome::Created => Ended::Created,
            Outcome::Replaced => Ended::Replaced,
            Outcome::Removed => Ended::Removed,
        }
    }
}

impl Operation {
    /// The report the plugin received, when the operation succeeded: an
    /// `exchange`, an `fsync` and a `remove` of nothing report `unchanged`
    /// with no files.
    pub fn report(&self) -> Option<Report> {
        let outcome = match self.outcome {
            Ended::Failed => return None,
            Ended::Created => Outcome::Created,
            Ended::Replaced => Outcome::Replaced,
            Ended::Removed => Outcome::Removed,
            Ended::Unchanged | Ended::Exchanged | Ended::Fsynced => Outcome::Unchanged,
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
    pub outcome: Ended,
    pub written: u32,
    pub removed: u32,
    pub bytes: u64,
    pub plan: Option<Changes>,
}

impl Done {
    pub fn of(report: &Report, plan: Option<Changes>) -> Self {
        Done {
            outcome: report.outcome.into(),
            written: report.written,
            removed: report.removed,
            bytes: 0,
            plan,
        }
    }

    pub fn just(outcome: Ended) -> Self {
        Done { outcome, written: 0, removed: 0, bytes: 0, plan: None }
    }
}

#[cfg(all(test, feature = "runtime"))]
mod tests {
    use super::*;

    fn op(op: Op, outcome: Ended) -> Operation {
        Operation {
            root: "r".into(),
            path: "p".into(),
            op,
            outcome,
            written: 1,
            removed: 0,
            bytes: 2,
            ms: 0.5,
            error: None,
            plan: None,
        }
    }

    #[test]
    fn a_record_serializes_its_typed_op_and_outcome_as_the_wit_words() {
        let json = serde_json::to_string(&op(Op::WriteFile, Ended::Fsynced)).unwrap();
        assert_eq!(
            json,
            r#"{"root":"r","path":"p","op":"write-file","outcome":"fsynced","written":1,"removed":0,"bytes":2,"ms":0.5}"#
        );
        let words: Vec<String> = [
            Ended::Unchanged,
            Ended::Created,
            Ended::Replaced,
            Ended::Removed,
            Ended::Exchanged,
            Ended::Fsynced,
            Ended::Failed,
        ]
        .into_iter()
        .map(|e| {
            let v = serde_json::to_value(op(Op::Sync, e)).unwrap();
            assert_eq!(v["outcome"], e.as_str(), "serde and as_str agree");
            e.to_string()
        })
        .collect();
        assert_eq!(words, ["unchanged", "created", "replaced", "removed", "exchanged", "fsynced", "failed"]);
    }

    #[test]
    fn the_plugins_report_is_derived_from_the_record() {
        assert_eq!(op(Op::Sync, Ended::Failed).report(), None);
        let created = op(Op::Sync, Ended::Created).report().unwrap();
        assert_eq!((created.outcome, created.written), (Outcome::Created, 1));
        for raw in [Ended::Exchanged, Ended::Fsynced, Ended::Unchanged] {
            assert_eq!(op(Op::Exchange, raw).report().unwrap().outcome, Outcome::Unchanged);
        }
    }
}
