//! The operator's voice: error rules on the edge's own refusals and failures and on the origin's
//! errors, read back in JSON, Markdown (frontmatter parsed) and HTML; their precedence; tokens
//! with a hostile Host; a reload that breaks an asset; origin errors reshaped for agents.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

/// An origin that answers what the path asks: `/status/<code>` with an HTML page,
/// `/retry/<code>/<seconds>` with a `Retry-After`, `/empty/<code>` with no body, `/json/<code>`
/// with a JSON error, anything else 200.
struct ErrorOrigin {
    addr: SocketAddr,
    _server: Arc<tiny_http::Server>,
}

impl ErrorOrigin {
    fn start() -> ErrorOrigin {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = server.server_addr().to_ip().unwrap();
        let worker = server.clone();
        thread::spawn(move || {
            for request in worker.incoming_requests() {
                let url = request.url().to_string();
                let parts: Vec<&str> = url.trim_start_matches('/').split('/').collect();
                let code = |i: usize| parts.get(i).and_then(|s| s.parse().ok()).unwrap_or(200);
                let header = |s: &str| s.parse::<tiny_http::Header>().unwrap();
                let html = header("content-type: text/html; charset=utf-8");
                let response = match parts.first().copied() {
                    Some("status") => tiny_http::Response::from_string(
                        "<html><body><h1>Origin says no</h1></body></html>",
                    )
                    .with_status_code(code(1))
                    .with_header(html),
                    Some("retry") => tiny_http::Response::from_string("<p>busy</p>")
                        .with_status_code(code(1))
                        .with_header(html)
                        .with_header(header(&format!(
                            "retry-after: {}",
                            parts.get(2).unwrap_or(&"1")
                        ))),
                    Some("empty") => tiny_http::Response::from_string("").with_status_code(code(1)),
                    Some("json") => tiny_http::Response::from_string(r#"{"error":"origin's own"}"#)
                        .with_status_code(code(1))
                        .with_header(header("content-type: application/json")),
                    _ => tiny_http::Response::from_string("ok").with_status_code(200),
                };
                let _ = request.respond(response.with_header(header("x-origin: yes")));
            }
        });
        ErrorOrigin {
            addr,
            _server: server,
        }
    }
}

const RULES: &str = r##"
[[error_rule]]
id = "global-1015"
expression = 'cf.response.1xxx_code eq 1015'
title = "Global rate limit"

[[error_rule]]
id = "global-1020"
expression = 'cf.response.1xxx_code eq 1020'
title = "Blocked by the shop's rules"
detail = "Request ::RAY_ID:: from ::CLIENT_IP:: was refused (code ::CODE::)."
what_you_should_do = "**Do not retry.** Write to support@shop.example quoting ::RAY_ID::."
json = '{"support": "mailto:support@shop.example?subject=::RAY_ID::"}'
markdown = "# Blocked\n\nQuote ray ::RAY_ID:: to support."
html_file = "pages/blocked.html"

[[error_rule]]
id = "global-52x"
expression = 'http.response.code ge 520 and http.response.code le 527'
status = 503
retry_after = 30
title = "The shop is down for a moment"

[[error_rule]]
id = "geo-1009"
expression = 'cf.response.1xxx_code eq 1009'
title = "Not served in ::GEO::"
detail = "::CLIENT_IP:: in ::GEO:: asked ::ZONE:: (code ::CODE::, ray ::RAY_ID::)."
text = "Not served in ::GEO::. Quote ray ::RAY_ID::."

[[error_rule]]
id = "hostile-content"
expression = 'cf.response.1xxx_code eq 1001 and http.request.uri.path eq "/content"'
retry_after = 9
html = "<!doctype html><title>t</title><h1>::HOST::</h1><p class=all>::HOST:: | ::ZONE:: | ::CLIENT_IP:: | ::GEO:: | ::RAY_ID:: | ::CODE:: | ::RETRY_AFTER::</p>"
markdown = "# ::HOST::\n\n::HOST:: | ::ZONE:: | ::CLIENT_IP:: | ::GEO:: | ::RAY_ID:: | ::CODE:: | ::RETRY_AFTER::\n"
text = "::HOST:: | ::ZONE:: | ::CLIENT_IP:: | ::GEO:: | ::RAY_ID:: | ::CODE:: | ::RETRY_AFTER::"
json = '{"all": "::HOST:: | ::ZONE:: | ::CLIENT_IP:: | ::GEO:: | ::RAY_ID:: | ::CODE:: | ::RETRY_AFTER::"}'

[[error_rule]]
id = "hostile-1001"
expression = 'cf.response.1xxx_code eq 1001'
title = "No site at ::HOST::"
detail = "::HOST:: | ::ZONE:: | ::CLIENT_IP:: | ::GEO:: | ::RAY_ID:: | ::CODE:: | ::RETRY_AFTER::"
what_you_should_do = "**Check the name.** You asked for ::HOST::."
json = '{"asked_for": "::HOST::"}'
"##;

fn rules_policy(
    listen: SocketAddr,
    admin: SocketAddr,
    origin: SocketAddr,
    country_db: &std::path::Path,
) -> String {
    let country_db = country_db.display();
    format!(
        r##"listen = ["{listen}"]
admin = "{admin}"
{RULES}

[client_ip]
trusted_proxies = ["127.0.0.1/32"]

[geo]
country_db = "{country_db}"

[[access_rule]]
id = "no-se"
action = "block"
country = ["SE"]

[[custom_rule]]
id = "no-admin"
action = "block"
expression = 'http.request.uri.path eq "/admin"'

[[rate_limit]]
id = "login"
expression = 'http.request.uri.path eq "/login"'
period = "1m"
requests_per_period = 1

[[custom_rule]]
id = "private"
action = "block"
expression = 'http.request.uri.path eq "/private"'
response = {{ status = 404, title = "Nothing at ::ZONE::", text = "Nothing here." }}

[[rate_limit]]
id = "signup"
expression = 'http.request.uri.path eq "/signup"'
period = "1m"
requests_per_period = 1
response = {{ retry_after = 600, json = '{{"why": "one signup a minute"}}' }}

[[rate_limit]]
id = "burst"
expression = 'http.request.uri.path eq "/burst"'
period = "1m"
requests_per_period = 1
response = {{ title = "Bursts wait a minute" }}

[[zone]]
name = "shop"
hosts = ["example.com"]
origin = "{origin}"

[zone.origin_errors]
structured = true

[[zone.error_rule]]
id = "shop-1015"
expression = 'cf.response.1xxx_code eq 1015'
title = "Slow down at the shop"
retry_after = 45

[[zone.error_rule]]
id = "shop-origin-503"
expression = 'http.response.code eq 503 and cf.response.1xxx_code eq 0 and http.request.uri.path eq "/retry/503/120"'
what_you_should_do = "**Come back in ::RETRY_AFTER:: seconds.**"

[[zone]]
name = "down"
hosts = ["www.example.com"]
origin = "127.0.0.1:9"

[[zone]]
name = "blog"
hosts = ["blog.example.com"]
origin = "{origin}"

[[zone.error_rule]]
id = "blog-1020"
expression = 'cf.response.1xxx_code eq 1020'
status = 451
title = "Blocked at the blog"
detail = "The blog refused ::CLIENT_IP:: (code ::CODE::)."

[[zone]]
name = "docs"
hosts = ["docs.example.com"]
origin = "{origin}"

[zone.markdown]
enabled = true

[zone.origin_errors]
structured = true
"##
    )
}

const BLOCKED_PAGE: &str = "<!doctype html><title>Blocked</title><h1 class=rule>Blocked by the shop</h1><p class=ray>::RAY_ID::</p>";

fn start() -> (ErrorOrigin, Edge) {
    let origin = ErrorOrigin::start();
    let scratch = Scratch::new("error-rules");
    std::fs::create_dir_all(scratch.0.join("pages")).unwrap();
    scratch.write("pages/blocked.html", BLOCKED_PAGE);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (country_db, _) = geo_databases(&scratch.0);
    let config = scratch.write(
        "policy.toml",
        &rules_policy(addr, admin, origin.addr, &country_db),
    );
    let edge = Edge::start_with_file(scratch, config, addr, admin, &[]);
    (origin, edge)
}

fn get(
    edge: &Edge,
    host: &str,
    path: &str,
    accept: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("http://{host}:{}{path}", edge.addr.port());
    let response = client(edge)
        .get(url)
        .header("accept", accept)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().unwrap())
}

/// The catalog's wire title for `code`, as the edge prints it with no policy.
fn signpost_problem_title(code: u16) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(["render", &code.to_string(), "--accept", "application/json"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let body = text.split_once("\n\n").unwrap().1;
    json(body)["title"].as_str().unwrap().to_owned()
}

/// `get` with more request headers.
fn get_with(
    edge: &Edge,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("http://{host}:{}{path}", edge.addr.port());
    let mut request = client(edge).get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().unwrap())
}

/// A Markdown body's blocks as CommonMark reads them: (`h1`, `h2`, `p`, ...) and their text.
fn blocks(markdown: &str) -> Vec<(String, String)> {
    use pulldown_cmark::{Event, Tag, TagEnd};
    let mut out: Vec<(String, String)> = Vec::new();
    for event in pulldown_cmark::Parser::new(markdown) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                out.push((format!("{level}").to_lowercase(), String::new()));
            }
            Event::Start(Tag::Paragraph) => out.push(("p".into(), String::new())),
            Event::Start(Tag::Item) => out.push(("li".into(), String::new())),
            Event::Text(t) | Event::Code(t) => {
                if let Some(last) = out.last_mut() {
                    last.1.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(last) = out.last_mut() {
                    last.1.push(' ');
                }
            }
            Event::Html(h) | Event::InlineHtml(h) => panic!("HTML in the Markdown: {h}"),
            Event::End(TagEnd::Paragraph | TagEnd::Heading(_) | TagEnd::Item) => {}
            _ => {}
        }
    }
    out
}

/// The text of the first `h1` of a Markdown body.
fn markdown_h1(markdown: &str) -> String {
    blocks(markdown)
        .into_iter()
        .find(|(kind, _)| kind == "h1")
        .map(|(_, text)| text)
        .unwrap_or_else(|| panic!("no h1 in {markdown}"))
}

/// The text of the elements `selector` picks in an HTML page.
fn html_text(html: &str, selector: &str) -> String {
    let page = scraper::Html::parse_document(html);
    page.select(&scraper::Selector::parse(selector).unwrap())
        .flat_map(|e| e.text())
        .collect()
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn h1(html: &str) -> String {
    let page = scraper::Html::parse_document(html);
    page.select(&scraper::Selector::parse("h1").unwrap())
        .flat_map(|e| e.text())
        .collect()
}

#[test]
fn a_rule_on_1020_speaks_every_format() {
    let (_origin, edge) = start();
    let (status, headers, body) = get(&edge, "example.com", "/admin", "application/json");
    assert_eq!(status, 403);
    let p = json(&body);
    let ray = headers["cf-ray"].to_str().unwrap();
    assert_eq!(p["error_code"], 1020);
    assert_eq!(p["error_name"], "firewall_rule_blocked");
    assert_eq!(p["ray_id"], ray);
    assert_eq!(p["cloudflare_error"], true);
    assert_eq!(p["title"], "Error 1020: Blocked by the shop's rules");
    assert_eq!(
        p["detail"],
        format!("Request {ray} from 127.0.0.1 was refused (code 1020).")
    );
    assert_eq!(
        p["support"],
        format!("mailto:support@shop.example?subject={ray}")
    );

    let (status, headers, body) = get(&edge, "example.com", "/admin", "text/markdown");
    assert_eq!(status, 403);
    let ray = headers["cf-ray"].to_str().unwrap();
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(1020));
    assert_eq!(meta["ray_id"].as_str(), Some(ray));
    assert_eq!(meta["retryable"].as_bool(), Some(false));
    assert_eq!(
        prose,
        format!("\n# Blocked\n\nQuote ray {ray} to support.\n")
    );
    assert_eq!(
        blocks(&prose),
        [
            ("h1".to_owned(), "Blocked".to_owned()),
            ("p".to_owned(), format!("Quote ray {ray} to support."))
        ]
    );

    let (status, headers, body) = get(&edge, "example.com", "/admin", "text/html");
    assert_eq!(status, 403);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let ray = headers["cf-ray"].to_str().unwrap();
    assert_eq!(h1(&body), "Blocked by the shop");
    assert!(body.contains(&format!("<p class=ray>{ray}</p>")), "{body}");
}

#[test]
fn precedence_zone_rule_then_global_rule_then_default() {
    let (_origin, edge) = start();
    // 1015 on the shop: the zone's rule, not the global one.
    let _ = get(&edge, "example.com", "/login", "application/json");
    let (status, headers, body) = get(&edge, "example.com", "/login", "application/json");
    assert_eq!(status, 429);
    let p = json(&body);
    assert_eq!(p["title"], "Error 1015: Slow down at the shop");
    assert_eq!(p["retry_after"], 45);
    assert_eq!(headers["retry-after"], "45");
    // The test endpoint on the other zone: the global rule.
    let (_, _, body) = get(
        &edge,
        "www.example.com",
        "/cdn-cgi/error/1015",
        "application/json",
    );
    assert_eq!(json(&body)["title"], "Error 1015: Global rate limit");
    // A code no rule names: the default.
    let (status, _, body) = get(
        &edge,
        "example.com",
        "/cdn-cgi/error/1010",
        "application/json",
    );
    assert_eq!(status, 403);
    assert_eq!(
        json(&body)["title"],
        signpost_problem_title(1010),
        "the catalog's own title"
    );
}

#[test]
fn a_rule_on_a_52x_changes_the_status_and_the_wait() {
    let (_origin, edge) = start();
    let (status, headers, body) = get(&edge, "www.example.com", "/", "application/json");
    assert_eq!(status, 503, "{body}");
    let p = json(&body);
    assert_eq!(p["error_code"], 521, "the code stays the edge's");
    assert_eq!(p["status"], 503);
    assert_eq!(p["retry_after"], 30);
    assert_eq!(headers["retry-after"], "30");
    assert_eq!(p["title"], "Error 521: The shop is down for a moment");
    let (status, _, body) = get(&edge, "www.example.com", "/", "text/markdown");
    assert_eq!(status, 503);
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["status"].as_u64(), Some(503));
    assert_eq!(meta["error_code"].as_u64(), Some(521));
    assert!(prose.contains("# Error 521: The shop is down for a moment\n"));
    assert_eq!(
        markdown_h1(&prose),
        "Error 521: The shop is down for a moment"
    );
    let (_, _, body) = get(&edge, "www.example.com", "/", "text/html");
    assert_eq!(h1(&body), "The shop is down for a moment");
}

const HOSTILE: [&str; 8] = [
    "a: b",
    "<script>alert(1)</script>",
    "\"quoted\" 'single'",
    "*alias &anchor",
    "- item",
    "yes",
    "#comment {x} [y](javascript:z)",
    "---",
];

fn ask_raw(edge: &Edge, host: &str, accept: &str) -> RawResponse {
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let request =
        format!("GET / HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");
    raw_exchange(&mut stream, request.as_bytes())
}

#[test]
fn every_token_with_a_hostile_host_reads_back_intact_and_harmless() {
    let (_origin, edge) = start();
    for host in HOSTILE {
        // JSON: every token's value, exactly.
        let r = ask_raw(&edge, host, "application/json");
        assert_eq!(r.status, 409, "{host}: 1001, no zone serves it");
        let p: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{host}: {e}"));
        let ray = r.header("cf-ray").unwrap();
        assert_eq!(p["asked_for"], host);
        assert_eq!(p["title"], format!("Error 1001: No site at {host}"));
        let zone = p["zone"].as_str().unwrap();
        assert_eq!(
            p["detail"],
            format!("{host} | {zone} | 127.0.0.1 |  | {ray} | 1001 | ")
        );
        assert_eq!(p["ray_id"], ray);

        // Markdown: the frontmatter parses with the same keys; the prose keeps its headings.
        let r = ask_raw(&edge, host, "text/markdown");
        let body = String::from_utf8(r.body).unwrap();
        let (meta, prose) = frontmatter(&body);
        let keys: Vec<&str> = meta
            .as_mapping()
            .unwrap()
            .keys()
            .filter_map(|k| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "error_code",
                "error_name",
                "error_category",
                "status",
                "ray_id",
                "timestamp",
                "zone",
                "cloudflare_error",
                "retryable",
                "owner_action_required"
            ],
            "{host}"
        );
        let parser = pulldown_cmark::Parser::new(&prose);
        let mut headings = 0;
        let mut text = String::new();
        let mut in_h1 = false;
        for event in parser {
            match event {
                pulldown_cmark::Event::Start(pulldown_cmark::Tag::Heading { level, .. }) => {
                    headings += 1;
                    in_h1 = level == pulldown_cmark::HeadingLevel::H1;
                }
                pulldown_cmark::Event::End(pulldown_cmark::TagEnd::Heading(_)) => in_h1 = false,
                pulldown_cmark::Event::Text(t) if in_h1 => text.push_str(&t),
                pulldown_cmark::Event::Html(_) | pulldown_cmark::Event::InlineHtml(_) => {
                    panic!("{host}: the host became HTML in the Markdown")
                }
                _ => {}
            }
        }
        assert_eq!(headings, 3, "{host}: {prose}");
        assert_eq!(text, format!("Error 1001: No site at {host}"));

        // HTML: the host is text, never markup.
        let r = ask_raw(&edge, host, "text/html");
        let html = String::from_utf8(r.body).unwrap();
        let page = scraper::Html::parse_document(&html);
        let scripts = page
            .select(&scraper::Selector::parse("script, a").unwrap())
            .count();
        assert_eq!(scripts, 0, "{host}");
        assert_eq!(h1(&html), format!("No site at {host}"));
    }
}

#[test]
fn a_reload_that_breaks_an_asset_keeps_the_old_pages() {
    let (_origin, edge) = start();
    let (_, _, before) = get(&edge, "example.com", "/admin", "text/html");
    assert_eq!(h1(&before), "Blocked by the shop");
    // The asset is gone: the policy no longer loads, the old one keeps serving.
    let dir = edge.config.parent().unwrap().to_path_buf();
    std::fs::remove_file(dir.join("pages/blocked.html")).unwrap();
    edge.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = admin_get(&edge, "/metrics");
        if metric(
            &text,
            "signpost_policy_reloads_total",
            &[("outcome", "rejected")],
        ) == Some(1.0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "the reload was not rejected");
        thread::sleep(Duration::from_millis(20));
    }
    let log = edge.log();
    assert!(
        log.contains("cannot read `html_file` `pages/blocked.html`"),
        "{log}"
    );
    let (status, _, after) = get(&edge, "example.com", "/admin", "text/html");
    assert_eq!(status, 403);
    assert_eq!(
        h1(&after),
        "Blocked by the shop",
        "the old page still serves"
    );
}

#[test]
fn an_origin_503_with_retry_after_is_a_retryable_problem() {
    let (_origin, edge) = start();
    let (status, headers, body) = get(&edge, "example.com", "/retry/503/120", "application/json");
    assert_eq!(status, 503);
    assert_eq!(headers["content-type"], "application/json; charset=utf-8");
    assert_eq!(headers["retry-after"], "120");
    assert_eq!(
        headers["x-origin"], "yes",
        "the origin's own headers are kept"
    );
    assert_eq!(headers["content-length"], body.len().to_string().as_str());
    let p = json(&body);
    assert_eq!(p["status"], 503);
    assert_eq!(p["error_code"], 503);
    assert_eq!(p["cloudflare_error"], false);
    assert_eq!(p["source"], "origin");
    assert_eq!(p["retryable"], true);
    assert_eq!(p["retry_after"], 120);
    assert_eq!(p["zone"], "example.com");
    assert_eq!(p["ray_id"], headers["cf-ray"].to_str().unwrap());
    // The zone's rule on the origin's 503 speaks too.
    assert_eq!(p["what_you_should_do"], "**Come back in 120 seconds.**");
    // Markdown, another path: no rule, the catalog's words.
    let (status, _, body) = get(&edge, "example.com", "/retry/503/7", "text/markdown");
    assert_eq!(status, 503);
    let (meta, _) = frontmatter(&body);
    assert_eq!(meta["retry_after"].as_u64(), Some(7));
    assert_eq!(meta["source"].as_str(), Some("origin"));
    assert_eq!(meta["cloudflare_error"].as_bool(), Some(false));
}

#[test]
fn origin_404_and_empty_500_are_problems_json_and_browsers_pass_through() {
    let (_origin, edge) = start();
    let (status, headers, body) = get(&edge, "example.com", "/status/404", "text/markdown");
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "text/markdown; charset=utf-8");
    let (meta, _) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(404));
    assert_eq!(meta["error_name"].as_str(), Some("origin_not_found"));
    assert_eq!(meta["retryable"].as_bool(), Some(false));
    assert!(headers.get("retry-after").is_none());

    let (status, _, body) = get(
        &edge,
        "example.com",
        "/empty/500",
        "application/problem+json",
    );
    assert_eq!(status, 500);
    let p = json(&body);
    assert_eq!(
        (p["error_code"].clone(), p["retryable"].clone()),
        (500.into(), false.into())
    );

    // The origin's own JSON passes untouched.
    let (status, headers, body) = get(&edge, "example.com", "/json/500", "application/json");
    assert_eq!(status, 500);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body, r#"{"error":"origin's own"}"#);

    // A browser gets the origin's bytes.
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let (status, headers, body) = get(&edge, "example.com", "/status/404", browser);
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(body, "<html><body><h1>Origin says no</h1></body></html>");

    // The connection that carried a reshaped error carries the next request.
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let two = "GET /status/404 HTTP/1.1\r\nHost: example.com\r\nAccept: application/json\r\n\r\n\
               GET /ok HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n";
    let responses = {
        use std::io::Write;
        stream.write_all(two.as_bytes()).unwrap();
        read_responses(&mut stream, 2)
    };
    assert_eq!(responses[0].status, 404);
    assert_eq!(responses[1].status, 200);
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

#[test]
fn head_gets_the_problem_head_without_a_body() {
    let (_origin, edge) = start();
    let (_, _, get_body) = get(&edge, "example.com", "/retry/503/120", "application/json");
    let response = client(&edge)
        .head(format!(
            "http://example.com:{}/retry/503/120",
            edge.addr.port()
        ))
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/json; charset=utf-8");
    assert_eq!(headers["retry-after"], "120");
    let length: usize = headers["content-length"].to_str().unwrap().parse().unwrap();
    // The same problem, up to its ray id and time: the same length.
    assert_eq!(length, get_body.len());
    assert!(response.bytes().unwrap().is_empty());
}

#[test]
fn render_prints_what_the_edge_answers() {
    let (_origin, edge) = start();
    let (status, headers, served) = get(&edge, "example.com", "/admin", "application/json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args([
            "render",
            "1020",
            "--accept",
            "application/json",
            "--host",
            "example.com",
        ])
        .args(["--path", "/admin", "--client-ip", "127.0.0.1", "--config"])
        .arg(&edge.config)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (head, rendered) = stdout.split_once("\n\n").unwrap();
    assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
    // The same answer but for the occurrence's ray id and time.
    let mut served = json(&served);
    let mut rendered = json(rendered);
    let served_ray = headers["cf-ray"].to_str().unwrap().to_owned();
    let rendered_ray = rendered["ray_id"].as_str().unwrap().to_owned();
    for p in [&mut served, &mut rendered] {
        p["timestamp"] = Value::Null;
    }
    let rendered = rendered.to_string().replace(&rendered_ray, &served_ray);
    assert_eq!(rendered, served.to_string());
}

#[test]
fn a_rules_own_response_speaks_before_the_error_rules() {
    let (_origin, edge) = start();
    // A WAF rule's response: its status and text, the contract's members kept.
    let (status, _, body) = get(&edge, "example.com", "/private", "application/json");
    assert_eq!(status, 404);
    let p = json(&body);
    assert_eq!(p["error_code"], 1020);
    assert_eq!(p["status"], 404);
    assert_eq!(p["title"], "Error 1020: Nothing at example.com");
    let (status, _, body) = get(&edge, "example.com", "/private", "text/markdown");
    assert_eq!(status, 404);
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(1020));
    assert_eq!(prose, "\nNothing here\\.\n");
    // A rate limit's response beats the zone's error rule on 1015.
    let _ = get(&edge, "example.com", "/signup", "application/json");
    let (status, headers, body) = get(&edge, "example.com", "/signup", "application/json");
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "600");
    let p = json(&body);
    assert_eq!(p["why"], "one signup a minute");
    assert_eq!(p["retry_after"], 600);
    assert_eq!(
        p["title"], "Error 1015: You are being rate limited",
        "not the zone's rule"
    );
}

#[test]
fn a_rules_text_is_its_own_plain_answer() {
    let (_origin, edge) = start();
    // A rule's own response with `text`: a client that asks for plain text gets that text.
    let (status, headers, body) = get(&edge, "example.com", "/private", "text/plain");
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(headers["content-length"], body.len().to_string().as_str());
    assert_eq!(headers["vary"], "Accept");
    assert!(headers.contains_key("cf-ray"));
    assert_eq!(body, "Nothing here.\n");
    // Ranked first it wins; `text/*` stays the contract's Markdown.
    let (_, headers, body) = get(
        &edge,
        "example.com",
        "/private",
        "text/plain, text/markdown",
    );
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(body, "Nothing here.\n");
    let (_, headers, body) = get(&edge, "example.com", "/private", "text/*");
    assert_eq!(headers["content-type"], "text/markdown; charset=utf-8");
    let (meta, _) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(1020));
    // An error rule's text, tokens filled in.
    let (status, headers, body) = get_with(
        &edge,
        "example.com",
        "/",
        &[
            ("accept", "text/plain"),
            ("x-forwarded-for", "89.160.20.112"),
        ],
    );
    assert_eq!(status, 403);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    let ray = headers["cf-ray"].to_str().unwrap();
    assert_eq!(body, format!("Not served in SE. Quote ray {ray}.\n"));
    // A rule without `text` has no plain answer: plain text gets the contract's HTML.
    let (status, headers, body) = get(&edge, "example.com", "/admin", "text/plain");
    assert_eq!(status, 403);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(h1(&body), "Blocked by the shop");
}

#[test]
fn a_rule_on_1009_speaks_every_format_with_the_clients_country() {
    let (_origin, edge) = start();
    let from_se = |accept: &str| {
        get_with(
            &edge,
            "example.com",
            "/",
            &[("accept", accept), ("x-forwarded-for", "89.160.20.112")],
        )
    };
    let (status, headers, body) = from_se("application/json");
    assert_eq!(status, 403);
    let ray = headers["cf-ray"].to_str().unwrap().to_owned();
    let detail = format!("89.160.20.112 in SE asked example.com (code 1009, ray {ray}).");
    let p = json(&body);
    assert_eq!(p["error_code"], 1009);
    assert_eq!(p["error_name"], "country_banned");
    assert_eq!(p["title"], "Error 1009: Not served in SE");
    assert_eq!(p["detail"], detail);

    let (status, headers, body) = from_se("text/markdown");
    assert_eq!(status, 403);
    let ray = headers["cf-ray"].to_str().unwrap().to_owned();
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(1009));
    assert_eq!(meta["ray_id"].as_str(), Some(ray.as_str()));
    // The rule's text is the Markdown body, read back literally.
    assert_eq!(
        blocks(&prose),
        [(
            "p".to_owned(),
            format!("Not served in SE. Quote ray {ray}.")
        )]
    );

    let (status, headers, body) = from_se("text/html");
    assert_eq!(status, 403);
    let ray = headers["cf-ray"].to_str().unwrap().to_owned();
    assert_eq!(h1(&body), "Not served in SE");
    assert_eq!(
        html_text(&body, "section[aria-labelledby=happened] p"),
        format!("89.160.20.112 in SE asked example.com (code 1009, ray {ray}).")
    );

    // Plain text, which the rule's `text` answers too.
    let (status, headers, body) = from_se("text/plain");
    assert_eq!(status, 403);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    let ray = headers["cf-ray"].to_str().unwrap().to_owned();
    assert_eq!(body, format!("Not served in SE. Quote ray {ray}.\n"));
}

#[test]
fn precedence_holds_in_every_format() {
    let (_origin, edge) = start();
    // Spend the one request a minute of each limit.
    let _ = get(&edge, "example.com", "/burst", "application/json");
    let _ = get(&edge, "example.com", "/login", "application/json");
    // (host, path, title): a rule's own response, the zone's rule, the global rule, the default.
    let default_1010 = signpost_problem_title(1010);
    let default_1010 = default_1010.trim_start_matches("Error 1010: ");
    let levels = [
        ("example.com", "/burst", "Bursts wait a minute"),
        ("example.com", "/login", "Slow down at the shop"),
        (
            "www.example.com",
            "/cdn-cgi/error/1015",
            "Global rate limit",
        ),
        ("example.com", "/cdn-cgi/error/1010", default_1010),
    ];
    for (host, path, title) in levels {
        let code = if path.ends_with("1010") { 1010 } else { 1015 };
        let wire_title = format!("Error {code}: {title}");
        let (_, _, body) = get(&edge, host, path, "application/json");
        assert_eq!(json(&body)["title"], wire_title.as_str(), "{host}{path}");
        let (_, _, body) = get(&edge, host, path, "text/markdown");
        let (meta, prose) = frontmatter(&body);
        assert_eq!(meta["error_code"].as_u64(), Some(code), "{host}{path}");
        assert_eq!(markdown_h1(&prose), wire_title, "{host}{path}");
        let (_, _, body) = get(&edge, host, path, "text/html");
        assert_eq!(h1(&body), title, "{host}{path}");
    }
}

/// The raw response to `GET <path>` with a Host header that a client library would refuse.
fn ask_raw_path(edge: &Edge, host: &str, path: &str, accept: &str) -> RawResponse {
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    raw_exchange(&mut stream, request.as_bytes())
}

#[test]
fn every_token_in_every_kind_of_content_stays_in_its_place() {
    let (_origin, edge) = start();
    let ray_of = |r: &RawResponse| r.header("cf-ray").unwrap().to_owned();
    for host in HOSTILE {
        // JSON content: the values read back exactly.
        let r = ask_raw_path(&edge, host, "/content", "application/json");
        assert_eq!(r.status, 409, "{host}");
        let p: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{host}: {e}"));
        let ray = ray_of(&r);
        let zone = p["zone"].as_str().unwrap().to_owned();
        let all = format!("{host} | {zone} | 127.0.0.1 |  | {ray} | 1001 | 9");
        assert_eq!(p["all"], all.as_str(), "{host}");
        assert_eq!(r.header("retry-after"), Some("9"));

        // Markdown content: a heading and a paragraph, each the values as text, nothing more.
        let r = ask_raw_path(&edge, host, "/content", "text/markdown");
        let ray = ray_of(&r);
        let all = format!("{host} | {zone} | 127.0.0.1 |  | {ray} | 1001 | 9");
        let body = String::from_utf8(r.body).unwrap();
        let (meta, prose) = frontmatter(&body);
        assert_eq!(meta["retry_after"].as_u64(), Some(9), "{host}");
        assert_eq!(
            blocks(&prose),
            [("h1".to_owned(), host.to_owned()), ("p".to_owned(), all)],
            "{host}: {prose}"
        );

        // HTML content: the values are text, never markup.
        let r = ask_raw_path(&edge, host, "/content", "text/html");
        let ray = ray_of(&r);
        let all = format!("{host} | {zone} | 127.0.0.1 |  | {ray} | 1001 | 9");
        let html = String::from_utf8(r.body).unwrap();
        assert_eq!(h1(&html), host);
        assert_eq!(html_text(&html, "p.all"), all, "{host}");
        assert_eq!(html_text(&html, "script, a, img"), "", "{host}");
        let page = scraper::Html::parse_document(&html);
        let elements = page.select(&scraper::Selector::parse("*").unwrap()).count();
        // html, head, title, body, h1, p: the operator's page and nothing the host added.
        assert_eq!(elements, 6, "{host}: {html}");

        // Plain text: the values as they are, on one line.
        let r = ask_raw_path(&edge, host, "/content", "text/plain");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        let ray = ray_of(&r);
        let all = format!("{host} | {zone} | 127.0.0.1 |  | {ray} | 1001 | 9");
        assert_eq!(String::from_utf8(r.body).unwrap(), format!("{all}\n"));
    }
}

#[test]
fn a_reload_with_an_oversized_asset_keeps_the_old_pages() {
    let (_origin, edge) = start();
    let dir = edge.config.parent().unwrap().to_path_buf();
    // One byte over Cloudflare's 1.5 MB for an error page asset.
    let big = format!("<p>{}</p>", "x".repeat(1536 * 1024));
    std::fs::write(dir.join("pages/blocked.html"), big).unwrap();
    edge.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(
        &admin_get(&edge, "/metrics").1,
        "signpost_policy_reloads_total",
        &[("outcome", "rejected")],
    ) != Some(1.0)
    {
        assert!(Instant::now() < deadline, "the reload was not rejected");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        edge.log().contains("is over 1572864 bytes"),
        "{}",
        edge.log()
    );
    for accept in ["text/html", "application/json", "text/markdown"] {
        let (status, _, body) = get(&edge, "example.com", "/admin", accept);
        assert_eq!(status, 403);
        match accept {
            "text/html" => assert_eq!(h1(&body), "Blocked by the shop"),
            "application/json" => assert_eq!(
                json(&body)["title"],
                "Error 1020: Blocked by the shop's rules"
            ),
            _ => assert_eq!(markdown_h1(&frontmatter(&body).1), "Blocked"),
        }
    }
}

#[test]
fn origin_errors_on_a_converting_zone_are_problems_for_markdown_agents() {
    let (_origin, edge) = start();
    let host = "docs.example.com";
    // A 503 with Retry-After: the problem, in Markdown, with the origin's wait.
    let (status, headers, body) = get(&edge, host, "/retry/503/120", "text/markdown");
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers["content-type"], "text/markdown; charset=utf-8");
    assert_eq!(headers["retry-after"], "120");
    assert_eq!(
        headers["x-origin"], "yes",
        "the origin's own headers are kept"
    );
    assert_eq!(headers["content-length"], body.len().to_string().as_str());
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(503));
    assert_eq!(meta["source"].as_str(), Some("origin"));
    assert_eq!(meta["cloudflare_error"].as_bool(), Some(false));
    assert_eq!(meta["retry_after"].as_u64(), Some(120));
    assert_eq!(meta["zone"].as_str(), Some(host));
    assert_eq!(meta["ray_id"].as_str(), headers["cf-ray"].to_str().ok());
    assert!(markdown_h1(&prose).starts_with("Error 503: "), "{prose}");
    // A 404 and an empty 500: problems too, not retryable.
    let (status, _, body) = get(&edge, host, "/status/404", "text/markdown");
    assert_eq!(status, 404);
    let (meta, _) = frontmatter(&body);
    assert_eq!(meta["error_name"].as_str(), Some("origin_not_found"));
    assert_eq!(meta["retryable"].as_bool(), Some(false));
    let (status, _, body) = get(&edge, host, "/empty/500", "text/markdown");
    assert_eq!(status, 500);
    assert_eq!(frontmatter(&body).0["error_code"].as_u64(), Some(500));
    // The origin's JSON error passes through untouched.
    let (status, headers, body) = get(&edge, host, "/json/500", "text/markdown");
    assert_eq!(status, 500);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body, r#"{"error":"origin's own"}"#);
    // A browser gets the origin's page.
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let (status, _, body) = get(&edge, host, "/status/404", browser);
    assert_eq!(status, 404);
    assert_eq!(body, "<html><body><h1>Origin says no</h1></body></html>");
    // A page that is no error is still converted.
    let (status, headers, body) = get(&edge, host, "/status/200", "text/markdown");
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/markdown; charset=utf-8");
    assert_eq!(markdown_h1(&body), "Origin says no");
    // HEAD: the problem's head, no body, its length what a GET of the same request would
    // send. Each request has its own ray id, and one that reads as a YAML number is quoted
    // (two bytes more), so the GET's length is taken with the HEAD's ray id in its place.
    let (_, get_headers, get_body) = get(&edge, host, "/retry/503/120", "text/markdown");
    let response = client(&edge)
        .head(format!("http://{host}:{}/retry/503/120", edge.addr.port()))
        .header("accept", "text/markdown")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers()["retry-after"], "120");
    let length: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let yaml_len = |ray: &str| {
        let mut out = String::new();
        signpost_problem::yaml_scalar(&mut out, ray);
        out.len()
    };
    let get_ray = get_headers["cf-ray"].to_str().unwrap();
    let head_ray = response.headers()["cf-ray"].to_str().unwrap();
    assert_eq!(
        length + yaml_len(get_ray),
        get_body.len() + yaml_len(head_ray),
        "rays {get_ray} and {head_ray}"
    );
    assert!(response.bytes().unwrap().is_empty());
    // The connection that carried the problem carries the next request.
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let two = "GET /status/404 HTTP/1.1\r\nHost: docs.example.com\r\nAccept: text/markdown\r\n\r\n\
               GET /ok HTTP/1.1\r\nHost: docs.example.com\r\nConnection: close\r\n\r\n";
    let responses = {
        use std::io::Write;
        stream.write_all(two.as_bytes()).unwrap();
        read_responses(&mut stream, 2)
    };
    assert_eq!(responses[0].status, 404);
    assert_eq!(responses[1].status, 200);
}

#[test]
fn an_origin_503_under_a_rule_speaks_every_format() {
    let (_origin, edge) = start();
    let guidance = "Come back in 120 seconds.";
    let (status, _, body) = get(&edge, "example.com", "/retry/503/120", "application/json");
    assert_eq!(status, 503);
    assert_eq!(json(&body)["what_you_should_do"], format!("**{guidance}**"));
    let (status, _, body) = get(&edge, "example.com", "/retry/503/120", "text/markdown");
    assert_eq!(status, 503);
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["source"].as_str(), Some("origin"));
    let blocks = blocks(&prose);
    let at = blocks
        .iter()
        .position(|(kind, text)| kind == "h2" && text == "What You Should Do")
        .unwrap_or_else(|| panic!("{prose}"));
    assert_eq!(blocks[at + 1], ("p".to_owned(), guidance.to_owned()));
    // A browser too: the rule matches the origin's error, so the edge's page speaks for it.
    let (status, headers, body) = get(&edge, "example.com", "/retry/503/120", "text/html");
    assert_eq!(status, 503);
    assert_eq!(headers["retry-after"], "120");
    assert_eq!(
        html_text(&body, "section[aria-labelledby=todo] p"),
        guidance
    );
}

/// `signpost trace --json` with the test's policy.
fn trace(edge: &Edge, args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(["trace", "--json", "--config"])
        .arg(&edge.config)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&stdout)
}

#[test]
fn trace_shows_the_answer_the_error_rule_makes() {
    let (_origin, edge) = start();
    // An error rule with an asset: the rule, the status, the page.
    let t = trace(
        &edge,
        &[
            "--url",
            "http://example.com/admin",
            "-H",
            "Accept: text/html",
        ],
    );
    assert_eq!(t["rule_id"], "no-admin");
    assert_eq!(t["error_rule"]["id"], "global-1020");
    assert_eq!(t["error_rule"]["status"], 403);
    assert_eq!(t["error_rule"]["format"], "html");
    assert_eq!(t["error_rule"]["content"], "html");
    let body = t["response"]["body"].as_str().unwrap();
    assert_eq!(h1(body), "Blocked by the shop");
    // A rule's own response with plain text, its status.
    let t = trace(
        &edge,
        &[
            "--url",
            "http://example.com/private",
            "-H",
            "Accept: text/plain",
        ],
    );
    assert_eq!(t["status_code"], 404);
    assert_eq!(t["error_rule"]["id"], "private");
    assert_eq!(t["error_rule"]["content"], "text");
    assert_eq!(t["response"]["body"], "Nothing here.\n");
    let headers = t["response"]["headers"].as_array().unwrap();
    assert!(headers.contains(&serde_json::json!([
        "content-type",
        "text/plain; charset=utf-8"
    ])));
    // The zone's rule on a 52x the trace does not reach: none. A 1009 with its country.
    let t = trace(
        &edge,
        &[
            "--url",
            "http://example.com/",
            "--ip",
            "89.160.20.112",
            "-H",
            "Accept: application/json",
        ],
    );
    assert_eq!(t["error_rule"]["id"], "geo-1009");
    assert_eq!(t["error_rule"]["content"], "contract");
    let p = json(t["response"]["body"].as_str().unwrap());
    assert_eq!(p["title"], "Error 1009: Not served in SE");
    // A refusal no rule speaks for: no error rule, the default.
    let t = trace(
        &edge,
        &[
            "--url",
            "http://example.com/cdn-cgi/error/1010",
            "-H",
            "Accept: application/json",
        ],
    );
    assert!(t["error_rule"].is_null(), "{t:#}");
    // The text trace names it too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(["trace", "--config"])
        .arg(&edge.config)
        .args([
            "--url",
            "http://example.com/private",
            "-H",
            "Accept: text/plain",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("error rule: \"private\" (status 404, text answered with the rule's text)"),
        "{text}"
    );
    // The admin listener's live trace: the same.
    let response = reqwest::blocking::Client::new()
        .post(format!("http://{}/trace", edge.admin))
        .body(
            serde_json::json!({
                "url": "http://example.com/admin",
                "headers": ["Accept: application/json"],
            })
            .to_string(),
        )
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let t = json(&response.text().unwrap());
    assert_eq!(t["error_rule"]["id"], "global-1020");
    assert_eq!(t["error_rule"]["content"], "json");
    let p = json(t["response"]["body"].as_str().unwrap());
    assert_eq!(p["title"], "Error 1020: Blocked by the shop's rules");
}

/// A problem in JSON without what differs between two occurrences of the same answer: its ray
/// id (wherever it appears) and its time.
fn occurrence_free(body: &str, ray: &str) -> String {
    let mut p = json(body);
    p["timestamp"] = Value::Null;
    p.to_string().replace(ray, "RAY")
}

#[test]
fn the_error_test_endpoint_speaks_with_the_zone_the_host_selects() {
    let (_origin, edge) = start();
    // A real 1020 on the blog (the global custom rule `no-admin`): the zone's rule speaks.
    let (status, headers, body) = get(&edge, "blog.example.com", "/admin", "application/json");
    assert_eq!(status, 451, "{body}");
    let real_ray = headers["cf-ray"].to_str().unwrap().to_owned();
    let real = json(&body);
    assert_eq!(real["title"], "Error 1020: Blocked at the blog");
    assert_eq!(real["detail"], "The blog refused 127.0.0.1 (code 1020).");
    let real = occurrence_free(&body, &real_ray);
    // The test endpoint on the same host: the same answer, status, title and detail.
    let (status, headers, body) = get(
        &edge,
        "blog.example.com",
        "/cdn-cgi/error/1020",
        "application/json",
    );
    assert_eq!(status, 451, "{body}");
    let ray = headers["cf-ray"].to_str().unwrap().to_owned();
    assert_eq!(occurrence_free(&body, &ray), real);
    // `signpost render --host` of the same: the same again.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(["render", "1020", "--accept", "application/json"])
        .args(["--host", "blog.example.com", "--client-ip", "127.0.0.1"])
        .arg("--config")
        .arg(&edge.config)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (head, rendered) = stdout.split_once("\n\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 451 "), "{head}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("error rule: blog-1020"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered_ray = json(rendered)["ray_id"].as_str().unwrap().to_owned();
    assert_eq!(occurrence_free(rendered, &rendered_ray), real);
    // A trace of the endpoint names the zone's rule and shows the same answer.
    let t = trace(
        &edge,
        &[
            "--url",
            "http://blog.example.com/cdn-cgi/error/1020",
            "--ip",
            "127.0.0.1",
            "-H",
            "Accept: application/json",
        ],
    );
    assert_eq!(t["stopped_at"], "error_page", "{t:#}");
    assert_eq!(t["error_rule"]["id"], "blog-1020", "{t:#}");
    assert_eq!(t["status_code"], 451);
    let body = t["response"]["body"].as_str().unwrap();
    let traced_ray = json(body)["ray_id"].as_str().unwrap().to_owned();
    assert_eq!(occurrence_free(body, &traced_ray), real);

    // The endpoint answers where the policy would refuse (a client from a country the access
    // rules block), still dressed by the zone, for the client `[client_ip]` reads.
    let (status, _, body) = get_with(
        &edge,
        "blog.example.com",
        "/",
        &[
            ("accept", "application/json"),
            ("x-forwarded-for", "89.160.20.112"),
        ],
    );
    assert_eq!(
        (status, json(&body)["error_code"].as_u64()),
        (403, Some(1009))
    );
    let (status, _, body) = get_with(
        &edge,
        "blog.example.com",
        "/cdn-cgi/error/1020",
        &[
            ("accept", "application/json"),
            ("x-forwarded-for", "89.160.20.112"),
        ],
    );
    assert_eq!(status, 451, "{body}");
    assert_eq!(
        json(&body)["detail"],
        "The blog refused 89.160.20.112 (code 1020)."
    );
    // A host whose zone has no rule for the code: the global rule, as before.
    let (status, _, body) = get(
        &edge,
        "example.com",
        "/cdn-cgi/error/1020",
        "application/json",
    );
    assert_eq!(status, 403);
    assert_eq!(
        json(&body)["title"],
        "Error 1020: Blocked by the shop's rules"
    );
}
