//! The per-client connection cap: one client address (an IPv6 client by its /64) may hold at most
//! `[connections] max_per_client` connections at once, counted from their acceptance, so that
//! connections still in their TLS handshake count; more are closed as soon as they are accepted,
//! counted and logged at a bounded rate.
//!
//! The cap wraps the edge's Pingora application: `admit` runs once per accepted connection, and
//! Pingora holds what it returns until the connection ends (vendor/README.md, pingora-core item
//! 9), so a slot held there counts exactly the open connections. The same wrapper sets the TLS
//! handshake deadline and puts every HTTP/2 connection behind its guard (connection/h2guard.rs).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::{Admission, ServerApp};
use pingora::protocols::l4::socket::SocketAddr as PingoraSocketAddr;
use pingora::protocols::{ALPN, Stream};
use pingora::server::ShutdownWatch;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use signpost_policy::Connections;

use crate::connection::h2guard::{Abuse, Guarded};
use crate::log::{LogBudget, LogSafe, OrDash};
use crate::request::limits::client_key;

/// What the cap reads of the policy loaded now: read per connection, so a reload changes it for
/// the next connection.
pub trait ConnectionPolicy: Send + Sync {
    /// `[connections]` of the policy loaded now.
    fn connections(&self) -> Connections;
    /// Whether `peer` is a trusted proxy, which carries many clients and is not capped.
    fn is_trusted_proxy(&self, peer: IpAddr) -> bool;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

/// What happens to client connections: events that cut or refuse them, and the counts the
/// per-client caps keep.
#[derive(Clone)]
pub struct ConnectionMetrics {
    events: Family<EventLabel, Counter>,
    /// Client connections open now (`max_per_client`).
    open: Gauge<i64, AtomicI64>,
    /// Requests on their way to origins now (`max_in_flight_per_client`).
    requests_in_flight: Gauge<i64, AtomicI64>,
}

impl ConnectionMetrics {
    pub fn register(registry: &mut Registry) -> ConnectionMetrics {
        let events = Family::<EventLabel, Counter>::default();
        registry.register(
            "connection_events",
            "Clients cut or refused at the connection level: idle_timeout, header_timeout, \
             body_timeout, malformed, too_many_connections, tls_handshake_timeout, \
             tls_handshake_failed, send_timeout, request_cancelled, h2_stream_error, too_many_in_flight, \
             h2_premature_resets, h2_control_flood, h2_request_budget",
            events.clone(),
        );
        let open = Gauge::default();
        registry.register(
            "client_connections",
            "Client connections open now, as the per-client cap counts them",
            open.clone(),
        );
        let requests_in_flight = Gauge::default();
        registry.register(
            "client_requests_in_flight",
            "Requests on their way to origins now, as max_in_flight_per_client counts them \
             (including those a client cancelled, held while the origin may still work on them)",
            requests_in_flight.clone(),
        );
        ConnectionMetrics {
            events,
            open,
            requests_in_flight,
        }
    }

    /// Counts one connection-level event; `event` is one of a fixed set of names, so the family
    /// stays bounded.
    pub fn event(&self, event: &'static str) {
        self.events.get_or_create(&EventLabel { event }).inc();
    }

    /// The gauge of requests in flight to origins, which the in-flight cap keeps.
    pub fn requests_in_flight(&self) -> Gauge<i64, AtomicI64> {
        self.requests_in_flight.clone()
    }
}

/// Open connections per client key. An entry exists only while its count is above zero, so the
/// table holds at most one entry per open connection: bounded by the process's descriptor limit.
#[derive(Default)]
pub struct ConnectionTable {
    open: Mutex<HashMap<IpAddr, u32>>,
    /// Connections counted now, all clients together (`signpost_client_connections`).
    gauge: Gauge<i64, AtomicI64>,
}

impl ConnectionTable {
    /// Counts a new connection from `key`, unless it already holds `max`.
    fn try_open(self: &Arc<Self>, key: IpAddr, max: u32) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(key).or_insert(0);
        if *count >= max {
            if *count == 0 {
                open.remove(&key);
            }
            return None;
        }
        *count += 1;
        self.gauge.inc();
        Some(Slot {
            table: self.clone(),
            key,
        })
    }

    /// Connections currently counted for `key`.
    #[cfg(test)]
    fn count(&self, key: IpAddr) -> u32 {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&key).copied().unwrap_or(0)
    }
}

/// One counted connection; dropping it uncounts it.
struct Slot {
    table: Arc<ConnectionTable>,
    key: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|e| e.into_inner());
        self.table.gauge.dec();
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The edge's application behind the connection cap.
pub struct Capped<A> {
    inner: Arc<A>,
    policy: Arc<dyn ConnectionPolicy>,
    metrics: ConnectionMetrics,
    table: Arc<ConnectionTable>,
    log: LogBudget,
}

impl<A> Capped<A> {
    pub fn new(
        inner: A,
        policy: Arc<dyn ConnectionPolicy>,
        metrics: ConnectionMetrics,
    ) -> Capped<A> {
        let table = Arc::new(ConnectionTable {
            open: Mutex::default(),
            gauge: metrics.open.clone(),
        });
        Capped {
            inner: Arc::new(inner),
            policy,
            metrics,
            table,
            log: LogBudget::default(),
        }
    }
}

impl<A> Capped<A> {
    /// Counts a new connection from `peer` against its client's cap, or refuses it.
    fn admit_peer(&self, peer: IpAddr) -> Result<Option<Slot>, ()> {
        if self.policy.is_trusted_proxy(peer) {
            // A trusted proxy carries many clients: not capped.
            return Ok(None);
        }
        let max = self.policy.connections().max_per_client;
        let key = client_key(peer);
        match self.table.try_open(key, max) {
            Some(slot) => Ok(Some(slot)),
            None => {
                self.metrics.event("too_many_connections");
                if self.log.allow() {
                    tracing::warn!(
                        client = %key,
                        max_per_client = max,
                        suppressed = self.log.take_suppressed(),
                        "connection refused: the client holds max_per_client connections"
                    );
                }
                Err(())
            }
        }
    }
}

impl<A: ServerApp + Send + Sync + 'static> Capped<A> {
    /// An HTTP/2 connection: the guard reads the frames (connection/h2guard.rs) and may ask for a
    /// graceful GOAWAY once the connection carried its request budget, through the shutdown
    /// signal that Pingora's HTTP/2 accept loop already answers with one.
    async fn process_h2(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let budget = self.policy.connections().h2_max_requests_per_connection;
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let capped = self.clone();
        let on_abuse = Box::new(move |abuse: Abuse| {
            capped.metrics.event(abuse.event());
            if capped.log.allow() {
                tracing::warn!(
                    client = %OrDash(client),
                    reason = abuse.event(),
                    suppressed = capped.log.take_suppressed(),
                    "HTTP/2 connection closed with GOAWAY ENHANCE_YOUR_CALM"
                );
            }
        });
        let (guarded, signals) = Guarded::new(stream, budget, on_abuse);
        let (retire, retired) = tokio::sync::watch::channel(*shutdown.borrow());
        let mut server_shutdown = shutdown.clone();
        let server_stopping = async {
            if server_shutdown
                .wait_for(|stopping| *stopping)
                .await
                .is_err()
            {
                // No server left to stop this connection: only the budget can.
                std::future::pending::<()>().await;
            }
        };
        let relay = async {
            tokio::select! {
                () = server_stopping => {}
                () = signals.retire.notified() => {
                    self.metrics.event("h2_request_budget");
                }
            }
            let _ = retire.send(true);
            std::future::pending::<()>().await
        };
        tokio::select! {
            _ = self.inner.process_new(Box::new(guarded), &retired) => {}
            () = relay => {}
        }
        None
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Capped<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        if stream.selected_alpn_proto() != Some(ALPN::H2) {
            return self.inner.process_new(stream, shutdown).await;
        }
        // In a box of its own: this future lives as long as the connection, and an HTTP/1
        // connection, idle most of its life, should not carry the HTTP/2 guard's state.
        Box::pin(self.process_h2(stream, shutdown)).await
    }

    /// Every connection is counted from its acceptance, before its TLS handshake, so that
    /// connections that never finish one count against their client's cap too. Closed unread
    /// when over the cap: answering would cost the reads the cap exists to save.
    fn admit(&self, peer: Option<&PingoraSocketAddr>) -> Option<Admission> {
        // A Unix socket peer has no address to count.
        let Some(ip) = peer.and_then(|p| p.as_inet()).map(|a| a.ip()) else {
            return Some(Admission::default());
        };
        match self.admit_peer(ip) {
            Ok(Some(slot)) => Some(Admission::holding(slot)),
            Ok(None) => Some(Admission::default()),
            Err(()) => None,
        }
    }

    /// `[connections] tls_handshake_timeout`, read per connection so that a reload changes it.
    fn handshake_timeout(&self) -> Duration {
        self.policy.connections().tls_handshake_timeout
    }

    fn handshake_failed(
        &self,
        peer: Option<&PingoraSocketAddr>,
        timed_out: bool,
        error: Option<&pingora::Error>,
    ) {
        let event = if timed_out {
            "tls_handshake_timeout"
        } else {
            "tls_handshake_failed"
        };
        self.metrics.event(event);
        if self.log.allow() {
            let client = peer.and_then(|p| p.as_inet()).map(|a| a.ip());
            tracing::info!(
                client = %OrDash(client),
                event,
                error = %LogSafe(&error.map(|e| e.to_string()).unwrap_or_default()),
                suppressed = self.log.take_suppressed(),
                "TLS handshake not completed"
            );
        }
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_counts_open_connections_only() {
        let table = Arc::new(ConnectionTable::default());
        let key: IpAddr = "192.0.2.1".parse().unwrap();
        let first = table.try_open(key, 2).unwrap();
        let second = table.try_open(key, 2).unwrap();
        assert!(table.try_open(key, 2).is_none());
        drop(first);
        let third = table.try_open(key, 2).unwrap();
        assert_eq!(table.count(key), 2);
        assert_eq!(table.gauge.get(), 2);
        drop((second, third));
        assert_eq!(table.count(key), 0);
        assert_eq!(table.gauge.get(), 0);
        assert!(
            table.open.lock().unwrap().is_empty(),
            "no entry outlives its connections"
        );
    }
}
