//! The metrics HTTP server: Prometheus metrics at `/metrics` and the built-in status page
//! at `/`, served by a small blocking HTTP server (tiny_http) on a thread of its own. Each
//! scrape reads the daemon's counters where they live (`collect`) and encodes them in the
//! text exposition format; nothing on the data path waits for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use prometheus::{Encoder, TextEncoder};
use tiny_http::{Header, Method, Request, Response, Server};

use crate::event_loop::Shared;

mod collect;
mod family;

use collect::Source;

/// The status page (one self-contained HTML file).
const STATUS_PAGE: &str = include_str!("status.html");

/// Why the metrics server could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {reason}")]
pub struct MetricsError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// What went wrong.
    pub reason: String,
}

/// A running metrics server.
pub struct MetricsServer {
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
    /// The listening socket, a second descriptor of it: what a handover passes on.
    listener: Option<std::net::TcpListener>,
}

impl MetricsServer {
    /// Listen on `addr` and serve from `shared` on a new thread.
    /// `inherited`: the listening socket a handover passed on (`crate::handover`), used
    /// instead of binding `addr`.
    pub fn start(
        addr: SocketAddr,
        shared: Arc<Shared>,
        session_info: bool,
        inherited: Option<std::net::TcpListener>,
    ) -> Result<MetricsServer, MetricsError> {
        let fail = |e: &dyn std::fmt::Display| MetricsError {
            addr,
            reason: e.to_string(),
        };
        let listener = match inherited {
            Some(l) => l,
            None => std::net::TcpListener::bind(addr).map_err(|e| fail(&e))?,
        };
        let kept = listener.try_clone().ok();
        let server = Server::from_listener(listener, None).map_err(|e| fail(&e))?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let src = Source {
            shared,
            session_info,
            process: prometheus::process_collector::ProcessCollector::for_self(),
        };
        let s = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&s, &src))
            .map_err(|e| MetricsError {
                addr,
                reason: format!("cannot start its thread: {e}"),
            })?;
        Ok(MetricsServer {
            server,
            thread: Some(thread),
            addr: bound,
            listener: kept,
        })
    }

    /// A new descriptor of the listening socket, for a handover.
    pub fn listener(&self) -> Option<std::net::TcpListener> {
        self.listener.as_ref().and_then(|l| l.try_clone().ok())
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop serving and wait for the thread.
    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &Server, src: &Source) {
    loop {
        match server.recv() {
            Ok(req) => {
                // one bad request must not end the server
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| respond(req, src)));
                if r.is_err() {
                    tracing::error!("internal error while answering a metrics request");
                }
            }
            Err(e) => {
                tracing::debug!("metrics server: {e}");
                return; // unblocked (stopping) or the listener failed
            }
        }
    }
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// What one request gets: (status, content type, body).
fn answer(method: &Method, url: &str, src: &Source) -> (u16, &'static str, String) {
    if !matches!(method, Method::Get | Method::Head) {
        return (
            405,
            "text/plain; charset=utf-8",
            "method not allowed\n".into(),
        );
    }
    let path = url.split(['?', '#']).next().unwrap_or("");
    match path {
        "/metrics" => {
            let families = collect::gather(src);
            let mut buf = Vec::with_capacity(64 << 10);
            match TextEncoder::new().encode(&families, &mut buf) {
                Ok(()) => (
                    200,
                    "text/plain; version=0.0.4; charset=utf-8",
                    String::from_utf8_lossy(&buf).into_owned(),
                ),
                Err(e) => (
                    500,
                    "text/plain; charset=utf-8",
                    format!("cannot encode metrics: {e}\n"),
                ),
            }
        }
        "/" | "/index.html" => (200, "text/html; charset=utf-8", STATUS_PAGE.to_string()),
        _ => (
            404,
            "text/plain; charset=utf-8",
            "not found: try /metrics or /\n".into(),
        ),
    }
}

fn respond(req: Request, src: &Source) {
    let (status, ctype, body) = answer(req.method(), req.url(), src);
    let head = *req.method() == Method::Head;
    let len = body.len();
    let mut resp =
        Response::from_string(if head { String::new() } else { body }).with_status_code(status);
    for h in [
        header("Content-Type", ctype),
        header("Cache-Control", "no-store"),
    ]
    .into_iter()
    .flatten()
    {
        resp.add_header(h);
    }
    if status == 405 {
        if let Some(h) = header("Allow", "GET, HEAD") {
            resp.add_header(h);
        }
    }
    let _ = len;
    if let Err(e) = req.respond(resp) {
        tracing::debug!("metrics client went away: {e}");
    }
}
