//! What the edge tells the policy about a request, and what the policy answers.

use std::net::IpAddr;
use std::sync::Arc;

use crate::fleet::FleetCheck;
use crate::policy::ZoneId;
use crate::verdict::Verdict;

/// The facts about one request that the policy decides on. All borrowed: building one costs
/// nothing.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The TCP peer address.
    pub peer: IpAddr,
    /// The Host header (or HTTP/2 `:authority`) as received, possibly with a port.
    pub host: &'a str,
    /// The request method, e.g. `GET`.
    pub method: &'a str,
    /// The request target as received: `path?query`.
    pub uri: &'a str,
    /// Whether the client connection is TLS.
    pub tls: bool,
    /// The TLS SNI name, when there is one.
    pub sni: Option<&'a str>,
    /// The request headers.
    pub headers: &'a http::HeaderMap,
}

/// A request that a rate limit counting answers let through: its answer is counted, if the
/// rule's `counting_expression` matches it, by [`CompiledPolicy::count_answers`] of the policy
/// that decided the request, once the answer is known.
///
/// [`CompiledPolicy::count_answers`]: crate::CompiledPolicy::count_answers
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerCount {
    /// The rule's place among the policy's rate limits.
    pub(crate) rule: usize,
    pub(crate) key: AnswerKey,
}

/// Where a rule counting answers counts one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerKey {
    /// The key in the rule's own limiter (instance scope).
    Local(u64),
    /// The digest of the key shared in Redis (fleet scope).
    Fleet([u8; 16]),
}

/// The policy's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The client address the policy used: the peer, or what a trusted proxy said.
    pub client_ip: IpAddr,
    /// The zone serving the host: [`CompiledPolicy::zone`](crate::CompiledPolicy::zone) gives it.
    pub zone: Option<ZoneId>,
    /// Proxy or refuse.
    pub verdict: Verdict,
    /// The id of the rule that decided, if a rule did (host routing has none).
    pub rule_id: Option<Arc<str>>,
    /// Ids of rules with action `log` that matched, in evaluation order. Empty (and
    /// allocation-free) when none did.
    pub logged: Vec<Arc<str>>,
    /// Fleet-scope rate limits that count this request, in file order: the edge asks Redis for
    /// each (while the verdict is `Proxy`), and the first refusal decides; it counts them through
    /// [`Decision::count_in_fleet`]. Empty (and allocation-free) when none applies.
    pub fleet: Vec<FleetCheck>,
    /// Rate limits that count this request's answer (`counting_expression`): the edge hands
    /// them back with the answer to [`CompiledPolicy::count_answers`] once it is known. Empty
    /// (and allocation-free) when none applies, and emptied when the request is refused.
    ///
    /// [`CompiledPolicy::count_answers`]: crate::CompiledPolicy::count_answers
    pub answers: Vec<AnswerCount>,
    /// Set when a custom rule diverted the request: the index, in its zone's
    /// [`diverts`](crate::Zone::diverts), of the origin it goes to instead of the zone's.
    pub divert: Option<usize>,
    /// Who the request is, when the policy identifies requests (`[bots]`, `[[bot]]`, or a rule
    /// reading a bot field); nobody in particular otherwise.
    pub identity: crate::identity::Identity,
    /// What crawl control made of a known crawler's request, when its zone has `[zone.crawl]`.
    /// Boxed: most requests are no crawler's.
    pub crawl: Option<Box<crate::crawl::CrawlStep>>,
    /// The challenge a rule asked for, when one did: the verdict's when it challenges, or why
    /// the request passes without one (a verified client, an exempt path).
    pub challenge: Option<crate::challenge::ChallengeNote>,
}

impl Decision {
    /// Notes a challenge asked by `phase`'s rule `rule` at `difficulty`. The first challenge noted
    /// stands, unless a later one asks a higher difficulty. A verified client passes a rule that
    /// does not name verified clients (`names_verified`); that is noted as a bypass, so the edge can
    /// count it, unless a challenge already stands.
    pub(crate) fn note_challenge(
        &mut self,
        identity: &crate::identity::Identity,
        difficulty: Option<signpost_challenge::Difficulty>,
        rule: Option<Arc<str>>,
        phase: &'static str,
        names_verified: bool,
    ) {
        let bypass = (!names_verified && crate::challenge::is_verified(identity))
            .then_some(crate::challenge::ChallengeBypass::Verified);
        let replace = match &self.challenge {
            None => true,
            Some(old) if old.bypass.is_some() => bypass.is_none(),
            Some(old) => {
                bypass.is_none()
                    && difficulty.is_some()
                    && old.difficulty.is_none_or(|o| difficulty > Some(o))
            }
        };
        if replace {
            self.challenge = Some(crate::challenge::ChallengeNote {
                difficulty,
                rule,
                phase,
                bypass,
            });
        }
    }

    /// The decision's fleet rate limits, to be counted one by one with Redis's answers: see
    /// [`FleetCount`]. Takes the checks out of [`Decision::fleet`].
    pub fn count_in_fleet(&mut self) -> FleetCount<'_> {
        let pending = std::mem::take(&mut self.fleet).into_iter();
        FleetCount {
            decision: self,
            pending,
            asked: None,
        }
    }
}

/// The fleet step of a decision, without I/O: the edge asks Redis about each check this hands
/// out and reports the verdict back, until the decision is final.
///
/// The rule: fleet rate limits are counted in file order, one Redis call per rule that counts
/// the request, while nothing has refused it; the first refusal decides (its rule becomes the
/// decision's rule). When Redis cannot answer, the verdict reported is the check's
/// [`fallback`](FleetCheck::fallback), and it decides the same way.
///
/// ```text
/// let mut count = decision.count_in_fleet();
/// while let Some(check) = count.next_check() {
///     let verdict = /* Redis's answer through check.shared(..), or check.fallback(..) */;
///     count.answer(verdict);
/// }
/// ```
#[derive(Debug)]
pub struct FleetCount<'d> {
    decision: &'d mut Decision,
    pending: std::vec::IntoIter<FleetCheck>,
    /// The check last handed out, until its verdict is reported.
    asked: Option<FleetCheck>,
}

impl FleetCount<'_> {
    /// The next check to ask Redis about, or `None` once the decision is final (every check
    /// was counted, or one refused the request, or the decision already refused it).
    ///
    /// A check handed out and not answered decides nothing: the next call moves on.
    pub fn next_check(&mut self) -> Option<&FleetCheck> {
        // A challenged request is counted too: a refusal there still wins over the challenge.
        if matches!(self.decision.verdict, Verdict::Refuse { .. }) {
            self.asked = None;
            return None;
        }
        self.asked = self.pending.next();
        self.asked.as_ref()
    }

    /// Reports the verdict for the check [`next_check`](Self::next_check) last handed out:
    /// Redis's answer, or the fallback when Redis had none. A refusal decides the request.
    pub fn answer(&mut self, verdict: Verdict) {
        let Some(check) = self.asked.take() else {
            return;
        };
        if verdict != Verdict::Proxy {
            self.decision.verdict = verdict;
            self.decision.rule_id = Some(check.rule_id().clone());
            // A refused request's answer is the refusal: no rule counts it.
            self.decision.answers.clear();
        }
    }
}
