//! Rate limits that count answers (`counting_expression`), refusals that last
//! (`mitigation_timeout`), on one edge and shared in a real `redis-server`; and custom rules that
//! divert requests to a second real origin.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fleet::Redis;
use crate::support::*;

const COUNT_404S: &str = r#"
[[rate_limit]]
id = "misses"
characteristics = ['http.request.headers["x-client"]']
counting_expression = 'http.response.code eq 404'
period = "1m"
requests_per_period = 3
"#;

/// One request for `path` as client `who`: status, Retry-After, and the JSON body.
fn get(edge: &Edge, who: &str, path: &str) -> (u16, Option<u64>, Value) {
    let r = client(edge)
        .get(edge.url(path))
        .header("x-client", who)
        .header("accept", "application/json")
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let body = r.json().unwrap_or(Value::Null);
    (status, retry, body)
}

/// The edge's log once it holds `needle` (the access line is written after the answer went out,
/// so a test that just read the answer may be ahead of it); the log as it is after 10 s.
fn access_log(edge: &Edge, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = edge.log();
        if log.contains(needle) || Instant::now() > deadline {
            return log;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_limit_counting_404s_trips_on_404s_only() {
    let (origin, edge) = echo_edge("count-404", COUNT_404S, "", &[]);
    // Many answers that are not 404: none counts.
    for i in 0..10 {
        assert_eq!(get(&edge, "a", "/page").0, 200, "request {i}");
    }
    // Three 404s reach the client (the origin's own), each counted after it went out.
    for i in 0..3 {
        let (status, _, body) = get(&edge, "a", "/missing?status=404");
        assert_eq!(status, 404, "miss {i}");
        assert_eq!(body["path"], "/missing?status=404", "the origin's answer");
    }
    // Now the client is refused, whatever it asks, and the origin does not see it.
    let before = origin.received();
    let (status, retry, problem) = get(&edge, "a", "/page");
    assert_eq!(status, 429);
    assert_eq!(problem["error_code"], 1015);
    let retry = retry.expect("Retry-After");
    assert!(
        (55..=60).contains(&retry),
        "the rest of the 1 min window: {retry}"
    );
    assert_eq!(
        origin.received(),
        before,
        "a refused request never reaches the origin"
    );
    // Another client is served, its 200s still uncounted.
    assert_eq!(get(&edge, "b", "/page").0, 200);
    let log = access_log(&edge, "error_code=1015");
    assert!(
        log.lines()
            .any(|l| l.contains("rule=\"misses\"") && l.contains("error_code=1015")),
        "{log}"
    );
}

#[test]
fn a_mitigation_timeout_holds_after_the_rate_falls() {
    // A 1 s window and a 3 s refusal: the client's rate falls to nothing after the refusal, the
    // window ends, and the refusal holds until its end.
    let rule = r#"
[[rate_limit]]
id = "misses"
characteristics = ['http.request.headers["x-client"]']
counting_expression = 'http.response.code eq 404'
period = "1s"
requests_per_period = 2
mitigation_timeout = "3s"
"#;
    let (_origin, edge) = echo_edge("mitigation", rule, "", &[]);
    assert_eq!(get(&edge, "a", "/x?status=404").0, 404);
    assert_eq!(get(&edge, "a", "/x?status=404").0, 404);
    let tripped = Instant::now();
    let (status, retry, _) = get(&edge, "a", "/page");
    assert_eq!((status, retry), (429, Some(3)));
    // Past the 1 s window, with no request since: still refused, for what is left of 3 s.
    thread::sleep(Duration::from_millis(1500));
    let (status, retry, problem) = get(&edge, "a", "/page");
    assert_eq!(status, 429, "the refusal outlasts the window");
    assert_eq!(problem["error_code"], 1015);
    assert!(matches!(retry, Some(1 | 2)), "{retry:?}");
    // Served once the refusal is over (waited from the answer that tripped it, plus margin).
    let over = tripped + Duration::from_millis(3800);
    thread::sleep(over.saturating_duration_since(Instant::now()));
    assert_eq!(get(&edge, "a", "/page").0, 200, "served after the timeout");
}

#[test]
fn a_fleet_limit_counts_answers_on_one_edge_and_refuses_on_another() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let origin = EchoOrigin::start();
    let top = format!(
        "[redis]\nurl = \"{}\"\ntimeout = \"200ms\"\nkey_prefix = \"ans:\"\n\
         [[rate_limit]]\nid = \"misses\"\nscope = \"fleet\"\n\
         characteristics = ['http.request.headers[\"x-client\"]']\n\
         counting_expression = 'http.response.code eq 404'\nperiod = \"1m\"\n\
         requests_per_period = 2\nmitigation_timeout = \"30s\"\n",
        redis.url()
    );
    let o = origin.addr.to_string();
    let edges: Vec<Edge> = (0..2)
        .map(|i| {
            Edge::start(
                &format!("fleet-answers-{i}"),
                |l, a| policy(l, a, &o, &top, ""),
                &[],
            )
        })
        .collect();
    // 200s on both edges count nowhere: Redis holds no key for them.
    for i in 0..6 {
        assert_eq!(get(&edges[i % 2], "a", "/page").0, 200);
    }
    let keys = redis.try_command("KEYS ans:*").unwrap();
    assert!(keys.starts_with("*0"), "nothing counted: {keys}");
    // Two 404s on the first edge trip the shared limit; the second edge refuses at once.
    assert_eq!(get(&edges[0], "a", "/x?status=404").0, 404);
    assert_eq!(get(&edges[0], "a", "/x?status=404").0, 404);
    let (status, retry, problem) = get(&edges[1], "a", "/page");
    assert_eq!(status, 429, "{problem}");
    assert_eq!(problem["error_code"], 1015);
    assert!(matches!(retry, Some(29 | 30)), "{retry:?}");
    // The block is one key in Redis, expiring when it ends.
    let key = redis
        .try_command("RANDOMKEY")
        .expect("a key")
        .trim()
        .to_owned();
    assert!(key.starts_with("ans:rl:"), "{key}");
    let pttl: i64 = redis
        .try_command(&format!("PTTL {key}"))
        .unwrap()
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!((20_000..=30_000).contains(&pttl), "PTTL {pttl}");
    // Another client is served on both edges.
    assert_eq!(get(&edges[0], "b", "/page").0, 200);
    assert_eq!(get(&edges[1], "b", "/page").0, 200);
}

#[test]
fn a_divert_rule_sends_the_request_to_the_second_origin_only() {
    let main = EchoOrigin::start();
    let maze = EchoOrigin::start();
    let top = r#"
[[custom_rule]]
id = "to-the-maze"
action = "divert"
divert = "maze"
expression = 'starts_with(http.request.uri.path, "/trap/")'
"#;
    let zone_extra = format!(
        "[[zone.divert]]\nname = \"maze\"\norigin = \"{}\"\n",
        maze.addr
    );
    let m = main.addr.to_string();
    let edge = Edge::start("divert", |l, a| policy(l, a, &m, top, &zone_extra), &[]);
    let (status, _, echo) = get(&edge, "a", "/trap/page-1");
    assert_eq!(status, 200);
    assert_eq!(echo["path"], "/trap/page-1");
    assert_eq!(
        echo["headers"]["cf-connecting-ip"], "127.0.0.1",
        "the divert origin gets the forwarding headers"
    );
    assert!(echo["headers"]["cf-ray"].is_string());
    assert_eq!((maze.received(), main.received()), (1, 0));
    // Other paths still go to the zone's origin.
    assert_eq!(get(&edge, "a", "/page").0, 200);
    assert_eq!((maze.received(), main.received()), (1, 1));
    // Logged and counted.
    let text = admin_get(&edge, "/metrics").1;
    assert_eq!(
        metric(
            &text,
            "signpost_divert_requests_total",
            &[
                ("zone", "test"),
                ("rule", "to-the-maze"),
                ("divert", "maze")
            ]
        ),
        Some(1.0),
        "{text}"
    );
    let log = access_log(&edge, "path=/page ");
    let line = log
        .lines()
        .find(|l| l.contains("path=/trap/page-1 "))
        .unwrap_or_else(|| panic!("no access line for the diverted request: {log}"));
    assert!(line.contains("divert=\"maze\""), "{line}");
    assert!(line.contains("rule=\"to-the-maze\""), "{line}");
    assert!(line.contains(&maze.addr.to_string()), "{line}");
    let other = log
        .lines()
        .find(|l| l.contains("path=/page "))
        .unwrap_or_else(|| panic!("no access line: {log}"));
    assert!(other.contains("divert=\"-\""), "{other}");
}

const TESTED: &str = r#"
[[zone]]
name = "www"
hosts = ["example.com"]
origin = "127.0.0.1:8000"

[[zone.divert]]
name = "maze"
origin = "127.0.0.1:42069"

[[custom_rule]]
id = "scrapers-to-the-maze"
action = "divert"
divert = "maze"
expression = 'http.user_agent contains "python-requests"'

[[rate_limit]]
id = "misses"
counting_expression = 'http.response.code eq 404'
period = "1m"
requests_per_period = 3
"#;

/// The real binary with `args`: exit status, stdout, stderr.
fn signpost(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn trace_and_signpost_test_show_counted_answers_and_diverts() {
    use std::ffi::OsStr;
    let scratch = Scratch::new("limits-test");
    let policy = scratch.write("policy.toml", TESTED);
    let cases = scratch.write(
        "cases.toml",
        r#"
[[case]]
name = "after three misses the client is refused"
url = "http://example.com/wp-login.php"
sent_before = 3
answered = 404
expect = { status = 429, code = 1015, rule = "misses" }

[[case]]
name = "answers that are not misses count nothing"
url = "http://example.com/"
sent_before = 10
expect = { proxied = true, rule = "", origin = "http://127.0.0.1:8000" }

[[case]]
name = "scrapers go to the maze"
url = "http://example.com/"
headers = ["User-Agent: python-requests/2.32"]
expect = { proxied = true, rule = "scrapers-to-the-maze", zone = "www", origin = "http://127.0.0.1:42069" }
"#,
    );
    let (code, stdout, stderr) = signpost(&[
        OsStr::new("test"),
        OsStr::new("-c"),
        policy.as_os_str(),
        cases.as_os_str(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.trim_end().ends_with("3 passed, 0 failed"),
        "{stdout}"
    );

    // The trace of a diverted request: the rule's step names the divert and its origin.
    let (code, stdout, stderr) = signpost(&[
        OsStr::new("trace"),
        OsStr::new("--json"),
        OsStr::new("--config"),
        policy.as_os_str(),
        OsStr::new("--url"),
        OsStr::new("http://example.com/"),
        OsStr::new("-H"),
        OsStr::new("User-Agent: python-requests/2.32"),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let t: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(t["verdict"], "proxy");
    assert_eq!(t["rule_id"], "scrapers-to-the-maze");
    assert_eq!(t["origin"], "http://127.0.0.1:42069");
    let step = |phase: &str, id: &str| -> Value {
        t["trace"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step_name"] == phase)
            .and_then(|p| p["trace"].as_array())
            .and_then(|rules| rules.iter().find(|r| r["step_name"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("no {id} in {phase}: {t:#}"))
    };
    let divert = step("custom_rules", "scrapers-to-the-maze");
    assert_eq!(divert["action"], "divert");
    assert_eq!(divert["matched"], true);
    assert_eq!(divert["action_parameters"]["divert"], "maze");
    assert_eq!(
        divert["action_parameters"]["origin"],
        "http://127.0.0.1:42069"
    );

    // The trace of a request the counting rule checks: its counting expression and count.
    let (code, stdout, stderr) = signpost(&[
        OsStr::new("trace"),
        OsStr::new("--json"),
        OsStr::new("--config"),
        policy.as_os_str(),
        OsStr::new("--url"),
        OsStr::new("http://example.com/page"),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let t: Value = serde_json::from_str(&stdout).unwrap();
    let misses = t["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_name"] == "rate_limits")
        .and_then(|p| p["trace"].as_array())
        .and_then(|rules| rules.iter().find(|r| r["step_name"] == "misses"))
        .cloned()
        .unwrap_or_else(|| panic!("{t:#}"));
    assert_eq!(
        misses["action_parameters"]["counting_expression"],
        "http.response.code eq 404"
    );
    assert_eq!(misses["action_parameters"]["count"], "0");
    assert_eq!(misses["action_parameters"]["requests_per_period"], "3");
}
