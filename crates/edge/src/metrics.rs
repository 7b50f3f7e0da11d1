//! Prometheus metrics: what the edge answered, how fast the origin was, how reloads went, which
//! policy is loaded.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
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
struct OutcomeLabel {
    outcome: &'static str,
}

/// `signpost_policy_info{sha256}`: which policy is loaded, as the SHA-256 of its text. One
/// series, replaced on every load, so that instances serving different policies stand out.
#[derive(Clone, Debug, Default)]
struct PolicyInfo(Arc<Mutex<Box<str>>>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyInfoLabels {
    sha256: Box<str>,
}

impl Collector for PolicyInfo {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sha256 = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if sha256.is_empty() {
            return Ok(());
        }
        let info = prometheus_client::metrics::info::Info::new(PolicyInfoLabels { sha256 });
        info.encode(encoder.encode_descriptor(
            "policy",
            "A metric with a constant '1' value labeled by the SHA-256 of the loaded policy's text.",
            None,
            info.metric_type(),
        )?)
    }
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

/// Every metric the edge exports, registered once at start-up: the edge's own request and
/// reload families, and each feature's families, which the feature's own type registers and
/// counts.
pub struct Metrics {
    registry: Registry,
    /// The process's metrics, under their standard unprefixed names (`process_*`).
    process: Registry,
    policy_info: PolicyInfo,
    requests: Family<RequestLabels, Counter>,
    upstream_latency: Family<ZoneLabel, Histogram>,
    reloads: Family<OutcomeLabel, Counter>,
    policy_generation: Gauge<u64, AtomicU64>,
    /// The zone label of requests no zone served.
    no_zone: Arc<str>,
    /// Client connections: events that cut or refuse them, and what the caps count.
    pub connections: crate::connection::conncap::ConnectionMetrics,
    /// The rate limiters' state.
    pub rate_limits: crate::request::limits::RateLimitMetrics,
    /// Fleet rate limits' Redis calls and fallbacks.
    pub fleet: crate::fleet::FleetMetrics,
    /// Cents charged (pay per crawl) and recorded in the ledger.
    pub ledger: crate::crawl::ledger::LedgerMetrics,
    /// Known crawlers' requests by what crawl control did, and their robots.txt violations.
    pub crawl: crate::crawl::metrics::CrawlMetrics,
    /// Requests custom rules diverted to another origin of their zone.
    pub divert: crate::origin::divert::DivertMetrics,
    /// Origin HTML converted to Markdown.
    pub markdown: crate::markdown::MarkdownMetrics,
    /// Who is asking: signatures checked, bots seen, and identification's background work.
    pub identity: crate::identify::IdentityMetrics,
    /// The zones' converted-page caches.
    pub markdown_cache: crate::markdown::cache::CacheMetrics,
    /// The served TLS certificates' expiry, and reloads that could not load one.
    pub certs: crate::connection::certs::CertMetrics,
    /// Requests each rule of the policy acted on.
    pub rules: crate::rules::RuleMetrics,
    /// Requests referred by AI assistants.
    pub referrals: crate::referral::ReferralMetrics,
    /// Challenges issued, solved, failed and bypassed.
    pub challenge: crate::challenge::ChallengeMetrics,
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
        let policy_generation = Gauge::default();
        registry.register(
            "policy_generation",
            "How many policies this process has loaded",
            policy_generation.clone(),
        );
        let connections = crate::connection::conncap::ConnectionMetrics::register(&mut registry);
        let rate_limits = crate::request::limits::RateLimitMetrics::register(&mut registry);
        let fleet = crate::fleet::FleetMetrics::register(&mut registry);
        let ledger = crate::crawl::ledger::LedgerMetrics::register(&mut registry);
        let markdown = crate::markdown::MarkdownMetrics::register(&mut registry);
        let identity = crate::identify::IdentityMetrics::register(&mut registry);
        let markdown_cache = crate::markdown::cache::CacheMetrics::register(&mut registry);
        let challenge = crate::challenge::ChallengeMetrics::register(&mut registry);
        let crawl = crate::crawl::metrics::CrawlMetrics::register(&mut registry);
        let certs = crate::connection::certs::CertMetrics::register(&mut registry);
        let divert = crate::origin::divert::DivertMetrics::register(&mut registry);
        let rules = crate::rules::RuleMetrics::register(&mut registry);
        let referrals = crate::referral::ReferralMetrics::register(&mut registry);
        let policy_info = PolicyInfo::default();
        registry.register_collector(Box::new(policy_info.clone()));
        crate::operator::process::register_build_info(&mut registry);
        let mut process = Registry::default();
        crate::operator::process::register_process(&mut process);
        Metrics {
            registry,
            process,
            policy_info,
            requests,
            upstream_latency,
            reloads,
            policy_generation,
            no_zone: Arc::from("-"),
            connections,
            rate_limits,
            fleet,
            ledger,
            crawl,
            divert,
            markdown,
            identity,
            markdown_cache,
            certs,
            rules,
            referrals,
            challenge,
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

    pub fn observe_policy_loaded(&self) {
        self.policy_generation.inc();
    }

    /// The policy about to serve: its hash is `signpost_policy_info`'s label from now on.
    pub fn observe_policy(&self, policy: &signpost_policy::CompiledPolicy) {
        *self.policy_info.0.lock().unwrap_or_else(|e| e.into_inner()) = policy.sha256().into();
    }

    /// The OpenMetrics text exposition of every metric (see `operator::exposition` for the
    /// classic format).
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry);
        let _ = text::encode_registry(&mut out, &self.process);
        let _ = text::encode_eof(&mut out);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
