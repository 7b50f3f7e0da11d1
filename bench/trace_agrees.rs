//! A trace is the real decision, observed: over generated requests (hosts, paths, methods,
//! headers and addresses, invalid bytes included) against the realistic benchmark policy, the
//! trace's verdict, deciding rule and zone are the decision's, and a trace changes nothing.
//!
//! Each request is traced, then decided (which counts it), so that the rate limits' counters
//! move as the cases go and the trace's peek is checked against the real count, up to refusals.

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use signpost_bench::{geo_dir, policy_text};
use signpost_policy::{CompiledPolicy, RequestFacts};

fn policy() -> &'static CompiledPolicy {
    static POLICY: std::sync::OnceLock<CompiledPolicy> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        let text = policy_text(geo_dir().as_deref());
        CompiledPolicy::from_toml(&text, "bench.toml", Path::new("."), None)
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// A fixed start, so that every case's `now` moves forward from it.
fn start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("example.com".to_owned()),
        Just("WWW.Example.com:8080".to_owned()),
        Just("img.example.com.".to_owned()),
        Just("other.org".to_owned()),
        Just("203.0.113.9".to_owned()),
        Just("[2001:db8::1]:443".to_owned()),
        Just(String::new()),
        "[a-z.]{1,12}(:[0-9]{1,5})?",
        "\\PC{0,16}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_owned()),
        Just("/login".to_owned()),
        Just("/api/v1/items?id=1".to_owned()),
        Just("/img/cat.png".to_owned()),
        Just("/wp-login.php".to_owned()),
        Just("/a/../login".to_owned()),
        Just("/search?q=1%20union%20select".to_owned()),
        "/[a-z/.%0-9?=&]{0,24}",
    ]
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("HEAD".to_owned()),
        Just("DELETE".to_owned()),
        "[A-Z]{1,7}",
    ]
}

fn ip() -> impl Strategy<Value = std::net::IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(std::net::IpAddr::from),
        any::<[u8; 16]>().prop_map(std::net::IpAddr::from),
        // The office (allowed), the blocklist's range, a trusted proxy.
        (0u8..=255).prop_map(|b| std::net::IpAddr::from([203, 0, 113, b])),
        (20u8..60, any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(a, b, c, d)| std::net::IpAddr::from([a, b, c, d])),
        (0u8..=255).prop_map(|b| std::net::IpAddr::from([10, 0, 0, b])),
    ]
}

/// Header values as raw bytes: text, or anything a header line can carry (obs-text included).
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"Mozilla/5.0 (X11; Linux x86_64) Chrome/126.0".to_vec()),
        Just(b"sqlmap/1.7".to_vec()),
        Just(b"https://elsewhere.org/page".to_vec()),
        Just(b"https://www.example.com/".to_vec()),
        Just(b"203.0.113.7, 198.51.100.1".to_vec()),
        Just(Vec::new()),
        proptest::collection::vec(prop_oneof![0x20u8..0x7f, 0x80u8..=0xff, Just(b'\t')], 0..24),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, Vec<u8>)>> {
    let name = prop_oneof![
        Just("user-agent"),
        Just("referer"),
        Just("cookie"),
        Just("x-api-key"),
        Just("x-forwarded-for"),
        Just("accept"),
        Just("content-type"),
    ];
    proptest::collection::vec((name, value()), 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn trace_agrees_with_the_decision(
        host in host(),
        path in path(),
        method in method(),
        peer in ip(),
        headers in headers(),
        tls in any::<bool>(),
        sni in proptest::option::of(prop_oneof![Just("example.com".to_owned()), "[a-z.]{1,10}"]),
        step_ms in 0u64..50,
    ) {
        let mut map = http::HeaderMap::new();
        for (name, value) in &headers {
            if let Ok(value) = http::HeaderValue::from_bytes(value) {
                map.append(*name, value);
            }
        }
        let facts = RequestFacts {
            peer,
            host: &host,
            method: &method,
            uri: &path,
            tls,
            sni: if tls { sni.as_deref() } else { None },
            headers: &map,
        };
        let now = start() + Duration::from_millis(step_ms);
        let policy = policy();
        let trace = policy.trace(&facts, now);
        prop_assert_eq!(&policy.trace(&facts, now), &trace, "a trace changed something");
        let decision = policy.decide(&facts, now);
        prop_assert_eq!(trace.decision.verdict, decision.verdict);
        prop_assert_eq!(&trace.decision.rule_id, &decision.rule_id);
        prop_assert_eq!(trace.decision.zone, decision.zone);
        prop_assert_eq!(&trace.decision, &decision);
        // Every phase is listed, in order, up to the one that ended the evaluation.
        let names: Vec<&str> = trace.steps.iter().map(|s| s.step_name.as_str()).collect();
        prop_assert_eq!(&names[..], &signpost_policy::PHASES[..names.len()]);
    }
}

/// Requests counted by a rate limit: the trace's count follows them without moving, and it
/// refuses exactly when the decision does.
#[test]
fn trace_follows_a_rate_limit_without_counting() {
    let policy = policy();
    let mut headers = http::HeaderMap::new();
    headers.insert("user-agent", http::HeaderValue::from_static("Mozilla/5.0"));
    let facts = RequestFacts {
        peer: "198.51.100.77".parse().unwrap(),
        host: "example.com",
        method: "POST",
        uri: "/login",
        tls: false,
        sni: None,
        headers: &headers,
    };
    let now = Instant::now();
    for n in 1..=12u32 {
        let trace = policy.trace(&facts, now);
        let login = trace
            .steps
            .iter()
            .flat_map(|s| &s.trace)
            .find(|r| r.step_name == "login")
            .unwrap_or_else(|| panic!("the login rule is traced: {trace:#?}"));
        let count = login
            .action_parameters
            .iter()
            .find(|(k, _)| k == "count")
            .map(|(_, v)| v.clone());
        if n <= 11 {
            assert_eq!(
                count.as_deref(),
                Some(n.to_string().as_str()),
                "request {n}"
            );
        }
        let decision = policy.decide(&facts, now);
        assert_eq!(trace.decision, decision, "request {n}");
        assert_eq!(decision.verdict == signpost_policy::Verdict::Proxy, n <= 10);
    }
}
