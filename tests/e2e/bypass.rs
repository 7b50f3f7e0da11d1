//! No way around the rules, through the real binary: a payload the rules refuse is still refused
//! when the attacker adds a byte that is not UTF-8, repeats the header, changes the Host's case or
//! encodes the path, and the origin never sees the request.

use std::net::TcpStream;

use serde_json::Value;

use crate::support::*;

fn start(origin: &EchoOrigin) -> Edge {
    let o = origin.addr.to_string();
    Edge::start(
        "bypass",
        |listen, admin| {
            format!(
                r#"listen = ["{listen}"]
admin = "{admin}"

[[zone]]
name = "site"
hosts = ["example.com", "blocked.test"]
origin = "{o}"

[hotlink]
id = "hotlink"
extensions = ["png"]

[[custom_rule]]
id = "ua"
action = "block"
expression = 'http.user_agent contains "sqlmap"'

[[custom_rule]]
id = "header"
action = "block"
expression = 'http.request.headers["x-payload"] contains "evil"'

[[custom_rule]]
id = "cookie"
action = "block"
expression = 'http.cookie contains "admin=1"'

[[custom_rule]]
id = "referer"
action = "block"
expression = 'http.referer contains "attacker.example"'

[[custom_rule]]
id = "host"
action = "block"
expression = 'http.host eq "blocked.test"'

[[custom_rule]]
id = "path"
action = "block"
expression = 'http.request.uri.path eq "/admin"'

[[custom_rule]]
id = "query"
action = "block"
expression = 'url_decode(http.request.uri.query, "r") contains "<script"'
"#
            )
        },
        &[],
    )
}

/// Sends one raw request (`head` holds the request line's target and the header lines) and
/// returns the status and the JSON problem, if the edge answered with one.
fn send(edge: &Edge, target: &str, host: &[u8], lines: &[&[u8]]) -> (u16, Option<Value>) {
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: ").into_bytes();
    req.extend_from_slice(host);
    req.extend_from_slice(b"\r\nAccept: application/json\r\nConnection: close\r\n");
    for line in lines {
        req.extend_from_slice(line);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    let resp = raw_exchange(&mut stream, &req);
    let json = serde_json::from_slice(&resp.body).ok();
    (resp.status, json)
}

fn assert_refused(
    edge: &Edge,
    origin: &EchoOrigin,
    what: &str,
    got: (u16, Option<Value>),
    code: u64,
) {
    let (status, json) = got;
    let json = json.unwrap_or_else(|| panic!("{what}: no JSON problem, status {status}"));
    assert_eq!(json["error_code"], code, "{what}: {json}");
    assert_eq!(json["retryable"], false, "{what}");
    assert_eq!(
        origin.received(),
        0,
        "{what}: the origin saw the request\n{}",
        edge.log()
    );
}

/// What a case tries, the request target, the Host, the extra header lines, the code expected.
type Case<'a> = (&'a str, &'a str, &'a [u8], &'a [&'a [u8]], u64);

#[test]
fn invalid_bytes_repeated_lines_case_and_encoding_do_not_bypass_rules() {
    let origin = EchoOrigin::start();
    let edge = start(&origin);

    // The plain requests are refused, and a benign one passes (checked last, so that the origin
    // count proves the refusals never reached it).
    let cases: &[Case] = &[
        (
            "user agent + invalid byte",
            "/",
            b"example.com",
            &[b"User-Agent: sqlmap/1.8 \xff"],
            1020,
        ),
        (
            "user agent, invalid line before",
            "/",
            b"example.com",
            &[b"User-Agent: \xc3\x28", b"User-Agent: sqlmap"],
            1020,
        ),
        (
            "custom header + invalid bytes",
            "/",
            b"example.com",
            &[b"X-Payload: \xfe\xffevil\x80"],
            1020,
        ),
        (
            "custom header on a second line",
            "/",
            b"example.com",
            &[b"X-Payload: fine", b"X-Payload: \xffevil"],
            1020,
        ),
        (
            "cookie + invalid byte",
            "/",
            b"example.com",
            &[b"Cookie: a=\xff; admin=1"],
            1020,
        ),
        (
            "cookie on a second line",
            "/",
            b"example.com",
            &[b"Cookie: a=\xff", b"Cookie: admin=1"],
            1020,
        ),
        (
            "referer + invalid byte",
            "/",
            b"example.com",
            &[b"Referer: https://attacker.example/\xff"],
            1020,
        ),
        (
            "hotlink referer + invalid byte",
            "/cat.png",
            b"example.com",
            &[b"Referer: https://other.example/\xff"],
            1011,
        ),
        ("host in upper case", "/", b"BLOCKED.test", &[], 1020),
        (
            "host with port and trailing dot",
            "/",
            b"Blocked.Test.:8080",
            &[],
            1020,
        ),
        (
            "encoded path",
            "/static/..//%61dmin",
            b"example.com",
            &[],
            1020,
        ),
        (
            "double-encoded query",
            "/s?q=%253Cscript%253E",
            b"example.com",
            &[],
            1020,
        ),
    ];
    for (what, target, host, lines, code) in cases {
        // Names the case in the output of a failing run (raw_exchange panics without it).
        eprintln!("case: {what}");
        let got = send(&edge, target, host, lines);
        assert_refused(&edge, &origin, what, got, *code);
    }
    // (Plain text here: the test origin itself refuses header bytes that are not UTF-8.)
    let (status, _) = send(
        &edge,
        "/fine",
        b"example.com",
        &[b"User-Agent: Mozilla/5.0"],
    );
    assert_eq!(status, 200);
    assert_eq!(origin.received(), 1);
}
