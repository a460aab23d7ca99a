//! A real OCI registry for the tests: Debian's `docker-registry`
//! (distribution 2.8) started on a loopback address at a free port with its
//! own config and temporary storage (never the package's own service on
//! :5000), optionally with htpasswd auth or TLS; killed on drop. Used by
//! the oci tests and the agent's image tests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{have, output_text};
use std::time::{Duration, Instant};

/// How a registry is set up, made from its temporary directory.
#[derive(Default)]
pub struct Setup {
    /// The address it listens on (default `127.0.0.1`).
    pub host: Option<String>,
    /// Extra top-level config (an `auth:` section).
    pub extra: String,
    /// TLS: its certificate and key (PEM files).
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// The config section for htpasswd (basic) auth with one user, the file
/// made by `htpasswd -Bbn` in `dir`.
pub fn htpasswd_auth(dir: &Path, user: &str, password: &str) -> String {
    let out = Command::new("htpasswd").args(["-Bbn", user, password]).output().unwrap();
    assert!(out.status.success(), "htpasswd: {}", output_text(&out));
    let file = dir.join("htpasswd");
    std::fs::write(&file, out.stdout).unwrap();
    format!("auth:\n  htpasswd:\n    realm: durasync-test\n    path: {}\n", file.display())
}

/// A running `docker-registry`.
pub struct Registry {
    child: Option<Child>,
    host: String,
    port: u16,
    dir: tempfile::TempDir,
    extra: String,
    tls: Option<(PathBuf, PathBuf)>,
    /// Spawns left on another port when the chosen one was taken.
    retries_left: u32,
}

impl Registry {
    /// Plain HTTP on 127.0.0.1. `None` (after `cannot_check`) when the
    /// package is not installed.
    pub fn start() -> Option<Registry> {
        Self::start_with(|_| Setup::default())
    }

    /// With the setup `setup` makes from the registry's own directory.
    pub fn start_with(setup: impl FnOnce(&Path) -> Setup) -> Option<Registry> {
        if !have("docker-registry") {
            return None;
        }
        let dir = tempfile::Builder::new().prefix("durasync-registry-").tempdir().unwrap();
        let Setup { host, extra, tls } = setup(dir.path());
        let host = host.unwrap_or_else(|| "127.0.0.1".into());
        let port = free_port(&host);
        let mut r = Registry { child: None, host, port, dir, extra, tls, retries_left: 3 };
        r.spawn();
        r.retries_left = 0;
        Some(r)
    }

    fn spawn(&mut self) {
        let config = self.dir.path().join("config.yml");
        let tls = self.tls.as_ref().map_or(String::new(), |(cert, key)| {
            format!("  tls:\n    certificate: {}\n    key: {}\n", cert.display(), key.display())
        });
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {}:{}\n{tls}{}",
                self.dir.path().join("storage").display(),
                self.host,
                self.port,
                self.extra
            ),
        )
        .unwrap();
        let log = self.dir.path().join("registry.log");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // Ready when /v2/ answers (200, or 401 with auth); with TLS, when
        // the port accepts (the certificate is loaded before it listens).
        // The deadline only bounds a failure.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                // The free port was taken by someone else in between: once
                // more on another port (a restart keeps its port: no retry).
                if text.contains("address already in use") && self.retries_left > 0 {
                    self.retries_left -= 1;
                    self.port = free_port(&self.host);
                    return self.spawn();
                }
                panic!("docker-registry exited ({status}) before it was ready:\n{text}");
            }
            let ready = if self.tls.is_some() {
                TcpStream::connect((self.host.as_str(), self.port)).is_ok()
            } else {
                matches!(http_status(&self.host, self.port, "/v2/"), Some(200 | 401))
            };
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "docker-registry did not answer on {}", self.registry());
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
    }

    /// Stop it (the storage stays: `restart` brings the same content back).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stop and start again on the same port with the same storage.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// `HOST:PORT`, as a reference names it.
    pub fn registry(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The registry's own directory (config, log, storage).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port free on `host` now (it may be taken before it is bound: the
/// starter retries).
pub fn free_port(host: &str) -> u16 {
    std::net::TcpListener::bind((host, 0)).unwrap().local_addr().unwrap().port()
}

/// The status of a plain-HTTP `GET path`, or `None` when nothing answers.
pub fn http_status(host: &str, port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect((host, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// An address for a registry that is not loopback (TEST-NET-1, RFC 5737),
/// only ever put on the loopback device of a network namespace that
/// [`in_private_network`] made: no packet to it leaves that namespace.
pub const PRIVATE_ADDR: &str = "192.0.2.1";

/// Run `f` on a thread of its own in a new network namespace (root only)
/// whose loopback device is up and also carries [`PRIVATE_ADDR`], so a
/// registry can listen on an address durasync does not treat as loopback.
/// Every process `f` starts inherits the namespace; it goes away with them.
/// `None` (after `cannot_check`) without root or `ip`.
pub fn in_private_network<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    if !rustix::process::geteuid().is_root() {
        crate::cannot_check("a private network namespace needs root");
        return None;
    }
    if !have("ip") {
        return None;
    }
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: a network namespace is no file descriptor table: no
            // descriptor of another thread changes meaning.
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
                .expect("unshare(CLONE_NEWNET)");
            for args in [
                vec!["link", "set", "lo", "up"],
                vec!["addr", "add", &format!("{PRIVATE_ADDR}/32"), "dev", "lo"],
            ] {
                let out = Command::new("ip").args(&args).output().unwrap();
                assert!(out.status.success(), "ip {}: {}", args.join(" "), output_text(&out));
            }
            f()
        })
        .join()
    });
    match result {
        Ok(v) => Some(v),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
