//! The decision's phases: the list, in the order they run, and each phase's own code with the
//! words its trace step says.

use std::ops::ControlFlow;
use std::time::Instant;

use super::CompiledPolicy;
use crate::Code;
use crate::crawl::{CrawlOutcome, PaymentHeaders};
use crate::decision::{Decision, RequestFacts};
use crate::expr::{Cx, Field};
use crate::host::{HostName, ParsedHost};
use crate::identity::Evidence;
use crate::rules::{self, Trust};
use crate::trace::{TraceStep, Tracer};
use crate::verdict::Verdict;

/// A phase skipped because an access `allow` rule vouched for the client.
const VOUCHED: &str = "skipped: an access allow rule vouched for the client";
/// A phase the policy does not configure.
const NOT_CONFIGURED: &str = "not configured";

impl CompiledPolicy {
    /// The policy's phases, in the order they run; the first to refuse decides. An access
    /// `allow` vouches for the client, skipping the browser check, the custom rules and crawl
    /// control; a custom `allow` ends the phases. Each phase is the method of its name, and
    /// [`PHASES`](crate::PHASES) lists the same names in the same order (a [`Recorder`] checks
    /// it on every trace); `docs/policy.md` draws the same list.
    ///
    /// `t` observes: [`NoTrace`] for the ordinary decision (nothing is built for it), a
    /// [`Recorder`] for a trace.
    ///
    /// [`NoTrace`]: crate::trace::NoTrace
    /// [`Recorder`]: crate::trace::Recorder
    pub(super) fn phases<T: Tracer>(
        &self,
        facts: &RequestFacts<'_>,
        evidence: &dyn Evidence,
        now: Instant,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        let host = ParsedHost::new(facts.host);
        tls_sni(facts, &host, d, t)?; // 1013
        let zone = self.host_routing(&host, d, t)?; // 1001, 1003
        let mut cx = self.request_fields(facts, &host, d, t);
        self.identify(&mut cx, evidence, d, t);
        let trust = self.access_rules(&cx, d, t)?; // 1006, 1005, 1009
        self.browser_check(trust, &cx, d, t)?; // 1010
        self.hotlink(zone, &cx, d, t)?; // 1011
        self.legal_rules(&cx, d, t)?; // 1026
        self.custom_rules(trust, zone, &cx, d, t)?; // 1020, divert
        self.crawl_control(trust, zone, facts, &cx, d, t)?; // 1020, 402, 400, 403
        self.rate_limits(&cx, now, d, t)?; // 1015
        self.challenge(zone, facts, d, t) // challenge
    }

    /// Host routing: the zone serving the Host; 1003 for an IP literal no zone lists, 1001 for
    /// a name no zone serves.
    fn host_routing<T: Tracer>(
        &self,
        host: &ParsedHost<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<(), usize> {
        t.phase(|| {
            TraceStep::phase(
                "host_routing",
                "the zone serving the Host (1003 for an IP no zone lists, 1001 for a name no zone serves)",
            )
            .field(&Field::Host.name(), host.normalized().into_owned())
        });
        let zone = self.hosts.lookup_name(host.name);
        d.zone = zone.map(crate::ZoneId);
        t.rule(|| match zone.and_then(|z| self.zones.get(z)) {
            Some(z) => TraceStep::rule(&z.name, true, "this zone serves the host")
                .action("route")
                .param("zone", &z.name)
                .param("origin", z.origin.to_string()),
            None => TraceStep::rule("host_routing", false, "no zone serves this host"),
        });
        match zone {
            Some(zone) => ControlFlow::Continue(zone),
            None => {
                d.verdict = match host.name {
                    HostName::Ip(_) => Verdict::refuse(Code::DIRECT_IP_ACCESS),
                    HostName::Name(_) => Verdict::refuse(Code::DNS_RESOLUTION_ERROR),
                };
                ControlFlow::Break(())
            }
        }
    }

    /// What the rules of the later phases read about the request (not a phase: nothing to
    /// trace). A trace may assume the client's country and AS number.
    fn request_fields<'r, T: Tracer>(
        &'r self,
        facts: &'r RequestFacts<'r>,
        host: &ParsedHost<'r>,
        d: &Decision,
        t: &T,
    ) -> Cx<'r> {
        let r = &self.rules;
        let cx = Cx::with_host(
            facts,
            host.normalized(),
            d.client_ip,
            r.country_db.as_ref(),
            r.asn_db.as_ref(),
        );
        if T::RECORDS {
            let (country, asn) = t.assumed_geo();
            cx.assume_geo(country, asn);
        }
        cx
    }

    /// Identification: who is asking, worked out once for every later phase and for the edge.
    fn identify<T: Tracer>(
        &self,
        cx: &mut Cx<'_>,
        evidence: &dyn Evidence,
        d: &mut Decision,
        t: &mut T,
    ) {
        let Some(identification) = &self.identification else {
            t.phase(|| TraceStep::phase("identify", "not configured: no rule asks who is asking"));
            return;
        };
        let user_agent = cx.header(http::header::USER_AGENT);
        let identity = crate::identity::identify(
            &identification.catalog,
            user_agent.as_bytes(),
            cx.client_ip,
            evidence,
        );
        drop(user_agent);
        cx.identity = identity;
        t.phase(|| {
            let identity = &cx.identity;
            let step = TraceStep::phase(
                "identify",
                "the Web Bot Auth signature, and the known bot the request is or claims to be, verified",
            )
            .read(&Field::BotSignature, cx)
            .read(&Field::BotClaimed, cx)
            .field("bot status", identity.status.as_str());
            match identity.signature.reason {
                "" => step,
                reason => step.field("signature reason", reason),
            }
        });
        // Most requests are nobody in particular, which the decision already says: no copy.
        if !cx.identity.is_nobody() {
            d.identity = cx.identity.clone();
        }
    }

    /// Access rules: allow rules vouch for the client; blocks by IP, AS number and country.
    fn access_rules<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<(), Trust> {
        t.phase(|| self.rules.access.phase_step(cx));
        self.rules.access.check(cx, d, t)
    }

    /// The browser check, unless an access rule vouched for the client.
    fn browser_check<T: Tracer>(
        &self,
        trust: Trust,
        cx: &Cx<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        const NAME: &str = "browser_check";
        let Some(browser) = &self.rules.browser else {
            t.phase(|| TraceStep::phase(NAME, NOT_CONFIGURED));
            return ControlFlow::Continue(());
        };
        if trust == Trust::Allowed {
            t.phase(|| TraceStep::phase(NAME, VOUCHED));
            return ControlFlow::Continue(());
        }
        t.phase(|| TraceStep::phase(NAME, "an empty or listed User-Agent is refused (1010)"));
        browser.check(cx, d, t)
    }

    /// Hotlink protection of the zone's files.
    fn hotlink<T: Tracer>(
        &self,
        zone: usize,
        cx: &Cx<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        let r = &self.rules;
        let Some(hotlink) = &r.hotlink else {
            t.phase(|| TraceStep::phase("hotlink", NOT_CONFIGURED));
            return ControlFlow::Continue(());
        };
        t.phase(|| {
            TraceStep::phase(
                "hotlink",
                "a listed file type requested from a foreign page is refused (1011)",
            )
        });
        hotlink.check(cx, r.zone_hosts.get(zone), d, t)
    }

    /// Legal rules: every client, vouched for or not.
    fn legal_rules<T: Tracer>(&self, cx: &Cx<'_>, d: &mut Decision, t: &mut T) -> ControlFlow<()> {
        t.phase(|| TraceStep::phase("legal_rules", "any match refuses (1026)"));
        self.rules.legal.check(cx, d, t)
    }

    /// Custom rules, unless an access rule vouched for the client.
    fn custom_rules<T: Tracer>(
        &self,
        trust: Trust,
        zone: usize,
        cx: &Cx<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        if trust == Trust::Allowed {
            t.phase(|| TraceStep::phase("custom_rules", VOUCHED));
            return ControlFlow::Continue(());
        }
        t.phase(|| TraceStep::phase("custom_rules", "the first match in file order: block refuses (1020), allow ends the phases, divert ends them and sends the request to the zone's other origin, log notes and goes on"));
        let diverts = self.zones.get(zone).map_or(&[][..], |z| &z.diverts);
        self.rules.custom.check(cx, diverts, d, t)
    }

    /// Crawl control: the zone's action for the known crawler the request is or claims to be
    /// (allow, block, or charge with pay per crawl's exchange). After the custom rules, so that
    /// the operator's own `allow` or `block` for a request comes first; before the rate limits,
    /// so that a crawler's refused requests cost the origin's budget nothing. Skipped when an
    /// access rule vouched for the client.
    fn crawl_control<T: Tracer>(
        &self,
        trust: Trust,
        zone: usize,
        facts: &RequestFacts<'_>,
        cx: &Cx<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        const NAME: &str = "crawl_control";
        if trust == Trust::Allowed {
            t.phase(|| TraceStep::phase(NAME, VOUCHED));
            return ControlFlow::Continue(());
        }
        let Some(config) = &self.zones[zone].crawl else {
            t.phase(|| TraceStep::phase(NAME, NOT_CONFIGURED));
            return ControlFlow::Continue(());
        };
        let path = facts.uri.split('?').next().unwrap_or("");
        let exact = crate::crawl::payment_header(facts.headers, "crawler-exact-price");
        let max = crate::crawl::payment_header(facts.headers, "crawler-max-price");
        let headers = PaymentHeaders {
            exact: exact.as_deref(),
            max: max.as_deref(),
        };
        let step = crate::crawl::control(config, &cx.identity, path, headers);
        t.phase(|| {
            TraceStep::phase(
                NAME,
                "the zone's action for a known crawler: allow, block (402 or 403), charge (pay per crawl), or challenge",
            )
        });
        t.rule(|| match &step {
            None => TraceStep::rule(
                NAME,
                false,
                "not a known crawler, or a path crawl control never refuses",
            ),
            Some(step) => {
                let refused = matches!(step.outcome, CrawlOutcome::Refused(_));
                TraceStep::rule(NAME, refused, step.outcome.as_str())
                    .action(step.action.as_str())
                    .param("crawler", &*step.crawler.name)
                    .param("impostor", if step.impostor { "true" } else { "false" })
            }
        });
        let Some(step) = step else {
            return ControlFlow::Continue(());
        };
        let refused = match &step.outcome {
            CrawlOutcome::Refused(refusal) => Some(refusal.code()),
            _ => None,
        };
        if step.outcome == CrawlOutcome::Challenged {
            // Crawl control's actions are about known bots: they name verified ones too.
            d.note_challenge(&cx.identity, None, None, NAME, true);
        }
        d.crawl = Some(Box::new(step));
        match refused {
            Some(code) => {
                d.verdict = Verdict::refuse(code);
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    }

    /// The challenge a rule asked for, if one did: a verified client a rule does not name passes
    /// (noted when the rule asked), so does a path of the zone's `exempt_paths`; otherwise the
    /// verdict is a challenge at the rule's difficulty (the zone's when it names none), and the
    /// edge lets through only a client with a clearance (`crate::challenge`).
    fn challenge<T: Tracer>(
        &self,
        zone: usize,
        facts: &RequestFacts<'_>,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        const NAME: &str = "challenge";
        if d.challenge.is_none() && self.zones[zone].challenge.under_attack {
            // Under attack: the zone asks what no rule did, for every request; a verified
            // client passes as it does a rule that does not name it.
            let identity = std::mem::take(&mut d.identity);
            d.note_challenge(&identity, None, None, "under_attack", false);
            d.identity = identity;
        }
        let Some(note) = d.challenge.as_mut() else {
            t.phase(|| TraceStep::phase(NAME, "no rule asked for a challenge"));
            return ControlFlow::Continue(());
        };
        t.phase(|| {
            TraceStep::phase(
                NAME,
                "a challenge a rule asked for: verified clients (unless the rule names them) and exempt paths pass; the edge lets a client with a clearance through",
            )
        });
        let config = &self.zones[zone].challenge;
        let path = facts.uri.split('?').next().unwrap_or("");
        if note.bypass.is_none() && config.is_exempt(path) {
            note.bypass = Some(crate::challenge::ChallengeBypass::Exempt);
        }
        let note = &*note;
        let difficulty = note.difficulty.unwrap_or(config.difficulty);
        t.rule(|| {
            let (matched, description) = match note.bypass {
                Some(crate::challenge::ChallengeBypass::Verified) => (
                    false,
                    "a verified client, and the rule does not name verified clients: passes",
                ),
                Some(crate::challenge::ChallengeBypass::Exempt) => {
                    (false, "the path is one of the zone's exempt_paths: passes")
                }
                None => (
                    true,
                    "challenged: the edge forwards only with a valid clearance",
                ),
            };
            TraceStep::rule(note.label(), matched, description)
                .action("challenge")
                .param("phase", note.phase)
                .param("difficulty", difficulty.get())
                .field("http.request.uri.path", path)
        });
        if note.bypass.is_some() {
            return ControlFlow::Continue(());
        }
        d.rule_id = note.rule.clone();
        d.verdict = Verdict::Challenge { difficulty };
        ControlFlow::Break(())
    }

    /// Rate limits: every rule whose expression matches counts the request.
    fn rate_limits<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        now: Instant,
        d: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        t.phase(|| TraceStep::phase("rate_limits", "every rule whose expression matches counts the request under its key; the first over its limit refuses (1015)"));
        rules::check_rate_limits(&self.rules.rate, cx, now, d, t)
    }
}

/// Over TLS, the Host must name the server the handshake asked for (1013): a request routed by
/// one name under a certificate chosen for another is refused. Case, a port and a trailing dot
/// do not matter.
fn tls_sni<T: Tracer>(
    facts: &RequestFacts<'_>,
    host: &ParsedHost<'_>,
    d: &mut Decision,
    t: &mut T,
) -> ControlFlow<()> {
    t.phase(|| {
        let step = TraceStep::phase(
            "tls_sni",
            "over TLS, the Host must name the server the handshake asked for (1013)",
        );
        match facts.sni {
            Some(sni) => step.field("tls.sni", sni).field("host", host.shown),
            None => TraceStep {
                description: "not TLS, or no SNI: nothing to compare".into(),
                ..step
            },
        }
    });
    tls_host_matches_sni(facts.sni, host, d)
}

/// Whether the Host names the server the TLS handshake asked for (`sni`); refuses with 1013 when
/// it does not.
pub(super) fn tls_host_matches_sni(
    sni: Option<&str>,
    host: &ParsedHost<'_>,
    d: &mut Decision,
) -> ControlFlow<()> {
    let Some(sni) = sni else {
        return ControlFlow::Continue(());
    };
    let host = host.shown.strip_suffix('.').unwrap_or(host.shown);
    let sni = sni.strip_suffix('.').unwrap_or(sni);
    if host.eq_ignore_ascii_case(sni) {
        ControlFlow::Continue(())
    } else {
        d.verdict = Verdict::refuse(Code::TLS_HOST_MISMATCH);
        ControlFlow::Break(())
    }
}
