//! `CompiledPolicy`: the policy ready to decide requests, built once per load or reload.

use std::path::Path;
use std::time::Instant;

use crate::bots::settings::BotsConfig;
use crate::bots::{self, BotCatalog};
use crate::decision::{Decision, RequestFacts};
use crate::error::{Diagnostics, PolicyError, ProblemKind, unlocated};
use crate::expr::{Cx, ResponseFacts};
use crate::fleet::RedisConfig;
use crate::host::{HostTable, ParsedHost};
use crate::identity::{Evidence, Identity, NoEvidence};
use crate::policy::{self, BrandingConfig, Connections, Listener, Zone, ZoneId};
use crate::rules::{self, RateLimitState, RuleInfo, Rules};
use crate::trace::{NoTrace, Recorder, Trace};
use crate::verdict::Verdict;

mod phases;

/// A loaded policy: listeners, zones, branding and the compiled rules.
///
/// Immutable and `Send + Sync`: the edge holds it in an `ArcSwap` and swaps in a new one on
/// reload. Rate-limit counters live behind `Arc`s so a reload can carry them over.
#[derive(Debug)]
pub struct CompiledPolicy {
    listeners: Vec<Listener>,
    admin: Option<String>,
    admin_trace: bool,
    branding: BrandingConfig,
    /// `branding` as the problem renderers take it, made once per load.
    problem_branding: signpost_problem::Branding,
    connections: Connections,
    zones: Vec<Zone>,
    hosts: HostTable,
    rules: Rules,
    /// How requests are identified; `None` when nothing in the policy asks who is asking.
    identification: Option<Identification>,
    /// `[ledger]`: where charged responses are recorded.
    ledger: Option<crate::crawl::LedgerConfig>,
    /// The SHA-256 of the policy text, in lower-case hex: which policy is loaded.
    sha256: Box<str>,
    /// `[challenge] keys`: what signs clearances and challenges, when the policy has them.
    challenge_keys: Option<signpost_challenge::KeyRing>,
}

/// The policy's way of telling who is asking.
#[derive(Debug)]
struct Identification {
    config: BotsConfig,
    catalog: BotCatalog,
}

impl CompiledPolicy {
    /// Parses, validates and compiles policy text.
    ///
    /// `source` names the text in messages (usually its path). `base_dir` resolves relative
    /// paths (databases, TLS files). `previous` is the policy being replaced, if any: rate-limit
    /// rules whose definition did not change keep their counters.
    ///
    /// Every problem found is reported, each at `source:line:col`.
    pub fn from_toml(
        text: &str,
        source: &str,
        base_dir: &Path,
        previous: Option<&CompiledPolicy>,
    ) -> Result<CompiledPolicy, PolicyError> {
        let mut d = Diagnostics::new(text, source);
        let Some(file) = policy::parse(&mut d) else {
            return Err(d.into_error());
        };
        let policy = policy::validate(&file, &mut d, base_dir);
        let rules = rules::validate(&file, &mut d, base_dir);
        let crawl_control = file.zone.iter().any(|z| z.get_ref().crawl.is_some());
        let identification =
            (file.bots.is_some() || !file.bot.is_empty() || rules.identity_needed || crawl_control)
                .then(|| Identification {
                    config: file
                        .bots
                        .as_ref()
                        .map(|b| bots::settings::validate(b, &mut d, base_dir))
                        .unwrap_or_default(),
                    catalog: bots::validate(&file.bot, &mut d),
                });
        if let Some(identification) = &identification {
            for zone in &file.zone {
                if let Some(crawl) = &zone.get_ref().crawl {
                    crate::crawl::check_bot_names(&mut d, crawl, &identification.catalog);
                }
            }
        }
        let ledger = file
            .ledger
            .as_ref()
            .map(|l| crate::crawl::compile_ledger(&mut d, l, base_dir));
        if ledger.is_none() {
            for zone in &file.zone {
                if let Some(at) = zone
                    .get_ref()
                    .crawl
                    .as_ref()
                    .and_then(crate::crawl::first_charge)
                {
                    d.at(
                        ProblemKind::Invalid,
                        at,
                        "a zone that charges crawlers needs a [ledger] table with the `dir` where the edge records every charged response",
                    );
                }
            }
        }
        let challenge_keys = file
            .challenge
            .as_ref()
            .and_then(|c| crate::challenge::load_keys(&mut d, c.get_ref(), base_dir));
        if file.challenge.is_none() {
            let crawl_at = file
                .zone
                .iter()
                .zip(&policy.zones)
                .find(|(_, z)| {
                    z.challenge.under_attack || z.crawl.as_ref().is_some_and(|c| c.may_challenge())
                })
                .map(|(f, _)| f.get_ref().name.span());
            if let Some(at) = rules.challenge_needed_at.clone().or(crawl_at) {
                d.at_with_hint(
                    ProblemKind::Invalid,
                    at,
                    "a challenge needs the keys that sign clearances: add a [challenge] table",
                    Some("[challenge]\nkeys = [{ id = 1, secret_file = \"challenge.key\" }]  # e.g. `openssl rand -hex 32 > challenge.key`".into()),
                );
            }
        }
        let mut hosts = HostTable::default();
        for (i, zone) in policy.zones.iter().enumerate() {
            for (pattern, at) in &zone.patterns {
                if let Some(prev) = hosts.insert(pattern, i) {
                    let other = &policy.zones[prev].name;
                    d.at(
                        ProblemKind::Invalid,
                        at.clone(),
                        format!("this host is already served by zone `{other}`"),
                    );
                }
            }
        }
        if d.has_errors() {
            // Don't open databases for a policy that is already refused.
            return Err(d.into_error());
        }
        let previous_rate = previous.map_or(&[][..], |p| &p.rules.rate[..]);
        let rules = Rules::compile(rules, &policy.zones, previous_rate, &mut d);
        if d.has_errors() {
            return Err(d.into_error());
        }
        Ok(CompiledPolicy {
            listeners: policy.listeners,
            admin: policy.admin,
            admin_trace: policy.admin_trace,
            problem_branding: policy.branding.to_problem_branding(),
            branding: policy.branding,
            connections: policy.connections,
            zones: policy.zones,
            hosts,
            rules,
            identification,
            ledger,
            sha256: hex_sha256(text.as_bytes()),
            challenge_keys,
        })
    }

    /// Reads the policy file, then [`from_toml`](Self::from_toml) with the file's directory as
    /// `base_dir` and its path as `source`.
    pub fn load(
        path: &Path,
        previous: Option<&CompiledPolicy>,
    ) -> Result<CompiledPolicy, PolicyError> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            PolicyError::single(unlocated(
                ProblemKind::Read,
                &source,
                format!("cannot read the policy file: {e}"),
            ))
        })?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        CompiledPolicy::from_toml(&text, &source, base_dir, previous)
    }

    /// The client-facing listeners, in file order.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// The admin listener address (`127.0.0.1:9901` unless set; `None` when `admin = "off"`).
    pub fn admin(&self) -> Option<&str> {
        self.admin.as_deref()
    }

    /// Whether the admin listener serves `/trace` even when it is bound beyond loopback
    /// (`admin_trace = true`); on loopback it always does.
    pub fn admin_trace(&self) -> bool {
        self.admin_trace
    }

    /// All zones, in file order: a [`ZoneId`]'s index is its place here.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The zone a [`Decision::zone`] of this policy names.
    ///
    /// # Panics
    ///
    /// When `id` comes from another policy with fewer zones: an id is only meaningful with the
    /// policy that decided it.
    pub fn zone(&self, id: ZoneId) -> &Zone {
        &self.zones[id.0]
    }

    /// The zone called `name` (`[[zone]] name`), for tools that name a zone.
    pub fn zone_named(&self, name: &str) -> Option<ZoneId> {
        self.zones.iter().position(|z| &*z.name == name).map(ZoneId)
    }

    /// Whom an answer the phases did not settle is for: the zone the Host selects (host routing
    /// alone, no phase that refuses runs) and the client as `[client_ip]` reads it. The edge's
    /// answers made before the phases (the error test endpoint, a request no zone may accept)
    /// are dressed with that zone's error rules, as a refusal on the same host would be.
    pub fn answering(&self, facts: &RequestFacts<'_>) -> (Option<ZoneId>, std::net::IpAddr) {
        let host = ParsedHost::new(facts.host);
        let zone = self.hosts.lookup_name(host.name).map(ZoneId);
        (
            zone,
            self.rules.client_ip.resolve(facts.peer, facts.headers),
        )
    }

    /// Deadlines and limits on client connections (`[connections]`).
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// Whether `peer` is a trusted proxy (`[client_ip] trusted_proxies`): its connections carry
    /// many clients, so the per-client connection cap does not apply to it.
    pub fn is_trusted_proxy(&self, peer: std::net::IpAddr) -> bool {
        self.rules.client_ip.is_trusted(peer)
    }

    /// How error responses are branded.
    pub fn branding(&self) -> &BrandingConfig {
        &self.branding
    }

    /// The branding of error responses as [`signpost_problem::render`] takes it.
    pub fn problem_branding(&self) -> &signpost_problem::Branding {
        &self.problem_branding
    }

    /// Decides one request. `now` drives the rate limiters (inject it in tests).
    pub fn decide(&self, facts: &RequestFacts<'_>, now: Instant) -> Decision {
        self.decide_with(facts, &NoEvidence, now)
    }

    /// [`decide`](Self::decide), asking `evidence` what the edge knows from outside (the
    /// signature's keys, address lists, reverse DNS) when the policy identifies requests.
    pub fn decide_with(
        &self,
        facts: &RequestFacts<'_>,
        evidence: &dyn Evidence,
        now: Instant,
    ) -> Decision {
        let mut decision = self.undecided(facts);
        // A phase that decides breaks out; the decision then holds its verdict.
        let _ = self.phases(facts, evidence, now, &mut decision, &mut NoTrace);
        decision
    }

    /// Whether the policy identifies requests: the edge then verifies signatures and keeps
    /// address lists and reverse DNS answers for it.
    pub fn identifies(&self) -> bool {
        self.identification.is_some()
    }

    /// `[bots]`, when the policy identifies requests.
    pub fn bots(&self) -> Option<&BotsConfig> {
        self.identification.as_ref().map(|i| &i.config)
    }

    /// `[ledger]`, when the policy has one (a zone that charges crawlers needs it).
    pub fn ledger(&self) -> Option<&crate::crawl::LedgerConfig> {
        self.ledger.as_ref()
    }

    /// `[challenge] keys`: the ring that signs and checks clearances and challenges, when the
    /// policy has one (every policy with a `challenge` action does).
    pub fn challenge_keys(&self) -> Option<&signpost_challenge::KeyRing> {
        self.challenge_keys.as_ref()
    }

    /// The known bots, when the policy identifies requests.
    pub fn bot_catalog(&self) -> Option<&BotCatalog> {
        self.identification.as_ref().map(|i| &i.catalog)
    }

    /// Decides one request as [`decide`](Self::decide) does, through the same phases, and
    /// records every step: each rule considered, the field values it saw, whether it matched,
    /// and where evaluation stopped. Changes nothing: rate limits are peeked at, not counted (the
    /// decision says what `decide` would answer at `now` with the counters as they are), and
    /// fleet rate limits are listed in [`Decision::fleet`] without asking Redis.
    pub fn trace(&self, facts: &RequestFacts<'_>, now: Instant) -> Trace {
        self.trace_assuming(facts, now, None, None)
    }

    /// [`trace`](Self::trace), taking `country` (ISO 3166-1 alpha-2) and `asn`, when given, as
    /// the client's instead of what the policy's databases say: what would a client from there
    /// get. A `country` that is not two letters is ignored.
    pub fn trace_assuming(
        &self,
        facts: &RequestFacts<'_>,
        now: Instant,
        country: Option<&str>,
        asn: Option<u32>,
    ) -> Trace {
        let mut decision = self.undecided(facts);
        let mut recorder = Recorder {
            country: country.and_then(crate::geo::country_code),
            asn,
            ..Recorder::default()
        };
        let flow = self.phases(facts, &NoEvidence, now, &mut decision, &mut recorder);
        recorder.finish(decision, flow.is_break())
    }

    fn undecided(&self, facts: &RequestFacts<'_>) -> Decision {
        Decision {
            client_ip: self.rules.client_ip.resolve(facts.peer, facts.headers),
            zone: None,
            verdict: Verdict::Proxy,
            rule_id: None,
            logged: Vec::new(),
            fleet: Vec::new(),
            answers: Vec::new(),
            divert: None,
            identity: Identity::default(),
            crawl: None,
            challenge: None,
        }
    }

    /// Whether the policy has a country database and an ASN database (`[geo]`).
    pub fn geo_databases(&self) -> (bool, bool) {
        (self.rules.country_db.is_some(), self.rules.asn_db.is_some())
    }

    /// Whether the policy has any error rule: when it has none, answering an error asks nothing
    /// more of it.
    pub fn has_error_rules(&self) -> bool {
        !self.rules.errors.is_empty()
    }

    /// The error rule for an answer the edge is about to make, in Cloudflare's precedence: the
    /// `response` of the custom or rate-limit rule that refused (`refused_by`, the decision's
    /// `rule_id`), then the first of the zone's error rules, then of the global ones, that
    /// matches the request and `response`. Returns the id of the rule that speaks, and what it
    /// changes. Called only when an error is being answered, so a request no error concerns
    /// never pays for it.
    pub fn error_rule(
        &self,
        zone: Option<ZoneId>,
        facts: &RequestFacts<'_>,
        client_ip: std::net::IpAddr,
        response: ResponseFacts,
        refused_by: Option<&str>,
    ) -> Option<(&str, &signpost_problem::Custom)> {
        if self.rules.errors.is_empty() {
            return None;
        }
        if let Some(found) =
            refused_by.and_then(|id| self.rules.errors.rule_response(id, response.edge_code))
        {
            return Some(found);
        }
        let mut cx = Cx::new(
            facts,
            crate::ipset::canonical(client_ip),
            self.rules.country_db.as_ref(),
            self.rules.asn_db.as_ref(),
        );
        cx.response = Some(response);
        self.rules
            .errors
            .first_match(zone.map(ZoneId::index), &cx)
            .map(|rule| (&*rule.id, &rule.custom))
    }

    /// Counts the answer to a request that rules counting answers let through
    /// ([`Decision::answers`], from this policy's decision: a reload's new policy has rules of
    /// its own): each rule whose `counting_expression` matches the request and
    /// `response` counts it, on this instance at once; for fleet-scope rules the checks returned
    /// are for the edge to count in Redis ([`FleetCheck::counts`] is true), then report as
    /// [`FleetCheck::shared`] or [`FleetCheck::fallback`] (whose verdicts only keep the cache
    /// of refused keys: the answer is gone). `identity` is who the decision found the request to
    /// be, for a counting expression that reads a bot field.
    ///
    /// [`FleetCheck::counts`]: crate::FleetCheck::counts
    /// [`FleetCheck::shared`]: crate::FleetCheck::shared
    /// [`FleetCheck::fallback`]: crate::FleetCheck::fallback
    pub fn count_answers(
        &self,
        answers: &[crate::AnswerCount],
        facts: &RequestFacts<'_>,
        client_ip: std::net::IpAddr,
        identity: Option<&Identity>,
        response: ResponseFacts,
        now: Instant,
    ) -> Vec<crate::FleetCheck> {
        if answers.is_empty() {
            return Vec::new();
        }
        let mut cx = Cx::new(
            facts,
            crate::ipset::canonical(client_ip),
            self.rules.country_db.as_ref(),
            self.rules.asn_db.as_ref(),
        );
        cx.response = Some(response);
        if let Some(identity) = identity {
            cx.identity = identity.clone();
        }
        answers
            .iter()
            .filter_map(|a| self.rules.rate.get(a.rule)?.count_answer(a.key, &cx, now))
            .collect()
    }

    /// The client's country (ISO code) from the country database, `None` without one or when
    /// the address has no record: the `::GEO::` token of error rules.
    pub fn country(&self, client_ip: std::net::IpAddr) -> Option<String> {
        let code = self
            .rules
            .country_db
            .as_ref()?
            .lookup(crate::ipset::canonical(client_ip))?;
        std::str::from_utf8(&code).ok().map(str::to_owned)
    }

    /// The `[redis]` section, when fleet-scope rate limits need one.
    pub fn redis(&self) -> Option<&RedisConfig> {
        self.rules.redis.as_ref()
    }

    /// Rate-limit keys currently tracked, across all rules (for metrics).
    pub fn rate_limit_keys(&self) -> usize {
        self.rules.rate_limit_keys()
    }

    /// Since the rate-limit rules' counters were created (a reload keeps unchanged rules'):
    /// keys that were not being limited evicted to make room for new keys, and new keys counted
    /// in a rule's fixed-size sketch because every slot held a key being limited.
    pub fn rate_limit_pressure(&self) -> (u64, u64) {
        self.rules.rate_limit_pressure()
    }

    /// Each rate-limit rule's counters as they are now, in file order (for metrics).
    pub fn rate_limit_states(&self) -> Vec<RateLimitState> {
        self.rules.rate_limit_states()
    }

    /// Every rule that can decide a request, or note one (`log`): its id, phase and action, in
    /// the order the phases run them. The rule ids a [`Decision`] names are among these.
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.rules.list()
    }

    /// The SHA-256 of the policy text this was compiled from, in lower-case hex: the same file
    /// gives the same hash on every instance, so that an operator can tell which policy each
    /// one serves. (Files the policy names, such as databases, are not part of it.)
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

/// `bytes`' SHA-256 in lower-case hex.
fn hex_sha256(bytes: &[u8]) -> Box<str> {
    use sha2::Digest;
    use std::fmt::Write;
    let digest = sha2::Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        // Writing into a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex.into_boxed_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Code;

    const POLICY: &str = r#"
        [[zone]]
        name = "example"
        hosts = ["example.com", "*.example.com"]
        origin = "127.0.0.1:8000"

        [[zone]]
        name = "direct"
        hosts = ["192.0.2.1"]
        origin = "127.0.0.1:8001"
    "#;

    fn decide_host(p: &CompiledPolicy, host: &str) -> Decision {
        let headers = http::HeaderMap::new();
        let facts = RequestFacts {
            peer: "::ffff:198.51.100.4".parse().unwrap(),
            host,
            method: "GET",
            uri: "/",
            tls: false,
            sni: None,
            headers: &headers,
        };
        p.decide(&facts, Instant::now())
    }

    #[test]
    fn host_routing_codes() {
        let p = CompiledPolicy::from_toml(POLICY, "t.toml", Path::new("."), None).unwrap();
        let d = decide_host(&p, "WWW.Example.com:8080");
        assert_eq!((d.verdict, d.zone), (Verdict::Proxy, Some(ZoneId(0))));
        assert_eq!(
            d.client_ip,
            "198.51.100.4".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(
            decide_host(&p, "other.org").verdict,
            Verdict::refuse(Code::new(1001))
        );
        assert_eq!(
            decide_host(&p, "").verdict,
            Verdict::refuse(Code::new(1001))
        );
        assert_eq!(
            decide_host(&p, "203.0.113.9").verdict,
            Verdict::refuse(Code::new(1003))
        );
        assert_eq!(
            decide_host(&p, "[2001:db8::1]:443").verdict,
            Verdict::refuse(Code::new(1003))
        );
        assert_eq!(decide_host(&p, "192.0.2.1:8080").zone, Some(ZoneId(1)));
    }

    #[test]
    fn the_policy_brands_its_problems() {
        let p = CompiledPolicy::from_toml(POLICY, "t.toml", Path::new("."), None).unwrap();
        assert_eq!(p.problem_branding(), &signpost_problem::Branding::default());
        let branded = format!(
            "[errors]\nfooter = \"Served by example.com.\"\n\
             type_uri_template = \"https://errors.example.com/{{code}}\"\n{POLICY}"
        );
        let p = CompiledPolicy::from_toml(&branded, "t.toml", Path::new("."), None).unwrap();
        let branding = p.problem_branding();
        assert_eq!(branding.footer, "Served by example.com.");
        assert_eq!(
            branding.type_uri_template.as_deref(),
            Some("https://errors.example.com/{code}")
        );
        let only_template = format!(
            "[errors]\ntype_uri_template = \"https://errors.example.com/{{code}}\"\n{POLICY}"
        );
        let p = CompiledPolicy::from_toml(&only_template, "t.toml", Path::new("."), None).unwrap();
        assert_eq!(
            p.problem_branding().footer,
            signpost_problem::Branding::default().footer,
            "an unset footer keeps the renderers' own"
        );
    }

    #[test]
    fn defaults_and_accessors() {
        let p = CompiledPolicy::from_toml(POLICY, "t.toml", Path::new("."), None).unwrap();
        assert_eq!(p.listeners()[0].addr, "0.0.0.0:8080");
        assert_eq!(p.admin(), Some("127.0.0.1:9901"));
        let z = p.zone(decide_host(&p, "a.example.com.").zone.unwrap());
        assert_eq!(&*z.name, "example");
        assert_eq!(z.read_timeout, std::time::Duration::from_secs(100));
        assert_eq!(z.connect_timeout, std::time::Duration::from_secs(10));
        assert_eq!(z.write_timeout, std::time::Duration::from_secs(30));
        assert_eq!(z.max_body_size, crate::DEFAULT_MAX_BODY_SIZE);
        assert!(!z.allow_trace);
        assert_eq!(*p.connections(), Connections::default());
    }

    #[test]
    fn connections_and_body_options_are_read() {
        let text = "[connections]\nidle_timeout = \"5s\"\nheader_timeout = \"2s\"\n\
                    body_timeout = \"3s\"\nbody_min_rate = \"2KiB/s\"\nmax_per_client = 7\n\
                    tls_handshake_timeout = \"4s\"\nsend_timeout = \"20s\"\n\
                    max_in_flight_per_client = 9\nh2_max_requests_per_connection = 50\n\
                    [[zone]]\nname = \"a\"\nhosts = [\"x.com\"]\norigin = \"127.0.0.1:1\"\n\
                    max_body_size = \"64KiB\"\nallow_trace = true\n";
        let p = CompiledPolicy::from_toml(text, "t.toml", Path::new("."), None).unwrap();
        let secs = std::time::Duration::from_secs;
        assert_eq!(
            *p.connections(),
            Connections {
                idle_timeout: secs(5),
                header_timeout: secs(2),
                body_timeout: secs(3),
                body_min_rate: 2048,
                max_per_client: 7,
                tls_handshake_timeout: secs(4),
                send_timeout: secs(20),
                max_in_flight_per_client: 9,
                h2_max_requests_per_connection: 50,
            }
        );
        assert_eq!(p.zones()[0].max_body_size, 65536);
        assert!(p.zones()[0].allow_trace);
    }

    #[test]
    fn bad_http2_and_tls_limits_are_reported_in_place() {
        let text = "[connections]\ntls_handshake_timeout = \"0s\"\nsend_timeout = \"soon\"\n\
                    max_in_flight_per_client = 0\nh2_max_requests_per_connection = -1\n\
                    [[zone]]\nname = \"a\"\nhosts = [\"x.com\"]\norigin = \"127.0.0.1:1\"\n";
        let e = CompiledPolicy::from_toml(text, "t.toml", Path::new("."), None)
            .unwrap_err()
            .to_string();
        for want in [
            "t.toml:2:25: a duration must be greater than zero",
            "t.toml:3:16: `soon` is not a duration",
            "t.toml:4:28: `max_in_flight_per_client` must be",
            "t.toml:5:34: `h2_max_requests_per_connection` must be",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
    }

    #[test]
    fn bad_connection_values_are_reported_in_place() {
        let text = "[connections]\nidle_timeout = \"0s\"\nbody_min_rate = \"fast\"\n\
                    max_per_client = 0\n\
                    [[zone]]\nname = \"a\"\nhosts = [\"x.com\"]\norigin = \"127.0.0.1:1\"\n\
                    max_body_size = \"12 parsecs\"\n";
        let e = CompiledPolicy::from_toml(text, "t.toml", Path::new("."), None)
            .unwrap_err()
            .to_string();
        for want in [
            "t.toml:2:16: a duration must be greater than zero",
            "t.toml:3:17: `fast` is not a rate",
            "t.toml:4:18: `max_per_client` must be",
            "t.toml:9:17: `parsecs` is not a size unit",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
    }

    #[test]
    fn a_zone_may_fix_the_language_of_its_pages() {
        let zone = |extra: &str| {
            format!(
                "[[zone]]\nname = \"a\"\nhosts = [\"x.com\"]\norigin = \"127.0.0.1:1\"\n{extra}"
            )
        };
        let p = CompiledPolicy::from_toml(&zone(""), "t.toml", Path::new("."), None).unwrap();
        assert_eq!(
            p.zones()[0].language,
            None,
            "by default, Accept-Language decides"
        );
        for (tag, language) in [
            ("fr", signpost_problem::Language::Fr),
            ("DE", signpost_problem::Language::De),
            ("en", signpost_problem::Language::En),
        ] {
            let text = zone(&format!("language = \"{tag}\"\n"));
            let p = CompiledPolicy::from_toml(&text, "t.toml", Path::new("."), None).unwrap();
            assert_eq!(p.zones()[0].language, Some(language), "{tag}");
        }
        let e = CompiledPolicy::from_toml(
            &zone("language = \"fr-CA\"\n"),
            "t.toml",
            Path::new("."),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("t.toml:5:12: `fr-CA` is not a language of the error pages; write one of \"en\", \"fr\", \"de\""),
            "{e}"
        );
    }

    #[test]
    fn same_host_in_two_zones_is_an_error() {
        let text = "[[zone]]\nname = \"a\"\nhosts = [\"x.com\"]\norigin = \"127.0.0.1:1\"\n\
                    [[zone]]\nname = \"b\"\nhosts = [\"X.com\"]\norigin = \"127.0.0.1:2\"\n";
        let e = CompiledPolicy::from_toml(text, "t.toml", Path::new("."), None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.toml:7:10: this host is already served by zone `a`"),
            "{e}"
        );
    }

    #[test]
    fn compiled_policy_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<CompiledPolicy>();
    }
}
