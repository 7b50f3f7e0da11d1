//! Phase: rate limits (1015). Each rule counts requests per key (its characteristics).

use std::hash::Hasher;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderName;

use super::common::{Needs, RuleIds, expression, expression_in, sp};
use crate::Code;
use crate::decision::{AnswerCount, AnswerKey, Decision};
use crate::error::{Diagnostics, ProblemKind};
use crate::expr::{Cx, Filter};
use crate::file::PolicyFile;
use crate::fleet::{FleetCheck, FleetRule, RedisConfig};
use crate::ratelimit::{DEFAULT_MAX_KEYS, Limiter, Outcome, retry_secs};
use crate::trace::{TraceStep, Tracer};
use crate::verdict::Verdict;

/// What a rate limit counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Characteristic {
    Ip,
    Host,
    Path,
    Header(HeaderName),
    /// `signpost.bot.agent`: the verified agent (its signing key, or the verified bot), else
    /// the client address.
    Agent,
}

const CHARACTERISTICS: &[&str] = &[
    "ip.src",
    "http.host",
    "http.request.uri.path",
    "http.request.headers[\"name\"]",
    "signpost.bot.agent",
];

#[derive(Debug)]
pub(crate) struct RateSpec {
    id: Arc<str>,
    filter: Option<Filter>,
    counting: Option<Filter>,
    characteristics: Vec<Characteristic>,
    period: Duration,
    limit: u32,
    mitigation: Duration,
    max_keys: usize,
    fleet: bool,
    fingerprint: String,
    challenge: Option<Challenge>,
}

/// A rate limit whose `action` is `challenge`: over the limit, the request is challenged
/// instead of refused (a cleared client passes; Cloudflare's rate limits do the same).
#[derive(Debug, Clone, Copy)]
struct Challenge {
    /// `None`: the zone's difficulty.
    difficulty: Option<signpost_challenge::Difficulty>,
    /// Whether the rule's expression reads who the request is (it names verified clients).
    names_verified: bool,
}

/// A rate-limit rule with its (possibly inherited) counters.
#[derive(Debug)]
pub(crate) struct RateRule {
    id: Arc<str>,
    filter: Option<Filter>,
    characteristics: Vec<Characteristic>,
    pub(crate) limiter: Arc<Limiter>,
    /// Set for `scope = "fleet"`: counted in Redis, `limiter` only for the local fallback.
    fleet: Option<Arc<FleetRule>>,
    challenge: Option<Challenge>,
    /// Set for a rule with a `counting_expression`: its requests are only checked, and their
    /// answers counted after the origin answers when this matches them.
    counting: Option<Filter>,
}

impl RateRule {
    /// Counts the answer of a request this rule let through under `key`, when the rule's
    /// `counting_expression` matches it (`cx` holds the request and its answer): on this instance
    /// at once, or, for fleet scope, by handing the edge the check for Redis's counting script.
    pub(crate) fn count_answer(
        &self,
        key: AnswerKey,
        cx: &Cx<'_>,
        now: Instant,
    ) -> Option<FleetCheck> {
        if !self.counting.as_ref().is_some_and(|f| f.matches(cx)) {
            return None;
        }
        match (key, &self.fleet) {
            (AnswerKey::Fleet(digest), Some(fleet)) => Some(fleet.counted(digest, true)),
            (AnswerKey::Local(key), _) => {
                let _ = self.limiter.hit(key, now);
                None
            }
            (AnswerKey::Fleet(_), None) => None,
        }
    }
}

/// Checks `[[rate_limit]]` entries.
pub(super) fn validate(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    needs: &mut Needs,
    has_redis: bool,
) -> Vec<RateSpec> {
    let mut rates = Vec::new();
    for r in &file.rate_limit {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        let filter = r.expression.as_ref().and_then(|e| expression(d, e, needs));
        // The answer's fields are read here: this expression runs once the answer is known.
        let counting = r
            .counting_expression
            .as_ref()
            .and_then(|e| expression_in(d, e, needs, true));
        let mut characteristics = Vec::new();
        match &r.characteristics {
            None => characteristics.push(Characteristic::Ip),
            Some(cs) => {
                if cs.get_ref().is_empty() {
                    d.at(
                        ProblemKind::Invalid,
                        sp(cs),
                        "list at least one characteristic, e.g. [\"ip.src\"]",
                    );
                }
                for c in cs.get_ref() {
                    match characteristic(c.get_ref()) {
                        Ok(ch) => {
                            needs.identity_needed |= ch == Characteristic::Agent;
                            characteristics.push(ch);
                        }
                        Err(why) => d.at_with_hint(
                            ProblemKind::Invalid,
                            sp(c),
                            why,
                            Some(format!(
                                "characteristics are {}",
                                CHARACTERISTICS.join(", ")
                            )),
                        ),
                    }
                }
            }
        }
        let period = crate::units::duration(d, Some(&r.period), Duration::from_secs(60));
        let limit = match u32::try_from(*r.requests_per_period.get_ref()) {
            Ok(n) if n > 0 => n,
            _ => {
                d.at(
                    ProblemKind::Invalid,
                    sp(&r.requests_per_period),
                    "requests_per_period must be between 1 and 4294967295",
                );
                1
            }
        };
        let mitigation = match &r.mitigation_timeout {
            // "0s" is allowed here: no extra block beyond the window.
            Some(m) if humantime::parse_duration(m.get_ref().trim()).is_ok_and(|d| d.is_zero()) => {
                Duration::ZERO
            }
            m => crate::units::duration(d, m.as_ref(), Duration::ZERO),
        };
        let max_keys = match &r.max_keys {
            None => DEFAULT_MAX_KEYS,
            Some(n) => match usize::try_from(*n.get_ref()) {
                Ok(k) if (1..=100_000_000).contains(&k) => k,
                _ => {
                    d.at(
                        ProblemKind::Invalid,
                        sp(n),
                        "max_keys must be between 1 and 100000000",
                    );
                    DEFAULT_MAX_KEYS
                }
            },
        };
        let fleet = match &r.scope {
            None => false,
            Some(s) => match s.get_ref().trim() {
                "instance" => false,
                "fleet" => {
                    if !has_redis {
                        d.at_with_hint(
                            ProblemKind::Invalid,
                            sp(s),
                            "a fleet-scope rule needs a `[redis]` section",
                            Some("add `[redis]` with `url = \"redis://127.0.0.1:6379\"`, or use scope = \"instance\"".into()),
                        );
                    }
                    true
                }
                other => {
                    d.at_with_hint(
                        ProblemKind::Invalid,
                        sp(s),
                        format!("unknown scope `{other}`"),
                        Some("scope is \"instance\" (this process counts alone, the default) or \"fleet\" (shared in Redis)".into()),
                    );
                    false
                }
            },
        };
        let challenge = match r.action.as_ref().map(|a| (a, a.get_ref().trim())) {
            None | Some((_, "block")) => None,
            Some((at, "challenge")) => {
                needs.challenge_needed_at.get_or_insert(sp(at));
                if fleet {
                    d.at(
                        ProblemKind::Invalid,
                        sp(at),
                        "a fleet-scope rate limit cannot challenge yet; use scope = \"instance\" or action = \"block\"",
                    );
                }
                Some(Challenge {
                    difficulty: crate::challenge::difficulty(d, r.difficulty.as_ref()),
                    names_verified: filter.as_ref().is_some_and(|f| f.needs_identity),
                })
            }
            Some((at, other)) => {
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(at),
                    format!("unknown rate-limit action `{other}`"),
                    Some("rate limits take \"block\" (1015, the default) or \"challenge\"".into()),
                );
                None
            }
        };
        if let (Some(at), None) = (&r.difficulty, &challenge) {
            d.at(
                ProblemKind::Invalid,
                sp(at),
                "only a rule with action = \"challenge\" takes a difficulty",
            );
        }
        let fingerprint = format!(
            "{id}\u{0}{:?}\u{0}{:?}\u{0}{characteristics:?}\u{0}{period:?}\u{0}{limit}\u{0}{mitigation:?}\u{0}{max_keys}",
            r.expression.as_ref().map(|e| e.get_ref().as_str()),
            r.counting_expression.as_ref().map(|e| e.get_ref().as_str()),
        );
        rates.push(RateSpec {
            id,
            filter,
            counting,
            characteristics,
            period,
            limit,
            mitigation,
            max_keys,
            fleet,
            fingerprint,
            challenge,
        });
    }
    rates
}

fn characteristic(s: &str) -> Result<Characteristic, String> {
    let s = s.trim();
    Ok(match s {
        "ip.src" => Characteristic::Ip,
        "http.host" => Characteristic::Host,
        "http.request.uri.path" => Characteristic::Path,
        "signpost.bot.agent" => Characteristic::Agent,
        _ => {
            let name = s
                .strip_prefix("http.request.headers[\"")
                .and_then(|r| r.strip_suffix("\"]"))
                .ok_or_else(|| format!("unknown characteristic `{s}`"))?;
            Characteristic::Header(
                HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                    .map_err(|_| format!("`{name}` is not a header name"))?,
            )
        }
    })
}

/// What a rate-limit rule does, as the operator's metrics name it: it refuses requests over
/// its limit.
pub(super) const ACTION: &str = "rate_limit";

impl RateRule {
    /// The rule's id.
    pub(super) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// This rule for `spec`, with the counters of the matching rule in `previous` if its
    /// definition did not change.
    pub(super) fn build(
        spec: RateSpec,
        previous: &[RateRule],
        redis: Option<&RedisConfig>,
    ) -> RateRule {
        let limiter = previous
            .iter()
            .find(|p| p.limiter.fingerprint == spec.fingerprint)
            .map(|p| Arc::clone(&p.limiter))
            .unwrap_or_else(|| {
                let limiter = Limiter::new(
                    spec.period,
                    spec.limit,
                    spec.mitigation,
                    spec.max_keys,
                    spec.fingerprint.clone(),
                );
                Arc::new(if spec.counting.is_some() {
                    limiter.counting_answers()
                } else {
                    limiter
                })
            });
        let fleet = match (spec.fleet, redis) {
            (true, Some(redis)) => Some(
                previous
                    .iter()
                    .filter_map(|p| p.fleet.as_ref())
                    .find(|f| Arc::ptr_eq(&f.local, &limiter) && f.prefix() == redis.key_prefix)
                    .map(Arc::clone)
                    .unwrap_or_else(|| {
                        Arc::new(FleetRule::new(
                            spec.id.clone(),
                            &redis.key_prefix,
                            &spec.fingerprint,
                            spec.max_keys,
                            Arc::clone(&limiter),
                        ))
                    }),
            ),
            _ => None,
        };
        RateRule {
            id: spec.id,
            filter: spec.filter,
            characteristics: spec.characteristics,
            limiter,
            fleet,
            counting: spec.counting,
            challenge: spec.challenge,
        }
    }
}

/// Every rule whose expression matches counts the request under its key; the first over its
/// limit refuses with the limiter's real wait. A trace (`T::RECORDS`) counts nothing: it peeks at
/// the counters, and says what the count would reach.
pub(crate) fn check<T: Tracer>(
    rules: &[RateRule],
    cx: &Cx<'_>,
    now: Instant,
    decision: &mut Decision,
    t: &mut T,
) -> ControlFlow<()> {
    for (rule, r) in rules.iter().enumerate() {
        if r.filter.as_ref().is_some_and(|f| !f.matches(cx)) {
            t.rule(|| r.step(cx, false, "the expression does not match: not counted"));
            continue;
        }
        if let Some(fleet) = &r.fleet {
            // Shared key: the same on every instance (no per-process seed).
            let mut bytes = Vec::new();
            key_bytes(&r.characteristics, cx, |b| bytes.extend_from_slice(b));
            let digest = crate::fleet::digest(&bytes);
            match fleet.check(digest, now, r.counting.is_none()) {
                Ok(check) => {
                    t.rule(|| {
                        r.step(
                            cx,
                            true,
                            if r.counting.is_some() {
                                "fleet scope: the edge would ask Redis whether the key is refused, and count the answer if the counting expression matches it"
                            } else {
                                "fleet scope: the edge would ask Redis to count it"
                            },
                        )
                        .param("redis_key", check.key())
                    });
                    decision.fleet.push(check);
                    if r.counting.is_some() {
                        decision.answers.push(AnswerCount {
                            rule,
                            key: AnswerKey::Fleet(digest),
                        });
                    }
                }
                Err(verdict) => {
                    t.rule(|| {
                        r.step(cx, true, "fleet scope: Redis refused this key recently; refused without asking again")
                    });
                    decision.verdict = verdict;
                    decision.rule_id = Some(r.id.clone());
                    decision.answers.clear();
                    return ControlFlow::Break(());
                }
            }
            continue;
        }
        let mut h = r.limiter.key_hasher();
        key_bytes(&r.characteristics, cx, |b| h.write(b));
        let key = h.finish();
        if r.counting.is_some() {
            // Checked, not counted: the answer counts, later, if it matches.
            let outcome = r.limiter.check(key, now);
            t.rule(|| {
                let over = matches!(outcome, Outcome::Limited(_));
                r.step(
                    cx,
                    true,
                    if over {
                        "over the limit of counted answers: refused"
                    } else {
                        "within the limit of counted answers: the answer counts if the counting expression matches it"
                    },
                )
                .param("count", r.limiter.counted(key, now))
            });
            if let Outcome::Limited(wait) = outcome {
                return limited(r, wait, decision);
            }
            decision.answers.push(AnswerCount {
                rule,
                key: AnswerKey::Local(key),
            });
            continue;
        }
        let outcome = if T::RECORDS {
            let (count, outcome) = r.limiter.peek(key, now);
            t.rule(|| {
                let over = matches!(outcome, Outcome::Limited(_));
                r.step(
                    cx,
                    true,
                    if over {
                        "over the limit: refused (a trace counts nothing)"
                    } else {
                        "within the limit (a trace counts nothing)"
                    },
                )
                .param("count", count)
            });
            outcome
        } else {
            r.limiter.hit(key, now)
        };
        if let (Outcome::Limited(_), Some(challenge)) = (outcome, r.challenge) {
            decision.note_challenge(
                &cx.identity,
                challenge.difficulty,
                Some(r.id.clone()),
                "rate_limits",
                challenge.names_verified,
            );
            continue;
        }
        if let Outcome::Limited(wait) = outcome {
            return limited(r, wait, decision);
        }
    }
    ControlFlow::Continue(())
}

/// The rule's action on a key over its limit, for `wait` more: the refusal (1015) with its
/// retry time. Every way a rate limit refuses comes here, so that another action (a challenge)
/// is one change. A request refused is not counted by any rule that counts answers.
fn limited(r: &RateRule, wait: Duration, decision: &mut Decision) -> ControlFlow<()> {
    decision.verdict = Verdict::Refuse {
        code: Code::RATE_LIMITED,
        retry_after: Some(retry_secs(wait)),
    };
    decision.rule_id = Some(r.id.clone());
    decision.answers.clear();
    ControlFlow::Break(())
}

impl RateRule {
    /// The rule as a trace step: its expression, the key the request is counted under (each
    /// characteristic with its value), and its limits.
    fn step(&self, cx: &Cx<'_>, matched: bool, description: &str) -> TraceStep {
        let action = if self.challenge.is_some() {
            "rate_limit_challenge"
        } else {
            "rate_limit"
        };
        let step = TraceStep::rule(&self.id, matched, description).action(action);
        let mut step = match &self.filter {
            Some(f) => step.filter(f, cx),
            None => TraceStep {
                expression: Some("true".to_owned()),
                ..step
            },
        };
        let (period_ms, limit, mitigation_ms) = self.limiter.limits();
        if let Some(counting) = &self.counting {
            step = step.param("counting_expression", &*counting.text);
        }
        if matched {
            let key: Vec<String> = self
                .characteristics
                .iter()
                .map(|c| match c {
                    Characteristic::Ip => format!("ip.src={}", cx.client_ip),
                    Characteristic::Host => format!("http.host={}", cx.host),
                    Characteristic::Path => format!("http.request.uri.path={}", cx.path()),
                    Characteristic::Header(name) => {
                        format!(
                            "http.request.headers[\"{}\"]={}",
                            name.as_str(),
                            cx.header(name)
                        )
                    }
                    Characteristic::Agent => match cx.identity.agent_key() {
                        Some((agent, key)) => format!("signpost.bot.agent={agent} {key}"),
                        None => format!("signpost.bot.agent=ip.src {}", cx.client_ip),
                    },
                })
                .collect();
            step = step.param("key", key.join(", "));
        }
        step.param(
            "period",
            humantime::format_duration(Duration::from_millis(period_ms)),
        )
        .param("requests_per_period", limit)
        .param(
            "mitigation_timeout",
            humantime::format_duration(Duration::from_millis(mitigation_ms)),
        )
        .param(
            "scope",
            if self.fleet.is_some() {
                "fleet"
            } else {
                "instance"
            },
        )
    }
}

/// Feeds the key of a request, the characteristics' values each followed by a separator (so
/// that ("ab","c") and ("a","bc") differ), to `out`.
fn key_bytes(characteristics: &[Characteristic], cx: &Cx<'_>, mut out: impl FnMut(&[u8])) {
    for c in characteristics {
        match c {
            Characteristic::Ip => match cx.client_ip {
                std::net::IpAddr::V4(v4) => out(&v4.octets()),
                std::net::IpAddr::V6(v6) => out(&v6.octets()),
            },
            Characteristic::Host => out(cx.host.as_bytes()),
            Characteristic::Path => out(cx.path().as_bytes()),
            Characteristic::Header(name) => out(cx.header(name).as_bytes()),
            // The three kinds of key are told apart by their first byte (a URL, "bot", or a
            // raw address after 0): a bot's name cannot collide with an address.
            Characteristic::Agent => match cx.identity.agent_key() {
                Some((agent, key)) => {
                    out(agent.as_bytes());
                    out(&[0xfe]);
                    out(key.as_bytes());
                }
                None => {
                    out(&[0]);
                    match cx.client_ip {
                        std::net::IpAddr::V4(v4) => out(&v4.octets()),
                        std::net::IpAddr::V6(v6) => out(&v6.octets()),
                    }
                }
            },
        }
        out(&[0xff]);
    }
}
