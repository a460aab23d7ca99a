//! What an operator declared around a run's changes (validators,
//! guardrails, actions after durable changes), as the services see it: a
//! trait, so the services stay free of processes and manifests. The
//! implementation is `crate::hooks`.

use crate::durable::{Gate, Refusal};

/// The operator's hooks for one run.
pub trait Hooks: Send + Sync + std::fmt::Debug {
    /// The gate for a change of `path` (relative to root `root`, the synced
    /// directory or the written file); `None` when nothing applies to it.
    fn gate<'a>(&'a self, root: &str, path: &str) -> Option<Box<dyn Gate + 'a>>;

    /// Whether `path` in `root` may be removed (a guardrail may refuse).
    fn removal(&self, root: &str, path: &str) -> Result<(), Refusal> {
        let _ = (root, path);
        Ok(())
    }

    /// A change of `path` in `root` was committed and its commit fsync
    /// returned: the actions that apply to it are owed.
    fn committed(&self, root: &str, path: &str);
}
