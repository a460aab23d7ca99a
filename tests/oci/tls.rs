//! A private registry over TLS with its own CA, and plain HTTP refused for
//! a registry that is neither loopback nor listed as insecure.
//!
//! durasync reaches loopback registries over plain HTTP, so these
//! registries listen on a non-loopback address ([`PRIVATE_ADDR`]) on the
//! loopback device of a network namespace the test makes (root only): the
//! real `docker-registry`, with TLS from a test CA made by `openssl` and
//! htpasswd basic auth (`htpasswd -Bbn`), credentials from the docker
//! config.

use std::process::Command;

use super::support::registry::{PRIVATE_ADDR, Setup, htpasswd_auth, in_private_network};
use super::*;

/// A CA (`NAME-ca.pem`, `NAME-ca.key`) made by openssl in `dir`.
fn openssl_ca(dir: &Path, name: &str) -> PathBuf {
    let (pem, key) = (dir.join(format!("{name}-ca.pem")), dir.join(format!("{name}-ca.key")));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "2", "-subj", &format!("/CN=durasync test CA {name}"), "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&pem)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl req -x509: {}", output_text(&out));
    pem
}

/// A server certificate for IP `addr` signed by CA `ca` (from
/// [`openssl_ca`]): (certificate, key).
fn openssl_server_cert(dir: &Path, ca: &Path, addr: &str) -> (PathBuf, PathBuf) {
    let (cert, key, csr, ext) =
        (dir.join("server.pem"), dir.join("server.key"), dir.join("server.csr"), dir.join("server.ext"));
    let out = Command::new("openssl")
        .args(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-subj", &format!("/CN={addr}"), "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&csr)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl req: {}", output_text(&out));
    std::fs::write(
        &ext,
        format!(
            "subjectAltName=IP:{addr}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
             extendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    let out = Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(ca)
        .arg("-CAkey")
        .arg(ca.with_extension("key"))
        .args(["-CAcreateserial", "-extfile"])
        .arg(&ext)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl x509 -req: {}", output_text(&out));
    (cert, key)
}

/// The blobs in a cache directory (none after a refused pull).
fn cached_blobs(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("durasync/oci/blobs/sha256")).map_or(0, |d| d.count())
}

#[test]
fn a_private_registry_with_tls_from_its_own_ca_and_basic_auth_is_pulled_through_the_ca_and_refused_without_it()
 {
    if !have("openssl") || !have("htpasswd") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = openssl_ca(dir, "private");
    let other_ca = openssl_ca(dir, "other");
    let (cert, key) = openssl_server_cert(dir, &ca, PRIVATE_ADDR);
    let wasm = example_wasm();
    in_private_network(|| {
        let Some(reg) = RealRegistry::start_with(|rdir| Setup {
            host: Some(PRIVATE_ADDR.into()),
            extra: htpasswd_auth(rdir, "alice", "s3cret"),
            tls: Some((cert.clone(), key.clone())),
        }) else {
            return;
        };
        // The credentials as `docker login` writes them.
        let docker = dir.join("docker");
        std::fs::create_dir_all(&docker).unwrap();
        let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:s3cret");
        let config = serde_json::json!({"auths": {reg.registry(): {"auth": auth}}});
        std::fs::write(docker.join("config.json"), config.to_string()).unwrap();
        let reference = format!("oci://{}/private/example:1", reg.registry());
        let ca_arg = ca.to_str().unwrap();

        // Pushed through the CA (the flag) with the docker config's credentials.
        let out = durasync_env(
            &dir.join("cache-push"),
            &["push", wasm.to_str().unwrap(), &reference, "--registry-ca", ca_arg],
            &[("DOCKER_CONFIG", &docker)],
        );
        assert_status(&out, OK);
        let pushed = field(&out, "manifest digest:");

        // Without the CA: refused at the handshake, the certificate's
        // problem named, nothing cached, and not retried (the retry lines
        // are logged at `info`).
        let cache = dir.join("cache-no-ca");
        let env = [("DOCKER_CONFIG", docker.as_path()), ("DURASYNC_LOG", Path::new("info"))];
        let out = durasync_env(&cache, &["pull", &reference, "--attempts", "3"], &env);
        assert_status(&out, IO);
        let t = output_text(&out);
        assert!(
            t.contains("certificate is not trusted")
                && t.contains("unknown certificate authority")
                && t.contains("UnknownIssuer")
                && t.contains("--registry-ca"),
            "{t}"
        );
        assert!(!t.contains("attempt 2 of 3"), "a certificate problem was retried: {t}");
        assert_eq!(cached_blobs(&cache), 0, "a refused pull cached something");

        // Another CA is no better.
        let out = durasync_env(
            &dir.join("cache-other-ca"),
            &["pull", &reference, "--registry-ca", other_ca.to_str().unwrap()],
            &[("DOCKER_CONFIG", &docker)],
        );
        assert_status(&out, IO);
        assert!(output_text(&out).contains("unknown certificate authority"), "{}", output_text(&out));

        // A file that is no CA certificate is named before any request.
        let out = durasync_env(
            &dir.join("cache-bad-ca"),
            &["pull", &reference, "--registry-ca", key.to_str().unwrap()],
            &[("DOCKER_CONFIG", &docker)],
        );
        assert_status(&out, IO);
        assert!(
            output_text(&out).contains(&format!("registry CA file {}", key.display()))
                && output_text(&out).contains("no PEM `CERTIFICATE` block"),
            "{}",
            output_text(&out)
        );

        // Through the CA given by the environment (as a DaemonSet or unit
        // sets it): the same manifest digest; and `run` with the flag runs
        // the plugin pinned by that digest.
        let cache = dir.join("cache-env");
        let env = [("DOCKER_CONFIG", docker.as_path()), ("DURASYNC_REGISTRY_CA", ca.as_path())];
        let out = durasync_env(&cache, &["pull", &reference], &env);
        assert_status(&out, OK);
        assert_eq!(field(&out, "manifest digest:"), pushed);
        let pinned = format!("oci://{}/private/example@{pushed}", reg.registry());
        let manifest = super::cross::run_manifest(&dir.join("run"), &pinned, "");
        let input = manifest.with_file_name("input");
        let out = durasync_env(
            &dir.join("cache-run"),
            &["run", manifest.to_str().unwrap(), "--input", input.to_str().unwrap(), "--registry-ca", ca_arg],
            &[("DOCKER_CONFIG", &docker)],
        );
        assert_status(&out, OK);
        assert_eq!(std::fs::read_to_string(dir.join("run/out/env/GREETING")).unwrap(), "hello\n");
    });
}

#[test]
fn plain_http_to_a_registry_neither_loopback_nor_listed_as_insecure_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let wasm = example_wasm();
    in_private_network(|| {
        let Some(reg) =
            RealRegistry::start_with(|_| Setup { host: Some(PRIVATE_ADDR.into()), ..Setup::default() })
        else {
            return;
        };
        let reference = format!("oci://{}/vendor/example:1", reg.registry());
        let push = ["push", wasm.to_str().unwrap(), reference.as_str()];

        // Not listed: HTTPS only, and the plain-HTTP answer is refused, named.
        let out = durasync(&dir.join("cache-1"), &push);
        assert_status(&out, IO);
        let t = output_text(&out);
        assert!(
            t.contains(&format!("TLS to https://{}/", reg.registry()))
                && t.contains("did not answer in TLS")
                && t.contains("--insecure-registry"),
            "{t}"
        );
        let out = durasync(&dir.join("cache-2"), &["pull", &reference]);
        assert_status(&out, IO);
        assert!(output_text(&out).contains("did not answer in TLS"), "{}", output_text(&out));

        // Listed (the flag, then the environment): plain HTTP to it works.
        let out =
            durasync(&dir.join("cache-3"), &[&push[..], &["--insecure-registry", &reg.registry()]].concat());
        assert_status(&out, OK);
        let pushed = field(&out, "manifest digest:");
        let out = Command::new(support::durasync())
            .args(["pull", &reference])
            .env("XDG_CACHE_HOME", dir.join("cache-4"))
            .env("HOME", dir.join("cache-4"))
            .env("DURASYNC_INSECURE_REGISTRIES", format!("other.example:5000, {}", reg.registry()))
            .env_remove("DURASYNC_REGISTRY_CA")
            .env_remove("DURASYNC_REGISTRY_MIRRORS")
            .output()
            .unwrap();
        assert_status(&out, OK);
        assert_eq!(field(&out, "manifest digest:"), pushed);
    });
}
