//! A registry with htpasswd (basic) auth: credentials come from the docker
//! config users already have; without them the error says how to give them.

use super::support::registry::{Setup, htpasswd_auth};
use super::*;

#[test]
fn a_registry_with_basic_auth_takes_credentials_from_the_docker_config() {
    if !have("htpasswd") {
        return;
    }
    let Some(reg) = RealRegistry::start_with(|dir| Setup {
        extra: htpasswd_auth(dir, "alice", "s3cret"),
        ..Setup::default()
    }) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let wasm = example_wasm();
    let reference = format!("oci://{}/private/example:1", reg.registry());
    let push = ["push", wasm.to_str().unwrap(), reference.as_str()];

    // No credentials: refused by the registry, and the message says how.
    let out = durasync(&cache, &push);
    assert_status(&out, IO);
    assert!(
        output_text(&out).contains("answered 401") && output_text(&out).contains("docker login"),
        "{}",
        output_text(&out)
    );

    // `$DOCKER_CONFIG/config.json` with `auth` (base64 user:password), as `docker login` writes it.
    let docker = tmp.path().join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:s3cret");
    let config = serde_json::json!({"auths": {reg.registry(): {"auth": auth}}});
    std::fs::write(docker.join("config.json"), config.to_string()).unwrap();
    let out = durasync_env(&cache, &push, &[("DOCKER_CONFIG", &docker)]);
    assert_status(&out, OK);
    let pushed = field(&out, "manifest digest:");

    // `REGISTRY_AUTH_FILE` with a username and password (podman's style).
    let file = tmp.path().join("auth.json");
    let config = serde_json::json!({"auths": {reg.registry(): {"username": "alice", "password": "s3cret"}}});
    std::fs::write(&file, config.to_string()).unwrap();
    let out =
        durasync_env(&tmp.path().join("fresh"), &["pull", &reference], &[("REGISTRY_AUTH_FILE", &file)]);
    assert_status(&out, OK);
    assert_eq!(field(&out, "manifest digest:"), pushed);

    // A wrong password is refused, not retried into a lockout.
    let config = serde_json::json!({"auths": {reg.registry(): {"username": "alice", "password": "wrong"}}});
    std::fs::write(&file, config.to_string()).unwrap();
    let out =
        durasync_env(&tmp.path().join("fresh2"), &["pull", &reference], &[("REGISTRY_AUTH_FILE", &file)]);
    assert_status(&out, IO);
    assert!(output_text(&out).contains("answered 401"), "{}", output_text(&out));
}
