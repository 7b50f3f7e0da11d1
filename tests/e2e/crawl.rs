//! Crawl control through the binary: crawlers known to the policy (verified by a real Web Bot
//! Auth signature against a real HTTPS key directory, or by their address) allowed, blocked and
//! charged; every step of pay per crawl's exchange read off the wire with its `crawler-error`;
//! the ledger read back and compared with what the clients received, also after `kill -9` in the
//! middle of charged traffic; robots.txt prepended, replaced and passed through, with its
//! violations counted.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::signing::*;
use crate::support::*;

/// The origin's robots.txt (for the hosts that have one).
const ORIGIN_ROBOTS: &str = "User-agent: *\nDisallow: /private/\n";

/// An origin for crawl tests: `/robots.txt` (none on `docs.example.com`), `/priced` with its own
/// `crawler-price: USD 0.05`, `/badprice` with a price that is no price, `?status=NNN`, and a
/// JSON echo of the request for everything else. Counts what it received per path.
struct CrawlOrigin {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    robots_asked: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
}

impl CrawlOrigin {
    fn start() -> CrawlOrigin {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = server.server_addr().to_ip().unwrap();
        let robots_asked = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(AtomicUsize::new(0));
        let (worker, robots, all) = (server.clone(), robots_asked.clone(), asked.clone());
        std::thread::spawn(move || {
            for request in worker.incoming_requests() {
                all.fetch_add(1, Ordering::SeqCst);
                let robots = robots.clone();
                std::thread::spawn(move || respond(request, &robots));
            }
        });
        CrawlOrigin {
            addr,
            server,
            robots_asked,
            asked,
        }
    }
}

fn respond(request: tiny_http::Request, robots_asked: &AtomicUsize) {
    let url = request.url().to_string();
    let lines = header_lines(&request);
    let host = lines
        .iter()
        .find(|(n, _)| n == "host")
        .map_or("", |(_, v)| v.as_str())
        .to_string();
    let header = |text: &str| text.parse::<tiny_http::Header>().unwrap();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    if path == "/robots.txt" {
        robots_asked.fetch_add(1, Ordering::SeqCst);
        let response = if host.starts_with("docs.") {
            tiny_http::Response::from_string("no such file").with_status_code(404)
        } else {
            tiny_http::Response::from_string(ORIGIN_ROBOTS)
                .with_header(header("content-type: text/plain"))
                .with_header(header("etag: \"origin-robots\""))
        };
        let _ = request.respond(response);
        return;
    }
    let status = query
        .strip_prefix("status=")
        .and_then(|s| s.parse().ok())
        .unwrap_or(200u16);
    let headers: serde_json::Map<String, serde_json::Value> = lines
        .iter()
        .map(|(n, v)| (n.clone(), v.as_str().into()))
        .collect();
    let echo = serde_json::json!({"path": url, "headers": headers});
    let mut response = tiny_http::Response::from_string(echo.to_string())
        .with_status_code(status)
        .with_header(header("content-type: application/json"));
    match path {
        "/priced" => response = response.with_header(header("crawler-price: USD 0.05")),
        "/badprice" => response = response.with_header(header("crawler-price: five dollars")),
        _ => {}
    }
    let _ = request.respond(response);
}

impl Drop for CrawlOrigin {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// The policy: four zones on one origin, the bots, and the ledger in `ledger`.
fn crawl_policy(
    listen: SocketAddr,
    admin: SocketAddr,
    origin: SocketAddr,
    directory: &str,
    cert: &Path,
    ledger: &Path,
) -> String {
    format!(
        r#"listen = ["{listen}"]
admin = "{admin}"

[bots]
allow_private_fetch = true
trusted_roots = [{cert:?}]

[ledger]
dir = {ledger:?}

[[bot]]
name = "PayBot"
operator = "Tests"
category = "AI Crawler"
behaviors = ["training"]
user_agent = "PayBot"
robots_token = "PayBot"
web_bot_auth = ["{directory}"]

[[bot]]
name = "TrainBot"
operator = "Tests"
category = "AI Crawler"
behaviors = ["training"]
user_agent = "TrainBot"
robots_token = "TrainBot"
ip_ranges = ["127.0.0.0/8"]

[[bot]]
name = "SearchBot"
operator = "Tests"
category = "Search Engine Crawler"
behaviors = ["search"]
user_agent = "SearchBot"
robots_token = "SearchBot"
ip_ranges = ["127.0.0.0/8"]

[[bot]]
name = "AgentBot"
operator = "Tests"
category = "AI Assistant"
behaviors = ["agent"]
user_agent = "AgentBot"
robots_token = "AgentBot"
ip_ranges = ["127.0.0.0/8"]

[[bot]]
name = "FarBot"
operator = "Tests"
category = "Search Engine Crawler"
behaviors = ["search"]
user_agent = "FarBot"
robots_token = "FarBot"
ip_ranges = ["192.0.2.0/24"]

[[zone]]
name = "main"
hosts = ["example.com"]
origin = "{origin}"

[zone.crawl]
search = "allow"
agent = "block"
training = "charge"
price = "USD 0.01"
block_status = 402
message = "Content licensing: write to licensing@example.com <for terms & prices>."
free_paths = ["/free/*"]

[zone.robots]
mode = "prepend"
search = "yes"
ai_input = "yes"
ai_train = "no"

[[zone]]
name = "strict"
hosts = ["www.example.com"]
origin = "{origin}"

[zone.crawl]
agent = "block"
training = "block"

[zone.robots]
mode = "replace"
ai_train = "no"

[[zone]]
name = "docs"
hosts = ["docs.example.com"]
origin = "{origin}"

[zone.crawl]
training = "block"

[zone.robots]
mode = "prepend"

[[zone]]
name = "plain"
hosts = ["plain.test"]
origin = "{origin}"
"#
    )
}

struct Setup {
    origin: CrawlOrigin,
    directory: Directory,
    payer: Signer,
    edge: Edge,
    client: reqwest::blocking::Client,
    _certs: Scratch,
}

fn setup(name: &str, ledger: &Path) -> Setup {
    let certs = Scratch::new(&format!("{name}-certs"));
    let directory = Directory::start(&certs);
    let payer = Signer::new(&directory.origin());
    directory.publish(&[&payer]);
    let origin = CrawlOrigin::start();
    let cert = certs.0.join("directory-cert.pem");
    let (o, d) = (origin.addr, directory.origin());
    let edge = Edge::start(name, |l, a| crawl_policy(l, a, o, &d, &cert, ledger), &[]);
    let client = client(&edge);
    let setup = Setup {
        origin,
        directory,
        payer,
        edge,
        client,
        _certs: certs,
    };
    setup.wait_for_directory();
    setup
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn ray(&self) -> String {
        self.header("cf-ray").unwrap().to_string()
    }
}

impl Setup {
    fn authority(&self) -> String {
        format!("example.com:{}", self.edge.addr.port())
    }

    fn send(
        &self,
        host: &str,
        path: &str,
        user_agent: &str,
        accept: &str,
        headers: &[(String, String)],
    ) -> Answer {
        let mut req = self
            .client
            .get(format!("http://{host}:{}{path}", self.edge.addr.port()))
            .header("user-agent", user_agent)
            .header("accept", accept);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let resp = req.send().unwrap();
        Answer {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.text().unwrap(),
        }
    }

    /// A request of PayBot, signed, covering (and sending) `price_headers`.
    fn paybot(&self, path: &str, price_headers: &[(&str, &str)]) -> Answer {
        let headers = self
            .payer
            .headers_covering(&self.authority(), price_headers);
        self.send(
            "example.com",
            path,
            "Mozilla/5.0 (compatible; PayBot/1.0)",
            "application/json",
            &headers,
        )
    }

    /// The key directory is fetched in the background: PayBot is unverified until then.
    fn wait_for_directory(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let a = self.paybot("/free/probe", &[]);
            let echo = (a.status == 200).then(|| a.json());
            let told = echo
                .as_ref()
                .and_then(|e| e["headers"]["signpost-bot"].as_str())
                .unwrap_or("");
            if told.contains("signature=verified") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the directory at {} was not fetched in time: {} {}",
                self.directory.origin(),
                a.status,
                a.body
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Every record of the ledger in `dir`, rotated files first.
fn ledger_records(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort_by_key(|p| (p.file_name().unwrap() == "ledger.jsonl", p.clone()));
    files
        .iter()
        .flat_map(|f| {
            // A line the writer has not finished yet (no newline) is not a record yet.
            let text = std::fs::read_to_string(f).unwrap();
            let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
            complete
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn problem_of(a: &Answer) -> serde_json::Value {
    let content_type = a.header("content-type").unwrap_or("");
    assert!(
        content_type.starts_with("application/") && content_type.contains("json"),
        "{content_type}: {}",
        a.body
    );
    a.json()
}

#[test]
fn crawlers_are_allowed_blocked_and_charged_with_cloudflares_headers() {
    let ledger = Scratch::new("crawl-ledger");
    let s = setup("crawl", &ledger.0);

    // Allowed: a verified search crawler. The origin learns that pay per crawl does not concern
    // the request, whatever the client claimed.
    let forged = [(
        "cf-pay-per-crawl".to_string(),
        "protocol=cloudflare, pricing=in-band".to_string(),
    )];
    let a = s.send(
        "example.com",
        "/page",
        "SearchBot/1.0",
        "application/json",
        &forged,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["path"], "/page");
    assert_eq!(
        a.json()["headers"]["cf-pay-per-crawl"],
        "protocol=cloudflare, pricing=bypass"
    );
    assert!(a.header("crawler-error").is_none());

    // Blocked with 402 and the operator's licensing message, in each format; no crawler-error
    // (the message says why) and no price (a block is not for sale).
    let message = "Content licensing: write to licensing@example.com <for terms & prices>.";
    let a = s.send(
        "example.com",
        "/page",
        "AgentBot/2",
        "application/json",
        &[],
    );
    assert_eq!(a.status, 402, "{}", a.body);
    let p = problem_of(&a);
    assert_eq!(p["error_code"], 1020);
    assert_eq!(p["status"], 402);
    assert_eq!(p["detail"], message);
    assert_eq!(p["retryable"], false);
    assert_eq!(
        p["ray_id"].as_str().unwrap(),
        a.ray().split('-').next().unwrap()
    );
    assert!(a.header("crawler-error").is_none());
    assert!(a.header("crawler-price").is_none());
    let a = s.send("example.com", "/page", "AgentBot/2", "text/markdown", &[]);
    assert_eq!(a.status, 402);
    let (meta, prose) = frontmatter(&a.body);
    assert_eq!(meta["error_code"].as_u64(), Some(1020));
    assert_eq!(meta["status"].as_u64(), Some(402));
    assert!(prose.contains("licensing@example.com"), "{prose}");
    let a = s.send("example.com", "/page", "AgentBot/2", "text/html", &[]);
    assert_eq!(a.status, 402);
    let page = scraper::Html::parse_document(&a.body);
    let text: String = page.root_element().text().collect();
    assert!(text.contains(message), "{}", a.body);
    assert!(
        !a.body.contains("<for terms"),
        "the message is escaped in HTML"
    );

    // Blocked with 403 in a zone that says so; the same in Markdown.
    let a = s.send(
        "www.example.com",
        "/x",
        "AgentBot/2",
        "application/json",
        &[],
    );
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(problem_of(&a)["error_code"], 1020);
    let a = s.send("www.example.com", "/x", "TrainBot", "text/markdown", &[]);
    assert_eq!(a.status, 403);
    assert_eq!(frontmatter(&a.body).0["status"].as_u64(), Some(403));

    // An impostor (claims FarBot from an address FarBot never uses) is refused.
    let a = s.send("example.com", "/page", "FarBot/1", "application/json", &[]);
    assert_eq!(a.status, 402);
    assert_eq!(problem_of(&a)["error_code"], 1020);

    // A blocked crawler cannot pay its way in: CrawlerForbidden, 403.
    let offer = [("crawler-max-price".to_string(), "USD 10.00".to_string())];
    let a = s.send(
        "example.com",
        "/page",
        "AgentBot/2",
        "application/json",
        &offer,
    );
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("CrawlerForbidden"));
    assert_eq!(problem_of(&a)["error_code"], 1020);

    // --- The charge exchange, for PayBot (training: charge) ---
    let mut charged: BTreeMap<String, (String, u64)> = BTreeMap::new();
    let mut keep = |a: &Answer, path: &str, cents: u64| {
        assert_eq!(a.status, 200, "{}", a.body);
        charged.insert(a.ray(), (path.to_string(), cents));
    };

    // No payment intent: 402 with the price, and an answer an agent can act on.
    let a = s.paybot("/article", &[]);
    assert_eq!(a.status, 402, "{}", a.body);
    assert_eq!(a.header("crawler-price"), Some("USD 0.01"));
    assert_eq!(a.header("crawler-error"), Some("MissingCrawlerPrice"));
    let p = problem_of(&a);
    assert_eq!(p["error_code"], 402);
    assert!(p["detail"].as_str().unwrap().contains("USD 0.01"), "{p}");
    let before = s.origin_asked_total();
    // The exact price, signed: the origin's page, charged.
    let a = s.paybot("/article", &[("crawler-exact-price", "USD 0.01")]);
    assert_eq!(a.header("crawler-charged"), Some("USD 0.01"), "{}", a.body);
    assert_eq!(a.json()["path"], "/article");
    assert_eq!(
        a.json()["headers"]["cf-pay-per-crawl"],
        "protocol=cloudflare, pricing=in-band"
    );
    keep(&a, "/article", 1);
    // A maximum above the price: charged the price.
    let a = s.paybot("/article?page=2", &[("crawler-max-price", "USD 0.50")]);
    assert_eq!(a.header("crawler-charged"), Some("USD 0.01"));
    keep(&a, "/article?page=2", 1);
    // A maximum below the price (the origin is asked, nothing is charged).
    let a = s.paybot("/article", &[("crawler-max-price", "USD 0.00")]);
    assert_eq!(a.status, 402, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("InvalidCrawlerMaxPrice"));
    assert_eq!(a.header("crawler-price"), Some("USD 0.01"));
    assert!(a.header("crawler-charged").is_none());
    assert_eq!(problem_of(&a)["error_code"], 402);
    // An exact price that is not the price.
    let a = s.paybot("/article", &[("crawler-exact-price", "USD 0.02")]);
    assert_eq!(a.status, 402);
    assert_eq!(a.header("crawler-error"), Some("InvalidCrawlerExactPrice"));
    // Both headers at once.
    let a = s.paybot(
        "/article",
        &[
            ("crawler-exact-price", "USD 0.01"),
            ("crawler-max-price", "USD 0.01"),
        ],
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("ConflictingPriceHeaders"));
    assert_eq!(problem_of(&a)["error_code"], 400);
    // A price that is no price.
    let a = s.paybot("/article", &[("crawler-exact-price", "USD 0.001")]);
    assert_eq!(a.status, 400);
    assert_eq!(a.header("crawler-error"), Some("InvalidCrawlerPriceValue"));
    // A price header the signature does not cover.
    let mut uncovered = s.payer.headers_covering(&s.authority(), &[]);
    uncovered.push(("crawler-exact-price".into(), "USD 0.01".into()));
    let a = s.send(
        "example.com",
        "/article",
        "PayBot",
        "application/json",
        &uncovered,
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("StrongAuthRequired"));
    // A price header with no signature at all (TrainBot is verified by its address).
    let unsigned = [("crawler-exact-price".to_string(), "USD 0.01".to_string())];
    let a = s.send(
        "example.com",
        "/article",
        "TrainBot",
        "application/json",
        &unsigned,
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("StrongAuthRequired"));
    // A signature that does not verify.
    let mut forged = s
        .payer
        .headers_covering(&s.authority(), &[("crawler-exact-price", "USD 0.01")]);
    for (name, value) in &mut forged {
        if name == "signature" {
            *value = "sig1=:AAAA:".into();
        }
    }
    let a = s.send(
        "example.com",
        "/article",
        "TrainBot",
        "application/json",
        &forged,
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("InvalidSignature"));
    // The origin's own price: an exact offer of the zone's price is not enough...
    let a = s.paybot("/priced", &[("crawler-exact-price", "USD 0.01")]);
    assert_eq!(a.status, 402);
    assert_eq!(a.header("crawler-error"), Some("InvalidCrawlerExactPrice"));
    assert_eq!(a.header("crawler-price"), Some("USD 0.05"));
    // ... a maximum that reaches it pays it.
    let a = s.paybot("/priced", &[("crawler-max-price", "USD 0.10")]);
    assert_eq!(a.header("crawler-charged"), Some("USD 0.05"));
    assert!(
        a.header("crawler-price").is_none(),
        "the origin's price reaches the client only on the edge's 402s"
    );
    keep(&a, "/priced", 5);
    // An origin price that is no price: 502, nothing charged.
    let a = s.paybot("/badprice", &[("crawler-max-price", "USD 0.10")]);
    assert_eq!(a.status, 502, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("InvalidContentPrice"));
    // Only successes are charged: the origin's 404 passes, uncharged.
    let a = s.paybot("/gone?status=404", &[("crawler-exact-price", "USD 0.01")]);
    assert_eq!(a.status, 404);
    assert!(a.header("crawler-charged").is_none());
    // Free paths: the zone's, and those that are always free.
    let a = s.paybot("/free/guide", &[]);
    assert_eq!(a.status, 200);
    assert!(a.header("crawler-charged").is_none());
    let a = s.paybot("/robots.txt", &[]);
    assert_eq!(a.status, 200);
    assert!(a.body.contains("Disallow: /private/"), "{}", a.body);
    // The exchanges refused before the origin never reached it: 5 were forwarded
    // (max below, exact wrong, origin price twice, bad price, 404) plus the 3 charged, the
    // free path and robots.txt.
    assert_eq!(s.origin_asked_total() - before, 10);

    // The ledger holds exactly the charged responses, with who, what and how much.
    let records = ledger_records(&ledger.0);
    let in_ledger: BTreeMap<String, (String, u64)> = records
        .iter()
        .map(|r| {
            assert_eq!(r["zone"], "main");
            assert_eq!(r["crawler"], "PayBot");
            assert_eq!(r["directory"], s.directory.origin());
            assert_eq!(r["key_id"], s.payer.keyid());
            assert_eq!(r["currency"], "USD");
            (
                r["ray_id"].as_str().unwrap().to_string(),
                (
                    r["path"].as_str().unwrap().to_string(),
                    r["price_cents"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let received: BTreeMap<String, (String, u64)> = charged
        .iter()
        .map(|(ray, v)| (ray.split('-').next().unwrap().to_string(), v.clone()))
        .collect();
    assert_eq!(in_ledger, received);

    // The sums per crawler, and requests by crawler, behavior and action.
    let (_, metrics) = admin_get(&s.edge, "/metrics");
    assert_eq!(
        metric(
            &metrics,
            "signpost_crawler_charged_cents_total",
            &[("crawler", "PayBot")]
        ),
        Some(7.0),
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "signpost_crawl_requests_total",
            &[
                ("zone", "main"),
                ("crawler", "AgentBot"),
                ("behavior", "agent"),
                ("action", "block"),
                ("outcome", "refused")
            ]
        )
        .unwrap_or(0.0)
            >= 4.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "signpost_crawl_requests_total",
            &[
                ("zone", "main"),
                ("crawler", "SearchBot"),
                ("behavior", "search"),
                ("action", "allow"),
                ("outcome", "allowed")
            ]
        ),
        Some(1.0),
        "{metrics}"
    );
    // The access log says what crawl control did and what was charged.
    let log = s.edge.log();
    assert!(
        log.lines().any(|l| l.contains("bot=\"PayBot\"")
            && l.contains("crawl=\"charge\"")
            && l.contains("crawl_outcome=\"forwarded\"")
            && l.contains("charged_cents=5")),
        "{log}"
    );
}

impl Setup {
    fn origin_asked_total(&self) -> usize {
        self.origin.asked.load(Ordering::SeqCst)
    }
}

/// A crawler that claims its own name and offers to pay with a signature that does not verify
/// (tampered, expired) is told to fix its signature (`400 InvalidSignature`, the reason in the
/// detail), not to stop as an impostor (`403 CrawlerForbidden`); with no signature at all it is
/// told strong authentication is required. The same tampered claim without a price header is
/// still an impostor, and none of these reaches the origin or is charged. PayBot is verified by
/// its signature only, so each failed signature is a failed claim.
#[test]
fn a_payer_whose_signature_fails_is_told_to_fix_it_not_to_stop() {
    let ledger = Scratch::new("crawl-badsig-ledger");
    let s = setup("crawl-badsig", &ledger.0);
    let before = s.origin_asked_total();
    let offer = [("crawler-exact-price", "USD 0.01")];
    let paybot = |headers: &[(String, String)]| {
        s.send(
            "example.com",
            "/article",
            "Mozilla/5.0 (compatible; PayBot/1.0)",
            "application/json",
            headers,
        )
    };

    // Tampered: one character of the real signature changed.
    let mut tampered = s.payer.headers_covering(&s.authority(), &offer);
    for (name, value) in &mut tampered {
        if name == "signature" {
            let flipped = if value.as_bytes()[6] == b'A' {
                "B"
            } else {
                "A"
            };
            value.replace_range(6..7, flipped);
        }
    }
    let a = paybot(&tampered);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("InvalidSignature"));
    let p = problem_of(&a);
    assert_eq!(p["error_code"], 400);
    assert!(
        p["detail"].as_str().unwrap().contains("does not verify"),
        "{p}"
    );
    assert!(a.header("crawler-charged").is_none());

    // Expired: signed ten minutes ago for five; the detail says so.
    let expired = s
        .payer
        .headers_covering_at(&s.authority(), &offer, now() - 600);
    let a = paybot(&expired);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("InvalidSignature"));
    let detail = problem_of(&a)["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("expired"), "{detail}");

    // A maximum price, tampered: the same.
    let mut tampered_max = s
        .payer
        .headers_covering(&s.authority(), &[("crawler-max-price", "USD 1.00")]);
    for (name, value) in &mut tampered_max {
        if name == "signature" {
            *value = tampered
                .iter()
                .find(|(n, _)| n == "signature")
                .unwrap()
                .1
                .clone();
        }
    }
    let a = paybot(&tampered_max);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("InvalidSignature"));

    // No signature at all: strong authentication is required.
    let a = paybot(&[("crawler-exact-price".into(), "USD 0.01".into())]);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.header("crawler-error"), Some("StrongAuthRequired"));

    // The tampered claim without a price header is an impostor: the zone's block (402, the
    // licensing message, no crawler-error).
    let unpriced: Vec<(String, String)> = tampered
        .iter()
        .filter(|(n, _)| !n.starts_with("crawler-"))
        .cloned()
        .collect();
    let a = paybot(&unpriced);
    assert_eq!(a.status, 402, "{}", a.body);
    assert!(a.header("crawler-error").is_none());
    assert_eq!(problem_of(&a)["error_code"], 1020);

    // The signature as signed still pays: the failures above were the signatures'.
    let a = s.paybot("/article", &offer);
    assert_eq!(a.header("crawler-charged"), Some("USD 0.01"), "{}", a.body);
    assert_eq!(
        s.origin_asked_total() - before,
        1,
        "only the paid request reached the origin"
    );
    let records = ledger_records(&ledger.0);
    assert_eq!(records.len(), 1, "{records:?}");
}

#[test]
fn robots_txt_is_prepended_replaced_or_passed_through_and_violations_counted() {
    let ledger = Scratch::new("robots-ledger");
    let s = setup("robots", &ledger.0);

    // prepend: the managed block (content signals, then a group per blocked crawler), then the
    // origin's file; its length is right (the client reads exactly the body) and the origin's
    // validator is gone (it described the origin's file).
    let a = s.send("example.com", "/robots.txt", "curl/8", "*/*", &[]);
    assert_eq!(a.status, 200);
    assert!(a.header("etag").is_none());
    let (managed, origin) = a
        .body
        .split_at(a.body.find("User-agent: *\nDisallow").unwrap());
    assert_eq!(origin, ORIGIN_ROBOTS);
    assert!(
        managed.contains(
            "\nUser-agent: *\nContent-Signal: search=yes, ai-input=yes, ai-train=no\nAllow: /\n"
        ),
        "{managed}"
    );
    assert!(
        managed.contains("\nUser-agent: AgentBot\nDisallow: /\n"),
        "{managed}"
    );
    assert!(
        !managed.contains("PayBot"),
        "charged crawlers may crawl, and pay"
    );
    assert_eq!(
        a.header("content-length")
            .map(|v| v.parse::<usize>().unwrap()),
        Some(a.body.len())
    );

    // replace: the managed block alone, the origin not asked.
    let asked = s.origin.robots_asked.load(Ordering::SeqCst);
    let a = s.send("www.example.com", "/robots.txt", "curl/8", "*/*", &[]);
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("text/plain; charset=utf-8"));
    assert!(
        a.body.contains("Content-Signal: ai-train=no\n"),
        "{}",
        a.body
    );
    assert!(
        a.body.contains("User-agent: TrainBot\nDisallow: /\n"),
        "{}",
        a.body
    );
    assert!(!a.body.contains("/private/"));
    assert_eq!(s.origin.robots_asked.load(Ordering::SeqCst), asked);
    // ... and a crawler that the zone blocks still reads it.
    let a = s.send("www.example.com", "/robots.txt", "TrainBot", "*/*", &[]);
    assert_eq!(a.status, 200);

    // prepend on an origin without a file: the managed block alone, 200.
    let a = s.send("docs.example.com", "/robots.txt", "curl/8", "*/*", &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.body.contains("User-agent: TrainBot\nDisallow: /\n"),
        "{}",
        a.body
    );
    assert!(!a.body.contains("no such file"));

    // off: the origin's file as it is; once read, a known crawler's request to a path it
    // disallows is counted and logged (and not refused).
    let a = s.send("plain.test", "/robots.txt", "curl/8", "*/*", &[]);
    assert_eq!(a.body, ORIGIN_ROBOTS);
    assert_eq!(a.header("etag"), Some("\"origin-robots\""));
    let a = s.send(
        "plain.test",
        "/private/report",
        "SearchBot/1",
        "application/json",
        &[],
    );
    assert_eq!(a.status, 200);
    let a = s.send(
        "plain.test",
        "/public",
        "SearchBot/1",
        "application/json",
        &[],
    );
    assert_eq!(a.status, 200);
    let (_, metrics) = admin_get(&s.edge, "/metrics");
    assert_eq!(
        metric(
            &metrics,
            "signpost_robots_violations_total",
            &[("crawler", "SearchBot")]
        ),
        Some(1.0),
        "{metrics}"
    );
    let log = s.edge.log();
    assert!(
        log.lines()
            .any(|l| l.contains("/private/report") && l.contains("robots=Disallow:%20/private/")),
        "{log}"
    );
}

#[test]
fn the_ledger_holds_every_charge_a_client_received_after_kill_9() {
    let ledger = Scratch::new("kill-ledger");
    let s = setup("crawl-kill", &ledger.0);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = Arc::new(s);
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut received = Vec::new();
                let mut sent = 0;
                while !stop.load(Ordering::SeqCst) {
                    sent += 1;
                    let headers = s
                        .payer
                        .headers_covering(&s.authority(), &[("crawler-exact-price", "USD 0.01")]);
                    let mut req = s
                        .client
                        .get(format!(
                            "http://example.com:{}/w{w}/{sent}",
                            s.edge.addr.port()
                        ))
                        .header("user-agent", "PayBot");
                    for (n, v) in &headers {
                        req = req.header(n, v);
                    }
                    // A response counts as received when its head and whole body arrived.
                    let Ok(resp) = req.send() else { break };
                    let charged = resp.headers().get("crawler-charged").cloned();
                    let ray = resp.headers().get("cf-ray").cloned();
                    if resp.bytes().is_err() {
                        break;
                    }
                    if let (Some(c), Some(r)) = (charged, ray) {
                        assert_eq!(c, "USD 0.01");
                        received.push(r.to_str().unwrap().split('-').next().unwrap().to_string());
                    }
                }
                (received, sent)
            })
        })
        .collect();
    // Let charged traffic run, then kill the edge with no warning.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ledger_records(&ledger.0).len() < 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    s.edge.signal("KILL");
    stop.store(true, Ordering::SeqCst);
    let mut received = BTreeSet::new();
    let mut sent = 0;
    for w in workers {
        let (r, n) = w.join().unwrap();
        sent += n;
        received.extend(r);
    }
    assert!(
        received.len() >= 100,
        "only {} charged responses",
        received.len()
    );
    let records = ledger_records(&ledger.0);
    let rays: Vec<String> = records
        .iter()
        .map(|r| r["ray_id"].as_str().unwrap().to_string())
        .collect();
    let in_ledger: BTreeSet<String> = rays.iter().cloned().collect();
    assert_eq!(in_ledger.len(), rays.len(), "no record is duplicated");
    let lost: Vec<&String> = received.difference(&in_ledger).collect();
    assert!(
        lost.is_empty(),
        "receipts missing from the ledger: {lost:?}"
    );
    // A record whose response had not reached its client when the edge died can only be one
    // of the requests in flight then: at most one per client.
    let unreceived = in_ledger.len() - received.len();
    assert!(
        unreceived <= 4,
        "{unreceived} records without a receipt (sent {sent})"
    );
    drop(s);

    // Restarted on the same directory, the edge appends after what is there: nothing lost,
    // nothing written twice.
    let s = setup("crawl-restart", &ledger.0);
    let mut after = Vec::new();
    for i in 0..3 {
        let a = s.paybot(
            &format!("/after/{i}"),
            &[("crawler-exact-price", "USD 0.01")],
        );
        assert_eq!(a.header("crawler-charged"), Some("USD 0.01"), "{}", a.body);
        after.push(a.ray());
    }
    let now: Vec<String> = ledger_records(&ledger.0)
        .iter()
        .map(|r| r["ray_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        now[..rays.len()],
        rays[..],
        "the records before the crash are kept as they were"
    );
    assert_eq!(now[rays.len()..], after[..]);
}
