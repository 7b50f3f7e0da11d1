//! robots.txt: the zone's managed block served before (`prepend`) or instead of (`replace`) the
//! origin's file, and the origin's file read, parsed and kept per zone so that requests of known
//! crawlers to paths it disallows for them can be counted (with the directive line that
//! disallowed them).
//!
//! Bounds: the origin's file is read up to [`MAX_ROBOTS_BYTES`] (500 KiB, the size Google reads;
//! the rest is served but not parsed), each line up to [`MAX_LINE_BYTES`], at most [`MAX_RULES`]
//! rules are kept, and the store holds one parsed file per zone. The file is refreshed whenever
//! the edge serves it from the origin: crawlers fetch it often, and it costs no request of its
//! own (a zone whose file no one has fetched since the start counts no violations yet).
//!
//! Parsing uses the `robotstxt` crate, a port of Google's own robots.txt parser (the reference
//! RFC 9309 grew from): its tolerant line parser (typos such as `disalow`, a missing colon, a
//! byte-order mark, percent-escaping of patterns) with line numbers through its
//! `RobotsParseHandler`. Its matcher is not used: it re-parses the whole file for every URL
//! and its pattern matching is quadratic in the path; rules are kept once here and matched with
//! [`signpost_policy::glob_matches`], linear in the path.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use pingora::http::ResponseHeader;
use signpost_policy::{KnownCrawler, RobotsConfig, RobotsMode, glob_matches, managed_block};

/// robots.txt's part of one request.
#[derive(Default)]
pub struct RobotsState {
    /// `/robots.txt` on its way from the origin: the managed block to put before it, and the
    /// copy kept to parse it.
    pub body: Option<Box<RobotsBody>>,
    /// The robots.txt rule a known crawler's request broke, for the access line.
    pub violation: Option<Box<Violation>>,
}

/// The most of an origin's robots.txt that is parsed (Google's limit, 500 KiB).
pub const MAX_ROBOTS_BYTES: usize = 500 * 1024;
/// Lines are cut to this many bytes before parsing (the parser's own line limit is 16 KiB,
/// counted in a way that can split a character: cutting first keeps it from being reached).
pub const MAX_LINE_BYTES: usize = 4096;
/// Rules kept per file, at most; later ones are ignored.
pub const MAX_RULES: usize = 10_000;

/// The path robots.txt is served at; never refused, challenged or charged.
pub const ROBOTS_PATH: &str = "/robots.txt";

/// Whether a request's path (without its query) is `/robots.txt`.
pub fn is_robots_path(path: &str) -> bool {
    path == ROBOTS_PATH
}

/// One `Allow` or `Disallow` rule of a robots.txt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// `Allow` (true) or `Disallow`.
    pub allow: bool,
    /// The path pattern, as the parser canonicalised it.
    pub pattern: String,
    /// The rule's line in the file, from 1.
    pub line: u32,
}

impl Rule {
    /// The directive as a line of robots.txt, e.g. `Disallow: /private/`.
    pub fn directive(&self) -> String {
        let key = if self.allow { "Allow" } else { "Disallow" };
        format!("{key}: {}", self.pattern)
    }

    fn matches(&self, path: &str) -> bool {
        match self.pattern.strip_suffix('$') {
            Some(anchored) => glob_matches(anchored, path, true),
            None => glob_matches(&self.pattern, path, false),
        }
    }
}

#[derive(Debug, Default)]
struct Group {
    /// Product tokens, lower-cased; `*` for every crawler.
    agents: Vec<String>,
    rules: Vec<Rule>,
}

/// A parsed robots.txt.
#[derive(Debug, Default)]
pub struct RobotsTxt {
    groups: Vec<Group>,
}

impl RobotsTxt {
    /// Parses up to [`MAX_ROBOTS_BYTES`] of `body`; bytes that are not UTF-8 read as U+FFFD.
    pub fn parse(body: &[u8]) -> RobotsTxt {
        let body = &body[..body.len().min(MAX_ROBOTS_BYTES)];
        let text = String::from_utf8_lossy(body);
        let mut cut = String::with_capacity(text.len());
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                cut.push('\n');
            }
            cut.push_str(&line[..line.floor_char_boundary(MAX_LINE_BYTES)]);
        }
        let mut handler = Handler::default();
        robotstxt::parse_robotstxt(&cut, &mut handler);
        RobotsTxt {
            groups: handler.groups,
        }
    }

    /// The rule that disallows `path` (path and query, as requested) for the crawler whose
    /// robots.txt product token is `token`, by RFC 9309: the groups naming the token (ignoring
    /// case), else the `*` groups; of their rules that match, the longest pattern wins, and
    /// `Allow` wins a tie. `None` when the path is allowed.
    pub fn is_disallowed(&self, token: &str, path: &str) -> Option<&Rule> {
        let names = |g: &&Group| g.agents.iter().any(|a| a.eq_ignore_ascii_case(token));
        let mut groups: Vec<&Group> = self.groups.iter().filter(names).collect();
        if groups.is_empty() {
            groups = self
                .groups
                .iter()
                .filter(|g| g.agents.iter().any(|a| a == "*"))
                .collect();
        }
        let mut best: Option<&Rule> = None;
        for rule in groups.iter().flat_map(|g| &g.rules) {
            if !rule.matches(path) {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => {
                    rule.pattern.len() > b.pattern.len()
                        || (rule.pattern.len() == b.pattern.len() && rule.allow && !b.allow)
                }
            };
            if better {
                best = Some(rule);
            }
        }
        best.filter(|r| !r.allow)
    }

    /// How many rules were kept.
    pub fn rule_count(&self) -> usize {
        self.groups.iter().map(|g| g.rules.len()).sum()
    }
}

/// Builds groups from the parser's callbacks: consecutive `User-agent` lines open one group,
/// the rules after them belong to it, and the next `User-agent` after a rule opens another.
#[derive(Default)]
struct Handler {
    groups: Vec<Group>,
    /// Whether the last group has had a rule (so a `User-agent` line opens a new group).
    in_rules: bool,
    rules: usize,
}

impl Handler {
    fn rule(&mut self, line: u32, value: &str, allow: bool) {
        self.in_rules = true;
        // An empty pattern matches nothing (`Disallow:` allows everything).
        if value.is_empty() || self.rules >= MAX_RULES {
            return;
        }
        // Rules before any `User-agent` line belong to no group and are ignored.
        if let Some(group) = self.groups.last_mut() {
            group.rules.push(Rule {
                allow,
                pattern: value.to_owned(),
                line,
            });
            self.rules += 1;
        }
    }
}

impl robotstxt::RobotsParseHandler for Handler {
    fn handle_robots_start(&mut self) {}
    fn handle_robots_end(&mut self) {}

    fn handle_user_agent(&mut self, _line: u32, user_agent: &str) {
        if self.in_rules || self.groups.is_empty() {
            self.groups.push(Group::default());
            self.in_rules = false;
        }
        // The product token: `Googlebot/2.1` obeys rules for `Googlebot`.
        let token: String = if user_agent.starts_with('*') {
            "*".into()
        } else {
            user_agent
                .chars()
                .take_while(|c| c.is_ascii_alphabetic() || *c == '-' || *c == '_')
                .collect::<String>()
                .to_ascii_lowercase()
        };
        if let Some(group) = self.groups.last_mut()
            && !token.is_empty()
        {
            group.agents.push(token);
        }
    }

    fn handle_allow(&mut self, line: u32, value: &str) {
        self.rule(line, value, true);
    }

    fn handle_disallow(&mut self, line: u32, value: &str) {
        self.rule(line, value, false);
    }

    fn handle_sitemap(&mut self, _line: u32, _value: &str) {}

    fn handle_unknown_action(&mut self, _line: u32, _action: &str, _value: &str) {}
}

/// A rule a crawler's request broke: what the access log and the metric get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule's line in the zone's robots.txt.
    pub line: u32,
    /// The directive, e.g. `Disallow: /private/`.
    pub directive: String,
}

/// The last robots.txt the edge served for each zone, parsed.
#[derive(Default)]
pub struct RobotsStore {
    files: RwLock<HashMap<Arc<str>, Arc<RobotsTxt>>>,
}

impl RobotsStore {
    /// Keeps `file` as the zone's robots.txt.
    pub fn update(&self, zone: &Arc<str>, file: RobotsTxt) {
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        files.insert(zone.clone(), Arc::new(file));
    }

    /// Forgets the files of zones a new policy no longer has (the store stays bounded by the
    /// policy's zones across reloads).
    pub fn retain_zones(&self, zones: &[Arc<str>]) {
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        files.retain(|zone, _| zones.contains(zone));
    }

    /// [`is_disallowed`](Self::is_disallowed), counted in
    /// `signpost_robots_violations_total{crawler}` when it is (`crawler_label`: the catalog
    /// name). The caller logs the returned rule on the access line.
    pub fn check(
        &self,
        metrics: &crate::crawl::metrics::CrawlMetrics,
        zone: &str,
        crawler_label: &Arc<str>,
        token: &str,
        path: &str,
    ) -> Option<Violation> {
        let violation = self.is_disallowed(zone, token, path)?;
        metrics.robots_violation(crawler_label);
        Some(violation)
    }

    /// Whether the zone's robots.txt disallows `path` for the crawler with robots `token`, and
    /// by which rule. `None` when it allows it, or no file of the zone has been read yet.
    pub fn is_disallowed(&self, zone: &str, token: &str, path: &str) -> Option<Violation> {
        let file = {
            let files = self.files.read().unwrap_or_else(|e| e.into_inner());
            files.get(zone)?.clone()
        };
        file.is_disallowed(token, path).map(|rule| Violation {
            line: rule.line,
            directive: rule.directive(),
        })
    }
}

/// What the edge does with a request for `/robots.txt` in a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RobotsPlan {
    /// Ask the origin and pass its answer through (reading it to count violations).
    PassThrough,
    /// Ask the origin, then put `managed` before its file (see [`prepend_status`]).
    Prepend {
        /// The managed block.
        managed: String,
    },
    /// Answer `200 text/plain` with this body, without asking the origin.
    Replace {
        /// The managed block.
        managed: String,
    },
}

/// The plan for `/robots.txt` in a zone, from its `[zone.robots]`, its crawl policy and the
/// bot catalog.
pub fn plan(
    robots: &RobotsConfig,
    crawl: Option<&signpost_policy::CrawlConfig>,
    crawlers: &[KnownCrawler<'_>],
) -> RobotsPlan {
    match robots.mode {
        RobotsMode::Off => RobotsPlan::PassThrough,
        RobotsMode::Prepend => RobotsPlan::Prepend {
            managed: managed_block(robots, crawl, crawlers),
        },
        RobotsMode::Replace => RobotsPlan::Replace {
            managed: managed_block(robots, crawl, crawlers),
        },
    }
}

/// In `prepend`, what the origin's status means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrependOutcome {
    /// 200: the managed block, then the origin's file.
    Prepend,
    /// 4xx or another non-200 below 500 (no file): the managed block alone, `200 text/plain`.
    ManagedAlone,
    /// 5xx: passed through. RFC 9309 has crawlers treat an unreachable robots.txt as "disallow
    /// everything"; answering the block alone would turn that into "allow".
    PassThrough,
}

/// What `prepend` does with the origin's status.
pub fn prepend_status(origin_status: u16) -> PrependOutcome {
    match origin_status {
        200 => PrependOutcome::Prepend,
        500.. => PrependOutcome::PassThrough,
        _ => PrependOutcome::ManagedAlone,
    }
}

/// The origin's robots.txt body as it streams to the client: the managed block goes out before
/// the first chunk, and up to [`MAX_ROBOTS_BYTES`] are copied aside to be parsed at the end.
#[derive(Debug, Default)]
pub struct RobotsBody {
    prefix: Option<bytes::Bytes>,
    seen: Vec<u8>,
}

impl RobotsBody {
    /// A body that starts with `managed` (or nothing, for pass-through).
    pub fn new(managed: Option<String>) -> RobotsBody {
        RobotsBody {
            prefix: managed.filter(|m| !m.is_empty()).map(bytes::Bytes::from),
            seen: Vec::new(),
        }
    }

    /// The managed block, taken out (for an origin without a file, answered alone).
    pub fn take_prefix(&mut self) -> bytes::Bytes {
        self.prefix.take().unwrap_or_default()
    }

    /// The bytes the managed block adds to the origin's `Content-Length`.
    pub fn added_len(&self) -> usize {
        self.prefix.as_ref().map_or(0, bytes::Bytes::len)
    }

    /// One chunk of the origin's body (`None`: none this time); returns what goes to the client.
    pub fn chunk(&mut self, chunk: Option<bytes::Bytes>) -> Option<bytes::Bytes> {
        if let Some(c) = &chunk {
            let room = MAX_ROBOTS_BYTES.saturating_sub(self.seen.len());
            self.seen.extend_from_slice(&c[..c.len().min(room)]);
        }
        match (self.prefix.take(), chunk) {
            (None, chunk) => chunk,
            (Some(p), None) => Some(p),
            (Some(p), Some(c)) => {
                let mut joined = Vec::with_capacity(p.len() + c.len());
                joined.extend_from_slice(&p);
                joined.extend_from_slice(&c);
                Some(joined.into())
            }
        }
    }

    /// The origin's file, parsed, once its body has ended.
    pub fn finish(self) -> RobotsTxt {
        RobotsTxt::parse(&self.seen)
    }
}

// === In the pipeline ===

/// What the edge does with a request for `/robots.txt` on a zone that manages it or reads it.
pub enum RobotsRequest {
    /// `replace`: answered with the managed block alone, without the origin.
    Answer(String),
    /// Asked of the origin, its answer read (and, in `prepend`, put after the managed block):
    /// the request's state until the body ends.
    Read(Box<RobotsBody>),
}

/// Step 6b of the pipeline: `req` for `/robots.txt` (`GET` or `HEAD`) on `zone` of `policy`
/// (its known bots name the managed block's crawlers; when it identifies bots, violations are
/// counted against the origin's file, so the file is read). `None` for every other request.
pub fn request(
    req: &pingora::http::RequestHeader,
    zone: &signpost_policy::Zone,
    policy: &signpost_policy::CompiledPolicy,
) -> Option<RobotsRequest> {
    if !is_robots_path(req.uri.path())
        || !(req.method == http::Method::GET || req.method == http::Method::HEAD)
    {
        return None;
    }
    let crawlers: Vec<KnownCrawler<'_>> = policy
        .bot_catalog()
        .map(|c| c.bots().iter().map(|b| (&**b).into()).collect())
        .unwrap_or_default();
    match plan(&zone.robots, zone.crawl.as_ref(), &crawlers) {
        RobotsPlan::Replace { managed } => Some(RobotsRequest::Answer(managed)),
        RobotsPlan::Prepend { managed } => Some(RobotsRequest::Read(Box::new(RobotsBody::new(
            Some(managed),
        )))),
        RobotsPlan::PassThrough => policy
            .identifies()
            .then(|| RobotsRequest::Read(Box::new(RobotsBody::new(None)))),
    }
}

/// A known crawler's (`bot`) request to `path` on `zone`, which the zone's robots.txt (as last
/// read, in `store`) disallows for it: counted, and returned for the access line. It is not
/// refused for it (robots.txt is a request to crawlers; crawl control is the rule the edge
/// enforces).
pub fn violation(
    store: &RobotsStore,
    metrics: &crate::crawl::metrics::CrawlMetrics,
    zone: &str,
    bot: &signpost_policy::Bot,
    path: &str,
) -> Option<Box<Violation>> {
    if is_robots_path(path) {
        return None;
    }
    store
        .check(metrics, zone, &bot.name, &bot.robots_token, path)
        .map(Box::new)
}

/// The head of a robots.txt the edge answers itself: `200 text/plain`, `len` bytes, `ray` its
/// `cf-ray`.
fn managed_head(ray: http::HeaderValue, len: usize) -> pingora::Result<ResponseHeader> {
    let mut head = ResponseHeader::build(200, Some(4))?;
    head.insert_header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")?;
    head.insert_header(http::header::CONTENT_LENGTH, len.to_string())?;
    head.insert_header(&crate::request::ray::CF_RAY, ray)?;
    Ok(head)
}

/// Answers `/robots.txt` with the managed block alone (`replace`).
pub async fn write_managed(
    session: &mut pingora::proxy::Session,
    ray: http::HeaderValue,
    managed: String,
) -> pingora::Result<()> {
    let head = managed_head(ray, managed.len())?;
    let head_only = session.req_header().method == http::Method::HEAD;
    session
        .write_response_header(Box::new(head), head_only)
        .await?;
    if !head_only {
        session
            .write_response_body(Some(bytes::Bytes::from(managed)), true)
            .await?;
    }
    Ok(())
}

/// The request headers that would keep the origin from sending its whole file as is: the edge
/// reads it, and in `prepend` changes it, so it asks for all of it, uncompressed.
pub const UNWANTED_REQUEST_HEADERS: [http::header::HeaderName; 5] = [
    http::header::ACCEPT_ENCODING,
    http::header::RANGE,
    http::header::IF_RANGE,
    http::header::IF_NONE_MATCH,
    http::header::IF_MODIFIED_SINCE,
];

/// The origin's answer to `/robots.txt`, for a request the edge reads it for (`reading`, the
/// request's state, left `None` when the file is not read after all; `ray`: its `cf-ray`).
/// Returns the answer the edge gives in its place, if any (the managed block alone, when
/// `prepend` meets an origin without a file). Otherwise the body goes through
/// [`RobotsBody::chunk`], or, when it cannot be read (not a 200, compressed all the same),
/// passes untouched and unread.
pub fn response_filter(
    response: &mut ResponseHeader,
    reading: &mut Option<Box<RobotsBody>>,
    ray: http::HeaderValue,
) -> pingora::Result<Option<crate::origin::errors::Reshaped>> {
    let Some(robots) = reading.as_deref_mut() else {
        return Ok(None);
    };
    let status = response.status.as_u16();
    let encoded = response
        .headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let prepending = robots.added_len() > 0;
    let outcome = if prepending {
        prepend_status(status)
    } else if status == 200 {
        PrependOutcome::Prepend
    } else {
        PrependOutcome::PassThrough
    };
    match outcome {
        PrependOutcome::PassThrough => {
            *reading = None;
            Ok(None)
        }
        PrependOutcome::Prepend if encoded => {
            // Text cannot go before a compressed body, and it cannot be read: the origin's
            // file passes as it is.
            *reading = None;
            Ok(None)
        }
        PrependOutcome::Prepend => {
            if prepending {
                let added = robots.added_len();
                if let Some(len) = response
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<usize>().ok())
                {
                    response
                        .insert_header(http::header::CONTENT_LENGTH, (len + added).to_string())?;
                }
                // The origin's validators describe the origin's file, not this one.
                response.remove_header(&http::header::ETAG);
                response.remove_header(&http::header::LAST_MODIFIED);
            }
            Ok(None)
        }
        PrependOutcome::ManagedAlone => {
            let managed = robots.take_prefix();
            *reading = None;
            let head = managed_head(ray, managed.len())?;
            Ok(Some(crate::origin::errors::Reshaped {
                head,
                body: managed,
            }))
        }
    }
}

/// The origin's file has been read to its end: parse it and keep it in `store` as `zone`'s.
pub fn keep_origin_file(robots: RobotsBody, store: &RobotsStore, zone: &Arc<str>) {
    let file = robots.finish();
    tracing::debug!(zone = %zone, rules = file.rule_count(), "robots.txt read from the origin");
    store.update(zone, file);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use signpost_policy::Behaviors;

    use super::*;

    const FILE: &str = "\
# comment
User-agent: GPTBot
User-agent: CCBot
Disallow: /private/
Allow: /private/open
Disalow: /typo

User-agent: *
Disallow: /admin
Disallow: /*.pdf$
Allow: /admin/help

user-agent: Googlebot/2.1
Disallow: /nogoogle
Disallow:
";

    fn disallowed(file: &RobotsTxt, token: &str, path: &str) -> Option<(u32, String)> {
        file.is_disallowed(token, path)
            .map(|r| (r.line, r.directive()))
    }

    #[test]
    fn violations_name_the_rule_line() {
        let file = RobotsTxt::parse(FILE.as_bytes());
        assert_eq!(file.rule_count(), 7);
        assert_eq!(
            disallowed(&file, "GPTBot", "/private/x"),
            Some((4, "Disallow: /private/".into()))
        );
        assert_eq!(
            disallowed(&file, "gptbot", "/private/open/a"),
            None,
            "longer allow wins"
        );
        assert_eq!(
            disallowed(&file, "CCBot", "/typo/x"),
            Some((6, "Disallow: /typo".into())),
            "the parser accepts `disalow`"
        );
        // A named group replaces the `*` group entirely.
        assert_eq!(disallowed(&file, "GPTBot", "/admin"), None);
        assert_eq!(
            disallowed(&file, "Bingbot", "/admin/x"),
            Some((9, "Disallow: /admin".into()))
        );
        assert_eq!(disallowed(&file, "Bingbot", "/admin/help"), None);
        assert_eq!(
            disallowed(&file, "Bingbot", "/doc.pdf"),
            Some((10, "Disallow: /*.pdf$".into()))
        );
        assert_eq!(
            disallowed(&file, "Bingbot", "/doc.pdf?x=1"),
            None,
            "`$` anchors the end"
        );
        // `Googlebot/2.1` in the file is the token `googlebot`; an empty Disallow matches nothing.
        assert_eq!(
            disallowed(&file, "Googlebot", "/nogoogle"),
            Some((14, "Disallow: /nogoogle".into()))
        );
        assert_eq!(disallowed(&file, "Googlebot", "/admin"), None);
        assert_eq!(disallowed(&RobotsTxt::parse(b""), "GPTBot", "/"), None);
    }

    #[test]
    fn equal_length_allow_wins_and_rules_before_any_group_are_ignored() {
        let file = RobotsTxt::parse(b"Disallow: /\nUser-agent: *\nDisallow: /a\nAllow: /a\n");
        assert_eq!(disallowed(&file, "X", "/a"), None);
        assert_eq!(disallowed(&file, "X", "/b"), None);
    }

    #[test]
    fn bounds_hold() {
        let mut big = String::from("User-agent: *\n");
        for i in 0..(MAX_RULES + 10) {
            big.push_str(&format!("Disallow: /r{i}\n"));
        }
        let file = RobotsTxt::parse(big.as_bytes());
        assert_eq!(file.rule_count(), MAX_RULES);
        // Past 500 KiB nothing is parsed.
        let mut padded = vec![b'#'; MAX_ROBOTS_BYTES];
        padded.extend_from_slice(b"\nUser-agent: *\nDisallow: /\n");
        assert_eq!(RobotsTxt::parse(&padded).rule_count(), 0);
        // A line of many multi-byte characters (the parser's own limit would split one).
        let long = format!(
            "User-agent: *\nDisallow: /{}\nDisallow: /x\n",
            "é".repeat(20_000)
        );
        let file = RobotsTxt::parse(long.as_bytes());
        assert_eq!(
            disallowed(&file, "A", "/x"),
            Some((3, "Disallow: /x".into()))
        );
    }

    #[test]
    fn the_store_keeps_one_file_per_zone() {
        let store = RobotsStore::default();
        let zone: Arc<str> = Arc::from("www");
        assert_eq!(store.is_disallowed("www", "GPTBot", "/private/"), None);
        store.update(&zone, RobotsTxt::parse(FILE.as_bytes()));
        assert_eq!(
            store
                .is_disallowed("www", "GPTBot", "/private/")
                .map(|v| v.line),
            Some(4)
        );
        assert_eq!(store.is_disallowed("other", "GPTBot", "/private/"), None);
        let metrics = crate::metrics::Metrics::new();
        assert!(
            store
                .check(
                    &metrics.crawl,
                    "www",
                    &Arc::from("GPTBot"),
                    "GPTBot",
                    "/private/"
                )
                .is_some()
        );
        assert!(
            store
                .check(
                    &metrics.crawl,
                    "www",
                    &Arc::from("GPTBot"),
                    "GPTBot",
                    "/open"
                )
                .is_none()
        );
        assert!(
            store
                .check(
                    &metrics.crawl,
                    "www",
                    &Arc::from("OtherBot"),
                    "GPTBot",
                    "/private/x"
                )
                .is_some()
        );
        let text = metrics.encode();
        assert!(
            text.contains("signpost_robots_violations_total{crawler=\"GPTBot\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("signpost_robots_violations_total{crawler=\"OtherBot\"} 1"),
            "{text}"
        );
        store.retain_zones(&[Arc::from("other")]);
        assert_eq!(store.is_disallowed("www", "GPTBot", "/private/"), None);
    }

    #[test]
    fn prepend_streams_the_block_first_and_parses_the_origin_file() {
        let mut body = RobotsBody::new(Some("User-agent: GPTBot\nDisallow: /\n\n".into()));
        assert_eq!(body.added_len(), 32);
        let mut out = Vec::new();
        for chunk in [None, Some("User-agent: *\n"), Some("Disallow: /x\n")] {
            if let Some(b) = body.chunk(chunk.map(|c| bytes::Bytes::from(c.to_owned()))) {
                out.extend_from_slice(&b);
            }
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "User-agent: GPTBot\nDisallow: /\n\nUser-agent: *\nDisallow: /x\n"
        );
        // Only the origin's own file is kept for violations: the managed block is the edge's.
        let file = body.finish();
        assert_eq!(
            disallowed(&file, "GPTBot", "/x"),
            Some((2, "Disallow: /x".into()))
        );
        assert_eq!(disallowed(&file, "GPTBot", "/y"), None);
        // An empty origin body still gets the block.
        let mut body = RobotsBody::new(Some("X\n".into()));
        assert_eq!(body.chunk(None).as_deref(), Some(&b"X\n"[..]));
    }

    #[test]
    fn plans_and_statuses() {
        let crawl = signpost_policy::CrawlConfig {
            training: signpost_policy::CrawlAction::Block,
            ..Default::default()
        };
        let bots = [KnownCrawler {
            name: "GPTBot",
            robots_token: "GPTBot",
            behaviors: Behaviors::TRAINING,
        }];
        assert_eq!(
            plan(&RobotsConfig::default(), Some(&crawl), &bots),
            RobotsPlan::PassThrough
        );
        let replace = RobotsConfig {
            mode: RobotsMode::Replace,
            ..RobotsConfig::default()
        };
        assert_eq!(
            plan(&replace, Some(&crawl), &bots),
            RobotsPlan::Replace {
                managed: "\nUser-agent: GPTBot\nDisallow: /\n\n".into()
            }
        );
        assert_eq!(prepend_status(200), PrependOutcome::Prepend);
        assert_eq!(prepend_status(404), PrependOutcome::ManagedAlone);
        assert_eq!(prepend_status(301), PrependOutcome::ManagedAlone);
        assert_eq!(prepend_status(503), PrependOutcome::PassThrough);
        assert!(is_robots_path("/robots.txt") && !is_robots_path("/robots.txt/x"));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_and_match_without_panic(
            body in proptest::collection::vec(any::<u8>(), 0..512),
            path in "\\PC{0,64}",
        ) {
            let file = RobotsTxt::parse(&body);
            let _ = file.is_disallowed("GPTBot", &path);
            let _ = file.is_disallowed("*", &path);
        }

        #[test]
        fn structured_files_parse_and_match_without_panic(
            lines in proptest::collection::vec("(User-agent|Disallow|Allow|Disalow|Sitemap)?[: \\t]{0,2}[a-zA-Z*/$é%.\\r]{0,12}", 0..24),
            path in "/[a-z/*.$é]{0,24}",
        ) {
            let file = RobotsTxt::parse(lines.join("\n").as_bytes());
            if let Some(rule) = file.is_disallowed("a", &path) {
                prop_assert!(!rule.allow);
            }
        }
    }
}
