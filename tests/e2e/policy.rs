//! Each kind of rule's code through the running edge, with clients placed where the databases say by a
//! trusted proxy's `X-Forwarded-For`. The databases are written by the test (`geo_databases`:
//! 81.2.69.142 is GB, 89.160.20.112 is SE, 1.128.0.1 is AS1221, as in MaxMind's test files), so
//! every check runs on every machine; `crates/policy` tests the real files.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// The edge under the test policy, and the directory holding its databases (keep it alive).
fn edge(origin: &EchoOrigin) -> (Edge, Scratch) {
    let dbs = Scratch::new("geo");
    let (country, asn) = geo_databases(&dbs.0);
    let o = origin.addr.to_string();
    let top = format!(
        r#"
[client_ip]
trusted_proxies = ["127.0.0.1/32"]

[geo]
country_db = "{country}"
asn_db = "{asn}"

[[access_rule]]
id = "office"
action = "allow"
ip = ["198.51.100.7"]

[[access_rule]]
id = "blocked-ip"
action = "block"
ip = ["203.0.113.0/24"]

[[access_rule]]
id = "blocked-asn"
action = "block"
asn = [1221]

[[access_rule]]
id = "blocked-country"
action = "block"
country = ["SE"]

[browser_check]
id = "browser"
block_empty_user_agent = true
block_user_agents = ["(?i)sqlmap"]

[hotlink]
id = "hotlink"
extensions = ["png"]

[[legal_rule]]
id = "takedown"
expression = 'http.request.uri.path eq "/disputed" and ip.src.country eq "GB"'

[[custom_rule]]
id = "wordpress"
action = "block"
expression = 'http.request.uri.path matches "^/wp-(admin|login)" and not ip.src in {{10.0.0.0/8 192.168.0.0/16}}'

[[rate_limit]]
id = "burst"
expression = 'http.request.uri.path eq "/limited"'
characteristics = ["ip.src"]
period = "2s"
requests_per_period = 2

[[rate_limit]]
id = "hourly"
expression = 'http.request.uri.path eq "/hourly"'
characteristics = ["ip.src"]
period = "1h"
requests_per_period = 2
"#,
        country = country.display(),
        asn = asn.display(),
    );
    let edge = Edge::start("policy", |l, a| policy(l, a, &o, &top, ""), &[]);
    (edge, dbs)
}

/// A request as if from `client` (through the trusted proxy at 127.0.0.1), in JSON and in
/// Markdown; both must carry `code`, and the JSON status must equal the HTTP status.
fn refused(
    edge: &Edge,
    client: &str,
    path: &str,
    headers: &[(&str, &str)],
    code: u16,
    status: u16,
) {
    let http = reqwest::blocking::Client::builder()
        .resolve("example.com", edge.addr)
        .build()
        .unwrap();
    for accept in ["application/json", "text/markdown"] {
        let mut request = http
            .get(edge.url(path))
            .header("x-forwarded-for", client)
            .header("accept", accept);
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
        {
            request = request.header("user-agent", "e2e-test/1.0");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
        assert_eq!(
            response.status().as_u16(),
            status,
            "{client} {path} ({accept})"
        );
        let body = response.text().unwrap();
        let found = if accept == "application/json" {
            let problem: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(problem["status"], status);
            problem["error_code"].as_u64()
        } else {
            frontmatter(&body).0["error_code"].as_u64()
        };
        assert_eq!(
            found,
            Some(u64::from(code)),
            "{client} {path} ({accept}): {body}"
        );
    }
}

fn allowed(edge: &Edge, client: &str, path: &str, headers: &[(&str, &str)]) {
    let http = reqwest::blocking::Client::builder()
        .resolve("example.com", edge.addr)
        .build()
        .unwrap();
    let mut request = http
        .get(edge.url(path))
        .header("x-forwarded-for", client)
        .header("user-agent", "e2e-test/1.0");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().unwrap();
    assert_eq!(
        response.status().as_u16(),
        200,
        "{client} {path} should reach the origin"
    );
    assert_eq!(response.headers()["x-origin"], "echo");
}

/// Each kind of rule refuses with its code: access rules (IP, ASN, country), the browser
/// check, hotlink protection, legal rules, custom rules and rate limits. (Host routing's 1001
/// and 1003 are in proxy.rs, TLS's 1013 in tls.rs, crawl control's codes in crawl.rs.)
#[test]
fn every_kind_of_rule_refuses_with_its_code_through_the_edge() {
    let origin = EchoOrigin::start();
    let (edge, _dbs) = edge(&origin);

    refused(&edge, "203.0.113.5", "/", &[], 1006, 403);
    refused(&edge, "1.128.0.1", "/", &[], 1005, 403);
    refused(&edge, "89.160.20.112", "/", &[], 1009, 403);
    refused(&edge, "192.0.2.10", "/", &[("user-agent", "")], 1010, 403);
    refused(
        &edge,
        "192.0.2.10",
        "/",
        &[("user-agent", "sqlmap/1.7")],
        1010,
        403,
    );
    refused(
        &edge,
        "192.0.2.10",
        "/img/logo.png",
        &[("referer", "https://elsewhere.test/page")],
        1011,
        403,
    );
    refused(&edge, "81.2.69.142", "/disputed", &[], 1026, 451);
    refused(&edge, "192.0.2.10", "/wp-login.php", &[], 1020, 403);
    // Two requests an hour, then 1015 (an hour: no wall-clock window can reopen it).
    allowed(&edge, "192.0.2.11", "/hourly", &[]);
    allowed(&edge, "192.0.2.11", "/hourly", &[]);
    refused(&edge, "192.0.2.11", "/hourly", &[], 1015, 429);

    allowed(&edge, "192.0.2.10", "/", &[]);
    allowed(
        &edge,
        "192.0.2.10",
        "/img/logo.png",
        &[("referer", "http://example.com/page")],
    );
    // The legal rule applies to GB only: elsewhere the disputed page is served.
    allowed(&edge, "192.0.2.10", "/disputed", &[]);
}

#[test]
fn allow_rules_skip_blocks_and_custom_rules() {
    let origin = EchoOrigin::start();
    let (edge, _dbs) = edge(&origin);
    allowed(&edge, "198.51.100.7", "/wp-login.php", &[]);
}

#[test]
fn the_deciding_rule_is_logged() {
    let origin = EchoOrigin::start();
    let (edge, _dbs) = edge(&origin);
    refused(&edge, "89.160.20.112", "/", &[], 1009, 403);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !edge.log().contains("blocked-country") {
        assert!(
            std::time::Instant::now() < deadline,
            "no log line names the rule:\n{}",
            edge.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_spoofed_forwarded_for_from_an_untrusted_peer_changes_nothing() {
    let origin = EchoOrigin::start();
    let (edge, _dbs) = edge(&origin);
    // 127.0.0.2 is not a trusted proxy: its X-Forwarded-For claiming a blocked country is ignored.
    let untrusted = reqwest::blocking::Client::builder()
        .resolve("example.com", edge.addr)
        .local_address(Some("127.0.0.2".parse::<IpAddr>().unwrap()))
        .build()
        .unwrap();
    let response = untrusted
        .get(edge.url("/"))
        .header("x-forwarded-for", "89.160.20.112")
        .header("user-agent", "e2e-test/1.0")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let echo: Value = response.json().unwrap();
    assert_eq!(
        echo["headers"]["x-forwarded-for"], "89.160.20.112, 127.0.0.2",
        "the origin sees the real peer appended"
    );
    // The same header from the trusted proxy is believed.
    refused(&edge, "89.160.20.112", "/", &[], 1009, 403);
}

#[test]
fn a_rate_limit_refuses_then_admits_after_its_retry_after() {
    let origin = EchoOrigin::start();
    let (edge, _dbs) = edge(&origin);
    let http = reqwest::blocking::Client::builder()
        .resolve("example.com", edge.addr)
        .build()
        .unwrap();
    let send = || {
        http.get(edge.url("/limited"))
            .header("x-forwarded-for", "192.0.2.77")
            .header("user-agent", "e2e-test/1.0")
            .header("accept", "application/json")
            .send()
            .unwrap()
    };
    assert_eq!(send().status().as_u16(), 200);
    assert_eq!(send().status().as_u16(), 200);
    let over = send();
    assert_eq!(over.status().as_u16(), 429);
    let retry_after: u64 = over.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let problem: Value = over.json().unwrap();
    assert_eq!(problem["error_code"], 1015);
    assert_eq!(problem["retry_after"], retry_after, "body and header agree");
    assert!(
        (1..=2).contains(&retry_after),
        "the limiter's real wait within a 2 s period, got {retry_after}"
    );
    // Another client is not affected by this client's limit.
    let other = http
        .get(edge.url("/limited"))
        .header("x-forwarded-for", "192.0.2.78")
        .header("user-agent", "e2e-test/1.0")
        .send()
        .unwrap();
    assert_eq!(other.status().as_u16(), 200);
    // Markdown says the same wait.
    let md = http
        .get(edge.url("/limited"))
        .header("x-forwarded-for", "192.0.2.77")
        .header("user-agent", "e2e-test/1.0")
        .header("accept", "text/markdown")
        .send()
        .unwrap();
    assert_eq!(md.status().as_u16(), 429);
    let md_retry: u64 = md.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        frontmatter(&md.text().unwrap()).0["retry_after"].as_u64(),
        Some(md_retry)
    );
    // Honest: after waiting what the last answer said, the request is admitted.
    std::thread::sleep(Duration::from_secs(md_retry));
    assert_eq!(
        send().status().as_u16(),
        200,
        "admitted after Retry-After seconds"
    );
}

#[test]
fn rate_limit_state_survives_a_reload_of_an_unchanged_rule() {
    let rule = "[[rate_limit]]\nid = \"slow\"\ncharacteristics = [\"ip.src\"]\nperiod = \"60s\"\nrequests_per_period = 1\n";
    let (_origin, edge) = echo_edge("limit-reload", rule, "", &[]);
    let http = client(&edge);
    assert_eq!(
        http.get(edge.url("/")).send().unwrap().status().as_u16(),
        200
    );
    assert_eq!(
        http.get(edge.url("/")).send().unwrap().status().as_u16(),
        429
    );

    // Reload with another rule added and this one untouched: the client stays limited.
    let config = std::fs::read_to_string(&edge.config).unwrap();
    let extra = "\n[[custom_rule]]\nid = \"unrelated\"\naction = \"block\"\nexpression = 'http.request.uri.path eq \"/never\"'\n";
    std::fs::write(&edge.config, format!("{config}{extra}")).unwrap();
    edge.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while http
        .get(edge.url("/never"))
        .send()
        .unwrap()
        .status()
        .as_u16()
        != 403
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the reload did not apply:\n{}",
            edge.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = http
        .get(edge.url("/"))
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(
        after.status().as_u16(),
        429,
        "the limiter's count survived the reload"
    );

    // Changing the rule itself starts it afresh.
    let changed = std::fs::read_to_string(&edge.config)
        .unwrap()
        .replace("requests_per_period = 1", "requests_per_period = 5");
    std::fs::write(&edge.config, changed).unwrap();
    edge.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while http.get(edge.url("/")).send().unwrap().status().as_u16() != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the changed rule did not start afresh"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
