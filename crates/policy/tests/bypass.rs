//! No way around the rules: property tests over arbitrary bytes that a request a rule refuses is
//! still refused after an attacker adds bytes that are not UTF-8, splits the header over several
//! lines, changes the case of the host, or percent-encodes and dot-segments the path. Each phase
//! that reads request text is covered: browser check, hotlink, legal, custom rules (user agent, a
//! named header, Cookie, Referer, host, path) and rate-limit characteristics.

use std::path::Path;
use std::time::Instant;

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use signpost_policy::{CompiledPolicy, RequestFacts, Verdict};

const POLICY: &str = r#"
[[zone]]
name = "site"
hosts = ["example.com", "blocked.test"]
origin = "127.0.0.1:8000"

[browser_check]
block_empty_user_agent = false
block_user_agents = ["(?i)nikto"]

[hotlink]
extensions = ["png"]

[[legal_rule]]
id = "legal"
expression = 'http.request.headers["x-region"] contains "embargoed"'

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
id = "decoded-query"
action = "block"
expression = 'url_decode(http.request.uri.query, "r") contains "<script"'

[[rate_limit]]
id = "per-key"
characteristics = ['http.request.headers["x-key"]']
period = "60s"
requests_per_period = 1
"#;

fn policy() -> CompiledPolicy {
    CompiledPolicy::from_toml(POLICY, "bypass.toml", Path::new("."), None).unwrap()
}

/// The code and rule that refused, or `None` when the request would be proxied.
fn verdict(
    p: &CompiledPolicy,
    host: &str,
    uri: &str,
    headers: &HeaderMap,
) -> Option<(u16, String)> {
    let facts = RequestFacts {
        peer: "192.0.2.9".parse().unwrap(),
        host,
        method: "GET",
        uri,
        tls: false,
        sni: None,
        headers,
    };
    let d = p.decide(&facts, Instant::now());
    match d.verdict {
        Verdict::Proxy => None,
        Verdict::Refuse { code, .. } => {
            Some((code.get(), d.rule_id.as_deref().unwrap_or("").into()))
        }
        // A challenge stops the request as a refusal does, until the client is cleared.
        Verdict::Challenge { .. } => Some((
            signpost_policy::Code::CHALLENGE_REQUIRED.get(),
            d.rule_id.as_deref().unwrap_or("").into(),
        )),
    }
}

/// Bytes a header value may carry on the wire (HTTP field-value: visible ASCII, space, tab and
/// obs-text 0x80-0xFF), including every byte that is not UTF-8 on its own.
fn field_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff], 0..24)
}

/// Bytes that are never valid UTF-8 wherever they stand.
fn invalid_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![0x80u8..0xc0, 0xf8u8..=0xff], 1..6)
}

/// A header's lines: the matched value, with invalid bytes around it, among other lines.
#[derive(Debug, Clone)]
struct Lines {
    before: Vec<Vec<u8>>,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    after: Vec<Vec<u8>>,
}

fn lines() -> impl Strategy<Value = Lines> {
    (
        proptest::collection::vec(field_bytes(), 0..3),
        prop_oneof![invalid_bytes(), field_bytes()],
        prop_oneof![invalid_bytes(), field_bytes()],
        proptest::collection::vec(field_bytes(), 0..3),
    )
        .prop_map(|(before, prefix, suffix, after)| Lines {
            before,
            prefix,
            suffix,
            after,
        })
}

/// `headers` with `name` sent as `lines`, the matched value being `value`.
fn with_lines(base: &HeaderMap, name: &'static str, value: &[u8], l: &Lines) -> HeaderMap {
    let mut headers = base.clone();
    headers.remove(name);
    let name = HeaderName::from_static(name);
    let mut matched = l.prefix.clone();
    matched.extend_from_slice(value);
    matched.extend_from_slice(&l.suffix);
    for line in l.before.iter().chain([&matched]).chain(&l.after) {
        headers.append(name.clone(), HeaderValue::from_bytes(line).unwrap());
    }
    headers
}

fn benign() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("user-agent", HeaderValue::from_static("Mozilla/5.0"));
    h
}

#[test]
fn every_rule_refuses_the_plain_request() {
    let p = policy();
    let h = benign();
    assert_eq!(verdict(&p, "example.com", "/", &h), None);
    let cases: [(&'static str, &[u8], &str, u16, &str); 7] = [
        ("user-agent", b"nikto/2.5", "/", 1010, "browser-check"),
        (
            "referer",
            b"https://elsewhere.example/p",
            "/cat.png",
            1011,
            "hotlink",
        ),
        ("x-region", b"embargoed", "/", 1026, "legal"),
        ("user-agent", b"sqlmap/1.8", "/", 1020, "ua"),
        ("x-payload", b"evil", "/", 1020, "header"),
        ("cookie", b"admin=1", "/", 1020, "cookie"),
        (
            "referer",
            b"https://attacker.example/",
            "/",
            1020,
            "referer",
        ),
    ];
    for (name, value, uri, code, rule) in cases {
        let no_lines = Lines {
            before: vec![],
            prefix: vec![],
            suffix: vec![],
            after: vec![],
        };
        let h = with_lines(&h, name, value, &no_lines);
        assert_eq!(
            verdict(&p, "example.com", uri, &h),
            Some((code, rule.to_string())),
            "{name}"
        );
    }
    // The rules on the host, the path and the query, and the rate limit.
    assert_eq!(
        verdict(&p, "blocked.test", "/", &h),
        Some((1020, "host".into()))
    );
    assert_eq!(
        verdict(&p, "example.com", "/admin", &h),
        Some((1020, "path".into()))
    );
    assert_eq!(
        verdict(&p, "example.com", "/?q=%3Cscript%3E", &h),
        Some((1020, "decoded-query".into()))
    );
    let mut keyed = benign();
    keyed.insert("x-key", HeaderValue::from_static("plain"));
    assert_eq!(verdict(&p, "example.com", "/", &keyed), None);
    assert_eq!(
        verdict(&p, "example.com", "/", &keyed),
        Some((1015, "per-key".into()))
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn invalid_bytes_and_extra_lines_hide_nothing(
        l in lines(),
        case in 0usize..7,
    ) {
        let p = policy();
        let (name, value, uri, code, rule): (&'static str, &[u8], &str, u16, &str) = [
            ("user-agent", &b"nikto/2.5"[..], "/", 1010, "browser-check"),
            ("referer", b"https://elsewhere.example/p", "/cat.png", 1011, "hotlink"),
            ("x-region", b"embargoed", "/", 1026, "legal"),
            ("user-agent", b"sqlmap/1.8", "/", 1020, "ua"),
            ("x-payload", b"evil", "/", 1020, "header"),
            ("cookie", b"admin=1", "/", 1020, "cookie"),
            ("referer", b"https://attacker.example/", "/", 1020, "referer"),
        ][case];
        let h = with_lines(&benign(), name, value, &l);
        prop_assert_eq!(
            verdict(&p, "example.com", uri, &h),
            Some((code, rule.to_string())),
            "{} {:?}", name, l
        );
    }

    #[test]
    fn host_case_port_and_trailing_dot_do_not_matter(
        upper in proptest::collection::vec(any::<bool>(), 12),
        port in proptest::option::of(1u16..),
        dot in any::<bool>(),
    ) {
        let p = policy();
        let mut host: String = "blocked.test"
            .chars()
            .zip(upper)
            .map(|(c, up)| if up { c.to_ascii_uppercase() } else { c })
            .collect();
        if dot {
            host.push('.');
        }
        if let Some(port) = port {
            host.push_str(&format!(":{port}"));
        }
        prop_assert_eq!(verdict(&p, &host, "/", &benign()), Some((1020, "host".into())));
    }

    #[test]
    fn encoded_paths_reach_the_path_rule(
        segments in proptest::collection::vec(prop_oneof![
            Just("."), Just(".."), Just("%2e"), Just("%2E%2e"), Just(""), Just("x"), Just("a%62c"),
        ], 0..4),
        encode in proptest::collection::vec(any::<bool>(), 5),
        backslash in any::<bool>(),
    ) {
        let p = policy();
        // Climb out of whatever the segments built, then name /admin with some letters escaped.
        let mut uri = String::from("/");
        for s in &segments {
            uri.push_str(s);
            uri.push('/');
        }
        uri.push_str(&"../".repeat(segments.len() + 1));
        if backslash {
            uri.push('\\');
        }
        for (c, e) in "admin".chars().zip(encode) {
            if e {
                uri.push_str(&format!("%{:02x}", c as u8));
            } else {
                uri.push(c);
            }
        }
        prop_assert_eq!(verdict(&p, "example.com", &uri, &benign()), Some((1020, "path".into())), "{}", uri);
    }

    #[test]
    fn encoded_query_payloads_are_decoded(levels in 1usize..4, junk in "[a-z=&]{0,8}") {
        let p = policy();
        let mut payload = String::from("<script>");
        for _ in 0..levels {
            payload = percent_encoding::utf8_percent_encode(&payload, percent_encoding::NON_ALPHANUMERIC).to_string();
        }
        let uri = format!("/search?{junk}q={payload}");
        prop_assert_eq!(verdict(&p, "example.com", &uri, &benign()), Some((1020, "decoded-query".into())));
    }

    #[test]
    fn rate_limit_keys_with_invalid_bytes_are_counted(key in field_bytes(), bad in invalid_bytes()) {
        let p = policy();
        let mut value = key.clone();
        value.extend_from_slice(&bad);
        let mut h = benign();
        h.insert("x-key", HeaderValue::from_bytes(&value).unwrap());
        prop_assert_eq!(verdict(&p, "example.com", "/", &h), None);
        prop_assert_eq!(verdict(&p, "example.com", "/", &h), Some((1015, "per-key".into())));
    }
}
