//! A tiny registry impostor on 127.0.0.1 for the faults a real registry
//! never shows: wrong bytes under a digest, odd layouts, 401/500, garbage,
//! a stall. It answers from a table of paths and logs every request. Used
//! by the oci tests and the agent's registry tests.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one path answers.
#[derive(Clone)]
pub enum Reply {
    /// A status, a content type and a body.
    Body(u16, &'static str, Vec<u8>),
    /// Read the request, then say nothing (until the client gives up).
    Stall,
    /// A status, extra header lines (`Name: value`) and a body.
    Headers(u16, Vec<String>, Vec<u8>),
    /// 200 with these bytes, one byte a second (a registry that drips).
    Drip(Vec<u8>),
    /// The reply when the request's `Authorization` is exactly the first
    /// string; else 401 with the second as its `WWW-Authenticate`.
    Guarded(String, String, Box<Reply>),
}

/// A fake registry; its threads serve until the test binary ends.
pub struct Fake {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
    auth: Arc<Mutex<Vec<(String, String)>>>,
}

impl Fake {
    /// Serve `routes` (path → reply; anything else is 404) until the test ends.
    pub fn start(routes: HashMap<String, Reply>) -> Fake {
        Fake::start_with(|_| routes)
    }

    /// Like [`Fake::start`], with routes that may name the fake's own port.
    pub fn start_with(routes: impl FnOnce(u16) -> HashMap<String, Reply>) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let routes = routes(port);
        let log = Arc::new(Mutex::new(Vec::new()));
        let auth = Arc::new(Mutex::new(Vec::new()));
        let (l2, a2, routes) = (log.clone(), auth.clone(), Arc::new(routes));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, auth, routes) = (l2.clone(), a2.clone(), routes.clone());
                std::thread::spawn(move || serve(stream, &routes, &log, &auth));
            }
        });
        Fake { port, log, auth }
    }

    /// Every `Authorization` header received, with its request (`METHOD /path`).
    pub fn authorizations(&self) -> Vec<(String, String)> {
        self.auth.lock().unwrap().clone()
    }

    /// `127.0.0.1:PORT`.
    pub fn registry(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every request so far, as `METHOD /path`.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(
    stream: TcpStream,
    routes: &HashMap<String, Reply>,
    log: &Mutex<Vec<String>>,
    auth: &Mutex<Vec<(String, String)>>,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        // Read the headers (requests here have no body); keep Authorization.
        let mut authorization = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("authorization")
            {
                authorization = Some(v.trim().to_owned());
            }
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
        let path = target.split('?').next().unwrap_or("").to_owned();
        log.lock().unwrap().push(format!("{method} {path}"));
        if let Some(a) = &authorization {
            auth.lock().unwrap().push((format!("{method} {path}"), a.clone()));
        }
        let mut out = &stream;
        let mut reply = routes.get(&path);
        let refused;
        if let Some(Reply::Guarded(want, challenge, inner)) = reply {
            if authorization.as_deref() == Some(want.as_str()) {
                reply = Some(&**inner);
            } else {
                refused = Reply::Headers(401, vec![format!("WWW-Authenticate: {challenge}")], b"{}".to_vec());
                reply = Some(&refused);
            }
        }
        match reply {
            Some(Reply::Stall) => {
                // Hold the connection open without a byte until the client
                // gives up (its read fails) or a minute passes.
                let mut buf = String::new();
                let _ = reader.read_line(&mut buf);
                return;
            }
            Some(Reply::Headers(status, headers, body)) => {
                let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
                for h in headers {
                    head.push_str(h);
                    head.push_str("\r\n");
                }
                head.push_str("\r\n");
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(body);
            }
            Some(Reply::Drip(body)) => {
                let head = format!("HTTP/1.1 200 X\r\nContent-Length: {}\r\n\r\n", body.len());
                let _ = out.write_all(head.as_bytes());
                for b in body {
                    if out.write_all(&[*b]).and_then(|()| out.flush()).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            Some(Reply::Guarded(..)) => unreachable!("resolved above"),
            Some(Reply::Body(status, ct, body)) => {
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n",
                    if method == "HEAD" { 0 } else { body.len() }
                );
                let _ = out.write_all(head.as_bytes());
                if method != "HEAD" {
                    let _ = out.write_all(body);
                }
            }
            None => {
                let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#;
                let head = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(body);
            }
        }
        let _ = out.flush();
    }
}
