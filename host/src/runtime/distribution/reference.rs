//! An OCI reference: `oci://REGISTRY/REPOSITORY:TAG`,
//! `oci://REGISTRY/REPOSITORY@sha256:HEX`, or both (the digest wins; the tag
//! is kept for messages and for the signature's identity).
//!
//! Parsing is strict and happens before any network I/O: a registry host
//! (with an optional port), a lowercase repository path, a tag or a sha256
//! digest. A digest is only ever `sha256:` followed by 64 lowercase hex
//! digits, so it is safe to use as a file name in the cache.

use super::Error;

/// The URL scheme of a reference in a manifest.
pub const SCHEME: &str = "oci://";

/// The longest reference accepted (registries allow 255 for the repository).
const MAX_REFERENCE_LEN: usize = 512;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// `path/to/repo`.
    pub repository: String,
    /// The tag, when the reference names one.
    pub tag: Option<String>,
    /// The manifest digest (`sha256:…`), when the reference names one.
    pub digest: Option<String>,
}

impl Reference {
    /// Parse `oci://REGISTRY/REPO:TAG` or `…@sha256:HEX`; the `oci://`
    /// prefix is optional here (the manifest requires it, the CLI does not).
    pub fn parse(text: &str) -> Result<Reference, Error> {
        let bad = |why: &str| Error::InvalidReference { reference: text.to_owned(), reason: why.to_owned() };
        if text.len() > MAX_REFERENCE_LEN {
            return Err(bad("longer than 512 bytes"));
        }
        let rest = text.strip_prefix(SCHEME).unwrap_or(text);
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => {
                check_digest(d).map_err(|w| bad(&w))?;
                (r, Some(d.to_owned()))
            }
            None => (rest, None),
        };
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("expected REGISTRY/REPOSITORY"))?;
        check_registry(registry).map_err(|w| bad(&w))?;
        // The tag is after the last `:` of the path (the registry's port is
        // already split off with the registry).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) => (r, Some(t)),
            None => (path, None),
        };
        check_repository(repository).map_err(|w| bad(&w))?;
        if let Some(t) = tag {
            check_tag(t).map_err(|w| bad(&w))?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad("name a tag (`:TAG`) or a manifest digest (`@sha256:…`)"));
        }
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// What the registry is asked for: the digest when there is one, else the tag.
    pub fn target(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }

    /// The same repository at `digest`.
    pub fn with_digest(&self, digest: &str) -> Reference {
        Reference { digest: Some(digest.to_owned()), ..self.clone() }
    }

    /// The same repository at `tag`, without a digest.
    pub fn with_tag(&self, tag: &str) -> Reference {
        Reference { tag: Some(tag.to_owned()), digest: None, ..self.clone() }
    }

    /// `REGISTRY/REPOSITORY` (cosign's `docker-reference`).
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// A digest this host can check: `sha256:` and 64 lowercase hex digits.
pub fn check_digest(d: &str) -> Result<(), String> {
    let Some(hex) = d.strip_prefix("sha256:") else {
        return Err(format!("digest {d:?} is not a sha256 digest (`sha256:` and 64 hex digits)"));
    };
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("digest {d:?} does not have 64 lowercase hex digits"));
    }
    Ok(())
}

fn check_registry(r: &str) -> Result<(), String> {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || r.starts_with('[') => (h, Some(p)),
        _ => (r, None),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && (host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            || (host.starts_with('[') && host.ends_with(']')));
    if !host_ok {
        return Err(format!("registry {r:?} is not a host name with an optional port"));
    }
    if let Some(p) = port
        && p.parse::<u16>().is_err()
    {
        return Err(format!("registry {r:?} has a bad port"));
    }
    Ok(())
}

fn check_repository(r: &str) -> Result<(), String> {
    let ok_component = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
            && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    if r.is_empty() || r.len() > 255 || !r.split('/').all(ok_component) {
        return Err(format!(
            "repository {r:?} must be lowercase path components of letters, digits, `.`, `_`, `-`"
        ));
    }
    Ok(())
}

fn check_tag(t: &str) -> Result<(), String> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !t.starts_with(['.', '-']);
    if !ok {
        return Err(format!("tag {t:?} must be 1 to 128 letters, digits, `_`, `.`, `-`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_with_tags_digests_and_ports_parse() {
        let r = Reference::parse("oci://127.0.0.1:5000/vendor/certsync:1.2").unwrap();
        assert_eq!((r.registry.as_str(), r.repository.as_str()), ("127.0.0.1:5000", "vendor/certsync"));
        assert_eq!((r.tag.as_deref(), r.digest.as_deref()), (Some("1.2"), None));
        let r = Reference::parse(&format!("oci://ghcr.io/a/b@{D}")).unwrap();
        assert_eq!((r.tag, r.digest.as_deref()), (None, Some(D)));
        let r = Reference::parse(&format!("registry.example:443/a:v1@{D}")).unwrap();
        assert_eq!(r.target(), D);
        assert_eq!(r.to_string(), format!("oci://registry.example:443/a:v1@{D}"));
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        for (text, why) in [
            ("oci://ghcr.io/a", "name a tag"),
            ("oci://ghcr.io", "REGISTRY/REPOSITORY"),
            ("oci://ghcr.io/A:1", "lowercase"),
            ("oci://ghcr.io/a/../b:1", "lowercase"),
            ("oci://ghcr.io/a:-x", "tag"),
            ("oci://ghcr.io/a@sha512:00", "not a sha256"),
            ("oci://ghcr.io/a@sha256:AB", "64 lowercase"),
            ("oci://gh cr.io/a:1", "host name"),
            ("oci://ghcr.io:99999/a:1", "port"),
        ] {
            let err = Reference::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
