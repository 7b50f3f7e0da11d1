//! `PolicyFile`: the policy TOML exactly as written, with spans kept for later messages.
//!
//! These types only mirror the text. Meaning (addresses, durations, expressions) is checked in
//! `validate`, which reports every problem against the spans kept here.

use serde::Deserialize;
use serde_spanned::Spanned;

pub(crate) use crate::answer_file::{AnswerFile, ErrorRuleFile};

/// The whole policy file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    pub listen: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub listener: Vec<Spanned<ListenerFile>>,
    pub admin: Option<Spanned<String>>,
    /// Whether the admin listener serves `/trace` when it is bound beyond loopback.
    pub admin_trace: Option<bool>,
    pub errors: Option<ErrorsFile>,
    pub connections: Option<ConnectionsFile>,
    pub client_ip: Option<Spanned<ClientIpFile>>,
    pub geo: Option<GeoFile>,
    #[serde(default)]
    pub zone: Vec<Spanned<ZoneFile>>,
    #[serde(default)]
    pub access_rule: Vec<Spanned<AccessRuleFile>>,
    pub browser_check: Option<Spanned<BrowserCheckFile>>,
    pub hotlink: Option<Spanned<HotlinkFile>>,
    #[serde(default)]
    pub legal_rule: Vec<Spanned<LegalRuleFile>>,
    #[serde(default)]
    pub custom_rule: Vec<Spanned<CustomRuleFile>>,
    #[serde(default)]
    pub rate_limit: Vec<Spanned<RateLimitFile>>,
    pub redis: Option<Spanned<RedisFile>>,
    #[serde(default)]
    pub error_rule: Vec<Spanned<ErrorRuleFile>>,
    /// `[bots]`: how requests are identified.
    pub bots: Option<crate::bots::settings::BotsFile>,
    /// `[[bot]]`: known bots added, changed or removed.
    #[serde(default)]
    pub bot: Vec<Spanned<crate::bots::BotFile>>,
    /// `[ledger]`: where charged responses are recorded (pay per crawl).
    pub ledger: Option<crate::crawl::LedgerFile>,
    /// `[challenge]`: the keys that sign clearances and challenges.
    pub challenge: Option<Spanned<crate::challenge::KeysFile>>,
}

/// `[zone.origin_errors]`: the origin's own errors, for agents.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OriginErrorsFile {
    pub structured: Option<bool>,
}

/// `[redis]`: where fleet-scope rate limits keep their counters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedisFile {
    pub url: Spanned<String>,
    pub password: Option<String>,
    pub db: Option<Spanned<i64>>,
    pub timeout: Option<Spanned<String>>,
    pub key_prefix: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListenerFile {
    pub addr: Spanned<String>,
    pub tls: Option<Spanned<TlsFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsFile {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorsFile {
    pub footer: Option<String>,
    pub type_uri_template: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectionsFile {
    pub idle_timeout: Option<Spanned<String>>,
    pub header_timeout: Option<Spanned<String>>,
    pub body_timeout: Option<Spanned<String>>,
    pub body_min_rate: Option<Spanned<String>>,
    pub max_per_client: Option<Spanned<i64>>,
    pub tls_handshake_timeout: Option<Spanned<String>>,
    pub send_timeout: Option<Spanned<String>>,
    pub max_in_flight_per_client: Option<Spanned<i64>>,
    pub h2_max_requests_per_connection: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientIpFile {
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
    pub header: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GeoFile {
    pub country_db: Option<Spanned<String>>,
    pub asn_db: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ZoneFile {
    pub name: Spanned<String>,
    pub hosts: Spanned<Vec<Spanned<String>>>,
    pub origin: Spanned<String>,
    pub origin_sni: Option<Spanned<String>>,
    pub origin_verify_cert: Option<bool>,
    pub connect_timeout: Option<Spanned<String>>,
    pub read_timeout: Option<Spanned<String>>,
    pub write_timeout: Option<Spanned<String>>,
    pub max_body_size: Option<Spanned<String>>,
    pub allow_trace: Option<bool>,
    pub language: Option<Spanned<String>>,
    pub markdown: Option<crate::markdown::MarkdownFile>,
    pub origin_errors: Option<OriginErrorsFile>,
    #[serde(default)]
    pub error_rule: Vec<Spanned<ErrorRuleFile>>,
    pub crawl: Option<crate::crawl::CrawlFile>,
    pub robots: Option<crate::robots::RobotsFile>,
    pub tls: Option<crate::tls::ZoneTlsFile>,
    pub challenge: Option<crate::challenge::ChallengeFile>,
    #[serde(default)]
    pub divert: Vec<Spanned<DivertFile>>,
}

/// `[[zone.divert]]`: another origin a custom rule with `action = "divert"` may send requests to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DivertFile {
    pub name: Spanned<String>,
    pub origin: Spanned<String>,
    pub origin_sni: Option<Spanned<String>>,
    pub origin_verify_cert: Option<bool>,
}

/// Fields every rule shares.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AccessRuleFile {
    pub id: Spanned<String>,
    #[expect(
        dead_code,
        reason = "a note for people reading the policy; checked to be text, not used"
    )]
    pub description: Option<String>,
    pub action: Spanned<String>,
    pub difficulty: Option<Spanned<i64>>,
    pub ip: Option<Spanned<Vec<Spanned<String>>>>,
    pub asn: Option<Spanned<Vec<Spanned<i64>>>>,
    pub country: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BrowserCheckFile {
    pub id: Option<Spanned<String>>,
    #[expect(
        dead_code,
        reason = "a note for people reading the policy; checked to be text, not used"
    )]
    pub description: Option<String>,
    pub block_empty_user_agent: Option<bool>,
    #[serde(default)]
    pub block_user_agents: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HotlinkFile {
    pub id: Option<Spanned<String>>,
    #[expect(
        dead_code,
        reason = "a note for people reading the policy; checked to be text, not used"
    )]
    pub description: Option<String>,
    pub extensions: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    pub allowed_referers: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LegalRuleFile {
    pub id: Spanned<String>,
    #[expect(
        dead_code,
        reason = "a note for people reading the policy; checked to be text, not used"
    )]
    pub description: Option<String>,
    pub expression: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CustomRuleFile {
    pub id: Spanned<String>,
    #[expect(
        dead_code,
        reason = "a note for people reading the policy; checked to be text, not used"
    )]
    pub description: Option<String>,
    pub action: Spanned<String>,
    pub difficulty: Option<Spanned<i64>>,
    pub expression: Spanned<String>,
    /// The zone's `[[zone.divert]]` a `divert` action sends the request to.
    pub divert: Option<Spanned<String>>,
    pub response: Option<Spanned<AnswerFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimitFile {
    pub id: Spanned<String>,
    #[expect(
        dead_code,
        reason = "a note for people reading the policy; checked to be text, not used"
    )]
    pub description: Option<String>,
    pub expression: Option<Spanned<String>>,
    pub counting_expression: Option<Spanned<String>>,
    pub characteristics: Option<Spanned<Vec<Spanned<String>>>>,
    pub period: Spanned<String>,
    pub requests_per_period: Spanned<i64>,
    pub mitigation_timeout: Option<Spanned<String>>,
    pub max_keys: Option<Spanned<i64>>,
    pub scope: Option<Spanned<String>>,
    /// `block` (the default, 1015) or `challenge`.
    pub action: Option<Spanned<String>>,
    pub difficulty: Option<Spanned<i64>>,
    pub response: Option<Spanned<AnswerFile>>,
}
