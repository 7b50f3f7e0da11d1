//! Connections and requests the edge cannot accept, over raw sockets against the real binary:
//! deadlines, pipelining, CONNECT/TRACE, bodies that cannot be parsed or are too large.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

const JSON: &str = "Accept: application/json\r\n";

/// Reads until the peer closes the connection (or `within` passes); returns what arrived and
/// whether it was closed.
fn read_to_close(stream: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, false);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (out, true),
            Err(_) => return (out, false),
        }
    }
}

/// A problem answer in JSON: status, code, non-retryable, with a ray id in header and body.
fn assert_json_problem(resp: &RawResponse, status: u16) -> Value {
    assert_eq!(
        resp.status,
        status,
        "{}",
        String::from_utf8_lossy(&resp.body)
    );
    assert!(
        resp.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        resp.headers
    );
    let body: Value = serde_json::from_slice(&resp.body).expect("a JSON problem");
    assert_eq!(body["status"], status);
    assert_eq!(body["error_code"], status);
    assert_eq!(body["retryable"], false);
    let ray = resp.header("cf-ray").expect("a ray id header");
    assert_eq!(body["ray_id"], ray);
    assert!(
        body["what_you_should_do"]
            .as_str()
            .unwrap()
            .starts_with("**Do not retry"),
        "{body}"
    );
    body
}

fn connect(edge: &Edge) -> TcpStream {
    TcpStream::connect(edge.addr).unwrap()
}

#[test]
fn trace_and_track_are_refused_and_never_forwarded() {
    let (origin, edge) = echo_edge("conn-trace", "", "", &[]);
    for method in ["TRACE", "TRACK"] {
        let mut s = connect(&edge);
        let req = format!(
            "{method} / HTTP/1.1\r\nHost: example.com\r\nCookie: session=secret\r\n{JSON}\r\n"
        );
        let resp = raw_exchange(&mut s, req.as_bytes());
        let body = assert_json_problem(&resp, 405);
        assert_eq!(body["error_name"], "method_not_allowed");
        // The connection stays usable: the next request is proxied.
        let next = raw_exchange(&mut s, b"GET /after HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(next.status, 200);
    }
    assert_eq!(origin.received(), 2, "only the two GETs reached the origin");
}

#[test]
fn a_zone_can_allow_trace() {
    let (origin, edge) = echo_edge("conn-trace-allowed", "", "allow_trace = true", &[]);
    let mut s = connect(&edge);
    let resp = raw_exchange(&mut s, b"TRACE / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(resp.status, 200);
    assert_eq!(origin.received(), 1);
}

#[test]
fn connect_gets_a_negotiated_problem() {
    let (origin, edge) = echo_edge("conn-connect", "", "", &[]);
    let mut s = connect(&edge);
    let resp = raw_exchange(
        &mut s,
        format!("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n{JSON}\r\n")
            .as_bytes(),
    );
    assert_json_problem(&resp, 405);
    assert_eq!(resp.header("connection"), Some("close"));
    // Without an Accept, the contract's default: HTML.
    let mut s = connect(&edge);
    let resp = raw_exchange(
        &mut s,
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    );
    assert_eq!(resp.status, 405);
    assert!(
        resp.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(resp.header("cf-ray").is_some());
    assert_eq!(origin.received(), 0);
}

#[test]
fn a_bad_chunked_body_is_400_not_retryable() {
    let (origin, edge) = echo_edge("conn-bad-chunk", "", "", &[]);
    for chunk in ["zz", "-5", "fffffffffffffffffffffff"] {
        let mut s = connect(&edge);
        let req = format!(
            "POST /upload HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n{JSON}\r\n\
             {chunk}\r\nhello\r\n0\r\n\r\n"
        );
        let resp = raw_exchange(&mut s, req.as_bytes());
        let body = assert_json_problem(&resp, 400);
        assert_eq!(body["error_name"], "bad_request", "chunk size {chunk}");
        assert!(body.get("retry_after").is_none());
    }
    assert_eq!(
        origin.received(),
        0,
        "the origin saw a request with a bad body"
    );
    let metrics = reqwest::blocking::get(format!("http://{}/metrics", edge.admin))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(r#"status="400",error_code="400""#),
        "{metrics}"
    );
}

#[test]
fn bodies_over_the_zone_limit_are_413() {
    let (origin, edge) = echo_edge("conn-413", "", "max_body_size = \"1KiB\"", &[]);
    // Declared up front: refused before a byte of the body is read.
    let mut s = connect(&edge);
    let req = format!("POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5000\r\n{JSON}\r\n");
    let resp = raw_exchange(&mut s, req.as_bytes());
    assert_json_problem(&resp, 413);
    assert_eq!(resp.header("connection"), Some("close"));
    // Chunked: counted as it streams.
    let mut s = connect(&edge);
    let chunk = "x".repeat(600);
    let req = format!(
        "POST / HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n{JSON}\r\n\
         258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
    );
    let resp = raw_exchange(&mut s, req.as_bytes());
    assert_json_problem(&resp, 413);
    // At the limit, chunked and arriving with the head (pre-read, then replayed through the
    // body filter): counted once, proxied.
    let mut s = connect(&edge);
    let body = "z".repeat(1024);
    let req = format!(
        "POST / HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n\
         400\r\n{body}\r\n0\r\n\r\n"
    );
    let resp = raw_exchange(&mut s, req.as_bytes());
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    // At the limit: proxied.
    let mut s = connect(&edge);
    let body = "y".repeat(1024);
    let req = format!("POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 1024\r\n\r\n{body}");
    let resp = raw_exchange(&mut s, req.as_bytes());
    assert_eq!(resp.status, 200);
    // One byte over, declared (not forwarded) and chunked: 413.
    let forwarded = origin.received();
    let mut s = connect(&edge);
    let req = format!("POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 1025\r\n{JSON}\r\n");
    assert_json_problem(&raw_exchange(&mut s, req.as_bytes()), 413);
    assert_eq!(
        origin.received(),
        forwarded,
        "a declared body over the limit is not forwarded"
    );
    let mut s = connect(&edge);
    let body = "w".repeat(1024);
    let req = format!(
        "POST / HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n{JSON}\r\n\
         400\r\n{body}\r\n1\r\nw\r\n0\r\n\r\n"
    );
    assert_json_problem(&raw_exchange(&mut s, req.as_bytes()), 413);
}

/// Waits for the edge to close `s`, idle since its last answer under `idle_timeout = idle`, and
/// checks that it closed silently, not before the timeout (three quarters of it, for the
/// timer's rounding): `asked` is taken before the last request was sent, so a slow test
/// machine can only make the wait it measures longer. The wait for the close is 30 s, half the
/// 60 s default, so a close at all shows the policy's value applied (the callers check the
/// cause in the metrics).
fn assert_closed_idle_after(s: &mut TcpStream, asked: Instant, idle: Duration) {
    let (rest, closed) = read_to_close(s, Duration::from_secs(30));
    let held = asked.elapsed();
    eprintln!("idle keep-alive connection (idle_timeout {idle:?}) closed after {held:?}");
    assert!(closed, "an idle connection was still open after 30 s");
    assert!(rest.is_empty(), "nothing is sent on an idle close");
    assert!(
        held >= idle * 3 / 4,
        "closed {held:?} after the last request, before the {idle:?} idle timeout"
    );
}

#[test]
fn an_idle_keepalive_connection_is_closed_within_its_timeout() {
    let (_origin, edge) = echo_edge("conn-idle", "[connections]\nidle_timeout = \"2s\"", "", &[]);
    let mut s = connect(&edge);
    let asked = Instant::now();
    let resp = raw_exchange(&mut s, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(resp.status, 200);
    assert_closed_idle_after(&mut s, asked, Duration::from_secs(2));
    // Counted once, as an idle close and not as a header timeout.
    assert_eq!(counter(&edge, "idle_timeout"), 1);
    assert_eq!(counter(&edge, "header_timeout"), 0);
}

/// The edge keeps one idle timer per connection (vendor/README.md): a timer armed for an
/// earlier wait fires during a later one, which must go on to its own deadline.
#[test]
fn a_connection_in_use_is_not_cut_by_the_idle_timer_of_an_earlier_wait() {
    let (_origin, edge) = echo_edge(
        "conn-idle-busy",
        "[connections]\nidle_timeout = \"4s\"",
        "",
        &[],
    );
    let mut s = connect(&edge);
    // Four requests 2.5 s apart: each wait is shorter than the idle timeout (by 1.5 s, room for
    // a loaded machine's late wake-ups), and the second and third each outlive the timer armed
    // for the wait before.
    let mut asked = Instant::now();
    for i in 0..4 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(2500));
        }
        asked = Instant::now();
        let resp = raw_exchange(&mut s, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(resp.status, 200, "request {i} on a connection in use");
    }
    assert_closed_idle_after(&mut s, asked, Duration::from_secs(4));
    assert_eq!(counter(&edge, "idle_timeout"), 1);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let top = "[[custom_rule]]\nid = \"no-admin\"\naction = \"block\"\n\
               expression = 'http.request.uri.path eq \"/admin\"'";
    let (origin, edge) = echo_edge("conn-pipeline", top, "", &[]);
    let mut s = connect(&edge);
    // Proxied, refused by the policy (1020), the error page (404 of the catalog), proxied again.
    let batch = "GET /one HTTP/1.1\r\nHost: example.com\r\n\r\n\
                 GET /admin HTTP/1.1\r\nHost: example.com\r\nAccept: application/json\r\n\r\n\
                 POST /two HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\nabc\
                 GET /cdn-cgi/error/9999 HTTP/1.1\r\nHost: example.com\r\n\r\n\
                 GET /three HTTP/1.1\r\nHost: example.com\r\n\r\n";
    s.write_all(batch.as_bytes()).unwrap();
    let mut responses = read_responses(&mut s, 5).into_iter();
    let mut next = || responses.next().unwrap();
    let first = next();
    assert_eq!(first.status, 200);
    let echo: Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(echo["path"], "/one");
    let second = next();
    let problem = assert_json_problem_any(&second, 403);
    assert_eq!(problem["error_code"], 1020);
    let third = next();
    let echo: Value = serde_json::from_slice(&third.body).unwrap();
    assert_eq!(
        (echo["path"].as_str(), echo["body"].as_str()),
        (Some("/two"), Some("abc"))
    );
    let fourth = next();
    assert_eq!(
        fourth.status,
        404,
        "{}",
        String::from_utf8_lossy(&fourth.body)
    );
    let fifth = next();
    let echo: Value = serde_json::from_slice(&fifth.body).unwrap();
    assert_eq!(echo["path"], "/three");
    assert_eq!(origin.received(), 3);
}

/// A JSON problem of any code with this status.
fn assert_json_problem_any(resp: &RawResponse, status: u16) -> Value {
    assert_eq!(
        resp.status,
        status,
        "{}",
        String::from_utf8_lossy(&resp.body)
    );
    serde_json::from_slice(&resp.body).expect("a JSON problem")
}

#[test]
fn a_long_url_is_414_and_huge_headers_431() {
    let (origin, edge) = echo_edge("conn-414", "", "", &[]);
    let mut s = connect(&edge);
    let long = "a".repeat(20 * 1024);
    let resp = raw_exchange(
        &mut s,
        format!("GET /{long} HTTP/1.1\r\nHost: example.com\r\n{JSON}\r\n").as_bytes(),
    );
    assert_json_problem(&resp, 414);
    let mut s = connect(&edge);
    let cookie = "c".repeat(40 * 1024);
    let resp = raw_exchange(
        &mut s,
        format!("GET / HTTP/1.1\r\nHost: example.com\r\nCookie: {cookie}\r\n{JSON}\r\n").as_bytes(),
    );
    assert_json_problem(&resp, 431);
    assert_eq!(origin.received(), 0);
}

#[test]
fn a_good_chunked_body_reaches_the_origin_whole() {
    let (origin, edge) = echo_edge("conn-good-chunk", "", "", &[]);
    let mut s = connect(&edge);
    // The first chunk arrives with the head (pre-read and replayed), the rest later (streamed).
    s.write_all(
        b"POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let resp = raw_exchange(&mut s, b"7\r\n, world\r\n0\r\n\r\n");
    assert_eq!(resp.status, 200);
    let echo: Value = serde_json::from_slice(&resp.body).unwrap();
    assert_eq!(echo["body"], "hello, world");
    assert_eq!(origin.received(), 1);
}

/// Sends `request` (ignoring a write cut short by the edge closing first), then reads one
/// response and expects the connection to close after it.
fn refused_exchange(edge: &Edge, request: &[u8]) -> RawResponse {
    let mut s = connect(edge);
    let mut writer = s.try_clone().unwrap();
    let request = request.to_vec();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
    });
    let (bytes, closed) = read_to_close(&mut s, Duration::from_secs(10));
    let _ = sender.join();
    assert!(
        closed,
        "the connection stays open after an unreadable request"
    );
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(&bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!(
            "no whole response ({other:?}): {:?}",
            String::from_utf8_lossy(&bytes)
        ),
    };
    RawResponse {
        status: parsed.code.unwrap(),
        headers: parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        body: bytes[head_len..].to_vec(),
    }
}

#[test]
fn unreadable_requests_get_the_contract() {
    let (origin, edge) = echo_edge("conn-malformed", "", "", &[]);
    let start = "GET / HTTP/1.1\r\nHost: example.com\r\nAccept: application/json\r\n";
    let many_headers: String = (0..10_000).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases: Vec<(&str, String, u16)> = vec![
        ("no colon", format!("{start}no colon here\r\n\r\n"), 400),
        (
            "control character",
            format!("{start}X-A: a\x01b\r\n\r\n"),
            400,
        ),
        ("obs-fold", format!("{start}X-A: a\r\n folded\r\n\r\n"), 400),
        (
            "two Content-Lengths",
            format!(
                "POST / HTTP/1.1\r\nHost: example.com\r\n{JSON}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"
            ),
            400,
        ),
        (
            "invalid Content-Length",
            format!(
                "POST / HTTP/1.1\r\nHost: example.com\r\n{JSON}Content-Length: 5x\r\n\r\nhello"
            ),
            400,
        ),
        (
            "xchunked",
            format!(
                "POST / HTTP/1.1\r\nHost: example.com\r\n{JSON}Transfer-Encoding: xchunked\r\n\r\n"
            ),
            400,
        ),
        (
            "URL over 64 KiB",
            format!(
                "GET /{} HTTP/1.1\r\nHost: example.com\r\nAccept: application/json\r\n\r\n",
                "a".repeat(70 * 1024)
            ),
            414,
        ),
        ("10,000 headers", format!("{start}{many_headers}\r\n"), 431),
        (
            "1 MB header block",
            format!("{start}X-Big: {}\r\n\r\n", "b".repeat(1024 * 1024)),
            431,
        ),
    ];
    for (name, request, status) in &cases {
        let resp = refused_exchange(&edge, request.as_bytes());
        assert_eq!(resp.status, *status, "{name}");
        let body = assert_json_problem(&resp, *status);
        assert_eq!(body["zone"], "example.com", "{name}");
        assert_eq!(resp.header("connection"), Some("close"), "{name}");
    }
    // Without an Accept line (or before one arrived whole): HTML, the contract's default.
    for request in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: example.com\r\nbroken\r\n\r\n",
    ] {
        let resp = refused_exchange(&edge, request);
        assert_eq!(resp.status, 400);
        let content_type = resp.header("content-type").unwrap();
        assert!(
            content_type.starts_with("text/html"),
            "{content_type} for {:?}",
            String::from_utf8_lossy(request)
        );
        assert_eq!(resp.header("cf-ray").map(str::len), Some(16));
        let html = String::from_utf8(resp.body).unwrap();
        assert!(html.contains("Error 400"), "{html}");
    }
    assert_eq!(origin.received(), 0);
    let metrics = reqwest::blocking::get(format!("http://{}/metrics", edge.admin))
        .unwrap()
        .text()
        .unwrap();
    let malformed = metrics
        .lines()
        .find(|l| l.starts_with("signpost_connection_events_total{event=\"malformed\"}"))
        .unwrap_or_else(|| panic!("no malformed counter in\n{metrics}"));
    assert!(
        malformed.ends_with(&format!(" {}", cases.len() + 2)),
        "{malformed}"
    );
}

#[test]
fn a_trickled_header_is_cut_at_the_header_deadline() {
    let (origin, edge) = echo_edge(
        "conn-trickle",
        "[connections]\nheader_timeout = \"2s\"",
        "",
        &[],
    );
    // Taken before the connection opens, so a slow machine can only make the wait measured
    // longer; the close is awaited for 8 s, under the 10 s default, so a close at all shows
    // the policy's 2 s applied.
    let started = Instant::now();
    let mut s = connect(&edge);
    let mut writer = s.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        // The Accept line arrives whole at once (so the answer is JSON however slow the
        // machine), then a header line that never ends, a byte every 20 ms.
        if writer
            .write_all(b"GET / HTTP/1.1\r\nAccept: application/json\r\nX-Slow: ")
            .is_err()
        {
            return;
        }
        for _ in 0..400 {
            std::thread::sleep(Duration::from_millis(20));
            if writer.write_all(b"z").is_err() {
                return;
            }
        }
    });
    let (bytes, closed) = read_to_close(&mut s, Duration::from_secs(8));
    let held = started.elapsed();
    let _ = trickler.join();
    eprintln!("trickled header (header_timeout 2s) cut after {held:?}");
    assert!(closed, "a trickled header was still held after 8 s");
    assert!(
        held >= Duration::from_millis(1800),
        "cut after {held:?}, before the 2 s header deadline"
    );
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("\"error_code\":408"),
        "an Accept line had arrived: {text}"
    );
    // A connection that sends nothing at all is closed at the deadline, silently.
    let started = Instant::now();
    let mut idle = connect(&edge);
    let (bytes, closed) = read_to_close(&mut idle, Duration::from_secs(8));
    assert!(closed && bytes.is_empty(), "{bytes:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1800),
        "closed after {:?}, before the 2 s header deadline",
        started.elapsed()
    );
    assert_eq!(counter(&edge, "header_timeout"), 2);
    assert_eq!(origin.received(), 0);
}

/// Counts the edge's open descriptors (Linux), for the figures of the slowloris test.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Waits (up to 30 s) until the edge's gauge `name` reads `want`.
fn wait_for_gauge(edge: &Edge, name: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let prefix = format!("{name} ");
    loop {
        let metrics = reqwest::blocking::get(format!("http://{}/metrics", edge.admin))
            .unwrap()
            .text()
            .unwrap();
        let value: Option<i64> = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok());
        if value == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} is {value:?}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn counter(edge: &Edge, event: &str) -> u64 {
    let metrics = reqwest::blocking::get(format!("http://{}/metrics", edge.admin))
        .unwrap()
        .text()
        .unwrap();
    let prefix = format!("signpost_connection_events_total{{event=\"{event}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.parse().unwrap())
}

#[test]
fn one_client_cannot_hold_more_than_its_connections() {
    let (_origin, edge) = echo_edge("conn-cap", "[connections]\nmax_per_client = 5", "", &[]);
    // The start-up probe's connection is gone before the count starts.
    wait_for_gauge(&edge, "signpost_client_connections", 0);
    let mut held: Vec<TcpStream> = (0..5).map(|_| connect(&edge)).collect();
    for s in &mut held {
        s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    }
    wait_for_gauge(&edge, "signpost_client_connections", 5);
    let mut sixth = connect(&edge);
    let _ = sixth.write_all(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    let (bytes, closed) = read_to_close(&mut sixth, Duration::from_secs(30));
    assert!(
        closed && bytes.is_empty(),
        "the sixth connection was served: closed {closed}, {:?}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(counter(&edge, "too_many_connections"), 1);
    // One held connection ends: a new one is served again.
    drop(held.pop());
    wait_for_gauge(&edge, "signpost_client_connections", 4);
    let mut again = connect(&edge);
    let resp = raw_exchange(&mut again, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(resp.status, 200);
}

/// Soft descriptor limit of this process, from /proc.
fn descriptor_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_thousand_slow_clients_do_not_hold_the_edge() {
    const SLOW: usize = 1000;
    assert!(
        descriptor_limit() >= 2 * SLOW as u64 + 500,
        "this test needs `ulimit -n` of at least {} (it is {})",
        2 * SLOW + 500,
        descriptor_limit()
    );
    let (origin, edge) = echo_edge(
        "conn-slowloris",
        "[connections]\nheader_timeout = \"12s\"\nmax_per_client = 5000",
        "",
        &[],
    );
    let baseline = open_descriptors(edge.pid());
    // Slowloris: every client sends the start of a header, then one more byte a second.
    let mut slow: Vec<TcpStream> = (0..SLOW)
        .map(|_| {
            let mut s = connect(&edge);
            s.write_all(b"GET / HTTP/1.1\r\nHost: example.com\r\nX-a: ")
                .unwrap();
            s
        })
        .collect();
    let opened = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle_stop = stop.clone();
    let mut writers: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
    let trickler = std::thread::spawn(move || {
        while !trickle_stop.load(std::sync::atomic::Ordering::Relaxed) {
            for w in &mut writers {
                let _ = w.write_all(b"a");
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let held = open_descriptors(edge.pid());
    // Normal requests meanwhile, each on a new connection: all served while every slow client
    // is still held (none was cut yet), whatever the time they take on a loaded machine.
    let mut latencies = Vec::new();
    for _ in 0..100 {
        let started = Instant::now();
        let mut s = connect(&edge);
        let resp = raw_exchange(&mut s, b"GET /ok HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(resp.status, 200);
        latencies.push(started.elapsed());
    }
    assert_eq!(
        counter(&edge, "header_timeout"),
        0,
        "the normal requests were served while the slow clients were held"
    );
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99).div_ceil(100) - 1];
    let p50 = latencies[latencies.len() / 2];
    eprintln!(
        "slowloris: {SLOW} slow clients, {} normal requests, p50 {p50:?}, p99 {p99:?}; \
         edge descriptors {baseline} before, {held} while held",
        latencies.len()
    );
    // At the header deadline every slow client is cut (408), and its descriptor freed. They
    // keep sending, so only the deadline ends them; each is awaited up to 60 s after they
    // opened.
    let mut cut = 0;
    for s in &mut slow {
        let left = Duration::from_secs(60).saturating_sub(opened.elapsed());
        let (bytes, closed) = read_to_close(s, left.max(Duration::from_millis(100)));
        if closed && bytes.starts_with(b"HTTP/1.1 408") {
            cut += 1;
        }
    }
    let cut_after = opened.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = trickler.join();
    assert_eq!(cut, SLOW, "slow clients still held after {cut_after:?}");
    assert!(counter(&edge, "header_timeout") >= SLOW as u64);
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut after = open_descriptors(edge.pid());
    while after >= baseline + 50 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = open_descriptors(edge.pid());
    }
    eprintln!("slowloris: all cut after {cut_after:?}; edge descriptors {after} after");
    assert!(
        after < baseline + 50,
        "{after} descriptors still open after 30 s"
    );
    assert!(origin.received() >= latencies.len());
}

#[test]
fn a_trusted_proxy_is_not_capped() {
    let (_origin, edge) = echo_edge(
        "conn-cap-trusted",
        "[connections]\nmax_per_client = 2\n[client_ip]\ntrusted_proxies = [\"127.0.0.0/8\"]",
        "",
        &[],
    );
    let held: Vec<TcpStream> = (0..4).map(|_| connect(&edge)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut fifth = connect(&edge);
    let resp = raw_exchange(&mut fifth, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(resp.status, 200);
    assert_eq!(counter(&edge, "too_many_connections"), 0);
    drop(held);
}

#[test]
fn a_trickled_or_stalled_body_is_408() {
    let (_origin, edge) = echo_edge(
        "conn-body-slow",
        "[connections]\nbody_timeout = \"2s\"\nbody_min_rate = \"1KiB/s\"",
        "",
        &[],
    );
    // Trickled: a byte every 200 ms is progress, but far below 1 KiB/s; it goes on until the
    // edge cuts it, so only the rate can end it. The close is awaited for 25 s, under the 30 s
    // default grace, so a close at all shows the policy's 2 s applied; `started` is taken
    // before the request is sent, so a slow machine can only make the wait measured longer.
    let started = Instant::now();
    let mut s = connect(&edge);
    let mut writer = s.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let head = format!(
            "POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 100000\r\n{JSON}\r\n"
        );
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..300 {
            std::thread::sleep(Duration::from_millis(200));
            if writer.write_all(b"x").is_err() {
                return;
            }
        }
    });
    let (bytes, closed) = read_to_close(&mut s, Duration::from_secs(25));
    let held = started.elapsed();
    drop(s);
    let _ = trickler.join();
    let text = String::from_utf8_lossy(&bytes);
    eprintln!("trickled body (body_timeout 2s, body_min_rate 1KiB/s) cut after {held:?}");
    assert!(closed, "a trickled body was still held after 25 s");
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"error_code\":408"), "{text}");
    assert!(
        held >= Duration::from_secs(2),
        "cut after {held:?}, within the 2 s grace"
    );
    assert_eq!(counter(&edge, "body_timeout"), 1);
    // Stalled: part of the body, then nothing.
    let started = Instant::now();
    let mut s = connect(&edge);
    s.write_all(
        format!("POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 10\r\n{JSON}\r\nabc")
            .as_bytes(),
    )
    .unwrap();
    let (bytes, closed) = read_to_close(&mut s, Duration::from_secs(25));
    let text = String::from_utf8_lossy(&bytes);
    assert!(closed && text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "cut after {:?}, before the 2 s body timeout",
        started.elapsed()
    );
    assert_eq!(counter(&edge, "body_timeout"), 2);
}

#[test]
fn content_length_with_chunked_is_read_as_chunked_and_closed() {
    let (origin, edge) = echo_edge("conn-smuggle", "", "", &[]);
    let mut s = connect(&edge);
    s.write_all(
        b"POST /a HTTP/1.1\r\nHost: example.com\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n",
    )
    .unwrap();
    let (bytes, closed) = read_to_close(&mut s, Duration::from_secs(10));
    assert!(closed, "the connection stayed open after CL+TE");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"body\":\"hello\""), "{text}");
    assert!(!text.contains("smuggled"), "{text}");
    assert_eq!(origin.received(), 1);
}

#[test]
fn expect_100_continue_still_works() {
    let (_origin, edge) = echo_edge("conn-continue", "", "", &[]);
    let mut s = connect(&edge);
    s.write_all(
        b"POST /c HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    // As curl does: wait up to a second for the interim answer, then send the body anyway.
    let (interim, _) = read_to_close(&mut s, Duration::from_secs(1));
    let interim = String::from_utf8_lossy(&interim).into_owned();
    assert!(
        interim.is_empty()
            || (interim.starts_with("HTTP/1.1 100") && interim.ends_with("\r\n\r\n")),
        "{interim:?}"
    );
    let resp = raw_exchange(&mut s, b"hello");
    assert_eq!(resp.status, 200);
    let echo: Value = serde_json::from_slice(&resp.body).unwrap();
    assert_eq!(echo["body"], "hello");
}

/// The edge's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_50_mb_upload_streams_in_bounded_memory() {
    const SIZE: usize = 50 * 1000 * 1000;
    // An origin that reads and counts the body, then answers with the count.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((conn, _)) = listener.accept() else {
            return;
        };
        let mut reader = std::io::BufReader::new(conn);
        let mut line = String::new();
        let mut length = 0usize;
        loop {
            line.clear();
            if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = (&mut reader).take(length as u64);
        let got = std::io::copy(&mut body, &mut std::io::sink()).unwrap_or(0);
        let answer = got.to_string();
        let _ = reader.get_mut().write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            )
            .as_bytes(),
        );
    });
    let o = origin_addr.to_string();
    let edge = Edge::start("conn-upload", |l, a| policy(l, a, &o, "", ""), &[]);
    let before = peak_rss_kib(edge.pid());
    let mut s = connect(&edge);
    s.write_all(
        format!("POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: {SIZE}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let chunk = vec![b'u'; 1 << 20];
    let mut sent = 0;
    while sent < SIZE {
        let n = chunk.len().min(SIZE - sent);
        s.write_all(&chunk[..n]).unwrap();
        sent += n;
    }
    let resp = raw_exchange(&mut s, b"");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, SIZE.to_string().as_bytes());
    let grown = peak_rss_kib(edge.pid()).saturating_sub(before);
    eprintln!("50 MB upload: edge peak RSS grew by {grown} KiB");
    assert!(
        grown < 20 * 1024,
        "the edge's peak memory grew by {grown} KiB"
    );
}

/// An origin that accepts WebSocket connections (tungstenite's server handshake) and echoes
/// every message back.
fn websocket_echo_origin() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let Ok(mut ws) = tungstenite::accept(stream) else {
                    return;
                };
                while let Ok(message) = ws.read() {
                    if message.is_close() || ws.send(message).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn websocket_upgrades_are_tunnelled() {
    let origin = websocket_echo_origin().to_string();
    let edge = Edge::start("conn-websocket", |l, a| policy(l, a, &origin, "", ""), &[]);
    // Many upgrades in a row: a race between the 101 and the first frame would show in some.
    for round in 0..30 {
        let stream = connect(&edge);
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (mut ws, response) = tungstenite::client::client("ws://example.com/chat", stream)
            .unwrap_or_else(|e| panic!("round {round}: handshake through the edge: {e}"));
        assert_eq!(response.status(), 101, "round {round}");
        assert!(
            response.headers().contains_key("sec-websocket-accept"),
            "round {round}: {response:?}"
        );
        for i in 0..3 {
            let text = format!("hello {round}.{i}");
            ws.send(tungstenite::Message::text(text.clone())).unwrap();
            let echoed = ws
                .read()
                .unwrap_or_else(|e| panic!("round {round}.{i}: no echo: {e}"));
            assert_eq!(echoed.into_text().unwrap().as_str(), text, "round {round}");
        }
        ws.close(None).unwrap();
    }
}

/// An HTTP/1.1 origin with keep-alive, one thread per connection, that answers every request
/// with its own path as the body and records every request target it parsed: a request made of
/// another request's body bytes would show up in that record.
struct PathOrigin {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl PathOrigin {
    fn start() -> PathOrigin {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let record = record.clone();
                std::thread::spawn(move || Self::serve(stream, &record));
            }
        });
        PathOrigin { addr, seen }
    }

    fn serve(mut stream: TcpStream, record: &std::sync::Mutex<Vec<String>>) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            // Parse one request head, then skip its Content-Length body.
            let (head_len, path, body_len) = loop {
                let mut headers = [httparse::EMPTY_HEADER; 64];
                let mut req = httparse::Request::new(&mut headers);
                match req.parse(&buf) {
                    Ok(httparse::Status::Complete(n)) => {
                        let body_len = req
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                            .unwrap_or(0usize);
                        break (n, req.path.unwrap_or_default().to_string(), body_len);
                    }
                    Ok(httparse::Status::Partial) => match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    },
                    Err(_) => return,
                }
            };
            record.lock().unwrap().push(path.clone());
            while buf.len() < head_len + body_len {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..head_len + body_len);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{path}",
                path.len()
            );
            if stream.write_all(response.as_bytes()).is_err() {
                return;
            }
        }
    }
}

#[test]
fn no_bytes_cross_between_clients_through_the_origin_pool() {
    let origin = PathOrigin::start();
    let o = origin.addr.to_string();
    let edge = Edge::start("conn-pool", |l, a| policy(l, a, &o, "", ""), &[]);
    let http = client(&edge);
    for round in 0..5 {
        // A client that promises a body and leaves mid-way, after bytes that look like a
        // request: the origin connection that carried them must not serve anyone else.
        let mut quitter = connect(&edge);
        quitter
            .write_all(
                b"POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 1000\r\n\r\n\
                  GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n",
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(quitter);
        // Clients after it, on the same pool, each get the answer to their own request.
        std::thread::scope(|scope| {
            for i in 0..8 {
                let http = &http;
                scope.spawn(move || {
                    for j in 0..3 {
                        let path = format!("/client-{round}-{i}-{j}");
                        let resp = http
                            .get(format!("http://example.com{path}"))
                            .send()
                            .unwrap();
                        assert_eq!(resp.status(), 200, "{path}");
                        assert_eq!(resp.text().unwrap(), path);
                    }
                });
            }
        });
    }
    let seen = origin.seen.lock().unwrap();
    assert!(
        !seen.iter().any(|p| p == "/smuggled"),
        "the origin read a request out of another request's body: {seen:?}"
    );
    assert_eq!(seen.iter().filter(|p| *p == "/upload").count(), 5);
    assert_eq!(seen.len(), 5 + 5 * 8 * 3);
}

/// The origin's echo of a request the edge proxied, read to the close its `Connection: close`
/// asks for (the echo of a large request comes chunked).
fn proxied_echo(edge: &Edge, request: &[u8]) -> Value {
    let mut s = connect(edge);
    s.write_all(request).unwrap();
    let (bytes, closed) = read_to_close(&mut s, Duration::from_secs(30));
    assert!(closed, "{}", String::from_utf8_lossy(&bytes));
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(head_len)) = parsed.parse(&bytes) else {
        panic!("no whole response: {}", String::from_utf8_lossy(&bytes));
    };
    let mut body = bytes[head_len..].to_vec();
    assert_eq!(parsed.code, Some(200), "{}", String::from_utf8_lossy(&body));
    let chunked = parsed.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding") && h.value.eq_ignore_ascii_case(b"chunked")
    });
    if chunked {
        let mut rest = &body[..];
        let mut out = Vec::new();
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16)
                    .unwrap();
            rest = &rest[line_end + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        body = out;
    }
    serde_json::from_slice(&body).unwrap()
}

/// The limits on a request head that docs/policy.md documents ("Requests the edge does not
/// accept"), each exactly at the limit (proxied, whole) and one byte or one line over (refused
/// with its code, never forwarded): the request target 16 KiB (414), the header section 32 KiB
/// counted as its lines (`name: value` and CRLF; 431), and 256 header lines (431).
#[test]
fn head_limits_hold_exactly_at_their_boundaries() {
    const TARGET: usize = 16 * 1024;
    const SECTION: usize = 32 * 1024;
    const LINES: usize = 256;
    let (origin, edge) = echo_edge("conn-boundaries", "", "", &[]);
    // Three header lines in every request below.
    let fixed = format!("Host: example.com\r\nConnection: close\r\n{JSON}");

    // The target, path and query: exactly 16 KiB is proxied, one byte more is 414.
    let target = |len: usize| format!("/?q={}", "t".repeat(len - 4));
    let at = target(TARGET);
    assert_eq!(at.len(), TARGET);
    let echo = proxied_echo(
        &edge,
        format!("GET {at} HTTP/1.1\r\n{fixed}\r\n").as_bytes(),
    );
    assert_eq!(
        echo["path"],
        at.as_str(),
        "the whole target reached the origin"
    );
    assert_eq!(origin.received(), 1);
    let over = target(TARGET + 1);
    let resp = raw_exchange(
        &mut connect(&edge),
        format!("GET {over} HTTP/1.1\r\n{fixed}\r\n").as_bytes(),
    );
    assert_eq!(
        assert_json_problem(&resp, 414)["error_name"],
        "uri_too_long"
    );
    assert_eq!(origin.received(), 1, "the 414 was not forwarded");

    // The header section: lines of exactly 32 KiB in all are proxied, one byte more is 431.
    let filled = |section: usize| {
        let value = "f".repeat(section - fixed.len() - "X-Fill: \r\n".len());
        let lines = format!("{fixed}X-Fill: {value}\r\n");
        assert_eq!(lines.len(), section);
        (lines, value)
    };
    let (lines, value) = filled(SECTION);
    let echo = proxied_echo(
        &edge,
        format!("GET /section HTTP/1.1\r\n{lines}\r\n").as_bytes(),
    );
    assert_eq!(echo["headers"]["x-fill"], value.as_str());
    assert_eq!(origin.received(), 2);
    let (lines, _) = filled(SECTION + 1);
    let resp = raw_exchange(
        &mut connect(&edge),
        format!("GET /section HTTP/1.1\r\n{lines}\r\n").as_bytes(),
    );
    assert_eq!(
        assert_json_problem(&resp, 431)["error_name"],
        "request_header_fields_too_large"
    );
    assert_eq!(origin.received(), 2, "the 431 was not forwarded");

    // The header lines: exactly 256 are proxied, one more is 431 and the connection closes.
    let numbered = |count: usize| -> String {
        let extra: String = (0..count - 3).map(|i| format!("X-N{i}: v\r\n")).collect();
        format!("GET /lines HTTP/1.1\r\n{fixed}{extra}\r\n")
    };
    let echo = proxied_echo(&edge, numbered(LINES).as_bytes());
    let last = format!("x-n{}", LINES - 4);
    assert_eq!(echo["headers"][last.as_str()], "v", "the last line arrived");
    assert_eq!(origin.received(), 3);
    let resp = refused_exchange(&edge, numbered(LINES + 1).as_bytes());
    assert_eq!(
        assert_json_problem(&resp, 431)["error_name"],
        "request_header_fields_too_large"
    );
    assert_eq!(resp.header("connection"), Some("close"));
    assert_eq!(origin.received(), 3, "the 431 was not forwarded");
}
