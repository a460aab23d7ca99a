//! The durable core: atomic, crash-durable directory and file updates on
//! Linux, through directory fds and `rustix`. It knows nothing of
//! WebAssembly; the runtime and the CLI are thin layers over it.
//!
//! One file per operation:
//! [`sync`](mod@sync) (directory sync), [`write`](mod@write) (single file),
//! [`remove`](mod@remove), [`recover`](mod@recover), [`previous`] (keeping
//! the previous contents of a target, reverting to them), [`primitives`]
//! (raw exchange and fsync), [`read`];
//! and the pieces they share: [`names`] (path rules), [`tree`] (what a sync
//! writes), [`walk`] (reading trees on disk), [`diff`] (comparing a tree
//! with a directory), [`resolve`] (paths beneath a handle), `lock`
//! (serialising processes), [`probe`] (observation and fault injection),
//! [`flush`] (how a staging tree is made durable: fsync or syncfs),
//! [`error`] and [`report`].
//!
//! # Guarantee
//!
//! For every mutating operation: after a power loss at any instant the
//! target is exactly its old contents or exactly its new contents; once the
//! operation returns `Ok`, the new contents are durable. An error other than
//! [`Error::Committed`] means the target was not changed.
//!
//! A sync whose target differs in exactly one regular file (bytes and/or
//! mode, every other file carried) takes the one-file path
//! (`replace_one.rs`): that file alone is renamed over inside the target,
//! and the directories are kept rather than swapped. The target is still
//! old-or-new at every instant (the rename is the one atomic step); what
//! differs from the full sequence is that a reader holding an fd to the
//! target sees the new file, and that a temporary name may come back after
//! a power loss as a second name of the new inode (a leftover recovery
//! removes).
//!
//! # Notes and limitations
//!
//! - Linux only: it needs `renameat2(RENAME_EXCHANGE)` (ext4, xfs, btrfs,
//!   tmpfs, …). Elsewhere a sync fails with [`Error::Unsupported`] and
//!   changes nothing; there is no silent non-atomic fallback.
//! - A reader holding an fd to the old directory keeps seeing the old tree.
//! - Concurrent durasync processes serialise on a lock file
//!   ([`names::LOCK_NAME`]) in the directory that holds the target; other
//!   programs writing there are not serialised.
//! - After "committed, durability unknown" the target is marked beside it
//!   (`.durasync-unsynced-…`) until a later operation's commit fsync
//!   returned: a retry, in any process, rewrites it from fresh inodes.
//! - A sync or write asked to keep ([`Options::keep_previous`]) leaves the
//!   replaced contents beside the target under a self-describing name
//!   (`.durasync-keep.<inode>.<target>`), so [`revert`] is one exchange;
//!   such a sync never takes the one-file path (see [`previous`]).
//! - Every walk and removal is iterative with a bounded number of open fds,
//!   so trees of any depth are handled; durasync creates at most
//!   [`MAX_DEPTH`] levels below an anchor.

mod cancel;
pub mod diff;
pub mod error;
pub mod flush;
pub mod gate;
mod lock;
mod marker;
pub mod names;
mod parallel;
pub mod previous;
pub mod primitives;
pub mod probe;
pub mod read;
pub mod recover;
pub mod remove;
mod replace_one;
pub mod report;
pub mod resolve;
pub mod sync;
mod sys;
pub mod tree;
pub mod walk;
pub mod write;

pub use cancel::Cancel;
pub use error::{Error, Result, Step};
pub use flush::Flush;
pub use gate::{Gate, Refusal, Staged, StagedKind};
pub use names::MAX_DEPTH;
pub use previous::{PreviousInfo, PreviousKind, discard_previous, previous_of, revert};
pub use primitives::{exchange, fsync};
pub use probe::{NoProbe, Op, Probe};
pub use read::{Entry, EntryKind, ReadLimits, list_dir, read_file};
pub use recover::recover;
pub use remove::remove;
pub use report::{Outcome, Report};
pub use resolve::{create_dirs_beneath, open_beneath, split_last};
pub use sync::{plan_sync, sync_dir, sync_dir_unchanged_from};
pub use tree::{Node, Plan, RequestLimits, Tree, read_tree};
pub use write::write_file;

/// How many files a sync writes and fsyncs at once. Parallel fsyncs let the
/// block layer merge device flushes (on a virtio disk 1000 files take about
/// a third of the sequential time from 16 threads); more threads stop
/// helping long before this.
pub const DEFAULT_THREADS: usize = 16;

/// Settings shared by every operation.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Hooks around every mutating system call ([`NoProbe`] in production).
    pub probe: &'a dyn Probe,
    /// Caps checked before anything is touched.
    pub limits: RequestLimits,
    /// Files written and fsynced at once by a sync.
    pub threads: usize,
    /// When to give up before the commit point ([`Cancel::NEVER`] by default).
    pub cancel: Cancel<'a>,
    /// How a sync's staging tree is made durable ([`Flush::Auto`] by default).
    pub flush: Flush,
    /// Asked to accept the staged contents before the swap ([`gate`]); none
    /// by default.
    pub gate: Option<&'a dyn Gate>,
    /// Keep the contents a sync or single-file write replaces as the
    /// target's previous, for [`revert`] ([`previous`]); also when the gate
    /// asks ([`Gate::keep_previous`]). `false` by default.
    pub keep_previous: bool,
}

impl Default for Options<'static> {
    fn default() -> Self {
        Options {
            probe: &NoProbe,
            limits: RequestLimits::default(),
            threads: DEFAULT_THREADS,
            cancel: Cancel::NEVER,
            flush: Flush::Auto,
            gate: None,
            keep_previous: false,
        }
    }
}

impl std::fmt::Debug for Options<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("limits", &self.limits)
            .field("threads", &self.threads)
            .field("cancel", &self.cancel)
            .field("flush", &self.flush)
            .field("gate", &self.gate.is_some())
            .field("keep_previous", &self.keep_previous)
            .finish()
    }
}
