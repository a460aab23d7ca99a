//! The installer's logic against the SDK's native harness (no Wasm build).

use durasync_guest::Outcome;
use durasync_guest::testing::{Host, Op};

use super::Installer;

fn config(revision: u64) -> String {
    format!(
        r#"{{"pod":"kube-apiserver","revision":{revision},
            "configmaps":[{{"name":"config"}},{{"name":"extra","optional":true}}],
            "secrets":[{{"name":"serving-cert"}}]}}"#
    )
}

fn list(revision: u64) -> Vec<u8> {
    format!(
        r##"{{"apiVersion":"v1","kind":"List","items":[
        {{"kind":"ConfigMap","metadata":{{"name":"kube-apiserver-pod-{revision}"}},
          "data":{{"pod.yaml":"image: x\nrevision: REVISION\n"}}}},
        {{"kind":"ConfigMap","metadata":{{"name":"config-{revision}"}},
          "data":{{"config.yaml":"a: {revision}","run.sh":"#!/bin/sh"}}}},
        {{"kind":"Secret","metadata":{{"name":"serving-cert-{revision}"}},
          "data":{{"tls.key":"a2V5","rotate.sh":"IyE="}}}}]}}"##
    )
    .into_bytes()
}

fn host() -> Host {
    Host::new().root("resources").root("manifests")
}

#[test]
fn writes_the_revision_tree_with_exact_modes_then_both_manifest_copies() {
    let host = host();
    let run = host.run::<Installer>(&config(3), &list(3));
    run.ok();
    let res = host.files("resources");
    assert_eq!(res["kube-apiserver-3/configmaps/config/config.yaml"], (0o600, b"a: 3".to_vec()));
    assert_eq!(res["kube-apiserver-3/configmaps/config/run.sh"], (0o755, b"#!/bin/sh".to_vec()));
    assert_eq!(res["kube-apiserver-3/secrets/serving-cert/tls.key"], (0o600, b"key".to_vec()));
    assert_eq!(res["kube-apiserver-3/secrets/serving-cert/rotate.sh"], (0o700, b"#!".to_vec()));
    let pod = b"image: x\nrevision: 3\n".to_vec();
    assert_eq!(res["kube-apiserver-3/kube-apiserver-pod.yaml"], (0o600, pod.clone()));
    assert_eq!(res.len(), 5);
    assert_eq!(host.files("manifests")["kube-apiserver-pod.yaml"], (0o600, pod));
    let ops: Vec<_> = run.outcomes().into_iter().map(|(op, path, _)| (op, path)).collect();
    assert_eq!(
        ops,
        [
            (Op::Sync, "kube-apiserver-3/configmaps/config"),
            (Op::Sync, "kube-apiserver-3/secrets/serving-cert"),
            (Op::WriteFile, "kube-apiserver-3/kube-apiserver-pod.yaml"),
            (Op::WriteFile, "kube-apiserver-pod.yaml"),
        ],
        "the kubelet's copy is written last"
    );
}

#[test]
fn a_second_revision_leaves_the_first_intact_and_replaces_the_manifest() {
    let host = host();
    host.run::<Installer>(&config(3), &list(3)).ok();
    let before: Vec<_> =
        host.files("resources").into_iter().filter(|(p, _)| p.starts_with("kube-apiserver-3/")).collect();
    let run = host.run::<Installer>(&config(4), &list(4));
    run.ok();
    let after: Vec<_> =
        host.files("resources").into_iter().filter(|(p, _)| p.starts_with("kube-apiserver-3/")).collect();
    assert_eq!(before, after);
    assert!(host.files("resources").contains_key("kube-apiserver-4/configmaps/config/config.yaml"));
    assert_eq!(host.files("manifests")["kube-apiserver-pod.yaml"].1, b"image: x\nrevision: 4\n");
    assert_eq!(run.outcomes().last().unwrap().2, Outcome::Replaced);
}

#[test]
fn installing_the_same_revision_again_writes_nothing() {
    let host = host();
    host.run::<Installer>(&config(3), &list(3)).ok();
    let run = host.run::<Installer>(&config(3), &list(3));
    assert!(run.outcomes().iter().all(|(_, _, o)| *o == Outcome::Unchanged), "{:?}", run.outcomes());
}

#[test]
fn a_missing_required_object_fails_before_anything_is_written() {
    let host = host();
    let run = host.run::<Installer>(&config(3), &list(2));
    let err = run.err();
    assert!(err.contains("revision 3 is incomplete, nothing written"), "{err}");
    assert!(err.contains("configmap config-3") && err.contains("secret serving-cert-3"), "{err}");
    assert!(err.contains("configmap kube-apiserver-pod-3"), "{err}");
    assert!(run.operations.is_empty());
    assert!(host.files("resources").is_empty() && host.files("manifests").is_empty());
}

#[test]
fn modes_follow_the_upstream_rule() {
    use super::list::Kind;
    assert_eq!(super::mode(Kind::ConfigMap, "a.sh"), 0o755);
    assert_eq!(super::mode(Kind::Secret, "a.sh"), 0o700);
    assert_eq!(super::mode(Kind::ConfigMap, "a.yaml"), 0o600);
    assert_eq!(super::mode(Kind::Secret, "sh"), 0o600);
}

#[test]
fn a_pod_name_with_a_slash_is_refused() {
    let host = host();
    let cfg = r#"{"pod":"a/b","revision":1}"#;
    assert!(host.run::<Installer>(cfg, &list(1)).err().contains("not a plain name"));
}
