//! Sigstore bundles attached to a manifest the way cosign v3 attaches them:
//! each in a referrer manifest whose `subject` is the signed manifest, listed
//! in an image index. On a registry without the referrers API (Debian's
//! `docker-registry`, distribution 2.8) the index is pushed under the
//! referrers tag schema's tag `sha256-<hex>`; against the fake registry the
//! same index is served at `/v2/<name>/referrers/<digest>`. The registry
//! side is a few lines of the distribution API, not durasync's code.

use serde_json::{Value, json};

use durasync::digest::oci_digest;

use crate::oci_artifacts::OCI_MANIFEST;

/// The media type of an OCI image index (the referrers list).
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The media type of the empty config a referrer manifest carries.
pub const EMPTY: &str = "application/vnd.oci.empty.v1+json";

/// The referrer manifest holding `bundle` for the manifest `subject`
/// (`subject_size` bytes), the bundle's `media_type` as artifact and layer
/// type: cosign v3's layout.
pub fn referrer_as(bundle: &[u8], media_type: &str, subject: &str, subject_size: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": media_type,
        "config": {"mediaType": EMPTY, "digest": oci_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": media_type, "digest": oci_digest(bundle), "size": bundle.len()}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": subject_size},
    }))
    .unwrap()
}

/// An index listing `referrers` (manifest bytes, artifact type), as the
/// referrers API and the tag schema give it.
pub fn index(referrers: &[(&[u8], &str)]) -> Vec<u8> {
    let m: Vec<Value> = referrers
        .iter()
        .map(|(b, at)| json!({"mediaType": OCI_MANIFEST, "digest": oci_digest(b), "size": b.len(), "artifactType": at}))
        .collect();
    serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": m})).unwrap()
}

/// Upload `blob` to `repo` on the plain-HTTP `registry` (`host:port`).
pub fn upload(registry: &str, repo: &str, blob: &[u8]) {
    let start = ureq::post(&format!("http://{registry}/v2/{repo}/blobs/uploads/")).call().unwrap();
    let location = start.header("location").unwrap().to_owned();
    let location = if location.starts_with('/') { format!("http://{registry}{location}") } else { location };
    let sep = if location.contains('?') { '&' } else { '?' };
    ureq::put(&format!("{location}{sep}digest={}", oci_digest(blob)))
        .set("Content-Type", "application/octet-stream")
        .send_bytes(blob)
        .unwrap();
}

/// Put the manifest `bytes` of `media_type` under `reference` (a tag or
/// its digest) in `repo`.
pub fn put_manifest(registry: &str, repo: &str, reference: &str, media_type: &str, bytes: &[u8]) {
    ureq::put(&format!("http://{registry}/v2/{repo}/manifests/{reference}"))
        .set("Content-Type", media_type)
        .send_bytes(bytes)
        .unwrap();
}

/// Attach each bundle (bytes, media type) to `subject` in `repo` through
/// the referrers tag schema: the blobs, each referrer manifest by digest,
/// then the `sha256-<hex>` index listing them all, which replaces any index
/// attached before.
pub fn attach_by_tag_as(registry: &str, repo: &str, subject: &str, bundles: &[(&[u8], &str)]) {
    let subject_size = ureq::get(&format!("http://{registry}/v2/{repo}/manifests/{subject}"))
        .set("Accept", OCI_MANIFEST)
        .call()
        .unwrap()
        .into_string()
        .unwrap()
        .len();
    upload(registry, repo, b"{}");
    let mut referrers = Vec::new();
    for (bundle, media_type) in bundles {
        upload(registry, repo, bundle);
        let r = referrer_as(bundle, media_type, subject, subject_size);
        put_manifest(registry, repo, &oci_digest(&r), OCI_MANIFEST, &r);
        referrers.push((r, *media_type));
    }
    let listed: Vec<(&[u8], &str)> = referrers.iter().map(|(r, t)| (r.as_slice(), *t)).collect();
    put_manifest(registry, repo, &subject.replace(':', "-"), INDEX, &index(&listed));
}
