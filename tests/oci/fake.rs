//! A tiny registry impostor on 127.0.0.1 for the faults a real registry
//! never shows: wrong bytes under a digest, odd layouts, 401/500, garbage,
//! a stall. It answers from a table of paths and logs every request.

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
}

pub struct Fake {
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    /// Serve `routes` (path → reply; anything else is 404) until the test ends.
    pub fn start(routes: HashMap<String, Reply>) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (l2, routes) = (log.clone(), Arc::new(routes));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, routes) = (l2.clone(), routes.clone());
                std::thread::spawn(move || serve(stream, &routes, &log));
            }
        });
        Fake { port, log }
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

fn serve(stream: TcpStream, routes: &HashMap<String, Reply>, log: &Mutex<Vec<String>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        // Skip the headers (requests here have no body).
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
        let path = target.split('?').next().unwrap_or("").to_owned();
        log.lock().unwrap().push(format!("{method} {path}"));
        let mut out = &stream;
        match routes.get(&path) {
            Some(Reply::Stall) => {
                // Hold the connection open without a byte until the client
                // gives up (its read fails) or a minute passes.
                let mut buf = String::new();
                let _ = reader.read_line(&mut buf);
                return;
            }
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
