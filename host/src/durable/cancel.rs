//! Stopping a long operation from outside: a deadline and/or a flag, checked
//! between the staged file writes and right before the swap, and again in
//! the cleanup after the commit fsync, never between the swap and the
//! commit. A cancelled operation returns [`Error::Cancelled`] and has
//! changed nothing: what it had staged is removed before it returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::error::{Error, Result};

/// When an operation should give up. The default never cancels.
///
/// It is checked before the commit point and during the cleanup after it,
/// never in between: once the swap has happened the operation always
/// reaches its commit fsync, so a cancellation can never leave a change
/// half-reported. After the commit, a cancellation only cuts the removal of
/// the old tree short (the operation still succeeds; the rest is a
/// leftover removed by the next operation or `recover`). Reads and walks
/// that change nothing check it too.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cancel<'a> {
    deadline: Option<Instant>,
    flag: Option<&'a AtomicBool>,
}

impl<'a> Cancel<'a> {
    /// Never cancel (the default).
    pub const NEVER: Cancel<'static> = Cancel { deadline: None, flag: None };

    /// Cancel once `deadline` has passed.
    pub fn at(deadline: Instant) -> Self {
        Cancel { deadline: Some(deadline), flag: None }
    }

    /// Cancel once `flag` is set (by another thread, say).
    pub fn on(flag: &'a AtomicBool) -> Self {
        Cancel { deadline: None, flag: Some(flag) }
    }

    /// Whether the operation should stop now.
    pub fn is_cancelled(&self) -> bool {
        self.flag.is_some_and(|f| f.load(Ordering::Relaxed))
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// [`Error::Cancelled`] naming `path` when the operation should stop.
    pub(crate) fn check(&self, path: &str) -> Result<()> {
        if self.is_cancelled() { Err(Error::Cancelled { path: path.to_owned() }) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn never_does_not_cancel_and_a_past_deadline_or_a_set_flag_does() {
        assert!(!Cancel::NEVER.is_cancelled());
        assert!(!Cancel::at(Instant::now() + Duration::from_secs(3600)).is_cancelled());
        assert!(Cancel::at(Instant::now()).is_cancelled());
        let flag = AtomicBool::new(false);
        let c = Cancel::on(&flag);
        assert!(!c.is_cancelled());
        flag.store(true, Ordering::Relaxed);
        assert!(c.is_cancelled());
        assert!(matches!(c.check("t"), Err(Error::Cancelled { .. })));
    }
}
