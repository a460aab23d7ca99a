//! One bounded HTTP/1.1 request to a daemon on the node: an HTTP action
//! (`POST /-/reload`) or an HTTP probe (`GET /healthz`).
//!
//! - **Loopback only**, unless the caller allows remote hosts: the URL's
//!   host must be `localhost`, an IPv4 address in `127.0.0.0/8` or `::1`
//!   (see [`is_local`] for why exactly these). `localhost` is resolved here
//!   to `127.0.0.1` and `::1`, never through DNS or `/etc/hosts` (a FROM
//!   scratch image has neither), so no name can lead the request off the
//!   node.
//! - **One request**: no redirect is followed (a 3xx is the answer), no
//!   proxy is used, no connection is kept.
//! - **One deadline for everything** (connecting, TLS, sending, the status
//!   line, the headers and the body): the request runs on its own thread
//!   and the caller stops waiting at the deadline whatever the thread is
//!   doing (a name lookup of a remote host cannot be interrupted; the
//!   thread then ends with it).
//! - **A bounded answer**: ureq bounds the headers (100 fields of at most
//!   100 KiB); of the body at most [`MAX_BODY_READ`] bytes are read and the
//!   last [`MAX_BODY_TAIL`] kept, control characters escaped, for a message.
//! - **HTTPS**: to a loopback host the connection is encrypted but the
//!   certificate is not checked (see `LoopbackPeer`); to a remote host it
//!   is checked against the web PKI roots.
//!
//! Not checked here: the status. The caller decides what it expects (an
//! action's `expect`, a probe's 2xx).

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::command::{Tail, text};

/// The most of a body read: what follows is not waited for.
pub const MAX_BODY_READ: u64 = 1024 * 1024;
/// How much of the body's end is kept for messages.
pub const MAX_BODY_TAIL: usize = 2048;
/// The longest URL accepted.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest deadline accepted (one hour, like a command's timeout).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The methods a request may use.
pub const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// What to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// One of [`METHODS`].
    pub method: String,
    /// An `http://` or `https://` URL.
    pub url: String,
    /// The deadline of the whole request, body included (at most
    /// [`MAX_TIMEOUT`]).
    pub timeout: Duration,
    /// Whether a host other than a loopback one may be asked.
    pub allow_remote: bool,
}

/// What the server answered (any status: the caller judges it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The status code (a 3xx too: redirects are not followed).
    pub status: u16,
    /// The end of the body (at most [`MAX_BODY_TAIL`] bytes, `…` before it
    /// when cut), its lines joined by ` | `, control characters escaped.
    pub body_tail: String,
}

/// Why there is no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The request was not sent: its URL or method is not acceptable.
    #[error("{url}: {reason}")]
    Refused {
        /// The URL (escaped).
        url: String,
        /// Why.
        reason: String,
    },
    /// No connection, or it broke before the answer was read.
    #[error("{url}: no answer: {reason}")]
    Network {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The TLS handshake failed.
    #[error("{url}: TLS handshake failed: {reason}")]
    Tls {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The deadline passed before the answer was read whole.
    #[error("{url}: no answer within {ms} ms")]
    TimedOut {
        /// The URL.
        url: String,
        /// The deadline.
        ms: u64,
    },
}

/// Send `req` and read its answer, all within `req.timeout`.
pub fn request(req: &HttpRequest) -> Result<HttpAnswer, HttpError> {
    let url = check_url(&req.url, req.allow_remote)?;
    check_method(&req.method).map_err(|reason| HttpError::Refused { url: url.to_string(), reason })?;
    if req.timeout.is_zero() || req.timeout > MAX_TIMEOUT {
        return Err(HttpError::Refused {
            url: url.to_string(),
            reason: format!("the timeout must be from 1 ms to {} s", MAX_TIMEOUT.as_secs()),
        });
    }
    let deadline = Instant::now() + req.timeout;
    let ms = req.timeout.as_millis() as u64;
    let shown = url.to_string();
    let (tx, rx) = mpsc::channel();
    let (method, allow_remote, timeout) = (req.method.clone(), req.allow_remote, req.timeout);
    std::thread::Builder::new()
        .name("http request".into())
        .spawn(move || {
            let _ = tx.send(exchange(&method, url, allow_remote, timeout, deadline));
        })
        .map_err(|e| HttpError::Network {
            url: shown.clone(),
            reason: format!("cannot start a thread: {e}"),
        })?;
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(r) => r,
        Err(_) => Err(HttpError::TimedOut { url: shown, ms }),
    }
}

/// The URL if a request may be sent to it: `http` or `https`, a host, no
/// user name or password (they would be shown in logs and messages), at
/// most [`MAX_URL_BYTES`], and a loopback host ([`is_local`]) unless
/// `allow_remote`. The manifest's parser calls it too, so a bad URL is
/// refused when the manifest is loaded.
pub fn check_url(text: &str, allow_remote: bool) -> Result<url::Url, HttpError> {
    let shown = crate::services::text::escape_all(text);
    let refused = |reason: &str| HttpError::Refused { url: shown.clone(), reason: reason.to_owned() };
    if text.len() > MAX_URL_BYTES {
        return Err(refused(&format!("a URL may be at most {MAX_URL_BYTES} bytes")));
    }
    let url = url::Url::parse(text).map_err(|e| refused(&format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refused("only http:// and https:// URLs are accepted"));
    }
    let Some(host) = url.host() else { return Err(refused("the URL names no host")) };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refused("a user name or password in the URL is refused (it would be shown in logs)"));
    }
    if !allow_remote && !is_local(&host) {
        return Err(refused(
            "not a loopback host (localhost, 127.0.0.0/8, ::1); set allow_remote = true to reach another host",
        ));
    }
    Ok(url)
}

/// Whether `host` is a loopback host: `localhost`, `127.0.0.0/8`, `::1`
/// (also written as the IPv4-mapped `::ffff:127.x.y.z`).
///
/// Why these and nothing more: the kernel delivers them on the node's own
/// `lo` interface, so a request never leaves the node, needs no route and
/// no DNS, and reaches exactly the daemons a node-local reload or health
/// check is for (the agent runs in the node's network namespace: a systemd
/// unit, or a DaemonSet pod with `hostNetwork: true`). The node's own
/// addresses on other interfaces, `0.0.0.0` and link-local addresses are
/// left out: they are the same node only by configuration that a manifest
/// cannot see, and one mistyped digit reaches another machine. Any of them
/// is one `allow_remote = true` away.
pub fn is_local(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// That `method` is one of [`METHODS`].
pub fn check_method(method: &str) -> Result<(), String> {
    if METHODS.contains(&method) {
        Ok(())
    } else {
        Err(format!("the method must be one of {}", METHODS.join(", ")))
    }
}

/// The request itself, on the request's thread.
fn exchange(
    method: &str,
    url: url::Url,
    allow_remote: bool,
    timeout: Duration,
    deadline: Instant,
) -> Result<HttpAnswer, HttpError> {
    let shown = url.to_string();
    let local = url.host().is_some_and(|h| is_local(&h));
    let mut builder = ureq::AgentBuilder::new()
        // ureq's own bounds: the connection (its default is 30 s, which
        // would override the whole request's), and the whole request,
        // every read of the answer included.
        .timeout_connect(timeout)
        .timeout(timeout)
        .redirects(0)
        .max_idle_connections(0)
        .user_agent(concat!("durasync/", env!("CARGO_PKG_VERSION")))
        .resolver(move |netloc: &str| resolve(netloc, allow_remote));
    if url.scheme() == "https" && local {
        builder = builder.tls_config(loopback_tls());
    }
    let agent = builder.build();
    let req = agent.request_url(method, &url);
    // A request that may carry a body gets an empty one with its length
    // (`Content-Length: 0`): some servers refuse a POST without one (411).
    let sent = match method {
        "GET" | "HEAD" | "DELETE" => req.call(),
        _ => req.send_bytes(&[]),
    };
    let resp = match sent {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => return Err(transport_error(&shown, &t, timeout, deadline)),
    };
    let status = resp.status();
    let mut tail = Tail::new(MAX_BODY_TAIL);
    let mut reader = resp.into_reader().take(MAX_BODY_READ);
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // The status arrived: a body cut short (or too slow for the
            // deadline) still leaves an answer, with what was read.
            Err(e) => {
                tracing::debug!(url = %shown, "reading the body: {e}");
                break;
            }
        }
    }
    Ok(HttpAnswer { status, body_tail: text(&tail.into_bytes()) })
}

/// The addresses of `netloc` (`host:port`, `[v6]:port`): `localhost` is
/// `127.0.0.1` and `::1` (RFC 6761), an address is itself; other names
/// are looked up only when remote hosts are allowed, and without that an
/// address that is not loopback is refused (the URL was checked already:
/// this is the last word on where the connection goes).
fn resolve(netloc: &str, allow_remote: bool) -> std::io::Result<Vec<SocketAddr>> {
    let refused = |why: &str| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why.to_owned());
    let (host, port) = netloc.rsplit_once(':').ok_or_else(|| refused("no port"))?;
    let port: u16 = port.parse().map_err(|_| refused("a bad port"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ]);
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    match bare.parse::<IpAddr>() {
        Ok(ip) if allow_remote || ip.is_loopback() || ip.to_canonical().is_loopback() => {
            Ok(vec![SocketAddr::new(ip, port)])
        }
        Ok(_) => Err(refused("not a loopback address")),
        Err(_) if allow_remote => std::net::ToSocketAddrs::to_socket_addrs(netloc).map(Iterator::collect),
        Err(_) => Err(refused("names other than localhost are not looked up")),
    }
}

/// The error for a request that got no status line.
fn transport_error(url: &str, t: &ureq::Transport, timeout: Duration, deadline: Instant) -> HttpError {
    if Instant::now() >= deadline {
        return HttpError::TimedOut { url: url.to_owned(), ms: timeout.as_millis() as u64 };
    }
    if let Some(e) = rustls_error(t) {
        return HttpError::Tls { url: url.to_owned(), reason: e.to_string() };
    }
    // ureq's message, then its cause (`Connection refused`).
    let mut reason = t.to_string();
    if let Some(src) = std::error::Error::source(t) {
        let src = src.to_string();
        if !reason.contains(&src) {
            reason = format!("{reason}: {src}");
        }
    }
    HttpError::Network { url: url.to_owned(), reason: crate::services::text::escape_all(&reason) }
}

/// The rustls error in `e`'s chain (an `io::Error` is looked into with
/// `get_ref`: its `source` skips the error it wraps). Also the registry
/// client's (`runtime/distribution/tls.rs`).
pub(crate) fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(t) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// The TLS configuration for a loopback host: ureq's own provider and
/// versions (ring; TLS 1.2 and 1.3), the certificate not checked.
fn loopback_tls() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .expect("ring supports TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(LoopbackPeer(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

/// The certificate check of a loopback connection: none. A certificate
/// proves which host answers across a network; a loopback connection never
/// leaves the node's kernel, so whoever answers is a process on the node
/// (one that could as well read the files the agent writes), and no public
/// CA issues a certificate for `127.0.0.1` or `localhost` anyway: daemons
/// serve self-signed or cluster-CA certificates there. The handshake's
/// signatures are still verified (the session is encrypted to the key the
/// peer holds).
#[derive(Debug)]
struct LoopbackPeer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for LoopbackPeer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A server on a loopback port answering each connection with
    /// `answer` (raw bytes) after reading the request head; the heads
    /// it read come back through the receiver.
    fn server(answer: Vec<u8>) -> (String, mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let head = read_head(&mut s);
                let _ = s.write_all(&answer);
                drop(s);
                if tx.send(head).is_err() {
                    return;
                }
            }
        });
        (format!("http://127.0.0.1:{port}"), rx)
    }

    fn read_head(s: &mut std::net::TcpStream) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }

    fn req(method: &str, url: &str, ms: u64) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            url: url.into(),
            timeout: Duration::from_millis(ms),
            allow_remote: false,
        }
    }

    #[test]
    fn a_post_reaches_a_loopback_server_and_its_status_and_body_come_back() {
        let (base, heads) = server(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nreloaded".to_vec());
        let answer = request(&req("POST", &format!("{base}/-/reload"), 10_000)).unwrap();
        assert_eq!(answer, HttpAnswer { status: 200, body_tail: "reloaded".into() });
        let head = heads.recv().unwrap();
        assert!(head.starts_with("POST /-/reload HTTP/1.1\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("content-length: 0\r\n"), "{head}");
    }

    #[test]
    fn an_error_status_is_an_answer_with_the_end_of_its_body_escaped() {
        let body = format!("{}\nconfig invalid\x1b[2K\n", "x".repeat(10_000));
        let answer =
            format!("HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let (base, _heads) = server(answer.into_bytes());
        let got = request(&req("GET", &format!("{base}/healthz"), 10_000)).unwrap();
        assert_eq!(got.status, 500);
        assert!(got.body_tail.ends_with("| config invalid\\u{1b}[2K"), "{}", got.body_tail);
        assert!(
            got.body_tail.starts_with('…') && got.body_tail.len() <= MAX_BODY_TAIL + 16,
            "{}",
            got.body_tail
        );
    }

    #[test]
    fn a_redirect_is_not_followed() {
        let (target, target_heads) = server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec());
        let answer =
            format!("HTTP/1.1 302 Found\r\nLocation: {target}/elsewhere\r\nContent-Length: 0\r\n\r\n");
        let (base, _heads) = server(answer.into_bytes());
        assert_eq!(request(&req("GET", &base, 10_000)).unwrap().status, 302);
        assert!(target_heads.recv_timeout(Duration::from_millis(300)).is_err());
    }

    #[test]
    fn a_server_that_never_answers_is_left_at_the_deadline() {
        // Accepts, reads the request, then sends a status line and stalls
        // in the headers: only the whole request's deadline ends it.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            read_head(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n");
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(b"X-Slow: 1\r\n").is_err() {
                    return;
                }
            }
        });
        let start = Instant::now();
        let err = request(&req("GET", &format!("http://localhost:{port}/"), 500)).unwrap_err();
        assert!(matches!(err, HttpError::TimedOut { ms: 500, .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    }

    #[test]
    fn a_body_longer_than_the_read_bound_is_not_waited_for() {
        // A body announced as 100 MiB, sent only in part: the first
        // MAX_BODY_READ bytes make the answer.
        let mut answer = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 104857600\r\n\r\n".to_vec();
        answer.extend(std::iter::repeat_n(b'y', MAX_BODY_READ as usize + 10));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            read_head(&mut s);
            let _ = s.write_all(&answer);
            std::thread::sleep(Duration::from_secs(20));
        });
        let got = request(&req("GET", &format!("http://127.0.0.1:{port}/"), 10_000)).unwrap();
        assert_eq!(got.status, 503);
        assert!(got.body_tail.ends_with("yyy") && got.body_tail.len() <= MAX_BODY_TAIL + 16);
    }

    #[test]
    fn a_closed_port_is_a_network_error_naming_the_url() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/-/reload");
        let err = request(&req("POST", &url, 5000)).unwrap_err();
        let HttpError::Network { url: u, reason } = &err else { panic!("{err:?}") };
        assert_eq!(u, &url);
        assert!(reason.to_lowercase().contains("refused"), "{reason}");
    }

    #[test]
    fn only_loopback_hosts_are_asked_unless_remote_hosts_are_allowed() {
        for ok in [
            "http://localhost/x",
            "http://LOCALHOST:9090/-/reload",
            "http://127.0.0.1:1/",
            "http://127.9.8.7/",
            "https://[::1]:8443/healthz",
            "http://[::ffff:127.0.0.1]/",
        ] {
            check_url(ok, false).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, why) in [
            ("http://10.0.0.1/", "not a loopback host"),
            ("http://0.0.0.0:9090/", "not a loopback host"),
            ("http://[fe80::1]/", "not a loopback host"),
            ("http://localhost.example.com/", "not a loopback host"),
            ("http://node-1/", "not a loopback host"),
            ("ftp://localhost/", "only http:// and https://"),
            ("unix:/run/app.sock", "only http:// and https://"),
            ("localhost:9090", "only http:// and https://"),
            ("http://user:pw@localhost/", "user name or password"),
            ("not a url", "not a URL"),
        ] {
            let err = check_url(bad, false).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        check_url("http://10.0.0.1/", true).unwrap();
        // Refused before any connection: a request to a remote address
        // with no listener fails at once with the URL's reason.
        let err = request(&req("GET", "http://192.0.2.1/", 10_000)).unwrap_err();
        assert!(matches!(&err, HttpError::Refused { reason, .. } if reason.contains("loopback")), "{err}");
        // The resolver is the last word: a remote address never connects.
        assert_eq!(resolve("192.0.2.1:80", false).unwrap_err().kind(), std::io::ErrorKind::PermissionDenied);
        assert_eq!(
            resolve("example.com:80", false).unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(resolve("[::1]:80", false).unwrap(), [SocketAddr::from((Ipv6Addr::LOCALHOST, 80))]);
        assert_eq!(resolve("localhost:80", false).unwrap().len(), 2);
    }

    #[test]
    fn a_bad_method_or_timeout_is_refused_before_anything_is_sent() {
        let (base, heads) = server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec());
        let err = request(&req("CONNECT", &base, 1000)).unwrap_err().to_string();
        assert!(err.contains("the method must be one of GET"), "{err}");
        let err = request(&req("GET", &base, 0)).unwrap_err().to_string();
        assert!(err.contains("the timeout must be"), "{err}");
        assert!(heads.recv_timeout(Duration::from_millis(200)).is_err());
    }

    #[test]
    fn https_to_a_loopback_host_is_encrypted_without_checking_the_certificate() {
        // A real TLS server (openssl's), with a self-signed certificate no
        // root trusts.
        let tmp = tempfile::tempdir().unwrap();
        let (key, cert) = (tmp.path().join("key.pem"), tmp.path().join("cert.pem"));
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
            .args(["-subj", "/CN=localhost", "-days", "1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl is installed");
        assert!(made.success());
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut server = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-key")
            .arg(&key)
            .arg("-cert")
            .arg(&cert)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("https://127.0.0.1:{port}/");
        let start = Instant::now();
        let got = loop {
            match request(&req("GET", &url, 5000)) {
                Ok(a) => break a,
                Err(HttpError::Network { .. }) if start.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{e}"),
            }
        };
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(got.status, 200, "{}", got.body_tail);
        // `-www` answers with the session: it was TLS.
        assert!(got.body_tail.contains("TLSv1"), "{}", got.body_tail);
    }
}
