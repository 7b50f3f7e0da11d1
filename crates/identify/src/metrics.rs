//! Identification's own metric families: requests by the bot they are or claim to be,
//! signatures by outcome, and the outcomes of the background work (key directory fetches,
//! published list refreshes, reverse DNS checks). The edge registers them into its registry
//! ([`IdentityMetrics::register`]); nothing here knows the edge's other metrics.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use signpost_policy::{Identity, SignatureOutcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BotLabels {
    /// A catalog name: at most `signpost_policy::MAX_BOTS` of them, never request text.
    bot: Arc<str>,
    /// Who runs it, as the catalog names them (the AI referrals' `operator` uses the same
    /// names, so that crawls and referrals can be put side by side per operator).
    operator: Arc<str>,
    category: Arc<str>,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignatureLabels {
    outcome: &'static str,
    /// Why a signature is invalid or unverified: a fixed set of names.
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// A counter by outcome that a background task keeps (a key directory fetch, a reverse DNS
/// check, an IP list refresh): [`IdentityMetrics`] registers it; a test can make one of its own
/// and read it back.
#[derive(Clone, Debug, Default)]
pub struct OutcomeCounter(Family<OutcomeLabel, Counter>);

impl OutcomeCounter {
    /// Counts one `outcome`: a fixed set of names, so the family stays bounded.
    pub fn inc(&self, outcome: &'static str) {
        self.0.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// How many times `outcome` was counted.
    pub fn get(&self, outcome: &'static str) -> u64 {
        self.0.get_or_create(&OutcomeLabel { outcome }).get()
    }
}

/// Every metric family of identification.
pub struct IdentityMetrics {
    bots: Family<BotLabels, Counter>,
    signatures: Family<SignatureLabels, Counter>,
    /// Key directory fetches by outcome (`crate::keydir`).
    pub key_directory_fetches: OutcomeCounter,
    /// Refreshes of published bot IP lists by outcome (`crate::iplists`).
    pub ip_list_refreshes: OutcomeCounter,
    /// Reverse DNS checks of client addresses by outcome (`crate::rdns`).
    pub reverse_dns_lookups: OutcomeCounter,
}

impl IdentityMetrics {
    pub fn register(registry: &mut Registry) -> IdentityMetrics {
        let bots = Family::<BotLabels, Counter>::default();
        registry.register(
            "bot_requests",
            "Requests from known bots, by bot, operator, category and status (verified, pending, \
             failed, unverifiable)",
            bots.clone(),
        );
        let signatures = Family::<SignatureLabels, Counter>::default();
        registry.register(
            "signature_verifications",
            "Web Bot Auth signatures, by outcome (verified, invalid, unverified) and reason",
            signatures.clone(),
        );
        let key_directory_fetches = OutcomeCounter::default();
        registry.register(
            "key_directory_fetches",
            "Web Bot Auth key directory fetches by outcome: ok, or why it failed (status, \
             redirect, too_large, timeout, content_type, not_jwks, too_many_keys, \
             private_address, dns, network, not_https)",
            key_directory_fetches.0.clone(),
        );
        let reverse_dns_lookups = OutcomeCounter::default();
        registry.register(
            "reverse_dns_lookups",
            "Forward-confirmed reverse DNS checks of client addresses by outcome: confirmed, \
             unconfirmed (a name that does not resolve back), no_name, failed (timeout or \
             resolver error), busy (not started: too many in flight)",
            reverse_dns_lookups.0.clone(),
        );
        let ip_list_refreshes = OutcomeCounter::default();
        registry.register(
            "ip_list_refreshes",
            "Refreshes of published bot IP lists by outcome: ok, fetch_failed, timeout, invalid \
             (the last good list is kept on every failure)",
            ip_list_refreshes.0.clone(),
        );
        IdentityMetrics {
            bots,
            signatures,
            key_directory_fetches,
            ip_list_refreshes,
            reverse_dns_lookups,
        }
    }

    /// Counts a request the policy identified as someone.
    pub fn observe(&self, identity: &Identity) {
        if let Some(bot) = &identity.bot {
            self.bots
                .get_or_create(&BotLabels {
                    bot: Arc::clone(&bot.name),
                    operator: Arc::clone(&bot.operator),
                    category: Arc::clone(&bot.category),
                    status: identity.status.as_str(),
                })
                .inc();
        }
        if identity.signature.outcome != SignatureOutcome::Absent {
            self.signatures
                .get_or_create(&SignatureLabels {
                    outcome: identity.signature.outcome.as_str(),
                    reason: identity.signature.reason,
                })
                .inc();
        }
    }
}
