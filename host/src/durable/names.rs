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
/// with any depth; only creating one is refused. The services count it
/// from a granted root whatever handle a plugin uses, so chaining
/// `open-dir` handles cannot build deeper than one direct call could.
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

/// The link of a directory in the symlink layout (`layout.rs`) that names
/// its current generation: `.durasync-data` → `.durasync-gen.<16 hex>`.
pub const DATA_LINK: &str = ".durasync-data";

/// Prefix of a generation directory of the symlink layout.
const GEN_PREFIX: &str = ".durasync-gen.";

/// A fresh, unpredictable generation name, e.g. `.durasync-gen.9f86d081884c7d65`.
pub fn gen_name() -> String {
    let stage = leftover_name(Leftover::Stage);
    let suffix = &stage[stage.len() - SUFFIX_HEX..];
    format!("{GEN_PREFIX}{suffix}")
}

/// Whether `name` is a generation directory's name: exactly
/// `.durasync-gen.<16 lowercase hex digits>`.
pub fn is_gen(name: &str) -> bool {
    name.strip_prefix(GEN_PREFIX).is_some_and(|suffix| {
        suffix.len() == SUFFIX_HEX && suffix.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// What the link of the top-level entry `name` of a directory in the symlink
/// layout holds: `.durasync-data/<name>`.
pub fn entry_link(name: &str) -> String {
    format!("{DATA_LINK}/{name}")
}

/// Prefix of a kept previous tree (or of the staging directory that will
/// become one): `.durasync-keep.<O>.<target>` or `.durasync-keep.<O>#<hash>`.
const KEEP_PREFIX: &str = ".durasync-keep.";

/// The longest target name embedded in a keep name as it is: the prefix
/// (15 bytes), the widest inode number (20 digits) and the separator leave
/// this much of [`NAME_MAX`]. A longer name is named by its hash.
pub const KEEP_EMBED_MAX: usize = NAME_MAX - KEEP_PREFIX.len() - 20 - 1;

/// The name of the entry that keeps the previous contents of the target
/// `target`, whose current inode number is `ino` (see `previous.rs`).
///
/// Self-describing, so no ledger is needed: `.durasync-keep.<ino>.<target>`
/// when `target` is at most [`KEEP_EMBED_MAX`] bytes, else
/// `.durasync-keep.<ino>#<16 hex digits>`, the FNV-1a hash of `target` (a
/// name can be 255 bytes, and the inode number must fit beside it). The
/// separator tells the two forms apart: an embedded name follows a `.`,
/// a hash a `#`, so a short name can never be mistaken for a long one's
/// hash. Which form a target gets depends on its name alone.
pub fn keep_name(ino: u64, target: &str) -> String {
    if target.len() <= KEEP_EMBED_MAX {
        format!("{KEEP_PREFIX}{ino}.{target}")
    } else {
        format!("{KEEP_PREFIX}{ino}#{:016x}", fnv1a(target.as_bytes()))
    }
}

/// The inode number a keep entry `entry` names, when `entry` is a keep
/// entry of the target `target` (see [`keep_name`]).
pub fn keep_of(entry: &str, target: &str) -> Option<u64> {
    parse_keep(entry).filter(|&ino| keep_name(ino, target) == entry)
}

/// The inode number a keep entry of any target names; `None` for every
/// other name. The number must be written canonically (no sign, no
/// leading zero), so one inode has exactly one keep name per target.
pub fn parse_keep(entry: &str) -> Option<u64> {
    let rest = entry.strip_prefix(KEEP_PREFIX)?;
    let end = rest.find(['.', '#'])?;
    let (digits, tail) = rest.split_at(end);
    let ino: u64 = digits.parse().ok()?;
    let well_formed = match tail.split_at(1) {
        ("#", hash) => hash.len() == 16 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        (_, name) => !name.is_empty() && name.len() <= KEEP_EMBED_MAX,
    };
    (ino.to_string() == digits && well_formed).then_some(ino)
}

/// FNV-1a, 64 bits: fixed, so every durasync version derives the same name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Whether `name` is one of durasync's own entries (a leftover or the lock),
/// which listings hide from plugins and which no request may name.
pub fn is_reserved(name: &str) -> bool {
    name == LOCK_NAME || name.starts_with(LEFTOVER_PREFIX)
}

/// Whether the relative path `path` is, or lies inside, one of durasync's
/// own entries (any of its components [`is_reserved`]; a trailing `/` of a
/// directory is ignored): not the plugin's.
pub fn is_reserved_path(path: &str) -> bool {
    path.split('/').any(|c| !c.is_empty() && is_reserved(c))
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

    #[test]
    fn keep_names_embed_short_targets_hash_long_ones_and_parse_back() {
        assert_eq!(keep_name(1234, "certs"), ".durasync-keep.1234.certs");
        assert_eq!(keep_of(".durasync-keep.1234.certs", "certs"), Some(1234));
        assert_eq!(keep_of(".durasync-keep.1234.certs", "cert"), None);
        let long = "x".repeat(NAME_MAX);
        let hashed = keep_name(u64::MAX, &long);
        assert!(hashed.len() <= NAME_MAX && hashed.contains('#'), "{hashed}");
        assert_eq!(keep_of(&hashed, &long), Some(u64::MAX));
        let widest = keep_name(u64::MAX, &"y".repeat(KEEP_EMBED_MAX));
        assert_eq!(widest.len(), NAME_MAX);
        assert_eq!(keep_of(&widest, &"y".repeat(KEEP_EMBED_MAX)), Some(u64::MAX));
        // A short name that looks like a hash is still embedded after a `.`.
        let lookalike = &hashed[hashed.find('#').unwrap()..];
        assert_eq!(keep_of(&hashed, lookalike), None);
        for not in [
            ".durasync-keep.01.a",
            ".durasync-keep.+1.a",
            ".durasync-keep.1.",
            ".durasync-keep..a",
            ".durasync-keep.1#abc",
            ".durasync-keep.x.a",
            ".durasync-stage-0123456789abcdef",
        ] {
            assert_eq!(parse_keep(not), None, "{not}");
        }
        assert!(is_reserved(&hashed) && !is_leftover(&hashed));
    }

    #[test]
    fn generation_names_are_reserved_never_leftovers_and_parse_back() {
        let g = gen_name();
        assert!(is_gen(&g) && is_reserved(&g) && !is_leftover(&g), "{g}");
        assert_ne!(g, gen_name());
        assert!(is_reserved(DATA_LINK) && !is_leftover(DATA_LINK) && !is_gen(DATA_LINK));
        for not in
            [".durasync-gen.", ".durasync-gen.0123456789ABCDEF", ".durasync-gen.0123456789abcdef0", "x"]
        {
            assert!(!is_gen(not), "{not}");
        }
        assert_eq!(entry_link("tls.crt"), ".durasync-data/tls.crt");
    }
}
