//! The filter index must never leave out a filter that matches, and must yield candidates in
//! order: checked on random expressions and requests built from a shared vocabulary (so literals
//! hit often, in every case and with non-ASCII text), and on the benchmark's rules.

use std::net::IpAddr;

use proptest::prelude::*;

use super::{Cx, Filter, FilterIndex, build};
use crate::decision::RequestFacts;

/// Text pieces that requests are made of and expressions test for.
const PIECES: &[&str] = &[
    "/a",
    "/A",
    "/ab",
    "/wp-1/",
    "/old-2/",
    "x.php",
    "q1",
    "union select 1",
    "UNION Select 1",
    "BadBot/3",
    "badbot/3",
    "debug=9",
    "GET",
    "TRACE",
    "trace",
    "é",
    "\u{212a}",
    "k",
    "\n",
    "\u{130}",
    "?",
    "=",
    "staging-7.example.com",
    "www.example.com",
    "",
];

const FIELDS: &[&str] = &[
    "http.host",
    "http.request.method",
    "http.request.uri",
    "http.request.uri.path",
    "http.request.uri.query",
    "http.user_agent",
    "http.cookie",
    "http.referer",
    r#"http.request.headers["x-a"]"#,
    "http.request.full_uri",
    "ip.src.country",
];

/// Regexes (already escaped for an expression string), anchored and not.
const REGEXES: &[&str] = &[
    r"^/(old|legacy)-2/.*\\.php$",
    r"^/a",
    r"(?i)^/a",
    r"^/a|^/wp-",
    r"^/a|/wp-",
    r"(?m)^/a",
    r"/a",
    r"^.*a",
    r"\\A/wp-\\d",
    r"^(/wp-|/old-)\\d",
    r"^",
    r"^[a-z]+",
    r"^\\x{212a}",
    r"(?i)^k",
];

fn lit() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..3).prop_map(|v| v.concat())
}

fn field() -> impl Strategy<Value = &'static str> {
    prop::sample::select(FIELDS)
}

fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        (field(), lit()).prop_map(|(f, l)| format!(r#"{f} eq "{l}""#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#""{l}" eq {f}"#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"{f} ne "{l}""#)),
        field().prop_map(|f| format!(r#"{f} ne """#)),
        field().prop_map(|f| format!(r#""" ne {f}"#)),
        (field(), lit(), lit()).prop_map(|(f, a, b)| format!(r#"{f} in {{"{a}" "{b}"}}"#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"starts_with({f}, "{l}")"#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"ends_with({f}, "{l}")"#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"{f} contains "{l}""#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"lower({f}) contains "{l}""#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"upper(lower({f})) contains "{l}""#)),
        (field(), lit()).prop_map(|(f, l)| format!(r#"lower({f}) eq "{l}""#)),
        (field(), prop::sample::select(REGEXES)).prop_map(|(f, r)| format!(r#"{f} matches "{r}""#)),
        field().prop_map(|f| format!("len({f}) gt 3")),
        Just("ip.src in {10.0.0.0/8}".to_owned()),
        Just("ssl".to_owned()),
    ]
}

fn expression() -> impl Strategy<Value = String> {
    atom().prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} and {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} or {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} xor {b})")),
            inner.prop_map(|a| format!("not ({a})")),
        ]
    })
}

#[derive(Debug, Clone)]
struct Req {
    host: String,
    method: String,
    uri: String,
    headers: Vec<(&'static str, String)>,
    tls: bool,
}

fn request() -> impl Strategy<Value = Req> {
    let header = (
        prop::sample::select(&["user-agent", "cookie", "referer", "x-a", "x-b"][..]),
        lit(),
    );
    (
        lit(),
        prop::sample::select(&["GET", "TRACE", "trace", "POST"][..]),
        lit(),
        prop::option::of(lit()),
        prop::collection::vec(header, 0..5),
        any::<bool>(),
    )
        .prop_map(|(host, method, path, query, headers, tls)| Req {
            host,
            method: method.to_owned(),
            uri: match query {
                Some(q) => format!("{path}?{q}"),
                None => path,
            },
            headers,
            tls,
        })
}

/// Asserts that the index's candidates are increasing and include every filter that matches.
fn check(filters: &[Filter], r: &Req) -> Result<(), TestCaseError> {
    let index = FilterIndex::new(filters);
    let mut headers = http::HeaderMap::new();
    for (name, value) in &r.headers {
        // Values with a line break cannot be header values; leave those headers out.
        if let Ok(v) = http::HeaderValue::from_bytes(value.as_bytes()) {
            headers.append(*name, v);
        }
    }
    let peer: IpAddr = "10.1.2.3".parse().unwrap();
    let facts = RequestFacts {
        peer,
        host: &r.host,
        method: &r.method,
        uri: &r.uri,
        tls: r.tls,
        sni: None,
        headers: &headers,
    };
    let cx = Cx::new(&facts, peer, None, None);
    let candidates: Vec<usize> = index.candidates(&cx).collect();
    prop_assert!(candidates.windows(2).all(|w| w[0] < w[1]), "{candidates:?}");
    prop_assert!(candidates.iter().all(|&i| i < filters.len()));
    for (i, f) in filters.iter().enumerate() {
        if f.matches(&cx) {
            prop_assert!(
                candidates.binary_search(&i).is_ok(),
                "filter {i} ({:?}) matches {r:?} but is not a candidate",
                f.root
            );
        }
    }
    Ok(())
}

/// The benchmark's 100 custom rules (`bench/policy_decide.rs`), with the geo variant; built once.
fn bench_rules() -> &'static [Filter] {
    static RULES: std::sync::OnceLock<Vec<Filter>> = std::sync::OnceLock::new();
    RULES.get_or_init(|| (0..100)
        .map(|i| match i % 10 {
            0 => format!(r#"http.request.uri.path eq "/blocked/{i}""#),
            1 => format!(r#"starts_with(http.request.uri.path, "/wp-{i}/")"#),
            2 => format!(r#"http.request.uri.path matches "^/(old|legacy)-{i}/.*\\.php$""#),
            3 => format!(r#"http.user_agent contains "BadBot/{i}""#),
            4 => format!(
                r#"http.request.method in {{"TRACE" "TRACK"}} and http.request.uri.query contains "q{i}""#
            ),
            5 => format!(r#"http.request.headers["x-attack-{i}"] ne """#),
            6 => format!(
                r#"ip.src in {{10.{i}.0.0/16 192.168.{i}.0/24}} and http.request.uri.path eq "/internal""#
            ),
            7 => format!(r#"ip.src.country in {{"KP" "SY"}} and http.request.uri.path eq "/export/{i}""#),
            8 => format!(r#"lower(http.request.uri.query) contains "union select {i}""#),
            _ => format!(
                r#"len(http.request.uri) gt {} and http.cookie contains "debug={i}""#,
                4000 + i
            ),
        })
        .map(|s| build(&s).unwrap_or_else(|e| panic!("{s}: {e:?}")))
        .collect())
}

fn bench_request() -> impl Strategy<Value = Req> {
    let n = 0..100u32;
    let path = (
        prop::sample::select(
            &[
                "/blocked/",
                "/wp-",
                "/old-",
                "/legacy-",
                "/export/",
                "/internal",
                "/x",
                "",
            ][..],
        ),
        n.clone(),
        prop::sample::select(&["", "/", "/a.php", "/a.PHP"][..]),
    )
        .prop_map(|(a, n, c)| format!("{a}{n}{c}"));
    let query = (
        prop::sample::select(&["q", "UNION select ", "union select ", "x=", ""][..]),
        n.clone(),
    )
        .prop_map(|(a, n)| format!("{a}{n}"));
    let headers = prop::collection::vec(
        (
            prop::sample::select(&["user-agent", "cookie", "x-attack-5", "x-attack-15", "x-b"][..]),
            (prop::sample::select(&["BadBot/", "debug=", "", "é"][..]), n)
                .prop_map(|(a, n)| format!("{a}{n}")),
        ),
        0..4,
    );
    (
        prop::sample::select(&["GET", "TRACE", "TRACK"][..]),
        path,
        query,
        headers,
    )
        .prop_map(|(method, path, query, headers)| Req {
            host: "www.example.com".to_owned(),
            method: method.to_owned(),
            uri: format!("{path}?{query}"),
            headers,
            tls: true,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn index_never_leaves_out_a_match(
        exprs in prop::collection::vec(expression(), 1..12),
        reqs in prop::collection::vec(request(), 1..8),
    ) {
        let filters: Vec<Filter> = exprs.iter().filter_map(|s| build(s).ok()).collect();
        for r in &reqs {
            check(&filters, r)?;
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn index_keeps_every_bench_rule_match(reqs in prop::collection::vec(bench_request(), 1..16)) {
        for r in &reqs {
            check(bench_rules(), r)?;
        }
    }
}

fn candidates_for(filters: &[Filter], method: &str, uri: &str) -> Vec<usize> {
    let index = FilterIndex::new(filters);
    let mut headers = http::HeaderMap::new();
    headers.insert("user-agent", "Mozilla/5.0".parse().unwrap());
    let peer: IpAddr = "192.0.2.1".parse().unwrap();
    let facts = RequestFacts {
        peer,
        host: "www.example.com",
        method,
        uri,
        tls: true,
        sni: None,
        headers: &headers,
    };
    let cx = Cx::new(&facts, peer, None, None);
    index.candidates(&cx).collect()
}

#[test]
fn a_benign_request_has_no_candidate_among_the_bench_rules() {
    let filters = bench_rules();
    assert_eq!(
        candidates_for(filters, "GET", "/products/123?ref=newsletter"),
        Vec::<usize>::new()
    );
    assert_eq!(candidates_for(filters, "GET", "/blocked/50"), vec![50]);
    assert_eq!(candidates_for(filters, "GET", "/legacy-72/a"), vec![72]);
    assert_eq!(candidates_for(filters, "GET", "/wp-41/"), vec![41]);
    assert_eq!(
        candidates_for(filters, "TRACE", "/"),
        (0..10).map(|k| k * 10 + 4).collect::<Vec<_>>()
    );
    // A non-ASCII query may lower-case into anything: the `lower(...)` rules stay candidates.
    assert_eq!(
        candidates_for(filters, "GET", "/?\u{212a}"),
        (0..10).map(|k| k * 10 + 8).collect::<Vec<_>>()
    );
}

#[test]
fn case_mapping_and_line_starts_keep_their_candidates() {
    let filters: Vec<Filter> = [
        // The Kelvin sign lower-cases to an ASCII `k`, the dotted capital I to two characters.
        r#"lower(http.request.uri.path) contains "/k""#,
        r#"upper(http.request.uri.path) contains "/I""#,
        // `(?m)^` also matches after a line break.
        r#"http.request.uri.path matches "(?m)^/a""#,
        r#"http.request.uri.path matches "(?i)^/k""#,
    ]
    .iter()
    .map(|s| build(s).unwrap())
    .collect();
    assert_eq!(
        candidates_for(&filters, "GET", "/\u{212a}"),
        vec![0, 1, 2, 3]
    );
    assert_eq!(candidates_for(&filters, "GET", "/x\n/a"), vec![2]);
    assert_eq!(candidates_for(&filters, "GET", "/K"), vec![0, 2, 3]);
    assert_eq!(candidates_for(&filters, "GET", "/zz"), vec![2]);
    for uri in ["/\u{212a}", "/x\n/a"] {
        let r = Req {
            host: String::new(),
            method: "GET".into(),
            uri: uri.into(),
            headers: Vec::new(),
            tls: false,
        };
        check(&filters, &r).unwrap();
    }
}

#[test]
fn unindexable_filters_are_always_candidates() {
    let filters: Vec<Filter> = [
        r#"not http.request.uri.path eq "/a""#,
        r#"http.request.uri.path eq "/a" or ssl"#,
        r#"http.request.uri.path matches "(?m)^/a""#,
        r#"http.request.uri.path matches "/a""#,
        r#"ip.src.country eq "FR""#,
        r#"http.request.full_uri contains "/a""#,
        r#"starts_with(http.request.uri.path, "")"#,
        r#"http.request.uri.path contains """#,
        r#"http.request.uri.path eq "/a" xor ssl"#,
    ]
    .iter()
    .map(|s| build(s).unwrap())
    .collect();
    assert_eq!(
        candidates_for(&filters, "GET", "/zzz"),
        (0..filters.len()).collect::<Vec<_>>()
    );
}

#[test]
fn many_filters_spill_past_the_inline_bit_set() {
    let filters: Vec<Filter> = (0..1000)
        .map(|i| {
            let s = if i % 3 == 0 {
                "ssl".to_owned()
            } else {
                format!(r#"http.request.uri.path eq "/p{i}""#)
            };
            build(&s).unwrap()
        })
        .collect();
    let mut want: Vec<usize> = (0..1000).step_by(3).collect();
    want.push(700);
    want.sort();
    assert_eq!(candidates_for(&filters, "GET", "/p700"), want);
}

#[test]
fn many_header_rules_are_looked_up_by_name() {
    let filters: Vec<Filter> = (0..40)
        .map(|i| build(&format!(r#"http.request.headers["x-h{i}"] ne """#)).unwrap())
        .chain([build(r#"http.user_agent ne """#).unwrap()])
        .collect();
    let index = FilterIndex::new(&filters);
    for few in [true, false] {
        let mut headers = http::HeaderMap::new();
        headers.insert("user-agent", "a".parse().unwrap());
        headers.insert("x-h7", "b".parse().unwrap());
        headers.insert("x-h33", "".parse().unwrap());
        if !few {
            // More request headers than rule headers: the rules' names drive the lookups.
            for j in 0..50 {
                headers.insert(
                    http::HeaderName::from_bytes(format!("x-other{j}").as_bytes()).unwrap(),
                    "c".parse().unwrap(),
                );
            }
        }
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        let facts = RequestFacts {
            peer,
            host: "h",
            method: "GET",
            uri: "/",
            tls: false,
            sni: None,
            headers: &headers,
        };
        let cx = Cx::new(&facts, peer, None, None);
        assert_eq!(index.candidates(&cx).collect::<Vec<_>>(), vec![7, 33, 40]);
    }
}
