//! Prometheus metrics: what the edge answered, how fast the origin was, how reloads went.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use signpost_problem::Code;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The zone's name, shared with the policy: labelling a request allocates nothing.
    zone: Arc<str>,
    status: u16,
    /// The catalog code of an edge-generated answer; 0 when the origin answered.
    error_code: u16,
    /// `html`, `json`, `problem+json`, `markdown`, or `origin`.
    format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneLabel {
    zone: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// Every metric the edge exports, registered once at start-up.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    upstream_latency: Family<ZoneLabel, Histogram>,
    reloads: Family<OutcomeLabel, Counter>,
    connection_events: Family<EventLabel, Counter>,
    client_connections: Gauge<i64, std::sync::atomic::AtomicI64>,
    rate_limit_keys: Gauge<i64, std::sync::atomic::AtomicI64>,
    policy_generation: Gauge<u64, AtomicU64>,
    /// The zone label of requests no zone served.
    no_zone: Arc<str>,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("signpost");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by zone, status, edge error code and response format",
            requests.clone(),
        );
        let upstream_latency = Family::<ZoneLabel, Histogram>::new_with_constructor(|| {
            // 1 ms to ~65 s: origin answers span from cache-fast to the read timeout.
            Histogram::new(exponential_buckets(0.001, 2.0, 17))
        });
        registry.register(
            "upstream_latency_seconds",
            "Time from choosing the origin to the end of the request",
            upstream_latency.clone(),
        );
        let reloads = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "policy_reloads",
            "Policy reloads by outcome (ok, rejected)",
            reloads.clone(),
        );
        let connection_events = Family::<EventLabel, Counter>::default();
        registry.register(
            "connection_events",
            "Clients cut or refused at the connection level: header_timeout, body_timeout, \
             malformed, too_many_connections",
            connection_events.clone(),
        );
        let client_connections = Gauge::default();
        registry.register(
            "client_connections",
            "Client connections open now, as the per-client cap counts them",
            client_connections.clone(),
        );
        let rate_limit_keys = Gauge::default();
        registry.register(
            "rate_limit_keys",
            "Keys currently tracked by the rate limiters",
            rate_limit_keys.clone(),
        );
        let policy_generation = Gauge::default();
        registry.register(
            "policy_generation",
            "How many policies this process has loaded",
            policy_generation.clone(),
        );
        Metrics {
            registry,
            requests,
            upstream_latency,
            reloads,
            connection_events,
            client_connections,
            rate_limit_keys,
            policy_generation,
            no_zone: Arc::from("-"),
        }
    }

    /// Counts one answered request; `zone` is `None` when no zone served it, `upstream_latency`
    /// is `None` when no origin was involved.
    pub fn observe_request(
        &self,
        zone: Option<&Arc<str>>,
        status: u16,
        error_code: Option<Code>,
        format: &'static str,
        upstream_latency: Option<Duration>,
    ) {
        let zone = zone.unwrap_or(&self.no_zone);
        let labels = RequestLabels {
            zone: zone.clone(),
            status,
            error_code: error_code.map_or(0, Code::get),
            format: if error_code.is_some() {
                format
            } else {
                "origin"
            },
        };
        self.requests.get_or_create(&labels).inc();
        if let Some(latency) = upstream_latency {
            self.upstream_latency
                .get_or_create(&ZoneLabel { zone: zone.clone() })
                .observe(latency.as_secs_f64());
        }
    }

    pub fn observe_reload(&self, ok: bool) {
        self.reloads
            .get_or_create(&OutcomeLabel {
                outcome: if ok { "ok" } else { "rejected" },
            })
            .inc();
        if ok {
            self.policy_generation.inc();
        }
    }

    /// Counts one connection-level event; `event` is one of a fixed set of names, so the family
    /// stays bounded.
    pub fn observe_connection_event(&self, event: &'static str) {
        self.connection_events
            .get_or_create(&EventLabel { event })
            .inc();
    }

    /// The gauge of open client connections, which the connection cap keeps.
    pub fn client_connections(&self) -> Gauge<i64, std::sync::atomic::AtomicI64> {
        self.client_connections.clone()
    }

    pub fn observe_policy_loaded(&self) {
        self.policy_generation.inc();
    }

    pub fn set_rate_limit_keys(&self, keys: usize) {
        self.rate_limit_keys
            .set(i64::try_from(keys).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
