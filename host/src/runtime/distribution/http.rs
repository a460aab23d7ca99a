//! The registry's HTTP API (distribution spec v2) over a small blocking
//! client (`ureq`): one request at a time, timeouts on connect, read and
//! write, bounded retries with back-off on what may pass (a connection
//! failure, a timeout, a 5xx or a 429), the token dance of registries that
//! answer 401 with a `Bearer` challenge, and basic auth from the docker
//! config users already have.
//!
//! Plain HTTP is used only for loopback registries (`127.0.0.1`,
//! `localhost`, `[::1]`) and for hosts the operator lists as insecure;
//! everything else is HTTPS with the web PKI roots and the operator's extra
//! CA files (`tls.rs`), and a plain-HTTP answer to it is refused.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

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
    timeout: Duration,
    attempts: u32,
    backoff: Duration,
    insecure: Vec<String>,
    /// The extra CA certificates (read when the client is made, so a bad
    /// file is reported at once) and the files they came from.
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ca_files: Vec<std::path::PathBuf>,
    mirrors: Vec<(String, String)>,
    /// Bearer tokens by `registry scope`.
    tokens: Mutex<HashMap<String, String>>,
}

impl Http {
    pub(crate) fn new(settings: &Settings) -> Result<Http, Error> {
        let extra_roots = tls::extra_roots(&settings.ca_files)?;
        let http = Http {
            agent: std::sync::OnceLock::new(),
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

    fn agent(&self) -> &ureq::Agent {
        self.agent.get_or_init(|| {
            let builder = match tls::client_config(&self.extra_roots, &self.ca_files) {
                Ok(config) => ureq::AgentBuilder::new().tls_config(config),
                // Unreachable: the same roots were accepted in `new` (and
                // the web PKI roots alone always are).
                Err(e) => {
                    tracing::error!("registry TLS configuration: {e}; using the web PKI roots only");
                    ureq::AgentBuilder::new()
                }
            };
            builder
                .timeout_connect(self.timeout)
                .timeout_read(self.timeout)
                .timeout_write(self.timeout)
                .redirects(5)
                .user_agent(concat!("durasync/", env!("CARGO_PKG_VERSION")))
                .build()
        })
    }

    /// The host that serves `registry`: its mirror when one is set.
    pub(crate) fn host<'a>(&'a self, registry: &'a str) -> &'a str {
        self.mirrors.iter().find(|(from, _)| from == registry).map_or(registry, |(_, to)| to.as_str())
    }

    /// `http://` or `https://` and the host serving the registry (its
    /// mirror, if any): plain HTTP only for loopback and listed hosts.
    pub(crate) fn base(&self, registry: &str) -> String {
        let registry = self.host(registry);
        let host = registry
            .rsplit_once(':')
            .map_or(registry, |(h, p)| if p.parse::<u16>().is_ok() { h } else { registry });
        let loopback = host == "localhost" || host == "[::1]" || host.starts_with("127.");
        let scheme = if loopback || self.insecure.iter().any(|i| i == registry || i == host) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{registry}")
    }

    /// Send a request, with retries and auth, and hand the response to
    /// `handle` (whose transfer errors are retried too). A status outside
    /// `ok` is an error, except 404 which `handle` never sees: `Ok(None)`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send<T>(
        &self,
        method: &str,
        url: &str,
        registry: &str,
        scope: &str,
        headers: &[(&str, &str)],
        body: &Body<'_>,
        ok: &[u16],
        mut handle: impl FnMut(ureq::Response) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        let mut last = None;
        for attempt in 0..self.attempts {
            if attempt > 0 {
                let pause = (self.backoff * 2u32.saturating_pow(attempt - 1)).min(MAX_BACKOFF);
                tracing::info!(
                    "registry: attempt {} of {} for {method} {url} in {pause:?}: {}",
                    attempt + 1,
                    self.attempts,
                    last.as_ref().map_or(String::new(), |e: &Error| e.to_string())
                );
                std::thread::sleep(pause);
            }
            let result = self.once(method, url, registry, scope, headers, body).and_then(|resp| match resp {
                None => Ok(None),
                Some(resp) if ok.contains(&resp.status()) => handle(resp).map(Some),
                Some(resp) => Err(status_error(url, resp)),
            });
            match result {
                Err(e) if e.is_retryable() => last = Some(e),
                other => return other,
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// One attempt; a 401 with a challenge is answered once with the
    /// credentials it asks for.
    fn once(
        &self,
        method: &str,
        url: &str,
        registry: &str,
        scope: &str,
        headers: &[(&str, &str)],
        body: &Body<'_>,
    ) -> Result<Option<ureq::Response>, Error> {
        // Credentials and tokens belong to the host actually asked.
        let registry = self.host(registry);
        let key = format!("{registry} {scope}");
        let mut auth = self.tokens.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        for round in 0..2 {
            let mut req = self.agent().request(method, url);
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
                    match self.answer(registry, scope, &challenge)? {
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
                Err(ureq::Error::Status(_, resp)) => return Err(status_error(url, resp)),
                Err(ureq::Error::Transport(t)) => return Err(transport_error(url, &t)),
            }
        }
        Err(Error::Status {
            url: url.to_owned(),
            status: 401,
            detail: "refused the credentials it asked for".into(),
        })
    }

    /// The `Authorization` value answering a 401 challenge: basic auth
    /// from the docker config, or a bearer token from the realm (with those
    /// credentials when there are any, else anonymous). `None`: nothing to
    /// answer with.
    fn answer(&self, registry: &str, scope: &str, challenge: &str) -> Result<Option<String>, Error> {
        let basic = docker_credentials(registry).map(|c| format!("Basic {c}"));
        let (kind, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if kind.eq_ignore_ascii_case("basic") {
            return Ok(basic);
        }
        if !kind.eq_ignore_ascii_case("bearer") {
            return Ok(None);
        }
        let params = parse_challenge(params);
        let Some(realm) = params.get("realm") else { return Ok(None) };
        let mut req = self.agent().get(realm).query("scope", scope);
        if let Some(service) = params.get("service") {
            req = req.query("service", service);
        }
        if let Some(b) = &basic {
            req = req.set("Authorization", b);
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => return Err(status_error(realm, r)),
            Err(ureq::Error::Transport(t)) => return Err(transport_error(realm, &t)),
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

/// `key="value", …` of a `WWW-Authenticate` header.
fn parse_challenge(params: &str) -> HashMap<String, String> {
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

/// The base64 `user:password` for `registry` from the docker config users
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
}
