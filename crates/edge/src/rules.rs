//! The policy's rules as the operator counts them: how many requests each rule acted on, by its
//! phase and its action (`signpost_rule_actions_total`), the counterpart of a security-events
//! view by rule.
//!
//! The label set is bounded by the policy: a series per rule of the loaded policy, each made
//! (at 0) when the policy is loaded, so that a rule that never matched shows as 0 instead of
//! missing. A reload drops the series of rules the new policy no longer has, so the family
//! never holds more than the rules of the policy loaded now (a request still finishing on the
//! old policy may count into a dropped series; that count is lost with it).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use signpost_policy::{CompiledPolicy, Decision, RuleInfo};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    /// One of the decision's phases (`signpost_policy::PHASES`).
    phase: &'static str,
    /// The rule's id, from the policy.
    rule: Arc<str>,
    /// `allow`, `block`, `log` or `rate_limit`.
    action: &'static str,
}

/// The family of rule counters, registered once.
#[derive(Clone)]
pub struct RuleMetrics {
    actions: Family<RuleLabels, Counter>,
    /// The label sets of the series made so far (the family offers no iteration): those of
    /// the policy loaded last.
    made: Arc<Mutex<Vec<RuleLabels>>>,
}

impl RuleMetrics {
    pub fn register(registry: &mut Registry) -> RuleMetrics {
        let actions = Family::<RuleLabels, Counter>::default();
        registry.register(
            "rule_actions",
            "Requests a rule of the loaded policy acted on, by phase, rule and action: a block or \
             rate_limit refused it, an allow decided it (a custom rule) or vouched for the \
             client (an access rule) and no later rule refused it, a log noted it",
            actions.clone(),
        );
        RuleMetrics {
            actions,
            made: Arc::default(),
        }
    }

    /// The counters of `policy`'s rules, each series made now; the series of rules `policy`
    /// does not have are dropped.
    pub fn for_policy(&self, policy: &CompiledPolicy) -> RuleCounters {
        let rules = policy.rules();
        let labels: Vec<RuleLabels> = rules.iter().map(labels).collect();
        let now: HashSet<&RuleLabels> = labels.iter().collect();
        {
            let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
            for old in made.iter().filter(|old| !now.contains(old)) {
                self.actions.remove(old);
            }
            *made = labels.clone();
        }
        let by_id = rules
            .iter()
            .zip(&labels)
            .map(|(rule, l)| (rule.id.clone(), self.actions.get_or_create(l).clone()))
            .collect();
        RuleCounters { by_id }
    }
}

fn labels(rule: &RuleInfo) -> RuleLabels {
    RuleLabels {
        phase: rule.phase,
        rule: rule.id.clone(),
        action: rule.action,
    }
}

/// One loaded policy's rule counters, by rule id.
#[derive(Default)]
pub struct RuleCounters {
    by_id: HashMap<Arc<str>, Counter>,
}

impl RuleCounters {
    /// Counts the rules that acted on a decided request: the rule that decided it, if one did,
    /// and each `log` rule that matched.
    pub fn observe(&self, decision: &Decision) {
        if let Some(counter) = decision.rule_id.as_ref().and_then(|id| self.by_id.get(id)) {
            counter.inc();
        }
        for id in &decision.logged {
            if let Some(counter) = self.by_id.get(id) {
                counter.inc();
            }
        }
    }
}
