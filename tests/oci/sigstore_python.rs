//! durasync and an independent verifier, sigstore-python (`sigstore verify
//! identity --offline` with a client trust config holding the test's
//! trusted root), judge the same corpus of keyless bundles: good ones and
//! tampered ones. They must agree on every case, and each refusal must be
//! durasync's for the reason the case names (its error matched).
//!
//! durasync's side is the library's bundle verifier, the one every pull
//! calls (`runtime::trust::bundle::verify`); the bundles are the ones
//! `support::sigstore` makes (an `openssl` CA, Fulcio-style leaves with an
//! embedded SCT, a log with RFC 6962 proofs and signed entry timestamps).

use std::process::{Child, Command, Stdio};

use durasync::runtime::trust::bundle;
use durasync::runtime::trust::{Identity, TrustedRoot};
use serde_json::{Value, json};

use super::support::sigstore::{self as sig, By, GITHUB, Log, Make, Pki, Sct, WORKFLOW};
use super::*;

const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const D2: &str = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// One bundle, the digest it is checked for, and durasync's verdict:
/// `None` accepted, `Some(why)` refused with `why` in the error.
struct Case {
    name: &'static str,
    bundle: Value,
    digest: &'static str,
    refused_for: Option<&'static str>,
}

/// The client trust config sigstore-python reads: the trusted root and an
/// empty signing config (verification uses no service).
fn trust_config(root: &str) -> String {
    json!({
        "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
        "trustedRoot": serde_json::from_str::<Value>(root).unwrap(),
        "signingConfig": {"mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json"},
    })
    .to_string()
}

#[test]
fn durasync_and_sigstore_python_agree_on_good_and_tampered_keyless_bundles() {
    if !sig::have_openssl() || !have("python3") {
        support::cannot_check("no openssl or python3 (the CA, and sigstore-python)");
        return;
    }
    let sigstore = support::toolchains::sigstore_python();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pki = Pki::new(dir);
    let log = Log::new(7);
    let root_json = pki.trusted_root(&[&log]);
    let root = TrustedRoot::parse(root_json.as_bytes(), "trusted_root.json").unwrap();
    std::fs::write(dir.join("trust_config.json"), trust_config(&root_json)).unwrap();

    let leaf = |san: &str, issuer: &str, sct| pki.leaf_with(san, issuer, false, 1, sct);
    let san = format!("URI:{WORKFLOW}");
    let good = leaf(&san, GITHUB, Sct::Logged);
    let attacker = leaf(
        "URI:https://github.com/attacker/plugins/.github/workflows/r.yml@refs/heads/main",
        GITHUB,
        Sct::Logged,
    );
    let google = leaf(&san, "https://accounts.google.com", Sct::Logged);
    let no_sct = leaf(&san, GITHUB, Sct::Without);
    let unknown_ct = Log::new(22);
    let other_ct = leaf(&san, GITHUB, Sct::By(&unknown_ct));
    let forged_sct = leaf(&san, GITHUB, Sct::Forged);
    let rogue_dir = dir.join("rogue");
    std::fs::create_dir(&rogue_dir).unwrap();
    let rogue = Pki::new(&rogue_dir).leaf(&san, GITHUB, false, 1);
    let now = sig::now();
    let make = |leaf, dsse, time, log: &Log| {
        sig::bundle(&Make { by: By::Cert(leaf), digest: D.to_owned(), dsse, time, log, v01: false })
    };

    let mut proof_of_another = make(&good, false, now, &log);
    proof_of_another["verificationMaterial"]["tlogEntries"][0]["inclusionProof"] =
        make(&good, true, now, &log)["verificationMaterial"]["tlogEntries"][0]["inclusionProof"].clone();
    let mut other_media_type = make(&good, false, now, &log);
    other_media_type["mediaType"] = "application/vnd.dev.sigstore.bundle.v0.4+json".into();
    let case = |name, bundle, digest, refused_for| Case { name, bundle, digest, refused_for };
    let cases = [
        case("message signature", make(&good, false, now, &log), D, None),
        case("DSSE in-toto statement", make(&good, true, now, &log), D, None),
        case("wrong identity", make(&attacker, false, now, &log), D, Some("is none of the policy's")),
        case(
            "wrong issuer",
            make(&google, false, now, &log),
            D,
            Some("(issuer https://accounts.google.com) is none of the policy's"),
        ),
        case(
            "expired at log time",
            make(&good, false, now + 3 * 86_400, &log),
            D,
            Some("not at the log's time"),
        ),
        case(
            "not yet valid at log time",
            make(&good, true, now - 86_400, &log),
            D,
            Some("not at the log's time"),
        ),
        case("inclusion proof for another entry", proof_of_another, D, Some("a proof for another entry")),
        case(
            "log key not in the root",
            make(&good, false, now, &Log::new(9)),
            D,
            Some("is not a log key of the trusted root"),
        ),
        case("artifact digest swapped", make(&good, false, now, &log), D2, Some("the bundle signs digest")),
        case(
            "artifact digest swapped (DSSE)",
            make(&good, true, now, &log),
            D2,
            Some("the in-toto statement's subjects are"),
        ),
        case("another media type", other_media_type, D, Some("mediaType")),
        case("no SCT", make(&no_sct, false, now, &log), D, Some("carries no signed certificate timestamp")),
        case(
            "SCT of a CT log not in the root",
            make(&other_ct, false, now, &log),
            D,
            Some("has no valid SCT from a CT log of the trusted root"),
        ),
        case(
            "SCT over another time",
            make(&forged_sct, false, now, &log),
            D,
            Some("the SCT of CT log https://ctfe.test does not verify"),
        ),
        case("CA not in the root", make(&rogue, false, now, &log), D, Some("does not chain to a CA")),
    ];

    // durasync: each verdict, each refusal for its reason.
    let policy = [Identity::new(GITHUB, None, Some("^https://github.com/vendor/plugins/")).unwrap()];
    let mut ours = Vec::new();
    for c in &cases {
        let got = bundle::verify(c.bundle.to_string().as_bytes(), c.digest, &[], &policy, Some(&root));
        match (&got, c.refused_for) {
            (Ok(_), None) => {}
            (Err(e), Some(why)) => assert!(e.contains(why), "{}: refused, but not for {why:?}: {e}", c.name),
            (Ok(s), Some(why)) => {
                panic!("{}: accepted (signed by {}), expected a refusal for {why:?}", c.name, s.who)
            }
            (Err(e), None) => panic!("{}: refused, expected accepted: {e}", c.name),
        }
        ours.push(got.is_ok());
    }

    // sigstore-python, all cases at once (one process each).
    let children: Vec<Child> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = dir.join(format!("bundle{i}.json"));
            std::fs::write(&path, c.bundle.to_string()).unwrap();
            Command::new(&sigstore)
                .arg("--trust-config")
                .arg(dir.join("trust_config.json"))
                .args([
                    "verify",
                    "identity",
                    "--offline",
                    "--cert-identity",
                    WORKFLOW,
                    "--cert-oidc-issuer",
                    GITHUB,
                ])
                .arg("--bundle")
                .arg(&path)
                .arg(c.digest)
                .env("HOME", dir)
                .env("XDG_CACHE_HOME", dir.join("cache"))
                .env("XDG_DATA_HOME", dir.join("data"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut disagreements = Vec::new();
    for ((c, child), ours) in cases.iter().zip(children).zip(ours) {
        let out = child.wait_with_output().unwrap();
        let theirs = out.status.success();
        if theirs != ours {
            disagreements.push(format!(
                "{}: durasync {}, sigstore-python {}:\n{}",
                c.name,
                if ours { "accepts" } else { "refuses" },
                if theirs { "accepts" } else { "refuses" },
                output_text(&out)
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n\n"));
}

/// The public trusted roots sigstore-python ships (Sigstore's production and
/// staging, as their TUF repositories serve them) list Rekor v2 logs with
/// Ed25519 keys and, on staging, an RSA CT log: those logs are left out and
/// the rest is used.
#[test]
fn sigstores_public_trusted_roots_parse_with_their_ecdsa_logs() {
    if !have("python3") {
        support::cannot_check("no python3 (sigstore-python)");
        return;
    }
    let venv = support::toolchains::sigstore_python().parent().unwrap().parent().unwrap().to_path_buf();
    let lib = std::fs::read_dir(venv.join("lib")).unwrap().next().unwrap().unwrap().path();
    let store = lib.join("site-packages/sigstore/_store");
    let mut read = 0;
    for instance in std::fs::read_dir(&store).unwrap() {
        let path = instance.unwrap().path().join("trusted_root.json");
        if !path.is_file() {
            continue;
        }
        let root = TrustedRoot::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !root.logs.is_empty() && !root.ct_logs.is_empty() && !root.authorities.is_empty(),
            "{path:?}"
        );
        assert!(root.logs.iter().all(|l| !l.base_url.contains("log2025")), "{path:?}: a Rekor v2 log kept");
        read += 1;
    }
    assert_eq!(read, 2, "sigstore-python's production and staging roots in {store:?}");
}
