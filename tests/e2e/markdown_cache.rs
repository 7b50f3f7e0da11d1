//! The converted-page cache (`[zone.markdown] cache = true`): the real binary in front of an
//! origin that counts and records every request it is sent, so that each test says exactly what
//! reached the origin, full or conditional.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{Edge, admin_get, client, frontmatter, header_lines, metric, policy};

/// A request as the origin received it.
#[derive(Clone, Debug)]
struct Seen {
    /// Path and query.
    target: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the origin answers: status, headers, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// An origin on loopback whose answers a test's function gives, recording every request.
struct CountingOrigin {
    addr: std::net::SocketAddr,
    server: Arc<tiny_http::Server>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl CountingOrigin {
    fn start(answer: impl Fn(&Seen) -> Answer + Send + 'static) -> CountingOrigin {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = server.server_addr().to_ip().unwrap();
        let worker = server.clone();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        thread::spawn(move || {
            for request in worker.incoming_requests() {
                let request_seen = Seen {
                    target: request.url().to_string(),
                    headers: header_lines(&request),
                };
                let (status, headers, body) = answer(&request_seen);
                log.lock().unwrap().push(request_seen);
                let mut response = tiny_http::Response::from_data(body).with_status_code(status);
                for (name, value) in headers {
                    response.add_header(
                        tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap(),
                    );
                }
                let _ = request.respond(response);
            }
        });
        CountingOrigin { addr, server, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests received for `target` (path and query).
    fn count(&self, target: &str) -> usize {
        self.seen().iter().filter(|s| s.target == target).count()
    }
}

impl Drop for CountingOrigin {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// An HTML page naming the host, target, version and `X-Lang` it was made for, about `filler`
/// paragraphs long, with a link on the site and one to another site.
fn page(seen: &Seen, version: usize, filler: usize) -> Vec<u8> {
    let host = seen.header("host").unwrap_or("-");
    let lang = seen.header("x-lang").unwrap_or("none");
    format!(
        "<html><head><title>Page</title></head><body><h1>{host}{} version {version}</h1>\
         <p>lang {lang}</p><p><a href=\"../docs/next.html\">next</a> \
         <a href=\"https://other.example/x\">elsewhere</a></p>{}</body></html>",
        seen.target,
        "<p>Some words of the page that an agent reads.</p>".repeat(filler)
    )
    .into_bytes()
}

fn html_headers(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut headers = vec![(
        "content-type".to_string(),
        "text/html; charset=utf-8".to_string(),
    )];
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    headers
}

const CACHING_ZONE: &str = "[zone.markdown]\nenabled = true\ncache = true\n";

fn start(origin: &CountingOrigin, zone_extra: &str) -> Edge {
    let o = origin.addr.to_string();
    let extra = zone_extra.to_string();
    Edge::start(
        "markdown-cache",
        move |l, a| policy(l, a, &o, "", &extra),
        &[],
    )
}

fn get(edge: &Edge, url: &str, headers: &[(&str, &str)]) -> reqwest::blocking::Response {
    let mut request = client(edge)
        .get(url.replace("PORT", &edge.addr.port().to_string()))
        .header("accept", "text/markdown");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().unwrap()
}

/// The page's links as sent (same-site ones root-relative) and as an agent resolves them
/// against the frontmatter's `url` (RFC 3986 section 5), which must be `url`.
fn links_of(md: &str, url: &str) -> (Vec<String>, Vec<String>) {
    let (yaml, _) = frontmatter(md);
    assert_eq!(yaml["url"].as_str(), Some(url), "{md}");
    let page = url::Url::parse(url).unwrap();
    let sent: Vec<String> = md
        .split("](")
        .skip(1)
        .map(|rest| rest.split(')').next().unwrap().to_string())
        .collect();
    let resolved = sent
        .iter()
        .map(|l| page.join(l).unwrap().to_string())
        .collect();
    (sent, resolved)
}

fn header(r: &reqwest::blocking::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

/// The `markdown_cache` field of every access line, in order.
fn cache_results(edge: &Edge) -> Vec<String> {
    edge.log()
        .lines()
        .filter_map(|l| l.split("markdown_cache=").nth(1))
        .map(|rest| {
            rest.trim_matches('"')
                .split(['"', ' '])
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Waits until the access log has `n` lines with a `markdown_cache` field (lines are written
/// after the response).
fn wait_results(edge: &Edge, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let results = cache_results(edge);
        if results.len() >= n || Instant::now() > deadline {
            return results;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn cache_metric(edge: &Edge, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, text) = admin_get(edge, "/metrics");
    metric(&text, name, labels).unwrap_or(0.0)
}

#[test]
fn a_page_is_converted_once_then_served_from_the_cache() {
    let origin = CountingOrigin::start(|seen| {
        (
            200,
            html_headers(&[("cache-control", "max-age=60"), ("etag", "\"v1\"")]),
            page(seen, 1, 20),
        )
    });
    let edge = start(&origin, CACHING_ZONE);
    let url = "http://example.com:PORT/doc";
    let first = get(&edge, url, &[]);
    assert_eq!(first.status(), 200);
    let etag = header(&first, "etag").unwrap();
    assert!(
        etag.starts_with('"') && etag.len() == 34 && etag != "\"v1\"",
        "the Markdown's own strong validator: {etag}"
    );
    let first_ray = header(&first, "cf-ray").unwrap();
    let markdown = first.text().unwrap();
    assert!(markdown.contains("# example.com"), "{markdown}");
    let page_url = url.replace("PORT", &edge.addr.port().to_string());
    let port = edge.addr.port();
    assert_eq!(
        links_of(&markdown, &page_url),
        (
            vec![
                "/docs/next.html".to_string(),
                "https://other.example/x".to_string()
            ],
            vec![
                format!("http://example.com:{port}/docs/next.html"),
                "https://other.example/x".to_string()
            ]
        )
    );

    for _ in 0..3 {
        let again = get(&edge, url, &[]);
        assert_eq!(again.status(), 200);
        assert_eq!(
            header(&again, "content-type").as_deref(),
            Some("text/markdown; charset=utf-8")
        );
        assert_eq!(header(&again, "etag").as_deref(), Some(etag.as_str()));
        assert!(header(&again, "age").is_some());
        assert_ne!(
            header(&again, "cf-ray").unwrap(),
            first_ray,
            "each answer its own ray"
        );
        assert!(header(&again, "vary").unwrap().contains("Accept"));
        let length: usize = header(&again, "content-length").unwrap().parse().unwrap();
        let body = again.text().unwrap();
        assert_eq!(body, markdown);
        assert_eq!(body.len(), length);
    }
    // HEAD from the same entry: the Markdown's length, no body.
    let head = client(&edge)
        .head(url.replace("PORT", &edge.addr.port().to_string()))
        .header("accept", "text/markdown")
        .send()
        .unwrap();
    assert_eq!(
        header(&head, "content-length"),
        Some(markdown.len().to_string())
    );
    assert!(head.bytes().unwrap().is_empty());
    // The agent's own conditional request: 304 from the cache, with the validator.
    let not_modified = get(
        &edge,
        url,
        &[("if-none-match", &format!("\"x\", W/{etag}"))],
    );
    assert_eq!(not_modified.status(), 304);
    assert_eq!(
        header(&not_modified, "etag").as_deref(),
        Some(etag.as_str())
    );
    assert_eq!(
        header(&not_modified, "cache-control").as_deref(),
        Some("max-age=60")
    );
    assert!(not_modified.bytes().unwrap().is_empty());
    let other = get(&edge, url, &[("if-none-match", "\"v1\"")]);
    assert_eq!(other.status(), 200, "the HTML's tag is not the Markdown's");

    assert_eq!(
        origin.count("/doc"),
        1,
        "one full request: {:?}",
        origin.seen()
    );
    let results = wait_results(&edge, 7);
    assert_eq!(
        results,
        ["miss", "hit", "hit", "hit", "hit", "hit", "hit"],
        "{}",
        edge.log()
    );
    let zone = ("zone", "test");
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_cache_requests_total",
            &[zone, ("result", "hit")]
        ),
        6.0
    );
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_cache_requests_total",
            &[zone, ("result", "miss")]
        ),
        1.0
    );
    assert!(cache_metric(&edge, "signpost_markdown_cache_bytes", &[zone]) > markdown.len() as f64);
    assert_eq!(
        cache_metric(&edge, "signpost_markdown_cache_entries", &[zone]),
        1.0
    );
    // A hit is not a conversion.
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_conversions_total",
            &[("outcome", "converted")]
        ),
        1.0
    );
}

#[test]
fn a_stale_page_is_revalidated_and_a_changed_one_converted_again() {
    let version = Arc::new(AtomicUsize::new(1));
    let current = version.clone();
    let origin = CountingOrigin::start(move |seen| {
        let v = current.load(Ordering::SeqCst);
        let tag = format!("\"v{v}\"");
        // Stored, but revalidated on every use.
        let headers = html_headers(&[
            ("cache-control", "max-age=0"),
            ("etag", &tag),
            ("x-version", &v.to_string()),
        ]);
        if seen.header("if-none-match") == Some(tag.as_str()) {
            return (304, headers[1..].to_vec(), Vec::new());
        }
        (200, headers, page(seen, v, 5))
    });
    let edge = start(&origin, CACHING_ZONE);
    let url = "http://example.com:PORT/changing";
    let first = get(&edge, url, &[]);
    let first_tag = header(&first, "etag").unwrap();
    assert!(first.text().unwrap().contains("version 1"));

    let second = get(&edge, url, &[]);
    assert_eq!(second.status(), 200);
    assert_eq!(header(&second, "etag"), Some(first_tag.clone()));
    assert!(second.text().unwrap().contains("version 1"));
    let seen = origin.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].header("if-none-match"),
        None,
        "the first is a full request"
    );
    assert_eq!(seen[1].header("if-none-match"), Some("\"v1\""), "{seen:?}");

    // The page changes: the revalidation gets a 200, converted anew.
    version.store(2, Ordering::SeqCst);
    let third = get(&edge, url, &[("if-none-match", &first_tag)]);
    assert_eq!(third.status(), 200, "the agent's old tag no longer matches");
    let third_tag = header(&third, "etag").unwrap();
    assert_ne!(third_tag, first_tag);
    assert!(third.text().unwrap().contains("version 2"));
    let fourth = get(&edge, url, &[("if-none-match", &third_tag)]);
    assert_eq!(fourth.status(), 304);
    let seen = origin.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[2].header("if-none-match"), Some("\"v1\""));
    assert_eq!(seen[3].header("if-none-match"), Some("\"v2\""));

    let results = wait_results(&edge, 4);
    assert_eq!(
        results,
        ["miss", "revalidated", "miss", "revalidated"],
        "{}",
        edge.log()
    );
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_cache_requests_total",
            &[("zone", "test"), ("result", "revalidated")]
        ),
        2.0
    );
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_conversions_total",
            &[("outcome", "converted")]
        ),
        2.0,
        "converted once per version"
    );
}

#[test]
fn private_no_store_cookies_and_authorization_are_never_cached() {
    let origin = CountingOrigin::start(|seen| {
        let path = seen.target.as_str();
        let cache: &[(&str, &str)] = match path {
            "/private" => &[("cache-control", "private, max-age=60")],
            "/no-store" => &[("cache-control", "no-store, max-age=60")],
            "/cookie" => &[
                ("cache-control", "max-age=60"),
                ("set-cookie", "s=1; Path=/"),
            ],
            "/public" => &[("cache-control", "public, max-age=60")],
            "/vary-star" => &[("cache-control", "max-age=60"), ("vary", "*")],
            "/json" => {
                return (
                    200,
                    vec![
                        ("content-type".into(), "application/json".into()),
                        ("cache-control".into(), "max-age=60".into()),
                    ],
                    b"{}".to_vec(),
                );
            }
            _ => &[("cache-control", "max-age=60")],
        };
        (200, html_headers(cache), page(seen, 1, 2))
    });
    let edge = start(&origin, CACHING_ZONE);
    for path in ["/private", "/no-store", "/cookie", "/vary-star", "/json"] {
        for _ in 0..2 {
            let r = get(&edge, &format!("http://example.com:PORT{path}"), &[]);
            assert_eq!(r.status(), 200);
            if path == "/cookie" {
                assert_eq!(header(&r, "set-cookie").as_deref(), Some("s=1; Path=/"));
            }
        }
        assert_eq!(origin.count(path), 2, "{path} was cached");
    }
    // With Authorization: not stored, nor answered from an entry, unless the origin says public.
    let auth = [("authorization", "Bearer secret")];
    get(&edge, "http://example.com:PORT/plain", &auth);
    get(&edge, "http://example.com:PORT/plain", &auth);
    assert_eq!(origin.count("/plain"), 2);
    get(&edge, "http://example.com:PORT/plain", &[]);
    get(&edge, "http://example.com:PORT/plain", &auth);
    assert_eq!(
        origin.count("/plain"),
        4,
        "an entry is not given to a request with credentials"
    );
    get(&edge, "http://example.com:PORT/public", &auth);
    get(&edge, "http://example.com:PORT/public", &auth);
    assert_eq!(origin.count("/public"), 1, "public may be shared");
    // The agent's no-store: neither read nor stored.
    get(
        &edge,
        "http://example.com:PORT/public",
        &[("cache-control", "no-store")],
    );
    assert_eq!(origin.count("/public"), 2);

    let results = wait_results(&edge, 17);
    assert_eq!(
        results.iter().filter(|r| *r == "bypass").count(),
        14,
        "{results:?}"
    );
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_cache_entries",
            &[("zone", "test")]
        ),
        2.0
    );
}

#[test]
fn hosts_and_queries_are_kept_apart() {
    let origin = CountingOrigin::start(|seen| {
        (
            200,
            html_headers(&[("cache-control", "max-age=60")]),
            page(seen, 1, 2),
        )
    });
    let edge = start(&origin, CACHING_ZONE);
    let urls = [
        ("http://example.com:PORT/p?a=1", "example.com", "/p?a=1"),
        ("http://example.com:PORT/p?a=2", "example.com", "/p?a=2"),
        (
            "http://www.example.com:PORT/p?a=1",
            "www.example.com",
            "/p?a=1",
        ),
    ];
    for round in 0..2 {
        for (url, host, target) in urls {
            let body = get(&edge, url, &[]).text().unwrap();
            let port = edge.addr.port();
            assert!(
                body.contains(&format!("# {host}:{port}{target}"))
                    || body.contains(&format!("# {host}{target}")),
                "round {round}, {url}: {body}"
            );
            // A page held for one host is never served to another: its root-relative links
            // resolve against its own host.
            let (_, resolved) = links_of(&body, &url.replace("PORT", &port.to_string()));
            assert_eq!(resolved[0], format!("http://{host}:{port}/docs/next.html"));
        }
    }
    assert_eq!(origin.count("/p?a=1"), 2, "once per host");
    assert_eq!(origin.count("/p?a=2"), 1);
    assert_eq!(
        wait_results(&edge, 6),
        ["miss", "miss", "miss", "hit", "hit", "hit"]
    );
}

#[test]
fn vary_is_honoured() {
    let origin = CountingOrigin::start(|seen| {
        (
            200,
            html_headers(&[
                ("cache-control", "max-age=60"),
                ("vary", "X-Lang, Accept-Encoding"),
            ]),
            page(seen, 1, 2),
        )
    });
    let edge = start(&origin, CACHING_ZONE);
    let url = "http://example.com:PORT/v";
    let lang = |value: Option<&str>| {
        let headers: Vec<(&str, &str)> = value.map(|v| ("x-lang", v)).into_iter().collect();
        get(&edge, url, &headers).text().unwrap()
    };
    assert!(lang(Some("fr")).contains("lang fr"));
    assert!(lang(Some("fr")).contains("lang fr"));
    assert_eq!(origin.count("/v"), 1);
    assert!(
        lang(Some("de")).contains("lang de"),
        "fr's page is not de's"
    );
    assert_eq!(origin.count("/v"), 2);
    assert!(lang(Some("de")).contains("lang de"));
    assert!(lang(None).contains("lang none"));
    assert_eq!(origin.count("/v"), 3);
    assert_eq!(
        wait_results(&edge, 5),
        ["miss", "hit", "miss", "hit", "miss"]
    );
}

#[test]
fn the_byte_bound_holds_under_a_flood_of_distinct_urls() {
    let origin = CountingOrigin::start(|seen| {
        (
            200,
            html_headers(&[("cache-control", "max-age=600")]),
            page(seen, 1, 40),
        )
    });
    let bound = 65_536.0;
    let edge = start(&origin, &format!("{CACHING_ZONE}cache_bytes = {bound}\n"));
    let zone = [("zone", "test")];
    let mut largest = 0.0f64;
    for i in 0..240 {
        let r = get(&edge, &format!("http://example.com:PORT/flood/{i}"), &[]);
        assert_eq!(r.status(), 200);
        assert!(r.text().unwrap().len() > 1_500);
        if i % 20 == 19 {
            let held = cache_metric(&edge, "signpost_markdown_cache_bytes", &zone);
            assert!(held <= bound, "{held} bytes held after {} pages", i + 1);
            largest = largest.max(held);
        }
    }
    assert!(largest > bound / 2.0, "the cache was used: {largest}");
    let entries = cache_metric(&edge, "signpost_markdown_cache_entries", &zone);
    assert!((1.0..240.0).contains(&entries), "{entries}");
    assert!(cache_metric(&edge, "signpost_markdown_cache_evictions_total", &zone) > 0.0);
}

fn post(edge: &Edge, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::blocking::Client::new()
        .post(format!("http://{}{path}", edge.admin))
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, serde_json::from_str(&r.text().unwrap()).unwrap())
}

#[test]
fn purge_drops_a_path_or_a_zone_and_a_reload_that_changes_the_settings_drops_the_zone() {
    let origin = CountingOrigin::start(|seen| {
        (
            200,
            html_headers(&[("cache-control", "max-age=600")]),
            page(seen, 1, 2),
        )
    });
    let mut edge = start(&origin, CACHING_ZONE);
    let fill = |edge: &Edge| {
        for target in ["/a?x=1", "/a?x=2", "/b"] {
            get(edge, &format!("http://example.com:PORT{target}"), &[]);
        }
    };
    fill(&edge);
    fill(&edge);
    assert_eq!(origin.seen().len(), 3);

    let (status, answer) = post(&edge, "/purge?zone=test&path=/a");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["purged"], 2);
    fill(&edge);
    assert_eq!(
        (origin.count("/a?x=1"), origin.count("/b")),
        (2, 1),
        "only /a dropped"
    );
    let (_, answer) = post(&edge, "/purge?zone=test&path=/b&host=www.example.com");
    assert_eq!(answer["purged"], 0, "another host's /b");
    let (_, answer) = post(&edge, "/purge?zone=test");
    assert_eq!(answer["purged"], 3);
    assert_eq!(
        cache_metric(&edge, "signpost_markdown_cache_bytes", &[("zone", "test")]),
        0.0
    );
    fill(&edge);
    assert_eq!(origin.seen().len(), 8);
    // Refusals: GET, an unknown zone, no zone.
    let (status, _) = admin_get(&edge, "/purge?zone=test");
    assert_eq!(status, 405);
    assert_eq!(post(&edge, "/purge?zone=nope").0, 404);
    assert_eq!(post(&edge, "/purge").0, 400);

    // A reload that leaves the zone's Markdown settings alone keeps the entries...
    let reload = |edge: &mut Edge, zone_extra: &str, reloads: f64| {
        let o = origin.addr.to_string();
        std::fs::write(
            &edge.config,
            policy(edge.addr, edge.admin, &o, "", zone_extra),
        )
        .unwrap();
        edge.signal("HUP");
        let deadline = Instant::now() + Duration::from_secs(10);
        while cache_metric(edge, "signpost_policy_reloads_total", &[("outcome", "ok")]) < reloads {
            assert!(Instant::now() < deadline, "reload {reloads} not done");
            thread::sleep(Duration::from_millis(20));
        }
    };
    reload(
        &mut edge,
        &format!("max_body_size = \"64KiB\"\n{CACHING_ZONE}"),
        1.0,
    );
    fill(&edge);
    assert_eq!(origin.seen().len(), 8, "kept across a reload");
    // ...one that changes them drops them.
    reload(
        &mut edge,
        &format!("{CACHING_ZONE}token_count_header = true\n"),
        2.0,
    );
    let r = get(&edge, "http://example.com:PORT/b", &[]);
    assert!(header(&r, "x-markdown-tokens").is_some());
    assert_eq!(origin.count("/b"), 3, "converted with the new settings");
}

/// Sends `n` requests for `url` at once, each on its own connection; their statuses and bodies.
fn herd(edge: &Edge, url: &str, n: usize) -> Vec<(u16, String)> {
    let start = Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let client = client(edge);
            let url = url.replace("PORT", &edge.addr.port().to_string());
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let r = client
                    .get(url)
                    .header("accept", "text/markdown")
                    .send()
                    .unwrap();
                (r.status().as_u16(), r.text().unwrap())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The frontmatter's title and the Markdown's first heading.
fn parsed(markdown: &str) -> (String, String) {
    let (yaml, body) = frontmatter(markdown);
    let heading = body
        .lines()
        .find(|l| l.starts_with("# "))
        .unwrap_or_else(|| panic!("no heading: {markdown}"))
        .to_string();
    (yaml["title"].as_str().unwrap_or("").to_string(), heading)
}

#[test]
fn concurrent_misses_for_one_page_are_converted_once() {
    // A slow origin: the eight requests all arrive while the first is being answered.
    let origin = CountingOrigin::start(|seen| {
        thread::sleep(Duration::from_millis(800));
        (
            200,
            html_headers(&[("cache-control", "max-age=60"), ("etag", "\"v1\"")]),
            page(seen, 1, 20),
        )
    });
    let edge = start(&origin, CACHING_ZONE);
    let answers = herd(&edge, "http://example.com:PORT/herd", 8);
    let (status, first) = &answers[0];
    assert_eq!(*status, 200);
    let (title, heading) = parsed(first);
    assert_eq!(title, "Page", "{first}");
    assert!(
        heading.starts_with("# example.com") && heading.ends_with("/herd version 1"),
        "{first}"
    );
    let (yaml, _) = frontmatter(first);
    let port = edge.addr.port();
    assert_eq!(
        yaml["url"].as_str(),
        Some(format!("http://example.com:{port}/herd").as_str())
    );
    for (status, markdown) in &answers {
        assert_eq!(*status, 200);
        assert_eq!(parsed(markdown), parsed(first));
        assert_eq!(markdown, first, "the same bytes: one conversion");
    }
    assert_eq!(origin.count("/herd"), 1, "{:?}", origin.seen());
    let mut results = wait_results(&edge, 8);
    results.sort();
    assert_eq!(
        results,
        ["coalesced"; 7]
            .into_iter()
            .chain(["miss"])
            .collect::<Vec<_>>(),
        "{}",
        edge.log()
    );
    let zone = ("zone", "test");
    let requests = |result| {
        cache_metric(
            &edge,
            "signpost_markdown_cache_requests_total",
            &[zone, ("result", result)],
        )
    };
    assert_eq!(requests("coalesced"), 7.0);
    assert_eq!(requests("miss"), 1.0);
    assert_eq!(requests("hit"), 0.0);
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_conversions_total",
            &[("outcome", "converted")]
        ),
        1.0
    );
    // Afterwards, plain hits.
    let again = get(&edge, "http://example.com:PORT/herd", &[]);
    assert_eq!(&again.text().unwrap(), first);
    assert_eq!(origin.count("/herd"), 1);
}

/// A slow origin answering every request on its own connection (`Connection: close`) and its
/// own thread, with a page that may not be stored; counts the requests it read.
///
/// Not tiny_http: its thread pool can leave a new connection unserved behind kept-alive ones
/// when several arrive at once (and it never closes a connection of its own accord).
fn no_store_origin(delay: Duration) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let counted = counted.clone();
            thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                thread::sleep(delay);
                let body = "<html><head><title>Page</title></head><body>\
                            <h1>Fresh each time</h1><p>Words of the page.</p></body></html>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                     cache-control: no-store\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (addr, count)
}

#[test]
fn waiters_of_an_answer_that_may_not_be_stored_each_get_their_own() {
    let (addr, asked) = no_store_origin(Duration::from_millis(500));
    let o = addr.to_string();
    let edge = Edge::start(
        "markdown-cache",
        move |l, a| policy(l, a, &o, "", CACHING_ZONE),
        &[],
    );
    let answers = herd(&edge, "http://example.com:PORT/fresh-each-time", 8);
    for (status, markdown) in &answers {
        assert_eq!(*status, 200, "{markdown}");
        assert_eq!(
            parsed(markdown),
            ("Page".to_string(), "# Fresh each time".to_string()),
            "{markdown}"
        );
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        8,
        "nothing stored: each asked the origin"
    );
    let results = wait_results(&edge, 8);
    assert_eq!(results, ["bypass"; 8], "{}", edge.log());
    let zone = ("zone", "test");
    assert_eq!(
        cache_metric(
            &edge,
            "signpost_markdown_cache_requests_total",
            &[zone, ("result", "coalesced")]
        ),
        0.0
    );
    assert_eq!(
        cache_metric(&edge, "signpost_markdown_cache_entries", &[zone]),
        0.0
    );
    // The waiters waited for the leader (500 ms), then asked (500 ms more): not all at once.
    let durations: Vec<f64> = edge
        .log()
        .lines()
        .filter(|l| l.contains("path=/fresh-each-time"))
        .filter_map(|l| l.split("duration_ms=").nth(1))
        .filter_map(|d| d.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(durations.len(), 8);
    assert_eq!(
        durations.iter().filter(|&&ms| ms >= 750.0).count(),
        7,
        "one leader, then seven that waited for it: {durations:?}"
    );
}

/// The edge's member of the answer's `Cache-Status` (RFC 9211), read as the structured-field
/// list it is (RFC 8941, parsed by `sfv`): the last member, which must be the edge's, its
/// parameters as text (`true` for a bare flag).
fn cache_status(r: &reqwest::blocking::Response) -> BTreeMap<String, String> {
    let lines: Vec<&str> = r
        .headers()
        .get_all("cache-status")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    let value = lines.join(", ");
    let list = sfv::Parser::parse_list(value.as_bytes())
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field list: {e}"));
    let Some(sfv::ListEntry::Item(item)) = list.last() else {
        panic!("no item in {value:?}");
    };
    assert_eq!(
        item.bare_item,
        sfv::BareItem::Token("signpost".to_string()),
        "{value:?}"
    );
    item.params
        .iter()
        .map(|(key, v)| {
            let text = match v {
                sfv::BareItem::Integer(i) => i.to_string(),
                sfv::BareItem::Boolean(b) => b.to_string(),
                sfv::BareItem::Token(s) | sfv::BareItem::String(s) => s.clone(),
                other => panic!("{key} is {other:?} in {value:?}"),
            };
            (key.clone(), text)
        })
        .collect()
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every Markdown answer of a caching zone says what the cache did: why the origin was asked
/// (nothing for the URL, another variant, a request that refuses the cache, after an unsafe
/// request dropped the page), whether it was stored and for how long, and a hit's remaining
/// freshness; an answer passed through says the origin was asked and nothing stored.
#[test]
fn cache_status_tells_hits_misses_and_why_the_origin_was_asked() {
    let origin = CountingOrigin::start(|seen| {
        if seen.target == "/data" {
            let json = vec![("content-type".to_string(), "application/json".to_string())];
            return (200, json, b"{}".to_vec());
        }
        (
            200,
            // Ten seconds old when it leaves the origin: stored with 50 of its 60 left.
            html_headers(&[
                ("cache-control", "max-age=60"),
                ("age", "10"),
                ("vary", "X-Lang"),
            ]),
            page(seen, 1, 2),
        )
    });
    let edge = start(&origin, CACHING_ZONE);
    let url = "http://example.com:PORT/cs";
    let started = Instant::now();
    let first = get(&edge, url, &[("x-lang", "fr")]);
    assert_eq!(first.status(), 200);
    assert_eq!(
        cache_status(&first),
        params(&[
            ("fwd", "uri-miss"),
            ("fwd-status", "200"),
            ("stored", "true"),
            ("ttl", "50")
        ])
    );
    let hit = get(&edge, url, &[("x-lang", "fr")]);
    let elapsed = started.elapsed().as_secs();
    let status = cache_status(&hit);
    assert_eq!(
        status.get("hit").map(String::as_str),
        Some("true"),
        "{status:?}"
    );
    assert!(!status.contains_key("fwd"), "{status:?}");
    let ttl: u64 = status["ttl"].parse().unwrap();
    assert!(
        ttl <= 50 && ttl + elapsed + 1 >= 50,
        "ttl {ttl} after {elapsed}s: the stored 50 less the time since"
    );
    let age: u64 = header(&hit, "age").unwrap().parse().unwrap();
    assert_eq!(ttl + age, 60, "ttl and Age add up to max-age");

    let other_variant = get(&edge, url, &[("x-lang", "de")]);
    assert_eq!(cache_status(&other_variant)["fwd"], "vary-miss");
    assert_eq!(cache_status(&other_variant)["stored"], "true");
    assert_eq!(origin.count("/cs"), 2);

    let refused = get(
        &edge,
        url,
        &[("x-lang", "de"), ("cache-control", "no-store")],
    );
    assert_eq!(
        cache_status(&refused),
        params(&[("fwd", "request"), ("fwd-status", "200")]),
        "asked of the origin, not stored"
    );

    // A successful unsafe request to the page drops it: the next agent's GET finds nothing.
    let changed = client(&edge)
        .delete(url.replace("PORT", &edge.addr.port().to_string()))
        .send()
        .unwrap();
    assert_eq!(changed.status(), 200);
    assert!(
        changed.headers().get("cache-status").is_none(),
        "not a Markdown answer"
    );
    let after = get(&edge, url, &[("x-lang", "de")]);
    assert_eq!(cache_status(&after)["fwd"], "uri-miss");
    assert_eq!(origin.count("/cs"), 5);

    // Not HTML: passed through, the origin's status told, nothing stored.
    let data = get(&edge, "http://example.com:PORT/data", &[]);
    assert_eq!(
        header(&data, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(
        cache_status(&data),
        params(&[("fwd", "uri-miss"), ("fwd-status", "200")])
    );
}

/// A stale entry revalidated says so, with the origin's 304; a page that changed meanwhile is
/// converted and stored again; a request that waited for another's conversion is a hit.
#[test]
fn cache_status_tells_a_revalidation() {
    let version = Arc::new(AtomicUsize::new(1));
    let current = version.clone();
    let origin = CountingOrigin::start(move |seen| {
        let v = current.load(Ordering::SeqCst);
        let tag = format!("\"v{v}\"");
        let headers = html_headers(&[("cache-control", "max-age=0"), ("etag", &tag)]);
        if seen.header("if-none-match") == Some(tag.as_str()) {
            return (304, headers[1..].to_vec(), Vec::new());
        }
        (200, headers, page(seen, v, 2))
    });
    let edge = start(&origin, CACHING_ZONE);
    let url = "http://example.com:PORT/re";
    let first = get(&edge, url, &[]);
    let first_status = cache_status(&first);
    assert_eq!(first_status["fwd"], "uri-miss");
    assert_eq!(first_status["stored"], "true");
    let ttl: i64 = first_status["ttl"].parse().unwrap();
    assert!(
        ttl <= 0,
        "stored stale, for its validator: {first_status:?}"
    );
    let tag = header(&first, "etag").unwrap();

    let second = get(&edge, url, &[]);
    let second_status = cache_status(&second);
    assert_eq!(
        (
            second_status["fwd"].as_str(),
            second_status["fwd-status"].as_str(),
            second_status["stored"].as_str()
        ),
        ("stale", "304", "true"),
        "{second_status:?}"
    );
    // The agent's own validator answered from the revalidated entry: a 304 says it too.
    let not_modified = get(&edge, url, &[("if-none-match", &tag)]);
    assert_eq!(not_modified.status(), 304);
    assert_eq!(cache_status(&not_modified)["fwd-status"], "304");

    version.store(2, Ordering::SeqCst);
    let changed = get(&edge, url, &[]);
    let status = cache_status(&changed);
    assert_eq!(
        (
            status["fwd"].as_str(),
            status["fwd-status"].as_str(),
            status["stored"].as_str()
        ),
        ("stale", "200", "true"),
        "{status:?}"
    );
    assert!(changed.text().unwrap().contains("version 2"));
    let seen = origin.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[3].header("if-none-match"), Some("\"v1\""));
}

/// The `Link` values of an answer, one per line as sent.
fn links(r: &reqwest::blocking::Response) -> Vec<String> {
    r.headers()
        .get_all("link")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// A converting zone's HTML pages tell agents of their Markdown, after the origin's own links,
/// and the link leads to it; other answers, and other zones' pages, do not.
#[test]
fn html_pages_of_a_converting_zone_link_to_their_markdown() {
    let answer = |seen: &Seen| -> Answer {
        let preload = ("link", "</style.css>; rel=preload");
        match seen.target.as_str() {
            "/data" => (
                200,
                vec![("content-type".to_string(), "application/json".to_string())],
                b"{}".to_vec(),
            ),
            "/gone" => (404, html_headers(&[]), page(seen, 1, 1)),
            _ => (200, html_headers(&[preload]), page(seen, 1, 2)),
        }
    };
    let origin = CountingOrigin::start(answer);
    let edge = start(&origin, "[zone.markdown]\nenabled = true\n");
    let port = edge.addr.port();
    let browse = |path: &str| {
        client(&edge)
            .get(format!("http://example.com:{port}{path}"))
            .header("accept", "text/html")
            .send()
            .unwrap()
    };
    let html = browse("/docs/a%20b?x=1");
    assert_eq!(html.status(), 200);
    let expected = format!(
        "<http://example.com:{port}/docs/a%20b?x=1>; rel=\"alternate\"; type=\"text/markdown\""
    );
    assert_eq!(
        links(&html),
        ["</style.css>; rel=preload".to_string(), expected.clone()]
    );
    // The link leads to the Markdown, which does not point at itself.
    let target = expected[1..expected.find('>').unwrap()].to_string();
    let markdown = client(&edge)
        .get(target)
        .header("accept", "text/markdown")
        .send()
        .unwrap();
    assert_eq!(
        header(&markdown, "content-type").as_deref(),
        Some("text/markdown; charset=utf-8")
    );
    assert_eq!(links(&markdown), ["</style.css>; rel=preload"]);
    let (yaml, _) = frontmatter(&markdown.text().unwrap());
    assert_eq!(
        yaml["url"].as_str(),
        Some(format!("http://example.com:{port}/docs/a%20b?x=1").as_str())
    );

    assert!(links(&browse("/data")).is_empty(), "not HTML");
    assert!(links(&browse("/gone")).is_empty(), "not a 200");
    let head = client(&edge)
        .head(format!("http://example.com:{port}/page"))
        .send()
        .unwrap();
    assert_eq!(links(&head).len(), 2, "HEAD tells what GET would");
    let deleted = client(&edge)
        .delete(format!("http://example.com:{port}/page"))
        .send()
        .unwrap();
    assert_eq!(
        links(&deleted),
        ["</style.css>; rel=preload"],
        "only a page read"
    );

    // A zone that does not convert, or turns the link off, links nowhere.
    for zone in ["", "[zone.markdown]\nenabled = true\nlink = false\n"] {
        let plain_origin = CountingOrigin::start(answer);
        let plain = start(&plain_origin, zone);
        let page = client(&plain)
            .get(format!("http://example.com:{}/page", plain.addr.port()))
            .send()
            .unwrap();
        assert_eq!(page.status(), 200);
        assert_eq!(links(&page), ["</style.css>; rel=preload"], "{zone}");
    }
}
