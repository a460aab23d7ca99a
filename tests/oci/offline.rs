//! A node that holds a digest needs no registry: runs, pulls and agent
//! restarts reconcile from the blob cache while the registry is down.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::cross::durasync_push;
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
    let agent_once = || agent_once(&cache, &conf, &cache.join("durasync"));
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
    assert!(output_text(&out).contains("cannot reach"), "{}", output_text(&out));

    // Back up: the tag is resolved by the registry again.
    reg.restart();
    let out = durasync(&cache, &["pull", &format!("oci://{registry}/vendor/example:stable")]);
    assert_status(&out, OK);
    assert!(!output_text(&out).contains("offline"), "{}", output_text(&out));
}

/// Lines of a child's stderr, as they come.
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The first line that passes `want` (the deadline only bounds a failure).
fn wait_line(rx: &std::sync::mpsc::Receiver<String>, want: impl Fn(&str) -> bool, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if want(&line) => return line,
            Ok(_) => {}
            Err(e) => panic!("no log line for {what}: {e}"),
        }
    }
}

/// A registry whose `vendor/example:stable` is release 1 (`d1`), signed by
/// the vendor's key, and an agent following that tag with that key,
/// syncing `out/` from `input`. The agent is stopped on drop.
struct SignedTag {
    _registry: RealRegistry,
    tmp: tempfile::TempDir,
    registry: String,
    cache: PathBuf,
    key: PathBuf,
    d1: String,
    out: PathBuf,
    input: PathBuf,
    agent: std::process::Child,
    logs: std::sync::mpsc::Receiver<String>,
}

impl SignedTag {
    /// `schedule` is appended to the manifest (e.g. a `[schedule]` table).
    fn start(schedule: &str) -> Option<SignedTag> {
        let reg = RealRegistry::start()?;
        if !have("skopeo") || !have("openssl") {
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let cache = dir.join("cache");
        let registry = reg.registry();
        let (key, public) = openssl_key(&dir, "vendor");
        let d1 = durasync_push(&cache, &registry, "vendor/example:stable");
        let conf = dir.join("agent.d");
        let out = dir.join("out");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        let input = dir.join("input");
        std::fs::write(&input, "GREETING=hello\n").unwrap();
        std::fs::write(
            conf.join("example.toml"),
            format!(
                "name = \"example\"\nwasm = \"oci://{registry}/vendor/example:stable\"\n\
                 [verify]\nkeys = [\"{}\"]\n[roots.out]\npath = \"{}\"\naccess = \"rw\"\n[input]\nfile = \"{}\"\n\
                 {schedule}",
                public.display(),
                out.display(),
                input.display()
            ),
        )
        .unwrap();
        sign_with(&dir, &key, &registry, &d1);
        let mut agent = Command::new(support::durasync())
            .args(["agent", "--config-dir", conf.to_str().unwrap(), "--start-jitter", "0s", "--cache-dir"])
            .arg(cache.join("durasync"))
            .env("DURASYNC_LOG", "info")
            .env("HOME", &cache)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = lines_of(&mut agent);
        Some(SignedTag { _registry: reg, tmp, registry, cache, key, d1, out, input, agent, logs })
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// Sign manifest digest `d` with the vendor's key.
    fn sign(&self, d: &str) {
        sign_with(self.dir(), &self.key, &self.registry, d);
    }

    /// The next log line that passes `want`.
    fn wait_line(&self, want: impl Fn(&str) -> bool, what: &str) -> String {
        wait_line(&self.logs, want, what)
    }

    /// Replace the input with `GREETING=value` and wait until a run wrote it.
    fn greet(&self, value: &str, what: &str) {
        let new = self.dir().join("input.new");
        std::fs::write(&new, format!("GREETING={value}\n")).unwrap();
        std::fs::rename(&new, &self.input).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::fs::read_to_string(self.out.join("env/GREETING")).unwrap_or_default()
            != format!("{value}\n")
        {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Sign manifest digest `d` of `vendor/example` with `key` (openssl), the
/// signature pushed by skopeo.
fn sign_with(dir: &Path, key: &Path, registry: &str, d: &str) {
    let p = payload(&format!("{registry}/vendor/example"), d, serde_json::json!(null));
    let sig = openssl_sign(dir, key, &p);
    skopeo_push_signature(dir, registry, "vendor/example", d, p, &sig);
}

impl Drop for SignedTag {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.agent.id().to_string()]).status();
        let _ = self.agent.wait();
    }
}

#[test]
fn a_tag_moved_to_an_unsigned_release_keeps_the_last_good_version_running_until_it_is_signed() {
    let Some(t) = SignedTag::start("") else { return };
    let hup = || {
        let s = Command::new("kill").args(["-HUP", &t.agent.id().to_string()]).status().unwrap();
        assert!(s.success());
    };
    t.wait_line(|l| l.contains("component verified") && l.contains(&t.d1), "release 1 verified");
    t.wait_line(|l| l.contains("first round done"), "the first run");
    assert_eq!(std::fs::read_to_string(t.out.join("env/GREETING")).unwrap(), "hello\n");

    // The tag moves to a release nobody signed; a reload refuses it.
    let layout = t.dir().join("unsigned");
    let wasm = std::fs::read(example_wasm()).unwrap();
    let config = blob("application/vnd.wasm.config.v0+json", br#"{"release":2}"#.to_vec());
    let d2 = oci_layout(&layout, "stable", &config, &[blob("application/wasm", wasm)]);
    skopeo_push(&layout, "stable", &t.registry, "vendor/example");
    hup();
    let refused = t.wait_line(|l| l.contains("reload failed"), "the refused reload");
    assert!(refused.contains("previous version keeps running") && refused.contains(&d2), "{refused}");
    assert!(refused.contains("not signed"), "{refused}");

    // The last good version keeps syncing.
    t.greet("again", "the last good version did not run on the new input");

    // Once the vendor signs it, a reload takes it.
    t.sign(&d2);
    hup();
    t.wait_line(|l| l.contains("component verified") && l.contains(&d2), "release 2 verified");
}

#[test]
fn an_air_gapped_node_pulls_through_a_mirror_under_the_original_name() {
    let Some(reg) = RealRegistry::start() else { return };
    if !have("skopeo") || !have("openssl") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let mirror = reg.registry();
    let (key, public) = openssl_key(dir, "vendor");
    // The mirror holds the vendor's artifact and signature, copied under the
    // same repository (signed with the original name).
    let d = durasync_push(&cache, &mirror, "vendor/example:1");
    let p = payload("registry.example.invalid/vendor/example", &d, serde_json::json!(null));
    let sig = openssl_sign(dir, &key, &p);
    skopeo_push_signature(dir, &mirror, "vendor/example", &d, p, &sig);

    let original = "oci://registry.example.invalid/vendor/example";
    let mirrors = dir.join("mirrors");
    std::fs::write(&mirrors, format!("registry.example.invalid={mirror}")).unwrap();
    let with_mirror = |cache: &Path, args: &[&str]| {
        Command::new(support::durasync())
            .args(args)
            .env("XDG_CACHE_HOME", cache)
            .env("HOME", cache)
            .env("DURASYNC_REGISTRY_MIRRORS", std::fs::read_to_string(&mirrors).unwrap())
            .output()
            .unwrap()
    };
    let out = with_mirror(&dir.join("c1"), &["pull", &format!("{original}@{d}")]);
    assert_status(&out, OK);
    assert_eq!(field(&out, "manifest digest:"), d);
    assert!(field(&out, "pin it with:").contains("registry.example.invalid"), "{}", output_text(&out));
    let out =
        with_mirror(&dir.join("c2"), &["pull", &format!("{original}:1"), "--key", public.to_str().unwrap()]);
    assert_status(&out, OK);
    let who = field(&out, "signed by:");
    assert!(who.starts_with(&format!("{} (key id ", public.display())), "{who}");
}

#[test]
fn an_agent_following_a_tag_takes_a_newly_signed_release_on_its_interval_without_a_reload() {
    let Some(t) = SignedTag::start("[schedule]\ninterval = \"300ms\"\n") else { return };
    t.wait_line(|l| l.contains("component verified") && l.contains(&t.d1), "release 1 verified");
    t.wait_line(|l| l.contains("first round done"), "the first run");
    // Release 2: other bytes (a custom section appended to the component),
    // pushed under the same tag and signed. No SIGHUP.
    let mut wasm = std::fs::read(example_wasm()).unwrap();
    let name = b"durasync-release";
    let body = [&[name.len() as u8][..], name, b"2"].concat();
    wasm.extend_from_slice(&[0, body.len() as u8]);
    wasm.extend_from_slice(&body);
    let release2 = t.dir().join("release2.wasm");
    std::fs::write(&release2, &wasm).unwrap();
    let reference = format!("oci://{}/vendor/example:stable", t.registry);
    let pushed = durasync(&t.cache, &["push", release2.to_str().unwrap(), &reference]);
    assert_status(&pushed, OK);
    let d2 = field(&pushed, "manifest digest:");
    assert_ne!(t.d1, d2);
    t.sign(&d2);
    t.wait_line(|l| l.contains("component verified") && l.contains(&d2), "release 2 verified");
    let sha2 = sha256_hex(&wasm);
    let line = t.wait_line(
        |l| (l.contains("loaded") && l.contains(&sha2)) || l.contains("reload failed"),
        "release 2 loaded",
    );
    assert!(!line.contains("reload failed"), "{line}");
    // And it runs: the next input reaches the output.
    t.greet("release2", "release 2 did not run on the new input");
}

#[test]
fn an_agent_stops_its_running_version_once_its_digest_is_revoked() {
    let Some(t) = SignedTag::start("") else { return };
    t.wait_line(|l| l.contains("component verified") && l.contains(&t.d1), "release 1 verified");
    t.wait_line(|l| l.contains("first round done"), "the first run");
    assert_eq!(std::fs::read_to_string(t.out.join("env/GREETING")).unwrap(), "hello\n");

    // The operator revokes release 1 in the manifest: the reload refuses it
    // from the cache and the running version is stopped, not kept.
    let manifest = t.dir().join("agent.d/example.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let revoked = text.replace("[verify]\n", &format!("[verify]\nrevoked_digests = [\"{}\"]\n", t.d1));
    assert_ne!(text, revoked);
    let new = t.dir().join("example.toml.new");
    std::fs::write(&new, revoked).unwrap();
    std::fs::rename(&new, &manifest).unwrap();
    let stopped = t.wait_line(|l| l.contains("running version is revoked"), "the revoked version stopped");
    assert!(stopped.contains(&format!("manifest {} is revoked", t.d1)), "{stopped}");

    // It no longer syncs: a new input is not written.
    let new = t.dir().join("input.new");
    std::fs::write(&new, "GREETING=again\n").unwrap();
    std::fs::rename(&new, &t.input).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(std::fs::read_to_string(t.out.join("env/GREETING")).unwrap(), "hello\n");
}

#[test]
fn a_cached_sig_tag_vouches_only_for_its_own_repository_when_the_registry_is_down() {
    let Some(mut reg) = RealRegistry::start() else { return };
    if !have("skopeo") || !have("openssl") {
        support::cannot_check("no skopeo or openssl (the signature pushed)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = dir.join("cache");
    let registry = reg.registry();
    let (key, public) = openssl_key(dir, "vendor");
    // One digest in two repositories; only vendor/example signs it.
    let d = durasync_push(&cache, &registry, "vendor/example:stable");
    assert_eq!(durasync_push(&cache, &registry, "vendor/copy:stable"), d);
    let p = payload(&format!("{registry}/vendor/example"), &d, serde_json::json!(null));
    let sig = openssl_sign(dir, &key, &p);
    skopeo_push_signature(dir, &registry, "vendor/example", &d, p, &sig);
    let pull = |repo: &str| {
        durasync(
            &cache,
            &["pull", &format!("oci://{registry}/{repo}:stable"), "--key", public.to_str().unwrap()],
        )
    };
    assert_status(&pull("vendor/example"), OK);
    assert_status(&pull("vendor/copy"), POLICY);

    // Offline: the signature last seen for vendor/example is not vendor/copy's.
    reg.stop();
    assert_status(&pull("vendor/example"), OK);
    let out = pull("vendor/copy");
    assert_status(&out, IO);
    assert!(output_text(&out).contains("cannot reach"), "{}", output_text(&out));
}
