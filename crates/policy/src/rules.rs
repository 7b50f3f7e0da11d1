//! Rules: access, browser signature, hotlink, legal, custom (WAF) and rate-limit rules — checked
//! into a `RulesSpec`, then compiled into `Rules` and evaluated in phase order.

use std::collections::{HashMap, HashSet};
use std::hash::Hasher;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderName;
use regex::RegexSet;
use serde_spanned::Spanned;

use crate::decision::{Decision, Verdict, codes};
use crate::error::{Diagnostics, ProblemKind, did_you_mean};
use crate::expr::{self, Cx, ExprError, Filter, FilterIndex};
use crate::file::PolicyFile;
use crate::geo::{AsnDb, Country, CountryDb, country_code};
use crate::host::{HostPattern, HostTable};
use crate::ipset::{IpTable, parse_net};
use crate::ratelimit::{DEFAULT_MAX_KEYS, Limiter, Outcome, retry_secs};

/// Most patterns in `block_user_agents`, and most characters in one.
const MAX_PATTERN_LEN: usize = 4096;

// === Spec: validated rules ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Block,
    Allow,
    Log,
}

/// What a rate limit counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Characteristic {
    Ip,
    Host,
    Path,
    Header(HeaderName),
}

const CHARACTERISTICS: &[&str] = &[
    "ip.src",
    "http.host",
    "http.request.uri.path",
    "http.request.headers[\"name\"]",
];

#[derive(Debug, Default)]
pub(crate) struct RulesSpec {
    pub client_ip: Option<crate::client::ClientIp>,
    pub country_db: Option<(PathBuf, Range<usize>)>,
    pub asn_db: Option<(PathBuf, Range<usize>)>,
    /// Where a rule first needs each database, to report a missing `[geo]` entry.
    pub country_needed_at: Option<Range<usize>>,
    pub asn_needed_at: Option<Range<usize>>,
    pub access: AccessTables,
    pub browser: Option<BrowserCheck>,
    pub hotlink: Option<HotlinkSpec>,
    pub legal: Vec<(Arc<str>, Filter)>,
    pub custom: Vec<CustomRule>,
    pub rate: Vec<RateSpec>,
    pub descriptions: HashMap<Arc<str>, String>,
}

/// Access rules folded into lookup tables; values index `ids`.
#[derive(Debug, Default)]
pub(crate) struct AccessTables {
    ids: Vec<Arc<str>>,
    allow_ip: IpTable<usize>,
    allow_asn: HashMap<u32, usize>,
    allow_country: HashMap<Country, usize>,
    block_ip: IpTable<usize>,
    block_asn: HashMap<u32, usize>,
    block_country: HashMap<Country, usize>,
}

#[derive(Debug)]
pub(crate) struct BrowserCheck {
    id: Arc<str>,
    block_empty: bool,
    agents: Option<RegexSet>,
}

#[derive(Debug)]
pub(crate) struct HotlinkSpec {
    id: Arc<str>,
    extensions: HashSet<String>,
    allowed: HostTable,
}

#[derive(Debug)]
pub(crate) struct CustomRule {
    id: Arc<str>,
    action: Action,
    filter: Filter,
}

#[derive(Debug)]
pub(crate) struct RateSpec {
    id: Arc<str>,
    filter: Option<Filter>,
    characteristics: Vec<Characteristic>,
    period: Duration,
    limit: u32,
    mitigation: Duration,
    max_keys: usize,
    fingerprint: String,
}

fn sp<T>(s: &Spanned<T>) -> Range<usize> {
    s.span()
}

/// Checks every rule section and collects all problems into `d`.
pub(crate) fn validate_rules(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    base_dir: &Path,
) -> RulesSpec {
    let mut spec = RulesSpec::default();
    let mut ids: HashMap<String, ()> = HashMap::new();
    let mut descriptions = Vec::new();
    let mut check_id =
        |d: &mut Diagnostics<'_>, id: &Spanned<String>, description: &Option<String>| -> Arc<str> {
            let v = id.get_ref().trim();
            if v.is_empty() {
                d.at(ProblemKind::Invalid, sp(id), "a rule id must not be empty");
            } else if ids.insert(v.to_owned(), ()).is_some() {
                d.at(
                    ProblemKind::Invalid,
                    sp(id),
                    format!("rule id `{v}` is used twice"),
                );
            }
            let id: Arc<str> = Arc::from(v);
            if let Some(text) = description {
                descriptions.push((id.clone(), text.clone()));
            }
            id
        };

    // --- client address ---
    if let Some(c) = &file.client_ip {
        let c = c.get_ref();
        let mut trusted = IpTable::default();
        for t in &c.trusted_proxies {
            match parse_net(t.get_ref()) {
                Ok(net) => trusted.insert(net, ()),
                Err(why) => d.at(ProblemKind::Invalid, sp(t), why),
            }
        }
        let header = match c.header.as_ref() {
            None => Some(crate::client::ClientHeader::ForwardedFor),
            Some(h) => match h.get_ref().trim().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => Some(crate::client::ClientHeader::ForwardedFor),
                other => match HeaderName::from_bytes(other.as_bytes()) {
                    Ok(name) => Some(crate::client::ClientHeader::Single(name)),
                    Err(_) => {
                        d.at(
                            ProblemKind::Invalid,
                            sp(h),
                            format!("`{other}` is not a header name (e.g. \"x-forwarded-for\", \"x-real-ip\", \"cf-connecting-ip\")"),
                        );
                        None
                    }
                },
            },
        };
        if let Some(header) = header {
            spec.client_ip = Some(crate::client::ClientIp::new(trusted, header));
        }
    }

    // --- databases ---
    if let Some(g) = &file.geo {
        spec.country_db = g
            .country_db
            .as_ref()
            .map(|p| (base_dir.join(p.get_ref()), sp(p)));
        spec.asn_db = g
            .asn_db
            .as_ref()
            .map(|p| (base_dir.join(p.get_ref()), sp(p)));
    }

    // --- access rules ---
    for r in &file.access_rule {
        let r = r.get_ref();
        let id = check_id(d, &r.id, &r.description);
        let action = match r.action.get_ref().as_str() {
            "allow" => Action::Allow,
            "block" => Action::Block,
            other => {
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(&r.action),
                    format!("unknown access action `{other}`"),
                    Some("access rules take \"block\" or \"allow\"".into()),
                );
                continue;
            }
        };
        let t = &mut spec.access;
        let idx = t.ids.len();
        t.ids.push(id);
        let given = [r.ip.is_some(), r.asn.is_some(), r.country.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            d.at(
                ProblemKind::Invalid,
                sp(&r.id),
                "an access rule needs exactly one of `ip`, `asn` or `country`",
            );
            continue;
        }
        if let Some(ips) = &r.ip {
            let table = if action == Action::Allow {
                &mut t.allow_ip
            } else {
                &mut t.block_ip
            };
            for s in ips.get_ref() {
                match parse_net(s.get_ref()) {
                    Ok(net) => table.insert(net, idx),
                    Err(why) => d.at(ProblemKind::Invalid, sp(s), why),
                }
            }
        }
        if let Some(asns) = &r.asn {
            spec.asn_needed_at.get_or_insert(sp(asns));
            let map = if action == Action::Allow {
                &mut t.allow_asn
            } else {
                &mut t.block_asn
            };
            for n in asns.get_ref() {
                match u32::try_from(*n.get_ref()) {
                    Ok(asn) => {
                        map.entry(asn).or_insert(idx);
                    }
                    Err(_) => d.at(
                        ProblemKind::Invalid,
                        sp(n),
                        "an AS number is between 0 and 4294967295",
                    ),
                }
            }
        }
        if let Some(cs) = &r.country {
            spec.country_needed_at.get_or_insert(sp(cs));
            let map = if action == Action::Allow {
                &mut t.allow_country
            } else {
                &mut t.block_country
            };
            for c in cs.get_ref() {
                match valid_country(c.get_ref()) {
                    Some(code) => {
                        map.entry(code).or_insert(idx);
                    }
                    None => d.at(
                        ProblemKind::Invalid,
                        sp(c),
                        format!(
                            "`{}` is not an ISO 3166-1 alpha-2 country code",
                            c.get_ref()
                        ),
                    ),
                }
            }
        }
    }

    // --- browser signature ---
    if let Some(b) = &file.browser_check {
        let b = b.get_ref();
        let id = match &b.id {
            Some(id) => check_id(d, id, &b.description),
            None => Arc::from("browser-check"),
        };
        let mut ok = true;
        for p in &b.block_user_agents {
            if let Err(why) = build_regex(p.get_ref()) {
                d.at(ProblemKind::Invalid, sp(p), why);
                ok = false;
            }
        }
        let agents = if ok && !b.block_user_agents.is_empty() {
            regex::RegexSetBuilder::new(b.block_user_agents.iter().map(|p| p.get_ref().as_str()))
                .size_limit(expr::MAX_REGEX_SIZE * 4)
                .build()
                .map_err(|e| {
                    if let Some(first) = b.block_user_agents.first() {
                        d.at(
                            ProblemKind::Invalid,
                            sp(first),
                            format!("user-agent patterns too large: {e}"),
                        );
                    }
                })
                .ok()
        } else {
            None
        };
        spec.browser = Some(BrowserCheck {
            id,
            block_empty: b.block_empty_user_agent.unwrap_or(true),
            agents,
        });
    }

    // --- hotlink ---
    if let Some(h) = &file.hotlink {
        let h = h.get_ref();
        let id = match &h.id {
            Some(id) => check_id(d, id, &h.description),
            None => Arc::from("hotlink"),
        };
        let mut extensions = HashSet::new();
        for e in h.extensions.get_ref() {
            let ext = e
                .get_ref()
                .trim()
                .trim_start_matches('.')
                .to_ascii_lowercase();
            if ext.is_empty() || !ext.bytes().all(|b| b.is_ascii_alphanumeric()) {
                d.at(
                    ProblemKind::Invalid,
                    sp(e),
                    "an extension is letters and digits, like \"png\"",
                );
            } else {
                extensions.insert(ext);
            }
        }
        let mut allowed = HostTable::default();
        for r in &h.allowed_referers {
            match HostPattern::parse(r.get_ref()) {
                Ok(p) => {
                    allowed.insert(&p, 0);
                }
                Err(why) => d.at(ProblemKind::Invalid, sp(r), why),
            }
        }
        spec.hotlink = Some(HotlinkSpec {
            id,
            extensions,
            allowed,
        });
    }

    // --- legal ---
    for r in &file.legal_rule {
        let r = r.get_ref();
        let id = check_id(d, &r.id, &r.description);
        if let Some(f) = expression(d, &r.expression, &mut spec) {
            spec.legal.push((id, f));
        }
    }

    // --- custom ---
    for r in &file.custom_rule {
        let r = r.get_ref();
        let id = check_id(d, &r.id, &r.description);
        let action = match r.action.get_ref().as_str() {
            "block" => Some(Action::Block),
            "allow" => Some(Action::Allow),
            "log" => Some(Action::Log),
            other => {
                let hint = did_you_mean(other, ["block", "allow", "log"])
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| "custom rules take \"block\", \"allow\" or \"log\"".into());
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(&r.action),
                    format!("unknown action `{other}`"),
                    Some(hint),
                );
                None
            }
        };
        let filter = expression(d, &r.expression, &mut spec);
        if let (Some(action), Some(filter)) = (action, filter) {
            spec.custom.push(CustomRule { id, action, filter });
        }
    }

    // --- rate limits ---
    for r in &file.rate_limit {
        let r = r.get_ref();
        let id = check_id(d, &r.id, &r.description);
        let filter = r
            .expression
            .as_ref()
            .and_then(|e| expression(d, e, &mut spec));
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
                        Ok(ch) => characteristics.push(ch),
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
        let period = crate::policy::duration(d, Some(&r.period), Duration::from_secs(60));
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
            m => crate::policy::duration(d, m.as_ref(), Duration::ZERO),
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
        let fingerprint = format!(
            "{id}\u{0}{:?}\u{0}{characteristics:?}\u{0}{period:?}\u{0}{limit}\u{0}{mitigation:?}\u{0}{max_keys}",
            r.expression.as_ref().map(|e| e.get_ref().as_str()),
        );
        spec.rate.push(RateSpec {
            id,
            filter,
            characteristics,
            period,
            limit,
            mitigation,
            max_keys,
            fingerprint,
        });
    }

    spec.descriptions = descriptions.into_iter().collect();
    spec
}

fn valid_country(s: &str) -> Option<Country> {
    let code = country_code(s.trim())?;
    // Reject codes no database uses: only upper-case input letters matter, and "XX"/"T1" style
    // placeholders are not ISO 3166-1.
    crate::iso::is_assigned(code).then_some(code)
}

fn characteristic(s: &str) -> Result<Characteristic, String> {
    let s = s.trim();
    Ok(match s {
        "ip.src" => Characteristic::Ip,
        "http.host" => Characteristic::Host,
        "http.request.uri.path" => Characteristic::Path,
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

fn build_regex(p: &str) -> Result<regex::Regex, String> {
    if p.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern is longer than {MAX_PATTERN_LEN} bytes"));
    }
    regex::RegexBuilder::new(p)
        .size_limit(expr::MAX_REGEX_SIZE)
        .nest_limit(64)
        .build()
        .map_err(|e| {
            let s = e.to_string();
            format!("invalid regular expression: {}", expr::regex_reason(&s))
        })
}

/// Compiles an expression, reporting errors at their place inside the TOML string.
fn expression(
    d: &mut Diagnostics<'_>,
    e: &Spanned<String>,
    spec: &mut RulesSpec,
) -> Option<Filter> {
    match expr::build(e.get_ref()) {
        Ok(f) => {
            if f.needs_country {
                spec.country_needed_at.get_or_insert(sp(e));
            }
            if f.needs_asn {
                spec.asn_needed_at.get_or_insert(sp(e));
            }
            Some(f)
        }
        Err(ExprError { span, message }) => {
            let start = map_string_offset(d.text(), sp(e), span.start);
            let end = map_string_offset(d.text(), sp(e), span.end).max(start + 1);
            d.at(ProblemKind::Expression, start..end, message);
            None
        }
    }
}

/// Maps a byte offset in a TOML string's value to its offset in the file, through the quotes,
/// escapes and line continuations of the four TOML string forms.
pub(crate) fn map_string_offset(text: &str, value: Range<usize>, idx: usize) -> usize {
    let Some(raw) = text.get(value.clone()) else {
        return value.start;
    };
    let (delim, basic) = if raw.starts_with("\"\"\"") {
        (3, true)
    } else if raw.starts_with("'''") {
        (3, false)
    } else if raw.starts_with('"') {
        (1, true)
    } else if raw.starts_with('\'') {
        (1, false)
    } else {
        return value.start;
    };
    let mut pos = delim;
    if delim == 3 {
        // A newline right after the opening delimiter is not part of the value.
        if raw[pos..].starts_with("\r\n") {
            pos += 2;
        } else if raw[pos..].starts_with('\n') {
            pos += 1;
        }
    }
    let bytes = raw.as_bytes();
    let mut decoded = 0;
    while decoded < idx && pos < raw.len() {
        if basic && bytes[pos] == b'\\' {
            let next = bytes.get(pos + 1).copied().unwrap_or(b' ');
            match next {
                b'u' => {
                    let ch = raw
                        .get(pos + 2..pos + 6)
                        .and_then(|h| u32::from_str_radix(h, 16).ok());
                    decoded += ch.and_then(char::from_u32).map_or(1, char::len_utf8);
                    pos += 6;
                }
                b'U' => {
                    let ch = raw
                        .get(pos + 2..pos + 10)
                        .and_then(|h| u32::from_str_radix(h, 16).ok());
                    decoded += ch.and_then(char::from_u32).map_or(1, char::len_utf8);
                    pos += 10;
                }
                b' ' | b'\t' | b'\r' | b'\n' if delim == 3 => {
                    // Line-ending backslash: the break and following whitespace vanish.
                    pos += 1;
                    while pos < raw.len() && bytes[pos].is_ascii_whitespace() {
                        pos += 1;
                    }
                }
                _ => {
                    decoded += 1;
                    pos += 2;
                }
            }
        } else {
            let len = raw[pos..].chars().next().map_or(1, char::len_utf8);
            decoded += len;
            pos += len;
        }
    }
    value.start + pos.min(raw.len())
}

// === Compiled rules and their evaluation ===

/// A rate-limit rule with its (possibly inherited) counters.
#[derive(Debug)]
pub(crate) struct RateRule {
    id: Arc<str>,
    filter: Option<Filter>,
    characteristics: Vec<Characteristic>,
    pub(crate) limiter: Arc<Limiter>,
}

/// Every rule, compiled, with the databases they need.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) client_ip: crate::client::ClientIp,
    pub(crate) country_db: Option<CountryDb>,
    pub(crate) asn_db: Option<AsnDb>,
    access: AccessTables,
    browser: Option<BrowserCheck>,
    hotlink: Option<HotlinkSpec>,
    /// Per zone: its own host patterns without `*`, to tell a local Referer from a foreign one.
    zone_hosts: Vec<HostTable>,
    legal: Vec<(Arc<str>, Filter)>,
    custom: Vec<CustomRule>,
    /// Which custom rules can match a request, so that the others are not evaluated.
    custom_index: FilterIndex,
    pub(crate) rate: Vec<RateRule>,
    pub(crate) descriptions: HashMap<Arc<str>, String>,
}

impl Rules {
    /// Loads databases and builds limiters (reusing `previous` ones whose rule is unchanged).
    pub(crate) fn compile(
        spec: RulesSpec,
        zones: &[crate::policy::Zone],
        previous: &[RateRule],
        d: &mut Diagnostics<'_>,
    ) -> Rules {
        let mut country_db = None;
        let mut asn_db = None;
        match (&spec.country_db, &spec.country_needed_at) {
            (Some((path, at)), _) => match CountryDb::open(path) {
                Ok(db) => country_db = Some(db),
                Err(why) => d.at(ProblemKind::Database, at.clone(), why),
            },
            (None, Some(at)) => d.at_with_hint(
                ProblemKind::Database,
                at.clone(),
                "this rule needs the client's country, but no country database is configured",
                Some("add `country_db = \"path/to/country.mmdb\"` under `[geo]`".into()),
            ),
            (None, None) => {}
        }
        match (&spec.asn_db, &spec.asn_needed_at) {
            (Some((path, at)), _) => match AsnDb::open(path) {
                Ok(db) => asn_db = Some(db),
                Err(why) => d.at(ProblemKind::Database, at.clone(), why),
            },
            (None, Some(at)) => d.at_with_hint(
                ProblemKind::Database,
                at.clone(),
                "this rule needs the client's AS number, but no ASN database is configured",
                Some("add `asn_db = \"path/to/asn.mmdb\"` under `[geo]`".into()),
            ),
            (None, None) => {}
        }
        let zone_hosts = zones
            .iter()
            .map(|z| {
                let mut t = HostTable::default();
                for (p, _) in &z.patterns {
                    if *p != HostPattern::CatchAll {
                        t.insert(p, 0);
                    }
                }
                t
            })
            .collect();
        let rate = spec
            .rate
            .into_iter()
            .map(|r| {
                let limiter = previous
                    .iter()
                    .find(|p| p.limiter.fingerprint == r.fingerprint)
                    .map(|p| Arc::clone(&p.limiter))
                    .unwrap_or_else(|| {
                        Arc::new(Limiter::new(
                            r.period,
                            r.limit,
                            r.mitigation,
                            r.max_keys,
                            r.fingerprint,
                        ))
                    });
                RateRule {
                    id: r.id,
                    filter: r.filter,
                    characteristics: r.characteristics,
                    limiter,
                }
            })
            .collect();
        Rules {
            client_ip: spec.client_ip.unwrap_or_default(),
            country_db,
            asn_db,
            access: spec.access,
            browser: spec.browser,
            hotlink: spec.hotlink,
            zone_hosts,
            legal: spec.legal,
            custom_index: FilterIndex::new(spec.custom.iter().map(|r| &r.filter)),
            custom: spec.custom,
            rate,
            descriptions: spec.descriptions,
        }
    }

    /// Runs every phase after host routing; fills `decision` and returns when one decides.
    ///
    /// Order: IP access rules (allow, then block by IP 1006 / ASN 1005 / country 1009) →
    /// browser signature 1010 → hotlink 1011 → legal 1026 → custom rules 1020 → rate limits 1015.
    /// An access `allow` skips the access blocks, the browser check and the custom rules; a
    /// custom `allow` skips the remaining custom rules and the rate limits. Legal and hotlink
    /// rules always apply.
    pub(crate) fn evaluate(&self, cx: &Cx<'_>, zone: usize, now: Instant, decision: &mut Decision) {
        let mut skip_security = false;

        // Phase: IP access rules.
        let t = &self.access;
        if !t.ids.is_empty() {
            let allowed = t
                .allow_ip
                .lookup(cx.client_ip)
                .copied()
                .or_else(|| lookup_num(&t.allow_asn, || cx.asn()))
                .or_else(|| lookup_country(&t.allow_country, || cx.country()));
            if let Some(i) = allowed {
                skip_security = true;
                decision.rule_id = t.ids.get(i).cloned();
            } else {
                let blocked = t
                    .block_ip
                    .lookup(cx.client_ip)
                    .map(|i| (*i, codes::IP_BANNED))
                    .or_else(|| {
                        lookup_num(&t.block_asn, || cx.asn()).map(|i| (i, codes::ASN_BANNED))
                    })
                    .or_else(|| {
                        lookup_country(&t.block_country, || cx.country())
                            .map(|i| (i, codes::COUNTRY_BANNED))
                    });
                if let Some((i, code)) = blocked {
                    return refuse(decision, code, t.ids.get(i).cloned());
                }
            }
        }

        // Phase: browser signature.
        if let (Some(b), false) = (&self.browser, skip_security) {
            let ua = cx.header(http::header::USER_AGENT);
            let bad = if ua.trim().is_empty() {
                b.block_empty
            } else {
                b.agents.as_ref().is_some_and(|set| set.is_match(&ua))
            };
            if bad {
                return refuse(
                    decision,
                    codes::BROWSER_SIGNATURE_BANNED,
                    Some(b.id.clone()),
                );
            }
        }

        // Phase: hotlink protection.
        if let Some(h) = &self.hotlink
            && self.is_hotlink(h, cx, zone)
        {
            return refuse(decision, codes::HOTLINKING_DENIED, Some(h.id.clone()));
        }

        // Phase: legal restrictions.
        for (id, f) in &self.legal {
            if f.matches(cx) {
                return refuse(decision, codes::LEGAL_BLOCK, Some(id.clone()));
            }
        }

        // Phase: custom rules, first match in file order. The index only leaves out rules that
        // cannot match, and yields the others in file order.
        if !skip_security {
            for i in self.custom_index.candidates(cx) {
                let r = &self.custom[i];
                if !r.filter.matches(cx) {
                    continue;
                }
                match r.action {
                    Action::Log => decision.logged.push(r.id.clone()),
                    Action::Block => {
                        return refuse(decision, codes::FIREWALL_RULE_BLOCKED, Some(r.id.clone()));
                    }
                    Action::Allow => {
                        decision.rule_id = Some(r.id.clone());
                        return;
                    }
                }
            }
        }

        // Phase: rate limiting.
        for r in &self.rate {
            if r.filter.as_ref().is_some_and(|f| !f.matches(cx)) {
                continue;
            }
            let mut h = r.limiter.key_hasher();
            for c in &r.characteristics {
                match c {
                    Characteristic::Ip => match cx.client_ip {
                        std::net::IpAddr::V4(v4) => h.write(&v4.octets()),
                        std::net::IpAddr::V6(v6) => h.write(&v6.octets()),
                    },
                    Characteristic::Host => {
                        for b in cx.host.bytes() {
                            h.write_u8(b.to_ascii_lowercase());
                        }
                    }
                    Characteristic::Path => h.write(cx.path.as_bytes()),
                    Characteristic::Header(name) => h.write(cx.header(name).as_bytes()),
                }
                // A separator so that ("ab","c") and ("a","bc") differ.
                h.write_u8(0xff);
            }
            if let Outcome::Limited(wait) = r.limiter.hit(h.finish(), now) {
                decision.verdict = Verdict::Refuse {
                    code: codes::RATE_LIMITED,
                    retry_after: Some(retry_secs(wait)),
                };
                decision.rule_id = Some(r.id.clone());
                return;
            }
        }
    }

    fn is_hotlink(&self, h: &HotlinkSpec, cx: &Cx<'_>, zone: usize) -> bool {
        let Some(ext) = path_extension(cx.path) else {
            return false;
        };
        if ext.len() > 16 || !h.extensions.iter().any(|e| e.eq_ignore_ascii_case(&ext)) {
            return false;
        }
        let referer = cx.header(http::header::REFERER);
        let referer = referer.trim();
        if referer.is_empty() {
            // No Referer: a direct visit or a privacy setting, not evidence of hotlinking.
            return false;
        }
        let host = referer_host(referer);
        let local = self
            .zone_hosts
            .get(zone)
            .is_some_and(|t| t.lookup(host).is_some());
        !local && h.allowed.lookup(host).is_none()
    }

    /// Tracked rate-limit keys across all rules.
    pub(crate) fn rate_limit_keys(&self) -> usize {
        self.rate.iter().map(|r| r.limiter.keys()).sum()
    }
}

fn refuse(decision: &mut Decision, code: u16, id: Option<Arc<str>>) {
    decision.verdict = Verdict::refuse(code);
    decision.rule_id = id;
}

fn lookup_num(map: &HashMap<u32, usize>, get: impl FnOnce() -> Option<u32>) -> Option<usize> {
    if map.is_empty() {
        return None;
    }
    map.get(&get()?).copied()
}

fn lookup_country(
    map: &HashMap<Country, usize>,
    get: impl FnOnce() -> Option<Country>,
) -> Option<usize> {
    if map.is_empty() {
        return None;
    }
    map.get(&get()?).copied()
}

/// The host of a Referer URL (`https://user@host:port/path` → `host:port`); garbage gives "".
/// The extension of a path's file name as the origin will see it: the last segment, without
/// `;params` (`/a.png;jsessionid=1`), percent-decoded (`/a%2epng`). Borrowed unless the segment
/// holds an escape.
fn path_extension(path: &str) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    fn file_name(path: &str) -> &str {
        let last = path.rsplit('/').next().unwrap_or("");
        last.split(';').next().unwrap_or("")
    }
    fn extension(name: &str) -> Option<&str> {
        name.rsplit_once('.').map(|(_, ext)| ext)
    }
    match percent_encoding::percent_decode_str(file_name(path)).decode_utf8_lossy() {
        Cow::Borrowed(name) => extension(name).map(Cow::Borrowed),
        // An escaped `/` or `;` ends up in the name: take the file name again.
        Cow::Owned(name) => extension(file_name(&name)).map(|e| Cow::Owned(e.to_owned())),
    }
}

fn referer_host(referer: &str) -> &str {
    let Some((_, rest)) = referer.split_once("://") else {
        return "";
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.rsplit('@').next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_offsets_through_escapes() {
        let text = r#"e = "a \"b\" c""#;
        let value = 4..text.len();
        // decoded: a "b" c — the `c` is at decoded offset 6.
        assert_eq!(&text[map_string_offset(text, value.clone(), 6)..][..1], "c");
        let text = "e = 'x y'";
        assert_eq!(&text[map_string_offset(text, 4..9, 2)..][..1], "y");
        let text = "e = '''\nab\ncd'''";
        assert_eq!(&text[map_string_offset(text, 4..text.len(), 3)..][..1], "c");
    }

    #[test]
    fn path_extensions() {
        use std::borrow::Cow;
        let ext = |p| path_extension(p).map(Cow::into_owned);
        assert_eq!(ext("/a/cat.png").as_deref(), Some("png"));
        assert!(matches!(
            path_extension("/a/cat.png"),
            Some(Cow::Borrowed("png"))
        ));
        assert_eq!(ext("/x%2epng").as_deref(), Some("png"));
        assert_eq!(ext("/x%2EPNG").as_deref(), Some("PNG"));
        assert_eq!(ext("/x.png;jsessionid=1").as_deref(), Some("png"));
        assert_eq!(ext("/x.p%6Eg;a=b;c").as_deref(), Some("png"));
        assert_eq!(ext("/x.png%3bjsessionid=1").as_deref(), Some("png"));
        assert_eq!(ext("/dir.png/file"), None);
        assert_eq!(ext("/dir.png;v=1/file"), None);
        assert_eq!(ext("/dir.png%2ffile"), None);
        assert_eq!(ext("/"), None);
    }

    #[test]
    fn referer_hosts() {
        assert_eq!(
            referer_host("https://u:p@Img.Example.com:8443/a?b"),
            "Img.Example.com:8443"
        );
        assert_eq!(referer_host("nonsense"), "");
    }
}
