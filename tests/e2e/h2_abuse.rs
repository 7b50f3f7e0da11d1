//! HTTP/2 and TLS clients that abuse the protocol within its rules, against the release binary's
//! TLS listener: frames written by the test over a real TLS connection (rustls), origins that
//! count what reaches them.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::support::*;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const NO_ERROR: u32 = 0x0;
const CANCEL: u32 = 0x8;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// An origin that answers each request after `delay` with `body_len` bytes, counts the ones it is
/// working on (and the most at once), and notes when the edge let go of each connection. Paths
/// under `/fast` are answered at once with two bytes and not counted in flight: ordinary clients
/// use them beside the attacker's requests.
struct CountingOrigin {
    addr: SocketAddr,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
    /// When each request arrived and when its connection was released (closed or broken).
    released: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

impl CountingOrigin {
    fn start(delay: Duration, body_len: usize) -> CountingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let origin = CountingOrigin {
            addr,
            in_flight: Arc::default(),
            peak: Arc::default(),
            received: Arc::default(),
            released: Arc::default(),
        };
        let (in_flight, peak, received, released) = (
            origin.in_flight.clone(),
            origin.peak.clone(),
            origin.received.clone(),
            origin.released.clone(),
        );
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (in_flight, peak, received, released) = (
                    in_flight.clone(),
                    peak.clone(),
                    received.clone(),
                    released.clone(),
                );
                thread::spawn(move || {
                    loop {
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n") {
                            match conn.read(&mut byte) {
                                Ok(1) => head.push(byte[0]),
                                _ => return,
                            }
                        }
                        let arrived = Instant::now();
                        received.fetch_add(1, Ordering::SeqCst);
                        let fast = head.starts_with(b"GET /fast");
                        if !fast {
                            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            thread::sleep(delay);
                        }
                        let len = if fast { 2 } else { body_len };
                        let sent = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {len}\r\n\r\n"
                        )
                        .and_then(|()| {
                            let chunk = vec![b'x'; 64 * 1024];
                            let mut left = len;
                            while left > 0 {
                                let n = left.min(chunk.len());
                                conn.write_all(&chunk[..n])?;
                                left -= n;
                            }
                            Ok(())
                        });
                        if !fast {
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                        }
                        if sent.is_err() {
                            released.lock().unwrap().push((arrived, Instant::now()));
                            return;
                        }
                    }
                });
            }
        });
        origin
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// An edge with a TLS listener for `example.com` in front of `origin`; `connections` is the
/// body of its `[connections]` table.
struct TlsEdge {
    edge: Edge,
    cert_pem: String,
}

fn tls_edge(name: &str, origin: SocketAddr, connections: &str) -> TlsEdge {
    let scratch = Scratch::new(name);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_path = scratch.write("cert.pem", &cert.pem());
    let key_path = scratch.write("key.pem", &key.serialize_pem());
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        r#"admin = "{admin}"

[[listener]]
addr = "{addr}"
tls = {{ cert = "{}", key = "{}" }}

[connections]
{connections}

[[zone]]
name = "test"
hosts = ["example.com"]
origin = "{origin}"
"#,
        cert_path.display(),
        key_path.display()
    );
    let config = scratch.write("policy.toml", &text);
    let edge = Edge::start_with_file(scratch, config, addr, admin, &[]);
    TlsEdge {
        edge,
        cert_pem: cert.pem(),
    }
}

impl TlsEdge {
    fn metrics(&self) -> String {
        admin_get(&self.edge, "/metrics").1
    }

    fn event(&self, event: &str) -> f64 {
        metric(
            &self.metrics(),
            "signpost_connection_events_total",
            &[("event", event)],
        )
        .unwrap_or(0.0)
    }

    /// A client for ordinary requests from `source` (another loopback address than the
    /// attacker's 127.0.0.1, so that per-client caps keep them apart).
    fn ordinary_client(&self, source: IpAddr) -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(self.cert_pem.as_bytes()).unwrap()])
            .resolve("example.com", self.edge.addr)
            .local_address(source)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }
}

/// One frame as read from the edge.
#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// A raw HTTP/2 client over TLS: frames written by hand, HPACK literals without indexing.
struct RawH2 {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    next_stream: u32,
}

impl RawH2 {
    fn connect(t: &TlsEdge, settings: &[(u16, u32)]) -> RawH2 {
        let conn = tls_client(t, &[b"h2"]);
        let tcp = TcpStream::connect(t.edge.addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut h2 = RawH2 {
            tls: rustls::StreamOwned::new(conn, tcp),
            next_stream: 1,
        };
        h2.write_raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let mut payload = Vec::new();
        for (id, value) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        h2.frame(SETTINGS, 0, 0, &payload);
        h2
    }

    fn write_raw(&mut self, bytes: &[u8]) {
        // A write to a connection the edge closed fails; the reads then tell what happened.
        let _ = self.tls.write_all(bytes);
        let _ = self.tls.flush();
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = payload.len();
        let mut bytes = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        bytes.extend_from_slice(&stream.to_be_bytes());
        bytes.extend_from_slice(payload);
        self.write_raw(&bytes);
    }

    /// Opens a stream with a GET for `path`; returns its id.
    fn get(&mut self, path: &str) -> u32 {
        let mut block = Vec::new();
        for (name, value) in [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "example.com"),
            (":path", path),
        ] {
            // Literal header field without indexing, new name (RFC 7541, 6.2.2).
            block.push(0x00);
            block.push(name.len() as u8);
            block.extend_from_slice(name.as_bytes());
            block.push(value.len() as u8);
            block.extend_from_slice(value.as_bytes());
        }
        let id = self.next_stream;
        self.next_stream += 2;
        self.frame(HEADERS, END_HEADERS | END_STREAM, id, &block);
        id
    }

    fn reset(&mut self, stream: u32) {
        self.frame(RST_STREAM, 0, stream, &CANCEL.to_be_bytes());
    }

    /// Reads frames for `within`, acknowledging the edge's SETTINGS and PINGs; stops early at the
    /// end of the connection. Returns the frames and whether the connection ended.
    fn read_for(&mut self, within: Duration) -> (Vec<Frame>, bool) {
        let deadline = Instant::now() + within;
        let mut frames = Vec::new();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        while Instant::now() < deadline {
            match self.tls.read(&mut chunk) {
                Ok(0) => return (frames, true),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return (frames, true),
            }
            while buf.len() >= 9 {
                let len =
                    usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let frame = Frame {
                    kind: buf[3],
                    flags: buf[4],
                    stream: u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff,
                    payload: buf[9..9 + len].to_vec(),
                };
                buf.drain(..9 + len);
                match (frame.kind, frame.flags & ACK) {
                    (SETTINGS, 0) => self.frame(SETTINGS, ACK, 0, &[]),
                    (PING, 0) => {
                        let payload = frame.payload.clone();
                        self.frame(PING, ACK, 0, &payload)
                    }
                    _ => {}
                }
                frames.push(frame);
            }
        }
        (frames, false)
    }
}

/// The error code of the first GOAWAY among `frames`.
fn goaway_code(frames: &[Frame]) -> Option<u32> {
    frames
        .iter()
        .find(|f| f.kind == GOAWAY)
        .map(|f| u32::from_be_bytes(f.payload[4..8].try_into().unwrap()))
}

/// Streams the edge ended (END_STREAM on HEADERS or DATA) among `frames`.
fn ended_streams(frames: &[Frame]) -> Vec<u32> {
    frames
        .iter()
        .filter(|f| matches!(f.kind, HEADERS | DATA) && f.flags & END_STREAM != 0)
        .map(|f| f.stream)
        .collect()
}

fn second_loopback() -> IpAddr {
    "127.0.0.2".parse().unwrap()
}

#[test]
fn accepted_then_reset_streams_close_the_connection_and_origin_work_stays_capped() {
    let origin = CountingOrigin::start(Duration::from_secs(3), 16);
    let t = tls_edge(
        "h2-paced-reset",
        origin.addr,
        "max_in_flight_per_client = 100",
    );
    let mut attacker = RawH2::connect(&t, &[]);
    attacker.read_for(Duration::from_millis(200));

    // Meanwhile an ordinary client on its own connection, from another address.
    let ordinary = t.ordinary_client(second_loopback());
    let url = format!("https://example.com:{}/fast/ordinary", t.edge.addr.port());
    let ordinary_run = thread::spawn(move || {
        let mut ok = 0;
        for _ in 0..10 {
            if ordinary.get(&url).send().is_ok_and(|r| r.status() == 200) {
                ok += 1;
            }
            thread::sleep(Duration::from_millis(150));
        }
        ok
    });

    let mut code = None;
    let mut batches = 0;
    while batches < 10 && code.is_none() {
        batches += 1;
        let ids: Vec<u32> = (0..90)
            .map(|i| attacker.get(&format!("/slow/{i}")))
            .collect();
        // Long enough for the edge to accept and forward the batch.
        attacker.read_for(Duration::from_millis(300));
        for id in ids {
            attacker.reset(id);
        }
        let (frames, ended) = attacker.read_for(Duration::from_millis(300));
        code = goaway_code(&frames);
        if ended && code.is_none() {
            break;
        }
    }
    assert_eq!(
        code,
        Some(ENHANCE_YOUR_CALM),
        "GOAWAY ENHANCE_YOUR_CALM after {batches} batches"
    );
    assert!(batches <= 3, "closed only after {batches} batches");
    // Give the origin time to see everything the edge forwarded.
    thread::sleep(Duration::from_millis(500));
    assert!(
        origin.peak() <= 100,
        "origin in-flight peak {} over max_in_flight_per_client 100",
        origin.peak()
    );
    assert!(origin.peak() >= 90, "the first batch reached the origin");
    assert_eq!(
        ordinary_run.join().unwrap(),
        10,
        "the ordinary client was served"
    );
    assert!(t.event("h2_premature_resets") >= 1.0);
    assert!(t.event("request_cancelled") >= 90.0);
    assert!(t.event("too_many_in_flight") >= 1.0);
    let log = t.edge.log();
    assert!(
        log.contains("request_cancelled") && !log.contains("error_code=400"),
        "cancellations are logged as such, never as 400s"
    );
}

#[test]
fn a_browser_that_cancels_bursts_keeps_its_connection() {
    let origin = CountingOrigin::start(Duration::from_secs(2), 16);
    let t = tls_edge("h2-browser", origin.addr, "");
    let mut browser = RawH2::connect(&t, &[]);
    browser.read_for(Duration::from_millis(200));
    // Fifteen page views: twenty loads complete, ten slow ones are cancelled as the user moves
    // on (150 cancellations, a third of the 450 streams).
    for view in 0..15 {
        let fast: Vec<u32> = (0..20)
            .map(|i| browser.get(&format!("/fast/{view}/{i}")))
            .collect();
        let slow: Vec<u32> = (0..10)
            .map(|i| browser.get(&format!("/slow/{view}/{i}")))
            .collect();
        let mut ended = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !fast.iter().all(|id| ended.contains(id)) && Instant::now() < deadline {
            let (frames, closed) = browser.read_for(Duration::from_millis(100));
            assert_eq!(goaway_code(&frames), None, "no GOAWAY at view {view}");
            assert!(!closed, "connection closed at view {view}");
            ended.extend(ended_streams(&frames));
        }
        assert!(
            fast.iter().all(|id| ended.contains(id)),
            "view {view} loaded"
        );
        for id in slow {
            browser.reset(id);
        }
    }
    let last = browser.get("/fast/after");
    let (frames, closed) = browser.read_for(Duration::from_secs(2));
    assert!(!closed && goaway_code(&frames).is_none());
    assert!(ended_streams(&frames).contains(&last), "still served");
    assert_eq!(t.event("h2_premature_resets"), 0.0);
}

#[test]
fn a_reader_that_never_reads_is_ended_at_the_send_deadline() {
    let origin = CountingOrigin::start(Duration::ZERO, 32 * 1024 * 1024);
    let t = tls_edge("h2-zero-window", origin.addr, r#"send_timeout = "2s""#);
    // HTTP/2: SETTINGS_INITIAL_WINDOW_SIZE = 0, four streams of a 32 MB page.
    // Each end is awaited up to 30 s, half the 60 s default: ended at all, the streams and
    // connections were ended by the policy's 2 s (the metrics say by which deadline).
    let mut reader = RawH2::connect(&t, &[(0x4, 0)]);
    let started = Instant::now();
    let ids: Vec<u32> = (0..4).map(|i| reader.get(&format!("/big/{i}"))).collect();
    let mut reset = Vec::new();
    while reset.len() < ids.len() && started.elapsed() < Duration::from_secs(30) {
        let (frames, _) = reader.read_for(Duration::from_millis(200));
        reset.extend(
            frames
                .iter()
                .filter(|f| f.kind == RST_STREAM)
                .map(|f| f.stream),
        );
    }
    assert!(
        ids.iter().all(|id| reset.contains(id)),
        "every stream ended by the edge within 30 s (reset: {reset:?})"
    );
    // HTTP/1: a client that sends its request and never reads.
    let mut h1 = tls_h1(&t);
    h1.write_all(b"GET /big/h1 HTTP/1.1\r\nhost: example.com\r\n\r\n")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while origin.released.lock().unwrap().len() < 5 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    let released = origin.released.lock().unwrap().clone();
    assert_eq!(released.len(), 5, "the origin connections were released");
    for (arrived, gone) in &released {
        let held = gone.saturating_duration_since(*arrived);
        assert!(
            held >= Duration::from_secs(2),
            "an origin connection released after {held:?}, before the 2 s send deadline"
        );
    }
    assert!(t.event("send_timeout") >= 5.0, "{}", t.metrics());
    drop(h1);
}

/// A TLS client for `example.com` that trusts the edge's certificate and offers `alpn`.
fn tls_client(t: &TlsEdge, alpn: &[&[u8]]) -> rustls::ClientConnection {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(t.cert_pem.as_bytes()).expect("the test certificate"))
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = rustls::pki_types::ServerName::try_from("example.com").unwrap();
    rustls::ClientConnection::new(Arc::new(config), name).unwrap()
}

/// An HTTP/1.1 client over TLS that never reads what it is sent.
fn tls_h1(t: &TlsEdge) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let conn = tls_client(t, &[b"http/1.1"]);
    let tcp = TcpStream::connect(t.edge.addr).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    // Complete the handshake now, then never read again.
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    tls
}

#[test]
fn settings_and_ping_floods_are_closed() {
    let origin = CountingOrigin::start(Duration::ZERO, 16);
    let t = tls_edge("h2-control-flood", origin.addr, "");
    for (kind, payload) in [(PING, vec![0u8; 8]), (SETTINGS, Vec::new())] {
        let mut flooder = RawH2::connect(&t, &[]);
        flooder.read_for(Duration::from_millis(200));
        for _ in 0..2_000 {
            flooder.frame(kind, 0, 0, &payload);
        }
        let (frames, ended) = flooder.read_for(Duration::from_secs(3));
        assert_eq!(
            goaway_code(&frames),
            Some(ENHANCE_YOUR_CALM),
            "flood of {kind}"
        );
        assert!(ended, "the connection ends after the GOAWAY");
        let acks = frames
            .iter()
            .filter(|f| f.kind == kind && f.flags & ACK != 0)
            .count();
        assert!(acks <= 110, "{acks} acknowledgements");
    }
    assert_eq!(t.event("h2_control_flood"), 2.0);
}

#[test]
fn an_http2_connection_is_retired_after_its_request_budget() {
    let origin = CountingOrigin::start(Duration::ZERO, 16);
    let t = tls_edge(
        "h2-budget",
        origin.addr,
        "h2_max_requests_per_connection = 5",
    );
    let mut client = RawH2::connect(&t, &[]);
    let mut ended = Vec::new();
    let mut frames_seen = Vec::new();
    let mut closed = false;
    for i in 0..5 {
        let id = client.get(&format!("/fast/{i}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ended.contains(&id) && Instant::now() < deadline && !closed {
            let (frames, end) = client.read_for(Duration::from_millis(100));
            closed = end;
            ended.extend(ended_streams(&frames));
            frames_seen.extend(frames);
        }
        assert!(ended.contains(&id), "request {i} answered");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !closed && Instant::now() < deadline {
        let (frames, end) = client.read_for(Duration::from_millis(100));
        closed = end;
        frames_seen.extend(frames);
    }
    assert_eq!(goaway_code(&frames_seen), Some(NO_ERROR));
    assert!(closed, "the connection ends once its streams are done");
    assert_eq!(t.event("h2_request_budget"), 1.0);
}

/// 700 connections that never finish a TLS handshake, from one address with a cap of 50: the
/// 650 past the cap are closed as they are accepted, before any handshake deadline fires, and
/// the 50 admitted are held until their deadline cuts them. Told apart by the events (the
/// edge's counters, the order of the closes), not by a wall-clock window: the deadline is the
/// 10 s default, and each wait for a close is up to 60 s.
#[test]
fn silent_and_half_handshakes_are_capped_and_cut_at_the_deadline() {
    let origin = CountingOrigin::start(Duration::ZERO, 16);
    let t = tls_edge(
        "tls-handshakes",
        origin.addr,
        "tls_handshake_timeout = \"10s\"\nmax_per_client = 50",
    );
    let rss_before = rss_kib(t.edge.pid());
    let mut held = Vec::new();
    for i in 0..700 {
        let mut conn = TcpStream::connect(t.edge.addr).unwrap();
        if i % 7 < 2 {
            // Half a ClientHello: a handshake record header announcing 512 bytes, and 40 of them.
            let mut half = vec![
                0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
            ];
            half.extend_from_slice(&[0x5a; 29]);
            conn.write_all(&half).unwrap();
        }
        conn.set_nonblocking(true).unwrap();
        held.push(conn);
    }
    let rss_during = rss_kib(t.edge.pid());
    // An ordinary client from another address is served meanwhile.
    let url = format!("https://example.com:{}/fast/ok", t.edge.addr.port());
    let ordinary = t.ordinary_client(second_loopback());
    assert_eq!(ordinary.get(&url).send().unwrap().status(), 200);

    // Polls every connection until `enough` of them are closed (or 60 s pass).
    let total = held.len();
    let mut closed = vec![false; total];
    let mut poll_until = |enough: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while closed.iter().filter(|c| **c).count() < enough && Instant::now() < deadline {
            for (conn, closed) in held.iter_mut().zip(closed.iter_mut()) {
                if *closed {
                    continue;
                }
                let mut byte = [0u8; 64];
                match conn.read(&mut byte) {
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    // The close, a reset, or an alert for the half ClientHello before the close.
                    Ok(_) | Err(_) => *closed = true,
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        closed.iter().filter(|c| **c).count()
    };
    // The connections past the cap are closed at once: before any handshake deadline fired.
    let early = poll_until(650);
    let timeouts_then = t.event("tls_handshake_timeout");
    assert!(early >= 650, "{early} closed (700 over a cap of 50)");
    assert_eq!(
        timeouts_then, 0.0,
        "the {early} were closed before any handshake deadline fired"
    );
    assert!(
        total - early <= 50,
        "{} held to the deadline",
        total - early
    );
    // The admitted ones are cut by their deadline.
    let all = poll_until(total);
    assert_eq!(all, total, "every connection closed within 60 s");
    assert!(t.event("too_many_connections") >= 650.0);
    assert!(t.event("tls_handshake_timeout") >= 40.0, "{}", t.metrics());
    let grown = rss_during.saturating_sub(rss_before);
    assert!(
        grown < 32 * 1024,
        "memory grew {grown} KiB for 700 handshakes"
    );
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
