//! Web Bot Auth key directories: fetched over HTTPS in the background, cached, never awaited by
//! a request.
//!
//! A lookup reads the table and answers at once; on a miss or a stale entry it starts one fetch
//! for that directory on the tokio runtime (concurrent lookups share it) and answers from what is
//! cached now: a request from an agent whose directory is not known yet is `Pending`, which the
//! caller reports as unverified, never as invalid.
//!
//! Cache rules, from the draft: keys are looked up by (directory, keyid), never by keyid alone; a
//! directory is fresh for its `Cache-Control: max-age`, clamped to [`KeyDirConfig::min_ttl`,
//! `KeyDirConfig::max_ttl`] (`min_ttl` when absent, or `no-store`/`no-cache`); a failed fetch
//! never evicts what was fetched before (stale keys keep verifying) and is retried after a backoff
//! doubling from `retry_min` to `retry_max` (5 min, the draft's bound on negative caching); a
//! fetched directory without a key removes it. A key an agent newly publishes is used before its
//! directory goes stale: a signature whose `keyid` the cached directory does not list starts a
//! refetch of that directory, at most one per [`UNKNOWN_KEY_REFETCH_INTERVAL`] since the
//! directory was last asked (the request itself reads `KeyNotInDirectory` meanwhile, as before),
//! so a flood of invented keyids costs the agent one fetch per interval. A fetch fails on a non-200 status, a redirect, a
//! body over `max_body_bytes`, the deadline, a refused address (see `outside`), a JWKS that does
//! not parse or has more than `max_keys` Ed25519 keys, or a content type that is not JSON: the
//! draft names `application/http-message-signatures-directory+json`, and `application/json`
//! and `application/jwk-set+json` are accepted too, because deployed directories (and `jwks_uri`
//! documents, which the draft does not type) are commonly served so.
//!
//! Bounds: at most `max_directories` entries. A new directory when the table is full takes the
//! place of the oldest entry that holds no keys and is not being fetched (a failed or empty
//! directory); when every entry holds keys, the new one is `Unreachable` with no fetch, so a
//! flood of invented directories can neither grow the table nor push out agents already known.
//! At most `max_in_flight` fetches at once; a lookup beyond that starts none and answers from
//! the cache (`Pending` for a directory never fetched). Keys per directory: `max_keys`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use signpost_webbotauth::{Agent, DirectoryKey, parse_directory};
use url::Url;

use crate::outside::{Fetched, Outside};

const DIRECTORY_MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";

/// The shortest time between two fetches of one directory when a fresh cached copy does not
/// list a signature's `keyid`: short enough that a rotated key verifies within half a minute of
/// the agent publishing it, long enough that invented keyids cannot make the edge a fetcher for
/// hire (docs/policy.md, "Key directories").
pub const UNKNOWN_KEY_REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// Called once per finished fetch with its outcome (`ok`, or the failure's name), for metrics.
pub type FetchObserver = Arc<dyn Fn(&'static str) + Send + Sync>;

#[derive(Clone)]
pub struct KeyDirConfig {
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    /// The first retry after a failure; doubled per failure in a row up to `retry_max`.
    pub retry_min: Duration,
    pub retry_max: Duration,
    pub max_directories: usize,
    pub max_keys: usize,
    pub max_in_flight: usize,
    /// See [`UNKNOWN_KEY_REFETCH_INTERVAL`].
    pub unknown_key_refetch: Duration,
    pub observer: Option<FetchObserver>,
}

impl Default for KeyDirConfig {
    fn default() -> Self {
        KeyDirConfig {
            min_ttl: Duration::from_secs(5 * 60),
            max_ttl: Duration::from_secs(24 * 3600),
            retry_min: Duration::from_secs(10),
            retry_max: Duration::from_secs(5 * 60),
            max_directories: 1000,
            max_keys: 64,
            max_in_flight: 16,
            unknown_key_refetch: UNKNOWN_KEY_REFETCH_INTERVAL,
            observer: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLookup {
    Found([u8; 32]),
    /// The directory was fetched and does not list this keyid.
    KeyNotInDirectory,
    /// Not fetched yet; a fetch is under way (or will be started by a later request).
    Pending,
    /// Every fetch so far failed, or the table is full of known agents.
    Unreachable,
}

struct Entry {
    /// The last directory fetched successfully; kept through failures.
    keys: Option<Arc<[DirectoryKey]>>,
    fresh_until: Instant,
    /// No new fetch before this (set after a failure).
    retry_at: Instant,
    failures: u32,
    fetching: bool,
    /// When the last fetch started: a refetch for an unknown keyid waits
    /// `unknown_key_refetch` from here.
    asked_at: Instant,
    last_used: Instant,
}

pub struct KeyDirectories {
    outside: Arc<Outside>,
    config: KeyDirConfig,
    table: Mutex<HashMap<String, Entry>>,
    in_flight: AtomicUsize,
    /// Keys given in the policy, by (agent URL, keyid).
    statics: ArcSwap<HashMap<(String, String), [u8; 32]>>,
    /// Woken whenever a fetch finishes, for the requests that wait for one
    /// ([`KeyDirectories::wait_fetched`]).
    fetched: tokio::sync::Notify,
}

impl KeyDirectories {
    pub fn new(outside: Arc<Outside>, config: KeyDirConfig) -> Arc<Self> {
        Arc::new(KeyDirectories {
            outside,
            config,
            table: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            statics: ArcSwap::default(),
            fetched: tokio::sync::Notify::new(),
        })
    }

    /// Waits, at most `bound`, until no fetch of `agent`'s directory is under way: the one
    /// [`lookup`](Self::lookup) started for a directory it had never seen. Returns whether the
    /// directory was fetched (with or without the key) within the bound. The only lookup a
    /// request awaits, and only where the edge asks it to (a challenged path): a waiter holds no
    /// lock and no slot, and a fetch ends within its own deadline anyway.
    pub async fn wait_fetched(&self, agent: &Agent, bound: Duration) -> bool {
        let url = agent.directory_url();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Registered before the table is read, so that a fetch finishing in between wakes it.
            let woken = self.fetched.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let fetching = {
                let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
                match table.get(&url) {
                    Some(entry) if entry.fetching => true,
                    Some(entry) => return entry.keys.is_some(),
                    None => return false,
                }
            };
            debug_assert!(fetching);
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return false;
            }
        }
    }

    /// Replaces the keys given in the policy (private agreements): `(agent URL, key)`, the URL as
    /// [`Agent::url`] normalises it. They are found before any directory.
    pub fn set_static(&self, keys: Vec<(String, DirectoryKey)>) {
        let map = keys
            .into_iter()
            .map(|(agent, key)| ((agent, key.keyid), key.key))
            .collect();
        self.statics.store(Arc::new(map));
    }

    /// Never blocks on the network, never awaits: reads the cache; on a miss or a stale entry
    /// starts one background fetch for that directory (coalesced) and answers from what is
    /// cached now.
    pub fn lookup(self: &Arc<Self>, agent: &Agent, keyid: &str) -> KeyLookup {
        if let Some(key) = self
            .statics
            .load()
            .get(&(agent.url.clone(), keyid.to_owned()))
        {
            return KeyLookup::Found(*key);
        }
        let url = agent.directory_url();
        let now = Instant::now();
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let answer;
        let fetch;
        if let Some(entry) = table.get_mut(&url) {
            entry.last_used = now;
            answer = match &entry.keys {
                Some(keys) => keys
                    .iter()
                    .find(|k| k.keyid == keyid)
                    .map_or(KeyLookup::KeyNotInDirectory, |k| KeyLookup::Found(k.key)),
                None if entry.failures > 0 => KeyLookup::Unreachable,
                None => KeyLookup::Pending,
            };
            let stale = entry.keys.is_none() || now >= entry.fresh_until;
            // A fresh directory that does not list the key may have been updated since: the
            // agent rotated its key. Asked again, but not more often than the interval.
            let unknown_key = answer == KeyLookup::KeyNotInDirectory
                && now >= entry.asked_at + self.config.unknown_key_refetch;
            fetch = (stale || unknown_key)
                && !entry.fetching
                && now >= entry.retry_at
                && self.reserve_fetch();
            if fetch {
                entry.fetching = true;
                entry.asked_at = now;
            }
        } else {
            if table.len() >= self.config.max_directories && !make_room(&mut table) {
                return KeyLookup::Unreachable;
            }
            if !self.reserve_fetch() {
                return KeyLookup::Pending;
            }
            table.insert(
                url.clone(),
                Entry {
                    keys: None,
                    fresh_until: now,
                    retry_at: now,
                    failures: 0,
                    fetching: true,
                    asked_at: now,
                    last_used: now,
                },
            );
            answer = KeyLookup::Pending;
            fetch = true;
        }
        drop(table);
        if fetch {
            self.spawn_fetch(url);
        }
        answer
    }

    fn reserve_fetch(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.config.max_in_flight).then_some(n + 1)
            })
            .is_ok()
    }

    fn spawn_fetch(self: &Arc<Self>, url: String) {
        // The process's runtime for outside work, not the request's: a fetch outlives the
        // request that started it, and never takes a request thread's time.
        let Some(runtime) = crate::runtime::runtime() else {
            self.finish(&url, Err("no_runtime"));
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            let result = this.fetch(&url).await;
            this.finish(&url, result);
        });
    }

    async fn fetch(&self, url: &str) -> Result<(Vec<DirectoryKey>, Duration), &'static str> {
        let parsed = Url::parse(url).map_err(|_| "not_https")?;
        let fetched = self
            .outside
            .get_accepting(&parsed, DIRECTORY_MEDIA_TYPE)
            .await
            .map_err(|error| error.name())?;
        self.read(&fetched)
    }

    fn read(&self, fetched: &Fetched) -> Result<(Vec<DirectoryKey>, Duration), &'static str> {
        if fetched.status != http::StatusCode::OK {
            return Err("status");
        }
        let content_type = fetched
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase());
        match content_type.as_deref() {
            Some(DIRECTORY_MEDIA_TYPE | "application/json" | "application/jwk-set+json") => {}
            _ => return Err("content_type"),
        }
        let keys = parse_directory(&fetched.body, self.config.max_keys).map_err(|e| e.name())?;
        Ok((keys, self.ttl(&fetched.headers)))
    }

    fn ttl(&self, headers: &http::HeaderMap) -> Duration {
        let mut max_age = None;
        for value in headers.get_all(http::header::CACHE_CONTROL) {
            let Ok(value) = value.to_str() else { continue };
            for directive in value.split(',') {
                let directive = directive.trim().to_ascii_lowercase();
                if directive == "no-store" || directive == "no-cache" {
                    return self.config.min_ttl;
                }
                if let Some(seconds) = directive.strip_prefix("max-age=") {
                    max_age = seconds.trim_matches('"').parse::<u64>().ok();
                }
            }
        }
        max_age
            .map(Duration::from_secs)
            .unwrap_or(self.config.min_ttl)
            .clamp(self.config.min_ttl, self.config.max_ttl)
    }

    fn finish(&self, url: &str, result: Result<(Vec<DirectoryKey>, Duration), &'static str>) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        let outcome = match &result {
            Ok(_) => "ok",
            Err(reason) => reason,
        };
        if let Some(observer) = &self.config.observer {
            observer(outcome);
        }
        let now = Instant::now();
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = table.get_mut(url) else {
            return;
        };
        entry.fetching = false;
        // Under the lock: a waiter reads the table only once this update is done.
        self.fetched.notify_waiters();
        match result {
            Ok((keys, ttl)) => {
                entry.keys = Some(keys.into());
                entry.fresh_until = now + ttl;
                entry.failures = 0;
                entry.retry_at = now;
            }
            Err(_) => {
                entry.failures = entry.failures.saturating_add(1);
                let backoff = self
                    .config
                    .retry_min
                    .saturating_mul(1u32 << (entry.failures - 1).min(16))
                    .min(self.config.retry_max);
                entry.retry_at = now + backoff;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().unwrap().len()
    }
}

/// Frees one place in a full table: the least recently used entry that holds no keys and is not
/// being fetched. False when there is none.
fn make_room(table: &mut HashMap<String, Entry>) -> bool {
    let victim = table
        .iter()
        .filter(|(_, entry)| entry.keys.is_none() && !entry.fetching)
        .min_by_key(|(_, entry)| entry.last_used)
        .map(|(url, _)| url.clone());
    match victim {
        Some(url) => {
            table.remove(&url);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use base64::Engine as _;
    use signpost_webbotauth::{AgentKind, jwk_thumbprint};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::outside::{FetchError, OutsideConfig};

    /// What the test directory server answers next.
    #[derive(Clone)]
    enum Answer {
        /// 200 with this body, content type and cache-control.
        Directory(String, &'static str, &'static str),
        Redirect,
        Status(u16),
        /// A body of this many bytes, without Content-Length (read until the connection closes).
        Huge(usize),
        /// Waits this long before answering with a directory.
        Slow(Duration, String),
    }

    /// A real HTTPS server on 127.0.0.1 with a certificate for `localhost`, made by rcgen.
    struct DirectoryServer {
        port: u16,
        root: rustls::pki_types::CertificateDer<'static>,
        answer: Arc<Mutex<Answer>>,
        requests: Arc<AtomicUsize>,
    }

    impl DirectoryServer {
        async fn start(answer: Answer) -> DirectoryServer {
            let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            let root = certified.cert.der().clone();
            let key =
                rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
                    .unwrap();
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![root.clone()], key)
            .unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let answer = Arc::new(Mutex::new(answer));
            let requests = Arc::new(AtomicUsize::new(0));
            let (shared, count) = (answer.clone(), requests.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    let (acceptor, shared, count) =
                        (acceptor.clone(), shared.clone(), count.clone());
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let mut request = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        count.fetch_add(1, Ordering::SeqCst);
                        let answer = shared.lock().unwrap().clone();
                        let response = match answer {
                            Answer::Directory(body, content_type, cache) => format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: {cache}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            ),
                            Answer::Redirect => "HTTP/1.1 302 Found\r\nlocation: https://localhost/elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
                            Answer::Status(status) => format!("HTTP/1.1 {status} No\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
                            Answer::Huge(size) => format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{}",
                                " ".repeat(size)
                            ),
                            Answer::Slow(delay, body) => {
                                tokio::time::sleep(delay).await;
                                format!(
                                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                    body.len()
                                )
                            }
                        };
                        let _ = tls.write_all(response.as_bytes()).await;
                        let _ = tls.shutdown().await;
                    });
                }
            });
            DirectoryServer {
                port,
                root,
                answer,
                requests,
            }
        }

        fn set(&self, answer: Answer) {
            *self.answer.lock().unwrap() = answer;
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }

        fn agent(&self) -> Agent {
            Agent {
                url: format!("https://localhost:{}", self.port),
                kind: AgentKind::Directory,
                legacy: false,
            }
        }
    }

    fn jwks(keys: &[[u8; 32]]) -> String {
        let entries: Vec<String> = keys
            .iter()
            .map(|k| {
                let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k);
                format!(
                    r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"{}"}}"#,
                    jwk_thumbprint(k)
                )
            })
            .collect();
        format!(r#"{{"keys":[{}]}}"#, entries.join(","))
    }

    fn directory(keys: &[[u8; 32]]) -> Answer {
        Answer::Directory(jwks(keys), DIRECTORY_MEDIA_TYPE, "max-age=86400")
    }

    struct Setup {
        dirs: Arc<KeyDirectories>,
        outcomes: Arc<Mutex<Vec<&'static str>>>,
    }

    fn setup(
        server: &DirectoryServer,
        allow_private: bool,
        tune: impl FnOnce(&mut KeyDirConfig),
    ) -> Setup {
        let outside = Outside::new(OutsideConfig {
            allow_private,
            extra_roots: vec![server.root.clone()],
            // Generous: the test machine is loaded and TLS in a debug build is slow.
            timeout: Duration::from_secs(2),
            max_bytes: 16 * 1024,
        })
        .unwrap();
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let seen = outcomes.clone();
        let mut config = KeyDirConfig {
            observer: Some(Arc::new(move |outcome| seen.lock().unwrap().push(outcome))),
            ..KeyDirConfig::default()
        };
        tune(&mut config);
        Setup {
            dirs: KeyDirectories::new(Arc::new(outside), config),
            outcomes,
        }
    }

    impl Setup {
        /// Waits for the fetches under way to finish, then looks up again.
        async fn settled(&self, agent: &Agent, keyid: &str) -> KeyLookup {
            for _ in 0..500 {
                if self.dirs.in_flight.load(Ordering::SeqCst) == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.dirs.lookup(agent, keyid)
        }

        fn outcomes(&self) -> Vec<&'static str> {
            self.outcomes.lock().unwrap().clone()
        }
    }

    const KEY_A: [u8; 32] = [7; 32];
    const KEY_B: [u8; 32] = [9; 32];

    #[tokio::test]
    async fn fetched_directory_answers_by_directory_and_keyid() {
        let server = DirectoryServer::start(directory(&[KEY_A])).await;
        let s = setup(&server, true, |_| {});
        let agent = server.agent();
        let keyid = jwk_thumbprint(&KEY_A);
        assert_eq!(s.dirs.lookup(&agent, &keyid), KeyLookup::Pending);
        assert_eq!(s.settled(&agent, &keyid).await, KeyLookup::Found(KEY_A));
        assert_eq!(
            s.dirs.lookup(&agent, &jwk_thumbprint(&KEY_B)),
            KeyLookup::KeyNotInDirectory
        );
        // The same keyid under another agent URL is not this directory's key.
        let other = Agent {
            url: "https://localhost:1".into(),
            ..agent.clone()
        };
        assert_ne!(s.dirs.lookup(&other, &keyid), KeyLookup::Found(KEY_A));
        assert_eq!(server.requests(), 1, "fresh for max-age: fetched once");
        assert_eq!(s.outcomes()[0], "ok");
    }

    #[tokio::test]
    async fn concurrent_lookups_share_one_fetch() {
        let server =
            DirectoryServer::start(Answer::Slow(Duration::from_millis(200), jwks(&[KEY_A]))).await;
        let s = setup(&server, true, |_| {});
        let agent = server.agent();
        let keyid = jwk_thumbprint(&KEY_A);
        for _ in 0..50 {
            assert_eq!(s.dirs.lookup(&agent, &keyid), KeyLookup::Pending);
        }
        assert_eq!(s.settled(&agent, &keyid).await, KeyLookup::Found(KEY_A));
        assert_eq!(server.requests(), 1);
    }

    #[tokio::test]
    async fn failures_are_named_and_never_followed() {
        for (answer, outcome) in [
            (Answer::Redirect, "redirect"),
            (Answer::Status(500), "status"),
            (Answer::Huge(100_000), "too_large"),
            (
                Answer::Slow(Duration::from_secs(4), jwks(&[KEY_A])),
                "timeout",
            ),
            (
                Answer::Directory(jwks(&[KEY_A]), "text/html", "max-age=60"),
                "content_type",
            ),
            (
                Answer::Directory("{\"no\":1}".into(), "application/json", "max-age=60"),
                "not_jwks",
            ),
        ] {
            let server = DirectoryServer::start(answer).await;
            let s = setup(&server, true, |_| {});
            let agent = server.agent();
            let keyid = jwk_thumbprint(&KEY_A);
            assert_eq!(s.dirs.lookup(&agent, &keyid), KeyLookup::Pending);
            assert_eq!(
                s.settled(&agent, &keyid).await,
                KeyLookup::Unreachable,
                "{outcome}"
            );
            assert_eq!(s.outcomes(), vec![outcome]);
            assert_eq!(
                server.requests(),
                1,
                "{outcome}: retried only after the backoff"
            );
        }
    }

    #[tokio::test]
    async fn a_directory_that_drops_the_key_stops_verifying_and_a_failure_keeps_it() {
        let short =
            |keys: &[[u8; 32]]| Answer::Directory(jwks(keys), DIRECTORY_MEDIA_TYPE, "max-age=0");
        let server = DirectoryServer::start(short(&[KEY_A])).await;
        let s = setup(&server, true, |c| {
            c.min_ttl = Duration::from_millis(50);
            // Longer than the test's own lookups right after a fetch, shorter than its pauses.
            c.retry_min = Duration::from_millis(40);
        });
        let agent = server.agent();
        let keyid = jwk_thumbprint(&KEY_A);
        s.dirs.lookup(&agent, &keyid);
        assert_eq!(s.settled(&agent, &keyid).await, KeyLookup::Found(KEY_A));
        // Stale, and the directory fails: the stale key keeps answering, before and after.
        server.set(Answer::Status(503));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(s.dirs.lookup(&agent, &keyid), KeyLookup::Found(KEY_A));
        assert_eq!(s.settled(&agent, &keyid).await, KeyLookup::Found(KEY_A));
        // The directory answers without the key: it is gone, the new one is there.
        server.set(short(&[KEY_B]));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(
            s.dirs.lookup(&agent, &keyid),
            KeyLookup::Found(KEY_A),
            "stale until refetched"
        );
        assert_eq!(
            s.settled(&agent, &keyid).await,
            KeyLookup::KeyNotInDirectory
        );
        assert_eq!(
            s.dirs.lookup(&agent, &jwk_thumbprint(&KEY_B)),
            KeyLookup::Found(KEY_B)
        );
        assert_eq!(s.outcomes(), vec!["ok", "status", "ok"]);
        assert_eq!(server.requests(), 3);
    }

    #[tokio::test]
    async fn an_unknown_keyid_refetches_a_fresh_directory_and_a_failed_refetch_keeps_its_keys() {
        // Fresh for a day, as the draft's example directory says.
        let server = DirectoryServer::start(directory(&[KEY_A])).await;
        let s = setup(&server, true, |c| c.unknown_key_refetch = Duration::ZERO);
        let agent = server.agent();
        let (a, b) = (jwk_thumbprint(&KEY_A), jwk_thumbprint(&KEY_B));
        s.dirs.lookup(&agent, &a);
        assert_eq!(s.settled(&agent, &a).await, KeyLookup::Found(KEY_A));
        // The agent rotates: B is published; the request signed with it is not made to wait.
        server.set(directory(&[KEY_A, KEY_B]));
        assert_eq!(s.dirs.lookup(&agent, &b), KeyLookup::KeyNotInDirectory);
        assert_eq!(s.settled(&agent, &b).await, KeyLookup::Found(KEY_B));
        assert_eq!(server.requests(), 2, "one refetch, long before max-age");
        // A refetch that fails keeps the keys fetched before.
        server.set(Answer::Status(503));
        let c = jwk_thumbprint(&[11; 32]);
        assert_eq!(s.dirs.lookup(&agent, &c), KeyLookup::KeyNotInDirectory);
        assert_eq!(s.settled(&agent, &a).await, KeyLookup::Found(KEY_A));
        assert_eq!(s.dirs.lookup(&agent, &b), KeyLookup::Found(KEY_B));
        assert_eq!(s.outcomes(), vec!["ok", "ok", "status"]);
    }

    #[tokio::test]
    async fn a_flood_of_unknown_keyids_asks_the_directory_once_per_interval() {
        let server = DirectoryServer::start(directory(&[KEY_A])).await;
        let s = setup(&server, true, |c| {
            c.unknown_key_refetch = Duration::from_secs(3600);
        });
        let agent = server.agent();
        let a = jwk_thumbprint(&KEY_A);
        s.dirs.lookup(&agent, &a);
        assert_eq!(s.settled(&agent, &a).await, KeyLookup::Found(KEY_A));
        for i in 0..2_000u32 {
            let invented = format!("invented-{i}");
            assert_eq!(
                s.dirs.lookup(&agent, &invented),
                KeyLookup::KeyNotInDirectory
            );
        }
        assert_eq!(s.settled(&agent, &a).await, KeyLookup::Found(KEY_A));
        assert_eq!(
            server.requests(),
            1,
            "the interval since the last fetch holds"
        );
    }

    #[tokio::test]
    async fn private_addresses_are_refused_unless_allowed() {
        let server = DirectoryServer::start(directory(&[KEY_A])).await;
        let s = setup(&server, false, |_| {});
        let agent = server.agent();
        let keyid = jwk_thumbprint(&KEY_A);
        s.dirs.lookup(&agent, &keyid);
        assert_eq!(s.settled(&agent, &keyid).await, KeyLookup::Unreachable);
        assert_eq!(s.outcomes(), vec!["private_address"]);
        assert_eq!(server.requests(), 0, "no connection was made");
        let literal = Url::parse(&format!("https://127.0.0.1:{}/", server.port)).unwrap();
        let refused = s.dirs.outside.get(&literal).await.err();
        assert_eq!(refused, Some(FetchError::PrivateAddress));
        let plain = Url::parse("http://example.com/").unwrap();
        assert_eq!(
            s.dirs.outside.get(&plain).await.err(),
            Some(FetchError::NotHttps)
        );
    }

    #[tokio::test]
    async fn the_table_is_bounded() {
        let server = DirectoryServer::start(directory(&[KEY_A])).await;
        let s = setup(&server, true, |c| c.max_directories = 2);
        let keyid = jwk_thumbprint(&KEY_A);
        let known = server.agent();
        s.dirs.lookup(&known, &keyid);
        assert_eq!(s.settled(&known, &keyid).await, KeyLookup::Found(KEY_A));
        // Invented directories (nothing listens on port 1) take the one free place in turn.
        for port in [1, 2, 3] {
            let invented = Agent {
                url: format!("https://localhost:{port}"),
                ..known.clone()
            };
            s.dirs.lookup(&invented, &keyid);
            s.settled(&invented, &keyid).await;
            assert_eq!(s.dirs.len(), 2);
        }
        assert_eq!(s.dirs.lookup(&known, &keyid), KeyLookup::Found(KEY_A));
        // With the known agent's entry and one being fetched, a new directory gets no fetch.
        let slow =
            DirectoryServer::start(Answer::Slow(Duration::from_millis(300), jwks(&[KEY_B]))).await;
        let s = setup(&slow, true, |c| c.max_directories = 1);
        s.dirs.lookup(&slow.agent(), &keyid);
        let invented = Agent {
            url: "https://localhost:4".into(),
            ..known.clone()
        };
        assert_eq!(s.dirs.lookup(&invented, &keyid), KeyLookup::Unreachable);
    }

    #[tokio::test]
    async fn fetch_outcomes_reach_the_metrics() {
        let mut registry = prometheus_client::registry::Registry::with_prefix("signpost");
        let metrics = crate::IdentityMetrics::register(&mut registry);
        let server = DirectoryServer::start(Answer::Redirect).await;
        let counted = metrics.key_directory_fetches.clone();
        let s = setup(&server, true, move |c| {
            c.observer = Some(Arc::new(move |outcome| counted.inc(outcome)))
        });
        let agent = server.agent();
        s.dirs.lookup(&agent, "k");
        assert_eq!(s.settled(&agent, "k").await, KeyLookup::Unreachable);
        let mut exposition = String::new();
        prometheus_client::encoding::text::encode(&mut exposition, &registry).unwrap();
        assert!(
            exposition.contains("signpost_key_directory_fetches_total{outcome=\"redirect\"} 1"),
            "{exposition}"
        );
    }

    #[tokio::test]
    async fn keys_from_the_policy_need_no_fetch_and_stay_with_their_agent() {
        let server = DirectoryServer::start(directory(&[KEY_B])).await;
        let s = setup(&server, true, |_| {});
        let agent = server.agent();
        let keyid = jwk_thumbprint(&KEY_A);
        s.dirs.set_static(vec![(
            agent.url.clone(),
            DirectoryKey {
                keyid: keyid.clone(),
                key: KEY_A,
            },
        )]);
        assert_eq!(s.dirs.lookup(&agent, &keyid), KeyLookup::Found(KEY_A));
        assert_eq!(server.requests(), 0);
        let other = Agent {
            url: "https://other.example".into(),
            ..agent.clone()
        };
        assert_eq!(
            s.dirs.lookup(&other, &keyid),
            KeyLookup::Pending,
            "its own directory, not the policy's key"
        );
        s.dirs.set_static(Vec::new());
        assert_eq!(s.dirs.lookup(&agent, &keyid), KeyLookup::Pending);
    }
}
