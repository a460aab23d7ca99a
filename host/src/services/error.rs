//! The contract's error kinds and the one mapping from the durable core's
//! errors to them.
//!
//! [`Error`] is the contract crate's (`durasync-contract`), the WIT `error`
//! variant one for one; the services return it to both front doors
//! unconverted (the runtime turns it into the bindings' type once, in
//! `runtime/fs.rs`). What a plugin asked for and the core refused (a bad
//! path, a read-only root, a full disk) is one of these values, which the
//! plugin can handle.

use crate::durable;

pub use durasync_contract::Error;

impl From<durable::Error> for Error {
    fn from(e: durable::Error) -> Self {
        from_core(&e)
    }
}

/// The contract error for a durable-core error: the one core → contract
/// mapping. The core's messages name paths relative to the handle, never
/// host paths.
pub fn from_core(e: &durable::Error) -> Error {
    use durable::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidPath { .. } | E::Duplicate { .. } | E::InvalidMode { .. } => Error::InvalidPath(msg),
        // A link anywhere on the way could lead out of the root.
        E::Symlink { .. } => Error::InvalidPath(msg),
        E::NotFound { .. } => Error::NotFound(msg),
        E::NotADirectory { .. } => Error::NotADirectory(msg),
        E::Limit { .. } | E::TooLarge { .. } => Error::Limit(msg),
        E::Unsupported { .. } | E::FlushUnsupported { .. } => Error::Unsupported(msg),
        E::Committed { .. } => Error::Committed(msg),
        // 0.1 has no variant for "the operator refused this content", and a
        // new case would change the `error` type every 0.1.0 plugin was
        // built against. `not-granted` is the nearest meaning (the grant does
        // not extend to this content) and tells a plugin not to retry as is.
        E::Refused { .. } => Error::NotGranted(msg),
        _ => Error::Io(msg),
    }
}

/// The result of a plugin's call.
pub use durasync_contract::Result;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_map_to_their_contract_kind() {
        let e = durable::Error::Symlink { path: "x".into() };
        assert!(matches!(from_core(&e), Error::InvalidPath(m) if m.contains("symbolic link")));
        let e = durable::Error::NotFound { path: "x".into() };
        assert!(matches!(from_core(&e), Error::NotFound(_)));
        assert_eq!(Error::ReadOnly("m".into()).to_string(), "read-only: m");
    }
}
