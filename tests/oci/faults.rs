//! Bad input from a registry, each a test: nothing is cached under a wrong
//! digest, nothing is loaded, and the message names the problem.

use std::collections::HashMap;

use super::support::fake_registry::{Fake, Reply};
use super::*;

pub(super) const REPO: &str = "vendor/plugin";
pub(super) const WASM_LAYER: &str = "application/wasm";
pub(super) const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";

/// Routes serving `manifest` at tag `t` and at its digest, and `blobs`.
pub(super) fn routes(manifest: &[u8], blobs: &[(&str, Vec<u8>)]) -> HashMap<String, Reply> {
    let mut r = HashMap::new();
    let m = Reply::Body(200, OCI_MANIFEST, manifest.to_vec());
    r.insert(format!("/v2/{REPO}/manifests/t"), m.clone());
    r.insert(format!("/v2/{REPO}/manifests/{}", oci_digest(manifest)), m);
    for (d, bytes) in blobs {
        r.insert(
            format!("/v2/{REPO}/blobs/{d}"),
            Reply::Body(200, "application/octet-stream", bytes.clone()),
        );
    }
    r
}

pub(super) fn wasm() -> Vec<u8> {
    b"\0asm\x0d\x00\x01\x00 a stand-in component (pull does not compile)".to_vec()
}

pub(super) fn pull(fake: &Fake, cache: &Path, target: &str, extra: &[&str]) -> Output {
    let reference = format!("oci://{}/{REPO}{target}", fake.registry());
    let mut args = vec!["pull", &reference];
    args.extend(extra);
    durasync(cache, &args)
}

pub(super) fn blob_requests(fake: &Fake) -> usize {
    fake.requests().iter().filter(|r| r.contains("/blobs/")).count()
}

/// The blob cache holds nothing but these digests (no temporary leftovers).
pub(super) fn assert_cache_holds(cache: &Path, digests: &[String]) {
    let dir = cache.join("durasync/oci/blobs/sha256");
    let mut held: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.map(|e| e.unwrap().file_name().into_string().unwrap()).collect())
        .unwrap_or_default();
    held.sort();
    let mut want: Vec<String> = digests.iter().map(|d| d.trim_start_matches("sha256:").to_owned()).collect();
    want.sort();
    assert_eq!(held, want);
}

#[test]
fn a_good_artifact_from_the_fake_is_pulled_which_makes_the_faults_below_meaningful() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), w.clone())]));
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, OK);
    assert_eq!(field(&out, "manifest digest:"), oci_digest(&m));
    assert_eq!(field(&out, "sha256:"), sha256_hex(&w));
    assert_cache_holds(tmp.path(), &[oci_digest(&m), oci_digest(&w)]);
    // By digest, a second time: served from the cache, no request at all.
    let before = fake.requests().len();
    let out = pull(&fake, tmp.path(), &format!("@{}", oci_digest(&m)), &[]);
    assert_status(&out, OK);
    assert_eq!(fake.requests().len(), before, "{:?}", fake.requests());
}

#[test]
fn a_layer_whose_bytes_do_not_match_its_digest_is_refused_and_not_cached() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let mut evil = w.clone();
    evil[10] ^= 1;
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), evil.clone())]));
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    assert!(msg.contains(&format!("digest is {}, not {}", oci_digest(&evil), oci_digest(&w))), "{msg}");
    assert_cache_holds(tmp.path(), &[oci_digest(&m)]);
}

#[test]
fn a_manifest_that_is_not_the_digest_in_the_reference_is_refused() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let claimed = oci_digest(b"another manifest");
    let mut r = routes(&m, &[(&oci_digest(&w), w)]);
    r.insert(format!("/v2/{REPO}/manifests/{claimed}"), Reply::Body(200, OCI_MANIFEST, m.clone()));
    let fake = Fake::start(r);
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), &format!("@{claimed}"), &[]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains(&format!("digest is {}, not {claimed}", oci_digest(&m))),
        "{}",
        output_text(&out)
    );
    assert_eq!(blob_requests(&fake), 0);
    assert_cache_holds(tmp.path(), &[]);
}

#[test]
fn two_wasm_layers_are_refused_before_any_layer_is_fetched() {
    let w = wasm();
    let m = manifest_bytes(
        &blob(WASM_CONFIG, b"{}".to_vec()),
        &[blob(WASM_LAYER, w.clone()), blob(WASM_LAYER, b"second".to_vec())],
    );
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), w)]));
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains("has 2 wasm layers; a plugin artifact has exactly one"),
        "{}",
        output_text(&out)
    );
    assert_eq!(blob_requests(&fake), 0);
}

#[test]
fn a_layer_or_config_of_another_media_type_is_refused_by_name() {
    let w = wasm();
    let tar = "application/vnd.oci.image.layer.v1.tar+gzip";
    let m = manifest_bytes(
        &blob(WASM_CONFIG, b"{}".to_vec()),
        &[blob(WASM_LAYER, w.clone()), blob(tar, b"t".to_vec())],
    );
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), w.clone())]));
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains(&format!("media type {tar} is not a wasm layer")),
        "{}",
        output_text(&out)
    );

    let image = "application/vnd.docker.container.image.v1+json";
    let m = manifest_bytes(&blob(image, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), w)]));
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains(&format!("media type {image} is not a wasm artifact's config")),
        "{}",
        output_text(&out)
    );
    assert_eq!(blob_requests(&fake), 0);
}

#[test]
fn a_blob_over_the_limit_is_refused_before_fetching_or_while_streaming() {
    let big = vec![7u8; 1 << 20];
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, big.clone())]);
    let fake = Fake::start(routes(&m, &[(&oci_digest(&big), big.clone())]));
    let tmp = tempfile::tempdir().unwrap();
    // The descriptor says 1 MiB: refused without a request for the blob.
    let out = pull(&fake, tmp.path(), ":t", &["--max-bytes", "65536"]);
    assert_status(&out, POLICY);
    assert!(output_text(&out).contains("larger than the limit of 64 KiB"), "{}", output_text(&out));
    assert_eq!(blob_requests(&fake), 0);

    // A descriptor that lies about the size: the stream is cut at it.
    let mut manifest: serde_json::Value = serde_json::from_slice(&m).unwrap();
    manifest["layers"][0]["size"] = 1000.into();
    let lying = serde_json::to_vec(&manifest).unwrap();
    let fake = Fake::start(routes(&lying, &[(&oci_digest(&big), big.clone())]));
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    assert!(output_text(&out).contains("its descriptor says 1000 bytes"), "{}", output_text(&out));
    assert_eq!(blob_requests(&fake), 1);
    assert_cache_holds(tmp.path(), &[oci_digest(&m), oci_digest(&lying)]);
}

#[test]
fn a_registry_answering_401_is_an_error_that_says_how_to_give_credentials() {
    let mut r = HashMap::new();
    r.insert(
        format!("/v2/{REPO}/manifests/t"),
        Reply::Body(401, "application/json", br#"{"errors":[{"code":"UNAUTHORIZED"}]}"#.to_vec()),
    );
    let fake = Fake::start(r);
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, IO);
    let msg = output_text(&out);
    assert!(msg.contains("answered 401") && msg.contains("docker login"), "{msg}");
    assert_eq!(fake.requests().len(), 1, "a 401 is not retried: {:?}", fake.requests());
}

#[test]
fn a_registry_answering_500_is_retried_a_bounded_number_of_times() {
    let mut r = HashMap::new();
    r.insert(format!("/v2/{REPO}/manifests/t"), Reply::Body(500, "text/plain", b"internal trouble".to_vec()));
    let fake = Fake::start(r);
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &["--attempts", "3"]);
    assert_status(&out, IO);
    assert!(output_text(&out).contains("answered 500: internal trouble"), "{}", output_text(&out));
    assert_eq!(fake.requests().len(), 3, "{:?}", fake.requests());
}

#[test]
fn garbage_instead_of_a_manifest_is_refused() {
    let mut r = HashMap::new();
    r.insert(
        format!("/v2/{REPO}/manifests/t"),
        Reply::Body(200, OCI_MANIFEST, b"<html>surprise</html>".to_vec()),
    );
    let fake = Fake::start(r);
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    assert!(output_text(&out).contains("not JSON"), "{}", output_text(&out));
    assert_eq!(blob_requests(&fake), 0);
}

#[test]
fn a_stalled_registry_times_out_after_bounded_attempts() {
    let mut r = HashMap::new();
    r.insert(format!("/v2/{REPO}/manifests/t"), Reply::Stall);
    let fake = Fake::start(r);
    let tmp = tempfile::tempdir().unwrap();
    let out = pull(&fake, tmp.path(), ":t", &["--timeout", "1", "--attempts", "2"]);
    assert_status(&out, IO);
    assert!(output_text(&out).contains("timed out"), "{}", output_text(&out));
    assert_eq!(fake.requests().len(), 2, "{:?}", fake.requests());
}

#[test]
fn a_reference_without_trust_is_refused_before_any_network_io() {
    let fake = Fake::start(HashMap::new());
    let tmp = tempfile::tempdir().unwrap();
    let manifest = super::cross::run_manifest(tmp.path(), &format!("oci://{}/{REPO}:t", fake.registry()), "");
    let out = super::cross::run(tmp.path(), &manifest);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    for way in ["sha256 = ", "@sha256:", "[verify]"] {
        assert!(msg.contains(way), "the message names {way}: {msg}");
    }
    let out = durasync(tmp.path(), &["inspect", &format!("oci://{}/{REPO}:t", fake.registry())]);
    assert_status(&out, POLICY);
    assert!(output_text(&out).contains("[verify]"), "{}", output_text(&out));
    assert_eq!(fake.requests(), Vec::<String>::new());
}
