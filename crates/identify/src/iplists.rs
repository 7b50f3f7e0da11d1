//! Published IP lists of bot operators (Google's `googlebot.json`, OpenAI's `gptbot.json`, plain
//! text, CSV), fetched and refreshed in the background.
//!
//! A request never waits for a list: [`IpLists::contains`] reads the last good table of a URL,
//! or says it is not loaded yet. Each URL the policy names has one background task that fetches
//! it every `refresh`, and after a failure sooner (`retry`, doubling up to `refresh`); a failed
//! fetch or a body that does not parse keeps the last good table. The fetching itself (HTTPS,
//! size and redirect limits) is the [`Fetch`] implementation's; here every fetch also has the
//! deadline `fetch_timeout`.
//!
//! Bounds: at most `max_urls` lists are watched (those past it are ignored, said in the log);
//! a list of more than `max_entries` networks is refused whole (the last good one stays).

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use async_trait::async_trait;
use bytes::Bytes;
use ipnet::{IpNet, Ipv4Net};
use prefix_trie::joint::JointPrefixSet;
use url::Url;

use crate::OutcomeCounter;

/// How the body of a list is fetched: the edge's bounded HTTPS client, or a test's.
#[async_trait]
pub trait Fetch: Send + Sync {
    /// The body of `url`, or why there is none.
    async fn get(&self, url: &Url) -> Result<Bytes, String>;
}

/// How often, how long and how much.
#[derive(Clone, Debug)]
pub struct IpListsConfig {
    /// The time between two successful fetches of a list.
    pub refresh: Duration,
    /// The time before the first retry after a failure; it doubles with each failure in a row,
    /// up to `refresh`.
    pub retry: Duration,
    /// The deadline of one fetch.
    pub fetch_timeout: Duration,
    /// Lists watched at once.
    pub max_urls: usize,
    /// Networks in one list.
    pub max_entries: usize,
}

impl Default for IpListsConfig {
    fn default() -> Self {
        IpListsConfig {
            refresh: Duration::from_secs(6 * 3600),
            retry: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(30),
            max_urls: 64,
            max_entries: 100_000,
        }
    }
}

/// Why a list's body was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("the list is empty")]
    Empty,
    #[error("the list has more than {0} networks")]
    TooMany(usize),
    #[error("the list is not UTF-8")]
    NotUtf8,
    #[error("the JSON list does not parse: {0}")]
    Json(String),
    #[error("line {line} is not an address or a network: {text:?}")]
    Line { line: usize, text: String },
}

/// How much of a bad line an error quotes.
const QUOTED_CHARS: usize = 60;

/// The networks of a published list, in whichever of the formats the big operators use:
/// - JSON: `{"prefixes": [{"ipv4Prefix": "66.249.64.0/27"}, {"ipv6Prefix": "2001:4860::/32"}]}`
///   (Google, OpenAI, Perplexity; other members are ignored), or a JSON array of such objects
///   or of strings;
/// - text: one network (`192.0.2.0/24`) or address (`192.0.2.1`, a /32) a line, `#` comments;
/// - CSV: the first column of each line, a header line skipped.
///
/// Host bits are cleared (`66.249.66.1/27` is `66.249.66.0/27`). Any line or entry that is not
/// a network refuses the whole list: a half-understood list (an HTML error page answered with
/// 200, a format that changed) must not replace the last good one. So does an empty list.
pub fn parse_ranges(body: &[u8], max_entries: usize) -> Result<Vec<IpNet>, RangeError> {
    let text = std::str::from_utf8(body).map_err(|_| RangeError::NotUtf8)?;
    let text = text.trim_start_matches('\u{feff}').trim();
    let nets = if text.starts_with('{') || text.starts_with('[') {
        parse_json(text, max_entries)?
    } else {
        parse_lines(text, max_entries)?
    };
    if nets.is_empty() {
        return Err(RangeError::Empty);
    }
    Ok(nets)
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum JsonList {
    Object { prefixes: Vec<JsonEntry> },
    Array(Vec<JsonEntry>),
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum JsonEntry {
    Prefix {
        #[serde(rename = "ipv4Prefix")]
        ipv4: Option<String>,
        #[serde(rename = "ipv6Prefix")]
        ipv6: Option<String>,
    },
    Text(String),
}

fn parse_json(text: &str, max_entries: usize) -> Result<Vec<IpNet>, RangeError> {
    let list: JsonList = serde_json::from_str(text).map_err(|e| RangeError::Json(e.to_string()))?;
    let entries = match list {
        JsonList::Object { prefixes } | JsonList::Array(prefixes) => prefixes,
    };
    let mut nets = Vec::with_capacity(entries.len().min(max_entries));
    for (index, entry) in entries.into_iter().enumerate() {
        let texts = match entry {
            JsonEntry::Prefix { ipv4, ipv6 } => {
                if ipv4.is_none() && ipv6.is_none() {
                    return Err(RangeError::Json(format!(
                        "prefix {index} has neither ipv4Prefix nor ipv6Prefix"
                    )));
                }
                [ipv4, ipv6]
            }
            JsonEntry::Text(text) => [Some(text), None],
        };
        for text in texts.into_iter().flatten() {
            let net = parse_net(&text).ok_or_else(|| {
                RangeError::Json(format!("prefix {index} is not a network: {}", quote(&text)))
            })?;
            push(&mut nets, net, max_entries)?;
        }
    }
    Ok(nets)
}

fn parse_lines(text: &str, max_entries: usize) -> Result<Vec<IpNet>, RangeError> {
    let mut nets = Vec::new();
    let mut first_row = true;
    for (index, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let field = line.split(',').next().unwrap_or_default().trim();
        let field = field.trim_matches('"').trim();
        match parse_net(field) {
            Some(net) => push(&mut nets, net, max_entries)?,
            // A CSV's header (`ip_prefix,region,...`): only the first row, only with columns.
            None if first_row && line.contains(',') => {}
            None => {
                return Err(RangeError::Line {
                    line: index + 1,
                    text: quote(line),
                });
            }
        }
        first_row = false;
    }
    Ok(nets)
}

fn push(nets: &mut Vec<IpNet>, net: IpNet, max_entries: usize) -> Result<(), RangeError> {
    if nets.len() >= max_entries {
        return Err(RangeError::TooMany(max_entries));
    }
    nets.push(net);
    Ok(())
}

/// A network (`192.0.2.0/24`, host bits cleared) or an address (a /32 or /128).
fn parse_net(text: &str) -> Option<IpNet> {
    let text = text.trim();
    IpNet::from_str(text)
        .map(|net| net.trunc())
        .ok()
        .or_else(|| IpAddr::from_str(text).ok().map(IpNet::from))
}

fn quote(text: &str) -> String {
    text.chars().take(QUOTED_CHARS).collect()
}

/// One list's networks, looked up longest-prefix (a trie, not a scan).
struct IpSet(JointPrefixSet<IpNet>);

impl IpSet {
    fn new(nets: &[IpNet]) -> IpSet {
        let mut set = JointPrefixSet::new();
        for net in nets {
            set.insert(canonical_net(*net));
        }
        IpSet(set)
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.get_lpm(&IpNet::from(ip)).is_some()
    }
}

/// IPv4-mapped IPv6 networks (`::ffff:192.0.2.0/120`) are their IPv4 network, as client
/// addresses are looked up.
fn canonical_net(net: IpNet) -> IpNet {
    const MAPPED_PREFIX: u8 = 96;
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= MAPPED_PREFIX => v6
            .network()
            .to_ipv4_mapped()
            .and_then(|v4| Ipv4Net::new(v4, v6.prefix_len() - MAPPED_PREFIX).ok())
            .map_or(net, IpNet::V4),
        other => other,
    }
}

/// One watched URL: its last good table, and the task refreshing it (stopped when the URL is
/// no longer watched and this is dropped).
struct List {
    table: ArcSwapOption<IpSet>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for List {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

/// The published lists the current policy names; one per process (tables outlive reloads
/// that keep naming the same URLs).
pub struct IpLists {
    fetch: Arc<dyn Fetch>,
    config: IpListsConfig,
    /// Keyed by the URL as the policy names it (`BotCatalog::ip_range_urls`), so that a
    /// request's lookup parses nothing.
    lists: ArcSwap<HashMap<Arc<str>, Arc<List>>>,
    /// Serialises [`IpLists::watch`] (a reload at a time changes the set).
    watching: Mutex<()>,
    refreshes: OutcomeCounter,
}

impl IpLists {
    /// Lists fetched with `fetch`, their refreshes counted in `refreshes`
    /// (`signpost_ip_list_refreshes_total{outcome}`).
    pub fn new(
        fetch: Arc<dyn Fetch>,
        config: IpListsConfig,
        refreshes: OutcomeCounter,
    ) -> Arc<Self> {
        Arc::new(IpLists {
            fetch,
            config,
            lists: ArcSwap::from_pointee(HashMap::new()),
            watching: Mutex::new(()),
            refreshes,
        })
    }

    /// Makes `urls` the lists kept: a URL already watched keeps its table and its schedule, a
    /// new one is fetched now, one no longer named is dropped. At most `max_urls` are kept; a
    /// text that is not a URL is ignored (said in the log; the policy checks them first).
    pub fn watch(&self, urls: &[Arc<str>]) {
        let _one_at_a_time = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.lists.load_full();
        let mut next = HashMap::new();
        let mut ignored = 0usize;
        for url in urls {
            if next.contains_key(url) {
                continue;
            }
            if next.len() >= self.config.max_urls {
                ignored += 1;
                continue;
            }
            let list = match current.get(url) {
                Some(list) => Arc::clone(list),
                None => match Url::parse(url) {
                    Ok(parsed) => self.start(parsed),
                    Err(e) => {
                        tracing::warn!("published IP list {url:?} is not a URL: {e}");
                        continue;
                    }
                },
            };
            next.insert(Arc::clone(url), list);
        }
        if ignored > 0 {
            tracing::warn!(
                "{ignored} published IP lists past the first {} are not fetched",
                self.config.max_urls
            );
        }
        self.lists.store(Arc::new(next));
    }

    /// Whether `ip` is in the list at `url`; `None` when that list is not loaded (not watched,
    /// or no fetch of it has succeeded yet).
    pub fn contains(&self, url: &str, ip: IpAddr) -> Option<bool> {
        let lists = self.lists.load();
        let table = lists.get(url)?.table.load();
        table.as_ref().map(|set| set.contains(ip))
    }

    fn start(&self, url: Url) -> Arc<List> {
        let list = Arc::new(List {
            table: ArcSwapOption::empty(),
            task: Mutex::new(None),
        });
        let Some(rt) = crate::runtime::runtime() else {
            self.refreshes.inc("fetch_failed");
            return list;
        };
        let task = rt.spawn(refresh(
            Arc::downgrade(&list),
            url,
            Arc::clone(&self.fetch),
            self.config.clone(),
            self.refreshes.clone(),
        ));
        *list.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        list
    }
}

/// Fetches `url` until its list is dropped: every `refresh` after a success, after `retry`
/// doubling after failures.
async fn refresh(
    list: Weak<List>,
    url: Url,
    fetch: Arc<dyn Fetch>,
    config: IpListsConfig,
    refreshes: OutcomeCounter,
) {
    let mut failures = 0u32;
    loop {
        let parsed: Result<Vec<IpNet>, (&str, String)> =
            match tokio::time::timeout(config.fetch_timeout, fetch.get(&url)).await {
                Err(_) => Err((
                    "timeout",
                    format!("no answer within {:?}", config.fetch_timeout),
                )),
                Ok(Err(e)) => Err(("fetch_failed", e)),
                Ok(Ok(body)) => {
                    parse_ranges(&body, config.max_entries).map_err(|e| ("invalid", e.to_string()))
                }
            };
        // Not held across the wait: dropping the list (the URL no longer watched) ends this.
        let Some(list) = list.upgrade() else { return };
        let wait = match parsed {
            Ok(nets) => {
                list.table.store(Some(Arc::new(IpSet::new(&nets))));
                refreshes.inc("ok");
                failures = 0;
                config.refresh
            }
            Err((outcome, why)) => {
                refreshes.inc(outcome);
                let kept = if list.table.load().is_some() {
                    "the last good list is kept"
                } else {
                    "not loaded yet"
                };
                tracing::warn!("published IP list {url}: {why}; {kept}");
                failures = failures.saturating_add(1);
                config
                    .retry
                    .saturating_mul(1 << (failures - 1).min(16))
                    .min(config.refresh)
            }
        };
        drop(list);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn nets(texts: &[&str]) -> Vec<IpNet> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn google_and_openai_json() {
        let google = br#"{
          "creationTime": "2026-11-20T15:46:10.000000",
          "prefixes": [
            {"ipv6Prefix": "2001:4860:4801:10::/64"},
            {"ipv4Prefix": "66.249.64.0/27"},
            {"ipv4Prefix": "66.249.66.1/27"}
          ]
        }"#;
        assert_eq!(
            parse_ranges(google, 10).unwrap(),
            nets(&["2001:4860:4801:10::/64", "66.249.64.0/27", "66.249.66.0/27"])
        );
        let array = br#"["20.171.206.0/24", {"ipv4Prefix": "52.230.152.0/24"}]"#;
        assert_eq!(
            parse_ranges(array, 10).unwrap(),
            nets(&["20.171.206.0/24", "52.230.152.0/24"])
        );
    }

    #[test]
    fn text_and_csv() {
        let text = b"\xef\xbb\xbf# Bot addresses\n192.0.2.0/24\n\n  198.51.100.7  # one host\n2001:db8::/32\r\n";
        assert_eq!(
            parse_ranges(text, 10).unwrap(),
            nets(&["192.0.2.0/24", "198.51.100.7/32", "2001:db8::/32"])
        );
        let csv = b"ip_prefix,region,service\n\"192.0.2.0/24\",us-east-1,CRAWLER\n2001:db8::/48,eu,CRAWLER\n";
        assert_eq!(
            parse_ranges(csv, 10).unwrap(),
            nets(&["192.0.2.0/24", "2001:db8::/48"])
        );
    }

    #[test]
    fn what_is_refused() {
        assert_eq!(parse_ranges(b"", 10), Err(RangeError::Empty));
        assert_eq!(parse_ranges(b"# nothing\n", 10), Err(RangeError::Empty));
        assert_eq!(
            parse_ranges(br#"{"prefixes": []}"#, 10),
            Err(RangeError::Empty)
        );
        assert_eq!(
            parse_ranges(b"192.0.2.0/24\n192.0.2.1\n192.0.2.2\n", 2),
            Err(RangeError::TooMany(2))
        );
        assert_eq!(parse_ranges(b"\xff\xfe", 10), Err(RangeError::NotUtf8));
        assert_eq!(
            parse_ranges(b"<html><body>Service Unavailable</body></html>", 10),
            Err(RangeError::Line {
                line: 1,
                text: "<html><body>Service Unavailable</body></html>".into()
            })
        );
        assert_eq!(
            parse_ranges(b"192.0.2.0/24\n192.0.2.0/33\n", 10),
            Err(RangeError::Line {
                line: 2,
                text: "192.0.2.0/33".into()
            })
        );
        // A header is only the first row of a CSV.
        assert!(matches!(
            parse_ranges(b"192.0.2.0/24,a\nname,b\n", 10),
            Err(RangeError::Line { line: 2, .. })
        ));
        assert!(matches!(
            parse_ranges(br#"{"prefixes": [{"ipv4Prefix": "66.249.64.0/99"}]}"#, 10),
            Err(RangeError::Json(_))
        ));
        assert!(matches!(
            parse_ranges(br#"{"prefixes": [{"service": "x"}]}"#, 10),
            Err(RangeError::Json(_))
        ));
        assert!(matches!(
            parse_ranges(br#"{"creationTime": "x"}"#, 10),
            Err(RangeError::Json(_))
        ));
    }

    #[test]
    fn lookups_are_longest_prefix_and_see_mapped_addresses_as_ipv4() {
        let set = IpSet::new(&nets(&[
            "66.249.64.0/27",
            "2001:db8::/32",
            "::ffff:192.0.2.0/120",
        ]));
        for (ip, inside) in [
            ("66.249.64.31", true),
            ("66.249.64.32", false),
            ("::ffff:66.249.64.1", true),
            ("2001:db8:1::1", true),
            ("2001:db9::1", false),
            ("192.0.2.200", true),
        ] {
            assert_eq!(set.contains(ip.parse().unwrap()), inside, "{ip}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_ranges(&body, 8);
        }

        #[test]
        fn never_panics_on_near_misses(body in r#"[\[\]{}",:0-9a-fA-F./#\n ipv46Prefx]{0,200}"#) {
            let _ = parse_ranges(body.as_bytes(), 8);
        }

        #[test]
        fn every_format_gives_back_the_networks_written(
            v4 in proptest::collection::vec((any::<u32>(), 0u8..=32), 1..20),
            v6 in proptest::collection::vec((any::<u128>(), 0u8..=128), 0..20),
        ) {
            let written: Vec<IpNet> = v4.iter()
                .map(|&(a, p)| IpNet::new(IpAddr::from(a.to_be_bytes()), p).unwrap().trunc())
                .chain(v6.iter().map(|&(a, p)| {
                    IpNet::new(IpAddr::from(a.to_be_bytes()), p).unwrap().trunc()
                }))
                .collect();
            let text: String = written.iter().map(|n| format!("{n}\n")).collect();
            let csv: String = "prefix,what\n".to_string()
                + &written.iter().map(|n| format!("{n},x\n")).collect::<String>();
            let json = serde_json::json!({
                "creationTime": "now",
                "prefixes": written.iter().map(|n| match n {
                    IpNet::V4(_) => serde_json::json!({"ipv4Prefix": n.to_string()}),
                    IpNet::V6(_) => serde_json::json!({"ipv6Prefix": n.to_string()}),
                }).collect::<Vec<_>>(),
            })
            .to_string();
            for body in [text, csv, json] {
                prop_assert_eq!(parse_ranges(body.as_bytes(), 100).unwrap(), written.clone());
            }
        }
    }

    /// A real HTTP server on loopback whose answer the test changes, counting the requests.
    struct ListServer {
        url: Arc<str>,
        answer: Arc<Mutex<(u16, String)>>,
        requests: Arc<AtomicUsize>,
        server: Arc<tiny_http::Server>,
    }

    impl ListServer {
        fn start(status: u16, body: &str) -> ListServer {
            let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
            let port = server.server_addr().to_ip().unwrap().port();
            let answer = Arc::new(Mutex::new((status, body.to_string())));
            let requests = Arc::new(AtomicUsize::new(0));
            let (srv, ans, count) = (server.clone(), answer.clone(), requests.clone());
            std::thread::spawn(move || {
                for request in srv.incoming_requests() {
                    count.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = ans.lock().unwrap().clone();
                    let _ = request
                        .respond(tiny_http::Response::from_string(body).with_status_code(status));
                }
            });
            ListServer {
                url: Arc::from(format!("http://127.0.0.1:{port}/bot.json")),
                answer,
                requests,
                server,
            }
        }

        fn answer(&self, status: u16, body: &str) {
            *self.answer.lock().unwrap() = (status, body.to_string());
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }
    }

    impl Drop for ListServer {
        fn drop(&mut self) {
            self.server.unblock();
        }
    }

    /// The test's [`Fetch`]: a real HTTP client; a status other than 200 is a failure.
    struct HttpFetch(reqwest::Client);

    #[async_trait]
    impl Fetch for HttpFetch {
        async fn get(&self, url: &Url) -> Result<Bytes, String> {
            let response = self
                .0
                .get(url.as_str())
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if response.status() != 200 {
                return Err(format!("status {}", response.status()));
            }
            response.bytes().await.map_err(|e| e.to_string())
        }
    }

    fn until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        done()
    }

    const GOOGLE: &str = r#"{"creationTime":"x","prefixes":[{"ipv4Prefix":"66.249.64.0/27"}]}"#;
    const MOVED: &str = "# moved\n192.0.2.0/24\n";

    #[test]
    fn a_list_is_fetched_refreshed_and_kept_through_failures() {
        let server = ListServer::start(200, GOOGLE);
        let refreshes = OutcomeCounter::default();
        let lists = IpLists::new(
            Arc::new(HttpFetch(reqwest::Client::new())),
            IpListsConfig {
                refresh: Duration::from_millis(200),
                retry: Duration::from_millis(50),
                ..IpListsConfig::default()
            },
            refreshes.clone(),
        );
        let googlebot: IpAddr = "66.249.64.1".parse().unwrap();
        let other: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(lists.contains(&server.url, googlebot), None, "not watched");
        lists.watch(&[server.url.clone(), server.url.clone()]);
        assert_eq!(lists.lists.load().len(), 1, "named twice, watched once");
        assert!(until(Duration::from_secs(5), || lists
            .contains(&server.url, googlebot)
            .is_some()));
        assert_eq!(lists.contains(&server.url, googlebot), Some(true));
        assert_eq!(lists.contains(&server.url, other), Some(false));

        // The server fails, then answers garbage: the last good list stays.
        server.answer(500, "down");
        let before = refreshes.get("fetch_failed");
        assert!(until(Duration::from_secs(5), || refreshes
            .get("fetch_failed")
            > before + 1));
        assert_eq!(lists.contains(&server.url, googlebot), Some(true));
        server.answer(200, "<html>maintenance</html>");
        assert!(until(Duration::from_secs(5), || refreshes.get("invalid") > 0));
        assert_eq!(lists.contains(&server.url, googlebot), Some(true));

        // It comes back with other addresses: they replace the old ones.
        server.answer(200, MOVED);
        assert!(until(Duration::from_secs(5), || lists
            .contains(&server.url, other)
            == Some(true)));
        assert_eq!(lists.contains(&server.url, googlebot), Some(false));

        // No longer named: no longer fetched, no longer answered.
        lists.watch(&[]);
        assert_eq!(lists.contains(&server.url, other), None);
        std::thread::sleep(Duration::from_millis(100));
        let requests = server.requests();
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(server.requests(), requests, "its refresh task stopped");
    }

    #[test]
    fn rewatching_keeps_tables_and_the_url_count_is_bounded() {
        let first = ListServer::start(200, GOOGLE);
        let second = ListServer::start(200, MOVED);
        let lists = IpLists::new(
            Arc::new(HttpFetch(reqwest::Client::new())),
            IpListsConfig {
                max_urls: 1,
                ..IpListsConfig::default()
            },
            OutcomeCounter::default(),
        );
        lists.watch(&[first.url.clone(), second.url.clone()]);
        let googlebot: IpAddr = "66.249.64.1".parse().unwrap();
        assert!(until(Duration::from_secs(5), || lists
            .contains(&first.url, googlebot)
            .is_some()));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(second.requests(), 0, "past max_urls: not fetched");
        assert_eq!(lists.contains(&second.url, googlebot), None);

        // The same URL named again (a reload): its table stays, no new fetch.
        lists.watch(std::slice::from_ref(&first.url));
        assert_eq!(lists.contains(&first.url, googlebot), Some(true));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(first.requests(), 1);
    }

    /// A fetch that never answers: the deadline ends it, and the list stays not loaded.
    struct Silent;

    #[async_trait]
    impl Fetch for Silent {
        async fn get(&self, _url: &Url) -> Result<Bytes, String> {
            std::future::pending().await
        }
    }

    #[test]
    fn a_fetch_that_never_answers_times_out() {
        let refreshes = OutcomeCounter::default();
        let lists = IpLists::new(
            Arc::new(Silent),
            IpListsConfig {
                fetch_timeout: Duration::from_millis(100),
                retry: Duration::from_secs(60),
                ..IpListsConfig::default()
            },
            refreshes.clone(),
        );
        let url: Arc<str> = Arc::from("https://bots.example/list.txt");
        lists.watch(&[url.clone(), Arc::from("not a url")]);
        assert!(until(Duration::from_secs(5), || refreshes.get("timeout") == 1));
        assert_eq!(lists.contains(&url, "192.0.2.1".parse().unwrap()), None);
        assert_eq!(
            lists.lists.load().len(),
            1,
            "the text that is not a URL is ignored"
        );
    }
}
