//! Cross-implementation checks against a real registry: what durasync
//! pushes, skopeo reads; what skopeo pushes (and what openssl signs),
//! durasync pulls and verifies.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use super::*;

/// A manifest running the example plugin from `wasm` into `dir/out`.
pub(crate) fn run_manifest(dir: &Path, wasm: &str, extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let path = dir.join("plugin.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"example\"\nwasm = \"{wasm}\"\n{extra}\n[roots.out]\npath = \"out\"\naccess = \"rw\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("input"), "GREETING=hello\n").unwrap();
    path
}

/// `durasync run MANIFEST --input dir/input`, and the envdir it made.
pub(crate) fn run(cache: &Path, manifest: &Path) -> Output {
    let input = manifest.with_file_name("input");
    durasync(cache, &["run", manifest.to_str().unwrap(), "--input", input.to_str().unwrap()])
}

/// `durasync push` the example plugin to `REGISTRY/REPO:TAG`; its manifest digest.
pub(crate) fn durasync_push(cache: &Path, registry: &str, repo_tag: &str) -> String {
    let wasm = example_wasm();
    let out = durasync(cache, &["push", wasm.to_str().unwrap(), &format!("oci://{registry}/{repo_tag}")]);
    assert_status(&out, OK);
    field(&out, "manifest digest:")
}

#[test]
fn a_component_pushed_by_durasync_is_read_back_by_skopeo_and_runs_pinned_by_digest() {
    let Some(reg) = RealRegistry::start() else { return };
    if !have("skopeo") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let manifest_digest = durasync_push(&cache, &reg.registry(), "vendor/example:1.0");

    // skopeo reads back the CNCF layout, byte for byte what we hashed.
    let out = Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{}/vendor/example:1.0", reg.registry()))
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo inspect: {}", output_text(&out));
    assert_eq!(oci_digest(&out.stdout), manifest_digest);
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(m["config"]["mediaType"], "application/vnd.wasm.config.v0+json");
    assert_eq!(m["layers"].as_array().unwrap().len(), 1);
    assert_eq!(m["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(m["layers"][0]["digest"], oci_digest(&std::fs::read(example_wasm()).unwrap()));

    // A manifest naming it by digest runs it (a fresh cache: pulled now).
    let work = tmp.path().join("work");
    let manifest =
        run_manifest(&work, &format!("oci://{}/vendor/example@{manifest_digest}", reg.registry()), "");
    let out = run(&tmp.path().join("fresh-cache"), &manifest);
    assert_status(&out, OK);
    assert_eq!(std::fs::read_to_string(work.join("out/env/GREETING")).unwrap(), "hello\n");

    // `--no-cache`: pulled into a private temporary directory, removed after.
    let tmpdir = tmp.path().join("tmpdir");
    std::fs::create_dir_all(&tmpdir).unwrap();
    let input = work.join("input");
    let out = durasync_env(
        &tmp.path().join("unused-cache"),
        &["run", manifest.to_str().unwrap(), "--input", input.to_str().unwrap(), "--no-cache"],
        &[("TMPDIR", &tmpdir)],
    );
    assert_status(&out, OK);
    assert_eq!(std::fs::read_dir(&tmpdir).unwrap().count(), 0, "--no-cache left its blobs behind");
    assert!(!tmp.path().join("unused-cache/durasync").exists());

    // `inspect` and `compile` accept it too.
    let out = durasync(&cache, &["inspect", manifest.to_str().unwrap(), "--json"]);
    assert_status(&out, OK);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["manifest_digest"], manifest_digest);
    assert_eq!(v["policy"], "pass");
    let out = durasync(&cache, &["compile", manifest.to_str().unwrap()]);
    assert_status(&out, OK);
}

#[test]
fn an_artifact_pushed_by_skopeo_in_the_older_layout_is_pulled_by_durasync() {
    let Some(reg) = RealRegistry::start() else { return };
    if !have("skopeo") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(example_wasm()).unwrap();
    // wasm-to-oci's layout: its config and layer media types.
    let config = blob("application/vnd.wasm.config.v1+json", b"{}".to_vec());
    let layer = blob("application/vnd.wasm.content.layer.v1+wasm", wasm.clone());
    let layout = tmp.path().join("layout");
    let manifest_digest = oci_layout(&layout, "v1", &config, &[layer]);
    skopeo_push(&layout, "v1", &reg.registry(), "legacy/example");

    let cache = tmp.path().join("cache");
    let out = durasync(&cache, &["pull", &format!("oci://{}/legacy/example:v1", reg.registry())]);
    assert_status(&out, OK);
    assert_eq!(field(&out, "manifest digest:"), manifest_digest);
    assert_eq!(field(&out, "sha256:"), sha256_hex(&wasm));
    // The blob is in the content-addressed cache, private.
    let cached = cache.join("durasync/oci/blobs/sha256").join(sha256_hex(&wasm));
    assert_eq!(std::fs::read(&cached).unwrap(), wasm);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&cached).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(cache.join("durasync/oci")).unwrap().permissions().mode() & 0o777, 0o700);
}

#[test]
fn an_openssl_signature_pushed_by_skopeo_verifies_and_other_keys_or_digests_are_refused() {
    let Some(reg) = RealRegistry::start() else { return };
    if !have("skopeo") || !have("openssl") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let registry = reg.registry();
    let (vendor_key, vendor_pub) = openssl_key(dir, "vendor");
    let (_, stranger_pub) = openssl_key(dir, "stranger");

    // Release 1 signed by the vendor, with an annotation.
    let d1 = durasync_push(&cache, &registry, "vendor/example:stable");
    let p1 = payload(&format!("{registry}/vendor/example"), &d1, json!({"channel": "stable"}));
    let sig = openssl_sign(dir, &vendor_key, &p1);
    skopeo_push_signature(dir, &registry, "vendor/example", &d1, p1, &sig);

    let reference = format!("oci://{registry}/vendor/example:stable");
    let out = durasync(&cache, &["pull", &reference, "--key", vendor_pub.to_str().unwrap()]);
    assert_status(&out, OK);
    assert_eq!(field(&out, "manifest digest:"), d1);
    let who = field(&out, "signed by:");
    assert!(who.starts_with(&format!("{} (key id ", vendor_pub.display())), "{who}");

    // Another key: refused, exit 12, naming the digest and why.
    let out = durasync(&cache, &["pull", &reference, "--key", stranger_pub.to_str().unwrap()]);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    assert!(msg.contains(&d1) && msg.contains("none of the trusted keys"), "{msg}");

    // A manifest by tag with a [verify] policy runs; a required annotation
    // the payload lacks is refused.
    let work = dir.join("work");
    let keys = format!("[verify]\nkeys = [\"{}\"]\n", vendor_pub.display());
    let manifest =
        run_manifest(&work, &reference, &format!("{keys}annotations = {{ channel = \"stable\" }}\n"));
    assert_status(&run(&cache, &manifest), OK);
    assert_eq!(std::fs::read_to_string(work.join("out/env/GREETING")).unwrap(), "hello\n");
    let manifest =
        run_manifest(&work, &reference, &format!("{keys}annotations = {{ channel = \"beta\" }}\n"));
    let out = run(&cache, &manifest);
    assert_status(&out, POLICY);
    assert!(output_text(&out).contains("channel"), "{}", output_text(&out));

    // The tag moved to an unsigned release: refused (no signature).
    let d2 = {
        // A different artifact: the same component under another config.
        let layout = dir.join("unsigned");
        let wasm = std::fs::read(example_wasm()).unwrap();
        let config = blob("application/vnd.wasm.config.v0+json", br#"{"os":"wasip2"}"#.to_vec());
        let d = oci_layout(&layout, "stable", &config, &[blob("application/wasm", wasm)]);
        skopeo_push(&layout, "stable", &registry, "vendor/example");
        d
    };
    assert_ne!(d1, d2);
    let out = durasync(&cache, &["pull", &reference, "--key", vendor_pub.to_str().unwrap()]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains(&d2) && output_text(&out).contains("not signed"),
        "{}",
        output_text(&out)
    );

    // A signature whose payload names another digest (release 1's, replayed
    // onto release 2's signature tag): refused.
    let replay = payload(&format!("{registry}/vendor/example"), &d1, json!(null));
    let sig = openssl_sign(dir, &vendor_key, &replay);
    skopeo_push_signature(dir, &registry, "vendor/example", &d2, replay, &sig);
    let out = durasync(&cache, &["pull", &reference, "--key", vendor_pub.to_str().unwrap()]);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    assert!(msg.contains(&format!("signs digest {d1}, not {d2}")), "{msg}");
}
