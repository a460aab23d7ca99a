//! oci tests (see tests/README.md): plugins from OCI registries, trusted by
//! digest, pin or cosign signature, through the real `durasync` binary.
//!
//! The registry is real: Debian's `docker-registry` (distribution 2.8),
//! started here on 127.0.0.1 at a free port with its own config and
//! temporary storage. The other side of every exchange is another
//! implementation: `skopeo` pushes and reads back, `openssl` makes the keys
//! and signatures. Protocol faults a real registry never shows (wrong
//! bytes under a digest, 401/500, garbage, a stall) come from a tiny fake
//! on 127.0.0.1 (`fake.rs`).

#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

mod auth;
mod cross;
mod fake;
mod faults;
mod offline;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

// The documented exit statuses (README, host/src/cli/exit.rs).
const OK: i32 = 0;
const IO: i32 = 1;
const POLICY: i32 = 12;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn sha256(bytes: &[u8]) -> String {
    durasync::runtime::sha256_hex(bytes)
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256(bytes))
}

/// The example plugin (KEY=value lines → an envdir under root `out`).
fn example_wasm() -> PathBuf {
    support::wasm::build("Cargo.toml", "example")
}

/// Whether `tool` is on PATH; if not, `cannot_check` (fails under CI).
fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        support::cannot_check(&format!("`{tool}` is not installed"));
    }
    found
}

/// `durasync ARGS` with a private cache, no inherited docker config.
fn durasync(cache: &Path, args: &[&str]) -> Output {
    durasync_env(cache, args, &[])
}

/// `durasync ARGS` with a private cache and these environment variables.
fn durasync_env(cache: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    Command::new(support::durasync())
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("HOME", cache)
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .env("DURASYNC_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[track_caller]
fn assert_status(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "expected exit {code}:\n{}", text(out));
}

/// The value after `label` on a line of `pull`/`push` output.
fn field(out: &Output, label: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("no {label:?} in:\n{}", text(out)))
}

/// A real registry (Debian's `docker-registry`) on 127.0.0.1 at a free
/// port, with temporary storage; killed on drop.
struct RealRegistry {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// Extra top-level config (an `auth:` section).
    extra: String,
    /// Spawns left on another port when the chosen one was taken.
    retries_left: u32,
}

impl RealRegistry {
    /// `None` (after `cannot_check`) when the package is not installed.
    fn start() -> Option<RealRegistry> {
        Self::start_with(|_| String::new())
    }

    /// With extra config, made from the registry's own temporary directory.
    fn start_with(extra: impl FnOnce(&Path) -> String) -> Option<RealRegistry> {
        if !have("docker-registry") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let extra = extra(dir.path());
        let mut r = RealRegistry { child: None, port, dir, extra, retries_left: 3 };
        r.spawn();
        r.retries_left = 0;
        Some(r)
    }

    fn spawn(&mut self) {
        let config = self.dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{}\n{}",
                self.dir.path().join("storage").display(),
                self.port,
                self.extra
            ),
        )
        .unwrap();
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("registry.log")).unwrap())
            .spawn()
            .unwrap();
        // Ready when /v2/ answers (200, or 401 with auth); the deadline
        // only bounds a failure.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default();
                // The free port was taken by someone else in between: once
                // more on another port (a restart keeps its port: no retry).
                if log.contains("address already in use") && self.retries_left > 0 {
                    self.retries_left -= 1;
                    self.port = free_port();
                    return self.spawn();
                }
                panic!("docker-registry exited ({status}) before it was ready:\n{log}");
            }
            if matches!(http_status(self.port, "/v2/"), Some(200 | 401)) {
                break;
            }
            assert!(Instant::now() < deadline, "docker-registry did not answer on port {}", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
    }

    /// Stop it (the storage stays: `restart` brings the same content back).
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn registry(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for RealRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The status of `GET path`, or `None` when nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// One blob of an OCI layout: media type, bytes, annotations.
struct Blob<'a> {
    media_type: &'a str,
    bytes: Vec<u8>,
    annotations: serde_json::Value,
}

fn blob(media_type: &str, bytes: Vec<u8>) -> Blob<'_> {
    Blob { media_type, bytes, annotations: json!({}) }
}

fn descriptor(b: &Blob<'_>) -> serde_json::Value {
    let mut d = json!({"mediaType": b.media_type, "digest": digest(&b.bytes), "size": b.bytes.len()});
    if b.annotations.as_object().is_some_and(|o| !o.is_empty()) {
        d["annotations"] = b.annotations.clone();
    }
    d
}

/// The manifest bytes for a config and layers.
fn manifest_bytes(config: &Blob<'_>, layers: &[Blob<'_>]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(config),
        "layers": layers.iter().map(descriptor).collect::<Vec<_>>(),
    }))
    .unwrap()
}

/// Lay out an OCI image-layout directory holding one manifest at `tag`;
/// returns the manifest's digest.
fn oci_layout(dir: &Path, tag: &str, config: &Blob<'_>, layers: &[Blob<'_>]) -> String {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let manifest = manifest_bytes(config, layers);
    for bytes in std::iter::once(&config.bytes).chain(layers.iter().map(|l| &l.bytes)).chain([&manifest]) {
        std::fs::write(blobs.join(sha256(bytes)), bytes).unwrap();
    }
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": OCI_MANIFEST, "digest": digest(&manifest), "size": manifest.len(),
        "annotations": {"org.opencontainers.image.ref.name": tag}}]});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    digest(&manifest)
}

/// `skopeo copy --preserve-digests oci:DIR:TAG docker://REGISTRY/REPO:TAG`.
fn skopeo_push(layout: &Path, tag: &str, registry: &str, repo: &str) {
    let policy = layout.with_extension("policy.json");
    std::fs::write(&policy, r#"{"default":[{"type":"insecureAcceptAnything"}]}"#).unwrap();
    let out = Command::new("skopeo")
        .arg("--policy")
        .arg(&policy)
        .args(["copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:{tag}", layout.display()))
        .arg(format!("docker://{registry}/{repo}:{tag}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo copy failed:\n{}", text(&out));
}
