//! Prometheus metrics: what the edge answered, how fast the origin was, how reloads went.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
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

/// A crawler, by catalog name: the label set is bounded by the catalog (at most
/// `signpost_policy::MAX_BOTS` names), whatever the requests claim.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrawlerLabel {
    crawler: Arc<str>,
}

/// A known crawler's request as crawl control saw it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrawlLabels {
    zone: Arc<str>,
    crawler: Arc<str>,
    /// Its behaviors, e.g. `search,training`.
    behavior: &'static str,
    /// `allow`, `block` or `charge`.
    action: &'static str,
    /// `allowed`, `free`, `forwarded` or `refused`.
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    /// `timeout`, `connection` or `error`.
    cause: &'static str,
    /// The policy's `on_error`: `local`, `allow` or `refuse`.
    action: &'static str,
}

/// The origin statuses whose counters a zone keeps at hand; others are looked up by label.
const COMMON_STATUSES: [u16; 12] = [200, 204, 206, 301, 302, 304, 307, 308, 400, 403, 404, 500];

/// One zone's request metrics, resolved once per loaded policy so that counting a proxied
/// request hashes no labels.
pub struct ZoneMetrics {
    zone: Arc<str>,
    upstream_latency: Histogram,
    /// The origin's answers with each of [`COMMON_STATUSES`], created on first use so that
    /// `/metrics` shows only series that happened.
    origin_answers: [OnceLock<Counter>; COMMON_STATUSES.len()],
}

impl ZoneMetrics {
    pub fn name(&self) -> &Arc<str> {
        &self.zone
    }
}

/// What happens to client connections: events that cut or refuse them, and the counts the
/// per-client caps keep.
struct ConnectionMetrics {
    events: Family<EventLabel, Counter>,
    /// Client connections open now (`max_per_client`).
    open: Gauge<i64, std::sync::atomic::AtomicI64>,
    /// Requests on their way to origins now (`max_in_flight_per_client`).
    requests_in_flight: Gauge<i64, std::sync::atomic::AtomicI64>,
}

impl ConnectionMetrics {
    fn register(registry: &mut Registry) -> ConnectionMetrics {
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
}

/// Every metric the edge exports, registered once at start-up.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    upstream_latency: Family<ZoneLabel, Histogram>,
    reloads: Family<OutcomeLabel, Counter>,
    connections: ConnectionMetrics,
    rate_limit_keys: Gauge<i64, std::sync::atomic::AtomicI64>,
    rate_limit_evicted: Gauge<u64, AtomicU64>,
    rate_limit_sketched: Gauge<u64, AtomicU64>,
    policy_generation: Gauge<u64, AtomicU64>,
    fleet_calls: Family<OutcomeLabel, Counter>,
    fleet_fallbacks: Family<FallbackLabels, Counter>,
    fleet_latency: Histogram,
    /// Cents charged (pay per crawl) and recorded in the ledger, per crawler.
    crawler_charged_cents: Family<CrawlerLabel, Counter>,
    /// Requests of known crawlers to paths the origin's robots.txt disallows for them.
    robots_violations: Family<CrawlerLabel, Counter>,
    /// Known crawlers' requests in zones with crawl control, by crawler, behavior and action.
    crawl_requests: Family<CrawlLabels, Counter>,
    /// The zone label of requests no zone served.
    no_zone: Arc<str>,
    /// Origin HTML converted to Markdown.
    pub markdown: crate::markdown::MarkdownMetrics,
    /// Who is asking: signatures checked, bots seen.
    pub identity: crate::identify::IdentityMetrics,
    /// The zones' converted-page caches.
    pub markdown_cache: crate::markdown_cache::CacheMetrics,
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
        let connections = ConnectionMetrics::register(&mut registry);
        let rate_limit_keys = Gauge::default();
        registry.register(
            "rate_limit_keys",
            "Keys currently tracked by the rate limiters",
            rate_limit_keys.clone(),
        );
        let rate_limit_evicted = Gauge::default();
        registry.register(
            "rate_limit_evicted_keys",
            "Keys not being limited that the rate limiters evicted, least recently seen first, \
             to count new keys (since the rules' counters were created)",
            rate_limit_evicted.clone(),
        );
        let rate_limit_sketched = Gauge::default();
        registry.register(
            "rate_limit_sketched_requests",
            "Requests of new keys counted in a rule's fixed-size sketch because every slot held \
             a key being limited (since the rules' counters were created)",
            rate_limit_sketched.clone(),
        );
        let policy_generation = Gauge::default();
        registry.register(
            "policy_generation",
            "How many policies this process has loaded",
            policy_generation.clone(),
        );
        let fleet_calls = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "fleet_calls",
            "Redis calls of fleet rate limits by outcome: allowed, refused (Redis answered), \
             timeout, connection, error (it did not)",
            fleet_calls.clone(),
        );
        let fleet_fallbacks = Family::<FallbackLabels, Counter>::default();
        registry.register(
            "fleet_fallbacks",
            "Requests a fleet rate limit could not count in Redis, by cause and by the on_error \
             action taken",
            fleet_fallbacks.clone(),
        );
        // 50 µs to ~100 ms: loopback to a distant Redis; the timeout is usually a few ms.
        let fleet_latency = Histogram::new(exponential_buckets(0.000_05, 2.0, 12));
        registry.register(
            "fleet_call_seconds",
            "Time of the Redis calls of fleet rate limits that Redis answered",
            fleet_latency.clone(),
        );
        let markdown = crate::markdown::MarkdownMetrics::register(&mut registry);
        let identity = crate::identify::IdentityMetrics::register(&mut registry);
        let markdown_cache = crate::markdown_cache::CacheMetrics::register(&mut registry);
        let crawler_charged_cents = Family::<CrawlerLabel, Counter>::default();
        registry.register(
            "crawler_charged_cents",
            "US cents charged to crawlers (pay per crawl) and recorded in the ledger, by crawler \
             (catalog names; other for the rest)",
            crawler_charged_cents.clone(),
        );
        let robots_violations = Family::<CrawlerLabel, Counter>::default();
        registry.register(
            "robots_violations",
            "Requests of known crawlers to paths the zone's robots.txt disallows for them, by \
             crawler (catalog names; other for the rest)",
            robots_violations.clone(),
        );
        let crawl_requests = Family::<CrawlLabels, Counter>::default();
        registry.register(
            "crawl_requests",
            "Requests of known crawlers in zones with crawl control, by zone, crawler, behavior, \
             action (allow, block, charge) and outcome (allowed, free, forwarded, refused)",
            crawl_requests.clone(),
        );
        Metrics {
            crawler_charged_cents,
            robots_violations,
            crawl_requests,
            markdown,
            markdown_cache,
            identity,
            registry,
            fleet_calls,
            fleet_fallbacks,
            fleet_latency,
            requests,
            upstream_latency,
            reloads,
            connections,
            rate_limit_keys,
            rate_limit_evicted,
            rate_limit_sketched,
            policy_generation,
            no_zone: Arc::from("-"),
        }
    }

    /// The metric handles of the zone named `zone`, looked up once per loaded policy.
    pub fn zone(&self, zone: &Arc<str>) -> ZoneMetrics {
        ZoneMetrics {
            zone: zone.clone(),
            upstream_latency: self
                .upstream_latency
                .get_or_create(&ZoneLabel { zone: zone.clone() })
                .clone(),
            origin_answers: Default::default(),
        }
    }

    /// Counts one answered request; `zone` is `None` when no zone served it, `upstream_latency`
    /// is `None` when no origin was involved.
    ///
    /// The common case, a zone's origin answering with a common status, touches only handles
    /// the zone already holds: no labels are hashed and no lock is taken.
    pub fn observe_request(
        &self,
        zone: Option<&ZoneMetrics>,
        status: u16,
        error_code: Option<Code>,
        format: &'static str,
        upstream_latency: Option<Duration>,
    ) {
        if let Some(zone) = zone {
            if let Some(latency) = upstream_latency {
                zone.upstream_latency.observe(latency.as_secs_f64());
            }
            if error_code.is_none()
                && let Some(slot) = COMMON_STATUSES.iter().position(|&s| s == status)
            {
                zone.origin_answers[slot]
                    .get_or_init(|| {
                        self.requests
                            .get_or_create(&RequestLabels {
                                zone: zone.zone.clone(),
                                status,
                                error_code: 0,
                                format: "origin",
                            })
                            .clone()
                    })
                    .inc();
                return;
            }
        }
        let zone = zone.map_or(&self.no_zone, |z| &z.zone);
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
        self.connections
            .events
            .get_or_create(&EventLabel { event })
            .inc();
    }

    /// The gauge of open client connections, which the connection cap keeps.
    pub fn client_connections(&self) -> Gauge<i64, std::sync::atomic::AtomicI64> {
        self.connections.open.clone()
    }

    /// The gauge of requests in flight to origins, which the in-flight cap keeps.
    pub fn client_requests_in_flight(&self) -> Gauge<i64, std::sync::atomic::AtomicI64> {
        self.connections.requests_in_flight.clone()
    }

    pub fn observe_policy_loaded(&self) {
        self.policy_generation.inc();
    }

    pub fn set_rate_limit_state(&self, keys: usize, (evicted, sketched): (u64, u64)) {
        self.rate_limit_keys
            .set(i64::try_from(keys).unwrap_or(i64::MAX));
        self.rate_limit_evicted.set(evicted);
        self.rate_limit_sketched.set(sketched);
    }

    /// One Redis call of a fleet rule: its outcome, and its time when Redis answered.
    pub fn observe_fleet_call(&self, outcome: &'static str, latency: Option<Duration>) {
        self.fleet_calls
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        if let Some(latency) = latency {
            self.fleet_latency.observe(latency.as_secs_f64());
        }
    }

    /// A request a fleet rule could not count in Redis.
    pub fn observe_fleet_fallback(&self, cause: &'static str, action: &'static str) {
        self.fleet_fallbacks
            .get_or_create(&FallbackLabels { cause, action })
            .inc();
    }

    /// A charge recorded in the ledger, by the crawler's catalog name.
    pub fn observe_crawler_charged(&self, crawler: &Arc<str>, cents: u64) {
        self.crawler_charged_cents
            .get_or_create(&CrawlerLabel {
                crawler: Arc::clone(crawler),
            })
            .inc_by(cents);
    }

    /// A request of a known crawler to a path robots.txt disallows for it.
    pub fn observe_robots_violation(&self, crawler: &Arc<str>) {
        self.robots_violations
            .get_or_create(&CrawlerLabel {
                crawler: Arc::clone(crawler),
            })
            .inc();
    }

    /// A known crawler's request in a zone with crawl control.
    pub fn observe_crawl(&self, zone: &Arc<str>, step: &signpost_policy::CrawlStep) {
        self.crawl_requests
            .get_or_create(&CrawlLabels {
                zone: Arc::clone(zone),
                crawler: Arc::clone(&step.crawler.name),
                behavior: step.crawler.behaviors.as_str(),
                action: step.action.as_str(),
                outcome: step.outcome.as_str(),
            })
            .inc();
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
