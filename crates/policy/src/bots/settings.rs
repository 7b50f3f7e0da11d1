//! `[bots]`: how the edge identifies requests: where it may fetch key directories and address
//! lists, which resolver checks reverse DNS, the signature window, the budget of failed
//! verifications, and keys agreed privately.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use serde_spanned::Spanned;

use super::normalize_agent;
use crate::error::{Diagnostics, ProblemKind};

/// The request header that tells the origin who the edge verified (any copy a client sends is
/// removed first).
pub const DEFAULT_ORIGIN_HEADER: &str = "signpost-bot";
/// How far a signature's `created` may be ahead of the edge's clock, and its `expires` behind.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);
/// The longest validity (`expires - created`) a signature may claim. The draft recommends no
/// more than 24 hours and Cloudflare advises a minute; an hour keeps a stolen signature short-lived
/// while leaving agents room to reuse one across a burst of requests.
pub const DEFAULT_MAX_VALIDITY: Duration = Duration::from_secs(3600);
/// Signatures one client may fail to verify per minute before the edge stops verifying its
/// signatures (they read as `unverified`) for the rest of the minute: the Ed25519 check costs
/// about 100 µs, so a client flooding invalid signatures buys at most this many per minute.
pub const DEFAULT_FAILED_VERIFICATIONS_PER_MINUTE: u32 = 60;

/// `[bots]` as the edge uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotsConfig {
    /// The header carrying the verified identity to the origin; `None` when `origin_header = ""`.
    pub origin_header: Option<http::HeaderName>,
    /// Whether key directories and address lists may be fetched from private, loopback and
    /// link-local addresses (`allow_private_fetch`, default false).
    pub allow_private_fetch: bool,
    /// Extra CA certificates (PEM files) trusted for those fetches, beside the public roots.
    pub trusted_roots: Vec<PathBuf>,
    /// DNS servers for reverse DNS checks; empty: the system's resolver configuration.
    pub nameservers: Vec<SocketAddr>,
    /// Tolerance on the signature's `created` and `expires`.
    pub clock_skew: Duration,
    /// The longest validity a signature may claim.
    pub max_validity: Duration,
    /// Failed verifications one client may cost per minute.
    pub failed_verifications_per_minute: u32,
    /// Keys agreed privately: (key directory, Ed25519 public key).
    pub keys: Vec<(Arc<str>, [u8; 32])>,
}

impl Default for BotsConfig {
    fn default() -> Self {
        BotsConfig {
            origin_header: Some(http::HeaderName::from_static(DEFAULT_ORIGIN_HEADER)),
            allow_private_fetch: false,
            trusted_roots: Vec::new(),
            nameservers: Vec::new(),
            clock_skew: DEFAULT_CLOCK_SKEW,
            max_validity: DEFAULT_MAX_VALIDITY,
            failed_verifications_per_minute: DEFAULT_FAILED_VERIFICATIONS_PER_MINUTE,
            keys: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BotsFile {
    pub origin_header: Option<Spanned<String>>,
    pub allow_private_fetch: Option<bool>,
    #[serde(default)]
    pub trusted_roots: Vec<Spanned<String>>,
    #[serde(default)]
    pub nameservers: Vec<Spanned<String>>,
    pub clock_skew: Option<Spanned<String>>,
    pub max_validity: Option<Spanned<String>>,
    pub failed_verifications_per_minute: Option<Spanned<i64>>,
    #[serde(default)]
    pub key: Vec<Spanned<KeyFile>>,
}

/// `[[bots.key]]`: a signing key agreed with an agent outside any directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyFile {
    /// The key directory the agent names in `Signature-Agent`.
    pub agent: Spanned<String>,
    /// The Ed25519 public key: its JWK `x`, base64url.
    pub x: Spanned<String>,
}

pub(crate) fn validate(file: &BotsFile, d: &mut Diagnostics<'_>, base_dir: &Path) -> BotsConfig {
    let mut config = BotsConfig::default();
    if let Some(name) = &file.origin_header {
        let text = name.get_ref().trim();
        if text.is_empty() {
            config.origin_header = None;
        } else {
            match http::HeaderName::from_bytes(text.to_ascii_lowercase().as_bytes()) {
                Ok(h) => config.origin_header = Some(h),
                Err(_) => d.at(
                    ProblemKind::Invalid,
                    name.span(),
                    format!("`{text}` is not a header name"),
                ),
            }
        }
    }
    config.allow_private_fetch = file.allow_private_fetch.unwrap_or(false);
    config.trusted_roots = file
        .trusted_roots
        .iter()
        .map(|p| {
            let path = base_dir.join(p.get_ref());
            if !path.is_file() {
                d.at(
                    ProblemKind::Invalid,
                    p.span(),
                    format!("cannot read `{}`", path.display()),
                );
            }
            path
        })
        .collect();
    for ns in &file.nameservers {
        let text = ns.get_ref().trim();
        let parsed = text.parse::<SocketAddr>().or_else(|_| {
            text.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
        });
        match parsed {
            Ok(addr) => config.nameservers.push(addr),
            Err(_) => d.at(
                ProblemKind::Invalid,
                ns.span(),
                format!("`{text}` is not an address: write \"192.0.2.53\" or \"192.0.2.53:5353\""),
            ),
        }
    }
    config.clock_skew = crate::units::duration(d, file.clock_skew.as_ref(), DEFAULT_CLOCK_SKEW);
    config.max_validity =
        crate::units::duration(d, file.max_validity.as_ref(), DEFAULT_MAX_VALIDITY);
    if let Some(v) = &file.max_validity
        && config.max_validity > Duration::from_secs(24 * 3600)
    {
        d.at(
            ProblemKind::Invalid,
            v.span(),
            "a signature valid longer than 24 hours is what the draft advises against: at most \"24h\"",
        );
    }
    if let Some(n) = &file.failed_verifications_per_minute {
        match u32::try_from(*n.get_ref()) {
            Ok(n) if n > 0 => config.failed_verifications_per_minute = n,
            _ => d.at(
                ProblemKind::Invalid,
                n.span(),
                "failed_verifications_per_minute must be between 1 and 4294967295",
            ),
        }
    }
    for key in &file.key {
        let k = key.get_ref();
        let agent = k.agent.get_ref().trim();
        if !agent.to_ascii_lowercase().starts_with("https://") {
            d.at(
                ProblemKind::Invalid,
                k.agent.span(),
                "the agent is the https URL it names in Signature-Agent",
            );
            continue;
        }
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(k.x.get_ref().trim().trim_end_matches('='));
        match x.ok().and_then(|b| <[u8; 32]>::try_from(b).ok()) {
            Some(bytes) => config.keys.push((Arc::from(normalize_agent(agent)), bytes)),
            None => d.at(
                ProblemKind::Invalid,
                k.x.span(),
                "an Ed25519 public key is 32 bytes, base64url (a JWK's `x`)",
            ),
        }
    }
    config
}
