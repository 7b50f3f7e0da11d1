//! Converted pages kept per zone (`[zone.markdown] cache = true`), so that an unchanged page is
//! converted once per version instead of on every request for it.
//!
//! An entry is the Markdown answer as first sent (header and body), keyed by the URL the
//! conversion resolved links against (scheme, host as sent, path and query: everything of the
//! request the Markdown depends on), with the names and values of the request headers the
//! origin's `Vary` names, the origin's validators (`ETag`, `Last-Modified`), its freshness and
//! the Markdown's own validator (a strong `ETag` from its bytes).
//!
//! - A fresh entry is served without the origin (`request_filter`'s Markdown step answers it);
//!   an agent's `If-None-Match` naming its `ETag` gets 304.
//! - A stale one is revalidated: the agent's request goes to the origin with the entry's
//!   validators; a 304 refreshes the entry and it is served without converting, anything else
//!   drops it and is handled as a miss (a 200 converted anew).
//! - Every answer says what the cache did in RFC 9211's `Cache-Status` ([`Forward`] is why the
//!   origin was asked, found by the lookup; `stored` and `ttl` by the entry the answer made).
//! - Never stored: `Set-Cookie`, `private`, `no-store`, `Vary: *` or a `Vary` on a header the
//!   edge writes per client, a request with `Authorization` unless the origin says `public`,
//!   an answer without freshness nor validators, anything not converted.
//!
//! The store is moka's: entries weighed in bytes against the zone's `cache_bytes`, admitted by
//! TinyLFU and evicted least-recently-used. Chosen over Pingora's TinyUFO (also TinyLFU) because
//! a page's weight here is bytes, up to megabytes, where TinyUFO weighs in `u16`; because
//! purging a path needs to walk the entries, which TinyUFO cannot; and because moka reports
//! every eviction with its cause and keeps the weight held, which the metrics need.
//!
//! Concurrent misses for one key are coalesced: the first (the leader) asks the origin and
//! converts; requests for the same URL arriving meanwhile wait for it, bounded in time and in
//! number, then look the cache up again and are answered from the leader's entry when it was
//! stored and matches them (its `Vary` compared as on any lookup). When it was not (not
//! storable, a failure, another variant, the leader cancelled), each asks the origin itself as
//! it would have without waiting. The leader's claim is a drop guard, released once its entry
//! is stored or when its request ends in any way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use http::header::{self, HeaderMap, HeaderName};
use moka::notification::RemovalCause;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::request::ray::CF_RAY;

/// What an entry costs beyond its bytes (the entry, the moka node, the key's `Arc`): counted in
/// its weight so that a flood of tiny pages is bounded too.
const ENTRY_OVERHEAD: usize = 512;

/// An entry may take at most this share of its zone's cache: a page larger than an eighth of it
/// would evict much to be held, and is converted on every request instead.
const MAX_ENTRY_SHARE: usize = 8;

/// A `Vary` naming more headers than this is not stored (each is kept and compared per request).
const MAX_VARY_NAMES: usize = 16;

/// Request headers the edge writes for the origin, per client or per request: a `Vary` on one
/// of them means a page per client, not worth keeping (and the agent's own value is not what
/// the origin saw).
const PER_CLIENT_HEADERS: [&str; 4] =
    ["x-forwarded-for", "cf-connecting-ip", "cf-ray", "forwarded"];

/// Keys of one zone's cache that may be asked of the origin at once with requests waiting on
/// them; a miss beyond this asks the origin without a leader nor waiters.
const MAX_FLIGHTS: usize = 1024;

/// Requests that may wait on one leader; more ask the origin themselves.
const MAX_WAITERS: usize = 256;

/// The longest a request waits on a leader (less when its zone's `read_timeout` is shorter);
/// then it asks the origin itself.
pub const MAX_COALESCE_WAIT: Duration = Duration::from_secs(10);

/// RFC 9211's response header: what the cache did for the request.
pub const CACHE_STATUS: &str = "cache-status";

/// Response headers an origin's 304 does not update in the entry: they describe the HTML, the
/// framing, or are the edge's own.
const NOT_REFRESHED: [&str; 12] = [
    "content-length",
    "content-type",
    "content-encoding",
    "content-range",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "etag",
    "last-modified",
    "vary",
    "cf-ray",
    CACHE_STATUS,
];

/// The cache's name in `Cache-Status` (RFC 9211 section 2).
const CACHE_NAME: &str = "signpost";

/// Why a request for Markdown went to the origin (RFC 9211 section 2.2 `fwd`), as its lookup
/// found the cache: worked out once there, written in the answer's `Cache-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Nothing stored for the URL.
    UriMiss,
    /// The URL is stored for another variant (the request headers its `Vary` names differ).
    VaryMiss,
    /// Stored, but not fresh for this request (or the request asked for a fresh answer): asked
    /// of the origin, conditionally when the entry has validators.
    Stale,
    /// The request may not be answered from the cache: its `no-store`, or `Authorization` for
    /// a page the origin did not call `public`.
    Request,
}

impl Forward {
    pub fn as_str(self) -> &'static str {
        match self {
            Forward::UriMiss => "uri-miss",
            Forward::VaryMiss => "vary-miss",
            Forward::Stale => "stale",
            Forward::Request => "request",
        }
    }
}

/// What the cache did for one request, for the access log and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Served from a fresh entry, the origin not asked.
    Hit,
    /// Converted (no entry, or a stale one the origin replaced) and stored.
    Miss,
    /// A stale entry the origin confirmed with 304, served without converting.
    Revalidated,
    /// Neither read nor stored: the request or the answer may not be cached.
    Bypass,
    /// Waited for another request converting the same page, then served from its entry.
    Coalesced,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Hit => "hit",
            Status::Miss => "miss",
            Status::Revalidated => "revalidated",
            Status::Bypass => "bypass",
            Status::Coalesced => "coalesced",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneLabel {
    zone: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    zone: Arc<str>,
    result: &'static str,
}

/// The cache metrics of every zone, registered once.
pub struct CacheMetrics {
    requests: Family<ResultLabels, Counter>,
    evictions: Family<ZoneLabel, Counter>,
    bytes: Family<ZoneLabel, Gauge>,
    entries: Family<ZoneLabel, Gauge>,
}

impl CacheMetrics {
    pub fn register(registry: &mut Registry) -> CacheMetrics {
        let requests = Family::<ResultLabels, Counter>::default();
        registry.register(
            "markdown_cache_requests",
            "Requests for Markdown on zones that cache it, by zone and result (hit, miss, revalidated, bypass, coalesced)",
            requests.clone(),
        );
        let evictions = Family::<ZoneLabel, Counter>::default();
        registry.register(
            "markdown_cache_evictions",
            "Converted pages evicted (or refused admission) to keep a zone's cache within cache_bytes",
            evictions.clone(),
        );
        let bytes = Family::<ZoneLabel, Gauge>::default();
        registry.register(
            "markdown_cache_bytes",
            "Bytes a zone's converted-page cache holds, as weighed against cache_bytes",
            bytes.clone(),
        );
        let entries = Family::<ZoneLabel, Gauge>::default();
        registry.register(
            "markdown_cache_entries",
            "Converted pages a zone's cache holds",
            entries.clone(),
        );
        CacheMetrics {
            requests,
            evictions,
            bytes,
            entries,
        }
    }

    /// Sets the held-bytes and entry gauges from the caches of the loaded policy; zones no longer
    /// caching lose their series.
    pub fn refresh<'a>(&self, caches: impl Iterator<Item = &'a ZoneCache>) {
        self.bytes.clear();
        self.entries.clear();
        for cache in caches {
            cache.entries.run_pending_tasks();
            cache.publish_size();
        }
    }
}

/// The validators and freshness an answer carries, read once.
#[derive(Clone, Debug, Default)]
struct Directives {
    no_store: bool,
    no_cache: bool,
    private: bool,
    public: bool,
    max_age: Option<u64>,
    s_maxage: Option<u64>,
}

impl Directives {
    /// Reads every `Cache-Control` line. A value that does not parse as seconds counts as 0
    /// (stale: RFC 9111 says to treat an invalid freshness as stale), so hostile bytes can only
    /// make the cache keep less.
    fn of(headers: &HeaderMap) -> Directives {
        let mut d = Directives::default();
        for line in headers.get_all(header::CACHE_CONTROL) {
            let text = String::from_utf8_lossy(line.as_bytes());
            for directive in text.split(',') {
                let (name, value) = match directive.split_once('=') {
                    Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                    None => (directive.trim(), None),
                };
                let seconds = || Some(value.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0));
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => d.no_store = true,
                    "no-cache" => d.no_cache = true,
                    "private" => d.private = true,
                    "public" => d.public = true,
                    "max-age" => d.max_age = seconds(),
                    "s-maxage" => d.s_maxage = seconds(),
                    _ => {}
                }
            }
        }
        d
    }
}

/// When an entry stops being fresh (RFC 9111 section 4.2, without heuristics).
#[derive(Clone, Copy, Debug)]
struct Freshness {
    stored: Instant,
    /// The answer's age when stored: the origin's `Age`, or the time since its `Date`.
    age_when_stored: Duration,
    lifetime: Duration,
    /// `no-cache`: stored, but revalidated on every use.
    always_revalidate: bool,
}

impl Freshness {
    fn of(headers: &HeaderMap, directives: &Directives, now: Instant, wall: SystemTime) -> Self {
        let date = http_date(headers, header::DATE);
        let lifetime = match directives.s_maxage.or(directives.max_age) {
            Some(seconds) => Duration::from_secs(seconds),
            None if headers.contains_key(header::EXPIRES) => {
                match http_date(headers, header::EXPIRES) {
                    Some(expires) => expires
                        .duration_since(date.unwrap_or(wall))
                        .unwrap_or_default(),
                    // An invalid Expires is a date in the past.
                    None => Duration::ZERO,
                }
            }
            None => Duration::ZERO,
        };
        let apparent = date.map_or(Duration::ZERO, |d| {
            wall.duration_since(d).unwrap_or_default()
        });
        let age = headers
            .get(header::AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_secs);
        Freshness {
            stored: now,
            age_when_stored: apparent.max(age),
            lifetime,
            always_revalidate: directives.no_cache,
        }
    }

    fn age(&self, now: Instant) -> Duration {
        self.age_when_stored
            .saturating_add(now.saturating_duration_since(self.stored))
    }

    /// The remaining freshness lifetime in whole seconds, negative once stale (RFC 9211 `ttl`).
    fn ttl(&self, now: Instant) -> i64 {
        let lifetime = i64::try_from(self.lifetime.as_secs()).unwrap_or(i64::MAX);
        let age = i64::try_from(self.age(now).as_secs()).unwrap_or(i64::MAX);
        lifetime.saturating_sub(age)
    }

    fn fresh(&self, now: Instant, asked: &Asked) -> bool {
        let age = self.age(now);
        !self.always_revalidate
            && !asked.no_cache
            && age < self.lifetime
            && asked.max_age.is_none_or(|max| age.as_secs() <= max)
    }
}

fn http_date(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
    let text = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(text.trim()).ok()
}

/// What the agent's own `Cache-Control` (or `Pragma: no-cache`) asks of the cache.
struct Asked {
    no_store: bool,
    no_cache: bool,
    max_age: Option<u64>,
}

impl Asked {
    fn of(headers: &HeaderMap) -> Asked {
        let d = Directives::of(headers);
        let pragma_no_cache = !headers.contains_key(header::CACHE_CONTROL)
            && headers
                .get_all(header::PRAGMA)
                .iter()
                .any(|v| v.as_bytes().eq_ignore_ascii_case(b"no-cache"));
        Asked {
            no_store: d.no_store,
            no_cache: d.no_cache || pragma_no_cache,
            max_age: d.max_age,
        }
    }
}

/// The origin's validators of the HTML an entry was converted from.
#[derive(Clone, Debug, Default)]
pub struct Validators {
    etag: Option<HeaderValue>,
    last_modified: Option<HeaderValue>,
}

impl Validators {
    pub fn of(resp: &ResponseHeader) -> Validators {
        Validators {
            etag: resp.headers.get(header::ETAG).cloned(),
            last_modified: resp.headers.get(header::LAST_MODIFIED).cloned(),
        }
    }

    fn any(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }

    fn len(&self) -> usize {
        self.etag.as_ref().map_or(0, HeaderValue::len)
            + self.last_modified.as_ref().map_or(0, HeaderValue::len)
    }
}

/// One request header named by `Vary`, and the request's value of it (every line, joined).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Varied {
    name: HeaderName,
    value: Option<Box<[u8]>>,
}

/// One converted page.
pub struct Entry {
    /// The answer as first sent, `cf-ray` and `Age` replaced on each use.
    header: ResponseHeader,
    body: Bytes,
    /// The Markdown's own validator, also in `header`.
    etag: HeaderValue,
    varied: Box<[Varied]>,
    origin: Validators,
    /// The origin said `public`: the entry may answer a request with `Authorization`.
    public: bool,
    freshness: Freshness,
    weight: u32,
}

/// A zone's converted-page cache.
pub struct ZoneCache {
    zone: Arc<str>,
    entries: moka::sync::Cache<Arc<str>, Arc<Entry>>,
    max_entry: usize,
    metrics: ZoneCounters,
    /// The keys a leader is asking the origin for, with the requests waiting on it.
    flights: Mutex<HashMap<Arc<str>, Flight>>,
}

/// A key being asked of the origin: its waiters hold a receiver of `done`, whose sender the
/// leader's [`Lead`] holds; its drop wakes them.
struct Flight {
    done: watch::Receiver<()>,
    waiters: usize,
}

/// The leader's claim on a key. Dropped (its entry stored, or its request ended, failed or
/// cancelled), it takes the key out of the flights and wakes the waiters.
struct Lead {
    cache: Arc<ZoneCache>,
    url: Arc<str>,
    _done: watch::Sender<()>,
}

impl Drop for Lead {
    fn drop(&mut self) {
        lock(&self.cache.flights).remove(&self.url);
        // `_done` is dropped after this: the waiters wake to a key no longer in flight.
    }
}

/// What a miss does about a key being asked already.
enum Join {
    /// Ask the origin; others wait meanwhile.
    Lead(Lead),
    /// Wait for the leader (until the sender is dropped).
    Wait(watch::Receiver<()>),
    /// Ask the origin without waiting nor being waited on (a bound is reached).
    Alone,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The zone's counters, resolved once.
struct ZoneCounters {
    hits: Counter,
    misses: Counter,
    revalidations: Counter,
    bypasses: Counter,
    coalesced: Counter,
    bytes: Family<ZoneLabel, Gauge>,
    entries: Family<ZoneLabel, Gauge>,
}

impl ZoneCache {
    pub fn new(zone: Arc<str>, max_bytes: usize, metrics: &CacheMetrics) -> ZoneCache {
        let counter = |result| {
            metrics
                .requests
                .get_or_create(&ResultLabels {
                    zone: zone.clone(),
                    result,
                })
                .clone()
        };
        let evictions = metrics
            .evictions
            .get_or_create(&ZoneLabel { zone: zone.clone() })
            .clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(max_bytes as u64)
            .weigher(|_url: &Arc<str>, entry: &Arc<Entry>| entry.weight)
            .eviction_listener(move |_url, _entry, cause| {
                if cause == RemovalCause::Size {
                    evictions.inc();
                }
            })
            .build();
        let cache = ZoneCache {
            entries,
            max_entry: max_bytes / MAX_ENTRY_SHARE,
            metrics: ZoneCounters {
                hits: counter(Status::Hit.as_str()),
                misses: counter(Status::Miss.as_str()),
                revalidations: counter(Status::Revalidated.as_str()),
                bypasses: counter(Status::Bypass.as_str()),
                coalesced: counter(Status::Coalesced.as_str()),
                bytes: metrics.bytes.clone(),
                entries: metrics.entries.clone(),
            },
            zone,
            flights: Mutex::default(),
        };
        cache.publish_size();
        cache
    }

    fn publish_size(&self) {
        let label = ZoneLabel {
            zone: self.zone.clone(),
        };
        let bytes = i64::try_from(self.entries.weighted_size()).unwrap_or(i64::MAX);
        let count = i64::try_from(self.entries.entry_count()).unwrap_or(i64::MAX);
        self.metrics.bytes.get_or_create(&label).set(bytes);
        self.metrics.entries.get_or_create(&label).set(count);
    }

    /// Evictions happen as moka applies its pending writes; applied after every change, so
    /// that the bound and the gauge hold as each write returns.
    fn settle(&self) {
        self.entries.run_pending_tasks();
        self.publish_size();
    }

    /// What the cache holds for this request.
    pub fn lookup(self: &Arc<Self>, req: &RequestHeader, url: &str, now: Instant) -> Use {
        let asked = Asked::of(&req.headers);
        let authorized = req.headers.contains_key(header::AUTHORIZATION);
        let agent_tags = req.headers.get(header::IF_NONE_MATCH).cloned();
        let (found, forward) = if asked.no_store {
            (Found::Bypass, Some(Forward::Request))
        } else if let Some(entry) = self.entries.get(url) {
            if authorized && !entry.public {
                (Found::Bypass, Some(Forward::Request))
            } else if !entry.varied.iter().all(|v| v.matches(&req.headers)) {
                // Another variant: this request's answer will replace it.
                (Found::Nothing, Some(Forward::VaryMiss))
            } else if entry.freshness.fresh(now, &asked) {
                (Found::Fresh(entry), None)
            } else if entry.origin.any() {
                (Found::Stale(entry), Some(Forward::Stale))
            } else {
                // Stale with nothing to revalidate with: asked anew.
                (Found::Nothing, Some(Forward::Stale))
            }
        } else {
            (Found::Nothing, Some(Forward::UriMiss))
        };
        let status = match found {
            Found::Fresh(_) => Status::Hit,
            Found::Bypass => Status::Bypass,
            Found::Stale(_) | Found::Nothing => Status::Miss,
        };
        // A request that refuses stored answers, or that only a `public` entry may answer,
        // would not be served by a leader's entry: it neither waits nor leads.
        let coalescable = status == Status::Miss && !authorized && !asked.no_cache;
        Use {
            cache: Arc::clone(self),
            url: Arc::from(url),
            found,
            agent_tags,
            status,
            forward,
            coalescable,
            lead: None,
        }
    }

    /// What the cache holds for this request, as [`ZoneCache::lookup`]; a miss for a key
    /// another request is asking the origin for waits for it (at most `wait`, and
    /// [`MAX_COALESCE_WAIT`]) and looks again: served from the leader's entry when it was
    /// stored and matches (`Coalesced`), asking the origin itself otherwise. A miss for a key
    /// nobody asks leads: others wait for it until it stores its entry or ends.
    pub async fn lookup_coalesced(
        self: &Arc<Self>,
        req: &RequestHeader,
        url: &str,
        wait: Duration,
    ) -> Use {
        let mut found = self.lookup(req, url, Instant::now());
        if !found.coalescable {
            return found;
        }
        match self.join(&found.url) {
            Join::Lead(lead) => {
                found.lead = Some(lead);
                found
            }
            Join::Alone => found,
            Join::Wait(mut done) => {
                drop(found);
                // Ends when the leader's sender is dropped (an error, the only signal), or at
                // the deadline.
                let _ = tokio::time::timeout(wait.min(MAX_COALESCE_WAIT), done.changed()).await;
                let mut again = self.lookup(req, url, Instant::now());
                if matches!(again.found, Found::Fresh(_)) {
                    again.status = Status::Coalesced;
                }
                again
            }
        }
    }

    /// Leads the key, waits on its leader, or neither when a bound is reached.
    fn join(self: &Arc<Self>, url: &Arc<str>) -> Join {
        let mut flights = lock(&self.flights);
        if let Some(flight) = flights.get_mut(url) {
            if flight.waiters >= MAX_WAITERS {
                return Join::Alone;
            }
            flight.waiters += 1;
            return Join::Wait(flight.done.clone());
        }
        if flights.len() >= MAX_FLIGHTS {
            return Join::Alone;
        }
        let (sender, done) = watch::channel(());
        flights.insert(Arc::clone(url), Flight { done, waiters: 0 });
        Join::Lead(Lead {
            cache: Arc::clone(self),
            url: Arc::clone(url),
            _done: sender,
        })
    }

    /// Drops the entry of one key URL ([`page_key`]), if there is one: the page changed at the
    /// origin (a successful unsafe request to it, RFC 9111 section 4.4). Whether one was dropped.
    pub fn invalidate(&self, url: &str) -> bool {
        let dropped = self.entries.remove(url).is_some();
        if dropped {
            self.settle();
        }
        dropped
    }

    /// A successful unsafe request to `target` on `host` (the request's, as sent): the pages it
    /// changed at the origin are dropped (RFC 9111 section 4.4), so that the next agent's GET
    /// converts them anew: the target, and the same-host URLs in the answer's `Location` and
    /// `Content-Location`, on either scheme (a page is one resource whichever scheme asked for
    /// it). The number dropped.
    pub fn unsafe_request_succeeded(&self, host: &str, target: &str, answer: &HeaderMap) -> u64 {
        let named = [header::LOCATION, header::CONTENT_LOCATION]
            .into_iter()
            .filter_map(|name| answer.get(name))
            .filter_map(|value| same_host_target(value.as_bytes(), host));
        let mut dropped = 0;
        for target in std::iter::once(target).chain(named) {
            for tls in [false, true] {
                dropped += u64::from(self.invalidate(&page_key(tls, host, target)));
            }
        }
        dropped
    }

    /// Drops every entry (`POST /purge?zone=`); the number dropped.
    pub fn purge_all(&self) -> u64 {
        self.entries.run_pending_tasks();
        let count = self.entries.entry_count();
        self.entries.invalidate_all();
        self.settle();
        count
    }

    /// Drops the entries of one path, with any query, on every host of the zone or on `host`
    /// only (`POST /purge?zone=&path=[&host=]`); the number dropped.
    pub fn purge_path(&self, path: &str, host: Option<&str>) -> u64 {
        // moka hands out its keys in an `Arc` of its own.
        let doomed: Vec<Arc<Arc<str>>> = self
            .entries
            .iter()
            .map(|(url, _)| url)
            .filter(|url| {
                let (url_host, url_path) = split_url(url);
                url_path == path && host.is_none_or(|h| h.eq_ignore_ascii_case(url_host))
            })
            .collect();
        for url in &doomed {
            self.entries.invalidate(&**url);
        }
        self.settle();
        doomed.len() as u64
    }
}

/// The key of a page in its zone's cache: `scheme://host/path?query`, the host as the client
/// sent it (port included), the target as it came. Also the URL a converted page's links
/// resolve against.
pub fn page_key(tls: bool, host: &str, target: &str) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{host}{target}")
}

/// Whether `method` is unsafe (RFC 9110 section 9.2.1): any but GET, HEAD, OPTIONS and TRACE.
pub fn is_unsafe(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::TRACE
    )
}

/// The target (path and query) a `Location` or `Content-Location` value names on `host`: a
/// path-absolute reference, or an absolute (or scheme-relative) URL whose authority is `host`.
/// `None` for other hosts and for references relative to the path (not worth resolving here).
fn same_host_target<'a>(value: &'a [u8], host: &str) -> Option<&'a str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let value = value.split('#').next().unwrap_or(value);
    if value.starts_with('/') && !value.starts_with("//") {
        return Some(value);
    }
    let rest = match value.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            rest
        }
        Some(_) => return None,
        None => value.strip_prefix("//")?,
    };
    let (authority, target) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    authority.eq_ignore_ascii_case(host).then_some(target)
}

/// The host (as sent, port included) and the path of a key URL (`scheme://host/path?query`).
fn split_url(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (host, target) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let path = target.split('?').next().unwrap_or("");
    (host, path)
}

impl Varied {
    fn matches(&self, headers: &HeaderMap) -> bool {
        joined(headers, &self.name).as_deref() == self.value.as_deref()
    }
}

/// Every line of a request header, joined with `, ` (how RFC 9110 combines them).
fn joined(headers: &HeaderMap, name: &HeaderName) -> Option<Box<[u8]>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let mut value = first.as_bytes().trim_ascii().to_vec();
    for line in lines {
        value.extend_from_slice(b", ");
        value.extend_from_slice(line.as_bytes().trim_ascii());
    }
    Some(value.into_boxed_slice())
}

/// The request headers the answer's `Vary` names, with this request's values; `None` when the
/// answer may not be stored for its `Vary` (`*`, a per-client header, too many names).
///
/// `Accept` and `Accept-Encoding` are not kept: every request that reaches the cache negotiated
/// Markdown (the edge itself adds `Vary: Accept` to tell the Markdown from the HTML), and the
/// converter decodes every content coding the origin may choose, so neither changes the
/// Markdown.
fn varied(answer: &HeaderMap, request: &HeaderMap) -> Option<Box<[Varied]>> {
    let mut names: Vec<HeaderName> = Vec::new();
    for line in answer.get_all(header::VARY) {
        for name in String::from_utf8_lossy(line.as_bytes()).split(',') {
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            if name == "*" {
                return None;
            }
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            if PER_CLIENT_HEADERS.contains(&name.as_str()) {
                return None;
            }
            if name != header::ACCEPT && name != header::ACCEPT_ENCODING && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if names.len() > MAX_VARY_NAMES {
        return None;
    }
    Some(
        names
            .into_iter()
            .map(|name| Varied {
                value: joined(request, &name),
                name,
            })
            .collect(),
    )
}

/// The strong validator of a Markdown body: 128 bits of its SHA-256. A hash of the bytes, not
/// the origin's tag with a suffix: the same HTML converted by another version of the converter
/// or other zone settings is another Markdown, and must not answer an agent's 304.
fn markdown_etag(body: &[u8]) -> HeaderValue {
    let digest = Sha256::digest(body);
    let mut tag = String::with_capacity(34);
    tag.push('"');
    for byte in &digest[..16] {
        tag.push_str(&format!("{byte:02x}"));
    }
    tag.push('"');
    HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// Whether an `If-None-Match` value names `etag` (weak comparison, RFC 9110 section 13.1.2), or
/// is `*`. Scans the entity tags without splitting on commas (a tag may hold one).
pub fn none_match_names(if_none_match: &[u8], etag: &[u8]) -> bool {
    let opaque = etag.strip_prefix(b"W/").unwrap_or(etag);
    let mut rest = if_none_match;
    loop {
        rest = rest.trim_ascii_start();
        while let Some(after) = rest.strip_prefix(b",") {
            rest = after.trim_ascii_start();
        }
        if rest.is_empty() {
            return false;
        }
        if rest.starts_with(b"*") {
            return true;
        }
        let tag_start = rest.strip_prefix(b"W/").unwrap_or(rest);
        let Some(inner) = tag_start.strip_prefix(b"\"") else {
            // Not an entity tag: skip to the next comma.
            match rest.iter().position(|&b| b == b',') {
                Some(i) => {
                    rest = &rest[i..];
                    continue;
                }
                None => return false,
            }
        };
        let Some(end) = inner.iter().position(|&b| b == b'"') else {
            return false;
        };
        let tag = &tag_start[..end + 2];
        if tag == opaque {
            return true;
        }
        rest = &inner[end + 1..];
    }
}

/// An answer ready to write: `body` is `None` for a 304.
pub struct Reply {
    pub header: ResponseHeader,
    pub body: Option<Bytes>,
}

impl Reply {
    /// Writes the reply as the whole response (only its header for HEAD). A write that fails is
    /// the client's side (it left): a cancellation, never the edge's error.
    pub async fn write(self, session: &mut Session, head_only: bool) -> Result<()> {
        let end = head_only || self.body.is_none();
        session
            .write_response_header(Box::new(self.header), end)
            .await
            .map_err(|e| e.into_down())?;
        if let Some(body) = self.body.filter(|_| !head_only) {
            session
                .write_response_body(Some(body), true)
                .await
                .map_err(|e| e.into_down())?;
        }
        Ok(())
    }
}

enum Found {
    Fresh(Arc<Entry>),
    /// Stale, with validators: asked of the origin conditionally.
    Stale(Arc<Entry>),
    Nothing,
    Bypass,
}

/// The cache's part in one request for Markdown: what was found, and what became of it.
pub struct Use {
    cache: Arc<ZoneCache>,
    url: Arc<str>,
    found: Found,
    /// The agent's `If-None-Match`, answered against the Markdown's `ETag`.
    agent_tags: Option<HeaderValue>,
    status: Status,
    /// Why the origin is asked; `None` for a fresh entry.
    forward: Option<Forward>,
    /// A miss that may wait on a leader or lead (see [`ZoneCache::lookup_coalesced`]).
    coalescable: bool,
    /// This request leads its key: released once its entry is stored, or with the `Use`.
    lead: Option<Lead>,
}

impl Use {
    /// The reply of a fresh entry, when there is one: the request is answered without the
    /// origin.
    pub fn fresh_reply(&self, ray: HeaderValue, now: Instant) -> Option<Result<Reply>> {
        match &self.found {
            Found::Fresh(entry) => Some(self.reply(entry, ray, now, None, true)),
            _ => None,
        }
    }

    /// Adds the stale entry's validators to the request for the origin, so that an unchanged
    /// page costs a 304 and no conversion.
    pub fn ask_conditionally(&self, request: &mut RequestHeader) -> Result<()> {
        if let Found::Stale(entry) = &self.found {
            if let Some(etag) = &entry.origin.etag {
                request.insert_header(header::IF_NONE_MATCH, etag.clone())?;
            }
            if let Some(date) = &entry.origin.last_modified {
                request.insert_header(header::IF_MODIFIED_SINCE, date.clone())?;
            }
        }
        Ok(())
    }

    /// The origin's answer to a revalidation: a 304 refreshes the stale entry and gives its
    /// reply; anything else drops the entry (`None`: converted or passed through as a miss).
    pub fn revalidated(
        &mut self,
        origin: &ResponseHeader,
        request: &RequestHeader,
        ray: HeaderValue,
    ) -> Option<Result<Reply>> {
        let Found::Stale(entry) = std::mem::replace(&mut self.found, Found::Nothing) else {
            return None;
        };
        if origin.status != http::StatusCode::NOT_MODIFIED {
            self.cache.entries.invalidate(&self.url);
            return None;
        }
        self.status = Status::Revalidated;
        let now = Instant::now();
        Some(
            self.refresh(&entry, origin, request, now)
                .and_then(|refreshed| {
                    let stored = self.admissible(&refreshed, request);
                    let reply = self.reply(&refreshed, ray, now, Some(origin.status), stored);
                    if stored {
                        self.store(refreshed);
                    } else {
                        self.cache.entries.invalidate(&self.url);
                    }
                    self.cache.settle();
                    // The waiters find the refreshed entry (or nothing) now.
                    self.lead = None;
                    reply
                }),
        )
    }

    /// The entry with the 304's headers (RFC 9111 section 4.3.4) and a new freshness.
    fn refresh(
        &self,
        entry: &Entry,
        origin: &ResponseHeader,
        request: &RequestHeader,
        now: Instant,
    ) -> Result<Entry> {
        let mut header = entry.header.clone();
        for name in origin.headers.keys() {
            if NOT_REFRESHED.contains(&name.as_str()) {
                continue;
            }
            header.remove_header(name);
            for value in origin.headers.get_all(name) {
                header.append_header(name.clone(), value.clone())?;
            }
        }
        let mut validators = Validators::of(origin);
        if !validators.any() {
            validators = entry.origin.clone();
        }
        Ok(self.entry(
            header,
            entry.body.clone(),
            entry.etag.clone(),
            validators,
            request,
            now,
        ))
    }

    fn entry(
        &self,
        header: ResponseHeader,
        body: Bytes,
        etag: HeaderValue,
        origin: Validators,
        request: &RequestHeader,
        now: Instant,
    ) -> Entry {
        let directives = Directives::of(&header.headers);
        let freshness = Freshness::of(&header.headers, &directives, now, SystemTime::now());
        let varied = varied(&header.headers, &request.headers).unwrap_or_default();
        let header_bytes: usize = header
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 32)
            .sum();
        let varied_bytes: usize = varied
            .iter()
            .map(|v| v.name.as_str().len() + v.value.as_ref().map_or(0, |b| b.len()) + 32)
            .sum();
        let weight = ENTRY_OVERHEAD
            + self.url.len()
            + body.len()
            + header_bytes
            + varied_bytes
            + origin.len()
            + etag.len();
        Entry {
            header,
            body,
            etag,
            varied,
            origin,
            public: directives.public,
            freshness,
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
        }
    }

    /// Whether the answer and the request allow the entry to be stored.
    fn admissible(&self, entry: &Entry, request: &RequestHeader) -> bool {
        !matches!(self.found, Found::Bypass)
            && storable(entry, request)
            && entry.weight as usize <= self.cache.max_entry
    }

    fn store(&self, entry: Entry) {
        self.cache
            .entries
            .insert(Arc::clone(&self.url), Arc::new(entry));
    }

    /// A page just converted: given its `ETag`, stored when it may be, and answered 304 when the
    /// agent's `If-None-Match` names it.
    pub fn converted(
        &mut self,
        mut header: ResponseHeader,
        body: Bytes,
        origin: Validators,
        request: &RequestHeader,
    ) -> Result<Reply> {
        let etag = markdown_etag(&body);
        header.insert_header(header::ETAG, etag.clone())?;
        let now = Instant::now();
        let entry = self.entry(header, body, etag, origin, request, now);
        let ray = entry
            .header
            .headers
            .get(CF_RAY.name())
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static(""));
        let stored = self.admissible(&entry, request);
        let reply = self.reply(&entry, ray, now, Some(http::StatusCode::OK), stored);
        self.status = if stored {
            self.store(entry);
            Status::Miss
        } else {
            Status::Bypass
        };
        self.cache.settle();
        // Stored or not, the waiters need not wait for this reply to be written.
        self.lead = None;
        reply
    }

    /// The answer an entry gives this request: 304 when the agent's `If-None-Match` names the
    /// Markdown's `ETag`, else the page; `cf-ray` this request's, `Age` the entry's, and the
    /// `Cache-Status` of what the cache did: `fwd_status` the origin's status when it was
    /// asked, `stored` whether the entry is (or stays) in the cache (its `ttl` told then).
    fn reply(
        &self,
        entry: &Entry,
        ray: HeaderValue,
        now: Instant,
        fwd_status: Option<http::StatusCode>,
        stored: bool,
    ) -> Result<Reply> {
        let age = HeaderValue::from(entry.freshness.age(now).as_secs());
        let ttl = stored.then(|| entry.freshness.ttl(now));
        let cache_status = self.cache_status(fwd_status, stored, ttl);
        let not_modified = self
            .agent_tags
            .as_ref()
            .is_some_and(|tags| none_match_names(tags.as_bytes(), entry.etag.as_bytes()));
        if not_modified {
            // RFC 9110 section 15.4.5: the fields a 200 would carry that guide caches, no more.
            let mut header = ResponseHeader::build(http::StatusCode::NOT_MODIFIED, Some(8))?;
            for name in [
                header::CACHE_CONTROL,
                header::CONTENT_LOCATION,
                header::DATE,
                header::ETAG,
                header::EXPIRES,
                header::VARY,
            ] {
                for value in entry.header.headers.get_all(&name) {
                    header.append_header(name.clone(), value.clone())?;
                }
            }
            header.insert_header(header::AGE, age)?;
            header.insert_header(&CF_RAY, ray)?;
            header.insert_header(CACHE_STATUS, cache_status)?;
            return Ok(Reply { header, body: None });
        }
        let mut header = entry.header.clone();
        header.insert_header(header::AGE, age)?;
        header.insert_header(&CF_RAY, ray)?;
        // After any the origin's answer carried (RFC 9211 section 2: each cache adds its own).
        header.append_header(CACHE_STATUS, cache_status)?;
        Ok(Reply {
            header,
            body: Some(entry.body.clone()),
        })
    }

    /// The `Cache-Status` of an answer the origin gave that the cache neither stored nor
    /// converted (a page passed through, the edge's answer in place of the origin's):
    /// `fwd_status` the origin's status.
    pub fn forwarded_status(&self, fwd_status: http::StatusCode) -> HeaderValue {
        self.cache_status(Some(fwd_status), false, None)
    }

    /// RFC 9211's `Cache-Status` for this request: one list member (an RFC 8941 item, the
    /// cache's name as a token with parameters), so that a cache in front of the edge may add
    /// its own after it. A fresh entry is a `hit` (`detail=coalesced` when it was waited for);
    /// anything else says why the origin was asked (`fwd`), what it answered (`fwd-status`),
    /// and whether the answer was `stored`; `ttl` is the stored entry's remaining freshness.
    fn cache_status(
        &self,
        fwd_status: Option<http::StatusCode>,
        stored: bool,
        ttl: Option<i64>,
    ) -> HeaderValue {
        use std::fmt::Write as _;
        let mut value = String::with_capacity(64);
        value.push_str(CACHE_NAME);
        match self.forward {
            None => value.push_str("; hit"),
            Some(forward) => {
                let _ = write!(value, "; fwd={}", forward.as_str());
                if let Some(status) = fwd_status {
                    let _ = write!(value, "; fwd-status={}", status.as_u16());
                }
                if stored {
                    value.push_str("; stored");
                }
            }
        }
        if let Some(ttl) = ttl {
            let _ = write!(value, "; ttl={ttl}");
        }
        if self.status == Status::Coalesced {
            value.push_str("; detail=coalesced");
        }
        // Tokens and integers only: always a valid header value.
        HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
    }

    /// What the cache did, counted once in the zone's metrics; `converted` says whether the
    /// request ended with Markdown (a page passed through, or an origin failure, was not
    /// cached: bypass).
    pub fn finish(self, markdown_sent: bool) -> Status {
        let status = match self.status {
            Status::Miss if !markdown_sent => Status::Bypass,
            status => status,
        };
        let counters = &self.cache.metrics;
        match status {
            Status::Hit => counters.hits.inc(),
            Status::Miss => counters.misses.inc(),
            Status::Revalidated => counters.revalidations.inc(),
            Status::Bypass => counters.bypasses.inc(),
            Status::Coalesced => counters.coalesced.inc(),
        };
        status
    }
}

/// Whether an answer may be kept (RFC 9111 section 3 for a shared cache, and this edge's rules).
fn storable(entry: &Entry, request: &RequestHeader) -> bool {
    let headers = &entry.header.headers;
    let directives = Directives::of(headers);
    let authorized = request.headers.contains_key(header::AUTHORIZATION);
    entry.header.status == http::StatusCode::OK
        && !headers.contains_key(header::SET_COOKIE)
        && !directives.no_store
        && !directives.private
        && !Asked::of(&request.headers).no_store
        && (!authorized || directives.public)
        && varied(headers, &request.headers).is_some()
        && (entry.origin.any() || entry.freshness.lifetime > entry.freshness.age_when_stored)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn headers(lines: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in lines {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn if_none_match_is_compared_weakly_and_scanned_whole() {
        let tag = b"\"abc\"";
        assert!(none_match_names(b"\"abc\"", tag));
        assert!(none_match_names(b"W/\"abc\"", tag));
        assert!(none_match_names(b"\"x,y\", \"abc\"", tag));
        assert!(none_match_names(b"*", tag));
        assert!(!none_match_names(b"\"abcd\"", tag));
        assert!(!none_match_names(b"abc", tag));
        assert!(!none_match_names(b"\"abc", tag));
        assert!(!none_match_names(b"", tag));
        assert!(none_match_names(b"junk, \"abc\"", tag));
    }

    proptest! {
        /// Arbitrary bytes never panic, and a list that holds the tag among arbitrary quoted
        /// tags always finds it.
        #[test]
        fn if_none_match_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200),
                                      others in proptest::collection::vec("[a-z0-9,]{0,12}", 0..5)) {
            let _ = none_match_names(&bytes, b"\"t\"");
            let mut list: Vec<String> = others.iter().map(|o| format!("\"{o}\"")).collect();
            list.push("W/\"t\"".into());
            prop_assert!(none_match_names(list.join(", ").as_bytes(), b"\"t\""));
        }

        #[test]
        fn cache_control_never_panics(text in "[ -~]{0,120}") {
            if let Ok(value) = HeaderValue::from_str(&text) {
                let mut map = HeaderMap::new();
                map.insert(header::CACHE_CONTROL, value.clone());
                map.insert(header::EXPIRES, value.clone());
                map.insert(header::AGE, value);
                let d = Directives::of(&map);
                let _ = Freshness::of(&map, &d, Instant::now(), SystemTime::now());
            }
        }
    }

    #[test]
    fn freshness_follows_the_origin() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let fresh = |lines: &[(&str, &str)]| {
            let map = headers(lines);
            let f = Freshness::of(&map, &Directives::of(&map), now, wall);
            let asked = Asked {
                no_store: false,
                no_cache: false,
                max_age: None,
            };
            f.fresh(now, &asked)
        };
        assert!(fresh(&[("cache-control", "public, max-age=60")]));
        assert!(!fresh(&[("cache-control", "max-age=60"), ("age", "61")]));
        assert!(fresh(&[("cache-control", "max-age=0, s-maxage=60")]));
        assert!(!fresh(&[("cache-control", "max-age=60, no-cache")]));
        assert!(!fresh(&[("cache-control", "max-age=junk")]));
        assert!(!fresh(&[]));
        let date = httpdate::fmt_http_date(wall);
        let later = httpdate::fmt_http_date(wall + Duration::from_secs(120));
        assert!(fresh(&[("date", &date), ("expires", &later)]));
        assert!(!fresh(&[("date", &date), ("expires", "0")]));
        // max-age wins over Expires.
        assert!(!fresh(&[
            ("date", &date),
            ("expires", &later),
            ("cache-control", "max-age=0")
        ]));
    }

    #[test]
    fn vary_keeps_the_named_request_headers() {
        let request = headers(&[("x-lang", "fr"), ("accept", "text/markdown")]);
        let v = varied(
            &headers(&[("vary", "Accept, X-Lang"), ("vary", "accept-encoding")]),
            &request,
        )
        .unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "x-lang");
        assert!(v[0].matches(&request));
        assert!(!v[0].matches(&headers(&[("x-lang", "de")])));
        assert!(!v[0].matches(&headers(&[])));
        assert!(varied(&headers(&[("vary", "*")]), &request).is_none());
        assert!(varied(&headers(&[("vary", "X-Forwarded-For")]), &request).is_none());
    }

    #[test]
    fn key_urls_split_into_host_and_path() {
        assert_eq!(
            split_url("http://example.com:8080/a/b?q=1"),
            ("example.com:8080", "/a/b")
        );
        assert_eq!(split_url("https://h"), ("h", ""));
    }

    #[test]
    fn unsafe_methods_are_those_rfc_9110_does_not_call_safe() {
        for safe in ["GET", "HEAD", "OPTIONS", "TRACE"] {
            assert!(!is_unsafe(
                &http::Method::from_bytes(safe.as_bytes()).unwrap()
            ));
        }
        for changes in ["POST", "PUT", "PATCH", "DELETE", "PURGE"] {
            assert!(is_unsafe(
                &http::Method::from_bytes(changes.as_bytes()).unwrap()
            ));
        }
    }

    #[test]
    fn locations_name_a_target_on_the_same_host_only() {
        fn target(v: &str) -> Option<&str> {
            same_host_target(v.as_bytes(), "example.com:8080")
        }
        assert_eq!(target("/a/b?q=1#frag"), Some("/a/b?q=1"));
        assert_eq!(target("http://example.com:8080/a"), Some("/a"));
        assert_eq!(target("HTTPS://Example.com:8080/a?x"), Some("/a?x"));
        assert_eq!(target("//example.com:8080/a"), Some("/a"));
        assert_eq!(target("http://example.com:8080"), Some("/"));
        assert_eq!(target("http://example.com/a"), None, "another port");
        assert_eq!(target("http://evil.test/a"), None);
        assert_eq!(target("//evil.test/a"), None);
        assert_eq!(target("ftp://example.com:8080/a"), None);
        assert_eq!(target("relative/path"), None);
        assert_eq!(same_host_target(b"\xff/a", "example.com:8080"), None);
    }

    #[test]
    fn a_successful_unsafe_request_drops_its_pages_on_both_schemes() {
        let cache = zone_cache();
        let store = |url: &str| {
            let req = get(&[]);
            let mut found = cache.lookup(&req, url, Instant::now());
            found
                .converted(
                    markdown("max-age=60"),
                    Bytes::from_static(b"# page"),
                    Validators::default(),
                    &req,
                )
                .unwrap();
        };
        for url in [
            "http://example.com/doc",
            "https://example.com/doc",
            "http://example.com/new",
            "http://example.com/kept",
        ] {
            store(url);
        }
        let mut answer = HeaderMap::new();
        answer.insert(header::LOCATION, HeaderValue::from_static("/new"));
        answer.insert(
            header::CONTENT_LOCATION,
            HeaderValue::from_static("http://other.test/kept"),
        );
        assert_eq!(
            cache.unsafe_request_succeeded("example.com", "/doc", &answer),
            3
        );
        let fresh = |url: &str| {
            cache
                .lookup(&get(&[]), url, Instant::now())
                .fresh_reply(HeaderValue::from_static("r"), Instant::now())
                .is_some()
        };
        assert!(!fresh("http://example.com/doc"));
        assert!(!fresh("https://example.com/doc"));
        assert!(!fresh("http://example.com/new"));
        assert!(
            fresh("http://example.com/kept"),
            "another host's page stays"
        );
    }

    /// The answer's `Cache-Status`, checked to be an RFC 8941 list (by `sfv`) of one item, the
    /// edge's.
    fn cache_status(header: &ResponseHeader) -> String {
        let value = header.headers[CACHE_STATUS].to_str().unwrap();
        let list = sfv::Parser::parse_list(value.as_bytes()).unwrap();
        assert_eq!(list.len(), 1, "{value}");
        let sfv::ListEntry::Item(item) = &list[0] else {
            panic!("{value}");
        };
        assert_eq!(item.bare_item, sfv::BareItem::Token(CACHE_NAME.to_string()));
        // A second may pass between storing and answering on a loaded machine: a `ttl` of 59
        // is written as the 60 it was stored with.
        value.replace("ttl=59", "ttl=60")
    }

    /// Each way the origin is asked is told as such, once and from the lookup's own finding.
    #[tokio::test]
    async fn cache_status_says_why_the_origin_was_asked() {
        let cache = zone_cache();
        let fr = get(&[("x-lang", "fr")]);
        let mut first = cache.lookup(&fr, URL, Instant::now());
        let mut varied = markdown("max-age=60");
        varied.insert_header("vary", "x-lang").unwrap();
        let body = Bytes::from_static(b"# page");
        let stored = first
            .converted(varied.clone(), body.clone(), Validators::default(), &fr)
            .unwrap();
        assert_eq!(
            cache_status(&stored.header),
            "signpost; fwd=uri-miss; fwd-status=200; stored; ttl=60"
        );
        let hit = cache.lookup(&fr, URL, Instant::now());
        let reply = hit.fresh_reply(HeaderValue::from_static("r"), Instant::now());
        assert_eq!(
            cache_status(&reply.unwrap().unwrap().header),
            "signpost; hit; ttl=60"
        );
        let de = get(&[("x-lang", "de")]);
        let other = cache.lookup(&de, URL, Instant::now());
        assert_eq!(other.forward, Some(Forward::VaryMiss));
        let mut passed = ResponseHeader::build(404, None).unwrap();
        passed
            .insert_header(
                CACHE_STATUS,
                other.forwarded_status(http::StatusCode::NOT_FOUND),
            )
            .unwrap();
        assert_eq!(
            cache_status(&passed),
            "signpost; fwd=vary-miss; fwd-status=404"
        );
        let refusing = get(&[("x-lang", "fr"), ("cache-control", "no-store")]);
        let mut refused = cache.lookup(&refusing, URL, Instant::now());
        let reply = refused
            .converted(varied, body, Validators::default(), &refusing)
            .unwrap();
        assert_eq!(
            cache_status(&reply.header),
            "signpost; fwd=request; fwd-status=200"
        );
        // Later than its lifetime: stale, and with no validator asked anew.
        let later = Instant::now() + Duration::from_secs(61);
        let stale = cache.lookup(&fr, URL, later);
        assert_eq!(stale.forward, Some(Forward::Stale));
    }

    fn zone_cache() -> Arc<ZoneCache> {
        let metrics = CacheMetrics::register(&mut Registry::default());
        Arc::new(ZoneCache::new(Arc::from("z"), 1 << 20, &metrics))
    }

    fn get(extra: &[(&str, &str)]) -> RequestHeader {
        let mut req = RequestHeader::build("GET", b"/doc", None).unwrap();
        for (n, v) in extra {
            req.append_header(n.to_string(), *v).unwrap();
        }
        req
    }

    fn markdown(cache_control: &str) -> ResponseHeader {
        let mut header = ResponseHeader::build(200, None).unwrap();
        header
            .insert_header("content-type", "text/markdown; charset=utf-8")
            .unwrap();
        header
            .insert_header("cache-control", cache_control)
            .unwrap();
        header
    }

    const URL: &str = "http://example.com/doc";
    const WAIT: Duration = Duration::from_secs(5);

    /// Starts a request that waits on the leader, once it is counted among the waiters.
    async fn waiter(cache: &Arc<ZoneCache>, req: RequestHeader) -> tokio::task::JoinHandle<Use> {
        let before = waiters(cache);
        let task = {
            let cache = Arc::clone(cache);
            tokio::spawn(async move { cache.lookup_coalesced(&req, URL, WAIT).await })
        };
        while waiters(cache) == before {
            tokio::task::yield_now().await;
        }
        task
    }

    fn waiters(cache: &ZoneCache) -> usize {
        lock(&cache.flights).get(URL).map_or(0, |f| f.waiters)
    }

    #[tokio::test]
    async fn waiters_are_answered_from_the_leaders_entry() {
        let cache = zone_cache();
        let req = get(&[]);
        let mut leader = cache.lookup_coalesced(&req, URL, WAIT).await;
        assert!(leader.lead.is_some());
        let first = waiter(&cache, get(&[])).await;
        let second = waiter(&cache, get(&[])).await;
        assert!(!first.is_finished() && !second.is_finished());
        let reply = leader
            .converted(
                markdown("max-age=60"),
                Bytes::from_static(b"# page"),
                Validators::default(),
                &req,
            )
            .unwrap();
        assert!(lock(&cache.flights).is_empty(), "released once stored");
        assert_eq!(
            cache_status(&reply.header),
            "signpost; fwd=uri-miss; fwd-status=200; stored; ttl=60"
        );
        assert_eq!(leader.finish(true), Status::Miss);
        for task in [first, second] {
            let waited = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
            let served = waited
                .fresh_reply(HeaderValue::from_static("ray"), Instant::now())
                .unwrap()
                .unwrap();
            assert_eq!(served.body, reply.body);
            assert_eq!(
                cache_status(&served.header),
                "signpost; hit; ttl=60; detail=coalesced"
            );
            assert_eq!(waited.finish(true), Status::Coalesced);
        }
        // Later requests are plain hits, and lead nothing.
        let hit = cache.lookup_coalesced(&req, URL, WAIT).await;
        assert!(hit.lead.is_none());
        assert_eq!(hit.finish(true), Status::Hit);
    }

    #[tokio::test]
    async fn waiters_ask_themselves_when_the_leader_stored_nothing_or_another_variant() {
        let cache = zone_cache();
        // The leader's answer may not be stored.
        let req = get(&[]);
        let mut leader = cache.lookup_coalesced(&req, URL, WAIT).await;
        let task = waiter(&cache, get(&[])).await;
        leader
            .converted(
                markdown("no-store"),
                Bytes::from_static(b"# page"),
                Validators::default(),
                &req,
            )
            .unwrap();
        let waited = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
        assert!(
            waited
                .fresh_reply(HeaderValue::from_static("r"), Instant::now())
                .is_none()
        );
        assert!(
            waited.lead.is_none(),
            "a waiter that asks itself does not lead"
        );
        assert_eq!(leader.finish(true), Status::Bypass);
        assert_eq!(waited.finish(true), Status::Miss);

        // The leader stored its variant; the waiter asked for another.
        let fr = get(&[("x-lang", "fr")]);
        let mut leader = cache.lookup_coalesced(&fr, URL, WAIT).await;
        let task = waiter(&cache, get(&[("x-lang", "de")])).await;
        let mut header = markdown("max-age=60");
        header.insert_header("vary", "X-Lang").unwrap();
        leader
            .converted(
                header,
                Bytes::from_static(b"# fr"),
                Validators::default(),
                &fr,
            )
            .unwrap();
        let waited = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
        assert!(
            waited
                .fresh_reply(HeaderValue::from_static("r"), Instant::now())
                .is_none()
        );
        assert_eq!(waited.finish(true), Status::Miss);
        drop(leader);
    }

    #[tokio::test]
    async fn a_cancelled_leader_releases_its_waiters() {
        let cache = zone_cache();
        let req = get(&[]);
        let leader = cache.lookup_coalesced(&req, URL, WAIT).await;
        let task = waiter(&cache, get(&[])).await;
        // The leader's request is dropped mid-way (its client left, the future cancelled).
        drop(leader);
        let waited = tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("released at once, not at the deadline")
            .unwrap();
        assert_eq!(waited.status, Status::Miss);
        assert!(lock(&cache.flights).is_empty());
    }

    #[tokio::test]
    async fn waiting_is_bounded_in_time_and_number() {
        let cache = zone_cache();
        let req = get(&[]);
        let _leader = cache.lookup_coalesced(&req, URL, WAIT).await;
        let started = Instant::now();
        let waited = cache
            .lookup_coalesced(&req, URL, Duration::from_millis(50))
            .await;
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(waited.status, Status::Miss);
        assert!(waited.lead.is_none());

        lock(&cache.flights).get_mut(URL).unwrap().waiters = MAX_WAITERS;
        let started = Instant::now();
        let alone = cache.lookup_coalesced(&req, URL, WAIT).await;
        assert!(started.elapsed() < Duration::from_secs(1), "did not wait");
        assert!(alone.lead.is_none());

        // Keys in flight are bounded: past the bound a miss neither leads nor waits.
        let mut leads = Vec::new();
        for i in 1..MAX_FLIGHTS {
            let url = format!("http://example.com/{i}");
            let found = cache.lookup_coalesced(&req, &url, WAIT).await;
            leads.push(found.lead.expect("leads"));
        }
        let past = cache
            .lookup_coalesced(&req, "http://example.com/past", WAIT)
            .await;
        assert!(past.lead.is_none());
        drop(leads);
        assert_eq!(lock(&cache.flights).len(), 1);
    }

    #[tokio::test]
    async fn requests_a_leaders_entry_would_not_answer_neither_wait_nor_lead() {
        let cache = zone_cache();
        let req = get(&[]);
        let _leader = cache.lookup_coalesced(&req, URL, WAIT).await;
        for extra in [
            ("authorization", "Bearer x"),
            ("cache-control", "no-cache"),
            ("cache-control", "no-store"),
        ] {
            let started = Instant::now();
            let other = cache.lookup_coalesced(&get(&[extra]), URL, WAIT).await;
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{extra:?} waited"
            );
            assert!(other.lead.is_none());
        }
    }

    #[test]
    fn markdown_etag_is_a_strong_hash_of_the_bytes() {
        let a = markdown_etag(b"# one");
        assert_eq!(a, markdown_etag(b"# one"));
        assert_ne!(a, markdown_etag(b"# two"));
        assert_eq!(a.len(), 34);
        assert!(none_match_names(a.as_bytes(), a.as_bytes()));
    }
}
