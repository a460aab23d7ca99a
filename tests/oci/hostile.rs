//! A registry that attacks: redirects where no client should go,
//! credentials lured to another host, a manifest dripped to hold a pull
//! forever, a descriptor that lies about a size, and what a killed pull
//! leaves in the cache. Two fakes on 127.0.0.1 at different ports are two
//! hosts (credentials are bound to `host:port`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::faults::{REPO, WASM_CONFIG, WASM_LAYER, assert_cache_holds, pull, routes, wasm};
use super::support::fake_registry::{Fake, Reply};
use super::*;

/// `{"auths": {registry: user:password}}` as `docker login` writes it, in `dir/config.json`.
fn docker_config(dir: &Path, registry: &str, user_password: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, user_password);
    let config = serde_json::json!({"auths": {registry: {"auth": auth}}});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir.to_owned()
}

#[test]
fn pull_refuses_a_redirect_to_a_url_without_a_host() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let tmp = tempfile::tempdir().unwrap();
    for location in ["file:///etc/passwd", "http:///etc/passwd", "ftp://127.0.0.1/x", "gopher:x"] {
        let mut r = routes(&m, &[]);
        r.insert(
            format!("/v2/{REPO}/blobs/{}", oci_digest(&w)),
            Reply::Headers(307, vec![format!("Location: {location}")], Vec::new()),
        );
        let fake = Fake::start(r);
        let out = pull(&fake, tmp.path(), ":t", &[]);
        // Not a panic (101): an error naming the redirect, nothing cached.
        assert_status(&out, IO);
        let msg = output_text(&out);
        assert!(msg.contains("redirect") && msg.contains(location), "{location}: {msg}");
        assert_cache_holds(tmp.path(), &[oci_digest(&m)]);
    }

    // A loop of redirects is cut after a bounded number.
    let mut r = routes(&m, &[]);
    let path = format!("/v2/{REPO}/blobs/{}", oci_digest(&w));
    r.insert(path.clone(), Reply::Headers(307, vec![format!("Location: {path}")], Vec::new()));
    let fake = Fake::start(r);
    let out = pull(&fake, tmp.path(), ":t", &["--attempts", "1"]);
    assert_status(&out, IO);
    assert!(output_text(&out).contains("too many redirects"), "{}", output_text(&out));
    let hops = fake.requests().iter().filter(|q| q.contains("/blobs/")).count();
    assert!((2..=6).contains(&hops), "{hops} requests for the blob: {:?}", fake.requests());
}

#[test]
fn a_blob_redirected_to_another_host_never_receives_the_registrys_credentials() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:s3cret")
    );

    // B: a storage host that wants a bearer token from its own plain-HTTP realm.
    let mut b_routes = HashMap::new();
    b_routes.insert(
        "/token".to_owned(),
        Reply::Body(200, "application/json", br#"{"token":"b-token"}"#.to_vec()),
    );
    // The realm names B's own port, known once B listens.
    let b = Fake::start_with(|port| {
        let mut routes = b_routes.clone();
        routes.insert(
            "/storage/blob".to_owned(),
            Reply::Guarded(
                "Bearer b-token".into(),
                format!(r#"Bearer realm="http://127.0.0.1:{port}/token",service="b""#),
                Box::new(Reply::Body(200, "application/octet-stream", w.clone())),
            ),
        );
        routes
    });

    // A: everything behind basic auth; the blob redirects to B.
    let mut a_routes = HashMap::new();
    for (path, reply) in routes(&m, &[]) {
        a_routes.insert(path, Reply::Guarded(basic.clone(), r#"Basic realm="a""#.into(), Box::new(reply)));
    }
    a_routes.insert(
        format!("/v2/{REPO}/blobs/{}", oci_digest(&w)),
        Reply::Guarded(
            basic.clone(),
            r#"Basic realm="a""#.into(),
            Box::new(Reply::Headers(
                307,
                vec![format!("Location: http://127.0.0.1:{}/storage/blob", b.port)],
                Vec::new(),
            )),
        ),
    );
    let a = Fake::start(a_routes);

    let tmp = tempfile::tempdir().unwrap();
    let docker = docker_config(&tmp.path().join("docker"), &a.registry(), "alice:s3cret");
    let reference = format!("oci://{}/{REPO}:t", a.registry());
    let out = durasync_env(&tmp.path().join("cache"), &["pull", &reference], &[("DOCKER_CONFIG", &docker)]);
    let leaked: Vec<_> = b.authorizations().into_iter().filter(|(_, v)| v.starts_with("Basic")).collect();
    assert!(leaked.is_empty(), "B received A's credentials: {leaked:?}\n{}", output_text(&out));
    assert_status(&out, OK);
    assert_eq!(field(&out, "sha256:"), sha256_hex(&w));
    // B's token went to B only, A's basic credentials to A only.
    assert!(a.authorizations().iter().all(|(_, v)| v == &basic), "{:?}", a.authorizations());
    assert!(
        b.authorizations().iter().all(|(q, v)| q == "GET /storage/blob" && v == "Bearer b-token"),
        "{:?}",
        b.authorizations()
    );
}

#[test]
fn a_dripped_manifest_ends_the_pull_at_its_deadline() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let mut r = HashMap::new();
    r.insert(format!("/v2/{REPO}/manifests/t"), Reply::Drip(m.clone()));
    let fake = Fake::start(r);
    let tmp = tempfile::tempdir().unwrap();

    // `--timeout` bounds each request as a whole, not only each read.
    let start = Instant::now();
    let out = pull(&fake, tmp.path(), ":t", &["--timeout", "3", "--attempts", "1"]);
    let took = start.elapsed();
    assert_status(&out, IO);
    assert!(took < Duration::from_secs(8), "took {took:?}: {}", output_text(&out));
    assert!(output_text(&out).contains("did not complete within 3 s"), "{}", output_text(&out));

    // `--deadline` bounds the whole pull, every attempt included.
    let start = Instant::now();
    let out =
        pull(&fake, tmp.path(), ":t", &["--timeout", "30", "--attempts", "5", "--registry-deadline", "2"]);
    let took = start.elapsed();
    assert_status(&out, IO);
    assert!(took < Duration::from_secs(7), "took {took:?}: {}", output_text(&out));
    assert!(output_text(&out).contains("the pull's deadline of 2 s"), "{}", output_text(&out));
    assert_cache_holds(tmp.path(), &[]);
}

#[test]
fn a_blob_that_stalls_or_drips_is_cut_by_the_timeout_or_the_deadline() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let tmp = tempfile::tempdir().unwrap();

    // A stall: each attempt ends at the timeout of a read, long before the deadline.
    let mut r = routes(&m, &[]);
    r.insert(format!("/v2/{REPO}/blobs/{}", oci_digest(&w)), Reply::Stall);
    let fake = Fake::start(r);
    let start = Instant::now();
    let out =
        pull(&fake, tmp.path(), ":t", &["--timeout", "1", "--attempts", "2", "--registry-deadline", "60"]);
    let took = start.elapsed();
    assert_status(&out, IO);
    assert!(took < Duration::from_secs(8), "took {took:?}: {}", output_text(&out));
    assert!(output_text(&out).contains("timed out"), "{}", output_text(&out));
    assert_eq!(fake.requests().iter().filter(|q| q.contains("/blobs/")).count(), 2, "{:?}", fake.requests());

    // A drip: each read comes in time, the deadline ends it.
    let mut r = routes(&m, &[]);
    r.insert(format!("/v2/{REPO}/blobs/{}", oci_digest(&w)), Reply::Drip(w.clone()));
    let fake = Fake::start(r);
    let start = Instant::now();
    let out = pull(&fake, tmp.path(), ":t", &["--timeout", "30", "--registry-deadline", "3"]);
    let took = start.elapsed();
    assert_status(&out, IO);
    assert!(took < Duration::from_secs(8), "took {took:?}: {}", output_text(&out));
    assert!(output_text(&out).contains("the pull's deadline of 3 s"), "{}", output_text(&out));
    assert_cache_holds(tmp.path(), &[oci_digest(&m)]);
}

#[test]
fn a_layer_whose_size_is_not_its_descriptors_is_refused_with_both_sizes() {
    let w = wasm();
    let tmp = tempfile::tempdir().unwrap();
    for stated in [w.len() as u64 + 1000, w.len() as u64 - 1] {
        let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
        let mut manifest: serde_json::Value = serde_json::from_slice(&m).unwrap();
        manifest["layers"][0]["size"] = stated.into();
        let lying = serde_json::to_vec(&manifest).unwrap();
        let fake = Fake::start(routes(&lying, &[(&oci_digest(&w), w.clone())]));
        let out = pull(&fake, tmp.path(), ":t", &[]);
        assert_status(&out, POLICY);
        let msg = output_text(&out);
        assert!(msg.contains(&format!("its descriptor says {stated} bytes")), "{msg}");
        assert!(msg.contains(&format!("{} bytes", w.len())), "{msg}");
    }

    // Held in the cache already (pulled by an honest manifest): refused all the same.
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), w.clone())]));
    assert_status(&pull(&fake, tmp.path(), ":t", &[]), OK);
    let mut manifest: serde_json::Value = serde_json::from_slice(&m).unwrap();
    manifest["layers"][0]["size"] = (w.len() as u64 + 1).into();
    let lying = serde_json::to_vec(&manifest).unwrap();
    let fake = Fake::start(routes(&lying, &[(&oci_digest(&w), w.clone())]));
    let out = pull(&fake, tmp.path(), ":t", &[]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains(&format!("its descriptor says {} bytes", w.len() + 1)),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_pull_cleans_the_temporary_files_of_killed_pulls() {
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let fake = Fake::start(routes(&m, &[(&oci_digest(&w), w.clone())]));
    let tmp = tempfile::tempdir().unwrap();
    assert_status(&pull(&fake, tmp.path(), ":t", &[]), OK);

    // A pid that is dead for sure: a child that ran and was reaped.
    let mut child = Command::new("true").spawn().unwrap();
    child.wait().unwrap();
    let dead = child.id();
    let live = std::process::id();
    let hex = sha256_hex(&w);
    let oci = tmp.path().join("durasync/oci");
    let stale = [
        oci.join(format!("blobs/sha256/.{hex}.tmp-{dead}-0123456789ab")),
        oci.join(format!("tags/.{hex}.tmp-{dead}-0123456789ab")),
        oci.join(format!("signatures/.{hex}.tmp-{dead}-0123456789ab")),
    ];
    // A live writer's file (this test's pid), and files that are not ours.
    let kept = [
        oci.join(format!("blobs/sha256/.{hex}.tmp-{live}-0123456789ab")),
        oci.join(format!("blobs/sha256/.{hex}.tmp-notapid-0123456789ab")),
        oci.join("blobs/sha256/.unrelated"),
    ];
    for f in stale.iter().chain(&kept) {
        std::fs::write(f, vec![0u8; 4096]).unwrap();
    }
    let out = pull(&fake, tmp.path(), &format!("@{}", oci_digest(&m)), &[]);
    assert_status(&out, OK);
    for f in &stale {
        assert!(!f.exists(), "{} survived", f.display());
    }
    for f in &kept {
        assert!(f.exists(), "{} was removed", f.display());
    }
}
