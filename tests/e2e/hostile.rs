use std::net::TcpStream;

use serde_json::Value;

use crate::support::*;

/// Host values that break naive YAML, JSON or HTML output.
const HOSTILE: [&str; 10] = [
    "a: b",
    "'x'",
    "<script>alert(1)</script>",
    "*alias",
    "&anchor",
    "\"quoted\"",
    "- item",
    "yes",
    "{x}",
    "#comment",
];

fn edge() -> Edge {
    Edge::start("hostile", |l, a| policy(l, a, "127.0.0.1:9", "", ""), &[])
}

fn ask(edge: &Edge, host: &str, accept: &str) -> RawResponse {
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let request = format!(
        "GET /cdn-cgi/error/1015 HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    raw_exchange(&mut stream, request.as_bytes())
}

#[test]
fn hostile_hosts_read_back_as_the_same_json_string() {
    let edge = edge();
    for host in HOSTILE {
        let response = ask(&edge, host, "application/json");
        assert_eq!(response.status, 429, "{host}");
        let problem: Value =
            serde_json::from_slice(&response.body).unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(problem["zone"], host);
    }
}

#[test]
fn hostile_hosts_read_back_as_the_same_yaml_scalar() {
    let edge = edge();
    for host in HOSTILE {
        let response = ask(&edge, host, "text/markdown");
        let (meta, _) = frontmatter(&String::from_utf8(response.body).unwrap());
        assert_eq!(meta["zone"].as_str(), Some(host), "{host}");
        assert_eq!(
            meta["error_code"].as_u64(),
            Some(1015),
            "{host}: the other keys survive"
        );
    }
}

#[test]
fn hostile_hosts_are_escaped_in_html() {
    let edge = edge();
    for host in HOSTILE {
        let response = ask(&edge, host, "text/html");
        let html = String::from_utf8(response.body).unwrap();
        assert!(
            !html.contains("<script>alert(1)</script>"),
            "{host}: raw markup must not reach the page"
        );
        let document = scraper::Html::parse_document(&html);
        let scripts = document
            .select(&scraper::Selector::parse("script").unwrap())
            .count();
        assert_eq!(scripts, 0, "{host}: no script element");
        let text: String = document.root_element().text().collect();
        assert!(text.contains(host), "{host}: the host is shown as text");
    }
}
