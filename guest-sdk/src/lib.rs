//! Write [durasync](https://example.invalid/durasync) plugins in plain Rust.
//!
//! A plugin decides *what* to write; the host makes every change atomic and
//! crash-durable. This crate gives a plugin:
//!
//! - the capability handles: [`Root::open`] for a root the manifest grants,
//!   then [`Dir::sync`] (replace a directory atomically), [`Dir::write_file`]
//!   (replace one file atomically), [`Dir::read_file`], [`Dir::list_dir`],
//!   [`Dir::remove`] (durable removal) and the raw [`Dir::exchange`] and
//!   [`Dir::fsync`];
//! - the [`Plugin`] trait and one macro, [`export_plugin!`], that makes a type
//!   the component's exports;
//! - logging macros ([`debug!`], [`info!`], [`warn!`], [`error!`]) that reach the
//!   operator through the host;
//! - on every target but wasm32, a native test harness ([`testing`]): the same
//!   API runs against a fake host backed by a temporary directory, with the
//!   host's own path rules and errors, so `cargo test` tests plugin logic
//!   without a Wasm toolchain.
//!
//! ```no_run
//! use durasync_guest::{File, Info, Plugin, Root};
//!
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn describe() -> Info {
//!         Info::new("hello", "0.1.0", "Writes a greeting").roots(["out"])
//!     }
//!
//!     fn run(_config: &str, input: &[u8]) -> Result<String, Box<dyn std::error::Error>> {
//!         let out = Root::open("out")?;
//!         let report = out.sync("hello", [File::new("input.txt", input).mode(0o600)])?;
//!         Ok(format!("hello: {}", report.outcome))
//!     }
//! }
//!
//! durasync_guest::export_plugin!(Hello);
//! ```
//!
//! # Notes and limitations
//!
//! - A plugin has no file system of its own: `std::fs` fails inside the
//!   sandbox (`NotFound`). Everything goes through [`Dir`] handles.
//! - Paths are relative to a handle: plain names joined by `/`; `..`,
//!   absolute paths and symbolic links on the way are [`Error::InvalidPath`].
//! - The host caps files and bytes per call and per run, log volume and the
//!   size of the result message; exceeding a cap is [`Error::Limit`].

#![deny(missing_docs)]
// Only the generated bindings contain unsafe code.
#![deny(unsafe_code)]

// The export macro names paths through this crate (`durasync_guest::…`),
// which must also resolve from inside it.
extern crate self as durasync_guest;

mod log;
mod types;

#[cfg(target_arch = "wasm32")]
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings;

#[cfg(target_arch = "wasm32")]
#[path = "wasm.rs"]
mod backend;

#[cfg(not(target_arch = "wasm32"))]
#[path = "native.rs"]
mod backend;

#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use log::log;
pub use types::{DEFAULT_MODE, Entry, EntryKind, Error, File, Info, Level, Op, Outcome, Report, Result};

/// The error a plugin's [`Plugin::run`] returns: anything that displays,
/// via `?` (an SDK [`Error`], a `serde_json::Error`, …) or `.into()` on a
/// `String`. The host shows its `Display` text to the operator.
pub type RunError = Box<dyn std::error::Error>;

/// A durasync plugin. Export it with [`export_plugin!`].
pub trait Plugin {
    /// Who this plugin is and which roots it needs. Must not touch roots.
    fn describe() -> Info;

    /// Do the plugin's job once. `config` is the manifest's `[config]`
    /// table as JSON (`{}` when it has none); `input` is the bytes given to
    /// `durasync run --input` (empty when none). `Ok` is a message for the
    /// operator; `Err` fails the run (exit status 10) with its message.
    fn run(config: &str, input: &[u8]) -> std::result::Result<String, RunError>;
}

/// A directory the plugin may use: a granted root ([`Root::open`]) or a
/// directory beneath one ([`Dir::open_dir`]). Every path given to its
/// methods is relative to it and resolved beneath it.
#[derive(Debug)]
pub struct Dir {
    inner: backend::Dir,
}

/// A root the manifest grants: a [`Dir`] obtained with [`Root::open`].
pub type Root = Dir;

impl Dir {
    /// The handle for the root `name` that the plugin's manifest grants.
    /// Fails with [`Error::NotGranted`] for any other name.
    pub fn open(name: &str) -> Result<Dir> {
        backend::open_root(name).map(|inner| Dir { inner })
    }

    /// Make the directory at `path` hold exactly `files`, atomically and
    /// durably: after a power loss at any instant it holds all of its old
    /// contents or all of the new ones. Missing parents are created
    /// durably. When it already holds exactly these names, bytes and modes,
    /// nothing is written ([`Outcome::Unchanged`]). No files: an empty
    /// directory.
    pub fn sync(&self, path: &str, files: impl IntoIterator<Item = File>) -> Result<Report> {
        self.inner.sync(path, files.into_iter().collect())
    }

    /// Replace the one file at `path` atomically and durably with
    /// `contents` and exactly `mode`. Readers see the old or the new bytes,
    /// never a mix and never an empty file. Missing parent directories are
    /// created durably (mode 0755).
    pub fn write_file(&self, path: &str, contents: impl AsRef<[u8]>, mode: u32) -> Result<Report> {
        self.inner.write_file(path, contents.as_ref(), mode)
    }

    /// The bytes of the regular file at `path`, or `None` when nothing is there.
    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>> {
        self.inner.read_file(path)
    }

    /// The entries of the directory at `path` (`""`: this one), sorted by
    /// name, without the host's own bookkeeping entries.
    pub fn list_dir(&self, path: &str) -> Result<Vec<Entry>> {
        self.inner.list_dir(path)
    }

    /// Durably remove the file or the whole directory tree at `path`. A
    /// directory is renamed away atomically first, so a crash never leaves
    /// it half removed. `false` when nothing was there.
    pub fn remove(&self, path: &str) -> Result<bool> {
        self.inner.remove(path)
    }

    /// The raw primitive: atomically exchange the entries `a` and `b`
    /// (`renameat2(RENAME_EXCHANGE)`). Not durable until their directories
    /// are fsynced; prefer [`Dir::sync`].
    pub fn exchange(&self, a: &str, b: &str) -> Result<()> {
        self.inner.exchange(a, b)
    }

    /// The raw primitive: fsync the file or directory at `path` (`""`: this one).
    pub fn fsync(&self, path: &str) -> Result<()> {
        self.inner.fsync(path)
    }

    /// A handle for the existing directory at `path` beneath this one, with
    /// the same access.
    pub fn open_dir(&self, path: &str) -> Result<Dir> {
        self.inner.open_dir(path).map(|inner| Dir { inner })
    }
}

/// Make the type `$plugin` (which implements [`Plugin`]) this component's
/// exports. Use it once, at the top level of the plugin crate. On targets
/// other than wasm32 it expands to nothing: tests call the plugin through
/// [`testing::Host::run`].
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __DurasyncExports;

            impl $crate::bindings::Guest for __DurasyncExports {
                fn describe() -> $crate::bindings::Info {
                    $crate::__private::describe::<$plugin>()
                }

                fn run(
                    config: ::std::string::String,
                    input: ::std::vec::Vec<u8>,
                ) -> ::std::result::Result<::std::string::String, ::std::string::String> {
                    $crate::__private::run::<$plugin>(&config, &input)
                }
            }

            $crate::bindings::export!(__DurasyncExports);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    //! Used by the macros; not part of the API.
    #[cfg(target_arch = "wasm32")]
    pub use crate::backend::describe;

    /// Run a plugin and turn its error into the message the host shows.
    pub fn run<P: crate::Plugin>(config: &str, input: &[u8]) -> Result<String, String> {
        P::run(config, input).map_err(|e| e.to_string())
    }
}
