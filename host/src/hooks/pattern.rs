//! Path patterns of validators and actions: which changed paths (relative
//! to their root, `/`-separated) a hook applies to.
//!
//! A hook applies to a change when its pattern [`covers`] one of the paths
//! the change adds, rewrites or removes — every file and directory, at any
//! depth below the synced directory, and that directory itself — never
//! merely the path the plugin named in its call. A pattern covers a path it
//! matches and every path below one it matches: a pattern naming a
//! directory (`secrets/*` names `secrets/tls`) covers every file beneath
//! it (`secrets/tls/tls.key`), whichever call changes it.
//!
//! A small glob, matched component by component: `*` matches any run of
//! characters inside one component, `?` one character, `**` (a whole
//! component) any number of components, including none. Nothing else is
//! special. Written here rather than taken from a crate: it is these
//! thirty lines, its behaviour is pinned by the table below, and it never
//! touches the file system.

/// The longest pattern accepted (a manifest value).
pub const MAX_PATTERN_BYTES: usize = 1024;

/// Whether `path` (relative, `/`-separated, no `.` or `..`) matches `pattern`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    match_components(&pat, &comps)
}

/// Whether `pattern` covers `path`: it matches `path` or one of the
/// directories above it (below the root). A sync, a write and a removal
/// ask this of every path they change.
pub fn covers(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    (1..=comps.len()).any(|n| match_components(&pat, &comps[..n])) || (comps.is_empty() && pat.is_empty())
}

/// Whether `pattern` may cover `path` or anything below it: it covers
/// `path`, or some longer path beneath `path` could match it. For a change
/// whose files are not listed (an `exchange` moves whole trees).
pub fn may_cover_below(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    covers(pattern, path) || prefix_matches(&pat, &comps)
}

/// Whether some path starting with `comps` (at least one more component)
/// matches `pat`.
fn prefix_matches(pat: &[&str], comps: &[&str]) -> bool {
    match pat.split_first() {
        None => false,
        _ if comps.is_empty() => true,
        // `**` takes `comps` and the rest matches the components added.
        Some((&"**", _)) => true,
        Some((p, rest)) => comps
            .split_first()
            .is_some_and(|(c, more)| match_one(p.as_bytes(), c.as_bytes()) && prefix_matches(rest, more)),
    }
}

fn match_components(pat: &[&str], comps: &[&str]) -> bool {
    match pat.split_first() {
        None => comps.is_empty(),
        Some((&"**", rest)) => (0..=comps.len()).any(|skip| match_components(rest, &comps[skip..])),
        Some((p, rest)) => comps
            .split_first()
            .is_some_and(|(c, more)| match_one(p.as_bytes(), c.as_bytes()) && match_components(rest, more)),
    }
}

/// One component against one pattern component (`*`, `?`), iteratively
/// with one backtrack point, so a pattern cannot make it exponential.
fn match_one(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// Why `pattern` cannot be used, if it cannot.
pub fn check(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!("must be a pattern of 1 to {MAX_PATTERN_BYTES} bytes"));
    }
    if pattern.starts_with('/') {
        return Err("must be relative to its root (no leading `/`)".into());
    }
    if pattern.split('/').any(|c| c == "." || c == "..") {
        return Err("must not hold `.` or `..` components".into());
    }
    if pattern.split('/').filter(|c| *c == "**").count() > 4 {
        return Err("may hold at most 4 `**` components".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_by_component() {
        let table = [
            ("**", "a/b/c", true),
            ("**", "a", true),
            ("conf", "conf", true),
            ("conf", "conf/x", false),
            ("conf/**", "conf", true),
            ("conf/**", "conf/a/b", true),
            ("*.json", "a.json", true),
            ("*.json", "d/a.json", false),
            ("**/*.json", "d/e/a.json", true),
            ("secrets/*", "secrets/tls", true),
            ("secrets/*", "secrets/tls/x", false),
            ("c?nf", "conf", true),
            ("c?nf", "cnf", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
        ];
        for (p, s, want) in table {
            assert_eq!(matches(p, s), want, "{p} ~ {s}");
        }
    }

    #[test]
    fn a_pattern_covers_what_it_matches_and_everything_below_it() {
        use super::{covers, may_cover_below};
        let table = [
            ("secrets/*", "secrets/tls/tls.key", true),
            ("secrets/*", "secrets/tls", true),
            ("secrets/*", "secrets", false),
            ("secrets", "secrets/tls/tls.key", true),
            ("conf/only.json", "conf/other", false),
            ("conf/only.json", "conf", false),
            ("*.json", "d/a.json", false),
            ("**/*.json", "d/a.json", true),
            ("**", "a", true),
        ];
        for (p, s, want) in table {
            assert_eq!(covers(p, s), want, "{p} covers {s}");
        }
        let below = [
            ("conf/d", "conf", true),
            ("conf/d", "tmp", false),
            ("conf/*/x", "conf", true),
            ("**/x", "tmp", true),
            ("conf", "conf/sub", true),
            ("conf/sub/x", "conf/other", false),
        ];
        for (p, s, want) in below {
            assert_eq!(may_cover_below(p, s), want, "{p} may cover below {s}");
        }
    }
}
