//! An `oci://` instance whose registry attacks (a redirect to `file://`, a
//! manifest dripped a byte a second) beside a good instance: the good one
//! loads and runs, the bad one is named in `/readyz` with its reason, and
//! the agent lives (`/healthz` 200).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use durasync::digest::oci_digest;

use super::support::fake_registry::{Fake, Reply};
use super::support::sha256_of_file;
use super::{Agent, DEADLINE, Node};

const REPO: &str = "vendor/plugin";

/// A plugin manifest (one wasm layer `wasm`), its bytes.
fn manifest(wasm: &[u8]) -> Vec<u8> {
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": oci_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": oci_digest(wasm), "size": wasm.len()}],
    })
    .to_string()
    .into_bytes()
}

/// Instance `name` running `oci://FAKE/REPO@DIGEST` (otherwise a certsync instance).
fn oci_instance(node: &Node, name: &str, fake: &Fake, manifest_digest: &str) {
    std::fs::create_dir_all(node.root(name)).unwrap();
    node.set_generation(name, 1);
    let text = format!(
        "name = \"{name}\"\nwasm = \"oci://{}/{REPO}@{manifest_digest}\"\n[roots.certs]\npath = \"{}\"\n\
         access = \"rw\"\n[config]\nsecrets = [{{ name = \"tls\" }}]\n[input]\nfile = \"{}\"\n",
        fake.registry(),
        node.root(name).display(),
        node.input(name).display()
    );
    node.replace(&node.manifest(name), text.as_bytes());
}

/// Wait until `/readyz` names instance `name` with a problem containing
/// every one of `needles` (and, when `alone`, no other instance); returns
/// the problem.
#[track_caller]
fn wait_problem(agent: &Agent, name: &str, needles: &[&str], alone: bool) -> String {
    let start = Instant::now();
    loop {
        let (status, body) = agent.get("/readyz");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let not_ready = v["not_ready"].as_array().cloned().unwrap_or_default();
        let problem = not_ready.iter().find_map(|i| {
            let problem = i["problem"].as_str()?;
            (i["instance"].as_str()?.starts_with(name) && needles.iter().all(|n| problem.contains(n)))
                .then(|| problem.to_owned())
        });
        if let Some(problem) = problem
            && (!alone || not_ready.len() == 1)
        {
            assert_eq!(status, 503);
            return problem;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "/readyz never named {name} {needles:?}: {body}\nlog:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_registry_redirect_to_a_url_without_a_host_fails_only_its_instance() {
    let node = Node::new();
    let wasm = format!("\0asm not fetched {}", sha256_of_file(&super::certsync_wasm())).into_bytes();
    let m = manifest(&wasm);
    let mut routes = HashMap::new();
    routes.insert(
        format!("/v2/{REPO}/manifests/{}", oci_digest(&m)),
        Reply::Body(200, "application/json", m.clone()),
    );
    routes.insert(
        format!("/v2/{REPO}/blobs/{}", oci_digest(&wasm)),
        Reply::Headers(307, vec!["Location: file:///etc/passwd".into()], Vec::new()),
    );
    let fake = Fake::start(routes);
    // "a-…" sorts first: it is loaded before the good one.
    oci_instance(&node, "a-redirect", &fake, &oci_digest(&m));
    node.certsync("b-good", "");
    let agent = Agent::start(&node, &[]);
    node.wait_generation("b-good", 1, &agent);
    let problem = wait_problem(&agent, "a-redirect", &["redirect", "file:///etc/passwd"], true);
    assert!(!problem.contains("panicked"), "{problem}");
    assert_eq!(agent.get("/healthz").0, 200);
    assert!(!agent.log().contains("panicked"), "{}", agent.log());
}

/// A node with instance `a-drip`, whose registry drips its manifest a
/// byte a second, and the certsync instance `b-good`; "a-…" sorts first,
/// so a loader taking them in order would pull it before the good one.
fn dripping_beside_good() -> (Node, Fake) {
    let node = Node::new();
    let wasm = format!("\0asm dripped {}", sha256_of_file(&super::certsync_wasm())).into_bytes();
    let m = manifest(&wasm);
    let mut routes = HashMap::new();
    routes.insert(format!("/v2/{REPO}/manifests/{}", oci_digest(&m)), Reply::Drip(m.clone()));
    let fake = Fake::start(routes);
    oci_instance(&node, "a-drip", &fake, &oci_digest(&m));
    node.certsync("b-good", "");
    (node, fake)
}

#[test]
fn a_dripping_registry_holds_its_instance_no_longer_than_the_registry_deadline() {
    let (node, _fake) = dripping_beside_good();
    let start = Instant::now();
    let agent = Agent::start(&node, &["--registry-deadline", "3"]);
    // Loading, said so, while the pull is under way.
    wait_problem(&agent, "a-drip", &["loading"], false);
    node.wait_generation("b-good", 1, &agent);
    assert!(start.elapsed() < Duration::from_secs(15), "the good instance waited {:?}", start.elapsed());
    wait_problem(&agent, "a-drip", &["not loaded", "deadline of 3 s"], true);
    assert_eq!(agent.get("/healthz").0, 200);
}

#[test]
fn a_slow_registry_pull_never_holds_back_the_instances_loaded_after_it() {
    let (node, _fake) = dripping_beside_good();
    let agent = Agent::start(&node, &["--registry-deadline", "120"]);
    node.wait_generation("b-good", 1, &agent);
    // The good instance synced while the dripping pull is still under way.
    let problem = wait_problem(&agent, "a-drip", &["loading"], true);
    assert_eq!(problem, "loading");
    assert_eq!(agent.get("/healthz").0, 200);
}
