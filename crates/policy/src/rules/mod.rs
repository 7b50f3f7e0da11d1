//! The rules after host routing, one module per phase: each holds its rule types, the check of
//! its TOML section (stage: `validate`, whose parts make a `RulesSpec`), and its evaluation (stage: `check`
//! against one request). `CompiledPolicy::decide` lists the phases in order.

mod access;
mod browser;
mod common;
mod custom;
mod errors;
mod hotlink;
mod rate;

use std::ops::Range;
use std::path::{Path, PathBuf};

use http::header::HeaderName;

pub(crate) use access::{AccessTables, Trust};
pub(crate) use browser::BrowserCheck;
use common::{Needs, RuleIds, sp};
pub(crate) use custom::{CustomRule, CustomRules, LegalRules};
pub(crate) use errors::ErrorRules;
pub(crate) use hotlink::HotlinkSpec;
pub(crate) use rate::{RateRule, RateSpec};

use std::sync::Arc;

use common::Action;

use crate::error::{Diagnostics, ProblemKind};
use crate::file::PolicyFile;
use crate::geo::{AsnDb, CountryDb};
use crate::host::{HostPattern, HostTable};
use crate::ipset::{IpTable, parse_net};

/// Every rule section, checked, before databases are opened and limiters built.
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
    pub legal: LegalRules,
    pub custom: Vec<CustomRule>,
    pub rate: Vec<RateSpec>,
    pub redis: Option<crate::fleet::RedisConfig>,
    pub errors: ErrorRules,
    /// Whether a rule reads who the request is (a bot field, or a rate limit counting per
    /// agent): the policy then identifies requests.
    pub identity_needed: bool,
    /// Where a rule first challenges, to report a missing `[challenge] keys`.
    pub challenge_needed_at: Option<Range<usize>>,
}

/// Checks the client address, the databases and every rule section; collects all problems.
pub(crate) fn validate(file: &PolicyFile, d: &mut Diagnostics<'_>, base_dir: &Path) -> RulesSpec {
    let mut spec = RulesSpec::default();
    let mut ids = RuleIds::default();

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

    let mut needs = Needs::default();
    spec.access = access::validate(file, d, &mut ids, &mut needs);
    spec.browser = browser::validate(file, d, &mut ids);
    spec.hotlink = hotlink::validate(file, d, &mut ids);
    spec.legal = custom::validate_legal(file, d, &mut ids, &mut needs);
    spec.custom = custom::validate_custom(file, d, &mut ids, &mut needs);
    spec.redis = file.redis.as_ref().map(|r| crate::fleet::validate(r, d));
    spec.rate = rate::validate(file, d, &mut ids, &mut needs, spec.redis.is_some());
    spec.errors = errors::validate(file, d, &mut ids, &mut needs, base_dir);
    spec.country_needed_at = needs.country_needed_at;
    spec.asn_needed_at = needs.asn_needed_at;
    spec.identity_needed = needs.identity_needed;
    spec.challenge_needed_at = needs.challenge_needed_at;
    spec
}

/// A rule of the policy as the operator's metrics and logs name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    /// Its id, unique in the policy (a default one for `[browser_check]` and `[hotlink]`).
    pub id: Arc<str>,
    /// The phase that runs it, one of [`PHASES`](crate::PHASES).
    pub phase: &'static str,
    /// What it does when it matches: `allow`, `block`, `log`, or `rate_limit` (a rate limit
    /// refuses the requests over its limit).
    pub action: &'static str,
}

/// One rate-limit rule's counters as they are now. The totals run from when the rule's counters
/// were created: a reload keeps an unchanged rule's, and starts a changed rule's at zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitState {
    /// The rule's id.
    pub rule: Arc<str>,
    /// Keys tracked now (on this instance; a fleet rule's are in Redis, these only its fallback's).
    pub keys: usize,
    /// Keys not being limited that were evicted, least recently seen first, to count new keys.
    pub evicted: u64,
    /// Requests of new keys counted in the rule's fixed-size sketch because every slot held a
    /// key being limited.
    pub sketched: u64,
}

/// Every rule, compiled, with the databases they need.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) client_ip: crate::client::ClientIp,
    pub(crate) country_db: Option<CountryDb>,
    pub(crate) asn_db: Option<AsnDb>,
    pub(crate) access: AccessTables,
    pub(crate) browser: Option<BrowserCheck>,
    pub(crate) hotlink: Option<HotlinkSpec>,
    /// Per zone: its own host patterns without `*`, to tell a local Referer from a foreign one.
    pub(crate) zone_hosts: Vec<HostTable>,
    pub(crate) legal: LegalRules,
    pub(crate) custom: CustomRules,
    pub(crate) rate: Vec<RateRule>,
    pub(crate) redis: Option<crate::fleet::RedisConfig>,
    pub(crate) errors: ErrorRules,
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
            .map(|r| RateRule::build(r, previous, spec.redis.as_ref()))
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
            custom: CustomRules::new(spec.custom),
            rate,
            redis: spec.redis,
            errors: spec.errors,
        }
    }

    /// Tracked rate-limit keys across all rules.
    pub(crate) fn rate_limit_keys(&self) -> usize {
        self.rate.iter().map(|r| r.limiter.keys()).sum()
    }

    /// Across all rules: open keys evicted for new ones, and new keys counted in a sketch.
    pub(crate) fn rate_limit_pressure(&self) -> (u64, u64) {
        self.rate.iter().fold((0, 0), |(e, s), r| {
            let (e2, s2) = r.limiter.pressure();
            (e + e2, s + s2)
        })
    }

    /// Each rate-limit rule's counters as they are now, in file order.
    pub(crate) fn rate_limit_states(&self) -> Vec<RateLimitState> {
        self.rate
            .iter()
            .map(|r| {
                let (evicted, sketched) = r.limiter.pressure();
                RateLimitState {
                    rule: r.id().clone(),
                    keys: r.limiter.keys(),
                    evicted,
                    sketched,
                }
            })
            .collect()
    }

    /// Every rule that can decide a request (or, with `log`, note one), phase by phase in the
    /// order they run, each in file order.
    pub(crate) fn list(&self) -> Vec<RuleInfo> {
        let mut rules = Vec::new();
        let mut add = |phase, id: &Arc<str>, action| {
            rules.push(RuleInfo {
                id: id.clone(),
                phase,
                action,
            });
        };
        for (id, action) in self.access.rules() {
            add("access_rules", id, action.as_str());
        }
        if let Some(browser) = &self.browser {
            add("browser_check", browser.id(), Action::Block.as_str());
        }
        if let Some(hotlink) = &self.hotlink {
            add("hotlink", hotlink.id(), Action::Block.as_str());
        }
        for id in self.legal.ids() {
            add("legal_rules", id, Action::Block.as_str());
        }
        for (id, action) in self.custom.rules() {
            add("custom_rules", id, action.as_str());
        }
        for r in &self.rate {
            add("rate_limits", r.id(), rate::ACTION);
        }
        rules
    }
}

pub(crate) use rate::check as check_rate_limits;

#[cfg(test)]
mod tests {
    use super::common::map_string_offset;

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
}
