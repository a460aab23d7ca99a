//! A node that holds a digest needs no registry: runs, pulls and agent
//! restarts reconcile from the blob cache while the registry is down.

use super::cross::{durasync_push, openssl_key, openssl_sign, payload, skopeo_push_signature};
use super::*;

#[test]
fn an_agent_with_oci_manifests_restarts_and_reconciles_while_the_registry_is_down() {
    let Some(mut reg) = RealRegistry::start() else { return };
    if !have("skopeo") || !have("openssl") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let registry = reg.registry();
    let (key, public) = openssl_key(dir, "vendor");
    let d = durasync_push(&cache, &registry, "vendor/example:stable");
    let p = payload(&format!("{registry}/vendor/example"), &d, serde_json::json!(null));
    let sig = openssl_sign(dir, &key, &p);
    skopeo_push_signature(dir, &registry, "vendor/example", &d, p, &sig);

    // Two instances: one by digest, one by tag with a key.
    let conf = dir.join("agent.d");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(dir.join("input"), "GREETING=hello\n").unwrap();
    for (name, wasm, extra) in [
        ("by-digest", format!("oci://{registry}/vendor/example@{d}"), String::new()),
        (
            "by-tag",
            format!("oci://{registry}/vendor/example:stable"),
            format!("[verify]\nkeys = [\"{}\"]\n", public.display()),
        ),
    ] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(
            conf.join(format!("{name}.toml")),
            format!(
                "name = \"{name}\"\nwasm = \"{wasm}\"\n{extra}[roots.out]\npath = \"{}\"\naccess = \"rw\"\n\
                 [input]\nfile = \"{}\"\n",
                dir.join(name).display(),
                dir.join("input").display()
            ),
        )
        .unwrap();
    }
    let agent_once = || {
        let cache_dir = cache.join("durasync");
        durasync(
            &cache,
            &[
                "agent",
                "--once",
                "--config-dir",
                conf.to_str().unwrap(),
                "--cache-dir",
                cache_dir.to_str().unwrap(),
            ],
        )
    };
    assert_status(&agent_once(), OK);

    // The registry goes away; the node's files are lost too; the agent
    // restarts and reconciles from the cache (signature checked again).
    reg.stop();
    for name in ["by-digest", "by-tag"] {
        std::fs::remove_dir_all(dir.join(name).join("env")).unwrap();
    }
    let out = agent_once();
    assert_status(&out, OK);
    for name in ["by-digest", "by-tag"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(name).join("env/GREETING")).unwrap(),
            "hello\n",
            "{name}"
        );
    }

    // Something the node never held cannot come from nowhere.
    let out = durasync(&cache, &["pull", &format!("oci://{registry}/vendor/other:1"), "--attempts", "1"]);
    assert_status(&out, IO);
    assert!(text(&out).contains("cannot reach"), "{}", text(&out));

    // Back up: the tag is resolved by the registry again.
    reg.restart();
    let out = durasync(&cache, &["pull", &format!("oci://{registry}/vendor/example:stable")]);
    assert_status(&out, OK);
    assert!(!text(&out).contains("offline"), "{}", text(&out));
}
