//! Loading a stored artifact: the checks that let durasync run machine code
//! from a file (its owner and mode, its directory's, wasmtime's own header
//! check). Shared by the cache (`cache.rs`) and the background upgrade
//! (`upgrade.rs`), and [`trusted`] by the other stores of the cache
//! directory.

// The one `unsafe` block: running a stored artifact's code (see below).
#![allow(unsafe_code)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use wasmtime::component::Component;
use wasmtime::{Engine, Precompiled};

/// The cached component at `path`: `Ok(None)` when there is none, `Err`
/// with the reason when there is one that must not be used.
pub(crate) fn try_load(engine: &Engine, path: &Path) -> Result<Option<Component>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    trusted(&meta, "artifact")?;
    let dir_meta = std::fs::metadata(path.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
    trusted(&dir_meta, "cache directory")?;
    match Engine::detect_precompiled_file(path) {
        Ok(Some(Precompiled::Component)) => {}
        Ok(_) => return Err("not a precompiled component".into()),
        Err(e) => return Err(format!("{e}")),
    }
    // SAFETY: `Component::deserialize_file` runs the machine code in the
    // file, so the file must have been produced by wasmtime from a component
    // we would compile ourselves. It is: the file sits under a key that
    // names the component's sha256, in a directory that only this user can
    // write (checked above, as is the file's owner and mode), and durasync
    // writes it atomically (temporary file + rename), so it is never seen
    // half written. wasmtime itself checks the version and the engine
    // configuration in the artifact's header and refuses a mismatch, which
    // we turn into a recompile.
    unsafe { Component::deserialize_file(engine, path) }.map(Some).map_err(|e| format!("{e}"))
}

/// Refuse a file or directory that someone other than this user owns or
/// that group or others may write.
pub(crate) fn trusted(meta: &std::fs::Metadata, what: &str) -> Result<(), String> {
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(format!("the {what} is owned by uid {}, not by this user ({uid})", meta.uid()));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(format!("the {what} is writable by group or others"));
    }
    if meta.file_type().is_symlink() {
        return Err(format!("the {what} is a symbolic link"));
    }
    Ok(())
}
