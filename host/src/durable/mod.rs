//! The durable core: atomic, crash-durable directory and file updates on
//! Linux, through directory fds and `rustix`. It knows nothing of
//! WebAssembly; the runtime and the CLI are thin layers over it.
//!
//! One file per operation:
//!
//! - [`sync`](mod@sync): directory sync.
//! - [`write`](mod@write): single-file replace.
//! - [`remove`](mod@remove): durable removal of a file or a tree.
//! - [`layout`]: the symlink layout, where a directory's contents change by
//!   renaming a link (file systems without `RENAME_EXCHANGE`); `linked`:
//!   reading a directory in it (its current generation, its links).
//! - [`recover`](mod@recover): removing what a crash or a failed cleanup left behind.
//! - [`previous`]: keeping the previous contents of a target, reverting to them.
//! - [`primitives`]: the raw exchange and fsync.
//! - [`read`]: `read-file` and `list-dir` beneath a handle.
//!
//! And the pieces they share:
//!
//! - `replace_one`: the one-file path of a sync.
//! - `staging`: building a staging tree (or a generation), carrying
//!   unchanged files, making it durable.
//! - [`flush`]: how a staging tree is made durable (fsync or syncfs).
//! - [`gate`]: the check asked before the swap, and the re-check of an exposed staged copy.
//! - `marker`: the "unsynced" marker left by a failed commit fsync.
//! - `lock`: serialising durasync processes (`flock` on the lock file).
//! - `cancel`: [`Cancel`], a deadline or flag checked before the commit point.
//! - [`names`]: path rules and the names of durasync's own entries.
//! - [`resolve`]: paths beneath a directory handle.
//! - [`tree`]: what a sync writes, validated as it is built.
//! - [`walk`]: reading trees on disk.
//! - [`diff`]: comparing a tree with a directory.
//! - `parallel`: running independent steps from several threads.
//! - `parents`: creating the missing parents of a target, in place.
//! - `sys`: the only door for mutating system calls, each observed by the probe.
//! - [`doctor`]: what a target's place can do, for `durasync doctor`.
//! - [`fsinfo`]: what the file system and the kernel can do (kind, discards, dirty data, syncfs errors).
//! - [`probe`]: observation and fault injection around every `sys` call.
//! - [`attrs`]: owner, group, label and carried attributes of every inode an operation creates.
//! - [`error`]: typed errors (before the commit point, or committed).
//! - [`report`]: what a successful operation reports.
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
//!   changes nothing; there is no silent non-atomic fallback. The opt-in
//!   symlink layout ([`Layout::Symlink`], `layout.rs`) needs only a plain
//!   rename and symbolic links.
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
//!   [`names::MAX_DEPTH`] levels below an anchor.

pub mod attrs;
mod cancel;
pub mod diff;
pub mod doctor;
pub mod error;
pub mod flush;
pub mod fsinfo;
pub mod gate;
pub mod layout;
mod linked;
mod lock;
mod marker;
pub mod names;
mod parallel;
mod parents;
pub mod previous;
pub mod primitives;
pub mod probe;
pub mod read;
pub mod recover;
pub mod remove;
mod replace_one;
pub mod report;
pub mod resolve;
mod source;
mod staging;
pub mod sync;
mod sys;
pub mod tree;
pub mod walk;
pub mod write;

pub use attrs::{Attrs, IdRule, LabelRule};
pub use cancel::Cancel;
pub use diff::Plan;
pub use error::{Error, Result, Step};
pub use flush::Flush;
pub use fsinfo::FsKind;
pub use gate::{Gate, Refusal, Staged, StagedKind};
pub use layout::Layout;
pub use parents::create_dirs_beneath;
pub use previous::{PreviousInfo, PreviousKind, discard_previous, previous_of, revert};
pub use primitives::{exchange, fsync};
pub use probe::{NoProbe, Probe, SysOp};
pub use read::{Entry, EntryKind, ReadLimits, list_dir, read_file};
pub use recover::recover;
pub use remove::remove;
pub use report::{Outcome, Report};
pub use resolve::{open_beneath, split_last};
pub use sync::{plan_sync, sync_dir};
pub use tree::{Node, RequestLimits, Tree};
pub use walk::read_tree;
pub use write::write_file;

/// How many files a sync writes and fsyncs at once. Parallel fsyncs let the
/// block layer merge device flushes (BENCHMARKS.md measures the thread
/// counts); more threads stop helping long before this.
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
    /// What every inode the operation creates gets besides bytes and mode:
    /// owner, group, label, carried attributes ([`attrs`]). By default the
    /// label of what it replaces, nothing else.
    pub attrs: &'a Attrs,
    /// How a sync replaces a target directory ([`Layout::Exchange`] by
    /// default; a target already in the symlink layout stays in it).
    pub layout: Layout,
}

/// The default [`Options::attrs`].
static DEFAULT_ATTRS: Attrs = Attrs::DEFAULT;

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
            attrs: &DEFAULT_ATTRS,
            layout: Layout::Exchange,
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
            .field("attrs", self.attrs)
            .field("layout", &self.layout)
            .finish()
    }
}
