//! Rate limits hold under a key flood, through the real binary: after far more distinct keys
//! than the rule may track, a new abusive key is still counted and refused (1015), and the
//! origin never sees its refused requests. The million-key flood runs at the policy level
//! (crates/policy/tests/decide.rs); here `max_keys` is small so that a few thousand HTTP
//! requests are the same flood relative to the table.

use std::sync::Arc;
use std::thread;

use serde_json::Value;

use crate::support::*;

const RULE: &str = r#"
[[rate_limit]]
id = "per-key"
characteristics = ['http.request.headers["x-key"]']
period = "1m"
requests_per_period = 3
mitigation_timeout = "2m"
max_keys = 64
"#;

/// Sends `keys` requests per key, over `threads` keep-alive clients; returns the statuses seen.
fn flood(edge: &Edge, keys: std::ops::Range<u32>, per_key: u32) -> Vec<u16> {
    let threads = 4;
    let keys = Arc::new(keys.collect::<Vec<_>>());
    let mut handles = Vec::new();
    for t in 0..threads {
        let keys = keys.clone();
        let http = client(edge);
        let url = edge.url("/");
        handles.push(thread::spawn(move || {
            let mut statuses = Vec::new();
            for k in keys.iter().skip(t).step_by(threads) {
                for _ in 0..per_key {
                    let status = http
                        .get(&url)
                        .header("x-key", format!("flood-{k}"))
                        .send()
                        .unwrap()
                        .status()
                        .as_u16();
                    statuses.push(status);
                }
            }
            statuses
        }));
    }
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Three requests pass, the fourth and fifth are refused with 1015 and a `Retry-After`.
fn assert_abuser_limited(edge: &Edge, origin: &EchoOrigin, key: &str) {
    let http = client(edge);
    for n in 0..3 {
        let r = http.get(edge.url("/")).header("x-key", key).send().unwrap();
        assert_eq!(r.status(), 200, "request {n} of {key}");
    }
    let seen = origin.received();
    for _ in 0..2 {
        let r = http
            .get(edge.url("/"))
            .header("x-key", key)
            .header("accept", "application/json")
            .send()
            .unwrap();
        assert_eq!(r.status(), 429);
        let retry: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((119..=120).contains(&retry), "Retry-After {retry}");
        let problem: Value = r.json().unwrap();
        assert_eq!(problem["error_code"], 1015);
        assert_eq!(problem["retryable"], true);
    }
    assert_eq!(
        origin.received(),
        seen,
        "the origin never saw a refused request"
    );
}

#[test]
fn a_new_key_is_limited_after_a_flood_of_distinct_keys() {
    let (origin, edge) = echo_edge("flood-open", RULE, "", &[]);
    // 3,000 distinct keys, one request each: 47 times the table.
    let statuses = flood(&edge, 0..3_000, 1);
    assert!(statuses.iter().all(|&s| s == 200));
    assert_abuser_limited(&edge, &origin, "abuser");
    let (_, text) = admin_get(&edge, "/metrics");
    let keys = metric(&text, "signpost_rate_limit_keys", &[("rule", "per-key")]).unwrap();
    assert!(keys <= 64.0, "{keys} keys tracked");
    let evicted = metric(
        &text,
        "signpost_rate_limit_evicted_keys_total",
        &[("rule", "per-key")],
    )
    .unwrap();
    assert!(evicted >= 3_000.0 - 64.0, "{evicted} evicted");
}

#[test]
fn a_new_key_is_limited_when_every_tracked_key_is_being_limited() {
    let (origin, edge) = echo_edge("flood-limited", RULE, "", &[]);
    // 200 keys each driven over the limit: every slot holds a key being refused.
    let statuses = flood(&edge, 0..200, 4);
    assert!(statuses.iter().filter(|&&s| s == 429).count() >= 64);
    assert!(statuses.iter().all(|&s| s == 200 || s == 429));
    assert_abuser_limited(&edge, &origin, "abuser");
    let (_, text) = admin_get(&edge, "/metrics");
    let sketched = metric(
        &text,
        "signpost_rate_limit_sketched_requests_total",
        &[("rule", "per-key")],
    )
    .unwrap();
    assert!(
        sketched >= 5.0,
        "the abuser was counted in the sketch: {sketched}"
    );
    // Keys limited before the flood filled the table are still limited.
    let r = client(&edge)
        .get(edge.url("/"))
        .header("x-key", "flood-0")
        .send()
        .unwrap();
    assert_eq!(r.status(), 429);
}
