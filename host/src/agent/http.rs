//! `/metrics`, `/healthz`, `/readyz` and `/status` over HTTP (`tiny_http`), on a
//! thread of their own so a slow scraper never delays a run.

use std::sync::Arc;

use tiny_http::{Header, Method, Response, Server};

use super::Error;
use super::health::Health;
use super::metrics::{self, Metrics};
use super::status::Board;

/// The running server; dropping it stops it.
pub struct MetricsServer {
    server: Arc<Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The address it listens on (the real port when `:0` was asked for).
    pub addr: String,
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
}

impl MetricsServer {
    /// Listen on `addr` (`127.0.0.1:9464`, `[::1]:0`, …) and serve.
    pub fn start(
        addr: &str,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        status: Arc<Board>,
    ) -> Result<MetricsServer, Error> {
        let server =
            Server::http(addr).map_err(|e| Error::Serve { addr: addr.to_owned(), reason: e.to_string() })?;
        let bound = server.server_addr().to_string();
        let server = Arc::new(server);
        let serving = server.clone();
        let thread = crate::spawn::spawn_traced("metrics".into(), move || {
            for request in serving.incoming_requests() {
                let path = request.url().split('?').next().unwrap_or("").to_owned();
                let response = if *request.method() != Method::Get && *request.method() != Method::Head {
                    Response::from_string("only GET\n")
                        .with_status_code(405)
                        .with_header(header("Allow", "GET, HEAD"))
                } else {
                    match path.as_str() {
                        "/metrics" => Response::from_string(metrics.encode())
                            .with_header(header("Content-Type", metrics::CONTENT_TYPE)),
                        "/healthz" => {
                            let (alive, body) = health.liveness();
                            Response::from_string(body)
                                .with_status_code(if alive { 200 } else { 503 })
                                .with_header(header("Content-Type", "text/plain; charset=utf-8"))
                        }
                        "/readyz" => {
                            let (ready, body) = health.readiness();
                            Response::from_string(body + "\n")
                                .with_status_code(if ready { 200 } else { 503 })
                                .with_header(header("Content-Type", "application/json"))
                        }
                        "/status" => Response::from_string(status.json() + "\n")
                            .with_header(header("Content-Type", "application/json")),
                        _ => Response::from_string("not found: try /metrics, /healthz, /readyz or /status\n")
                            .with_status_code(404),
                    }
                };
                if let Err(e) = request.respond(response) {
                    tracing::debug!("answering {path}: {e}");
                }
            }
        })
        .map_err(|e| Error::Setup { what: "starting the metrics thread", source: e })?;
        Ok(MetricsServer { server, thread: Some(thread), addr: bound })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
