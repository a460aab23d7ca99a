//! Bundles made by another signer: the Sigstore JavaScript stack
//! (`@sigstore/sign`'s FulcioSigner and RekorWitness with its
//! MessageSignatureBundleBuilder and DSSEBundleBuilder) against its own mock
//! services (`@sigstore/mock`'s Fulcio CA with a CT log, and Rekor),
//! reached through nock inside one node process (`sigstore_js/sign.js`).
//! The trusted root is the mock's CA certificate, CT log key and log key.
//! The bundles are attached through the referrers tag schema of the real
//! registry; durasync verifies them by identity policy, refuses another
//! identity, another issuer and an artifact they do not sign (the agent's
//! exit 13, nothing compiled, nothing written), and sigstore-python gives
//! the same verdicts on the same bundles.

use std::process::Command;

use serde_json::{Value, json};

use durasync::runtime::trust::bundle;
use durasync::runtime::trust::{Identity, TrustedRoot};

use super::cross::{durasync_push, run, run_manifest};
use super::support::referrers::attach_by_tag_as;
use super::support::sigstore::{GITHUB, WORKFLOW};
use super::*;

/// The example component with a custom section appended: still a valid
/// component, another digest.
fn tampered_wasm(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(example_wasm()).unwrap();
    bytes.extend_from_slice(&[0x00, 8, 6]);
    bytes.extend_from_slice(b"tamperx");
    let path = dir.join("tampered.wasm");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The manifest bytes stored under `digest` in `repo`.
fn manifest_of(registry: &str, repo: &str, digest: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut ureq::get(&format!("http://{registry}/v2/{repo}/manifests/{digest}"))
            .set("Accept", OCI_MANIFEST)
            .call()
            .unwrap()
            .into_reader(),
        &mut bytes,
    )
    .unwrap();
    assert_eq!(oci_digest(&bytes), digest);
    bytes
}

fn policy(root: &Path, issuer: &str, subject_regex: &str) -> String {
    format!(
        "[verify]\nidentities = [{{ issuer = \"{issuer}\", subject_regex = \"{subject_regex}\" }}]\n\
         trusted_root = \"{}\"\n",
        root.display()
    )
}

const VENDOR: &str = "^https://github.com/vendor/plugins/";

#[test]
fn bundles_signed_by_sigstore_js_verify_by_identity_and_another_identity_issuer_or_artifact_is_refused() {
    let Some(mut reg) = RealRegistry::start() else { return };
    if !have("node") || !have("npm") {
        support::cannot_check("no node or npm (the Sigstore JavaScript signer)");
        return;
    }
    let signer = support::toolchains::sigstore_js_signer();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let registry = reg.registry();
    let d = durasync_push(&cache, &registry, "vendor/message:stable");
    assert_eq!(durasync_push(&cache, &registry, "vendor/dsse:stable"), d);
    let tampered = tampered_wasm(dir);
    let out = durasync(
        &cache,
        &["push", tampered.to_str().unwrap(), &format!("oci://{registry}/vendor/tampered:stable")],
    );
    assert_status(&out, OK);
    let d_tampered = field(&out, "manifest digest:");
    assert_ne!(d_tampered, d);

    // sigstore-js signs the manifest (a message signature over its bytes, and
    // an in-toto statement naming its digest) for the workflow identity.
    let manifest = dir.join("manifest.json");
    std::fs::write(&manifest, manifest_of(&registry, "vendor/message", &d)).unwrap();
    let signed = dir.join("signed");
    std::fs::create_dir(&signed).unwrap();
    let out = Command::new("node")
        .arg(&signer)
        .arg(&signed)
        .arg(&manifest)
        .args([WORKFLOW, GITHUB])
        .output()
        .unwrap();
    assert!(out.status.success(), "sign.js: {}", output_text(&out));
    let message = std::fs::read(signed.join("message.json")).unwrap();
    let dsse = std::fs::read(signed.join("dsse.json")).unwrap();
    let root = signed.join("trusted_root.json");
    // What sigstore-js makes by default: v0.2 with a chain for a message
    // signature, v0.3 with one certificate for DSSE, a Rekor v1 entry with an
    // inclusion proof and a signed entry timestamp, no TSA timestamp.
    let m: Value = serde_json::from_slice(&message).unwrap();
    assert_eq!(m["mediaType"], "application/vnd.dev.sigstore.bundle+json;version=0.2");
    assert!(m["verificationMaterial"]["x509CertificateChain"].is_object(), "{m}");
    let s: Value = serde_json::from_slice(&dsse).unwrap();
    assert_eq!(s["mediaType"], "application/vnd.dev.sigstore.bundle.v0.3+json");
    assert_eq!(
        s["verificationMaterial"]["tlogEntries"][0]["kindVersion"],
        json!({"kind": "dsse", "version": "0.0.1"})
    );
    for b in [&m, &s] {
        let entry = &b["verificationMaterial"]["tlogEntries"][0];
        assert!(entry["inclusionPromise"]["signedEntryTimestamp"].is_string(), "{entry}");
        assert!(entry["inclusionProof"]["checkpoint"]["envelope"].is_string(), "{entry}");
        let tsa = &b["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"];
        assert!(tsa.as_array().is_none_or(Vec::is_empty), "{b}");
    }

    // Each attached under its own media type (the referrer's artifact type).
    let (v02, v03) = (m["mediaType"].as_str().unwrap(), s["mediaType"].as_str().unwrap());
    attach_by_tag_as(&registry, "vendor/message", &d, &[(&message, v02)]);
    attach_by_tag_as(&registry, "vendor/dsse", &d, &[(&dsse, v03)]);
    // The message bundle moved onto another artifact.
    attach_by_tag_as(&registry, "vendor/tampered", &d_tampered, &[(&message, v02)]);

    for repo in ["message", "dsse"] {
        let run_dir = dir.join(repo);
        let m = run_manifest(
            &run_dir,
            &format!("oci://{registry}/vendor/{repo}:stable"),
            &policy(&root, GITHUB, VENDOR),
        );
        assert_status(&run(&cache, &m), OK);
        assert_eq!(std::fs::read_to_string(run_dir.join("out/env/GREETING")).unwrap(), "hello\n");
        let out = durasync(
            &dir.join(format!("pull-{repo}")),
            &[
                "pull",
                &format!("oci://{registry}/vendor/{repo}:stable"),
                "--trusted-root",
                root.to_str().unwrap(),
                "--certificate-oidc-issuer",
                GITHUB,
                "--certificate-identity",
                WORKFLOW,
            ],
        );
        assert_status(&out, OK);
        let who = field(&out, "signed by:");
        assert!(who.contains(WORKFLOW) && who.contains(GITHUB), "{repo}: {who}");
    }

    // Through the agent (a DaemonSet's `agent --once`): the policy's
    // identity runs (written, compiled into the agent's cache); refusals
    // exit 13, the reason named, nothing written, nothing compiled.
    let cases = [
        ("accepted", "message", policy(&root, GITHUB, VENDOR), None),
        (
            "identity",
            "message",
            policy(&root, GITHUB, "^https://github.com/other/"),
            Some(format!("{WORKFLOW} (issuer {GITHUB}) is none of the policy's")),
        ),
        (
            "issuer",
            "dsse",
            policy(&root, "https://accounts.google.com", VENDOR),
            Some(format!("(issuer {GITHUB}) is none of the policy's")),
        ),
        (
            "artifact",
            "tampered",
            policy(&root, GITHUB, VENDOR),
            Some(format!("the bundle signs digest {d}, not {d_tampered}")),
        ),
    ];
    for (name, repo, policy, refused_for) in cases {
        let run_dir = dir.join(format!("agent-{name}"));
        std::fs::create_dir_all(run_dir.join("out")).unwrap();
        std::fs::write(run_dir.join("input"), "GREETING=hello\n").unwrap();
        let conf = run_dir.join("agent.d");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join(format!("{name}.toml")),
            format!(
                "name = \"{name}\"\nwasm = \"oci://{registry}/vendor/{repo}:stable\"\n{policy}[roots.out]\npath = \"{}\"\n\
                 access = \"rw\"\n[input]\nfile = \"{}\"\n",
                run_dir.join("out").display(),
                run_dir.join("input").display()
            ),
        )
        .unwrap();
        let agent_cache = run_dir.join("agent-cache");
        let out = agent_once(&cache, &conf, &agent_cache);
        let compiled =
            walk(&agent_cache).into_iter().filter(|p| p.extension().is_some_and(|e| e == "cwasm")).count();
        let written = std::fs::read_dir(run_dir.join("out")).unwrap().count();
        match refused_for {
            None => {
                assert_status(&out, OK);
                assert_eq!(std::fs::read_to_string(run_dir.join("out/env/GREETING")).unwrap(), "hello\n");
                assert!(compiled > 0, "{name}: nothing compiled in {}", agent_cache.display());
            }
            Some(why) => {
                assert_status(&out, 13);
                assert!(output_text(&out).contains(&why), "{name}: {}", output_text(&out));
                assert_eq!((written, compiled), (0, 0), "{name}: written, compiled");
            }
        }
    }

    // The registry goes away: the v0.2 bundle's referrer, found before,
    // verifies from the cache.
    reg.stop();
    let offline_dir = dir.join("message");
    std::fs::remove_dir_all(offline_dir.join("out/env")).unwrap();
    assert_status(&run(&cache, &offline_dir.join("plugin.toml")), OK);
    assert_eq!(std::fs::read_to_string(offline_dir.join("out/env/GREETING")).unwrap(), "hello\n");

    // The DSSE bundle as the mock log keeps it: its entry's body is the
    // signer's proposal, which Rekor never stores; refused for that.
    let root_json = std::fs::read(&root).unwrap();
    let trusted = TrustedRoot::parse(&root_json, "trusted_root.json").unwrap();
    let identities = [Identity::new(GITHUB, None, Some(VENDOR)).unwrap()];
    let verify = |name: &str| {
        bundle::verify(&std::fs::read(signed.join(name)).unwrap(), &d, &[], &identities, Some(&trusted))
    };
    assert!(verify("message.json").is_ok() && verify("dsse.json").is_ok());
    let why = verify("dsse-mock-body.json").unwrap_err();
    assert!(why.contains("no payloadHash"), "{why}");

    // sigstore-python, against the same root, agrees on each.
    if !have("python3") {
        support::cannot_check("no python3 (sigstore-python)");
        return;
    }
    let sigstore = support::toolchains::sigstore_python();
    let root_json: Value = serde_json::from_slice(&root_json).unwrap();
    let trust_config = dir.join("trust_config.json");
    std::fs::write(
        &trust_config,
        json!({
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": root_json,
            "signingConfig": {"mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json"},
        })
        .to_string(),
    )
    .unwrap();
    // sigstore-python reads protobuf's JSON strictly: a proof without
    // `logIndex` (0) or `hashes` (none, a tree of one) fails to parse. The
    // mock's log is always a tree of one, so each bundle is also given to
    // it with those two fields written out (the same bundle to protobuf).
    for name in ["message", "dsse", "dsse-mock-body"] {
        let mut b: Value =
            serde_json::from_slice(&std::fs::read(signed.join(format!("{name}.json"))).unwrap()).unwrap();
        let p = &mut b["verificationMaterial"]["tlogEntries"][0]["inclusionProof"];
        assert!(p.get("logIndex").is_none() && p.get("hashes").is_none(), "{name}: {p}");
        p["logIndex"] = json!("0");
        p["hashes"] = json!([]);
        std::fs::write(signed.join(format!("{name}-written-out.json")), b.to_string()).unwrap();
    }
    let cases = [
        ("message as signed", "message.json", WORKFLOW, GITHUB, d.as_str(), Err("logIndex")),
        ("message", "message-written-out.json", WORKFLOW, GITHUB, d.as_str(), Ok(())),
        ("dsse", "dsse-written-out.json", WORKFLOW, GITHUB, d.as_str(), Ok(())),
        (
            "dsse as the mock logs it",
            "dsse-mock-body-written-out.json",
            WORKFLOW,
            GITHUB,
            d.as_str(),
            Err(""),
        ),
        ("identity", "message-written-out.json", "https://github.com/other/x", GITHUB, d.as_str(), Err("")),
        ("issuer", "dsse-written-out.json", WORKFLOW, "https://accounts.google.com", d.as_str(), Err("")),
        ("artifact", "message-written-out.json", WORKFLOW, GITHUB, d_tampered.as_str(), Err("")),
    ];
    for (name, bundle, identity, issuer, digest, verdict) in cases {
        let out = Command::new(&sigstore)
            .arg("--trust-config")
            .arg(&trust_config)
            .args([
                "verify",
                "identity",
                "--offline",
                "--cert-identity",
                identity,
                "--cert-oidc-issuer",
                issuer,
            ])
            .arg("--bundle")
            .arg(signed.join(bundle))
            .arg(digest)
            .env("HOME", dir)
            .env("XDG_CACHE_HOME", dir.join("py-cache"))
            .env("XDG_DATA_HOME", dir.join("py-data"))
            .output()
            .unwrap();
        let text = output_text(&out);
        match verdict {
            Ok(()) => assert!(out.status.success(), "{name}: sigstore-python refuses:\n{text}"),
            Err(why) => {
                assert!(!out.status.success() && text.contains(why), "{name}: sigstore-python:\n{text}")
            }
        }
    }
}

/// Every file under `dir` (none if it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}
