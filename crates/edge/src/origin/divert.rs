//! Divert: requests a custom rule sends to another origin the zone declares (`[[zone.divert]]`:
//! a tarpit, a maze), counted here. The way there is the one way to the origin (`origin::peer`
//! with the divert's origin); the access line names the divert.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// A diverted request: its zone, the rule that diverted it and the divert's name, all from the
/// policy (bounded by it, whatever the requests hold).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DivertLabels {
    zone: Arc<str>,
    rule: Arc<str>,
    divert: Arc<str>,
}

/// Divert's counter.
#[derive(Clone)]
pub struct DivertMetrics {
    requests: Family<DivertLabels, Counter>,
}

impl DivertMetrics {
    pub fn register(registry: &mut Registry) -> DivertMetrics {
        let requests = Family::<DivertLabels, Counter>::default();
        registry.register(
            "divert_requests",
            "Requests custom rules sent to another origin of their zone, by zone, rule and divert",
            requests.clone(),
        );
        DivertMetrics { requests }
    }

    /// Counts one request `rule` diverted to `divert` in `zone`.
    pub fn request(&self, zone: &Arc<str>, rule: &Arc<str>, divert: &Arc<str>) {
        self.requests
            .get_or_create(&DivertLabels {
                zone: Arc::clone(zone),
                rule: Arc::clone(rule),
                divert: Arc::clone(divert),
            })
            .inc();
    }
}
