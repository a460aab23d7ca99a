//! A tiny HTTP/1.1 server on a loopback port (std `TcpListener`, one
//! thread): the daemon an HTTP action reloads or an HTTP probe checks. It
//! answers each request with what a closure decides and records what it
//! was asked, so a test sees exactly the requests that arrived.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `POST /-/reload HTTP/1.1`.
    pub line: String,
    /// What the answer closure returned for it: (status, body).
    pub answer: (u16, String),
}

/// A running server; stopped on drop.
pub struct HttpServer {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// Listen on `127.0.0.1` at a free port; `answer(request line)` gives
    /// each request's status and body (called on the server's thread, at
    /// the moment the request arrives).
    pub fn start(answer: impl Fn(&str) -> (u16, String) + Send + 'static) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                if let Some(s) = serve(stream, &answer) {
                    seen2.lock().unwrap().push(s);
                }
            }
        });
        HttpServer { port, seen, stop, thread: Some(thread) }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The requests answered so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Wait (at most `within`) until at least `n` requests were answered.
    pub fn wait_requests(&self, n: usize, within: Duration) -> Vec<Seen> {
        let start = Instant::now();
        loop {
            let seen = self.seen();
            if seen.len() >= n || start.elapsed() > within {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Read one request's head (and a `Content-Length` body), answer it,
/// close. `None` when the peer sent no request line.
fn serve(stream: TcpStream, answer: &impl Fn(&str) -> (u16, String)) -> Option<Seen> {
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let line = line.trim_end().to_owned();
    if line.is_empty() {
        return None;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length.min(1 << 20)];
    std::io::Read::read_exact(&mut reader, &mut body).ok()?;
    let (status, text) = answer(&line);
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.flush();
    Some(Seen { line, answer: (status, text) })
}
