//! The registry's HTTP API (distribution spec v2) over a small blocking
//! client (`ureq`): one request at a time, timeouts on connect, read and
//! write, bounded retries with back-off on what may pass (a connection
//! failure, a timeout, a 5xx or a 429), the token dance of registries that
//! answer 401 with a `Bearer` challenge, and basic auth from the docker
//! config users already have.
//!
//! Nothing a registry sends may panic the host or send credentials
//! elsewhere: redirects are followed here, not by ureq (whose own handling
//! panics on a `Location` without a host), each checked by
//! [`redirect_target`] (http(s) with a host, no HTTPS→HTTP, at most
//! [`MAX_REDIRECTS`]); credentials and tokens are keyed by the `host:port`
//! of the URL asked and answer only that host's challenge (its realm
//! checked by [`realm_url`]). Each attempt is bounded as a whole (a
//! manifest, token or HEAD by the timeout; a blob by the pull's
//! [`Deadline`]) and the whole pull by its deadline.
//!
//! Plain HTTP is used only for loopback registries (`127.0.0.1`,
//! `localhost`, `[::1]`) and for hosts the operator lists as insecure;
//! everything else is HTTPS with the web PKI roots and the operator's extra
//! CA files (`tls.rs`), and a plain-HTTP answer to it is refused.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;

use super::{Error, Settings, tls};

/// The most bytes read from an error body or a token answer.
const MAX_SMALL_BODY: u64 = 64 * 1024;
/// The longest back-off between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What a request sends.
pub(crate) enum Body<'a> {
    /// Nothing.
    Empty,
    /// Bytes with a content type.
    Bytes(&'a [u8], &'a str),
    /// A file, streamed, with its length.
    File(&'a std::path::Path, u64),
}

/// The client of one process: connection pool, tokens.
pub(crate) struct Http {
    /// Built on the first request: a digest served from the cache never
    /// pays for the TLS configuration (the web PKI roots are parsed).
    agent: std::sync::OnceLock<ureq::Agent>,
    /// The same, never pooling a connection (see [`Http::stream_agent`]).
    stream_agent: std::sync::OnceLock<ureq::Agent>,
    timeout: Duration,
    attempts: u32,
    backoff: Duration,
    insecure: Vec<String>,
    /// The extra CA certificates (read when the client is made, so a bad
    /// file is reported at once) and the files they came from.
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ca_files: Vec<std::path::PathBuf>,
    mirrors: Vec<(String, String)>,
    /// Bearer tokens by `host:port scope` (the host that asked for one).
    tokens: Mutex<HashMap<String, String>>,
}

impl Http {
    pub(crate) fn new(settings: &Settings) -> Result<Http, Error> {
        let extra_roots = tls::extra_roots(&settings.ca_files)?;
        let http = Http {
            agent: std::sync::OnceLock::new(),
            stream_agent: std::sync::OnceLock::new(),
            timeout: settings.timeout,
            attempts: settings.attempts.max(1),
            backoff: settings.backoff,
            insecure: settings.insecure.clone(),
            extra_roots,
            ca_files: settings.ca_files.clone(),
            mirrors: settings.mirrors.clone(),
            tokens: Mutex::new(HashMap::new()),
        };
        if !http.extra_roots.is_empty() {
            // Checked now, not on the first request: a certificate that is
            // no trust anchor is a configuration error to report at start.
            tls::client_config(&http.extra_roots, &http.ca_files)?;
        }
        Ok(http)
    }

    /// The client of requests bounded as a whole (every request but a
    /// blob's body while more than a read's timeout is left): ureq applies
    /// the bound to every read, on a fresh connection or a pooled one.
    fn agent(&self) -> &ureq::Agent {
        self.agent.get_or_init(|| self.build(true))
    }

    /// The client of a blob's request while more than a read's timeout is
    /// left of the pull: connections are never pooled, as ureq 2 sets the
    /// timeout of each read only when it connects (a pooled connection has
    /// none: a stall there would wait for the deadline).
    fn stream_agent(&self) -> &ureq::Agent {
        self.stream_agent.get_or_init(|| self.build(false))
    }

    fn build(&self, pooled: bool) -> ureq::Agent {
        let builder = match tls::client_config(&self.extra_roots, &self.ca_files) {
            Ok(config) => ureq::AgentBuilder::new().tls_config(config),
            // Unreachable: the same roots were accepted in `new` (and
            // the web PKI roots alone always are).
            Err(e) => {
                tracing::error!("registry TLS configuration: {e}; using the web PKI roots only");
                ureq::AgentBuilder::new()
            }
        };
        let builder = if pooled { builder } else { builder.max_idle_connections(0) };
        builder
            .timeout_connect(self.timeout)
            .timeout_read(self.timeout)
            .timeout_write(self.timeout)
            // Redirects are followed by `Http::once`, each checked.
            .redirects(0)
            .user_agent(concat!("durasync/", env!("CARGO_PKG_VERSION")))
            .build()
    }

    /// The host that serves `registry`: its mirror when one is set.
    pub(crate) fn host<'a>(&'a self, registry: &'a str) -> &'a str {
        self.mirrors.iter().find(|(from, _)| from == registry).map_or(registry, |(_, to)| to.as_str())
    }

    /// `http://` or `https://` and the host serving the registry (its
    /// mirror, if any): plain HTTP only for loopback and listed hosts.
    pub(crate) fn base(&self, registry: &str) -> String {
        let registry = self.host(registry);
        let scheme = if plain_http_allowed(registry, &self.insecure) { "http" } else { "https" };
        format!("{scheme}://{registry}")
    }

    /// Send a request, with retries, redirects and auth, and hand the
    /// response to `handle` (whose transfer errors are retried too). A
    /// status outside `ok` is an error, except 404 which `handle` never
    /// sees: `Ok(None)`. Each attempt, redirects and the body read by
    /// `handle` included, ends by the request's bound (`size`) and by
    /// `deadline` (the pull's).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send<T>(
        &self,
        method: &str,
        url: &str,
        scope: &str,
        headers: &[(&str, &str)],
        body: &Body<'_>,
        ok: &[u16],
        size: Size,
        deadline: Deadline,
        mut handle: impl FnMut(ureq::Response) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        let mut last = None;
        for attempt in 0..self.attempts {
            if attempt > 0 {
                let pause = (self.backoff * 2u32.saturating_pow(attempt - 1)).min(MAX_BACKOFF);
                let last_text = last.as_ref().map_or(String::new(), |e: &Error| e.to_string());
                if deadline.remaining() <= pause {
                    return Err(deadline.error(url, Some(&last_text)));
                }
                tracing::info!(
                    "registry: attempt {} of {} for {method} {url} in {pause:?}: {last_text}",
                    attempt + 1,
                    self.attempts,
                );
                std::thread::sleep(pause);
            }
            let request = Request::new(self, size, deadline);
            let result = self.once(method, url, scope, headers, body, &request).and_then(|resp| match resp {
                None => Ok(None),
                Some((resp, _)) if ok.contains(&resp.status()) => handle(resp).map(Some),
                Some((resp, at)) => Err(status_error(&at, resp)),
            });
            // A transfer cut by the bound of the request (or of the pull)
            // is said to be that, not a network failure.
            let result = result.map_err(|e| request.explain(url, e));
            match result {
                Err(e) if e.is_retryable() => last = Some(e),
                other => return other,
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// One attempt: redirects followed here (never by ureq, which panics
    /// on a `Location` without a host), each checked by [`redirect_target`]
    /// and bounded in number; each hop answers its own 401 with its own
    /// host's credentials. The response and the URL that gave it.
    #[allow(clippy::too_many_arguments)]
    fn once(
        &self,
        method: &str,
        url: &str,
        scope: &str,
        headers: &[(&str, &str)],
        body: &Body<'_>,
        request: &Request,
    ) -> Result<Option<(ureq::Response, String)>, Error> {
        let mut at = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let Some(resp) = self.authorized(method, &at, scope, headers, body, request)? else {
                return Ok(None);
            };
            if !matches!(resp.status(), 301 | 302 | 303 | 307 | 308) {
                return Ok(Some((resp, at)));
            }
            let redirect = |reason: String| Error::Redirect { url: at.clone(), reason };
            let Some(location) = resp.header("location").map(str::to_owned) else {
                return Err(redirect(format!("a {} without a Location", resp.status())));
            };
            if !matches!(body, Body::Empty) {
                // A body is not sent twice (a file stream is consumed).
                return Err(redirect(format!("redirect of an upload to {location:?} is not followed")));
            }
            let next = redirect_target(&at, &location, &self.insecure).map_err(redirect)?;
            tracing::debug!("registry: {} redirect {at} -> {next}", resp.status());
            at = next;
        }
        Err(Error::Redirect {
            url: url.to_owned(),
            reason: format!("too many redirects (over {MAX_REDIRECTS})"),
        })
    }

    /// One request to `url`; a 401 with a challenge is answered once with
    /// the credentials of `url`'s own host (`host:port`): credentials and
    /// tokens never go to another host than the one they are for.
    fn authorized(
        &self,
        method: &str,
        url: &str,
        scope: &str,
        headers: &[(&str, &str)],
        body: &Body<'_>,
        request: &Request,
    ) -> Result<Option<ureq::Response>, Error> {
        let authority = authority(url).ok_or_else(|| Error::Redirect {
            url: url.to_owned(),
            reason: "not an http(s) URL with a host".into(),
        })?;
        let key = format!("{authority} {scope}");
        let mut auth = self.tokens.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        for round in 0..2 {
            let mut req = match request.whole()? {
                Some(whole) => self.agent().request(method, url).timeout(whole),
                None => self.stream_agent().request(method, url),
            };
            for (k, v) in headers {
                req = req.set(k, v);
            }
            if let Some(a) = &auth {
                req = req.set("Authorization", a);
            }
            let sent = match body {
                Body::Empty => req.call(),
                Body::Bytes(b, ct) => req.set("Content-Type", ct).send_bytes(b),
                Body::File(path, len) => {
                    let f = std::fs::File::open(path).map_err(|e| Error::Transfer {
                        what: path.display().to_string(),
                        reason: e.to_string(),
                    })?;
                    req.set("Content-Type", "application/octet-stream")
                        .set("Content-Length", &len.to_string())
                        .send(f)
                }
            };
            match sent {
                Ok(resp) => return Ok(Some(resp)),
                Err(ureq::Error::Status(404, _)) => return Ok(None),
                Err(ureq::Error::Status(401, resp)) if round == 0 => {
                    let challenge = resp.header("www-authenticate").unwrap_or_default().to_owned();
                    match self.answer(url, &authority, scope, &challenge, request)? {
                        Some(a) => {
                            self.tokens
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(key.clone(), a.clone());
                            auth = Some(a);
                        }
                        None => return Err(status_error(url, resp)),
                    }
                }
                // Judged by the caller against what it accepts.
                Err(ureq::Error::Status(_, resp)) => return Ok(Some(resp)),
                Err(ureq::Error::Transport(t)) => return Err(transport_error(url, &t)),
            }
        }
        Err(Error::Status {
            url: url.to_owned(),
            status: 401,
            detail: "refused the credentials it asked for".into(),
        })
    }

    /// The `Authorization` value answering a 401 challenge from `url`
    /// (whose host is `authority`): basic auth from the docker config for
    /// that host, or a bearer token from the realm that host names (with
    /// those credentials when there are any, else anonymous: docker's and
    /// containerd's rule; a realm over plain HTTP for an HTTPS request is
    /// refused, see [`realm_url`]). `None`: nothing to answer with.
    fn answer(
        &self,
        url: &str,
        authority: &str,
        scope: &str,
        challenge: &str,
        request: &Request,
    ) -> Result<Option<String>, Error> {
        let basic = docker_credentials(authority).map(|c| format!("Basic {c}"));
        let (kind, params) = challenge.trim().split_once(' ').unwrap_or((challenge.trim(), ""));
        if kind.eq_ignore_ascii_case("basic") {
            return Ok(basic);
        }
        if !kind.eq_ignore_ascii_case("bearer") {
            return Ok(None);
        }
        let params = parse_challenge(params);
        let Some(realm) = params.get("realm") else { return Ok(None) };
        let realm = realm_url(url, realm, &self.insecure).map_err(|reason| Error::Status {
            url: url.to_owned(),
            status: 401,
            detail: reason,
        })?;
        let mut req = self.agent().get(&realm).query("scope", scope).timeout(request.budget()?);
        if let Some(service) = params.get("service") {
            req = req.query("service", service);
        }
        if let Some(b) = &basic {
            req = req.set("Authorization", b);
        }
        let resp = match req.call() {
            Ok(r) if r.status() == 200 => r,
            Ok(r) => return Err(status_error(&realm, r)),
            Err(ureq::Error::Status(_, r)) => return Err(status_error(&realm, r)),
            Err(ureq::Error::Transport(t)) => return Err(transport_error(&realm, &t)),
        };
        let mut text = String::new();
        resp.into_reader()
            .take(MAX_SMALL_BODY)
            .read_to_string(&mut text)
            .map_err(|e| Error::Transfer { what: format!("token from {realm}"), reason: e.to_string() })?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Status {
            url: realm.clone(),
            status: 200,
            detail: format!("the token answer is not JSON: {e}"),
        })?;
        let token = v.get("token").or_else(|| v.get("access_token")).and_then(|t| t.as_str());
        Ok(token.map(|t| format!("Bearer {t}")))
    }
}

/// The most redirects followed for one request.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// How a request is bounded as a whole, besides the pull's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Size {
    /// A manifest, a token, a HEAD: done within the request timeout.
    Small,
    /// A blob: as long as it keeps coming (each read within the timeout),
    /// up to the pull's deadline.
    Stream,
}

/// When a pull (or a push) must be over: every attempt, redirect, token
/// and body read of it ends by then.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    total: Duration,
}

impl Deadline {
    /// `total` from now.
    pub fn after(total: Duration) -> Deadline {
        Deadline { at: Instant::now() + total, total }
    }

    fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// `body`, failing its first read past the deadline (a blob that drips
    /// is cut there, one read's timeout at most after it).
    pub(crate) fn bound<R: Read>(&self, body: R) -> impl Read {
        Bounded { body, at: self.at }
    }

    fn error(&self, url: &str, last: Option<&str>) -> Error {
        Error::Deadline { url: url.to_owned(), limit: seconds(self.total), last: last_of(last) }
    }
}

struct Bounded<R> {
    body: R,
    at: Instant,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() >= self.at {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "past the pull's deadline"));
        }
        self.body.read(buf)
    }
}

/// One attempt's bound: the request's own (for [`Size::Small`]) or the pull's.
struct Request {
    until: Instant,
    /// The request's own bound when it is sooner than the pull's.
    own: Option<Duration>,
    size: Size,
    /// Each read's timeout.
    stall: Duration,
    deadline: Deadline,
}

impl Request {
    fn new(http: &Http, size: Size, deadline: Deadline) -> Request {
        let own = (size == Size::Small).then_some(http.timeout).filter(|t| *t < deadline.remaining());
        let until = own.map_or(deadline.at, |t| Instant::now() + t);
        Request { until, own, size, stall: http.timeout, deadline }
    }

    /// The time left for the next request of this attempt (a redirect, a
    /// token): none left is an error.
    fn budget(&self) -> Result<Duration, Error> {
        match self.until.saturating_duration_since(Instant::now()) {
            d if d.is_zero() => Err(self.cut("", None)),
            d => Ok(d),
        }
    }

    /// The bound ureq is given for the next request of this attempt: the
    /// time left. Not for a blob while more than a read's timeout is left:
    /// ureq's bound replaces its timeout of each read (a stall would then
    /// wait for the deadline); the blob's reader checks the deadline
    /// between reads instead ([`Deadline::bound`]).
    fn whole(&self) -> Result<Option<Duration>, Error> {
        let left = self.budget()?;
        Ok((self.size == Size::Small || left <= self.stall).then_some(left))
    }

    fn cut(&self, url: &str, last: Option<&str>) -> Error {
        match self.own {
            Some(t) => Error::TimedOut { url: url.to_owned(), limit: seconds(t), last: last_of(last) },
            None => self.deadline.error(url, last),
        }
    }

    /// `e`, or the bound's error when the bound has passed (ureq reports
    /// it as a timed-out read).
    fn explain(&self, url: &str, e: Error) -> Error {
        match e {
            Error::Network { .. } | Error::Transfer { .. } if Instant::now() >= self.until => {
                self.cut(url, Some(&e.to_string()))
            }
            Error::Deadline { url: u, limit, last } if u.is_empty() => {
                Error::Deadline { url: url.to_owned(), limit, last }
            }
            Error::TimedOut { url: u, limit, last } if u.is_empty() => {
                Error::TimedOut { url: url.to_owned(), limit, last }
            }
            e => e,
        }
    }
}

/// `; the last failure: …`, or nothing.
fn last_of(last: Option<&str>) -> String {
    last.filter(|l| !l.is_empty()).map_or(String::new(), |l| format!("; the last failure: {l}"))
}

/// `3 s`, `1.5 s`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{} s", d.as_secs()) } else { format!("{:.1} s", d.as_secs_f64()) }
}

/// `host` or `host:port` (the port when not the scheme's default) of an
/// http(s) URL with a host; `None` for anything else.
pub fn authority(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    if !matches!(u.scheme(), "http" | "https") {
        return None;
    }
    let host = u.host_str().filter(|h| !h.is_empty())?;
    Some(match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    })
}

/// Whether `authority` (`host` or `host:port`) may be reached over plain
/// HTTP: a loopback host, or one listed as insecure (by host or host:port).
pub fn plain_http_allowed(authority: &str, insecure: &[String]) -> bool {
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() && !h.ends_with(':') => h,
        _ => authority,
    };
    // An address, parsed: a DNS name like `127.attacker.example` is no
    // loopback host, whatever it starts with.
    let ip = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let loopback = host.eq_ignore_ascii_case("localhost")
        || ip.parse::<std::net::IpAddr>().is_ok_and(|ip| match ip {
            std::net::IpAddr::V4(v4) => v4.is_loopback(),
            std::net::IpAddr::V6(v6) => {
                v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        });
    loopback || insecure.iter().any(|i| i == authority || i == host)
}

/// When `text` starts with a scheme (an absolute URL): that it is http(s)
/// and names its host itself. `Ok(false)`: a relative reference. The URL
/// standard reads `http:///x` as host `x` and `http:x` as a path, which no
/// registry means: refused here before the parser is asked.
fn check_absolute(text: &str) -> Result<bool, String> {
    let Some((scheme, rest)) = text.split_once(':') else { return Ok(false) };
    let is_scheme = scheme.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !is_scheme {
        return Ok(false);
    }
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Err("only http and https are followed".into());
    }
    let host = rest.strip_prefix("//").map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    if host.is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    Ok(true)
}

/// Where a redirect from `from` to `location` (absolute or relative) goes:
/// only an http(s) URL with a host, never from HTTPS down to plain HTTP
/// unless the target may be reached over plain HTTP (loopback, listed
/// insecure). The reason when refused.
pub fn redirect_target(from: &str, location: &str, insecure: &[String]) -> Result<String, String> {
    let base = url::Url::parse(from).map_err(|e| format!("{from} is not a URL: {e}"))?;
    let location = location.trim();
    check_absolute(location).map_err(|why| format!("redirect to {location:?}: {why}"))?;
    let next = base.join(location).map_err(|e| format!("redirect to {location:?}: {e}"))?;
    let text = next.as_str().to_owned();
    if !matches!(next.scheme(), "http" | "https") {
        return Err(format!("redirect to {location:?}: only http and https are followed"));
    }
    let Some(authority) = authority(&text) else {
        return Err(format!("redirect to {location:?}: the URL has no host"));
    };
    if base.scheme() == "https" && next.scheme() == "http" && !plain_http_allowed(&authority, insecure) {
        return Err(format!(
            "redirect to {location:?}: from HTTPS down to plain HTTP is refused (unless the host is listed \
             with --insecure-registry)"
        ));
    }
    Ok(text)
}

/// The token realm a `Bearer` challenge from `from` names, checked like a
/// redirect: an http(s) URL with a host, and over plain HTTP only when
/// `from` was (or the realm's host may be reached so: loopback, listed
/// insecure). The reason when refused.
pub fn realm_url(from: &str, realm: &str, insecure: &[String]) -> Result<String, String> {
    if !check_absolute(realm.trim()).map_err(|why| format!("the token realm {realm:?}: {why}"))? {
        return Err(format!("the token realm {realm:?} is not an absolute http(s) URL"));
    }
    let parsed =
        url::Url::parse(realm.trim()).map_err(|e| format!("the token realm {realm:?} is not a URL: {e}"))?;
    let text = parsed.as_str().to_owned();
    let Some(authority) = authority(&text) else {
        return Err(format!("the token realm {realm:?} is not an http(s) URL with a host"));
    };
    // The asking URL's own scheme, as the URL parser reads it (a text
    // test of its prefix misses `https:` spellings the parser accepts;
    // found by the fuzz target `registry_urls`). Not a URL: no realm.
    let from_https =
        url::Url::parse(from).map_err(|e| format!("{from} is not a URL: {e}"))?.scheme() == "https";
    if from_https && parsed.scheme() == "http" && !plain_http_allowed(&authority, insecure) {
        return Err(format!(
            "the token realm {realm:?} is plain HTTP for an HTTPS registry; refused (the credentials would \
             travel in clear text) unless its host is listed with --insecure-registry"
        ));
    }
    Ok(text)
}

/// `key="value", …` of a `WWW-Authenticate` header (after the scheme).
pub fn parse_challenge(params: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = params.trim();
    while let Some((k, v)) = rest.split_once('=') {
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let v = v.trim_start();
        let (value, tail) = if let Some(q) = v.strip_prefix('"') {
            q.split_once('"').unwrap_or((q, ""))
        } else {
            v.split_once(',').unwrap_or((v, ""))
        };
        out.insert(k, value.to_owned());
        rest = tail.trim_start_matches(',').trim();
    }
    out
}

/// The error for a request that got no answer: a failed TLS handshake
/// (not worth another attempt: a certificate does not fix itself), or a
/// network failure (retried).
fn transport_error(url: &str, t: &ureq::Transport) -> Error {
    match tls::explain(t) {
        Some(reason) => Error::Tls { url: url.to_owned(), reason },
        None => Error::Network { url: url.to_owned(), reason: t.to_string() },
    }
}

/// The error for an unexpected status, with the start of its body.
fn status_error(url: &str, resp: ureq::Response) -> Error {
    let status = resp.status();
    let mut text = String::new();
    let _ = resp.into_reader().take(512).read_to_string(&mut text);
    let text: String = text.chars().filter(|c| !c.is_control()).collect();
    let hint = match status {
        401 | 403 => "; give credentials with `docker login` (docker config.json or REGISTRY_AUTH_FILE)",
        _ => "",
    };
    let detail = match (text.trim(), hint) {
        ("", hint) => hint.trim_start_matches("; ").to_owned(),
        (text, hint) => format!("{text}{hint}"),
    };
    Error::Status { url: url.to_owned(), status, detail }
}

/// The base64 `user:password` for `registry` (a `host` or `host:port`, the
/// one asked: never another's) from the docker config users
/// already have: `$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json`,
/// `~/.docker/config.json` (the first that exists). Credential helpers are
/// not run.
fn docker_credentials(registry: &str) -> Option<String> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let candidates = [
        env("REGISTRY_AUTH_FILE").map(std::path::PathBuf::from),
        env("DOCKER_CONFIG").map(|d| std::path::Path::new(&d).join("config.json")),
        env("HOME").map(|h| std::path::Path::new(&h).join(".docker/config.json")),
    ];
    let file = candidates.into_iter().flatten().find(|p| p.is_file())?;
    let text = std::fs::read_to_string(&file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let auths = v.get("auths")?.as_object()?;
    let entry = auths.iter().find_map(|(k, e)| {
        let host = k.trim_start_matches("https://").trim_start_matches("http://");
        (host.split('/').next() == Some(registry)).then_some(e)
    })?;
    if let Some(a) = entry.get("auth").and_then(|a| a.as_str()) {
        return Some(a.to_owned());
    }
    let user = entry.get("username")?.as_str()?;
    let pass = entry.get("password")?.as_str()?;
    Some(base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_realm_for_an_https_url_spelled_without_slashes_is_held_to_https() {
        // Found by the fuzz target `registry_urls`: `https:@//host/` is an
        // HTTPS URL to the parser, but not to a test of the text's prefix.
        let insecure: Vec<String> = Vec::new();
        for from in
            ["https:@//registry.example/v2/", "https:registry.example/v2/", "HTTPS://registry.example/"]
        {
            assert!(super::realm_url(from, "http://auth.example/token", &insecure).is_err(), "{from}");
        }
        assert!(super::realm_url("not a url", "https://auth.example/token", &insecure).is_err());
    }

    use super::*;

    #[test]
    fn bearer_challenges_parse() {
        let p = parse_challenge(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a:pull""#,
        );
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:a:pull");
    }

    #[test]
    fn redirects_go_only_to_http_urls_with_a_host_and_never_down_to_plain_http() {
        let from = "https://registry.example/v2/a/blobs/sha256:0";
        let ok = |loc: &str| redirect_target(from, loc, &[]).unwrap();
        assert_eq!(ok("https://cdn.example/x?sig=1"), "https://cdn.example/x?sig=1");
        assert_eq!(ok("/v2/a/blobs/other"), "https://registry.example/v2/a/blobs/other");
        assert_eq!(ok("other"), "https://registry.example/v2/a/blobs/other");
        assert_eq!(ok("http://127.0.0.1:5000/x"), "http://127.0.0.1:5000/x", "loopback may be plain");
        let refused =
            |from: &str, loc: &str, insecure: &[String]| redirect_target(from, loc, insecure).unwrap_err();
        for loc in [
            "file:///etc/passwd",
            "http:///etc/passwd",
            "https:///x",
            "https:x",
            "HTTP:/x",
            "ftp://cdn.example/x",
            "gopher:x",
            "data:,x",
            "http://:80/x",
        ] {
            let why = refused(from, loc, &[]);
            assert!(why.contains(loc), "{loc}: {why}");
        }
        assert!(refused(from, "http://cdn.example/x", &[]).contains("down to plain HTTP"));
        assert_eq!(
            redirect_target(from, "http://cdn.example/x", &["cdn.example".into()]).unwrap(),
            "http://cdn.example/x"
        );
        assert_eq!(
            redirect_target("http://registry.lan/v2/", "http://cdn.lan/x", &[]).unwrap(),
            "http://cdn.lan/x"
        );
        assert!(redirect_target("not a url", "/x", &[]).is_err());
    }

    #[test]
    fn a_plain_http_token_realm_is_refused_for_an_https_registry() {
        let from = "https://registry.example/v2/a/manifests/t";
        assert_eq!(realm_url(from, "https://auth.example/token", &[]).unwrap(), "https://auth.example/token");
        assert!(realm_url(from, "http://auth.example/token", &[]).unwrap_err().contains("plain HTTP"));
        assert!(realm_url(from, "http://auth.example/token", &["auth.example".into()]).is_ok());
        assert!(realm_url(from, "http://127.0.0.1:9/token", &[]).is_ok());
        assert!(realm_url("http://127.0.0.1:5000/v2/", "http://auth.example/token", &[]).is_ok());
        for bad in ["file:///etc/passwd", "/token", "", "http:///x", "https:///x", "https:x"] {
            assert!(realm_url(from, bad, &[]).unwrap_err().contains("token realm"), "{bad}");
        }
    }

    #[test]
    fn credentials_are_keyed_by_host_and_port() {
        assert_eq!(authority("http://127.0.0.1:5000/v2/").as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(authority("https://ghcr.io/v2/").as_deref(), Some("ghcr.io"));
        assert_eq!(authority("https://ghcr.io:443/v2/").as_deref(), Some("ghcr.io"));
        assert_eq!(authority("http://[::1]:80/").as_deref(), Some("[::1]"));
        assert_eq!(authority("file:///etc/passwd"), None);
    }

    #[test]
    fn any_challenge_text_parses_without_a_panic() {
        for text in ["", "=", "\"", "a=\"", ",,,=,", "realm", "realm=\"x\",", "é=\"ü\"", "a=b=c"] {
            let _ = parse_challenge(text);
        }
        assert_eq!(parse_challenge(r#"realm="x""#)["realm"], "x");
    }

    #[test]
    fn only_loopback_and_listed_registries_use_plain_http() {
        let settings = Settings {
            insecure: vec!["registry.lan:5000".into()],
            mirrors: vec![("ghcr.io".into(), "127.0.0.1:5000".into())],
            ..Settings::default()
        };
        let http = Http::new(&settings).unwrap();
        assert_eq!(http.base("ghcr.io"), "http://127.0.0.1:5000", "a loopback mirror");
        assert_eq!(http.base("127.0.0.1:5000"), "http://127.0.0.1:5000");
        assert_eq!(http.base("localhost"), "http://localhost");
        assert_eq!(http.base("registry.lan:5000"), "http://registry.lan:5000");
        assert_eq!(http.base("quay.io"), "https://quay.io");
    }

    #[test]
    fn a_dns_name_that_starts_like_a_loopback_address_is_no_loopback_host() {
        for local in [
            "127.0.0.1",
            "127.0.0.1:5000",
            "127.1.2.3:80",
            "localhost",
            "LOCALHOST:5000",
            "[::1]",
            "[::1]:5000",
        ] {
            assert!(plain_http_allowed(local, &[]), "{local}");
        }
        for remote in [
            "127.attacker.example",
            "127.0.0.1.attacker.example:80",
            "localhost.example",
            "[::2]",
            "10.0.0.1",
        ] {
            assert!(!plain_http_allowed(remote, &[]), "{remote}");
        }
        // An HTTPS registry cannot send its credentials to such a realm.
        let from = "https://registry.example/v2/a/manifests/t";
        assert!(
            realm_url(from, "http://127.attacker.example/token", &[]).unwrap_err().contains("plain HTTP")
        );
    }
}
