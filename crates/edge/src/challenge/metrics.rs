//! The challenge's metric families: challenges issued, solved, failed and bypassed, per zone and
//! rule. Registered by the metrics registry, counted here.
//!
//! Every label is bounded by the policy or by a fixed list: a zone's name, a rule's id (or the
//! phase's name for crawl control), `work` or `wait`, a refusal's kind, a bypass's reason.
//! Solved and failed answers are counted per zone and method or reason: a challenge token does
//! not say which rule issued it (the edge keeps nothing per challenge).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IssuedLabels {
    zone: Arc<str>,
    rule: Arc<str>,
    /// `page` (a browser) or `problem` (an agent).
    answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SolvedLabels {
    zone: Arc<str>,
    /// `work` (proof of work) or `wait` (the no-JavaScript fallback).
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedLabels {
    zone: Arc<str>,
    /// `malformed`, `forged`, `expired`, `wrong_answer`, `too_early`, ...
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BypassedLabels {
    zone: Arc<str>,
    rule: Arc<str>,
    /// `cleared`, `verified` or `exempt`.
    reason: &'static str,
}

/// The challenge's counters.
#[derive(Clone)]
pub struct ChallengeMetrics {
    issued: Family<IssuedLabels, Counter>,
    solved: Family<SolvedLabels, Counter>,
    failed: Family<FailedLabels, Counter>,
    bypassed: Family<BypassedLabels, Counter>,
}

impl ChallengeMetrics {
    pub fn register(registry: &mut Registry) -> ChallengeMetrics {
        let issued = Family::<IssuedLabels, Counter>::default();
        registry.register(
            "challenges_issued",
            "Challenges answered, by zone, rule (or phase) and answer (page for browsers, problem for agents)",
            issued.clone(),
        );
        let solved = Family::<SolvedLabels, Counter>::default();
        registry.register(
            "challenges_solved",
            "Challenges redeemed for a clearance at /cdn-cgi/challenge/, by zone and method (work, wait)",
            solved.clone(),
        );
        let failed = Family::<FailedLabels, Counter>::default();
        registry.register(
            "challenges_failed",
            "Answers refused at /cdn-cgi/challenge/ (the page is shown again), by zone and reason",
            failed.clone(),
        );
        let bypassed = Family::<BypassedLabels, Counter>::default();
        registry.register(
            "challenges_bypassed",
            "Requests a rule would challenge that passed, by zone, rule and reason (cleared: a valid clearance; verified: a verified bot or signed agent; exempt: an exempt path)",
            bypassed.clone(),
        );
        ChallengeMetrics {
            issued,
            solved,
            failed,
            bypassed,
        }
    }

    pub fn issued(&self, zone: &Arc<str>, rule: &Arc<str>, answer: &'static str) {
        self.issued
            .get_or_create(&IssuedLabels {
                zone: Arc::clone(zone),
                rule: Arc::clone(rule),
                answer,
            })
            .inc();
    }

    pub fn solved(&self, zone: &Arc<str>, method: &'static str) {
        self.solved
            .get_or_create(&SolvedLabels {
                zone: Arc::clone(zone),
                method,
            })
            .inc();
    }

    pub fn failed(&self, zone: &Arc<str>, reason: &'static str) {
        self.failed
            .get_or_create(&FailedLabels {
                zone: Arc::clone(zone),
                reason,
            })
            .inc();
    }

    pub fn bypassed(&self, zone: &Arc<str>, rule: &Arc<str>, reason: &'static str) {
        self.bypassed
            .get_or_create(&BypassedLabels {
                zone: Arc::clone(zone),
                rule: Arc::clone(rule),
                reason,
            })
            .inc();
    }
}
