//! Fuzz targets: one `fn(&[u8])` per parser of outside input, each calling
//! the real parser exactly as the host does. A target returns normally for
//! any input (a refusal is a normal return); a panic, a hang or unbounded
//! memory in one is a bug in the parser.
//!
//! The stable-toolchain fuzz driver is the `fuzz` test binary
//! (`tests/fuzz/`: seed corpora, mutations, structured inputs, a time and
//! memory bound per input); a `cargo fuzz` harness on a nightly toolchain
//! can call the same functions. [`TARGETS`] lists them by name.
//!
//! Not a stable interface: hidden from the documentation, for the fuzz
//! driver only.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

/// A fuzz target: any bytes in, a normal return out.
pub type Target = fn(&[u8]);

/// Every target by its name (the name of its corpus folder).
pub const TARGETS: &[(&str, Target)] = &[
    ("manifest", manifest),
    ("hooks", hooks),
    ("agent_config", agent_config),
    ("oci_manifest", oci_manifest),
    ("oci_reference", oci_reference),
    ("www_authenticate", www_authenticate),
    ("registry_urls", registry_urls),
    ("cosign", cosign),
    ("sigstore", sigstore),
    ("ledger", ledger),
    ("harness", harness),
    ("case_toml", case_toml),
    ("input", input),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A plugin manifest (`plugin.toml`: roots, limits, `[config]`, `verify`,
/// hooks), as `durasync run` and the agent read it.
pub fn manifest(data: &[u8]) {
    if let Some(t) = text(data)
        && let Ok(m) = crate::runtime::Manifest::parse(t, Path::new("/fuzz/plugin.toml"))
    {
        // What a loaded manifest is used for next: the trust policy and
        // the config handed to the plugin must hold.
        let _ = m.policy();
        assert!(serde_json::from_str::<serde_json::Value>(&m.config_json).is_ok());
    }
}

/// The hook tables alone (`[[validate]]`, `[[action]]`, a root's
/// guardrails), with the roots `in` and `out`, as the manifest parser
/// hands them over.
pub fn hooks(data: &[u8]) {
    use crate::hooks::config;
    let Some(Ok(table)) = text(data).map(str::parse::<toml::Table>) else { return };
    let roots = ["in", "out"];
    let _ = config::parse_validators(table.get("validate"), &roots);
    let _ = config::parse_actions(table.get("action"), &roots, Path::new("/fuzz"));
    let _ = config::parse_guard(&table, "roots.out");
}

/// An agent manifest (a plugin manifest with `[input]` and `[schedule]`).
pub fn agent_config(data: &[u8]) {
    if let Some(t) = text(data) {
        let _ = crate::agent::config::Spec::parse(t, Path::new("/fuzz/agent.toml"));
    }
}

/// A registry's manifest answer: an image manifest, an index or anything
/// else, then the descriptors in it, as a pull reads them.
pub fn oci_manifest(data: &[u8]) {
    use crate::runtime::distribution::layout::{self, ImageManifest};
    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    if let Ok(m) = ImageManifest::parse(data, DIGEST) {
        let _ = m.wasm_layer(DIGEST);
        for d in std::iter::once(&m.config).chain(&m.layers) {
            assert!(layout::check_descriptor(d).is_ok(), "parse let a bad digest through: {d:?}");
        }
    }
    let _ = serde_json::from_slice::<layout::Descriptor>(data).map(|d| layout::check_descriptor(&d));
}

/// An `oci://` reference (a manifest's `wasm`, `durasync pull`'s argument)
/// and a digest as a registry states it.
pub fn oci_reference(data: &[u8]) {
    use crate::runtime::distribution::reference::{Reference, check_digest};
    let Some(t) = text(data) else { return };
    if let Ok(r) = Reference::parse(t) {
        // What a parsed reference is used for: URLs, cache keys, messages.
        let _ = (r.target(), r.name(), r.to_string());
    }
    let _ = check_digest(t);
}

/// A registry's `WWW-Authenticate` header (a 401's challenge).
pub fn www_authenticate(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let (_kind, params) = t.split_once(' ').unwrap_or((t, ""));
    let _ = crate::runtime::distribution::http::parse_challenge(params);
}

/// Where a registry sends the client: a redirect's `Location` and a
/// `Bearer` challenge's token realm, resolved against the URL that was
/// asked (the input's first line; the second is the header's value, the
/// third a host listed as insecure). Whatever is accepted is an http(s)
/// URL with a host, never plain HTTP after HTTPS unless that host may be.
pub fn registry_urls(data: &[u8]) {
    use crate::runtime::distribution::{authority, realm_url, redirect_target};
    let Some(t) = text(data) else { return };
    let mut lines = t.splitn(3, '\n');
    let from = lines.next().unwrap_or_default();
    let value = lines.next().unwrap_or_default();
    let insecure: Vec<String> = lines.next().map(|h| vec![h.to_owned()]).unwrap_or_default();
    let _ = authority(from);
    for to in
        [redirect_target(from, value, &insecure), realm_url(from, value, &insecure)].into_iter().flatten()
    {
        assert!(authority(&to).is_some(), "{from:?} + {value:?} was accepted as {to:?}, which names no host");
        if from.starts_with("https:") && to.starts_with("http:") {
            let host = authority(&to).unwrap_or_default();
            let bare = host
                .rsplit_once(':')
                .filter(|(_, p)| p.parse::<u16>().is_ok())
                .map_or(host.as_str(), |(h, _)| h);
            let v4_loopback = bare.split('.').count() == 4
                && bare.split('.').all(|o| o.parse::<u8>().is_ok())
                && bare.starts_with("127.");
            let plain = v4_loopback
                || bare.eq_ignore_ascii_case("localhost")
                || bare == "[::1]"
                || insecure.contains(&host)
                || insecure.iter().any(|i| host.split(':').next() == Some(i.as_str()));
            assert!(plain, "{from:?} + {value:?} went down to plain HTTP at {to:?}");
        }
    }
}

/// A cosign signature layer: its payload and signature annotation from a
/// registry (bytes before a NUL are the payload, after it the signature
/// text), and a public key file from the operator. The payload is also
/// checked signed by the trusted key, so its parser is reached.
pub fn cosign(data: &[u8]) {
    use crate::runtime::trust::cosign::{self, PublicKey};
    use base64::Engine as _;
    use p256::ecdsa::signature::Signer as _;
    let (payload, signature) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], text(&data[i + 1..])),
        None => (data, None),
    };
    let (key, public) = fuzz_key();
    let annotations = BTreeMap::from([("ci".to_owned(), "yes".to_owned())]);
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let keys = std::slice::from_ref(public);
    let _ = cosign::check(payload, signature, digest, keys, &annotations);
    let signed: p256::ecdsa::Signature = key.sign(payload);
    let b64 = base64::engine::general_purpose::STANDARD.encode(signed.to_der());
    let _ = cosign::check(payload, Some(&b64), digest, keys, &annotations);
    if let Some(t) = text(data) {
        let _ = PublicKey::from_pem(t, "fuzz.pub");
    }
}

/// Sigstore material from a registry and the operator: a bundle (verified
/// for a fixed digest against a trusted root whose log key is the fuzz key,
/// by key and by identity), a referrers index, a `trusted_root.json`, and a
/// certificate's embedded SCTs (checked against a root whose CT log key is
/// the fuzz key).
pub fn sigstore(data: &[u8]) {
    use crate::runtime::distribution::layout;
    use crate::runtime::trust::{Identity, TrustedRoot, bundle};
    use base64::Engine as _;
    static ROOT: OnceLock<TrustedRoot> = OnceLock::new();
    let root = ROOT.get_or_init(|| {
        use p256::pkcs8::EncodePublicKey as _;
        let der = fuzz_key().0.verifying_key().to_public_key_der().expect("encodes");
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let log = serde_json::json!([{"baseUrl": "https://log", "publicKey": {
            "rawBytes": b64(der.as_bytes()), "validFor": {"start": "2020-01-01T00:00:00Z"}},
            "logId": {"keyId": b64(&crate::runtime::trust::root::key_id(der.as_bytes()))}}]);
        let json = serde_json::json!({"tlogs": log, "ctlogs": log});
        TrustedRoot::parse(json.to_string().as_bytes(), "fuzz").expect("parses")
    });
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let identity = Identity::new("https://issuer", None, Some("^https://")).expect("compiles");
    let keys = std::slice::from_ref(&fuzz_key().1);
    let _ = bundle::verify(data, digest, keys, std::slice::from_ref(&identity), Some(root));
    let _ = bundle::verify(data, digest, &[], &[], None);
    let _ = layout::referrers(data, digest, bundle::MEDIA_TYPES);
    let _ = TrustedRoot::parse(data, "fuzz");
    // A certificate (DER) and its embedded SCT list, as its own issuer.
    if let Ok(cert) = <x509_cert::Certificate as x509_cert::der::Decode>::from_der(data) {
        let _ = crate::runtime::trust::sct::verify(&cert, std::slice::from_ref(&cert), root);
    }
}

/// A fixed key pair for the cosign target.
fn fuzz_key() -> &'static (p256::ecdsa::SigningKey, crate::runtime::trust::cosign::PublicKey) {
    static KEY: OnceLock<(p256::ecdsa::SigningKey, crate::runtime::trust::cosign::PublicKey)> =
        OnceLock::new();
    KEY.get_or_init(|| {
        use p256::pkcs8::EncodePublicKey as _;
        let signing = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("a valid scalar");
        let pem = signing.verifying_key().to_public_key_pem(Default::default()).expect("encodes");
        let public = crate::runtime::trust::cosign::PublicKey::from_pem(&pem, "fuzz.pub").expect("parses");
        (signing, public)
    })
}

/// A scratch directory for the targets that need files, one per thread
/// (the driver may run targets in parallel), kept for the process.
fn scratch() -> std::path::PathBuf {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::Builder::new()
            .prefix("durasync-fuzz-")
            .tempdir()
            .expect("a temporary directory");
    }
    DIR.with(|d| d.path().to_owned())
}

/// The action ledger file as found at start (left by an earlier agent,
/// or edited by hand).
pub fn ledger(data: &[u8]) {
    use std::os::fd::OwnedFd;
    let dir = scratch().join("ledger");
    std::fs::create_dir_all(&dir).expect("scratch");
    std::fs::write(dir.join("fuzz.owed"), data).expect("scratch");
    let fd: OwnedFd = std::fs::File::open(&dir).expect("scratch").into();
    if let Ok(l) = crate::hooks::ledger::Ledger::open_at(fd, "fuzz.owed") {
        for (name, _) in l.owed() {
            assert!(!name.is_empty() && !name.contains('\n') && !name.chars().any(char::is_control));
        }
    }
}

/// A harness session's request lines (`durasync harness`), served in a dry
/// run over an empty granted root `out` and a read-only root `in` (nothing
/// is written), with small limits so one input stays quick.
pub fn harness(data: &[u8]) {
    use crate::services::{Access, Grant, PluginLimits, Session};
    let base = scratch().join("harness");
    let (rw, ro) = (base.join("out"), base.join("in"));
    std::fs::create_dir_all(&rw).expect("scratch");
    std::fs::create_dir_all(&ro).expect("scratch");
    let grants = BTreeMap::from([
        ("out".to_owned(), Grant::open(&rw, Access::ReadWrite, false).expect("scratch")),
        ("in".to_owned(), Grant::open(&ro, Access::ReadOnly, false).expect("scratch")),
    ]);
    let limits = PluginLimits {
        call_bytes: 1 << 20,
        write_files: 1000,
        write_bytes: 4 << 20,
        log_bytes: 64 << 10,
        ..PluginLimits::default()
    };
    let session = Session::new("fuzz", grants, limits, true);
    let mut h = crate::testing::harness::Harness::new(session, 10_000);
    let mut out = Vec::new();
    let _ = h.serve(&mut &data[..], &mut out);
    // Every answer is one JSON line.
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        assert!(serde_json::from_slice::<serde_json::Value>(line).is_ok(), "an answer is not JSON");
    }
}

/// A golden case's `case.toml` (`durasync test`).
pub fn case_toml(data: &[u8]) {
    if let Ok((_, Some(config), _)) = crate::testing::golden::parse_case(data, Path::new("/fuzz/case.toml")) {
        assert!(serde_json::from_str::<serde_json::Value>(&config).is_ok());
    }
}

/// An instance's input: the bytes of its input file, read as the agent
/// reads them before a run (bounded, handed over unchanged), and a failing
/// input command's standard error kept head and tail for its message.
pub fn input(data: &[u8]) {
    use crate::agent::{config::Input, input};
    let path = scratch().join("input");
    std::fs::write(&path, data).expect("scratch");
    let read = input::read(&Input::File(path)).expect("a small input file is read");
    assert_eq!(read, data, "the input reaches the plugin unchanged");
    let keep = data.first().map_or(0, |b| usize::from(*b % 64));
    let kept = input::head_tail(data, keep);
    if data.len() <= 2 * keep {
        assert_eq!(kept, data);
    } else {
        assert!(kept.starts_with(&data[..keep]) && kept.ends_with(&data[data.len() - keep..]));
        assert!(kept.len() <= 2 * keep + 40, "{} bytes kept of {}", kept.len(), data.len());
    }
}
