//! Tests of the expression language: every operator and function, precedence, types, limits.

use std::net::IpAddr;

use proptest::prelude::*;

use super::{Cx, MAX_EXPRESSION_LEN, MAX_NESTING, build};
use crate::decision::RequestFacts;

struct Req {
    headers: http::HeaderMap,
    peer: IpAddr,
    host: &'static str,
    method: &'static str,
    uri: &'static str,
    tls: bool,
}

fn req() -> Req {
    let mut headers = http::HeaderMap::new();
    headers.insert("user-agent", "Mozilla/5.0 Test".parse().unwrap());
    headers.insert("referer", "https://ref.example.net/page".parse().unwrap());
    headers.insert("cookie", "session=abc; theme=dark".parse().unwrap());
    headers.insert("x-api-key", "K123".parse().unwrap());
    Req {
        headers,
        peer: "10.1.2.3".parse().unwrap(),
        host: "WWW.Example.com:8443",
        method: "POST",
        uri: "/wp-login.php?user=admin&x=1",
        tls: true,
    }
}

fn eval_on(r: &Req, src: &str) -> bool {
    let f = build(src).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    let facts = RequestFacts {
        peer: r.peer,
        host: r.host,
        method: r.method,
        uri: r.uri,
        tls: r.tls,
        sni: None,
        headers: &r.headers,
    };
    let cx = Cx::new(&facts, r.peer, None, None);
    f.matches(&cx)
}

fn eval(src: &str) -> bool {
    eval_on(&req(), src)
}

fn err(src: &str) -> (std::ops::Range<usize>, String) {
    let e = build(src).expect_err(src);
    (e.span, e.message)
}

#[test]
fn fields() {
    // Host names are case-insensitive: `http.host` reads in lower case.
    assert!(eval(r#"http.host eq "www.example.com""#));
    assert!(eval(r#"lower(http.host) == "www.example.com""#));
    assert!(eval(r#"http.host in {"www.example.com"}"#));
    assert!(eval(r#"http.request.method eq "POST""#));
    assert!(eval(
        r#"http.request.uri eq "/wp-login.php?user=admin&x=1""#
    ));
    assert!(eval(r#"http.request.uri.path eq "/wp-login.php""#));
    assert!(eval(r#"http.request.uri.query eq "user=admin&x=1""#));
    assert!(eval(
        r#"http.request.full_uri eq "https://www.example.com:8443/wp-login.php?user=admin&x=1""#
    ));
    assert!(eval(r#"http.user_agent contains "Mozilla""#));
    assert!(eval(r#"http.referer eq "https://ref.example.net/page""#));
    assert!(eval(r#"http.cookie contains "session=abc""#));
    assert!(eval(r#"http.request.headers["X-Api-Key"] eq "K123""#));
    assert!(
        eval(r#"http.request.headers["x-missing"] eq """#),
        "missing header is empty"
    );
    assert!(eval("ip.src eq 10.1.2.3"));
    assert!(eval("ssl"));
    assert!(
        eval(r#"ip.src.country eq """#),
        "no database: empty country"
    );
    assert!(eval("ip.src.asnum eq 0"), "no database: ASN 0");
}

#[test]
fn host_drops_the_port_of_ip_literals() {
    let mut r = req();
    r.host = "192.0.2.1:8080";
    assert!(eval_on(&r, r#"http.host eq "192.0.2.1""#));
    r.host = "[2001:db8::1]:443";
    assert!(eval_on(&r, r#"http.host eq "[2001:db8::1]""#));
    assert!(eval_on(
        &r,
        r#"http.request.full_uri eq "https://[2001:db8::1]:443/wp-login.php?user=admin&x=1""#
    ));
}

#[test]
fn repeated_header_lines_are_all_seen() {
    // HTTP/2 clients send each cookie as its own field; a rule must see every one of them.
    let mut r = req();
    r.headers.append("cookie", "admin=1".parse().unwrap());
    r.headers.append("x-api-key", "K456".parse().unwrap());
    r.headers
        .append("user-agent", "sqlmap/1.7".parse().unwrap());
    r.headers
        .append("referer", "https://evil.example/".parse().unwrap());
    assert!(eval_on(&r, r#"http.cookie contains "admin=1""#));
    assert!(eval_on(
        &r,
        r#"http.cookie eq "session=abc; theme=dark; admin=1""#
    ));
    assert!(eval_on(
        &r,
        r#"http.request.headers["x-api-key"] eq "K123, K456""#
    ));
    assert!(eval_on(&r, r#"http.user_agent contains "sqlmap""#));
    assert!(eval_on(
        &r,
        r#"http.user_agent eq "Mozilla/5.0 Test, sqlmap/1.7""#
    ));
    assert!(eval_on(&r, r#"http.referer contains "evil.example""#));
    assert!(eval_on(&r, r#"len(http.cookie) eq 32"#));
    // A line that is not UTF-8 still counts, and hides neither itself nor the others.
    let mut r = req();
    r.headers.remove("cookie");
    r.headers.append(
        "cookie",
        http::HeaderValue::from_bytes(b"x=\xff; admin=2").unwrap(),
    );
    r.headers.append("cookie", "admin=1".parse().unwrap());
    assert!(eval_on(&r, r#"http.cookie contains "admin=1""#));
    assert!(eval_on(&r, r#"http.cookie contains "admin=2""#));
    assert!(eval_on(
        &r,
        "http.cookie eq \"x=\u{FFFD}; admin=2; admin=1\""
    ));
}

#[test]
fn single_header_line_is_borrowed() {
    use std::borrow::Cow;
    let r = req();
    let facts = RequestFacts {
        peer: r.peer,
        host: r.host,
        method: r.method,
        uri: r.uri,
        tls: r.tls,
        sni: None,
        headers: &r.headers,
    };
    let cx = Cx::new(&facts, r.peer, None, None);
    assert!(matches!(
        cx.cookie(),
        Cow::Borrowed("session=abc; theme=dark")
    ));
    assert!(matches!(cx.header("x-api-key"), Cow::Borrowed("K123")));
    assert!(matches!(cx.header("x-missing"), Cow::Borrowed("")));
}

#[test]
fn comparison_operators() {
    for (src, want) in [
        ("len(http.request.method) eq 4", true),
        ("len(http.request.method) ne 4", false),
        ("len(http.request.method) lt 5", true),
        ("len(http.request.method) le 4", true),
        ("len(http.request.method) gt 4", false),
        ("len(http.request.method) ge 4", true),
        ("len(http.request.method) == 4", true),
        ("len(http.request.method) != 4", false),
        ("len(http.request.method) < 4", false),
        ("len(http.request.method) <= 3", false),
        ("len(http.request.method) > 3", true),
        ("len(http.request.method) >= 5", false),
        (r#"http.request.method lt "PUT""#, true),
        (r#"http.request.method gt "GET""#, true),
        ("ip.src ne 10.1.2.4", true),
        ("ssl eq ssl", true),
    ] {
        assert_eq!(eval(src), want, "{src}");
    }
}

#[test]
fn string_operators_and_functions() {
    assert!(eval(r#"http.request.uri.path contains "login""#));
    assert!(!eval(r#"http.request.uri.path contains "LOGIN""#));
    assert!(eval(
        r#"http.request.uri.path matches "^/wp-(admin|login)""#
    ));
    assert!(eval(r#"http.request.uri.path ~ "\\.php$""#));
    assert!(!eval(r#"http.request.uri.path matches "^/api/""#));
    assert!(eval(r#"upper(http.request.uri.path) contains "LOGIN""#));
    assert!(eval(r#"starts_with(http.request.uri.path, "/wp-")"#));
    assert!(!eval(r#"starts_with(http.request.uri.path, "/api")"#));
    assert!(eval(r#"ends_with(http.request.uri.path, ".php")"#));
    assert!(eval(r#"len("") eq 0"#));
    assert!(eval(r#"lower("ÄB") eq "äb""#));
}

#[test]
fn sets() {
    assert!(eval(r#"http.request.method in {"GET" "POST"}"#));
    assert!(eval(r#"http.request.method in {"GET", "POST"}"#));
    assert!(!eval(r#"http.request.method in {"GET" "HEAD"}"#));
    assert!(eval("len(http.request.method) in {3 4}"));
    assert!(eval("ip.src in {10.0.0.0/8 192.168.0.0/16}"));
    assert!(!eval("ip.src in {192.168.0.0/16 2001:db8::/32}"));
    assert!(eval("ip.src in {10.1.2.3}"));
    assert!(eval("ip.src in {0.0.0.0/0}"));
    assert!(!eval(r#"http.request.method in {}"#));
}

#[test]
fn logic_and_precedence() {
    let t = r#"ssl"#;
    let f = r#"not ssl"#;
    assert!(eval(&format!("{t} and {t}")));
    assert!(!eval(&format!("{t} && {f}")));
    assert!(eval(&format!("{f} or {t}")));
    assert!(!eval(&format!("{f} || {f}")));
    assert!(eval(&format!("{t} xor {f}")));
    assert!(!eval(&format!("{t} ^^ {t}")));
    assert!(eval(&format!("!({f})")));
    // `and` binds tighter than `or`: f and f or t == (f and f) or t
    assert!(eval(&format!("{f} and {f} or {t}")));
    // `and` binds tighter than `xor`: t xor t and f == t xor (t and f)
    assert!(eval(&format!("{t} xor {t} and {f}")));
    // `xor` binds tighter than `or`: t or t xor t == t or (t xor t)
    assert!(eval(&format!("{t} or {t} xor {t}")));
    // `not` applies to the comparison, not just its left side.
    assert!(eval(r#"not http.request.method eq "GET""#));
    assert!(!eval(&format!("not ({t} or {f})")));
    assert!(eval(
        r#"http.request.uri.path matches "^/wp-(admin|login)" and not ip.src in {192.168.0.0/16}"#
    ));
    assert!(!eval(
        r#"http.request.uri.path matches "^/wp-(admin|login)" and not ip.src in {10.0.0.0/8 192.168.0.0/16}"#
    ));
}

#[test]
fn v4_mapped_literals_compare_as_v4() {
    assert!(eval("ip.src eq ::ffff:10.1.2.3"));
    assert!(eval("ip.src in {::ffff:10.0.0.0/104}"));
}

#[test]
fn type_errors_point_into_the_expression() {
    assert_eq!(
        err(r#"http.hots eq "x""#),
        (
            0..9,
            "unknown field `http.hots`; did you mean `http.host`?".into()
        )
    );
    assert_eq!(
        err(r#"lowr(http.host) eq "x""#).1,
        "unknown function `lowr`; did you mean `lower`?"
    );
    assert_eq!(
        err(r#"ip.src eq "x""#),
        (0..13, "cannot compare IP address with String".into())
    );
    assert_eq!(
        err("http.host").1,
        "a condition must be Boolean, but this is String; compare it with an operator such as `eq`"
    );
    assert_eq!(err(r#"http.host in {1 2}"#).0, 14..15);
    assert_eq!(err(r#"ip.src in {"a"}"#).0, 11..14);
    assert_eq!(
        err("ip.src eq 10.0.0.0/8").1,
        "compare an address with a network using `in {...}`"
    );
    assert_eq!(err("ip.src lt 10.0.0.1").0, 7..9);
    assert_eq!(err(r#"http.host matches "(""#).0, 18..21);
    assert_eq!(
        err(r#"http.host contains 1"#).1,
        "`contains` needs a String on its right, not Integer"
    );
    assert_eq!(
        err(r#"len(1) eq 1"#).1,
        "`len` needs String arguments, not Integer"
    );
    assert_eq!(
        err(r#"starts_with(http.host) "#).1,
        "`starts_with` takes 2 argument(s), not 1"
    );
    assert_eq!(
        err(r#"http.host["x"] eq "a""#).1,
        "`http.host` cannot be indexed; only http.request.headers[\"name\"] can"
    );
    assert_eq!(
        err(r#"http.host eq "a" and"#).1,
        "expected a field, function or value, found the end of the expression"
    );
    assert_eq!(
        err(r#"(ssl"#).1,
        "expected `)`, found the end of the expression"
    );
    assert_eq!(err(r#"ssl ssl"#).0, 4..7);
    assert_eq!(
        err(r#"ip.src in {300.0.0.1}"#).1,
        "`300.0.0.1` is not an IP address or CIDR"
    );
    assert_eq!(err(r#""#).1, "expression is empty");
}

#[test]
fn limits() {
    let deep = format!(
        "{}ssl{}",
        "(".repeat(MAX_NESTING + 1),
        ")".repeat(MAX_NESTING + 1)
    );
    assert!(err(&deep).1.contains("nests deeper"));
    let ok = format!(
        "{}ssl{}",
        "(".repeat(MAX_NESTING - 1),
        ")".repeat(MAX_NESTING - 1)
    );
    assert!(build(&ok).is_ok());
    let nots = format!("{}ssl", "not ".repeat(MAX_NESTING + 1));
    assert!(err(&nots).1.contains("nests deeper"));
    let long = format!("http.host eq \"{}\"", "a".repeat(MAX_EXPRESSION_LEN));
    assert!(err(&long).1.contains("longer than"));
    // A regex whose compiled form is huge is refused, not built.
    assert!(
        err(r#"http.host matches "\\w{1000}\\w{1000}\\w{1000}""#)
            .1
            .contains("invalid regular expression")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parser_survives_arbitrary_input(s in ".{0,200}") {
        if let Ok(f) = build(&s) {
            let r = req();
            let headers = &r.headers;
            let facts = RequestFacts { peer: r.peer, host: r.host, method: r.method, uri: r.uri, tls: r.tls, sni: None, headers };
            let _ = f.matches(&Cx::new(&facts, r.peer, None, None));
        }
    }

    #[test]
    fn parser_survives_token_soup(toks in prop::collection::vec(prop::sample::select(vec![
        "(", ")", "{", "}", "[", "]", "not", "!", "and", "or", "xor", "&&", "||", "^^", "eq", "==",
        "in", "matches", "~", "contains", "lt", ">=", "ssl", "ip.src", "http.host", "\"a\"", "1",
        "10.0.0.0/8", "::1", "lower(", "len(", ",", "http.request.headers", "\"x\"",
    ]), 0..60)) {
        let s = toks.join(" ");
        if let Ok(f) = build(&s) {
            let r = req();
            let facts = RequestFacts { peer: r.peer, host: r.host, method: r.method, uri: r.uri, tls: r.tls, sni: None, headers: &r.headers };
            let _ = f.matches(&Cx::new(&facts, r.peer, None, None));
        }
    }

    #[test]
    fn error_spans_stay_inside_the_text(s in ".{0,120}") {
        if let Err(e) = build(&s) {
            prop_assert!(e.span.start <= e.span.end && e.span.end <= s.len(), "{:?} for {:?}", e.span, s);
        }
    }
}

#[test]
fn decoding_functions() {
    let mut r = req();
    r.uri = "/x%2e%2E/a?q=%253Cscript%253E&b=PHNjcmlwdD4&c=un/**/ion";
    assert!(eval_on(
        &r,
        r#"url_decode(http.request.uri.query) contains "%3Cscript%3E""#
    ));
    assert!(eval_on(
        &r,
        r#"url_decode(http.request.uri.query, "r") contains "<script>""#
    ));
    assert!(!eval_on(
        &r,
        r#"url_decode(http.request.uri.query) contains "<script>""#
    ));
    assert!(eval_on(&r, r#"decode_base64("PHNjcmlwdD4") eq "<script>""#));
    assert!(eval_on(
        &r,
        r#"lower(remove_bytes(http.request.uri.query, "/*")) contains "union""#
    ));
    r.uri = "/a?q=%u003Cscript";
    assert!(eval_on(
        &r,
        r#"url_decode(http.request.uri.query, "ur") contains "<script""#
    ));
}

#[test]
fn paths_are_normalised_and_raw_paths_kept() {
    let mut r = req();
    r.uri = "/static/..//%61dmin?x=1";
    assert!(eval_on(&r, r#"http.request.uri.path eq "/admin""#));
    assert!(eval_on(&r, r#"http.request.uri eq "/admin?x=1""#));
    assert!(eval_on(
        &r,
        r#"raw.http.request.uri.path eq "/static/..//%61dmin""#
    ));
    assert!(eval_on(
        &r,
        r#"raw.http.request.uri eq "/static/..//%61dmin?x=1""#
    ));
    assert!(eval_on(
        &r,
        r#"http.request.full_uri eq "https://www.example.com:8443/admin?x=1""#
    ));
}

#[test]
fn decoding_functions_are_type_checked() {
    assert_eq!(
        err(r#"url_decode(http.request.uri, "x") eq "a""#).1,
        "unknown `url_decode` option `x`; options are \"r\" (recursive) and \"u\" (%uXXXX escapes)"
    );
    assert_eq!(
        err(r#"url_decode(http.request.uri, http.host) eq "a""#).1,
        "the second argument of `url_decode` is a quoted string"
    );
    assert_eq!(
        err(r#"url_decode(ip.src) eq "a""#).1,
        "`url_decode` needs String arguments, not IP address"
    );
    assert_eq!(
        err(r#"decode_base64(http.cookie, "x") eq "a""#).1,
        "`decode_base64` takes 1 argument(s), not 2"
    );
    assert_eq!(
        err(r#"url_decode() eq "a""#).1,
        "`url_decode` takes 1 or 2 argument(s), not 0"
    );
    assert_eq!(
        err(r#"len(url_decode(http.cookie)) eq "a""#).1,
        "cannot compare Integer with String"
    );
}

#[test]
fn host_literals_must_be_lower_case() {
    let (span, message) = err(r#"http.host eq "Blocked.test""#);
    assert_eq!(span, 13..27);
    assert_eq!(
        message,
        "`http.host` is compared in lower case, so this never matches; write \"blocked.test\""
    );
    assert_eq!(
        err(r#"http.host in {"a.test" "B.test"}"#).1,
        "`http.host` is compared in lower case, so this never matches; write \"b.test\""
    );
}
