//! What an operator declared around a run's changes (validators,
//! guardrails, actions after durable changes), as the services see it: a
//! trait, so the services stay free of processes and manifests. The
//! implementation is `crate::hooks`.

use crate::durable::{Gate, Refusal};

/// The operator's hooks for one run.
pub trait Hooks: Send + Sync + std::fmt::Debug {
    /// The gate for a change of `path` (relative to root `root`, the synced
    /// directory or the written file); `None` when nothing can apply to it
    /// or anything below it. The gate decides which hooks apply from the
    /// paths the change turns out to touch.
    fn gate<'a>(&'a self, root: &str, path: &str) -> Option<Box<dyn Gate + 'a>>;

    /// Whether `path` in `root` may be removed (a guardrail may refuse).
    fn removal(&self, root: &str, path: &str) -> Result<(), Refusal> {
        let _ = (root, path);
        Ok(())
    }

    /// Whether `a` and `b` in `root` may be exchanged: refused where a hook
    /// covers either side (an exchange has no staged copy to check).
    fn exchange(&self, root: &str, a: &str, b: &str) -> Result<(), Refusal> {
        let _ = (root, a, b);
        Ok(())
    }

    /// A change of `path` in `root` was committed and its commit fsync
    /// returned: the actions that apply to it are owed.
    fn committed(&self, root: &str, path: &str);
}
