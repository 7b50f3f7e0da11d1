//! Crawl control's metric families: known crawlers' requests by what crawl control did with
//! them, and their requests to paths robots.txt disallows for them. Registered by the metrics
//! registry, counted here.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

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

/// Crawl control's counters.
#[derive(Clone)]
pub struct CrawlMetrics {
    /// Requests of known crawlers to paths the origin's robots.txt disallows for them.
    robots_violations: Family<CrawlerLabel, Counter>,
    /// Known crawlers' requests in zones with crawl control, by crawler, behavior and action.
    requests: Family<CrawlLabels, Counter>,
}

impl CrawlMetrics {
    pub fn register(registry: &mut Registry) -> CrawlMetrics {
        let robots_violations = Family::<CrawlerLabel, Counter>::default();
        registry.register(
            "robots_violations",
            "Requests of known crawlers to paths the zone's robots.txt disallows for them, by \
             crawler (catalog names; other for the rest)",
            robots_violations.clone(),
        );
        let requests = Family::<CrawlLabels, Counter>::default();
        registry.register(
            "crawl_requests",
            "Requests of known crawlers in zones with crawl control, by zone, crawler, behavior, \
             action (allow, block, charge) and outcome (allowed, free, forwarded, refused)",
            requests.clone(),
        );
        CrawlMetrics {
            robots_violations,
            requests,
        }
    }

    /// A request of a known crawler to a path robots.txt disallows for it.
    pub fn robots_violation(&self, crawler: &Arc<str>) {
        self.robots_violations
            .get_or_create(&CrawlerLabel {
                crawler: Arc::clone(crawler),
            })
            .inc();
    }

    /// A known crawler's request in a zone with crawl control.
    pub fn request(&self, zone: &Arc<str>, step: &signpost_policy::CrawlStep) {
        self.requests
            .get_or_create(&CrawlLabels {
                zone: Arc::clone(zone),
                crawler: Arc::clone(&step.crawler.name),
                behavior: step.crawler.behaviors.as_str(),
                action: step.action.as_str(),
                outcome: step.outcome.as_str(),
            })
            .inc();
    }
}
