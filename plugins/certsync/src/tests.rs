//! certsync's logic against the SDK's native harness (no Wasm build).

use durasync_guest::Outcome;
use durasync_guest::testing::{Host, Op};

use super::CertSync;

const CONFIG: &str = r#"{"configmaps":[{"name":"ca"},{"name":"extra","optional":true}],
                        "secrets":[{"name":"tls"}]}"#;

fn list(items: &[&str]) -> Vec<u8> {
    format!(r#"{{"apiVersion":"v1","kind":"List","items":[{}]}}"#, items.join(",")).into_bytes()
}

const CA: &str = r#"{"kind":"ConfigMap","metadata":{"name":"ca"},"data":{"ca.crt":"CA1"}}"#;
const TLS: &str = r#"{"kind":"Secret","metadata":{"name":"tls"},"data":{"tls.crt":"Y3J0","tls.key":"a2V5"}}"#;
const EXTRA: &str = r#"{"kind":"ConfigMap","metadata":{"name":"extra"},"binaryData":{"x.bin":"AAE="}}"#;

#[test]
fn writes_configmaps_0644_and_secrets_0600_one_sync_per_object() {
    let host = Host::new().root("certs");
    let run = host.run::<CertSync>(CONFIG, &list(&[CA, TLS, EXTRA]));
    run.ok();
    let files = host.files("certs");
    assert_eq!(files["configmaps/ca/ca.crt"], (0o644, b"CA1".to_vec()));
    assert_eq!(files["configmaps/extra/x.bin"], (0o644, vec![0, 1]));
    assert_eq!(files["secrets/tls/tls.crt"], (0o600, b"crt".to_vec()));
    assert_eq!(files["secrets/tls/tls.key"], (0o600, b"key".to_vec()));
    assert_eq!(files.len(), 4);
    assert_eq!(
        run.outcomes(),
        [
            (Op::Sync, "configmaps/ca", Outcome::Created),
            (Op::Sync, "configmaps/extra", Outcome::Created),
            (Op::Sync, "secrets/tls", Outcome::Created),
        ]
    );
}

#[test]
fn second_run_with_the_same_list_writes_nothing() {
    let host = Host::new().root("certs");
    host.run::<CertSync>(CONFIG, &list(&[CA, TLS])).ok();
    let run = host.run::<CertSync>(CONFIG, &list(&[CA, TLS]));
    assert!(run.ok().contains("configmap ca: unchanged"), "{}", run.ok());
    assert!(run.outcomes().iter().all(|(_, _, o)| *o == Outcome::Unchanged), "{:?}", run.outcomes());
}

#[test]
fn missing_required_object_fails_alone_and_the_others_sync() {
    let host = Host::new().root("certs");
    let run = host.run::<CertSync>(CONFIG, &list(&[TLS]));
    let err = run.err();
    assert!(err.starts_with("certsync: 1 of 3 object(s) failed"), "{err}");
    assert!(err.contains("configmap ca: required, but not in the input"), "{err}");
    assert!(host.files("certs").contains_key("secrets/tls/tls.key"));
}

#[test]
fn missing_optional_object_removes_its_directory() {
    let host = Host::new().root("certs");
    host.run::<CertSync>(CONFIG, &list(&[CA, TLS, EXTRA])).ok();
    let run = host.run::<CertSync>(CONFIG, &list(&[CA, TLS]));
    assert!(run.ok().contains("configmap extra: removed"), "{}", run.ok());
    assert!(!host.path("certs").join("configmaps/extra").exists());
    assert!(run.outcomes().contains(&(Op::Remove, "configmaps/extra", Outcome::Removed)));
}

#[test]
fn malformed_list_is_one_error_and_writes_nothing() {
    let host = Host::new().root("certs");
    let bad = r#"{"kind":"Secret","metadata":{"name":"tls"},"data":{"tls.key":"not base64!"}}"#;
    let run = host.run::<CertSync>(CONFIG, &list(&[CA, bad]));
    assert!(run.err().contains("not valid base64"), "{}", run.err());
    assert!(run.operations.is_empty());
    assert!(host.files("certs").is_empty());
}

#[test]
fn a_key_that_breaks_the_path_rules_fails_only_its_object() {
    let host = Host::new().root("certs");
    let bad = r#"{"kind":"Secret","metadata":{"name":"tls"},"data":{"..":"eA=="}}"#;
    let err = host.run::<CertSync>(CONFIG, &list(&[CA, bad])).err().to_owned();
    assert!(err.contains("secret tls: invalid-path"), "{err}");
    assert!(host.files("certs").contains_key("configmaps/ca/ca.crt"));
}

#[test]
fn config_names_must_be_plain_and_unique() {
    let host = Host::new().root("certs");
    let run = host.run::<CertSync>(r#"{"secrets":[{"name":"../x"}]}"#, &list(&[]));
    assert!(run.err().contains("not a plain name"), "{}", run.err());
    let run = host.run::<CertSync>(r#"{"secrets":[{"name":"a"},{"name":"a"}]}"#, &list(&[]));
    assert!(run.err().contains("listed twice"), "{}", run.err());
    let run = host.run::<CertSync>(r#"{"secret":[]}"#, &list(&[]));
    assert!(run.err().contains("unknown field"), "{}", run.err());
}

#[test]
fn without_the_certs_root_the_run_fails_with_not_granted() {
    let host = Host::new();
    assert!(host.run::<CertSync>(CONFIG, &list(&[CA])).err().contains("not-granted"));
}
