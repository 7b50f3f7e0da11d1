//! Who is asking: what the edge knows from outside the policy (the request's Web Bot Auth
//! signature checked against its agent's key directory, the published address lists and the
//! reverse DNS names known bots are verified by), handed to the policy's identify phase as
//! [`Evidence`]; and what the origin and the access log learn of the answer.
//!
//! Everything here answers from memory: what is not known yet is fetched in the background
//! (`keydir`, `iplists`, `rdns`, all through `outside`'s bounded client) and reads as "not known
//! yet" meanwhile.
//!
//! Bounded cost under attack (docs/policy.md, "What an attacker can and cannot do"):
//! - the cheap checks (size, tag, window, coverage, https agent) run before any key is looked up;
//! - an Ed25519 check (about 100 µs) runs only with a key in hand, and its verdict is kept per
//!   (signature base, signature, key) until the signature expires: a replayed signature, honest
//!   or not, costs a hash and a lookup, never a second check;
//! - failed checks are budgeted per client (`failed_verifications_per_minute`, a client being an
//!   IPv4 address or an IPv6 /64) and for the whole edge ([`MAX_FAILED_CHECKS_PER_SECOND`]); past
//!   either, a signature reads `unverified` (reason `verification_budget`) without being checked.

pub mod iplists;
pub mod keydir;
mod metrics;
pub mod outside;
pub mod rdns;
mod runtime;

pub use metrics::{IdentityMetrics, OutcomeCounter};

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::HeaderValue;
use http::header::HeaderName;
use pingora_http::RequestHeader;
use signpost_policy::{
    BotCatalog, BotStatus, BotsConfig, Evidence, Identity, ReverseDnsName, Signature,
    SignatureOutcome,
};
use signpost_webbotauth::{Candidate, Limits, Parsed, SignedRequest};

use crate::iplists::{IpLists, IpListsConfig};
use crate::keydir::{KeyDirConfig, KeyDirectories, KeyLookup};
use crate::outside::{Outside, OutsideConfig};
use crate::rdns::{DnsCheck, ReverseDns, ReverseDnsConfig};

/// Signature verdicts kept, each until its signature expires.
pub const MAX_VERDICTS: usize = 16_384;
/// Clients whose failed checks are counted at once.
pub const MAX_CLIENTS: usize = 65_536;
/// Failed Ed25519 checks the whole edge makes per second, whoever sends them: about a fifth of a
/// core at 100 µs each.
pub const MAX_FAILED_CHECKS_PER_SECOND: u32 = 2_000;
/// The largest key directory fetched (64 Ed25519 keys take under 16 KiB).
const MAX_DIRECTORY_BYTES: usize = 64 * 1024;
/// The largest published address list fetched (100,000 networks as JSON take about 4 MiB).
const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;
/// The deadline of one directory fetch, and of one list fetch.
const DIRECTORY_TIMEOUT: Duration = Duration::from_secs(10);
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// `Signature-Input`, the header every signed request carries: looked up on every request, by a
/// name built once rather than parsed and lower-cased from text each time.
static SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");

/// The edge's means of telling who is asking, built when a policy identifies requests and kept
/// across reloads whose `[bots]` did not change (its caches with it).
pub struct Identifier {
    config: BotsConfig,
    limits: Limits,
    directories: Arc<KeyDirectories>,
    lists: Arc<IpLists>,
    rdns: Arc<ReverseDns>,
    verdicts: Mutex<Verdicts>,
    budget: Mutex<Budget>,
    hasher: std::collections::hash_map::RandomState,
}

impl Identifier {
    /// Everything `config` asks for; fails only on a CA file that cannot be read.
    pub fn start(
        config: &BotsConfig,
        metrics: &IdentityMetrics,
    ) -> Result<Arc<Identifier>, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut extra_roots = Vec::new();
        for path in &config.trusted_roots {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            extra_roots.extend(certs);
        }
        let outside = |max_bytes, timeout| {
            Outside::new(OutsideConfig {
                allow_private: config.allow_private_fetch,
                extra_roots: extra_roots.clone(),
                timeout,
                max_bytes,
            })
            .map(Arc::new)
            .map_err(|e| e.to_string())
        };
        let fetches = metrics.key_directory_fetches.clone();
        let directories = KeyDirectories::new(
            outside(MAX_DIRECTORY_BYTES, DIRECTORY_TIMEOUT)?,
            KeyDirConfig {
                observer: Some(Arc::new(move |outcome| fetches.inc(outcome))),
                ..KeyDirConfig::default()
            },
        );
        directories.set_static(
            config
                .keys
                .iter()
                .map(|(agent, key)| {
                    (
                        agent.to_string(),
                        signpost_webbotauth::DirectoryKey {
                            keyid: signpost_webbotauth::jwk_thumbprint(key),
                            key: *key,
                        },
                    )
                })
                .collect(),
        );
        let lists = IpLists::new(
            outside(MAX_LIST_BYTES, LIST_TIMEOUT)?,
            IpListsConfig {
                fetch_timeout: LIST_TIMEOUT,
                ..IpListsConfig::default()
            },
            metrics.ip_list_refreshes.clone(),
        );
        let rdns = ReverseDns::new(
            ReverseDnsConfig {
                nameservers: (!config.nameservers.is_empty()).then(|| config.nameservers.clone()),
                ..ReverseDnsConfig::default()
            },
            metrics.reverse_dns_lookups.clone(),
        );
        Ok(Arc::new(Identifier {
            config: config.clone(),
            limits: Limits {
                max_skew: config.clock_skew,
                max_validity: config.max_validity,
                ..Limits::default()
            },
            directories,
            lists,
            rdns,
            verdicts: Mutex::default(),
            budget: Mutex::default(),
            hasher: std::collections::hash_map::RandomState::new(),
        }))
    }

    /// The `[bots]` this identifier was built for.
    pub fn config(&self) -> &BotsConfig {
        &self.config
    }

    /// Keeps the address lists `catalog` names fresh (a reload may name others).
    pub fn watch(&self, catalog: &BotCatalog) {
        self.lists.watch(&catalog.ip_range_urls());
    }

    /// What the edge knows of the request `req` for `authority` (as received).
    pub fn evidence<'a>(
        &'a self,
        req: &'a RequestHeader,
        authority: &'a str,
        tls: bool,
    ) -> RequestEvidence<'a> {
        RequestEvidence {
            identifier: self,
            req,
            authority,
            tls,
        }
    }

    /// For a signed request whose agent's key directory is being fetched for the first time
    /// (its signature read `unverified`, reason `directory_pending`): waits for that fetch, at
    /// most `bound`, and says whether the directory is now known (a new decision would read the
    /// signature against it). `false` at once for any other request.
    pub async fn await_pending_directory(
        &self,
        req: &RequestHeader,
        authority: &str,
        tls: bool,
        bound: Duration,
    ) -> bool {
        let signed = SignedRequest {
            method: req.method.as_str(),
            scheme: if tls { "https" } else { "http" },
            authority,
            target: req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
            headers: &req.headers,
        };
        let Parsed::Candidate(candidate) =
            signpost_webbotauth::parse(&signed, unix_now(), &self.limits)
        else {
            return false;
        };
        let Some(agent) = candidate.agent() else {
            return false;
        };
        self.directories.wait_fetched(agent, bound).await
    }

    /// The Ed25519 check of `candidate` with `key`, once per (base, signature, key) while the
    /// signature is valid, within the failure budgets.
    fn check(&self, candidate: &Candidate, key: &[u8; 32], client: IpAddr) -> Signature {
        let digest = {
            let mut h = self.hasher.build_hasher();
            h.write(candidate.signature_base());
            h.write(candidate.signature());
            h.write(key);
            h.finish()
        };
        let now = Instant::now();
        if let Some(ok) = lock(&self.verdicts).get(digest, now) {
            return checked(candidate, ok);
        }
        let per_minute = self.config.failed_verifications_per_minute;
        if !lock(&self.budget).may_check(client, now, per_minute) {
            return Signature {
                outcome: SignatureOutcome::Unverified,
                reason: "verification_budget",
                ..signed_by(candidate)
            };
        }
        let result = candidate.verify(key);
        if result.is_err() {
            lock(&self.budget).failed(client, now);
        }
        let left = candidate.expires().saturating_sub(unix_now());
        let until = now + Duration::from_secs(left) + self.config.clock_skew;
        lock(&self.verdicts).insert(digest, result.is_ok(), until);
        match result {
            Ok(()) => checked(candidate, true),
            Err(why) => Signature {
                outcome: SignatureOutcome::Invalid,
                reason: why.name(),
                ..signed_by(candidate)
            },
        }
    }
}

/// The outcome of a check already made.
fn checked(candidate: &Candidate, ok: bool) -> Signature {
    Signature {
        outcome: if ok {
            SignatureOutcome::Verified
        } else {
            SignatureOutcome::Invalid
        },
        reason: if ok { "" } else { "bad_signature" },
        ..signed_by(candidate)
    }
}

/// What a signature says of its signer, whatever its outcome.
fn signed_by(candidate: &Candidate) -> Signature {
    let mut covered = 0u8;
    for (i, name) in signpost_policy::COVERED_HEADERS.iter().enumerate() {
        if candidate.covers_header(name) {
            covered |= 1 << i;
        }
    }
    Signature {
        agent: candidate.agent().map(|a| Arc::from(a.url.as_str())),
        keyid: Some(Arc::from(candidate.keyid())),
        covered_headers: covered,
        ..Signature::default()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One request's evidence: asked by the policy at most once per question.
pub struct RequestEvidence<'a> {
    identifier: &'a Identifier,
    req: &'a RequestHeader,
    authority: &'a str,
    tls: bool,
}

impl Evidence for RequestEvidence<'_> {
    fn signature(&self, client_ip: IpAddr) -> Signature {
        let headers = &self.req.headers;
        // An unsigned request pays this one lookup.
        if !headers.contains_key(&SIGNATURE_INPUT) {
            return Signature::default();
        }
        let id = self.identifier;
        let signed = SignedRequest {
            method: self.req.method.as_str(),
            scheme: if self.tls { "https" } else { "http" },
            authority: self.authority,
            target: self.req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
            headers,
        };
        match signpost_webbotauth::parse(&signed, unix_now(), &id.limits) {
            Parsed::Absent => Signature::default(),
            Parsed::Invalid(why) => Signature {
                outcome: SignatureOutcome::Invalid,
                reason: why.name(),
                ..Signature::default()
            },
            Parsed::Candidate(candidate) => match candidate.agent() {
                // Keys are found by (directory, key id), never by key id alone: a signature that
                // names no directory can be checked against nothing.
                None => Signature {
                    outcome: SignatureOutcome::Unverified,
                    reason: "no_agent",
                    ..signed_by(&candidate)
                },
                Some(agent) => match id.directories.lookup(agent, candidate.keyid()) {
                    KeyLookup::Found(key) => id.check(&candidate, &key, client_ip),
                    other => Signature {
                        outcome: SignatureOutcome::Unverified,
                        reason: match other {
                            KeyLookup::KeyNotInDirectory => "key_unknown",
                            KeyLookup::Pending => "directory_pending",
                            _ => "directory_unreachable",
                        },
                        ..signed_by(&candidate)
                    },
                },
            },
        }
    }

    fn in_ip_list(&self, url: &str, ip: IpAddr) -> Option<bool> {
        self.identifier.lists.contains(url, ip)
    }

    fn reverse_dns(&self, ip: IpAddr) -> ReverseDnsName {
        match self.identifier.rdns.check(ip) {
            DnsCheck::Pending => ReverseDnsName::Pending,
            DnsCheck::NoName | DnsCheck::Unconfirmed => ReverseDnsName::Unconfirmed,
            DnsCheck::Confirmed(name) => ReverseDnsName::Confirmed(name),
        }
    }
}

/// Signature verdicts, the oldest out first: at most [`MAX_VERDICTS`].
#[derive(Default)]
struct Verdicts {
    map: HashMap<u64, (bool, Instant)>,
    order: VecDeque<u64>,
}

impl Verdicts {
    fn get(&self, digest: u64, now: Instant) -> Option<bool> {
        self.map
            .get(&digest)
            .filter(|(_, until)| now < *until)
            .map(|(ok, _)| *ok)
    }

    fn insert(&mut self, digest: u64, ok: bool, until: Instant) {
        while self.map.len() >= MAX_VERDICTS {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
        if self.map.insert(digest, (ok, until)).is_none() {
            self.order.push_back(digest);
        }
    }
}

/// Failed checks per client per minute, and for the whole edge per second.
#[derive(Default)]
struct Budget {
    clients: HashMap<IpAddr, (Instant, u32)>,
    second: Option<(Instant, u32)>,
}

const MINUTE: Duration = Duration::from_secs(60);

impl Budget {
    /// Whether a check for `client` may run now.
    fn may_check(&mut self, client: IpAddr, now: Instant, per_minute: u32) -> bool {
        if let Some((start, n)) = self.second
            && now.duration_since(start) < Duration::from_secs(1)
            && n >= MAX_FAILED_CHECKS_PER_SECOND
        {
            return false;
        }
        match self.clients.get(&signpost_policy::client_key(client)) {
            Some((start, n)) => now.duration_since(*start) >= MINUTE || *n < per_minute,
            None => true,
        }
    }

    /// Counts a failed check for `client`.
    fn failed(&mut self, client: IpAddr, now: Instant) {
        match &mut self.second {
            Some((start, n)) if now.duration_since(*start) < Duration::from_secs(1) => *n += 1,
            other => *other = Some((now, 1)),
        }
        let key = signpost_policy::client_key(client);
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_CLIENTS {
            self.clients
                .retain(|_, (start, _)| now.duration_since(*start) < MINUTE);
            if self.clients.len() >= MAX_CLIENTS {
                // Every place holds a client still within its minute: this one goes uncounted,
                // and the edge-wide budget still bounds what it can cost.
                return;
            }
        }
        let entry = self.clients.entry(key).or_insert((now, 0));
        if now.duration_since(entry.0) >= MINUTE {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

/// Tells the origin who is asking, in `name` (the policy's `origin_header`), after removing every
/// copy of it, and of the default header, that the client sent: the origin can trust what it
/// reads there.
pub fn add_origin_header(
    upstream: &mut RequestHeader,
    identity: Option<&Identity>,
    name: Option<&HeaderName>,
) {
    upstream.remove_header(signpost_policy::DEFAULT_ORIGIN_HEADER);
    let Some(name) = name else { return };
    if name.as_str() != signpost_policy::DEFAULT_ORIGIN_HEADER {
        upstream.remove_header(name);
    }
    if let Some(identity) = identity.filter(|i| !i.is_nobody())
        && let Ok(value) = HeaderValue::from_str(&origin_header_value(identity))
    {
        let _ = upstream.insert_header(name.clone(), value);
    }
}

/// The identity as a structured-field dictionary (RFC 9651):
/// `bot="GPTBot", status=verified, method=ip-range, category="AI Crawler", signature=absent`,
/// with `agent` and `keyid` when the signature names them.
pub fn origin_header_value(identity: &Identity) -> String {
    let mut out = String::new();
    if let Some(bot) = &identity.bot {
        out.push_str("bot=");
        sf_string(&mut out, &bot.name);
        let _ = write!(out, ", status={}", identity.status.as_str());
        if let BotStatus::Verified(method) = identity.status {
            let _ = write!(out, ", method={}", method.as_str());
        }
        out.push_str(", category=");
        sf_string(&mut out, &bot.category);
        out.push_str(", ");
    }
    let _ = write!(out, "signature={}", identity.signature.outcome.as_str());
    if identity.signature.outcome != SignatureOutcome::Absent {
        if let Some(agent) = &identity.signature.agent {
            out.push_str(", agent=");
            sf_string(&mut out, agent);
        }
        if let Some(keyid) = &identity.signature.keyid {
            out.push_str(", keyid=");
            sf_string(&mut out, keyid);
        }
    }
    out
}

/// Appends `text` as a structured-field String: quoted, `"` and `\` escaped, and anything a
/// String cannot hold (controls, non-ASCII) left out, so that no value can break the header.
fn sf_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use signpost_policy::{Identity, Signature, SignatureOutcome};

    use super::*;

    #[test]
    fn the_origin_header_is_a_structured_dictionary_no_value_can_break() {
        let identity = Identity {
            signature: Signature {
                outcome: SignatureOutcome::Verified,
                agent: Some(Arc::from("https://a.example/\"x\\\r\n\u{7f}é")),
                keyid: Some(Arc::from("k1")),
                ..Signature::default()
            },
            ..Identity::default()
        };
        let value = origin_header_value(&identity);
        assert_eq!(
            value,
            r#"signature=verified, agent="https://a.example/\"x\\", keyid="k1""#
        );
        assert!(HeaderValue::from_str(&value).is_ok());
    }

    #[test]
    fn client_copies_are_removed_and_nobody_gets_no_header() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("signpost-bot", "bot=\"Googlebot\", status=verified")
            .unwrap();
        req.append_header("x-verified", "forged").unwrap();
        req.append_header("signpost-bot", "again").unwrap();
        let name = HeaderName::from_static("x-verified");
        add_origin_header(&mut req, Some(&Identity::default()), Some(&name));
        assert!(req.headers.get("signpost-bot").is_none());
        assert!(req.headers.get("x-verified").is_none());
        let signed = Identity {
            signature: Signature {
                outcome: SignatureOutcome::Invalid,
                reason: "expired",
                ..Signature::default()
            },
            ..Identity::default()
        };
        add_origin_header(&mut req, Some(&signed), Some(&name));
        assert_eq!(req.headers.get("x-verified").unwrap(), "signature=invalid");
    }
}
