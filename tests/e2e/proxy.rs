use std::net::TcpStream;

use serde_json::Value;

use crate::support::*;

fn edge() -> (EchoOrigin, Edge) {
    echo_edge("proxy", "", "", &[])
}

#[test]
fn requests_reach_the_origin_with_forwarding_headers() {
    let (_origin, edge) = edge();
    let response = client(&edge)
        .post(edge.url("/submit?x=1"))
        .header("x-custom", "kept")
        .body("hello origin")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["x-origin"],
        "echo",
        "the origin's own headers come back"
    );
    let ray = response.headers()["cf-ray"].to_str().unwrap().to_string();
    let echo: Value = response.json().unwrap();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/submit?x=1");
    assert_eq!(echo["body"], "hello origin");
    let headers = &echo["headers"];
    assert_eq!(headers["x-custom"], "kept");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(
        headers["cf-ray"],
        ray.as_str(),
        "the origin sees the same ray id as the client"
    );
    assert!(headers["host"].as_str().unwrap().starts_with("example.com"));
}

#[test]
fn an_existing_forwarded_for_chain_is_extended() {
    let (_origin, edge) = edge();
    let echo: Value = client(&edge)
        .get(edge.url("/"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(echo["headers"]["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
}

#[test]
fn the_headers_the_edge_adds_cannot_be_spoofed() {
    let (_origin, edge) = edge();
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let response = raw_exchange(
        &mut stream,
        b"GET / HTTP/1.1\r\nHost: example.com\r\nCF-Connecting-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\
          cf-ray: 0123456789abcdef\r\nX-Forwarded-For: 203.0.113.9\r\ncf-connecting-ip: 6.6.6.7\r\n\r\n",
    );
    assert_eq!(response.status, 200);
    let ray = response.header("cf-ray").unwrap().to_string();
    let echo: Value = serde_json::from_slice(&response.body).unwrap();
    let lines_of = |name: &str| -> Vec<String> {
        echo["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|line| line[0] == name)
            .map(|line| line[1].as_str().unwrap().to_string())
            .collect()
    };
    // Each arrives once, with the edge's value: an origin trusts these.
    assert_eq!(lines_of("cf-connecting-ip"), ["127.0.0.1"]);
    assert_eq!(lines_of("x-forwarded-proto"), ["http"]);
    assert_ne!(ray, "0123456789abcdef");
    assert_eq!(lines_of("cf-ray"), [ray]);
    assert_eq!(lines_of("x-forwarded-for"), ["203.0.113.9, 127.0.0.1"]);
    assert_eq!(lines_of("host"), ["example.com"]);
}

#[test]
fn origin_errors_pass_through_unchanged() {
    let (_origin, edge) = edge();
    let http = client(&edge);
    for status in [404u16, 503, 500] {
        let response = http
            .get(edge.url(&format!("/page?status={status}")))
            .header("accept", "application/json")
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(response.headers()["x-origin"], "echo");
        let body: Value = response.json().unwrap();
        assert!(
            body.get("cloudflare_error").is_none(),
            "the origin's {status} is not replaced by a problem"
        );
    }
}

#[test]
fn large_bodies_stream_both_ways() {
    let (_origin, edge) = edge();
    let big = "x".repeat(3 * 1024 * 1024);
    let echo: Value = client(&edge)
        .put(edge.url("/upload"))
        .body(big.clone())
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(echo["body"].as_str().unwrap().len(), big.len());
}

#[test]
fn unknown_host_gets_1001() {
    let (_origin, edge) = edge();
    let response = client(&edge)
        .get(format!("http://unknown.test:{}/", edge.addr.port()))
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 409);
    let problem: Value = response.json().unwrap();
    assert_eq!(problem["error_code"], 1001);
    assert_eq!(problem["zone"], "unknown.test");
}

#[test]
fn the_client_connection_survives_an_edge_error() {
    let (_origin, edge) = edge();
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let first = raw_exchange(
        &mut stream,
        b"GET /cdn-cgi/error/1015 HTTP/1.1\r\nHost: example.com\r\nAccept: application/json\r\n\r\n",
    );
    assert_eq!(first.status, 429);
    let problem: Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(problem["error_code"], 1015);
    let second = raw_exchange(
        &mut stream,
        b"GET /again HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(
        second.status, 200,
        "the same connection carries the next request"
    );
    assert_eq!(second.header("x-origin"), Some("echo"));
    let third = raw_exchange(
        &mut stream,
        b"GET / HTTP/1.1\r\nHost: nowhere.test\r\nAccept: text/markdown\r\n\r\n",
    );
    assert_eq!(third.status, 409);
    let fourth = raw_exchange(
        &mut stream,
        b"HEAD /cdn-cgi/error/1020 HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(fourth.status, 403);
    assert!(fourth.body.is_empty());
    assert_ne!(
        fourth.header("content-length"),
        Some("0"),
        "HEAD announces the length of the page it omits"
    );
    let fifth = raw_exchange(
        &mut stream,
        b"GET /last HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(fifth.status, 200, "still usable after HEAD");
}

#[test]
fn ip_literal_host_without_a_zone_gets_1003() {
    let (_origin, edge) = edge();
    let response = reqwest::blocking::get(format!("http://{}/", edge.addr)).unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert!(response.text().unwrap().contains("1003"));
}

#[test]
fn behind_a_trusted_proxy_the_chain_keeps_every_hop() {
    let top = "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
    let (_origin, edge) = echo_edge("xff-trusted", top, "", &[]);
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    // Two X-Forwarded-For lines are one list (RFC 9110 section 5.3).
    let response = raw_exchange(
        &mut stream,
        b"GET / HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n",
    );
    assert_eq!(response.status, 200);
    let echo: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(
        echo["headers"]["x-forwarded-for"], "6.6.6.6, 198.51.100.7, 127.0.0.1",
        "the proxy hop stays, the client is not doubled"
    );
    assert_eq!(
        echo["headers"]["cf-connecting-ip"], "198.51.100.7",
        "the client the trusted proxy named"
    );
}

#[test]
fn repeated_accept_lines_are_one_list() {
    let (_origin, edge) = edge();
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let response = raw_exchange(
        &mut stream,
        b"GET /cdn-cgi/error/1015 HTTP/1.1\r\nHost: example.com\r\nAccept: text/plain;q=0.5\r\nAccept: application/json\r\n\r\n",
    );
    assert_eq!(
        response.header("content-type"),
        Some("application/json; charset=utf-8")
    );
}

#[test]
fn request_text_cannot_forge_access_log_fields() {
    let (_origin, edge) = edge();
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let response = raw_exchange(
        &mut stream,
        b"GET /cdn-cgi/error/1020 HTTP/1.1\r\nHost: x status=200 rule=evil\r\nAccept: application/json\r\n\r\n",
    );
    assert_eq!(response.status, 403);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !edge.log().contains("x%20status%3D200%20rule%3Devil") {
        assert!(
            std::time::Instant::now() < deadline,
            "the hostile Host is not escaped in:\n{}",
            edge.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !edge.log().contains("rule=evil"),
        "a forged field reached the log:\n{}",
        edge.log()
    );
}
