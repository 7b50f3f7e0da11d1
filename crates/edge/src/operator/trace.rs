//! Traces of synthetic requests: `signpost trace`, `signpost test` and the admin listener's
//! `/trace` all build a request here, run the edge's steps on it (the policy's through
//! [`CompiledPolicy::trace`], the same phases as every real request) and render the answer the
//! client would get through [`Answer::new`], the code that answers real requests.
//!
//! A trace changes nothing: the policy peeks at its rate-limit counters, Redis is not asked.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Instant;

use anyhow::{Context, bail};
use http::{HeaderMap, HeaderName, HeaderValue};
use pingora::http::RequestHeader;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use signpost_policy::{CompiledPolicy, RequestFacts, Trace, TraceStep, Verdict, ZoneId};

use crate::request::limits::Head;
use crate::request::ray::RayId;
use crate::steps::{STEPS, Step};

/// The client address of a synthetic request that names none (TEST-NET-1, RFC 5737).
pub const DEFAULT_CLIENT_IP: &str = "192.0.2.1";

/// A synthetic request as a test case or the admin endpoint writes it: the flags of
/// `signpost trace`, as data.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// `http://host[:port]/path?query` or `https://...`.
    pub url: String,
    /// The method (default `GET`).
    #[serde(default)]
    pub method: Option<String>,
    /// Header lines, `Name: value` (a `Host` line replaces the URL's authority).
    #[serde(default)]
    pub headers: Vec<String>,
    /// The TCP peer (default [`DEFAULT_CLIENT_IP`]).
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// The client's country, instead of the country database's answer.
    #[serde(default)]
    pub country: Option<String>,
    /// The client's AS number, instead of the ASN database's answer.
    #[serde(default)]
    pub asn: Option<u32>,
    /// Whether the client connection is TLS (also implied by `https://`).
    #[serde(default)]
    pub tls: bool,
    /// The TLS SNI name (default: the URL's host, over TLS).
    #[serde(default)]
    pub sni: Option<String>,
}

impl RequestSpec {
    /// The header lines as bytes.
    pub fn header_lines(&self) -> Vec<Vec<u8>> {
        self.headers.iter().map(|h| h.as_bytes().to_vec()).collect()
    }
}

/// A synthetic request, checked: what the edge would have read off the wire.
#[derive(Debug)]
pub struct Synthetic {
    pub method: String,
    /// The URL as given (for display).
    pub url: String,
    /// The Host as sent: the URL's authority, or the `Host` line.
    pub host: String,
    /// Path and query.
    pub target: String,
    pub headers: HeaderMap,
    pub peer: IpAddr,
    pub tls: bool,
    pub sni: Option<String>,
    pub country: Option<String>,
    pub asn: Option<u32>,
}

impl Synthetic {
    /// Checks a request: the URL's scheme, each header line's name and value (any byte a header
    /// can carry is kept, including bytes that are not UTF-8).
    pub fn new(spec: &RequestSpec, header_lines: &[Vec<u8>]) -> anyhow::Result<Synthetic> {
        let url = spec.url.trim();
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        let (https, rest) = if lower.starts_with("https://") {
            (true, &url[8..])
        } else if lower.starts_with("http://") {
            (false, &url[7..])
        } else {
            bail!("the URL must start with http:// or https://: {url:?}");
        };
        let rest = rest.split('#').next().unwrap_or("");
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(end);
        let target = match target {
            "" => "/".to_owned(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_owned(),
        };
        let method = spec.method.as_deref().unwrap_or("GET").trim().to_owned();
        http::Method::from_bytes(method.as_bytes())
            .map_err(|_| anyhow::anyhow!("{method:?} is not a method"))?;
        let mut headers = HeaderMap::new();
        let mut host = authority.to_owned();
        let mut host_given = false;
        for line in header_lines {
            let colon = line
                .iter()
                .position(|b| *b == b':')
                .with_context(|| format!("a header is `Name: value`: {}", escape_bytes(line)))?;
            let name = HeaderName::from_bytes(line[..colon].trim_ascii())
                .with_context(|| format!("not a header name: {}", escape_bytes(&line[..colon])))?;
            let value =
                HeaderValue::from_bytes(line[colon + 1..].trim_ascii()).with_context(|| {
                    format!(
                        "a header value cannot hold this: {}",
                        escape_bytes(&line[colon + 1..])
                    )
                })?;
            if name == http::header::HOST {
                host = signpost_policy::lossy_utf8(value.as_bytes()).into_owned();
                host_given = true;
            }
            headers.append(name, value);
        }
        if !host_given && let Ok(value) = HeaderValue::from_str(authority) {
            headers.insert(http::header::HOST, value);
        }
        let tls = spec.tls || https;
        let sni = match &spec.sni {
            Some(sni) => Some(sni.clone()),
            // A client names the server it connects to: the URL's host, without a port.
            None if tls => Some(strip_port(authority).to_owned()),
            None => None,
        };
        Ok(Synthetic {
            method,
            url: url.to_owned(),
            host,
            target,
            headers,
            peer: match spec.ip {
                Some(ip) => ip,
                None => DEFAULT_CLIENT_IP.parse()?,
            },
            tls,
            sni,
            country: spec.country.clone(),
            asn: spec.asn,
        })
    }
}

impl Synthetic {
    /// The request as the policy sees it.
    pub fn facts(&self) -> RequestFacts<'_> {
        RequestFacts {
            peer: self.peer,
            host: &self.host,
            method: &self.method,
            uri: &self.target,
            tls: self.tls,
            sni: self.sni.as_deref(),
            headers: &self.headers,
        }
    }
}

fn strip_port(authority: &str) -> &str {
    if let Some(end) = authority.find(']') {
        return &authority[..=end];
    }
    authority.split(':').next().unwrap_or(authority)
}

/// What the client would get.
#[derive(Debug)]
pub enum Response {
    /// The edge answers itself.
    Answer {
        status: u16,
        reason: String,
        headers: Vec<(String, String)>,
        body: bytes::Bytes,
        /// HEAD: the body is not sent.
        head_only: bool,
    },
    /// Forwarded to the zone's origin.
    Proxied { zone: String, origin: String },
}

/// A synthetic request's trace: the edge's steps and the policy's phases, and the response.
#[derive(Debug)]
pub struct Traced {
    pub request: Synthetic,
    /// The edge's own checks before and after the policy, and the policy's phases, in order.
    pub steps: Vec<TraceStep>,
    /// The policy's trace (`None` when an edge step answered before the policy ran).
    pub policy: Option<Trace>,
    /// The step that decided, when one refused.
    pub stopped_at: Option<String>,
    pub response: Response,
    /// The zone's name and origin, when a zone serves the host.
    pub zone: Option<(String, String)>,
    /// The deciding rule, if a rule decided.
    pub rule_id: Option<String>,
    /// The catalog code of the answer, when the edge answers.
    pub code: Option<u16>,
    /// The error rule that speaks for the answer (a rule's own `response`, or an error rule),
    /// when one matches it.
    pub error_rule: Option<SpokenBy>,
    /// What became of a challenge: `issued`, `cleared` (the request's clearance cookie is
    /// valid), `verified`, `exempt`, or at an endpoint `solved` or `failed`.
    pub challenge: Option<&'static str>,
}

impl Traced {
    /// `proxy`, `refuse`, `challenge` (the page or the problem), or `redirect` (a redeemed
    /// challenge's 303).
    pub fn verdict(&self) -> &'static str {
        match (&self.response, self.challenge) {
            (Response::Proxied { .. }, _) => "proxy",
            (_, Some("issued" | "failed")) => "challenge",
            (_, Some("solved")) => "redirect",
            _ => "refuse",
        }
    }
}

/// What the challenge reads of a synthetic request.
fn asking<'a>(
    policy: &'a CompiledPolicy,
    zone: ZoneId,
    ring: &'a signpost_policy::KeyRing,
    client: IpAddr,
    request: &'a Synthetic,
    host: &'a str,
) -> crate::challenge::Asking<'a> {
    crate::challenge::Asking {
        zone: policy.zone(zone),
        ring,
        client,
        headers: &request.headers,
        method: &request.method,
        target: &request.target,
        host,
        tls: request.tls,
        ray: RayId::next(),
        footer: &policy.problem_branding().footer,
    }
}

/// A challenge's reply as a trace's response.
fn response_of(reply: &crate::challenge::Reply, head_only: bool) -> Response {
    let head = &reply.head;
    Response::Answer {
        status: head.status.as_u16(),
        reason: head.status.canonical_reason().unwrap_or("").to_owned(),
        headers: head
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    signpost_policy::lossy_utf8(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: reply.body.clone(),
        head_only,
    }
}

/// Runs the edge's steps on `request` against `policy` at `now`, changing nothing.
pub fn run(policy: &CompiledPolicy, request: Synthetic, now: Instant) -> anyhow::Result<Traced> {
    let mut req = RequestHeader::build(request.method.as_str(), request.target.as_bytes(), None)
        .map_err(|e| anyhow::anyhow!("cannot build the request: {e}"))?;
    for (name, value) in &request.headers {
        req.append_header(name.clone(), value.clone())
            .map_err(|e| anyhow::anyhow!("cannot build the request: {e}"))?;
    }
    let head = Head::read(&req);
    let mut steps = Vec::new();
    let mut traced = Traced {
        request,
        steps: Vec::new(),
        policy: None,
        stopped_at: None,
        response: Response::Proxied {
            zone: String::new(),
            origin: String::new(),
        },
        zone: None,
        rule_id: None,
        code: None,
        error_rule: None,
        challenge: None,
    };
    // An answer of the challenge's (an endpoint's, or a challenge), in place of a refusal.
    let mut direct: Option<Response> = None;
    let head_only = req.method == http::Method::HEAD;
    // What the phases settled about whom the answer is for (nothing, before they ran).
    let mut settled = Settled {
        zone: None,
        client_ip: None,
    };
    let mut refusal: Option<(u16, Option<u32>)> = None;
    // The edge's steps in the order the live edge runs them; once one has answered, the rest
    // are listed as not reached.
    for &step in STEPS.iter().filter(|s| s.traced()) {
        if refusal.is_some() || direct.is_some() {
            let at = traced.stopped_at.as_deref().unwrap_or_default();
            not_reached(&mut steps, step, at);
            continue;
        }
        match step {
            Step::HeadLimits => {
                let code = head.unacceptable(&req);
                steps.push(edge_step(step, code));
                refusal = code.map(|c| (c.get(), None));
            }
            Step::ErrorPage => {
                let mut trace_step = edge_step(step, None);
                if let Some(entry) = crate::answer::error_page(req.uri.path()) {
                    trace_step.matched = true;
                    trace_step.action = Some("serve_error".into());
                    trace_step
                        .action_parameters
                        .push(("code".into(), entry.code.to_string()));
                    refusal = Some((entry.code.get(), None));
                }
                steps.push(trace_step);
            }
            Step::Decide => {
                let r = &traced.request;
                let facts = r.facts();
                let trace = policy.trace_assuming(&facts, now, r.country.as_deref(), r.asn);
                steps.extend(trace.steps.iter().cloned());
                let d = &trace.decision;
                settled = Settled {
                    zone: d.zone,
                    client_ip: Some(d.client_ip),
                };
                traced.zone = d.zone.map(|z| {
                    let zone = policy.zone(z);
                    // A diverted request goes to the divert's origin, which `signpost test`
                    // asserts as `origin`.
                    let origin = d
                        .divert
                        .and_then(|i| zone.diverts.get(i))
                        .map_or(&zone.origin, |v| &v.origin);
                    (zone.name.to_string(), origin.to_string())
                });
                traced.rule_id = d.rule_id.as_deref().map(str::to_owned);
                traced.stopped_at = trace.stopped_at.map(str::to_owned);
                if let Verdict::Refuse { code, retry_after } = d.verdict {
                    refusal = Some((code.get(), retry_after));
                } else if !d.fleet.is_empty() {
                    // Redis decides these; a trace does not ask it.
                    let mut step = TraceStep {
                        description: "fleet rate limits: the edge would ask Redis to count the request under each key, in order; a refusal there answers 1015".into(),
                        ..edge_step(Step::Decide, None)
                    };
                    step.step_name = "fleet_rate_limits".into();
                    for check in &d.fleet {
                        step.action_parameters
                            .push((check.rule_id().to_string(), check.key().to_owned()));
                    }
                    steps.push(step);
                }
                traced.policy = Some(trace);
            }
            Step::ChallengeEndpoint => {
                let endpoint = crate::challenge::Endpoint::of(req.uri.path());
                let ring = policy.challenge_keys();
                let (zone, client) = policy.answering(&traced.request.facts());
                let served = (endpoint, ring, zone);
                if !matches!(served, (Some(_), Some(_), Some(_))) {
                    steps.push(edge_step(step, None));
                }
                if let (Some(endpoint), Some(ring), Some(zone)) = served {
                    let mut trace_step = edge_step(step, None);
                    trace_step.matched = true;
                    trace_step.action = Some("challenge_endpoint".into());
                    if endpoint.allows(&traced.request.method) {
                        // A trace carries no body: a `verify` is redeemed with an empty form.
                        let form = match endpoint {
                            crate::challenge::Endpoint::Wait => {
                                traced.request.target.split_once('?').map_or("", |(_, q)| q)
                            }
                            crate::challenge::Endpoint::Verify => "",
                        };
                        let host = signpost_policy::normalize_host(&traced.request.host);
                        let a = asking(policy, zone, ring, client, &traced.request, &host);
                        let now = crate::challenge::unix_now();
                        let (reply, redeemed) =
                            crate::challenge::at_endpoint(&a, endpoint, form.as_bytes(), now)
                                .map_err(|e| anyhow::anyhow!("cannot answer: {e}"))?;
                        trace_step.action_parameters.push((
                            "outcome".into(),
                            match redeemed {
                                Ok(method) => format!("solved ({method})"),
                                Err(why) => format!("failed ({why})"),
                            },
                        ));
                        traced.challenge = Some(reply.outcome);
                        traced.code = reply.code.map(|c| c.get());
                        direct = Some(response_of(&reply, head_only));
                    } else {
                        refusal = Some((signpost_problem::Code::METHOD_NOT_ALLOWED.get(), None));
                    }
                    settled = Settled {
                        zone: Some(zone),
                        client_ip: Some(client),
                    };
                    traced.zone = Some((
                        policy.zone(zone).name.to_string(),
                        policy.zone(zone).origin.to_string(),
                    ));
                    steps.push(trace_step);
                    traced.stopped_at = Some(step.name().to_owned());
                }
            }
            Step::Challenge => {
                let decision = traced.policy.as_ref().map(|t| &t.decision);
                if let Some(bypass) = decision
                    .and_then(|d| d.challenge.as_ref())
                    .and_then(|n| n.bypass)
                {
                    traced.challenge = Some(bypass.as_str());
                }
                let challenged = decision.map(|d| (d.verdict, d.zone, policy.challenge_keys()));
                if !matches!(
                    challenged,
                    Some((Verdict::Challenge { .. }, Some(_), Some(_)))
                ) {
                    steps.push(edge_step(step, None));
                }
                if let Some((Verdict::Challenge { difficulty }, Some(zone), Some(ring))) =
                    challenged
                {
                    let client = decision.map_or(traced.request.peer, |d| d.client_ip);
                    let mut trace_step = edge_step(step, None);
                    let host = signpost_policy::normalize_host(&traced.request.host);
                    let a = asking(policy, zone, ring, client, &traced.request, &host);
                    let now = crate::challenge::unix_now();
                    match crate::challenge::cleared(&a, difficulty, now) {
                        Ok(clearance) => {
                            trace_step.description = format!(
                                "the request's clearance is valid (earned by {} at difficulty {}, key {}): it passes",
                                clearance.method.as_str(),
                                clearance.level.get(),
                                clearance.key_id
                            );
                            traced.challenge = Some("cleared");
                        }
                        Err(why) => {
                            let asked = crate::answer::error_rules::Asked {
                                facts: traced.request.facts(),
                                zone: Some(zone),
                                client_ip: Some(client),
                                country: None,
                            };
                            let reply = crate::challenge::challenge(
                                policy,
                                &asked,
                                &a,
                                difficulty,
                                traced.rule_id.as_deref(),
                                now,
                            )
                            .map_err(|e| anyhow::anyhow!("cannot answer: {e}"))?;
                            trace_step.matched = true;
                            trace_step.action = Some("challenge".into());
                            trace_step.action_parameters.extend([
                                ("difficulty".into(), difficulty.get().to_string()),
                                ("clearance".into(), why.as_str().to_owned()),
                                ("answer".into(), reply.outcome.to_owned()),
                            ]);
                            traced.challenge = Some("issued");
                            traced.code = reply.code.map(|c| c.get());
                            direct = Some(response_of(&reply, head_only));
                            traced.stopped_at = Some(step.name().to_owned());
                        }
                    }
                    steps.push(trace_step);
                }
            }
            Step::ZoneLimits => {
                if let Some(zone) = settled.zone.map(|z| policy.zone(z)) {
                    let code = head.zone_refuses(&req, zone);
                    steps.push(edge_step(step, code));
                    refusal = code.map(|c| (c.get(), None));
                }
            }
            Step::HttpsRedirect
            | Step::PrereadBody
            | Step::TakeInFlight
            | Step::RobotsTxt
            | Step::ServeMarkdown => {}
        }
        if refusal.is_some() && step != Step::Decide {
            traced.stopped_at = Some(step.name().to_owned());
        }
    }
    traced.response = match (direct, refusal) {
        (Some(response), _) => response,
        (None, Some((code, retry_after))) => {
            traced.code = Some(code);
            let crawl = traced
                .policy
                .as_ref()
                .and_then(|t| t.decision.crawl.as_deref())
                .and_then(|step| match &step.outcome {
                    signpost_policy::CrawlOutcome::Refused(r) if r.code().get() == code => {
                        Some(r.clone())
                    }
                    _ => None,
                });
            let refused = Refusal {
                code,
                retry_after,
                by: traced.rule_id.as_deref(),
                crawl,
            };
            let (response, rule) = answer(policy, &traced.request, &req, &settled, &refused)?;
            traced.error_rule = rule;
            response
        }
        (None, None) => match &traced.zone {
            Some((zone, origin)) => Response::Proxied {
                zone: zone.clone(),
                origin: origin.clone(),
            },
            None => bail!("a request with neither a zone nor a refusal"),
        },
    };
    traced.steps = steps;
    Ok(traced)
}

/// An edge step (not one of the policy's phases), refusing with `code` when it is given.
fn edge_step(step: Step, code: Option<signpost_problem::Code>) -> TraceStep {
    let mut trace_step = TraceStep {
        step_name: step.name().to_owned(),
        kind: signpost_policy::StepKind::Phase,
        description: step.description().to_owned(),
        expression: None,
        matched: code.is_some(),
        action: None,
        action_parameters: Vec::new(),
        fields: Vec::new(),
        trace: Vec::new(),
    };
    if let Some(code) = code {
        trace_step.action = Some("block".into());
        trace_step
            .action_parameters
            .push(("code".into(), code.to_string()));
    }
    trace_step
}

/// Lists `step` as not reached, evaluation having stopped at `at`: the policy's step as each of
/// its phases.
fn not_reached(steps: &mut Vec<TraceStep>, step: Step, at: &str) {
    let description = format!("not reached: evaluation stopped at {at}");
    let names: &[&str] = match step {
        Step::Decide => signpost_policy::PHASES,
        _ => &[step.name()],
    };
    for name in names {
        steps.push(TraceStep {
            step_name: (*name).to_owned(),
            description: description.clone(),
            ..edge_step(step, None)
        });
    }
}

/// Whom a traced answer is for, as far as the phases settled it ([`crate::answer::error_rules::Asked`]).
struct Settled {
    zone: Option<ZoneId>,
    client_ip: Option<IpAddr>,
}

/// The edge's refusal of a traced request: its code, its wait, and the rule that made it.
struct Refusal<'a> {
    code: u16,
    retry_after: Option<u32>,
    by: Option<&'a str>,
    /// Crawl control's own answer, when it refused (it speaks before any error rule).
    crawl: Option<signpost_policy::CrawlRefusal>,
}

/// The error rule that spoke for a traced answer, and what of it the answer shows.
#[derive(Debug)]
pub struct SpokenBy {
    pub id: String,
    /// The answer's status, the rule's or the code's.
    pub status: u16,
    /// The format answered.
    pub format: signpost_problem::Format,
    /// Which of the rule's content that format shows ([`signpost_problem::Custom::content_for`]).
    pub content: &'static str,
}

impl SpokenBy {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "status": self.status,
            "format": self.format.as_str(),
            "content": self.content,
        })
    }
}

/// The response the edge would send for a refusal, dressed as the edge dresses it
/// ([`crate::answer::error_rules::dress`], the function that answers real requests).
fn answer(
    policy: &CompiledPolicy,
    request: &Synthetic,
    req: &RequestHeader,
    settled: &Settled,
    refused: &Refusal<'_>,
) -> anyhow::Result<(Response, Option<SpokenBy>)> {
    use crate::answer::error_rules::{Asked, Refused, dress};
    let asked = Asked {
        facts: request.facts(),
        zone: settled.zone,
        client_ip: settled.client_ip,
        // As the policy takes it: two letters, or ignored.
        country: request
            .country
            .clone()
            .filter(|c| c.len() == 2 && c.bytes().all(|b| b.is_ascii_alphabetic())),
    };
    let refused = Refused {
        entry: crate::answer::entry(signpost_problem::Code::new(refused.code)),
        retry_after: refused.retry_after,
        by: refused.by,
        crawl: refused.crawl.as_ref(),
    };
    let (answer, rule) = dress(policy, &asked, RayId::next(), &refused)
        .map_err(|e| anyhow::anyhow!("cannot render the answer: {e}"))?;
    let spoken = rule.map(|rule| SpokenBy {
        id: rule.id.to_owned(),
        status: answer.head.status.as_u16(),
        format: answer.format,
        content: rule.custom.content_for(answer.format),
    });
    let head = &answer.head;
    let response = Response::Answer {
        status: head.status.as_u16(),
        reason: head
            .get_reason_phrase()
            .or(head.status.canonical_reason())
            .unwrap_or("")
            .to_owned(),
        headers: head
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    signpost_policy::lossy_utf8(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: answer.body.clone(),
        head_only: req.method == http::Method::HEAD,
    };
    Ok((response, spoken))
}

/// Bytes as text for messages: printable ASCII as is, anything else as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Text from a request, escaped for a terminal: quotes, backslashes and control characters
/// escaped (a value cannot move the cursor or colour the screen); other characters as they are.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The trace as text, for people.
pub fn to_text(t: &Traced) -> String {
    let r = &t.request;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "request: {} {} (host {}, peer {}{})",
        quoted(&r.method),
        quoted(&r.url),
        quoted(&r.host),
        r.peer,
        match (&r.tls, &r.sni) {
            (true, Some(sni)) => format!(", TLS, SNI {}", quoted(sni)),
            (true, None) => ", TLS".to_owned(),
            _ => String::new(),
        }
    );
    if let Some(p) = &t.policy {
        let _ = writeln!(out, "client: {}", p.decision.client_ip);
    }
    let _ = writeln!(out);
    for (i, step) in t.steps.iter().enumerate() {
        let mark = if step.matched { "■" } else { "·" };
        let _ = writeln!(
            out,
            "{:>2} {mark} {:<18} {}",
            i + 1,
            step.step_name,
            step.description
        );
        write_details(&mut out, step, "        ");
        for rule in &step.trace {
            let mark = if rule.matched { "✓" } else { "✗" };
            let _ = writeln!(
                out,
                "      {mark} {} {}: {}",
                rule.action.as_deref().unwrap_or("-"),
                quoted(&rule.step_name),
                rule.description
            );
            if let Some(e) = &rule.expression {
                let _ = writeln!(out, "          expression: {e}");
            }
            write_details(&mut out, rule, "          ");
        }
    }
    let _ = writeln!(out);
    match &t.stopped_at {
        Some(at) => {
            let _ = writeln!(out, "evaluation stopped at: {at}");
        }
        None => {
            let _ = writeln!(out, "evaluation ran every step");
        }
    }
    if let Some(rule) = &t.rule_id {
        let _ = writeln!(out, "deciding rule: {}", quoted(rule));
    }
    if let Some(challenge) = t.challenge {
        let _ = writeln!(out, "challenge: {challenge}");
    }
    if let Some(rule) = &t.error_rule {
        let _ = writeln!(
            out,
            "error rule: {} (status {}, {} answered with the rule's {})",
            quoted(&rule.id),
            rule.status,
            rule.format,
            match rule.content {
                "contract" => "text in the contract's layout",
                content => content,
            }
        );
    }
    if let Some(p) = &t.policy
        && !p.decision.logged.is_empty()
    {
        let logged: Vec<String> = p.decision.logged.iter().map(|l| quoted(l)).collect();
        let _ = writeln!(out, "logged by: {}", logged.join(", "));
    }
    match &t.response {
        Response::Proxied { zone, origin } => {
            let _ = writeln!(
                out,
                "response: proxied to zone {} at origin {origin}; the origin answers",
                quoted(zone)
            );
        }
        Response::Answer {
            status,
            reason,
            headers,
            body,
            head_only,
        } => {
            if let Some((zone, _)) = &t.zone {
                let _ = writeln!(out, "zone: {}", quoted(zone));
            }
            let _ = writeln!(out, "response:\n");
            let _ = writeln!(out, "HTTP/1.1 {status} {reason}");
            for (name, value) in headers {
                let _ = writeln!(out, "{name}: {value}");
            }
            let _ = writeln!(out);
            if *head_only {
                let _ = writeln!(out, "(HEAD: no body is sent)");
            } else {
                out.push_str(&String::from_utf8_lossy(body));
                if !body.ends_with(b"\n") {
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn write_details(out: &mut String, step: &TraceStep, indent: &str) {
    for (name, value) in &step.fields {
        let _ = writeln!(out, "{indent}{name} = {}", quoted(value));
    }
    if !step.action_parameters.is_empty() {
        let params: Vec<String> = step
            .action_parameters
            .iter()
            .map(|(k, v)| format!("{k}={}", quoted(v)))
            .collect();
        let _ = writeln!(out, "{indent}[{}]", params.join(" "));
    }
}

fn step_json(step: &TraceStep) -> Value {
    let params: Map<String, Value> = step
        .action_parameters
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let fields: Map<String, Value> = step
        .fields
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "step_name": step.step_name,
        "type": step.kind.as_str(),
        "description": step.description,
        "expression": step.expression,
        "matched": step.matched,
        "action": step.action,
        "action_parameters": params,
        "fields": fields,
        "trace": step.trace.iter().map(step_json).collect::<Vec<_>>(),
    })
}

/// The trace as JSON: the shape `docs/policy.md` documents ("Trace as JSON").
pub fn to_json(t: &Traced) -> Value {
    let r = &t.request;
    let decision = t.policy.as_ref().map(|p| &p.decision);
    let response = match &t.response {
        Response::Proxied { zone, origin } => json!({
            "proxied": true,
            "zone": zone,
            "origin": origin,
        }),
        Response::Answer {
            status,
            reason,
            headers,
            body,
            head_only,
        } => json!({
            "proxied": false,
            "status": status,
            "reason": reason,
            "headers": headers.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
            "body": if *head_only { String::new() } else { String::from_utf8_lossy(body).into_owned() },
        }),
    };
    json!({
        "request": {
            "method": r.method,
            "url": r.url,
            "host": r.host,
            "peer": r.peer.to_string(),
            "client_ip": decision.map(|d| d.client_ip.to_string()),
            "tls": r.tls,
            "sni": r.sni,
        },
        "status_code": match &t.response {
            Response::Answer { status, .. } => Some(*status),
            Response::Proxied { .. } => None,
        },
        "code": t.code,
        "verdict": t.verdict(),
        "challenge": t.challenge,
        "rule_id": t.rule_id,
        "error_rule": t.error_rule.as_ref().map(SpokenBy::to_json),
        "zone": t.zone.as_ref().map(|(z, _)| z),
        "origin": t.zone.as_ref().map(|(_, o)| o),
        "stopped_at": t.stopped_at,
        "logged": decision.map(|d| d.logged.iter().map(|l| l.to_string()).collect::<Vec<_>>()).unwrap_or_default(),
        "trace": t.steps.iter().map(step_json).collect::<Vec<_>>(),
        "response": response,
    })
}

/// `signpost trace`: one synthetic request against a policy file, as text or JSON.
pub fn command(
    config: &std::path::Path,
    spec: &RequestSpec,
    header_lines: &[Vec<u8>],
    as_json: bool,
) -> anyhow::Result<()> {
    let policy = CompiledPolicy::load(config, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let request = Synthetic::new(spec, header_lines)?;
    let notes = geo_notes(&policy, &request);
    let traced = run(&policy, request, Instant::now())?;
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if as_json {
        let mut value = to_json(&traced);
        value["notes"] = json!(notes);
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        for note in &notes {
            writeln!(out, "note: {note}")?;
        }
        out.write_all(to_text(&traced).as_bytes())?;
    }
    Ok(())
}

/// What `--country`/`--asn` do to the trace, in words.
fn geo_notes(policy: &CompiledPolicy, request: &Synthetic) -> Vec<String> {
    let (country_db, asn_db) = policy.geo_databases();
    let mut notes = Vec::new();
    if let Some(c) = &request.country {
        if c.len() == 2 && c.bytes().all(|b| b.is_ascii_alphabetic()) {
            notes.push(format!(
                "the client's country is taken as {}{}",
                quoted(&c.to_ascii_uppercase()),
                if country_db {
                    ", not the country database's answer"
                } else {
                    ""
                }
            ));
        } else {
            notes.push(format!(
                "--country {} is not a two-letter code: ignored",
                quoted(c)
            ));
        }
    }
    if let Some(asn) = request.asn {
        notes.push(format!(
            "the client's AS number is taken as {asn}{}",
            if asn_db {
                ", not the ASN database's answer"
            } else {
                ""
            }
        ));
    }
    notes
}

/// A cases file: `[[case]]` entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[serde(default)]
    case: Vec<Case>,
}

/// One test case: a request (the fields of [`RequestSpec`]) and what is expected of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: Vec<String>,
    #[serde(default)]
    ip: Option<IpAddr>,
    #[serde(default)]
    country: Option<String>,
    #[serde(default)]
    asn: Option<u32>,
    #[serde(default)]
    tls: bool,
    #[serde(default)]
    sni: Option<String>,
    /// How many times the same request is sent (and counted by the rate limits) before the one
    /// traced: a case about a rate limit. Such a case gets a policy of its own, with fresh
    /// counters.
    #[serde(default)]
    sent_before: u32,
    /// The status the `sent_before` requests were answered with, which rate limits with a
    /// `counting_expression` count (default 200).
    #[serde(default)]
    answered: Option<u16>,
    expect: Expect,
}

/// The most requests a case may send before the one it traces.
const MAX_SENT_BEFORE: u32 = 1_000_000;

impl Case {
    fn request(&self) -> RequestSpec {
        RequestSpec {
            url: self.url.clone(),
            method: self.method.clone(),
            headers: self.headers.clone(),
            ip: self.ip,
            country: self.country.clone(),
            asn: self.asn,
            tls: self.tls,
            sni: self.sni.clone(),
        }
    }
}

/// What a case expects; any subset.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// The status the edge answers with (a proxied request has none: the origin's).
    status: Option<u16>,
    /// The catalog code the edge answers with.
    code: Option<u16>,
    /// The id of the rule that decided (`""`: no rule decided).
    rule: Option<String>,
    /// The zone serving the host (`""`: none).
    zone: Option<String>,
    /// The zone's origin, as `http://host:port`.
    origin: Option<String>,
    /// Whether the request is forwarded to the origin.
    proxied: Option<bool>,
    /// `proxy`, `refuse`, `challenge` or `redirect` ([`Traced::verdict`]).
    verdict: Option<String>,
    /// What became of a challenge: `issued`, `cleared`, `verified`, `exempt` (`""`: no rule
    /// asked for one).
    challenge: Option<String>,
}

/// The differences between what `case` expects and what `traced` shows, one line each.
fn differences(expect: &Expect, traced: &Traced) -> Vec<String> {
    fn show<T: std::fmt::Display>(v: Option<T>) -> String {
        v.map_or_else(|| "none".to_owned(), |v| v.to_string())
    }
    let mut out = Vec::new();
    let status = match &traced.response {
        Response::Answer { status, .. } => Some(*status),
        Response::Proxied { .. } => None,
    };
    let proxied = matches!(traced.response, Response::Proxied { .. });
    let zone = traced.zone.as_ref().map(|(z, _)| z.as_str());
    let origin = traced.zone.as_ref().map(|(_, o)| o.as_str());
    if let Some(want) = expect.status
        && status != Some(want)
    {
        let got = if proxied {
            "proxied (the origin answers)".to_owned()
        } else {
            show(status)
        };
        out.push(format!("status: expected {want}, got {got}"));
    }
    if let Some(want) = expect.code
        && traced.code != Some(want)
    {
        out.push(format!("code: expected {want}, got {}", show(traced.code)));
    }
    let text = |want: &Option<String>, got: Option<&str>, what: &str, out: &mut Vec<String>| {
        let got = got.unwrap_or("");
        if let Some(want) = want
            && want != got
        {
            out.push(format!(
                "{what}: expected {}, got {}",
                quoted(want),
                quoted(got)
            ));
        }
    };
    text(&expect.rule, traced.rule_id.as_deref(), "rule", &mut out);
    text(&expect.zone, zone, "zone", &mut out);
    text(&expect.origin, origin, "origin", &mut out);
    if let Some(want) = expect.proxied
        && want != proxied
    {
        out.push(format!("proxied: expected {want}, got {proxied}"));
    }
    text(&expect.verdict, Some(traced.verdict()), "verdict", &mut out);
    text(&expect.challenge, traced.challenge, "challenge", &mut out);
    out
}

/// `signpost test <policy> <cases>`: every case passed or failed, with the differences, then
/// `N passed, M failed`. Exit status 1 when a case failed, 2 when the files cannot be read.
pub fn test_command(
    policy_path: &std::path::Path,
    cases_path: &std::path::Path,
) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;
    use std::process::ExitCode;
    let policy = match CompiledPolicy::load(policy_path, None) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    let cases: CasesFile = match std::fs::read_to_string(cases_path)
        .map_err(anyhow::Error::from)
        .and_then(|text| toml::from_str(&text).map_err(anyhow::Error::from))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", cases_path.display());
            return Ok(ExitCode::from(2));
        }
    };
    let mut stdout = std::io::stdout().lock();
    let (mut passed, mut failed) = (0usize, 0usize);
    for case in &cases.case {
        // Each case is traced: it counts nothing, so cases do not depend on their order.
        let result =
            Synthetic::new(&case.request(), &case.request().header_lines()).and_then(|request| {
                let now = Instant::now();
                if case.sent_before == 0 {
                    return run(&policy, request, now);
                }
                if case.sent_before > MAX_SENT_BEFORE {
                    bail!("sent_before is at most {MAX_SENT_BEFORE}");
                }
                // Counters of its own, so that the cases do not depend on each other's order.
                let own =
                    CompiledPolicy::load(policy_path, None).map_err(|e| anyhow::anyhow!("{e}"))?;
                let answered = signpost_policy::ResponseFacts {
                    code: case.answered.unwrap_or(200),
                    edge_code: 0,
                };
                for _ in 0..case.sent_before {
                    let facts = request.facts();
                    let d = own.decide(&facts, now);
                    // Fleet rules' answers would be counted in Redis, which a test never asks.
                    let _ = own.count_answers(
                        &d.answers,
                        &facts,
                        d.client_ip,
                        Some(&d.identity),
                        answered,
                        now,
                    );
                }
                run(&own, request, now)
            });
        let problems = match result {
            Ok(traced) => differences(&case.expect, &traced),
            Err(e) => vec![format!("the request cannot be traced: {e:#}")],
        };
        if problems.is_empty() {
            passed += 1;
            writeln!(stdout, "PASS {}", quoted(&case.name))?;
        } else {
            failed += 1;
            writeln!(stdout, "FAIL {}", quoted(&case.name))?;
            for p in problems {
                writeln!(stdout, "     {p}")?;
            }
        }
    }
    writeln!(stdout, "{passed} passed, {failed} failed")?;
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(url: &str, headers: &[&[u8]]) -> anyhow::Result<Synthetic> {
        let spec = RequestSpec {
            url: url.to_owned(),
            ..RequestSpec::default()
        };
        let lines: Vec<Vec<u8>> = headers.iter().map(|h| h.to_vec()).collect();
        Synthetic::new(&spec, &lines)
    }

    #[test]
    fn a_url_gives_host_target_and_tls() {
        let r = synthetic("HTTPS://Shop.Example.com:8443?q=1#frag", &[]).unwrap();
        assert_eq!(r.host, "Shop.Example.com:8443");
        assert_eq!(r.target, "/?q=1");
        assert!(r.tls);
        assert_eq!(r.sni.as_deref(), Some("Shop.Example.com"));
        assert_eq!(r.headers.get("host").unwrap(), "Shop.Example.com:8443");
        assert_eq!(r.method, "GET");
        assert_eq!(r.peer.to_string(), DEFAULT_CLIENT_IP);

        let r = synthetic("http://[2001:db8::1]:8080/a/b", &[]).unwrap();
        assert_eq!(
            (r.host.as_str(), r.target.as_str()),
            ("[2001:db8::1]:8080", "/a/b")
        );
        assert!(!r.tls && r.sni.is_none());
        assert_eq!(strip_port("[2001:db8::1]:8080"), "[2001:db8::1]");
    }

    #[test]
    fn a_host_line_replaces_the_urls_authority() {
        let r = synthetic("http://example.com/", &[b"Host: other.org", b"X-A:  v "]).unwrap();
        assert_eq!(r.host, "other.org");
        assert_eq!(r.headers.get_all("host").iter().count(), 1);
        assert_eq!(r.headers.get("x-a").unwrap(), "v");
    }

    #[test]
    fn bad_requests_are_errors_not_panics() {
        for (url, headers) in [
            ("ftp://example.com/", &[][..]),
            ("example.com/", &[][..]),
            ("", &[][..]),
            ("http://é.example/", &[&b"no colon"[..]][..]),
            ("http://example.com/", &[&b"Bad Name: x"[..]][..]),
            ("http://example.com/", &[&b"X: a\x1bb"[..]][..]),
        ] {
            let err = synthetic(url, headers).map(|_| ()).unwrap_err().to_string();
            assert!(!err.contains('\x1b'), "{err}");
        }
        let spec = RequestSpec {
            url: "http://example.com/".into(),
            method: Some("GE T".into()),
            ..RequestSpec::default()
        };
        assert!(Synthetic::new(&spec, &[]).is_err());
    }

    #[test]
    fn quoting_escapes_what_a_terminal_would_act_on() {
        assert_eq!(
            quoted("a\"b\\c\u{1b}[31m\td\u{fffd}é"),
            "\"a\\\"b\\\\c\\u{1b}[31m\\td\u{fffd}é\""
        );
    }
}
