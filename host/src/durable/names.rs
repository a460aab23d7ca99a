//! The path rules: what a name or a relative path may be, and the names
//! durasync gives its own bookkeeping entries.
//!
//! Every path that reaches the durable core is checked here first, as a
//! string, before any system call. This is the first of two walls: the second
//! is that every path is then walked one component at a time with
//! `O_NOFOLLOW` through directory fds (see [`super::resolve`]), so a symbolic
//! link can never redirect a write even if a string check were wrong.

use super::error::Error;

/// The longest single name Linux file systems accept (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// The longest relative path accepted (`PATH_MAX` less the terminating NUL).
pub const PATH_MAX: usize = 4095;

/// The deepest path, in directory levels below its anchor, that durasync
/// creates or accepts: a synced tree's paths, a target's path below a
/// granted root (the plugin runtime adds each handle's own depth below its
/// root, so chaining handles cannot go deeper), a CLI source's nesting.
///
/// Why 64: the trees durasync exists for (certificates, secrets, static pod
/// manifests and their revisions) are under ten levels deep, so 64 never
/// refuses a real request. It keeps every accepted path within `PATH_MAX`
/// with names averaging 63 bytes, so one `openat2` call can resolve it; it
/// bounds the directory fds a sync holds while it builds its staging tree
/// (one per level on the way down, far below the usual `RLIMIT_NOFILE` of
/// 1024) and the directory fsyncs one nested file costs. Trees the host did
/// not create can be deeper (anything can be `mkdir`ed beside it): every
/// walk, removal and recovery is iterative with bounded fds, so they cope
/// with any depth; only creating one is refused.
pub const MAX_DEPTH: usize = 64;

/// The lock file durasync keeps in every directory it changes. It is never
/// removed: removing a lock file that another process is about to open is
/// a classic race.
pub const LOCK_NAME: &str = ".durasync.lock";

/// Prefix of every entry durasync creates beside a target and removes later.
const LEFTOVER_PREFIX: &str = ".durasync-";

/// Length of the random suffix of a leftover name, in hex digits.
const SUFFIX_HEX: usize = 16;

/// What a durasync-created sibling is for. Only the label differs; recovery
/// treats all of them alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// A staging directory (before the swap) or the old tree (after it).
    Stage,
    /// The temporary sibling of a single-file write.
    Tmp,
    /// A directory renamed away by a removal, waiting to be deleted.
    Trash,
}

impl Leftover {
    fn label(self) -> &'static str {
        match self {
            Leftover::Stage => "stage",
            Leftover::Tmp => "tmp",
            Leftover::Trash => "trash",
        }
    }
}

/// A fresh, unpredictable name for a durasync sibling, e.g.
/// `.durasync-stage-9f86d081884c7d65`.
pub fn leftover_name(kind: Leftover) -> String {
    let mut bytes = [0u8; SUFFIX_HEX / 2];
    // getrandom cannot fail on Linux ≥ 3.17 short of a kernel bug; a clock
    // based fallback keeps names unique enough that O_EXCL/mkdir catch clashes.
    if rustix::rand::getrandom(&mut bytes[..], rustix::rand::GetRandomFlags::empty()).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes.copy_from_slice(&(nanos as u64 ^ u64::from(std::process::id())).to_le_bytes());
    }
    let mut name = String::with_capacity(LEFTOVER_PREFIX.len() + 6 + SUFFIX_HEX);
    name.push_str(LEFTOVER_PREFIX);
    name.push_str(kind.label());
    name.push('-');
    for b in bytes {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// Whether `name` is a sibling durasync created and recovery may remove:
/// exactly `.durasync-(stage|tmp|trash)-<16 lowercase hex digits>`.
pub fn is_leftover(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(LEFTOVER_PREFIX) else {
        return false;
    };
    let Some((label, suffix)) = rest.split_once('-') else {
        return false;
    };
    matches!(label, "stage" | "tmp" | "trash")
        && suffix.len() == SUFFIX_HEX
        && suffix.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is one of durasync's own entries (a leftover or the lock),
/// which listings hide from plugins and which no request may name.
pub fn is_reserved(name: &str) -> bool {
    name == LOCK_NAME || name.starts_with(LEFTOVER_PREFIX)
}

/// Check one plain name: not empty, not `.` or `..`, no `/`, no NUL, at most
/// [`NAME_MAX`] bytes, and not one of durasync's reserved names.
pub fn check_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "a name must not be empty"
    } else if name == "." || name == ".." {
        "`.` and `..` are not allowed"
    } else if name.contains('/') {
        "a name must not contain `/`"
    } else if name.contains('\0') {
        "a name must not contain NUL"
    } else if name.len() > NAME_MAX {
        "a name must be at most 255 bytes"
    } else if is_reserved(name) {
        "names starting with `.durasync` are reserved for durasync"
    } else {
        return Ok(());
    };
    Err(Error::invalid_path(name, reason))
}

/// Check a relative path of one or more plain names joined by `/` and return
/// its components. Absolute paths, empty components (`a//b`, a trailing `/`),
/// `.` and `..` are refused: the whole path, not just its last name, must be
/// plain, so `home/../api.crt` is an error rather than `api.crt`.
pub fn split_rel_path(path: &str) -> Result<Vec<&str>, Error> {
    if path.is_empty() {
        return Err(Error::invalid_path(path, "a path must not be empty"));
    }
    if path.starts_with('/') {
        return Err(Error::invalid_path(path, "absolute paths are not allowed"));
    }
    if path.len() > PATH_MAX {
        return Err(Error::invalid_path(path, "a path must be at most 4095 bytes"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > MAX_DEPTH {
        return Err(Error::Limit {
            what: "directory levels in a path",
            limit: MAX_DEPTH as u64,
            actual: parts.len() as u64,
        });
    }
    for part in &parts {
        check_name(part).map_err(|e| match e {
            Error::InvalidPath { reason, .. } => Error::invalid_path(path, reason),
            other => other,
        })?;
    }
    Ok(parts)
}

/// Like [`split_rel_path`], but `""` and `"."` name the directory itself and
/// give no components.
pub fn split_rel_path_or_self(path: &str) -> Result<Vec<&str>, Error> {
    if path.is_empty() || path == "." { Ok(Vec::new()) } else { split_rel_path(path) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        for ok in ["tls.crt", "a", ".hidden", "..dots", "x".repeat(255).as_str()] {
            check_name(ok).unwrap();
        }
    }

    #[test]
    fn bad_names_fail_with_their_reason() {
        let table = [
            ("", "empty"),
            (".", "`.` and `..`"),
            ("..", "`.` and `..`"),
            ("a/b", "`/`"),
            ("a\0b", "NUL"),
            (&"x".repeat(256), "255 bytes"),
            (".durasync.lock", "reserved"),
            (".durasync-stage-0123456789abcdef", "reserved"),
        ];
        for (name, want) in table {
            let err = check_name(name).unwrap_err().to_string();
            assert!(err.contains(want), "{name:?}: {err}");
        }
    }

    #[test]
    fn upstream_escaping_paths_are_refused() {
        for bad in ["home/../api.crt", "/api.crt", "a//b", "a/", "./a", "a/./b", "a/.."] {
            assert!(split_rel_path(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(split_rel_path("sub/dir/file").unwrap(), ["sub", "dir", "file"]);
        assert!(split_rel_path_or_self(".").unwrap().is_empty());
    }

    #[test]
    fn leftover_names_round_trip_and_are_unique() {
        let a = leftover_name(Leftover::Stage);
        let b = leftover_name(Leftover::Stage);
        assert_ne!(a, b);
        for kind in [Leftover::Stage, Leftover::Tmp, Leftover::Trash] {
            assert!(is_leftover(&leftover_name(kind)));
        }
        for not in [".durasync.lock", ".durasync-stage-xyz", ".durasync-foo-0123456789abcdef", "tls.crt"] {
            assert!(!is_leftover(not), "{not}");
        }
    }
}
