//! Everything pulling and pushing can fail with.

use crate::services::limits::human_bytes;

/// Everything pulling and pushing can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference does not parse.
    #[error("invalid reference {reference:?}: {reason}")]
    InvalidReference {
        /// The text.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// A request (its redirects and body included) took longer than the
    /// timeout (retried, within the pull's deadline).
    #[error("{url}: the request did not complete within {limit} (--timeout){last}")]
    TimedOut {
        /// The request.
        url: String,
        /// The bound (`30 s`).
        limit: String,
        /// The failure before, if any.
        last: String,
    },
    /// The pull (every attempt of every request) took longer than its
    /// deadline.
    #[error("{url}: stopped at the pull's deadline of {limit} (--registry-deadline){last}")]
    Deadline {
        /// The request under way.
        url: String,
        /// The deadline (`300 s`).
        limit: String,
        /// The failure before, if any.
        last: String,
    },
    /// A redirect that is not followed: no host, another scheme than
    /// http(s), HTTPS down to plain HTTP, too many.
    #[error("{url}: refused a redirect: {reason}")]
    Redirect {
        /// The request redirected.
        url: String,
        /// Why.
        reason: String,
    },
    /// The registry could not be reached (connection, TLS, timeout).
    #[error("cannot reach {url}: {reason}")]
    Network {
        /// The request.
        url: String,
        /// Why.
        reason: String,
    },
    /// A TLS handshake failed: the certificate is not trusted (its
    /// problem named), or the registry does not speak TLS.
    #[error("TLS to {url}: {reason}")]
    Tls {
        /// The request.
        url: String,
        /// What was wrong, and what to do.
        reason: String,
    },
    /// An extra CA file cannot be used.
    #[error("registry CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A transfer broke off (a stall past the timeout, a reset).
    #[error("reading {what}: {reason}")]
    Transfer {
        /// What was being read.
        what: String,
        /// Why it stopped.
        reason: String,
    },
    /// The registry answered with an unexpected status.
    #[error("{url}: the registry answered {status}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Status {
        /// The request.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of its body, and a hint.
        detail: String,
    },
    /// The registry holds no such tag, digest or blob.
    #[error("{what} not found in the registry")]
    NotFound {
        /// What was asked for.
        what: String,
    },
    /// A manifest is not one durasync can read.
    #[error("manifest {digest}: {reason}")]
    BadManifest {
        /// Its digest.
        digest: String,
        /// What is wrong.
        reason: String,
    },
    /// A config or layer of a media type a plugin artifact does not have.
    #[error("manifest {digest}: media type {media_type} {reason}")]
    MediaType {
        /// The manifest's digest.
        digest: String,
        /// The media type found.
        media_type: String,
        /// Why it is refused.
        reason: String,
    },
    /// Not exactly one wasm layer.
    #[error("manifest {digest} has {count} wasm layers; a plugin artifact has exactly one")]
    WasmLayers {
        /// The manifest's digest.
        digest: String,
        /// How many it has.
        count: usize,
    },
    /// A manifest or blob is larger than its limit.
    #[error("{what} is larger than the limit of {}", human_bytes(*limit))]
    TooLarge {
        /// What.
        what: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// A blob whose length is not the one its descriptor states.
    #[error(
        "{what} {digest}: its descriptor says {stated} bytes, but the blob is {actual} bytes; refusing it"
    )]
    SizeMismatch {
        /// What ("wasm layer").
        what: String,
        /// Its digest.
        digest: String,
        /// The descriptor's size.
        stated: u64,
        /// What came (`1234`, or `more than 1000` when cut off).
        actual: String,
    },
    /// Content whose digest is not the one asked for.
    #[error("{what}: the registry sent content whose digest is {actual}, not {expected}; refusing it")]
    DigestMismatch {
        /// What ("manifest", "layer").
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// The blob cache cannot be used.
    #[error("blob cache {path}: {reason}")]
    Cache {
        /// The file or directory.
        path: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// A failure that may pass: worth another attempt.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Network { .. } | Error::Transfer { .. } | Error::TimedOut { .. } => true,
            Error::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// Content that was refused (not a fetching failure): a digest that
    /// does not match, a media type, a layer count, a size over a limit, a
    /// manifest that does not parse, a reference that does not.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::InvalidReference { .. }
                | Error::BadManifest { .. }
                | Error::MediaType { .. }
                | Error::WasmLayers { .. }
                | Error::TooLarge { .. }
                | Error::DigestMismatch { .. }
                | Error::SizeMismatch { .. }
        )
    }

    /// The registry could not be reached in time (after the retries, or at
    /// the pull's deadline): a tag may be served from the cache.
    pub(super) fn is_unreachable(&self) -> bool {
        self.is_retryable() || matches!(self, Error::Deadline { .. })
    }
}
