//! The admin listener: `/metrics`, `/healthz`, `/readyz`, `POST /trace` and `POST /purge`. Bound
//! to loopback unless the policy says otherwise; `/trace` is refused on any other address unless
//! the policy opts in with `admin_trace = true` (a trace shows the policy's rules and the
//! counters' state).

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use http::{Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::metrics::Metrics;
use crate::operator::exposition;
use crate::reload::Loaded;

pub struct Admin {
    policy: Arc<ArcSwap<Loaded>>,
    metrics: Arc<Metrics>,
    /// The edge's listen addresses, probed by `/readyz`.
    listeners: Vec<String>,
    /// Whether this listener is bound to a loopback address: only local users can reach it.
    on_loopback: bool,
}

/// The largest `/trace` request body read: a request description, not a request's body.
const MAX_TRACE_BODY: usize = 64 * 1024;

impl Admin {
    pub fn new(
        policy: Arc<ArcSwap<Loaded>>,
        metrics: Arc<Metrics>,
        listeners: Vec<String>,
        bound_to: &str,
    ) -> Admin {
        Admin {
            policy,
            metrics,
            listeners,
            on_loopback: is_loopback(bound_to),
        }
    }

    /// `POST /trace`: the body is a request as JSON (the fields of a test case), traced against
    /// the policy the edge has loaded, with its databases and its rate-limit counters as they are
    /// now; nothing is counted.
    async fn trace(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let json = "application/json; charset=utf-8";
        let error = |status, message: String| {
            text(
                status,
                json,
                serde_json::json!({ "error": message }).to_string() + "\n",
            )
        };
        let loaded = self.policy.load_full();
        if !self.on_loopback && !loaded.policy.admin_trace() {
            return error(
                StatusCode::FORBIDDEN,
                "/trace is served on a loopback admin listener only; set `admin_trace = true` in the policy to serve it here".into(),
            );
        }
        if session.req_header().method != http::Method::POST {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST a request as JSON, e.g. {\"url\": \"http://example.com/\"}".into(),
            );
        }
        let mut body = Vec::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_TRACE_BODY {
                        return error(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("the request description is over {MAX_TRACE_BODY} bytes"),
                        );
                    }
                }
                Ok(None) => break,
                Err(e) => return error(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
            }
        }
        let spec: crate::operator::trace::RequestSpec = match serde_json::from_slice(&body) {
            Ok(spec) => spec,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("not a request description: {e}"),
                );
            }
        };
        let traced = crate::operator::trace::Synthetic::new(&spec, &spec.header_lines()).and_then(
            |request| {
                crate::operator::trace::run(&loaded.policy, request, std::time::Instant::now())
            },
        );
        match traced {
            Ok(traced) => text(
                StatusCode::OK,
                json,
                crate::operator::trace::to_json(&traced).to_string() + "\n",
            ),
            Err(e) => error(StatusCode::BAD_REQUEST, format!("{e:#}")),
        }
    }

    /// `POST /purge?zone=NAME[&path=/p[&host=h]]`: drops a zone's converted pages, or those of
    /// one path (any query; every host of the zone, or `host` only). Parameters in the query
    /// string, so that a purge is one `curl -X POST`; the answer says how many were dropped.
    fn purge(&self, session: &ServerSession) -> Response<Vec<u8>> {
        let json = "application/json; charset=utf-8";
        let reply = |status, value: serde_json::Value| text(status, json, value.to_string() + "\n");
        let error =
            |status, message: String| reply(status, serde_json::json!({ "error": message }));
        if session.req_header().method != http::Method::POST {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST /purge?zone=NAME to drop a zone's converted pages, or POST /purge?zone=NAME&path=/p to drop one path's".into(),
            );
        }
        let query = session.req_header().uri.query().unwrap_or("");
        let (mut zone, mut path, mut host) = (None, None, None);
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*name {
                "zone" => zone = Some(value.into_owned()),
                "path" => path = Some(value.into_owned()),
                "host" => host = Some(value.into_owned()),
                other => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("unknown parameter {other:?}: zone, path and host are known"),
                    );
                }
            }
        }
        let Some(zone) = zone else {
            return error(StatusCode::BAD_REQUEST, "zone is required".into());
        };
        if host.is_some() && path.is_none() {
            return error(
                StatusCode::BAD_REQUEST,
                "host narrows a path: give path too".into(),
            );
        }
        let loaded = self.policy.load_full();
        let cache = match loaded.markdown_cache_named(&zone) {
            Ok(Some(cache)) => cache,
            Ok(None) => {
                return error(
                    StatusCode::NOT_FOUND,
                    format!("zone {zone:?} does not cache converted pages"),
                );
            }
            Err(()) => return error(StatusCode::NOT_FOUND, format!("no zone is named {zone:?}")),
        };
        let purged = match &path {
            Some(path) => cache.purge_path(path, host.as_deref()),
            None => cache.purge_all(),
        };
        reply(
            StatusCode::OK,
            serde_json::json!({ "zone": zone, "path": path, "host": host, "purged": purged }),
        )
    }

    /// Ready when every edge listener accepts a connection. A policy is always loaded by the time
    /// the admin listener exists (start-up refuses to go on without one), so the listeners are
    /// what can still be missing.
    fn ready(&self) -> Result<(), String> {
        for addr in &self.listeners {
            let target = probe_address(addr).ok_or_else(|| format!("{addr}: cannot resolve"))?;
            TcpStream::connect_timeout(&target, Duration::from_millis(500))
                .map_err(|e| format!("{addr}: {e}"))?;
        }
        Ok(())
    }
}

/// Whether an admin address (`ip:port`, as the policy checked it) is a loopback one.
fn is_loopback(addr: &str) -> bool {
    addr.parse::<SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback())
}

/// Where to connect to reach a listener: a wildcard bind address is reached over loopback.
fn probe_address(addr: &str) -> Option<SocketAddr> {
    let mut target = addr.to_socket_addrs().ok()?.next()?;
    if target.ip().is_unspecified() {
        let loopback = if target.is_ipv4() {
            [127, 0, 0, 1].into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        target.set_ip(loopback);
    }
    Some(target)
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Vec<u8>> {
    let body = body.into_bytes();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::CONTENT_LENGTH, body.len())
        .header(http::header::CACHE_CONTROL, "no-store")
        .body(body)
        .unwrap_or_default()
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        match path.as_str() {
            "/healthz" => text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            "/readyz" => {
                // The probe connects with blocking sockets: keep it off the async workers.
                let this = (
                    self.listeners.clone(),
                    self.policy.clone(),
                    self.metrics.clone(),
                );
                let verdict = tokio::task::spawn_blocking(move || {
                    Admin {
                        listeners: this.0,
                        policy: this.1,
                        metrics: this.2,
                        on_loopback: true,
                    }
                    .ready()
                })
                .await;
                match verdict {
                    Ok(Ok(())) => text(
                        StatusCode::OK,
                        "text/plain; charset=utf-8",
                        "ready\n".into(),
                    ),
                    Ok(Err(why)) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "text/plain; charset=utf-8",
                        format!("not ready: {why}\n"),
                    ),
                    Err(_) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "text/plain; charset=utf-8",
                        "not ready\n".into(),
                    ),
                }
            }
            "/metrics" => {
                let loaded = self.policy.load();
                let policy = &loaded.policy;
                self.metrics.rate_limits.set(policy.rate_limit_states());
                self.metrics
                    .markdown_cache
                    .refresh(loaded.markdown_caches());
                let accept = session.req_header().headers.get(http::header::ACCEPT);
                let openmetrics = self.metrics.encode();
                if exposition::wants_openmetrics(accept.map(|v| v.as_bytes())) {
                    text(StatusCode::OK, exposition::OPENMETRICS, openmetrics)
                } else {
                    text(
                        StatusCode::OK,
                        exposition::TEXT,
                        exposition::to_text_format(&openmetrics),
                    )
                }
            }
            "/trace" => self.trace(session).await,
            "/purge" => self.purge(session),
            _ => text(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "not found: try /metrics, /healthz, /readyz, POST /trace or POST /purge\n".into(),
            ),
        }
    }
}
