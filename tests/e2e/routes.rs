//! One truth on every route: the proxy route (Pingora's proxy loop) and the Markdown route (a
//! converting zone's agents, forwarded by the edge itself) prepare the origin's request and
//! filter its answer alike. A matrix through the binary, over HTTP/1.1 and HTTP/2 (TLS, ALPN):
//! what the origin receives, what the client receives, and each origin failure's code in HTML,
//! JSON and Markdown; then the converted-page cache dropped by unsafe requests, and a client
//! that leaves in the middle of an answer, on both routes.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// Receipt headers of pay per crawl an origin may send: none may reach a client the edge did
/// not charge ("every receipt a client holds is in the ledger").
const RECEIPTS: [(&str, &str); 3] = [
    ("crawler-price", "USD 5.00"),
    ("crawler-charged", "USD 100.00"),
    ("crawler-error", "ForgedByOrigin"),
];

/// The origin of the matrix's good zone: records the header lines of every request by its
/// target, and serves `/page` (HTML, converted for agents), `/text` (plain text, passed through
/// on the Markdown route), `/broken` (its own 503 page), `/cached*` (cacheable HTML that says how many unsafe requests the
/// origin had received when it was served), `/big` (32 MiB of plain text), each with the
/// receipts above. An unsafe request is answered `200` (or the status its `x-answer-status`
/// asks), with a `Location` when its `x-answer-location` names one.
struct RouteOrigin {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    seen: Arc<Mutex<HashMap<String, HeaderLines>>>,
}

/// A request's header lines, names in lower case, in order.
type HeaderLines = Vec<(String, String)>;

const BIG_BYTES: usize = 32 << 20;

/// The origin's own error page, `/broken` (503, `Retry-After: 120`).
const BROKEN_PAGE: &str =
    "<html><head><title>Down for maintenance</title></head><body>Back soon.</body></html>";

impl RouteOrigin {
    fn start() -> RouteOrigin {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = server.server_addr().to_ip().unwrap();
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let unsafe_seen = Arc::new(AtomicUsize::new(0));
        let (worker, seen_w) = (server.clone(), seen.clone());
        thread::spawn(move || {
            for mut request in worker.incoming_requests() {
                let (seen, unsafe_seen) = (seen_w.clone(), unsafe_seen.clone());
                thread::spawn(move || {
                    let lines = header_lines(&request);
                    let url = request.url().to_string();
                    seen.lock().unwrap().insert(url.clone(), lines.clone());
                    let mut sink = Vec::new();
                    let _ = request.as_reader().read_to_end(&mut sink);
                    let header = |n: &str, v: &str| {
                        tiny_http::Header::from_bytes(n.as_bytes(), v.as_bytes()).unwrap()
                    };
                    let path = url.split('?').next().unwrap_or("").to_string();
                    let method = request.method().as_str().to_string();
                    if method != "GET" && method != "HEAD" {
                        unsafe_seen.fetch_add(1, Ordering::SeqCst);
                        let asked = |name: &str| {
                            lines
                                .iter()
                                .find(|(n, _)| n == name)
                                .map(|(_, v)| v.clone())
                        };
                        let status = asked("x-answer-status")
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(200u16);
                        let mut response =
                            tiny_http::Response::from_string("done").with_status_code(status);
                        if let Some(location) = asked("x-answer-location") {
                            response.add_header(header("location", &location));
                        }
                        let _ = request.respond(response);
                        return;
                    }
                    if path == "/broken" {
                        let mut response = tiny_http::Response::from_string(BROKEN_PAGE)
                            .with_status_code(503)
                            .with_header(header("content-type", "text/html"))
                            .with_header(header("retry-after", "120"));
                        for (name, value) in RECEIPTS {
                            response.add_header(header(name, value));
                        }
                        let _ = request.respond(response);
                        return;
                    }
                    let (content_type, body): (&str, Vec<u8>) = match path.as_str() {
                        "/text" => ("text/plain", b"plain words from the origin".to_vec()),
                        "/big" => ("text/plain", vec![b'x'; BIG_BYTES]),
                        p if p.starts_with("/cached") => (
                            "text/html",
                            format!(
                                "<html><head><title>Cached</title></head><body><h1>Cached \
                                 page</h1><p>Unsafe requests seen: {}.</p></body></html>",
                                unsafe_seen.load(Ordering::SeqCst)
                            )
                            .into_bytes(),
                        ),
                        _ => (
                            "text/html; charset=utf-8",
                            b"<html><head><title>Route</title></head><body><h1>Route page</h1>\
                              <p>The same page on every route.</p></body></html>"
                                .to_vec(),
                        ),
                    };
                    let mut response = tiny_http::Response::from_data(body)
                        .with_header(header("content-type", content_type));
                    if path.starts_with("/cached") {
                        response.add_header(header("cache-control", "public, max-age=600"));
                    }
                    for (name, value) in RECEIPTS {
                        response.add_header(header(name, value));
                    }
                    let _ = request.respond(response);
                });
            }
        });
        RouteOrigin { addr, server, seen }
    }

    /// The header lines of the request for `target` (path and query), once it arrived.
    fn seen(&self, target: &str) -> HeaderLines {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(lines) = self.seen.lock().unwrap().get(target) {
                return lines.clone();
            }
            assert!(Instant::now() < deadline, "the origin never saw {target}");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RouteOrigin {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// The hosts of the matrix's zones, each on its own origin: the good one and the three failures.
const GOOD: &str = "example.com";
const REFUSED: &str = "refused.example.com";
const SLOW: &str = "slow.example.com";
const GARBAGE: &str = "garbage.example.com";

/// An edge with a plain and a TLS listener in front of the four zones. Every zone converts for
/// agents; the good one also identifies bots (a loopback bot, verified by address), has crawl
/// control (searchers allowed) and caches converted pages.
struct Matrix {
    edge: Edge,
    tls: SocketAddr,
    ca: reqwest::Certificate,
    origin: RouteOrigin,
    _bad: (BadOrigin, BadOrigin),
}

fn matrix(name: &str) -> Matrix {
    let scratch = Scratch::new(name);
    let key = rcgen::KeyPair::generate().unwrap();
    let names = [GOOD, REFUSED, SLOW, GARBAGE].map(str::to_string).to_vec();
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_path = scratch.write("cert.pem", &cert.pem());
    let key_path = scratch.write("key.pem", &key.serialize_pem());
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let origin = RouteOrigin::start();
    let slow = BadOrigin::start(Misbehaviour::NeverAnswers);
    let garbage = BadOrigin::start(Misbehaviour::Garbage);
    let refused = format!("127.0.0.1:{}", free_port());
    let converts = "[zone.markdown]\nenabled = true\n";
    let text = format!(
        r#"listen = ["{addr}"]
admin = "{admin}"

[[listener]]
addr = "{tls}"
tls = {{ cert = "{cert}", key = "{key}" }}

[[bot]]
name = "LoopBot"
operator = "Tests"
category = "Search Engine Crawler"
behaviors = ["search"]
user_agent = "LoopBot"
ip_ranges = ["127.0.0.0/8"]

[[zone]]
name = "good"
hosts = ["{GOOD}"]
origin = "{good}"

[zone.markdown]
enabled = true
cache = true

[zone.origin_errors]
structured = true

[zone.crawl]
search = "allow"
training = "block"

[[zone]]
name = "refused"
hosts = ["{REFUSED}"]
origin = "{refused}"
{converts}
[[zone]]
name = "slow"
hosts = ["{SLOW}"]
origin = "{slow}"
read_timeout = "1s"
{converts}
[[zone]]
name = "garbage"
hosts = ["{GARBAGE}"]
origin = "{garbage}"
{converts}"#,
        cert = cert_path.display(),
        key = key_path.display(),
        good = origin.addr,
        slow = slow.addr,
        garbage = garbage.addr,
    );
    let config = scratch.write("policy.toml", &text);
    let edge = Edge::start_with_file(scratch, config, addr, admin, &["--log-format", "json"]);
    Matrix {
        edge,
        tls,
        ca: reqwest::Certificate::from_pem(cert.pem().as_bytes()).unwrap(),
        origin,
        _bad: (slow, garbage),
    }
}

/// HTTP/1.1 on the plain listener, or HTTP/2 on the TLS one (negotiated by ALPN).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    H1,
    H2,
}

/// The route a request takes on a converting zone, chosen by what it accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    /// A browser (HTML) or a program (JSON): Pingora's proxy loop.
    Proxy(&'static str),
    /// An agent asking for Markdown: forwarded and converted by the edge.
    Markdown,
}

impl Route {
    fn accept(self) -> &'static str {
        match self {
            Route::Proxy(accept) => accept,
            Route::Markdown => "text/markdown",
        }
    }
}

const ROUTES: [Route; 3] = [
    Route::Proxy("text/html"),
    Route::Proxy("application/json"),
    Route::Markdown,
];

impl Matrix {
    fn client(&self, wire: Wire) -> reqwest::blocking::Client {
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none());
        let to = match wire {
            Wire::H1 => self.edge.addr,
            Wire::H2 => {
                builder = builder.tls_certs_only([self.ca.clone()]);
                self.tls
            }
        };
        for host in [GOOD, REFUSED, SLOW, GARBAGE] {
            builder = builder.resolve(host, to);
        }
        builder.build().unwrap()
    }

    fn url(&self, wire: Wire, host: &str, target: &str) -> String {
        match wire {
            Wire::H1 => format!("http://{host}:{}{target}", self.edge.addr.port()),
            Wire::H2 => format!("https://{host}:{}{target}", self.tls.port()),
        }
    }

    /// A GET of `target` on `host` over `wire`, as `route` takes it, with `headers`.
    fn get(
        &self,
        wire: Wire,
        route: Route,
        host: &str,
        target: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = self
            .client(wire)
            .get(self.url(wire, host, target))
            .header("accept", route.accept());
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = req.send().unwrap();
        let version = resp.version();
        assert_eq!(
            version,
            match wire {
                Wire::H1 => reqwest::Version::HTTP_11,
                Wire::H2 => reqwest::Version::HTTP_2,
            },
            "the wire the test means"
        );
        Reply {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.text().unwrap(),
        }
    }
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn ray(&self) -> String {
        self.header("cf-ray").expect("a cf-ray").to_string()
    }

    fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }

    /// The error code of a problem, read as its format is read: the JSON member, the
    /// frontmatter's field, the HTML page's title.
    fn problem_code(&self, route: Route) -> u64 {
        match route.accept() {
            "application/json" => {
                assert!(self.content_type().starts_with("application/json"));
                let problem: serde_json::Value = serde_json::from_str(&self.body)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body));
                problem["error_code"].as_u64().expect("an error_code")
            }
            "text/markdown" => {
                assert!(self.content_type().starts_with("text/markdown"));
                let (meta, _) = frontmatter(&self.body);
                meta["error_code"].as_u64().expect("an error_code")
            }
            _ => {
                assert!(self.content_type().starts_with("text/html"));
                let page = scraper::Html::parse_document(&self.body);
                let title: String = page
                    .select(&scraper::Selector::parse("title").unwrap())
                    .next()
                    .expect("a <title>")
                    .text()
                    .collect();
                title
                    .split(|c: char| !c.is_ascii_digit())
                    .find_map(|n| n.parse().ok().filter(|&n: &u64| n >= 400))
                    .unwrap_or_else(|| panic!("no code in the title {title:?}"))
            }
        }
    }
}

/// The access line (JSON) of the request whose ray id is `ray`, once it is written.
fn access_line(edge: &Edge, ray: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = edge
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["target"] == "access" && v["ray_id"] == ray);
        if let Some(line) = found {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no access line for {ray}:\n{}",
            edge.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The values of `name` in header lines, in order.
fn values<'a>(lines: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// What the origin receives is the same on every route and wire: the forwarding headers the
/// edge writes (the client's copies replaced), crawl control's `cf-pay-per-crawl`, and the
/// identity header: a verified bot's real one, a client's forged copy never.
#[test]
fn the_origin_receives_the_same_headers_on_every_route() {
    let m = matrix("routes-origin");
    let forged = [
        (
            "signpost-bot",
            r#"bot="Googlebot", status=verified, method=ip-range, category="Search Engine Crawler", signature=absent"#,
        ),
        ("cf-pay-per-crawl", "protocol=cloudflare, pricing=in-band"),
        ("cf-connecting-ip", "192.0.2.7"),
        ("x-forwarded-proto", "gopher"),
        ("cf-ray", "0000000000000000"),
        ("x-forwarded-for", "203.0.113.9"),
    ];
    let loopbot = r#"bot="LoopBot", status=verified, method=ip-range, category="Search Engine Crawler", signature=absent"#;
    let mut n = 0;
    for wire in [Wire::H1, Wire::H2] {
        for route in ROUTES {
            for (who, user_agent) in [
                ("browser", "Mozilla/5.0 Firefox/140.0"),
                ("bot", "Mozilla/5.0 (compatible; LoopBot/1.0)"),
            ] {
                n += 1;
                let target = format!("/page?case={n}");
                let mut headers = forged.to_vec();
                headers.push(("user-agent", user_agent));
                let reply = m.get(wire, route, GOOD, &target, &headers);
                let case = format!("{wire:?} {route:?} {who}");
                assert_eq!(reply.status, 200, "{case}: {}", reply.body);
                let lines = m.origin.seen(&target);
                let identity = values(&lines, "signpost-bot");
                match who {
                    "bot" => assert_eq!(identity, [loopbot], "{case}: {lines:?}"),
                    _ => assert!(identity.is_empty(), "{case}: {lines:?}"),
                }
                assert_eq!(
                    values(&lines, "cf-pay-per-crawl"),
                    ["protocol=cloudflare, pricing=bypass"],
                    "{case}"
                );
                assert_eq!(values(&lines, "cf-connecting-ip"), ["127.0.0.1"], "{case}");
                assert_eq!(
                    values(&lines, "x-forwarded-for"),
                    ["203.0.113.9, 127.0.0.1"],
                    "{case}"
                );
                let scheme = if wire == Wire::H1 { "http" } else { "https" };
                assert_eq!(values(&lines, "x-forwarded-proto"), [scheme], "{case}");
                assert_eq!(
                    values(&lines, "cf-ray"),
                    [reply.ray().as_str()],
                    "{case}: the origin's ray is the client's"
                );
                if route == Route::Markdown {
                    assert!(
                        reply.content_type().starts_with("text/markdown"),
                        "{case}: converted"
                    );
                }
            }
        }
    }
}

/// What the client receives is filtered alike on every route and wire: the edge's `cf-ray` and
/// `Vary: Accept`, and none of the origin's pay-per-crawl receipts (the edge charged nobody),
/// whether the page was converted (`/page`) or passed through (`/text`).
#[test]
fn clients_receive_no_origin_receipts_on_any_route() {
    let m = matrix("routes-client");
    let mut n = 0;
    for wire in [Wire::H1, Wire::H2] {
        for route in ROUTES {
            for path in ["/page", "/text"] {
                n += 1;
                let target = format!("{path}?case={n}");
                let reply = m.get(wire, route, GOOD, &target, &[("user-agent", "curl/8.0")]);
                let case = format!("{wire:?} {route:?} {path}");
                assert_eq!(reply.status, 200, "{case}: {}", reply.body);
                for (name, _) in RECEIPTS {
                    assert_eq!(reply.header(name), None, "{case}: {name} leaked");
                }
                assert_eq!(reply.header("signpost-bot"), None, "{case}");
                let ray = reply.ray();
                assert_eq!(values(&m.origin.seen(&target), "cf-ray"), [ray.as_str()]);
                let vary = reply.header("vary").unwrap_or("");
                assert!(
                    vary.split(',')
                        .any(|v| v.trim().eq_ignore_ascii_case("accept")),
                    "{case}: Vary {vary:?}"
                );
                let converted = reply.content_type().starts_with("text/markdown");
                assert_eq!(
                    converted,
                    route == Route::Markdown && path == "/page",
                    "{case}: {}",
                    reply.content_type()
                );
            }
        }
    }
}

/// Each origin failure is answered with the same code on every route, in HTML, JSON and
/// Markdown, over both wires: refused 521, no answer within the read timeout 524, garbage 520;
/// and the access line names the failure (never `error=""`).
#[test]
fn each_origin_failure_has_one_code_in_every_format() {
    let m = matrix("routes-failures");
    for wire in [Wire::H1, Wire::H2] {
        for (host, code, error) in [
            (REFUSED, 521, "ConnectRefused"),
            (SLOW, 524, "ReadTimedout"),
            (GARBAGE, 520, "InvalidHTTPHeader"),
        ] {
            for route in ROUTES {
                let case = format!("{wire:?} {route:?} {host}");
                let reply = m.get(wire, route, host, "/page", &[]);
                assert_eq!(u64::from(reply.status), code, "{case}: {}", reply.body);
                assert_eq!(reply.problem_code(route), code, "{case}");
                let line = access_line(&m.edge, &reply.ray());
                assert_eq!(line["status"], code, "{case}: {line}");
                assert_eq!(line["error_code"], code, "{case}: {line}");
                assert_eq!(line["error"], error, "{case}: {line}");
            }
        }
    }
}

/// The origin's own error is reshaped alike on every route and wire: an agent's JSON or Markdown
/// problem with the origin's status and its `Retry-After`, a browser's the origin's page as it
/// came; never with the origin's receipts.
#[test]
fn the_origins_errors_are_reshaped_alike_on_every_route() {
    let m = matrix("routes-origin-errors");
    for wire in [Wire::H1, Wire::H2] {
        for route in ROUTES {
            let case = format!("{wire:?} {route:?}");
            let reply = m.get(wire, route, GOOD, "/broken", &[]);
            assert_eq!(reply.status, 503, "{case}: {}", reply.body);
            assert_eq!(reply.header("retry-after"), Some("120"), "{case}");
            for (name, _) in RECEIPTS {
                assert_eq!(reply.header(name), None, "{case}: {name} leaked");
            }
            match route {
                Route::Proxy("text/html") => {
                    assert_eq!(reply.body, BROKEN_PAGE, "{case}: the origin's own page")
                }
                _ => {
                    assert_eq!(reply.problem_code(route), 503, "{case}");
                    let line = access_line(&m.edge, &reply.ray());
                    assert_eq!(line["status"], 503, "{case}: {line}");
                }
            }
        }
    }
}

/// RFC 9111 section 4.4: a non-error answer to an unsafe request drops the converted page of
/// its target (and of the same-origin URL in its `Location`), so the next agent's GET is a miss
/// that converts the origin's page as it is now. An error answer drops nothing.
#[test]
fn unsafe_requests_drop_the_converted_page() {
    let m = matrix("routes-invalidate");
    let wire = Wire::H1;
    let agent = |target: &str| {
        let reply = m.get(wire, Route::Markdown, GOOD, target, &[]);
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.content_type().starts_with("text/markdown"));
        let line = access_line(&m.edge, &reply.ray());
        let cache = line["markdown_cache"].as_str().unwrap().to_string();
        (cache, reply.body)
    };
    let unsafe_request = |method: &str, target: &str, headers: &[(&str, &str)]| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = m
            .client(wire)
            .request(method, m.url(wire, GOOD, target))
            .body("form=1");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.send().unwrap().status().as_u16()
    };

    let (cache, before) = agent("/cached");
    assert_eq!(cache, "miss");
    assert!(before.contains("Unsafe requests seen: 0."), "{before}");
    assert_eq!(agent("/cached").0, "hit");

    // An error answer changes nothing (the request failed): still a hit.
    assert_eq!(
        unsafe_request("POST", "/cached", &[("x-answer-status", "409")]),
        409
    );
    let (cache, body) = agent("/cached");
    assert_eq!((cache.as_str(), body.as_str()), ("hit", before.as_str()));

    // Each unsafe method that succeeds drops the page: the next GET converts it anew.
    for (i, method) in ["POST", "PUT", "PATCH", "DELETE"].into_iter().enumerate() {
        assert_eq!(unsafe_request(method, "/cached", &[]), 200, "{method}");
        let (cache, after) = agent("/cached");
        assert_eq!(cache, "miss", "{method}");
        let seen = format!("Unsafe requests seen: {}.", i + 2);
        assert!(after.contains(&seen), "{method}: {after}");
        assert_eq!(agent("/cached").0, "hit", "{method}: stored again");
    }

    // A `Location` on the same origin names another page the request changed.
    assert_eq!(agent("/cached-other").0, "miss");
    assert_eq!(agent("/cached-other").0, "hit");
    let location = format!("http://{GOOD}:{}/cached-other", m.edge.addr.port());
    assert_eq!(
        unsafe_request(
            "POST",
            "/form",
            &[("x-answer-status", "201"), ("x-answer-location", &location)]
        ),
        201
    );
    assert_eq!(agent("/cached-other").0, "miss");
    // A relative one too.
    assert_eq!(agent("/cached-other").0, "hit");
    assert_eq!(
        unsafe_request("POST", "/form", &[("x-answer-location", "/cached-other")]),
        200
    );
    assert_eq!(agent("/cached-other").0, "miss");
}

/// Sends a GET for `/big` accepting `accept` on a raw connection, reads the head and a little of
/// the body, and leaves (closing with unread bytes: the edge's next write fails). Returns the
/// ray id of the answer it left.
fn leave_midway(edge: &Edge, accept: &str) -> String {
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /big HTTP/1.1\r\nHost: {GOOD}\r\nAccept: {accept}\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 16384];
    while got.len() < 64 * 1024 {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the answer ended early");
        got.extend_from_slice(&chunk[..n]);
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut headers);
    assert!(head.parse(&got).unwrap().is_complete());
    assert_eq!(head.code, Some(200));
    let ray = head
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("cf-ray"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .expect("a cf-ray");
    drop(stream);
    ray
}

/// Asks for `/big` over HTTP/2 accepting `accept`, reads a little of the body, and resets the
/// stream (dropping the response cancels it). Returns the ray id of the answer it left.
fn reset_midway(m: &Matrix, accept: &str) -> String {
    let mut response = m
        .client(Wire::H2)
        .get(m.url(Wire::H2, GOOD, "/big"))
        .header("accept", accept)
        .send()
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status().as_u16(), 200);
    let ray = response.headers()["cf-ray"].to_str().unwrap().to_string();
    let mut got = 0;
    let mut chunk = [0u8; 16384];
    while got < 64 * 1024 {
        let n = response.read(&mut chunk).unwrap();
        assert!(n > 0, "the answer ended early");
        got += n;
    }
    drop(response);
    ray
}

/// A client that leaves in the middle of an answer is a cancellation on every route and wire
/// (an HTTP/1.1 client closing its connection, an HTTP/2 client resetting its stream): logged
/// `error="request_cancelled"`, `error_code=0`, counted in `signpost_connection_events_total`,
/// and never an edge 500 in `signpost_requests_total`.
#[test]
fn a_client_that_leaves_midway_is_a_cancellation_on_every_route() {
    let m = matrix("routes-cancel");
    for route in ROUTES {
        let ray = leave_midway(&m.edge, route.accept());
        let line = access_line(&m.edge, &ray);
        assert_eq!(line["error"], "request_cancelled", "{route:?}: {line}");
        assert_eq!(line["error_code"], 0, "{route:?}: {line}");
        assert_eq!(line["status"], 200, "{route:?}: {line}");
    }
    // Over HTTP/2 the client resets its stream: a client event on every route, never the edge's
    // error. Which of the two names it gets is the reset's timing, not the route: Pingora
    // reports a reset that arrives while it writes a body as "cannot reserve capacity", without
    // the reason (`h2_stream_error`), and one that arrives while it waits as a cancellation.
    let mut h2_events = Vec::new();
    for route in ROUTES {
        let ray = reset_midway(&m, route.accept());
        let line = access_line(&m.edge, &ray);
        assert_eq!(line["error_code"], 0, "{route:?}: {line}");
        assert_eq!(line["status"], 200, "{route:?}: {line}");
        let event = line["error"].as_str().unwrap_or("").to_string();
        assert!(
            ["request_cancelled", "h2_stream_error"].contains(&event.as_str()),
            "{route:?}: {line}"
        );
        h2_events.push(event);
    }
    let (status, metrics) = admin_get(&m.edge, "/metrics");
    assert_eq!(status, 200);
    let event = |name| {
        metric(
            &metrics,
            "signpost_connection_events_total",
            &[("event", name)],
        )
        .unwrap_or(0.0)
    };
    // Every client that left is counted as the event its access line names, once.
    let per_wire = ROUTES.len() as f64;
    let h2_named = |name: &str| h2_events.iter().filter(|e| *e == name).count() as f64;
    assert_eq!(
        event("request_cancelled"),
        per_wire + h2_named("request_cancelled"),
        "{h2_events:?} {metrics}"
    );
    assert_eq!(
        event("h2_stream_error"),
        h2_named("h2_stream_error"),
        "{h2_events:?} {metrics}"
    );
    let edge_errors = metric(
        &metrics,
        "signpost_requests_total",
        &[("error_code", "500")],
    );
    assert_eq!(edge_errors, None, "no edge 500 counted: {metrics}");
}
