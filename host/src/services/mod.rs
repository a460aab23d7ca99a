//! The plugin services: everything a plugin's call goes through between
//! "the guest named a root and a path" and the durable core, with no
//! WebAssembly in it.
//!
//! - [`Grant`] and [`Dir`]: the roots a manifest grants and the handles a
//!   plugin holds, each with its access, its place below the root and
//!   whether special modes are allowed;
//! - [`Session`]: one run — its limits, per-run budgets, deadline, open
//!   handles, dry-run mode and the [`Operation`] record — with one method
//!   per call of interface `fs` (`calls.rs`);
//! - [`Error`], [`File`], [`Report`], [`Entry`], [`Op`]: the contract's
//!   plain types (the `durasync-contract` crate, shared with the guest SDK),
//!   and the one mapping from core errors to [`Error`];
//! - [`limits`]: every limit a plugin runs under, as named constants.
//!
//! Two front doors use it: the wasmtime runtime ([`crate::runtime`], a thin
//! adapter from the WIT bindings) and the guest SDK's native test harness
//! (`durasync_guest::testing`). Both therefore enforce the same rules with
//! the same messages; `tests/parity` checks that they do.

mod calls;
mod checks;
pub mod error;
mod grant;
mod hooks;
pub mod limits;
pub mod log_rate;
mod operation;
mod plan;
mod session;
pub mod text;

pub use checks::SPECIAL_BITS;
pub use durasync_contract::{Entry, EntryKind, File, Op, Outcome, Report};
pub use error::{Error, Result, from_core};
pub use grant::{Access, Dir, Grant};
pub use hooks::Hooks;
pub use limits::{MAX_DEPTH, PluginLimits};
pub use log_rate::LogRate;
pub use operation::{Changes, Ended, Operation};
pub use session::{LogBudget, LogVerdict, Session};

/// The contract this host implements, as declared by `wit/durasync.wit`
/// (`durasync:plugin@0.1.0`): read from the WIT file at build time, so the
/// version lives in one place.
pub const WIT_PACKAGE: &str = wit_package(include_str!("../../../wit/durasync.wit"));

/// The version part of [`WIT_PACKAGE`] (`0.1.0`).
pub const WIT_VERSION: &str = after_at(WIT_PACKAGE);

/// The `package NAME@VERSION;` declaration of a WIT document.
const fn wit_package(wit: &str) -> &str {
    const KEY: &[u8] = b"package ";
    let bytes = wit.as_bytes();
    let mut i = 0;
    while i + KEY.len() <= bytes.len() {
        // A declaration starts a line.
        if (i == 0 || bytes[i - 1] == b'\n') && starts_with(bytes, i, KEY) {
            let start = i + KEY.len();
            let mut end = start;
            while end < bytes.len() && bytes[end] != b';' {
                end += 1;
            }
            let (_, rest) = bytes.split_at(start);
            let (decl, _) = rest.split_at(end - start);
            return match std::str::from_utf8(decl) {
                Ok(s) => s,
                Err(_) => panic!("the WIT package declaration is not UTF-8"),
            };
        }
        i += 1;
    }
    panic!("wit/durasync.wit has no package declaration")
}

const fn starts_with(bytes: &[u8], at: usize, key: &[u8]) -> bool {
    let mut j = 0;
    while j < key.len() {
        if bytes[at + j] != key[j] {
            return false;
        }
        j += 1;
    }
    true
}

const fn after_at(package: &str) -> &str {
    let bytes = package.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'@' {
            let (_, rest) = bytes.split_at(i + 1);
            return match std::str::from_utf8(rest) {
                Ok(s) => s,
                Err(_) => panic!("not UTF-8"),
            };
        }
        i += 1;
    }
    panic!("the WIT package has no version")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wit_package_comes_from_the_wit_file() {
        assert!(WIT_PACKAGE.starts_with("durasync:plugin@0.1."), "{WIT_PACKAGE}");
        assert_eq!(format!("durasync:plugin@{WIT_VERSION}"), WIT_PACKAGE);
    }
}
