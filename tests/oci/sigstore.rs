//! Sigstore bundles attached the way cosign v3 attaches them: as OCI
//! referrers, through the referrers tag schema on the real registry
//! (distribution 2.8 has no referrers API) and through the referrers API on
//! the fake. Keyless bundles verify by identity policy against a trusted
//! root, offline once cached; other identities are refused by name.

use std::collections::HashMap;

use super::cross::{durasync_push, run, run_manifest};
use super::faults::{REPO, WASM_CONFIG, WASM_LAYER, blob_requests, pull, routes, wasm};
use super::support::fake_registry::{Fake, Reply};
use super::support::referrers::{INDEX, attach_by_tag_as, index, referrer_as};
use super::support::sigstore::{self as sig, By, GITHUB, Log, Make, Pki, WORKFLOW};
use super::*;

/// The referrer manifest holding `bundle` for the manifest `subject`
/// (`subject_size` bytes): cosign v3's layout.
fn referrer(bundle: &[u8], subject: &str, subject_size: usize) -> Vec<u8> {
    referrer_as(bundle, sig::V03, subject, subject_size)
}

/// Attach `bundle` to `subject` in `repo` through the referrers tag schema:
/// the blobs, the referrer manifest by digest, then the `sha256-<hex>` index.
fn attach_by_tag(registry: &str, repo: &str, subject: &str, bundle: &[u8]) {
    attach_all_by_tag(registry, repo, subject, &[bundle]);
}

fn identity_policy(root: &Path) -> String {
    format!(
        "[verify]\nidentities = [{{ issuer = \"{GITHUB}\", subject_regex = \"^https://github.com/vendor/plugins/\" }}]\n\
         trusted_root = \"{}\"\n",
        root.display()
    )
}

#[test]
fn a_keyless_bundle_in_the_referrers_tag_verifies_by_identity_then_offline_and_another_identity_is_refused() {
    let Some(mut reg) = RealRegistry::start() else { return };
    if !sig::have_openssl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let registry = reg.registry();
    let d = durasync_push(&cache, &registry, "vendor/example:stable");
    assert_eq!(durasync_push(&cache, &registry, "vendor/evil:stable"), d);

    std::fs::create_dir_all(dir.join("pki")).unwrap();
    let pki = Pki::new(&dir.join("pki"));
    let log = Log::new(7);
    let root = dir.join("trusted_root.json");
    std::fs::write(&root, pki.trusted_root(&[&log])).unwrap();
    let good = pki.leaf(&format!("URI:{WORKFLOW}"), GITHUB, false, 1);
    let attacker = pki.leaf(
        "URI:https://github.com/attacker/plugins/.github/workflows/r.yml@refs/heads/main",
        GITHUB,
        false,
        1,
    );
    let make = |leaf| {
        sig::bundle(&Make {
            by: By::Cert(leaf),
            digest: d.clone(),
            dsse: true,
            time: sig::now(),
            log: &log,
            v01: false,
        })
    };
    attach_by_tag(&registry, "vendor/example", &d, make(&good).to_string().as_bytes());
    attach_by_tag(&registry, "vendor/evil", &d, make(&attacker).to_string().as_bytes());

    let good_dir = dir.join("good");
    let m =
        run_manifest(&good_dir, &format!("oci://{registry}/vendor/example:stable"), &identity_policy(&root));
    assert_status(&run(&cache, &m), OK);
    assert_eq!(std::fs::read_to_string(good_dir.join("out/env/GREETING")).unwrap(), "hello\n");

    // The same on the command line, cosign's flags; the signer is shown.
    let out = durasync(
        &cache,
        &[
            "pull",
            &format!("oci://{registry}/vendor/example:stable"),
            "--trusted-root",
            root.to_str().unwrap(),
            "--certificate-oidc-issuer",
            GITHUB,
            "--certificate-identity-regexp",
            "^https://github.com/vendor/plugins/",
        ],
    );
    assert_status(&out, OK);
    let who = field(&out, "signed by:");
    assert!(who.contains(WORKFLOW) && who.contains(GITHUB) && who.contains("log index 1005"), "{who}");
    // `inspect` of the manifest names the same signer.
    let out = durasync(&cache, &["inspect", m.to_str().unwrap()]);
    assert_status(&out, OK);
    let who = field(&out, "signed by:");
    assert!(who.contains(WORKFLOW) && who.contains(GITHUB) && who.contains("log index 1005"), "{who}");

    // Another identity's bundle on the same digest: refused, named, nothing written.
    let evil_dir = dir.join("evil");
    let m_evil =
        run_manifest(&evil_dir, &format!("oci://{registry}/vendor/evil:stable"), &identity_policy(&root));
    let out = run(&cache, &m_evil);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    assert!(
        msg.contains("https://github.com/attacker/plugins/") && msg.contains("is none of the policy's"),
        "{msg}"
    );
    assert_eq!(std::fs::read_dir(evil_dir.join("out")).unwrap().count(), 0);

    // The agent (a DaemonSet's `agent --once`): the instance's line says why, exit 13.
    let conf = dir.join("agent.d");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("evil.toml"),
        format!(
            "name = \"evil\"\nwasm = \"oci://{registry}/vendor/evil:stable\"\n{}[roots.out]\npath = \"{}\"\n\
             access = \"rw\"\n[input]\nfile = \"{}\"\n",
            identity_policy(&root),
            evil_dir.join("out").display(),
            evil_dir.join("input").display()
        ),
    )
    .unwrap();
    let agent_cache = cache.join("durasync");
    let out = agent_once(&cache, &conf, &agent_cache);
    assert_status(&out, 13);
    assert!(output_text(&out).contains("is none of the policy's"), "{}", output_text(&out));
    assert_eq!(std::fs::read_dir(evil_dir.join("out")).unwrap().count(), 0);

    // The registry goes away: the bundle found before verifies from the cache.
    reg.stop();
    std::fs::remove_dir_all(good_dir.join("out/env")).unwrap();
    let out = run(&cache, &m);
    assert_status(&out, OK);
    assert_eq!(std::fs::read_to_string(good_dir.join("out/env/GREETING")).unwrap(), "hello\n");
}

/// The fake serving a plugin at tag `t` and `referrers` at the referrers API.
fn fake_with_referrers(
    w: &[u8],
    referrers_index: Vec<u8>,
    referrers: &[(Vec<u8>, Vec<u8>)],
) -> (Fake, String) {
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.to_vec())]);
    let d = oci_digest(&m);
    let mut r: HashMap<String, Reply> =
        routes(&m, &[(&oci_digest(w), w.to_vec()), (&oci_digest(b"{}"), b"{}".to_vec())]);
    r.insert(format!("/v2/{REPO}/referrers/{d}"), Reply::Body(200, INDEX, referrers_index));
    for (manifest, bundle) in referrers {
        r.insert(
            format!("/v2/{REPO}/manifests/{}", oci_digest(manifest)),
            Reply::Body(200, OCI_MANIFEST, manifest.clone()),
        );
        r.insert(
            format!("/v2/{REPO}/blobs/{}", oci_digest(bundle)),
            Reply::Body(200, "application/octet-stream", bundle.clone()),
        );
    }
    (Fake::start(r), d)
}

fn vendor_key(dir: &Path) -> (p256::ecdsa::SigningKey, PathBuf) {
    use p256::pkcs8::EncodePublicKey as _;
    let sk = p256::ecdsa::SigningKey::from_slice(&[42; 32]).unwrap();
    let path = dir.join("vendor.pub");
    std::fs::write(&path, sk.verifying_key().to_public_key_pem(Default::default()).unwrap()).unwrap();
    (sk, path)
}

#[test]
fn a_key_signed_bundle_is_found_through_the_referrers_api_before_any_legacy_tag() {
    let tmp = tempfile::tempdir().unwrap();
    let (sk, public) = vendor_key(tmp.path());
    let w = wasm();
    let m = manifest_bytes(&blob(WASM_CONFIG, b"{}".to_vec()), &[blob(WASM_LAYER, w.clone())]);
    let d = oci_digest(&m);
    let log = Log::new(7);
    let b = sig::bundle(&Make {
        by: By::Key(&sk),
        digest: d.clone(),
        dsse: false,
        time: sig::now(),
        log: &log,
        v01: false,
    });
    let b = b.to_string().into_bytes();
    let r = referrer(&b, &d, m.len());
    // The registry's index also lists an SBOM: filtered out client-side.
    let sbom = referrer(b"{\"spdx\":1}", &d, m.len());
    let (fake, d2) = fake_with_referrers(
        &w,
        index(&[(&sbom, "application/spdx+json"), (&r, sig::V03)]),
        &[(r.clone(), b.clone())],
    );
    assert_eq!(d, d2);
    let out = pull(&fake, &tmp.path().join("cache"), ":t", &["--key", public.to_str().unwrap()]);
    assert_status(&out, OK);
    let who = field(&out, "signed by:");
    assert!(who.starts_with(&format!("{} (key id ", public.display())), "{who}");
    let requests = fake.requests();
    assert!(requests.contains(&format!("GET /v2/{REPO}/referrers/{d}")), "{requests:?}");
    assert!(!requests.iter().any(|q| q.contains(".sig") || q.contains(&oci_digest(&sbom))), "{requests:?}");

    // Another key: refused, the bundle's reason named.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (_, other_pub) = {
        use p256::pkcs8::EncodePublicKey as _;
        let sk = p256::ecdsa::SigningKey::from_slice(&[43; 32]).unwrap();
        let path = other.join("other.pub");
        std::fs::write(&path, sk.verifying_key().to_public_key_pem(Default::default()).unwrap()).unwrap();
        (sk, path)
    };
    let out = pull(&fake, &tmp.path().join("cache2"), ":t", &["--key", other_pub.to_str().unwrap()]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains("the bundle is signed by none of the trusted keys"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_referrers_index_of_ten_thousand_entries_is_refused_by_its_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = vendor_key(tmp.path());
    let w = wasm();
    let filler =
        referrer(b"{}", "sha256:0000000000000000000000000000000000000000000000000000000000000000", 1);
    let entries: Vec<(&[u8], &str)> = (0..10_000).map(|_| (filler.as_slice(), sig::V03)).collect();
    let (fake, _) = fake_with_referrers(&w, index(&entries), &[]);
    let out = pull(&fake, &tmp.path().join("cache"), ":t", &["--key", public.to_str().unwrap()]);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains("lists 10000 manifests, over the limit of 1024"),
        "{}",
        output_text(&out)
    );
    assert_eq!(blob_requests(&fake), 0, "{:?}", fake.requests());
}

/// Attach each of `bundles` to `subject` in `repo` through the referrers tag
/// schema, all listed in one `sha256-<hex>` index.
fn attach_all_by_tag(registry: &str, repo: &str, subject: &str, bundles: &[&[u8]]) {
    let typed: Vec<(&[u8], &str)> = bundles.iter().map(|b| (*b, sig::V03)).collect();
    attach_by_tag_as(registry, repo, subject, &typed);
}

#[test]
fn require_all_refuses_a_plugin_one_key_short_naming_it_and_a_revoked_digest_is_refused_from_the_cache() {
    let Some(mut reg) = RealRegistry::start() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let registry = reg.registry();
    let d = durasync_push(&cache, &registry, "vendor/half:stable");
    assert_eq!(durasync_push(&cache, &registry, "vendor/both:stable"), d);

    let (sk_a, a) = vendor_key(dir);
    let sk_b = p256::ecdsa::SigningKey::from_slice(&[44; 32]).unwrap();
    let b = dir.join("release.pub");
    {
        use p256::pkcs8::EncodePublicKey as _;
        std::fs::write(&b, sk_b.verifying_key().to_public_key_pem(Default::default()).unwrap()).unwrap();
    }
    let log = Log::new(7);
    let sign = |sk| {
        sig::bundle(&Make {
            by: By::Key(sk),
            digest: d.clone(),
            dsse: false,
            time: sig::now(),
            log: &log,
            v01: false,
        })
        .to_string()
        .into_bytes()
    };
    let (by_a, by_b) = (sign(&sk_a), sign(&sk_b));
    attach_all_by_tag(&registry, "vendor/half", &d, &[&by_a]);
    attach_all_by_tag(&registry, "vendor/both", &d, &[&by_a, &by_b]);
    let all = format!("[verify]\nkeys = [\"{}\", \"{}\"]\nrequire = \"all\"\n", a.display(), b.display());

    // One of two signatures: refused, the missing key named, nothing written.
    let half = dir.join("half");
    let m = run_manifest(&half, &format!("oci://{registry}/vendor/half:stable"), &all);
    let out = run(&cache, &m);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    assert!(
        msg.contains("needs all 2") && msg.contains(&format!("missing [{} (key id ", b.display())),
        "{msg}"
    );
    assert_eq!(std::fs::read_dir(half.join("out")).unwrap().count(), 0);

    // Both: it runs, and `inspect` names both signers by key id.
    let both = dir.join("both");
    let m = run_manifest(&both, &format!("oci://{registry}/vendor/both:stable"), &all);
    assert_status(&run(&cache, &m), OK);
    assert_eq!(std::fs::read_to_string(both.join("out/env/GREETING")).unwrap(), "hello\n");
    let out = durasync(&cache, &["inspect", m.to_str().unwrap()]);
    assert_status(&out, OK);
    let who = field(&out, "signed by:");
    assert!(
        who.contains(&format!("{} (key id ", a.display()))
            && who.contains(&format!("{} (key id ", b.display())),
        "{who}"
    );

    // The registry goes away; the digest is revoked: the cached, once
    // trusted plugin is refused at its next load, by name.
    reg.stop();
    std::fs::remove_dir_all(both.join("out/env")).unwrap();
    let revoked = format!("{all}revoked_digests = [\"{d}\"]\n");
    let m = run_manifest(&both, &format!("oci://{registry}/vendor/both:stable"), &revoked);
    let out = run(&cache, &m);
    assert_status(&out, POLICY);
    let msg = output_text(&out);
    assert!(msg.contains(&format!("manifest {d} is revoked")) && msg.contains("revoked_digests"), "{msg}");
    assert!(!both.join("out/env").exists(), "nothing is written by a revoked plugin");
    // So is a revoked component digest (the wasm layer's), also offline.
    let component = oci_digest(&std::fs::read(super::example_wasm()).unwrap());
    let revoked = format!("{all}revoked_digests = [\"{component}\"]\n");
    let m = run_manifest(&both, &format!("oci://{registry}/vendor/both:stable"), &revoked);
    let out = run(&cache, &m);
    assert_status(&out, POLICY);
    assert!(
        output_text(&out).contains(&format!("component {component} is revoked")),
        "{}",
        output_text(&out)
    );
    assert!(!both.join("out/env").exists(), "nothing is written by a revoked plugin");
    // Without the revocation the cache still serves it offline.
    let m = run_manifest(&both, &format!("oci://{registry}/vendor/both:stable"), &all);
    assert_status(&run(&cache, &m), OK);
}
