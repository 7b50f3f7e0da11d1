//! The edge's steps for a request, in the order they run: declared once, here. The live edge
//! (`pipeline.rs`, `request_filter`) runs them in this order, and a trace (`operator/trace.rs`) lists
//! them in this order, runs the ones a synthetic request can go through, and lists every step
//! after the one that answered as not reached. The policy's phases are one step, [`Step::Decide`]
//! (a trace shows them one by one: `signpost_policy::PHASES`).

/// One step of `request_filter`; the first that answers ends the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// CONNECT, a target over 16 KiB, headers over 32 KiB: 405, 414, 431.
    HeadLimits,
    /// `/cdn-cgi/error/<code>`, on every host: that code.
    ErrorPage,
    /// `/cdn-cgi/challenge/verify` and `/cdn-cgi/challenge/wait` on a zone's host: a
    /// challenge's answer redeemed (303 with a clearance) or the page again.
    ChallengeEndpoint,
    /// The policy's phases, then fleet rate limits with Redis's answers.
    Decide,
    /// A challenged request: passes with a valid clearance, else the page or the problem (403).
    Challenge,
    /// TRACE/TRACK, a declared body over `max_body_size`: 405, 413.
    ZoneLimits,
    /// A plain-HTTP request on a zone with `redirect_https`: 301 (GET, HEAD) or 308.
    HttpsRedirect,
    /// The start of a chunked body, parsed before the origin sees it: 400, 408.
    PrereadBody,
    /// The client's share of origin work (`max_in_flight_per_client`): 429 (1015).
    TakeInFlight,
    /// `/robots.txt` on a zone that manages it with `replace`: answered here.
    RobotsTxt,
    /// Markdown on a converting zone: forwarded and converted here; every other request is
    /// proxied.
    ServeMarkdown,
}

/// Every step, in the order `request_filter` runs them.
pub const STEPS: &[Step] = &[
    Step::HeadLimits,
    Step::ErrorPage,
    Step::ChallengeEndpoint,
    Step::Decide,
    Step::Challenge,
    Step::ZoneLimits,
    Step::HttpsRedirect,
    Step::PrereadBody,
    Step::TakeInFlight,
    Step::RobotsTxt,
    Step::ServeMarkdown,
];

impl Step {
    /// The step's stable name (a trace's `step_name`).
    pub const fn name(self) -> &'static str {
        match self {
            Step::HeadLimits => "head_limits",
            Step::ErrorPage => "error_page",
            Step::ChallengeEndpoint => "challenge_endpoint",
            Step::Decide => "decide",
            Step::Challenge => "challenge_clearance",
            Step::ZoneLimits => "zone_limits",
            Step::HttpsRedirect => "https_redirect",
            Step::PrereadBody => "preread_body",
            Step::TakeInFlight => "take_in_flight",
            Step::RobotsTxt => "robots_txt",
            Step::ServeMarkdown => "serve_markdown",
        }
    }

    /// What the step refuses or answers, in a trace's words.
    pub const fn description(self) -> &'static str {
        match self {
            Step::HeadLimits => {
                "CONNECT (405), a target over 16 KiB (414), headers over 32 KiB (431)"
            }
            Step::ErrorPage => "/cdn-cgi/error/<code> answers that code, on every host",
            Step::ChallengeEndpoint => {
                "/cdn-cgi/challenge/verify and /wait redeem a challenge's answer for a clearance"
            }
            Step::Decide => "the policy's phases",
            Step::Challenge => {
                "a challenged request passes with a valid clearance; otherwise the page (browsers) or the challenge_required problem (agents), 403"
            }
            Step::ZoneLimits => {
                "TRACE and TRACK unless the zone allows them (405), a declared body over max_body_size (413)"
            }
            Step::HttpsRedirect => {
                "plain HTTP on a zone with redirect_https, but ACME's challenge path (301, 308)"
            }
            Step::PrereadBody => "a chunked body that cannot be parsed (400, 408)",
            Step::TakeInFlight => {
                "the client's requests in flight over max_in_flight_per_client (429, 1015)"
            }
            Step::RobotsTxt => "/robots.txt on a zone that replaces it, answered by the edge",
            Step::ServeMarkdown => "Markdown on a converting zone, converted by the edge",
        }
    }

    /// Whether a trace runs the step. The ones it does not depend on the request's body, on the
    /// client's other requests in flight, or on the origin, which a trace has none of: a trace
    /// ends where they begin, and does not list them.
    pub const fn traced(self) -> bool {
        matches!(
            self,
            Step::HeadLimits
                | Step::ErrorPage
                | Step::ChallengeEndpoint
                | Step::Decide
                | Step::Challenge
                | Step::ZoneLimits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_is_listed_once_and_the_traced_ones_come_first() {
        let names: Vec<&str> = STEPS.iter().map(|s| s.name()).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        // A trace stops at the first step it cannot run: every traced step comes before it.
        let first_untraced = STEPS.iter().position(|s| !s.traced()).unwrap();
        assert!(STEPS[first_untraced..].iter().all(|s| !s.traced()));
    }
}
