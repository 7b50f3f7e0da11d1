//! The admin listener: `/metrics`, `/healthz`, `/readyz`. Bound to loopback unless the policy says otherwise.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use http::{Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::metrics::Metrics;
use crate::reload::Loaded;

pub struct Admin {
    policy: Arc<ArcSwap<Loaded>>,
    metrics: Arc<Metrics>,
    /// The edge's listen addresses, probed by `/readyz`.
    listeners: Vec<String>,
}

impl Admin {
    pub fn new(
        policy: Arc<ArcSwap<Loaded>>,
        metrics: Arc<Metrics>,
        listeners: Vec<String>,
    ) -> Admin {
        Admin {
            policy,
            metrics,
            listeners,
        }
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
                let policy = &self.policy.load().policy;
                self.metrics
                    .set_rate_limit_state(policy.rate_limit_keys(), policy.rate_limit_pressure());
                text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    self.metrics.encode(),
                )
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "not found: try /metrics, /healthz or /readyz\n".into(),
            ),
        }
    }
}
