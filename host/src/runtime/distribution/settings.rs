//! How registries are reached: timeouts, attempts, size caps, and the
//! operator's insecure registries and CA from the environment.

use std::path::PathBuf;
use std::time::Duration;

/// How registries are reached.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The compile cache's directory: blobs go to `<dir>/oci/`. `None`: a
    /// private temporary directory, removed when the [`Registry`](super::Registry) is dropped.
    pub cache_dir: Option<PathBuf>,
    /// Connect, read and write timeout of each request (a stall longer than
    /// this fails the attempt), and the bound of a small request (manifest,
    /// token, HEAD) as a whole, redirects and body included.
    pub timeout: Duration,
    /// Attempts per request (connection failures, timeouts, 5xx, 429).
    pub attempts: u32,
    /// The longest a whole pull (or push) may take: every request, attempt
    /// and pause of it. A blob request is bounded by this alone (besides
    /// each read's `timeout`); a manifest, token or HEAD also by `timeout`
    /// as a whole.
    pub deadline: Duration,
    /// The pause before the second attempt; doubled for each later one.
    pub backoff: Duration,
    /// The largest manifest accepted.
    pub max_manifest_bytes: u64,
    /// The largest component (wasm layer) accepted.
    pub max_blob_bytes: u64,
    /// Registries (`host` or `host:port`) reached over plain HTTP besides
    /// loopback ones.
    pub insecure: Vec<String>,
    /// Extra CA certificates (PEM files) trusted for registries' TLS,
    /// besides the web PKI roots: a private registry's own CA.
    pub ca_files: Vec<PathBuf>,
    /// `(REGISTRY, MIRROR)`: pull `REGISTRY/REPO` from `MIRROR/REPO` (an
    /// air-gapped node's registry). References, cache keys and the trust
    /// checks keep the original name; digests and signatures make the
    /// mirror as trustworthy as the original.
    pub mirrors: Vec<(String, String)>,
}

/// The default timeout of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default deadline of a whole pull: 256 MiB (the largest blob
/// accepted) at under 1 MB/s; a plugin is usually a few MiB.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// Attempts per request by default.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// 4 MiB: what the OCI distribution spec asks registries to accept; a
/// plugin's manifest is under 1 KiB.
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// 256 MiB: the largest plugins seen (interpreters bundled into a
/// component) are under 20 MiB; a registry must not fill the disk.
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 256 << 20;
/// A cosign payload is a few hundred bytes.
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cache_dir: None,
            timeout: DEFAULT_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
            deadline: DEFAULT_DEADLINE,
            backoff: Duration::from_millis(500),
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
            max_blob_bytes: DEFAULT_MAX_BLOB_BYTES,
            insecure: env_list(INSECURE_ENV),
            ca_files: env_list(CA_ENV).into_iter().map(PathBuf::from).collect(),
            mirrors: env_list("DURASYNC_REGISTRY_MIRRORS")
                .into_iter()
                .filter_map(|m| {
                    let (from, to) = m.split_once('=')?;
                    Some((from.trim().to_owned(), to.trim().to_owned()))
                })
                .collect(),
        }
    }
}

/// The registries (comma-separated `host` or `host:port`) reached over
/// plain HTTP besides loopback ones.
pub const INSECURE_ENV: &str = "DURASYNC_INSECURE_REGISTRIES";
/// Extra CA files (comma-separated paths) for registries' TLS.
pub const CA_ENV: &str = "DURASYNC_REGISTRY_CA";

/// A comma-separated environment variable, empty items dropped.
fn env_list(name: &str) -> Vec<String> {
    std::env::var(name)
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}
