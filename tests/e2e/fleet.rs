//! Fleet-scope rate limits through the real binary: three `signpost` processes share one real
//! `redis-server` (started here), and a client spreads its requests over them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// A `redis-server` on a loopback port, killed when dropped. `None` when the binary is not
/// installed (a loud skip, or a failure under `SIGNPOST_NO_SKIP=1`).
pub(crate) struct Redis {
    pub(crate) port: u16,
    child: Option<Child>,
    _dir: Scratch,
}

impl Redis {
    pub(crate) fn start() -> Option<Redis> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok();
        if !required(installed, "redis-server") {
            return None;
        }
        let mut redis = Redis {
            port: free_port(),
            child: None,
            _dir: Scratch::new("redis"),
        };
        redis.spawn();
        Some(redis)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self._dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.try_command("PING").is_some_and(|r| r.contains("PONG")) {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not answer on port {}", self.port);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One inline command; the reply's text (a bulk reply's payload).
    pub(crate) fn try_command(&self, cmd: &str) -> Option<String> {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().ok()?;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
        let mut r = BufReader::new(s);
        let mut first = String::new();
        r.read_line(&mut first).ok()?;
        if let Some(len) = first.strip_prefix('$') {
            let len: usize = len.trim().parse().ok()?;
            let mut body = vec![0; len];
            r.read_exact(&mut body).ok()?;
            return String::from_utf8(body).ok();
        }
        Some(first)
    }

    /// A numeric field of `INFO <section>`.
    fn info(&self, section: &str, field: &str) -> u64 {
        let info = self.try_command(&format!("INFO {section}")).expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
    }

    /// `calls` and `failed_calls` of one command in `INFO commandstats`.
    fn calls(&self, command: &str) -> (u64, u64) {
        let info = self.try_command("INFO commandstats").expect("INFO");
        let Some(line) = info
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        else {
            return (0, 0);
        };
        let field = |name: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0)
        };
        (field("calls"), field("failed_calls"))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

const RULE: &str = r#"
[[rate_limit]]
id = "shared"
scope = "fleet"
characteristics = ['http.request.headers["x-key"]']
period = "1m"
requests_per_period = 50
"#;

/// Three edges with the same policy, in front of one origin.
fn fleet(redis: &Redis, origin: &EchoOrigin, timeout: &str) -> Vec<Edge> {
    let top = format!(
        "[redis]\nurl = \"{}\"\ntimeout = \"{timeout}\"\nkey_prefix = \"e2e:\"\n{RULE}",
        redis.url()
    );
    let o = origin.addr.to_string();
    (0..3)
        .map(|i| {
            Edge::start(
                &format!("fleet-{i}"),
                |l, a| policy(l, a, &o, &top, ""),
                &[],
            )
        })
        .collect()
}

/// One answer: edge index, status, Retry-After, when the request was sent and answered.
type Answer = (usize, u16, Option<u64>, Instant, Instant);

/// `n` requests with key `key`, round-robin over the edges, one at a time.
fn spread(edges: &[Edge], key: &str, n: usize) -> Vec<Answer> {
    let clients: Vec<_> = edges.iter().map(client).collect();
    (0..n)
        .map(|i| {
            let e = i % edges.len();
            let sent = Instant::now();
            let r = clients[e]
                .get(edges[e].url("/"))
                .header("x-key", key)
                .send()
                .unwrap_or_else(|err| panic!("request {i} to edge {e} failed: {err}"));
            let retry = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            (e, r.status().as_u16(), retry, sent, Instant::now())
        })
        .collect()
}

fn metric_sum(edges: &[Edge], name: &str, labels: &[(&str, &str)]) -> f64 {
    edges
        .iter()
        .map(|e| metric(&admin_get(e, "/metrics").1, name, labels).unwrap_or(0.0))
        .sum()
}

/// Exactly `limit` of 300 pass, every refusal's Retry-After agrees with the shared window (which
/// started at the first request) within a second, and Redis was called once per counted request.
fn assert_shared_count(redis: &Redis, edges: &[Edge], key: &str) {
    let evalsha = redis.calls("evalsha");
    let answers = spread(edges, key, 300);
    let passed = answers.iter().filter(|a| a.1 == 200).count();
    let refused = answers.iter().filter(|a| a.1 == 429).count();
    assert_eq!((passed, refused), (50, 250), "key {key}");
    // The shared window started while the first request was in flight; a refusal's wait was
    // computed while it was in flight. Retry-After is that wait rounded up to whole seconds.
    let (first_sent, first_done) = (answers[0].3, answers[0].4);
    let period = Duration::from_secs(60);
    for (e, _, retry, sent, done) in answers.iter().filter(|a| a.1 == 429) {
        let retry = retry.expect("a refusal carries Retry-After");
        let least = (first_sent + period).saturating_duration_since(*done);
        let most = (first_done + period).saturating_duration_since(*sent);
        assert!(
            retry as f64 >= least.as_secs_f64() && retry as f64 <= most.as_secs_f64() + 1.0,
            "edge {e}: Retry-After {retry} but the shared window ends in {least:?}..{most:?}"
        );
    }
    let start = first_sent;
    // One call per counted request: the 50 allowed, plus the first refusal on each edge; the
    // other refusals are answered from each edge's cache, without Redis. A fresh Redis answers
    // an edge's first EVALSHA with NOSCRIPT (failed, then SCRIPT LOAD and EVALSHA again).
    let (calls, failed) = redis.calls("evalsha");
    let (calls, failed) = (calls - evalsha.0, failed - evalsha.1);
    assert_eq!(calls - failed, 50 + 3, "EVALSHA calls that ran, key {key}");
    assert!(
        failed <= 3,
        "{failed} EVALSHA failed (NOSCRIPT at most once per edge)"
    );
    // A minute's window, so that a loaded machine still sends the 300 within it.
    assert!(
        start.elapsed() < Duration::from_secs(59),
        "the 300 requests must fit in the window"
    );
}

#[test]
fn three_edges_share_one_count_and_survive_redis_going_away() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let origin = EchoOrigin::start();
    let edges = fleet(&redis, &origin, "100ms");

    // 1. Shared counting, and the Redis calls it costs.
    assert_shared_count(&redis, &edges, "a");
    assert_eq!(
        metric_sum(
            &edges,
            "signpost_fleet_calls_total",
            &[("outcome", "allowed")]
        ),
        50.0
    );
    assert_eq!(
        metric_sum(
            &edges,
            "signpost_fleet_calls_total",
            &[("outcome", "refused")]
        ),
        3.0
    );

    // 2. Redis dies in the middle of a stream of requests: no request fails; from then on
    //    every edge counts locally (on_error = "local").
    let mut answers = spread(&edges, "b", 9);
    redis.kill();
    answers.extend(spread(&edges, "b", 30));
    assert!(
        answers.iter().all(|a| a.1 == 200),
        "statuses with Redis down: {:?}",
        answers.iter().map(|a| a.1).collect::<Vec<_>>()
    );
    for (i, e) in edges.iter().enumerate() {
        let text = admin_get(e, "/metrics").1;
        let fallbacks = metric(
            &text,
            "signpost_fleet_fallbacks_total",
            &[("action", "local")],
        )
        .unwrap_or(0.0);
        assert_eq!(
            fallbacks, 10.0,
            "edge {i} fell back for each of its requests"
        );
    }
    // Local fallback still limits: 50 per edge, so the 51st request on one edge is refused.
    let http = client(&edges[0]);
    let mut statuses = Vec::new();
    for _ in 0..51 {
        let r = http
            .get(edges[0].url("/"))
            .header("x-key", "c")
            .send()
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 50);
    assert_eq!(statuses.last(), Some(&429));

    // 3. Redis comes back (empty: no script, no counters): shared counting resumes by itself,
    //    with no restart of the edges.
    redis.spawn();
    let deadline = Instant::now() + Duration::from_secs(15);
    let http: Vec<_> = edges.iter().map(client).collect();
    let mut back = [false; 3];
    while !back.iter().all(|b| *b) {
        assert!(
            Instant::now() < deadline,
            "shared counting did not resume: {back:?}"
        );
        for (i, e) in edges.iter().enumerate() {
            let before = metric(
                &admin_get(e, "/metrics").1,
                "signpost_fleet_calls_total",
                &[("outcome", "allowed")],
            )
            .unwrap_or(0.0);
            let _ = http[i].get(e.url("/")).header("x-key", "probe").send();
            let after = metric(
                &admin_get(e, "/metrics").1,
                "signpost_fleet_calls_total",
                &[("outcome", "allowed")],
            )
            .unwrap_or(0.0);
            back[i] = back[i] || after > before;
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert_shared_count(&redis, &edges, "d");

    // 4. A reload with the same [redis] keeps the connection: Redis sees no new client.
    let connections = redis.info("stats", "total_connections_received");
    for e in &edges {
        e.signal("HUP");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_sum(
        &edges,
        "signpost_policy_reloads_total",
        &[("outcome", "ok")],
    ) < 3.0
    {
        assert!(Instant::now() < deadline, "the edges did not reload");
        thread::sleep(Duration::from_millis(50));
    }
    let answers = spread(&edges, "e", 6);
    assert!(answers.iter().all(|a| a.1 == 200));
    assert_eq!(
        redis.info("stats", "total_connections_received"),
        connections + 1, // this call's own connection
        "a reload opened no new Redis connection"
    );

    // Errors were logged, at a bounded rate: Redis was down for a few seconds, so at most a
    // couple of lines per edge, however many requests fell back.
    for (i, e) in edges.iter().enumerate() {
        let lines = e.log().matches("Redis did not count").count();
        assert!(
            (1..=3).contains(&lines),
            "edge {i} logged {lines} fallback lines"
        );
    }
    assert!(origin.received() > 0);
}

/// Redis down from the start, and no traffic: the edge says so by its cause (nothing listens, so
/// the connection is refused; it did not stop answering), at most once per 10 s, as the docs
/// promise; the keep-alive pings every second and the connection is renewed every 3 s meanwhile.
#[test]
fn a_redis_that_is_down_is_logged_by_its_cause_at_most_once_per_10s() {
    let origin = EchoOrigin::start();
    let nothing_listens = free_port();
    let top = format!("[redis]\nurl = \"redis://127.0.0.1:{nothing_listens}\"\n{RULE}");
    let o = origin.addr.to_string();
    let edge = Edge::start("fleet-down", |l, a| policy(l, a, &o, &top, ""), &[]);
    thread::sleep(Duration::from_secs(12));
    let log = edge.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Redis") && l.contains("WARN"))
        .collect();
    assert!(
        (1..=2).contains(&lines.len()),
        "{} lines in 12 s:\n{}",
        lines.len(),
        lines.join("\n")
    );
    for line in &lines {
        assert!(line.contains("connection refused"), "{line}");
        assert!(!line.contains("stopped answering"), "{line}");
    }
}

#[test]
fn a_slow_redis_costs_at_most_the_timeout() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let origin = EchoOrigin::start();
    let top = format!(
        "[redis]\nurl = \"{}\"\ntimeout = \"50ms\"\non_error = \"allow\"\n{RULE}",
        redis.url()
    );
    let o = origin.addr.to_string();
    let edge = Edge::start("fleet-slow", |l, a| policy(l, a, &o, &top, ""), &[]);
    // Warm: the connection is up and the script loaded.
    assert_eq!(spread(std::slice::from_ref(&edge), "warm", 1)[0].1, 200);
    // Redis stops answering for 5 s; the sleeper notes when it answers again.
    let port = redis.port;
    let sleeper = thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"DEBUG SLEEP 5\r\n").unwrap();
        let mut buf = [0; 16];
        let _ = s.read(&mut buf);
        Instant::now()
    });
    thread::sleep(Duration::from_millis(100));
    let answers = spread(std::slice::from_ref(&edge), "slow", 5);
    let redis_woke = sleeper.join().unwrap();
    // Each request was answered while Redis still slept: none waited for it (the metrics
    // below say each gave up at the timeout).
    for (_, status, _, sent, done) in &answers {
        assert_eq!(*status, 200, "on_error = allow lets it through");
        assert!(
            *done < redis_woke,
            "a request answered {:?} after it was sent waited for the stalled Redis",
            *done - *sent
        );
    }
    let text = admin_get(&edge, "/metrics").1;
    assert_eq!(
        metric(
            &text,
            "signpost_fleet_fallbacks_total",
            &[("cause", "timeout"), ("action", "allow")]
        ),
        Some(5.0)
    );
    assert_eq!(
        metric(
            &text,
            "signpost_fleet_calls_total",
            &[("outcome", "timeout")]
        ),
        Some(5.0)
    );
    assert!(metric(&text, "signpost_fleet_call_seconds_count", &[]).unwrap_or(0.0) >= 1.0);
}

#[test]
fn mitigation_timeout_and_expiry_come_from_redis() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let origin = EchoOrigin::start();
    let top = format!(
        "[redis]\nurl = \"{}\"\ntimeout = \"100ms\"\nkey_prefix = \"mit:\"\n\
         [[rate_limit]]\nid = \"login\"\nscope = \"fleet\"\nperiod = \"10s\"\n\
         requests_per_period = 2\nmitigation_timeout = \"30s\"\n",
        redis.url()
    );
    let o = origin.addr.to_string();
    let edges: Vec<Edge> = (0..2)
        .map(|i| {
            Edge::start(
                &format!("fleet-mit-{i}"),
                |l, a| policy(l, a, &o, &top, ""),
                &[],
            )
        })
        .collect();
    // Two pass (one on each edge), the third is refused for the mitigation time, and the other
    // edge, asking Redis for the first time about the block, gets the same remaining time.
    let answers = spread(&edges, "any", 4);
    let statuses: Vec<u16> = answers.iter().map(|a| a.1).collect();
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(answers[2].2, Some(30));
    assert!(matches!(answers[3].2, Some(29 | 30)), "{:?}", answers[3].2);
    // The counter is one key under the prefix, and Redis expires it when the block ends.
    let keys = redis.try_command("KEYS mit:*").unwrap();
    assert!(keys.starts_with("*1"), "one key: {keys}");
    let mut listed = Vec::new();
    {
        let addr: SocketAddr = format!("127.0.0.1:{}", redis.port).parse().unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"KEYS mit:*\r\n").unwrap();
        let mut r = BufReader::new(s);
        for _ in 0..3 {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            listed.push(line.trim().to_string());
        }
    }
    let key = &listed[2];
    assert!(key.starts_with("mit:rl:"), "{key}");
    let pttl: i64 = redis
        .try_command(&format!("PTTL {key}"))
        .unwrap()
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!((25_000..=30_000).contains(&pttl), "PTTL {pttl}");
}

/// A TCP relay in front of Redis whose open connections can be frozen: a frozen connection stays
/// open but carries nothing, like a path that died without a reset (an edge or Redis that moved
/// to another address). Connections opened after a freeze are relayed as usual.
struct Relay {
    port: u16,
    accepted: Arc<AtomicUsize>,
    frozen_below: Arc<AtomicUsize>,
}

impl Relay {
    fn start(to: u16) -> Relay {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let frozen_below = Arc::new(AtomicUsize::new(0));
        let (acc, frozen) = (accepted.clone(), frozen_below.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let index = acc.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let frozen = frozen.clone();
                    thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            match from.read(&mut buf) {
                                Ok(0) | Err(_) => {
                                    let _ = into.shutdown(std::net::Shutdown::Both);
                                    return;
                                }
                                // Frozen: swallow the bytes, keep the socket open.
                                Ok(_) if index < frozen.load(Ordering::SeqCst) => {}
                                Ok(n) => {
                                    if into.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    });
                }
            }
        });
        Relay {
            port,
            accepted,
            frozen_below,
        }
    }

    /// Freezes every connection open now; returns how many there were.
    fn freeze(&self) -> usize {
        let open = self.accepted.load(Ordering::SeqCst);
        self.frozen_below.store(open, Ordering::SeqCst);
        open
    }
}

#[test]
fn a_connection_that_stops_answering_is_replaced() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let relay = Relay::start(redis.port);
    let origin = EchoOrigin::start();
    let top = format!(
        "[redis]\nurl = \"redis://127.0.0.1:{}\"\ntimeout = \"50ms\"\n{RULE}",
        relay.port
    );
    let o = origin.addr.to_string();
    let edge = Edge::start("fleet-stale", |l, a| policy(l, a, &o, &top, ""), &[]);
    let edges = std::slice::from_ref(&edge);
    let allowed = || {
        metric(
            &admin_get(&edge, "/metrics").1,
            "signpost_fleet_calls_total",
            &[("outcome", "allowed")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(spread(edges, "before", 1)[0].1, 200);
    assert_eq!(allowed(), 1.0, "counted in Redis before the freeze");

    let frozen = relay.freeze();
    assert!(frozen >= 1);
    // Redis no longer answers on the edge's connection: requests fall back (and never fail)
    // until the edge gives up on that connection and opens a new one.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut keys = 0;
    while allowed() < 2.0 {
        assert!(
            Instant::now() < deadline,
            "still no answer from Redis 15 s after the connection froze ({} connections opened)",
            relay.accepted.load(Ordering::SeqCst)
        );
        keys += 1;
        assert_eq!(spread(edges, &format!("during-{keys}"), 1)[0].1, 200);
        thread::sleep(Duration::from_millis(200));
    }
    assert!(
        relay.accepted.load(Ordering::SeqCst) > frozen,
        "counting resumed on a new connection"
    );
    let text = admin_get(&edge, "/metrics").1;
    assert!(
        metric(
            &text,
            "signpost_fleet_fallbacks_total",
            &[("cause", "timeout"), ("action", "local")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "the requests during the freeze fell back"
    );
}
