//! Bots verified from outside the policy, through the binary: reverse DNS asked of a real
//! dnsmasq, and an address list published on a real HTTPS server. A request never waits for
//! either: the first answer is `pending`, and the verdict arrives on a later request.
//!
//! The clients of the reverse DNS tests have documentation addresses (192.0.2.0/24,
//! 198.51.100.0/24), forwarded by a trusted proxy (`[client_ip]`, the test's loopback socket) in
//! `X-Forwarded-For`. Loopback client addresses cannot stand in for them: the edge's resolver
//! answers every name under `127.in-addr.arpa` itself with `localhost` (RFC 6761), without
//! asking any server, so no DNS server can give them another name.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::dns::{DnsRecord, start_dnsmasq};
use crate::support::*;

/// How long a background check (one DNS lookup, one list fetch on loopback) may take to show.
const SETTLE: Duration = Duration::from_secs(5);

/// The crawler's address: its PTR name resolves back to it.
const CRAWLER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));
/// An address with no PTR record.
const NAMELESS: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 20));
/// An address whose owner wrote the crawler's host name in its reverse zone: the name does not
/// resolve back to it.
const SPOOFED: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));

/// The records of the crawler (`a.crawl.bot.test`, forward-confirmed) and of the impostor that
/// claims its name.
fn crawler_records() -> Vec<DnsRecord> {
    vec![
        DnsRecord::Ptr {
            ip: CRAWLER,
            name: "a.crawl.bot.test".into(),
        },
        DnsRecord::Address {
            name: "a.crawl.bot.test".into(),
            ip: CRAWLER,
        },
        DnsRecord::Ptr {
            ip: SPOOFED,
            name: "a.crawl.bot.test".into(),
        },
    ]
}

/// Bots verified by reverse DNS only, the resolver being `dns`, a rule refusing impostors, and
/// the loopback peer trusted as the proxy that names the client.
fn rdns_policy(dns: SocketAddr) -> String {
    format!(
        r#"
[client_ip]
trusted_proxies = ["127.0.0.1"]

[bots]
origin_header = "x-signpost-bot"
nameservers = ["{dns}"]

[[bot]]
name = "DnsBot"
operator = "Tests"
category = "Search Engine Crawler"
behaviors = ["search"]
user_agent = "DnsBot"
rdns = ["crawl.bot.test"]

[[bot]]
name = "EvilBot"
operator = "Tests"
category = "AI Crawler"
behaviors = ["training"]
user_agent = "EvilBot"
rdns = ["other.test"]

[[custom_rule]]
id = "impostors"
action = "block"
expression = "signpost.bot.claim_failed"
"#
    )
}

/// What one request claiming a bot got.
#[derive(Debug, PartialEq)]
enum Answer {
    /// The origin was reached; the identity header it read, parsed, member by member.
    Told(BTreeMap<String, String>),
    /// Refused by the edge with this status, and the problem document's `error_code`.
    Refused(u16, serde_json::Value),
}

/// GET `/` as `user_agent`, from the client `from` (forwarded by the trusted loopback proxy)
/// or from the loopback peer itself.
fn ask(
    edge: &Edge,
    client: &reqwest::blocking::Client,
    from: Option<IpAddr>,
    user_agent: &str,
) -> Answer {
    let mut request = client
        .get(edge.url("/"))
        .header("user-agent", user_agent)
        .header("accept", "application/json");
    if let Some(from) = from {
        request = request.header("x-forwarded-for", from.to_string());
    }
    let resp = request.send().unwrap();
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().unwrap();
    if status != 200 {
        return Answer::Refused(status, body["error_code"].clone());
    }
    let lines: Vec<(String, String)> = serde_json::from_value(body["lines"].clone()).unwrap();
    let told: Vec<&str> = lines
        .iter()
        .filter(|(n, _)| n == "x-signpost-bot")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(told.len(), 1, "one identity header: {lines:?}");
    Answer::Told(dictionary(told[0]))
}

/// A structured-field dictionary (RFC 9651) of strings and tokens, parsed by `sfv`.
fn dictionary(value: &str) -> BTreeMap<String, String> {
    let parsed = sfv::Parser::parse_dictionary(value.as_bytes())
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field dictionary: {e}"));
    parsed
        .into_iter()
        .map(|(key, member)| {
            let sfv::ListEntry::Item(item) = member else {
                panic!("{key} is an inner list in {value:?}");
            };
            let text = match item.bare_item {
                sfv::BareItem::String(s) | sfv::BareItem::Token(s) => s,
                other => panic!("{key} is {other:?} in {value:?}"),
            };
            (key, text)
        })
        .collect()
}

/// The members the origin is told of a bot with a status (and a method when verified).
fn told(bot: &str, category: &str, status: &str, method: Option<&str>) -> Answer {
    let mut members = BTreeMap::from([
        ("bot".to_string(), bot.to_string()),
        ("status".to_string(), status.to_string()),
        ("category".to_string(), category.to_string()),
        ("signature".to_string(), "absent".to_string()),
    ]);
    if let Some(method) = method {
        members.insert("method".into(), method.into());
    }
    Answer::Told(members)
}

/// The answer a problem document of 1020 is.
fn refused_1020() -> Answer {
    Answer::Refused(403, serde_json::json!(1020))
}

/// Asks until the answer is `settled`, every answer before it being `meanwhile`; panics past
/// [`SETTLE`]. Returns how many `meanwhile` answers came first.
fn until_settled(
    edge: &Edge,
    client: &reqwest::blocking::Client,
    from: Option<IpAddr>,
    user_agent: &str,
    meanwhile: &Answer,
    settled: &Answer,
) -> usize {
    let deadline = Instant::now() + SETTLE;
    let mut before = 0;
    loop {
        let answer = ask(edge, client, from, user_agent);
        if answer == *settled {
            return before;
        }
        assert_eq!(answer, *meanwhile, "{user_agent}: neither {settled:?} nor");
        before += 1;
        assert!(
            Instant::now() < deadline,
            "{user_agent} still {answer:?} after {SETTLE:?}, {before} requests"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The edge's metrics, parsed sample by sample with [`metric`] (0 for a sample not there).
fn sample(edge: &Edge, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (status, metrics) = admin_get(edge, "/metrics");
    assert_eq!(status, 200);
    metric(&metrics, name, labels).unwrap_or(0.0)
}

/// Waits until the access log holds every one of `lines` (it is written after the response).
fn log_holds(edge: &Edge, lines: &[&str]) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let log = edge.log();
        if lines.iter().all(|l| log.contains(l)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{lines:?} not all in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_crawler_is_verified_by_reverse_dns_and_a_name_under_another_suffix_is_refused() {
    let Some(dns) = start_dnsmasq(&crawler_records(), 300) else {
        return;
    };
    let (origin, edge) = echo_edge("vbots-rdns", &rdns_policy(dns.addr), "", &[]);
    let c = client(&edge);
    let crawler = Some(CRAWLER);

    // The first claim starts the lookup and goes on meanwhile: neither verified nor refused.
    let pending = told("DnsBot", "Search Engine Crawler", "pending", None);
    assert_eq!(ask(&edge, &c, crawler, "DnsBot/1.0"), pending);
    let verified = told(
        "DnsBot",
        "Search Engine Crawler",
        "verified",
        Some("reverse-dns"),
    );
    let pending_after = until_settled(&edge, &c, crawler, "DnsBot/1.0", &pending, &verified);
    // The answer is kept: asked again, it is the same without waiting.
    assert_eq!(
        ask(&edge, &c, crawler, "Mozilla/5.0 (compatible; DnsBot/1.0)"),
        verified
    );

    // From the same address, a bot whose hosts are under another suffix: the name is known and
    // is not its own, so the claim fails at once and the rule refuses it before the origin.
    let before = origin.received();
    assert_eq!(ask(&edge, &c, crawler, "EvilBot/3.1"), refused_1020());
    assert_eq!(
        origin.received(),
        before,
        "an impostor never reaches the origin"
    );

    log_holds(
        &edge,
        &[
            r#"client=192.0.2.10 "#,
            r#"bot="DnsBot" bot_status="pending""#,
            r#"bot="DnsBot" bot_status="verified""#,
            r#"bot="EvilBot" bot_status="failed""#,
        ],
    );
    let bots = |bot: &str, status: &str| {
        sample(
            &edge,
            "signpost_bot_requests_total",
            &[("bot", bot), ("status", status)],
        )
    };
    assert_eq!(bots("DnsBot", "pending"), (1 + pending_after) as f64);
    assert_eq!(bots("DnsBot", "verified"), 2.0);
    assert_eq!(bots("EvilBot", "failed"), 1.0);
    // One check for the address, whatever the number of requests and bots asking about it.
    let lookups = |outcome: &str| {
        sample(
            &edge,
            "signpost_reverse_dns_lookups_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(lookups("confirmed"), 1.0);
    assert_eq!(lookups("failed"), 0.0);

    // dnsmasq was asked: the PTR of the address, then the A of its name, once each.
    drop(edge);
    let log = dns.stop_and_log();
    assert_eq!(
        log.matches("query[PTR] 10.2.0.192.in-addr.arpa").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("query[A] a.crawl.bot.test").count(), 1, "{log}");
}

#[test]
fn a_claim_from_an_address_without_the_crawlers_name_is_refused_as_an_impostor() {
    let Some(dns) = start_dnsmasq(&crawler_records(), 300) else {
        return;
    };
    let (origin, edge) = echo_edge("vbots-impostor", &rdns_policy(dns.addr), "", &[]);
    let c = client(&edge);
    let pending = told("DnsBot", "Search Engine Crawler", "pending", None);

    // No PTR record at all, and a PTR record naming the crawler whose name does not resolve
    // back: both pending while the lookup runs, then refused.
    for from in [NAMELESS, SPOOFED] {
        assert_eq!(
            ask(&edge, &c, Some(from), "DnsBot/1.0"),
            pending,
            "from {from}"
        );
        until_settled(
            &edge,
            &c,
            Some(from),
            "DnsBot/1.0",
            &pending,
            &refused_1020(),
        );
        let before = origin.received();
        assert_eq!(
            ask(&edge, &c, Some(from), "DnsBot/1.0"),
            refused_1020(),
            "from {from}"
        );
        assert_eq!(origin.received(), before);
    }

    // The same User-Agent from the crawler's own address is the crawler: the address decides.
    let verified = told(
        "DnsBot",
        "Search Engine Crawler",
        "verified",
        Some("reverse-dns"),
    );
    until_settled(&edge, &c, Some(CRAWLER), "DnsBot/1.0", &pending, &verified);
    // A client that claims no bot is nobody in particular, from anywhere.
    let resp = c
        .get(edge.url("/"))
        .header("user-agent", "Mozilla/5.0 Firefox/140.0")
        .header("x-forwarded-for", NAMELESS.to_string())
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: serde_json::Value = resp.json().unwrap();
    assert!(echo["headers"].get("x-signpost-bot").is_none(), "{echo}");

    let lookups = |outcome: &str| {
        sample(
            &edge,
            "signpost_reverse_dns_lookups_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(lookups("no_name"), 1.0);
    assert_eq!(lookups("unconfirmed"), 1.0);
    assert_eq!(lookups("confirmed"), 1.0);
    log_holds(
        &edge,
        &[
            r#"client=192.0.2.20 "#,
            r#"client=198.51.100.7 "#,
            r#"bot="DnsBot" bot_status="failed""#,
        ],
    );
    assert_eq!(
        sample(
            &edge,
            "signpost_bot_requests_total",
            &[("bot", "DnsBot"), ("status", "failed")],
        ),
        4.0
    );

    // The impostor's lookup asked the forward name and found another address.
    drop(edge);
    let log = dns.stop_and_log();
    assert_eq!(
        log.matches("query[PTR] 7.100.51.198.in-addr.arpa").count(),
        1,
        "{log}"
    );
}

/// A real HTTPS server on 127.0.0.1 with a certificate for `localhost` issued by its own CA,
/// answering each path with a fixed JSON body; it counts the requests for each path.
struct ListServer {
    port: u16,
    ca_pem: String,
    requests: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl ListServer {
    fn start(lists: &[(&str, &str)]) -> ListServer {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "signpost test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &ca)
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
            .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let lists: Arc<BTreeMap<String, String>> = Arc::new(
            lists
                .iter()
                .map(|(p, b)| (p.to_string(), b.to_string()))
                .collect(),
        );
        let requests = Arc::new(Mutex::new(BTreeMap::new()));
        let counted = Arc::clone(&requests);
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { return };
                let (config, lists, counted) = (
                    Arc::clone(&config),
                    Arc::clone(&lists),
                    Arc::clone(&counted),
                );
                std::thread::spawn(move || serve_one(tcp, config, &lists, &counted));
            }
        });
        ListServer {
            port,
            ca_pem: ca.pem(),
            requests,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    fn requests(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

/// One connection: one request read, answered, closed.
fn serve_one(
    tcp: std::net::TcpStream,
    config: Arc<rustls::ServerConfig>,
    lists: &BTreeMap<String, String>,
    counted: &Mutex<BTreeMap<String, usize>>,
) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Request::new(&mut headers);
    if !matches!(parsed.parse(&request), Ok(httparse::Status::Complete(_))) {
        return;
    }
    let path = parsed.path.unwrap_or("").to_string();
    *counted.lock().unwrap().entry(path.clone()).or_default() += 1;
    let response = match lists.get(&path) {
        Some(body) => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
        None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
    };
    let _ = tls.write_all(response.as_bytes());
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

#[test]
fn a_bot_is_verified_by_its_published_address_list_fetched_over_https() {
    let server = ListServer::start(&[
        (
            "/bot.json",
            r#"{"prefixes":[{"ipv4Prefix":"127.0.0.0/8"}]}"#,
        ),
        (
            "/far.json",
            r#"{"prefixes":[{"ipv4Prefix":"192.0.2.0/24"}]}"#,
        ),
    ]);
    let scratch = Scratch::new("vbots-lists-ca");
    let ca = scratch.write("ca.pem", &server.ca_pem);
    let top = format!(
        r#"
[bots]
origin_header = "x-signpost-bot"
allow_private_fetch = true
trusted_roots = ["{ca}"]

[[bot]]
name = "ListBot"
operator = "Tests"
category = "AI Search"
behaviors = ["search", "agent"]
user_agent = "ListBot"
ip_ranges_url = ["{near}"]

[[bot]]
name = "FarListBot"
operator = "Tests"
category = "AI Crawler"
behaviors = ["training"]
user_agent = "FarListBot"
ip_ranges_url = ["{far}"]

[[custom_rule]]
id = "impostors"
action = "block"
expression = "signpost.bot.claim_failed"
"#,
        ca = ca.display(),
        near = server.url("/bot.json"),
        far = server.url("/far.json"),
    );
    let (_origin, edge) = echo_edge("vbots-lists", &top, "", &[]);
    let c = client(&edge);

    // Until the list is loaded the claim is pending (the fetch may already be done: the edge
    // starts it when it loads the policy).
    let pending = told("ListBot", "AI Search", "pending", None);
    let verified = told("ListBot", "AI Search", "verified", Some("ip-range"));
    until_settled(&edge, &c, None, "ListBot/1.0", &pending, &verified);
    assert_eq!(server.requests("/bot.json"), 1);

    // The other list does not hold the address: once loaded, the claim fails and is refused.
    let far_pending = told("FarListBot", "AI Crawler", "pending", None);
    until_settled(
        &edge,
        &c,
        None,
        "FarListBot/0.9",
        &far_pending,
        &refused_1020(),
    );

    // Requests read the loaded lists, they never fetch: each list was fetched once.
    for _ in 0..5 {
        assert_eq!(ask(&edge, &c, None, "ListBot/1.0"), verified);
    }
    assert_eq!(server.requests("/bot.json"), 1);
    assert_eq!(server.requests("/far.json"), 1);
    assert_eq!(
        sample(
            &edge,
            "signpost_ip_list_refreshes_total",
            &[("outcome", "ok")]
        ),
        2.0
    );
    // (The shipped catalog's lists fail here without a network: failures are not counted per
    // list, so only the two successes are ours to count.)
    log_holds(
        &edge,
        &[
            r#"bot="ListBot" bot_status="verified""#,
            r#"bot="FarListBot" bot_status="failed""#,
        ],
    );
}
