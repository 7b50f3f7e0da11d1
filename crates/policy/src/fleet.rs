//! Fleet scope: rate-limit counters shared by every instance through Redis.
//!
//! This crate does no I/O: it checks the `[redis]` section, and for a request that a fleet rule
//! counts it hands the edge a [`FleetCheck`] (the rule, the shared key, the arguments of the
//! counting script). The edge makes the one Redis call and reports back through
//! [`FleetCheck::shared`] or [`FleetCheck::fallback`], which give the verdict; the decision's
//! fleet step ([`FleetCount`](crate::FleetCount)) says which check comes next and which verdict
//! decides. A key Redis refused is remembered here until its retry time, so its next requests
//! are refused without asking Redis again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_spanned::Spanned;
use sha2::{Digest, Sha256};

use crate::Code;
use crate::error::{Diagnostics, ProblemKind};
use crate::file::RedisFile;
use crate::ratelimit::{Limiter, Outcome, retry_secs};
use crate::verdict::Verdict;

/// Default time one Redis call may take before the edge falls back.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(5);
/// Default prefix of every key signpost writes in Redis.
pub const DEFAULT_KEY_PREFIX: &str = "signpost:";

/// What to do with a request a fleet rule counts when Redis cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Count it on this instance alone, as an instance-scope rule would (the default).
    Local,
    /// Let it through uncounted.
    Allow,
    /// Refuse it (1015, `Retry-After: 1`).
    Refuse,
}

impl OnError {
    /// The policy's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Allow => "allow",
            OnError::Refuse => "refuse",
        }
    }
}

/// The `[redis]` section, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://host[:port][/db]` or `rediss://...` (TLS), as written.
    pub url: String,
    /// Password for `AUTH`, when set here rather than in the URL.
    pub password: Option<String>,
    /// Database number, when set here rather than in the URL.
    pub db: Option<u32>,
    /// How long one call may take before the edge falls back.
    pub timeout: Duration,
    /// Prefix of every key written.
    pub key_prefix: String,
    /// What to do when Redis cannot answer in time.
    pub on_error: OnError,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("timeout", &self.timeout)
            .field("key_prefix", &self.key_prefix)
            .field("on_error", &self.on_error)
            .finish()
    }
}

/// The URL with any password replaced by `***`, for logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

fn sp<T>(s: &Spanned<T>) -> std::ops::Range<usize> {
    s.span()
}

/// Checks `[redis]`.
pub(crate) fn validate(r: &Spanned<RedisFile>, d: &mut Diagnostics<'_>) -> RedisConfig {
    let f = r.get_ref();
    let url = f.url.get_ref().trim().to_owned();
    check_url(&url, &f.url, d);
    let db =
        f.db.as_ref()
            .and_then(|db| match u32::try_from(*db.get_ref()) {
                Ok(n) if n <= 65_535 => Some(n),
                _ => {
                    d.at(
                        ProblemKind::Invalid,
                        sp(db),
                        "db must be between 0 and 65535",
                    );
                    None
                }
            });
    let timeout = match &f.timeout {
        None => DEFAULT_REDIS_TIMEOUT,
        Some(t) => match humantime::parse_duration(t.get_ref().trim()) {
            Ok(v) if v >= Duration::from_millis(1) && v <= Duration::from_secs(10) => v,
            Ok(_) => {
                d.at(
                    ProblemKind::Invalid,
                    sp(t),
                    "timeout must be between 1ms and 10s (a few milliseconds is usual)",
                );
                DEFAULT_REDIS_TIMEOUT
            }
            Err(e) => {
                d.at(
                    ProblemKind::Invalid,
                    sp(t),
                    format!(
                        "`{}` is not a duration ({e}); write e.g. \"5ms\"",
                        t.get_ref()
                    ),
                );
                DEFAULT_REDIS_TIMEOUT
            }
        },
    };
    let key_prefix = match &f.key_prefix {
        None => DEFAULT_KEY_PREFIX.to_owned(),
        Some(p) => {
            let v = p.get_ref();
            if v.len() > 64 || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                d.at(
                    ProblemKind::Invalid,
                    sp(p),
                    "key_prefix must be at most 64 bytes, without spaces or control characters",
                );
            }
            v.clone()
        }
    };
    let on_error = match &f.on_error {
        None => OnError::Local,
        Some(o) => {
            match o.get_ref().trim() {
                "local" => OnError::Local,
                "allow" => OnError::Allow,
                "refuse" => OnError::Refuse,
                other => {
                    d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(o),
                    format!("unknown on_error `{other}`"),
                    Some("on_error is \"local\" (count on this instance), \"allow\" or \"refuse\"".into()),
                );
                    OnError::Local
                }
            }
        }
    };
    RedisConfig {
        url,
        password: f.password.clone(),
        db,
        timeout,
        key_prefix,
        on_error,
    }
}

fn check_url(url: &str, at: &Spanned<String>, d: &mut Diagnostics<'_>) {
    let Some(rest) = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))
    else {
        d.at_with_hint(
            ProblemKind::Invalid,
            sp(at),
            format!("`{url}` is not a redis:// or rediss:// URL"),
            Some("e.g. \"redis://127.0.0.1:6379\" or \"rediss://redis.internal:6380/0\"".into()),
        );
        return;
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => ("", None),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    let problem = if host.is_empty() {
        Some("the URL names no host".to_owned())
    } else if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        Some("the port must be a number between 1 and 65535".to_owned())
    } else if !path.is_empty() && path.parse::<u32>().is_err() {
        Some(format!("the path must be a database number, not `/{path}`"))
    } else {
        None
    };
    if let Some(p) = problem {
        d.at(ProblemKind::Invalid, sp(at), p);
    }
}

/// A fleet-scope rule's shared part: where its counters live in Redis, its limits, its local
/// fallback limiter and its cache of refused keys.
#[derive(Debug)]
pub(crate) struct FleetRule {
    pub id: Arc<str>,
    /// `prefix` + `rl:` + a digest of the rule's definition + `:`; a changed rule starts afresh.
    key_base: String,
    period_ms: u64,
    limit: u32,
    mitigation_ms: u64,
    pub local: Arc<Limiter>,
    refused: RefusedCache,
}

impl FleetRule {
    /// The fleet side of a rule whose local counters (and limits) are `local`.
    pub(crate) fn new(
        id: Arc<str>,
        prefix: &str,
        fingerprint: &str,
        max_keys: usize,
        local: Arc<Limiter>,
    ) -> FleetRule {
        let digest = Sha256::digest(fingerprint.as_bytes());
        let (period_ms, _, mitigation_ms) = local.limits();
        FleetRule {
            id,
            key_base: format!("{prefix}rl:{}:", hex(&digest[..4])),
            period_ms,
            limit: local.threshold(),
            mitigation_ms,
            local,
            refused: RefusedCache::new(max_keys),
        }
    }

    /// The key prefix this rule writes under.
    pub(crate) fn prefix(&self) -> &str {
        self.key_base.rsplit_once("rl:").map_or("", |(p, _)| p)
    }

    /// The check for one request whose characteristics hashed to `digest`, or, when the key is
    /// known to be refused, the refusal (`Err`), with no Redis call. `counts` says whether Redis
    /// counts it ([`FleetCheck::counts`]).
    pub(crate) fn check(
        self: &Arc<Self>,
        digest: [u8; 16],
        now: Instant,
        counts: bool,
    ) -> Result<FleetCheck, Verdict> {
        if let Some(wait) = self.refused.get(&digest, now) {
            return Err(limited(wait));
        }
        Ok(self.counted(digest, counts))
    }

    /// The check for `digest`, without asking the cache of refused keys: an answer is counted
    /// whatever the key's state.
    pub(crate) fn counted(self: &Arc<Self>, digest: [u8; 16], counts: bool) -> FleetCheck {
        let mut key = String::with_capacity(self.key_base.len() + 32);
        key.push_str(&self.key_base);
        key.push_str(&hex(&digest));
        FleetCheck {
            rule: Arc::clone(self),
            key,
            digest,
            counts,
        }
    }
}

fn limited(wait: Duration) -> Verdict {
    Verdict::Refuse {
        code: Code::RATE_LIMITED,
        retry_after: Some(retry_secs(wait)),
    }
}

/// A request that a fleet rule counts: the edge asks Redis, then calls [`shared`] with the
/// answer or [`fallback`] when there is none in time.
///
/// [`shared`]: FleetCheck::shared
/// [`fallback`]: FleetCheck::fallback
#[derive(Debug, Clone)]
pub struct FleetCheck {
    rule: Arc<FleetRule>,
    key: String,
    digest: [u8; 16],
    /// Whether Redis counts the request (or the answer) under the key, or only says whether the
    /// key is being refused (a rule that counts answers checks its requests this way).
    counts: bool,
}

impl PartialEq for FleetCheck {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rule, &other.rule) && self.key == other.key
    }
}

impl Eq for FleetCheck {}

impl FleetCheck {
    /// The rule's id.
    pub fn rule_id(&self) -> &Arc<str> {
        &self.rule.id
    }
    /// The Redis key of this request's counter.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The rule's period, in milliseconds.
    pub fn period_ms(&self) -> u64 {
        self.rule.period_ms
    }
    /// Requests allowed per period.
    pub fn limit(&self) -> u32 {
        self.rule.limit
    }
    /// The mitigation timeout in milliseconds (0: none).
    pub fn mitigation_ms(&self) -> u64 {
        self.rule.mitigation_ms
    }
    /// Whether Redis counts one under the key (the counting script), or only says whether the
    /// key is being refused now (the checking script: a rule that counts answers checks each
    /// request so, and counts its answer afterwards).
    pub fn counts(&self) -> bool {
        self.counts
    }

    /// Redis counted the request: `allowed`, or refused for `wait_ms` more milliseconds. A
    /// refused key is remembered until then, so its next requests cost Redis nothing.
    pub fn shared(&self, allowed: bool, wait_ms: u64, now: Instant) -> Verdict {
        if allowed {
            return Verdict::Proxy;
        }
        let wait = Duration::from_millis(wait_ms.max(1));
        self.rule.refused.insert(self.digest, now + wait, now);
        limited(wait)
    }

    /// Redis could not answer in time: what `on_error` says.
    pub fn fallback(&self, on_error: OnError, now: Instant) -> Verdict {
        match on_error {
            OnError::Allow => Verdict::Proxy,
            OnError::Refuse => limited(Duration::from_secs(1)),
            OnError::Local => {
                use std::hash::Hasher;
                let mut h = self.rule.local.key_hasher();
                h.write(&self.digest);
                let key = h.finish();
                let outcome = if self.counts {
                    self.rule.local.hit(key, now)
                } else {
                    self.rule.local.check(key, now)
                };
                match outcome {
                    Outcome::Allowed => Verdict::Proxy,
                    Outcome::Limited(wait) => limited(wait),
                }
            }
        }
    }
}

/// Keys Redis refused, until their retry time: at most `cap` (the rule's `max_keys`). When
/// full, expired entries are dropped (at most once a second); if none expired, the key is not
/// cached and its next request asks Redis again, which is correct, only slower.
#[derive(Debug)]
struct RefusedCache {
    cap: usize,
    inner: Mutex<RefusedInner>,
}

#[derive(Debug)]
struct RefusedInner {
    until: HashMap<[u8; 16], Instant>,
    last_sweep: Option<Instant>,
}

impl RefusedCache {
    fn new(cap: usize) -> RefusedCache {
        RefusedCache {
            cap: cap.max(1),
            inner: Mutex::new(RefusedInner {
                until: HashMap::new(),
                last_sweep: None,
            }),
        }
    }

    fn get(&self, digest: &[u8; 16], now: Instant) -> Option<Duration> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let until = *inner.until.get(digest)?;
        (until > now).then(|| until - now)
    }

    fn insert(&self, digest: [u8; 16], until: Instant, now: Instant) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.until.len() >= self.cap && !inner.until.contains_key(&digest) {
            if inner
                .last_sweep
                .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1))
            {
                return;
            }
            inner.last_sweep = Some(now);
            inner.until.retain(|_, u| *u > now);
            if inner.until.len() >= self.cap {
                return;
            }
        }
        inner.until.insert(digest, until);
    }
}

/// The 128-bit digest a fleet rule keys Redis by: SHA-256 of the characteristics' bytes, so that
/// every instance derives the same key and a client cannot choose collisions.
pub(crate) fn digest(bytes: &[u8]) -> [u8; 16] {
    let full = Sha256::digest(bytes);
    let mut out = [0; 16];
    out.copy_from_slice(&full[..16]);
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("redis://user:secret@h:6379/0"),
            "redis://user:***@h:6379/0"
        );
        assert_eq!(redact_url("rediss://:pw@h"), "rediss://:***@h");
        assert_eq!(redact_url("redis://h:1/2"), "redis://h:1/2");
    }

    #[test]
    fn refused_cache_is_bounded() {
        let c = RefusedCache::new(2);
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(10);
        c.insert([1; 16], later, t0);
        c.insert([2; 16], later, t0);
        c.insert([3; 16], later, t0);
        assert!(c.get(&[3; 16], t0).is_none(), "full: not cached");
        assert_eq!(c.get(&[1; 16], t0), Some(Duration::from_secs(10)));
        let t1 = t0 + Duration::from_secs(11);
        c.insert([3; 16], t1 + Duration::from_secs(1), t1);
        assert!(c.get(&[3; 16], t1).is_some(), "expired entries swept");
        assert!(c.get(&[1; 16], t1).is_none());
    }
}
