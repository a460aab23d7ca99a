//! OCI artifacts made by other implementations than durasync's: image
//! layouts written here and pushed by `skopeo copy --preserve-digests`,
//! ECDSA P-256 keys and cosign signatures made by `openssl` (Debian's
//! skopeo cannot sign; durasync's own code never signs in the tests).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use durasync::digest::{oci_digest, sha256_hex};

use crate::output_text;

/// The media type of an OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// One blob of an OCI layout: media type, bytes, annotations.
pub struct Blob<'a> {
    /// Its media type.
    pub media_type: &'a str,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its descriptor's annotations.
    pub annotations: serde_json::Value,
}

/// A blob without annotations.
pub fn blob(media_type: &str, bytes: Vec<u8>) -> Blob<'_> {
    Blob { media_type, bytes, annotations: json!({}) }
}

/// The descriptor of `b`: media type, digest, size, and its annotations if any.
pub fn descriptor(b: &Blob<'_>) -> serde_json::Value {
    let mut d = json!({"mediaType": b.media_type, "digest": oci_digest(&b.bytes), "size": b.bytes.len()});
    if b.annotations.as_object().is_some_and(|o| !o.is_empty()) {
        d["annotations"] = b.annotations.clone();
    }
    d
}

/// The manifest bytes for a config and layers.
pub fn manifest_bytes(config: &Blob<'_>, layers: &[Blob<'_>]) -> Vec<u8> {
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
pub fn oci_layout(dir: &Path, tag: &str, config: &Blob<'_>, layers: &[Blob<'_>]) -> String {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let manifest = manifest_bytes(config, layers);
    for bytes in std::iter::once(&config.bytes).chain(layers.iter().map(|l| &l.bytes)).chain([&manifest]) {
        std::fs::write(blobs.join(sha256_hex(bytes)), bytes).unwrap();
    }
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": OCI_MANIFEST, "digest": oci_digest(&manifest), "size": manifest.len(),
        "annotations": {"org.opencontainers.image.ref.name": tag}}]});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    oci_digest(&manifest)
}

/// `skopeo copy --preserve-digests oci:DIR:TAG docker://REGISTRY/REPO:TAG`.
pub fn skopeo_push(layout: &Path, tag: &str, registry: &str, repo: &str) {
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
    assert!(out.status.success(), "skopeo copy failed:\n{}", output_text(&out));
}

/// An openssl ECDSA P-256 key pair in `dir`: (private PEM, public PEM).
pub fn openssl_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (key, public) = (dir.join(format!("{name}.key")), dir.join(format!("{name}.pub")));
    let sh = format!(
        "openssl ecparam -name prime256v1 -genkey -noout -out '{}' && openssl ec -in '{}' -pubout -out '{}' 2>/dev/null",
        key.display(),
        key.display(),
        public.display()
    );
    let out = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(out.status.success(), "openssl: {}", output_text(&out));
    (key, public)
}

/// cosign's simple-signing payload for `digest`.
pub fn payload(reference: &str, digest: &str, optional: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature"
        },
        "optional": optional
    }))
    .unwrap()
}

/// `openssl dgst -sha256 -sign KEY` over `payload`, base64 (DER inside).
pub fn openssl_sign(dir: &Path, key: &Path, payload: &[u8]) -> String {
    let p = dir.join("payload.json");
    std::fs::write(&p, payload).unwrap();
    let sh = format!("openssl dgst -sha256 -sign '{}' '{}' | openssl base64 -A", key.display(), p.display());
    let out = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(out.status.success(), "openssl: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Push a cosign signature manifest for `signed` (the `sha256-<hex>.sig`
/// tag) with skopeo: one payload layer carrying its signature annotation.
pub fn skopeo_push_signature(
    tmp: &Path,
    registry: &str,
    repo: &str,
    signed: &str,
    payload: Vec<u8>,
    sig: &str,
) {
    let tag = format!("{}.sig", signed.replace(':', "-"));
    let config = json!({
        "architecture": "", "created": "0001-01-01T00:00:00Z", "os": "", "config": {},
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "rootfs": {"type": "layers", "diff_ids": [oci_digest(&payload)]}
    });
    let mut layer = blob("application/vnd.dev.cosign.simplesigning.v1+json", payload);
    layer.annotations = json!({"dev.cosignproject.cosign/signature": sig});
    let layout = tmp.join(format!("sig-{}", &signed[7..19]));
    let config = blob("application/vnd.oci.image.config.v1+json", serde_json::to_vec(&config).unwrap());
    oci_layout(&layout, &tag, &config, &[layer]);
    skopeo_push(&layout, &tag, registry, repo);
}
