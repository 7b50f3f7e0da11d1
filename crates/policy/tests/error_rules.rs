//! Error rules: checked at load (expressions, fields, tokens, assets, each at its place), and
//! matched zone first, then global, first match wins.

use std::path::Path;

use signpost_policy::{CompiledPolicy, ResponseFacts};

const ZONE: &str = r#"
[[zone]]
name = "shop"
hosts = ["shop.example"]
origin = "127.0.0.1:8000"

[[zone.error_rule]]
id = "shop-1015"
expression = 'cf.response.1xxx_code eq 1015'
title = "Shop busy"

[[zone]]
name = "blog"
hosts = ["blog.example"]
origin = "127.0.0.1:8001"
"#;

const GLOBAL: &str = r##"
[[error_rule]]
id = "all-1015"
expression = 'cf.response.1xxx_code eq 1015'
status = 503
retry_after = 90
title = "Busy at ::HOST::"
detail = "Too many requests from ::CLIENT_IP::."
what_you_should_do = "**Wait ::RETRY_AFTER:: seconds.**"
json = '{"help": "https://help.example/::CODE::"}'
markdown = "# Busy\n\nRay ::RAY_ID::"
text = "Busy"
html = "<p>Busy ::GEO::</p>"

[[error_rule]]
id = "origin-5xx"
expression = 'http.response.code ge 500 and cf.response.1xxx_code eq 0 and http.request.uri.path eq "/api"'
retryable = false
"##;

fn load(text: &str, dir: &Path) -> Result<CompiledPolicy, String> {
    CompiledPolicy::from_toml(text, "policy.toml", dir, None).map_err(|e| e.to_string())
}

fn ask(p: &CompiledPolicy, host: &str, path: &str, code: u16, edge_code: u16) -> Option<String> {
    let headers = http::HeaderMap::new();
    let facts = signpost_policy::RequestFacts {
        peer: "192.0.2.7".parse().unwrap(),
        host,
        method: "GET",
        uri: path,
        tls: false,
        sni: None,
        headers: &headers,
    };
    let zone = p.decide(&facts, std::time::Instant::now()).zone;
    p.error_rule(
        zone,
        &facts,
        facts.peer,
        ResponseFacts { code, edge_code },
        None,
    )
    .map(|(id, _)| id.to_owned())
}

#[test]
fn zone_rules_come_first_then_global_then_none() {
    let p = load(&format!("{GLOBAL}{ZONE}"), Path::new(".")).unwrap();
    assert!(p.has_error_rules());
    assert_eq!(
        ask(&p, "shop.example", "/", 429, 1015).as_deref(),
        Some("shop-1015")
    );
    assert_eq!(
        ask(&p, "blog.example", "/", 429, 1015).as_deref(),
        Some("all-1015")
    );
    assert_eq!(ask(&p, "blog.example", "/", 403, 1020), None);
    assert_eq!(
        ask(&p, "blog.example", "/api", 503, 0).as_deref(),
        Some("origin-5xx")
    );
    assert_eq!(
        ask(&p, "blog.example", "/api", 522, 522),
        None,
        "the edge's 522 is not the origin's"
    );
    // A host no zone serves (1001) meets the global rules only.
    assert_eq!(
        ask(&p, "other.example", "/", 429, 1015).as_deref(),
        Some("all-1015")
    );
}

#[test]
fn the_rule_carries_its_content() {
    let p = load(&format!("{GLOBAL}{ZONE}"), Path::new(".")).unwrap();
    let headers = http::HeaderMap::new();
    let facts = signpost_policy::RequestFacts {
        peer: "192.0.2.7".parse().unwrap(),
        host: "blog.example",
        method: "GET",
        uri: "/",
        tls: false,
        sni: None,
        headers: &headers,
    };
    let (_, custom) = p
        .error_rule(
            p.zone_named("blog"),
            &facts,
            facts.peer,
            ResponseFacts {
                code: 429,
                edge_code: 1015,
            },
            None,
        )
        .unwrap();
    assert_eq!(custom.status, Some(503));
    assert_eq!(
        (custom.retryable, custom.retry_after),
        (Some(true), Some(90))
    );
    assert_eq!(custom.title.as_deref(), Some("Busy at ::HOST::"));
    assert_eq!(
        custom.json.as_ref().unwrap()["help"],
        "https://help.example/::CODE::"
    );
    assert_eq!(custom.html.as_deref(), Some("<p>Busy ::GEO::</p>"));
}

#[test]
fn no_rules_means_no_work() {
    let p = load(
        ZONE.split("[[zone.error_rule]]").next().unwrap(),
        Path::new("."),
    )
    .unwrap();
    assert!(!p.has_error_rules());
}

/// Each message must appear in the error, at its `file:line:col`.
fn assert_errors(text: &str, dir: &Path, wants: &[&str]) {
    let e = load(text, dir).expect_err("must be refused");
    for want in wants {
        assert!(e.contains(want), "{want:?} not in:\n{e}");
    }
}

#[test]
fn response_fields_belong_to_error_rules_only() {
    let text = "[[zone]]\nname = \"a\"\nhosts = [\"a.example\"]\norigin = \"127.0.0.1:1\"\n\
                [[custom_rule]]\nid = \"c\"\naction = \"block\"\n\
                expression = 'http.response.code eq 503'\n\
                [[legal_rule]]\nid = \"l\"\nexpression = 'ip.src eq 192.0.2.1 or cf.response.1xxx_code eq 1'\n";
    assert_errors(
        text,
        Path::new("."),
        &[
            "policy.toml:8:15: `http.response.code` is only available in error rules",
            "policy.toml:11:38: `cf.response.1xxx_code` is only available in error rules",
        ],
    );
}

#[test]
fn bad_values_are_reported_in_place() {
    let text = r#"[[error_rule]]
id = "e"
expression = 'http.response.code eq 503'
status = 200
retry_after = 0
title = "a ::FOO:: b"
detail = "two\nlines"
json = '[1, 2]'

[[error_rule]]
id = "f"
expression = 'http.response.code eq "503"'
retryable = false
retry_after = 5
json = '{"error_code": 1}'
what_you_should_do = "wait ::RETRYAFTER::"
"#;
    assert_errors(
        text,
        Path::new("."),
        &[
            "policy.toml:4:10: `status` must be from 400 to 599",
            "policy.toml:5:15: `retry_after` must be whole seconds from 1 to 86400",
            "policy.toml:6:12: unknown token `::FOO::`",
            "tokens are ::CLIENT_IP::, ::RAY_ID::, ::GEO::, ::CODE::, ::RETRY_AFTER::, ::ZONE::, ::HOST::",
            "policy.toml:7:10: `detail` must be one line",
            "policy.toml:8:8: `json` must be a JSON object",
            "policy.toml:12:15: cannot compare Integer with String",
            "policy.toml:14:15: `retry_after` with `retryable = false`",
            "policy.toml:15:8: `json` cannot set `error_code`",
            "policy.toml:16:28: unknown token `::RETRYAFTER::`",
        ],
    );
}

#[test]
fn inline_content_is_at_most_10_kb() {
    let big = "x".repeat(signpost_problem::MAX_INLINE_CONTENT + 1);
    let text = format!(
        "[[error_rule]]\nid = \"e\"\nexpression = 'http.response.code eq 503'\nhtml = \"{big}\"\n"
    );
    assert_errors(
        &text,
        Path::new("."),
        &[
            "policy.toml:4:8: `html` is 10241 bytes; an error rule's inline content is at most 10240 bytes",
        ],
    );
}

#[test]
fn a_rules_own_response_has_cloudflares_limit_for_its_kind() {
    // A WAF custom rule's response: 2 KB; a rate-limit rule's: 30 KB.
    let waf = "w".repeat(2 * 1024 + 1);
    let limit = "r".repeat(30 * 1024 + 1);
    let fits = "f".repeat(30 * 1024);
    let text = format!(
        "[[custom_rule]]\nid = \"a\"\naction = \"block\"\nexpression = 'http.request.uri.path eq \"/a\"'\n\
         response = {{ text = \"{waf}\" }}\n\
         [[rate_limit]]\nid = \"b\"\nexpression = 'http.request.uri.path eq \"/b\"'\nperiod = \"1m\"\n\
         requests_per_period = 1\nresponse = {{ text = \"{limit}\" }}\n\
         [[rate_limit]]\nid = \"c\"\nexpression = 'http.request.uri.path eq \"/c\"'\nperiod = \"1m\"\n\
         requests_per_period = 1\nresponse = {{ text = \"{fits}\" }}\n"
    );
    assert_errors(
        &text,
        Path::new("."),
        &[
            "policy.toml:5:21: `text` is 2049 bytes; a custom rule's inline response is at most 2048 bytes",
            "policy.toml:11:21: `text` is 30721 bytes; a rate-limit rule's inline response is at most 30720 bytes",
        ],
    );
}

#[test]
fn assets_are_read_checked_and_located() {
    let dir = std::env::temp_dir().join(format!("signpost-error-assets-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("pages")).unwrap();
    std::fs::write(dir.join("pages/busy.html"), "<h1>Busy ::HOST::</h1>").unwrap();
    std::fs::write(dir.join("pages/typo.html"), "<h1>\n  Busy ::HSOT::</h1>").unwrap();
    std::fs::write(
        dir.join("pages/huge.html"),
        vec![b'x'; signpost_problem::MAX_ASSET_BYTES + 1],
    )
    .unwrap();
    let rule = |file: &str| {
        format!(
            "[[error_rule]]\nid = \"e\"\nexpression = 'http.response.code eq 503'\nhtml_file = \"{file}\"\n"
        )
    };
    let p = load(&rule("pages/busy.html"), &dir).unwrap();
    assert!(p.has_error_rules());
    assert_errors(
        &rule("pages/missing.html"),
        &dir,
        &["policy.toml:4:13: cannot read `html_file` `pages/missing.html`"],
    );
    assert_errors(
        &rule("pages/huge.html"),
        &dir,
        &["policy.toml:4:13: `html_file` `pages/huge.html` is over 1572864 bytes"],
    );
    assert_errors(
        &rule("pages/typo.html"),
        &dir,
        &["policy.toml:4:13: `html_file` `pages/typo.html`:2:8: unknown token `::HSOT::`"],
    );
    assert_errors(
        &format!("{}html = \"<p>x</p>\"\n", rule("pages/busy.html")),
        &dir,
        &["policy.toml:4:13: give `html` or `html_file`, not both"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rules_own_response_comes_before_every_error_rule() {
    let text = format!(
        r#"{GLOBAL}
[[custom_rule]]
id = "no-admin"
action = "block"
expression = 'http.request.uri.path eq "/admin"'
response = {{ status = 404, title = "Nothing here", text = "Not found." }}

[[rate_limit]]
id = "login"
expression = 'http.request.uri.path eq "/login"'
period = "1m"
requests_per_period = 1
response = {{ retry_after = 120, json = '{{"why": "login flood"}}' }}
{ZONE}"#
    );
    let p = load(&text, Path::new(".")).unwrap();
    let headers = http::HeaderMap::new();
    let facts = signpost_policy::RequestFacts {
        peer: "192.0.2.7".parse().unwrap(),
        host: "shop.example",
        method: "GET",
        uri: "/login",
        tls: false,
        sni: None,
        headers: &headers,
    };
    let zone = p.zone_named("shop");
    let limited = ResponseFacts {
        code: 429,
        edge_code: 1015,
    };
    let (id, custom) = p
        .error_rule(zone, &facts, facts.peer, limited, Some("login"))
        .unwrap();
    assert_eq!((id, custom.retry_after), ("login", Some(120)));
    // Without the rule that refused, the zone's error rule speaks.
    let (id, _) = p
        .error_rule(zone, &facts, facts.peer, limited, None)
        .unwrap();
    assert_eq!(id, "shop-1015");
    // A rule's response is for its own refusal only.
    let blocked = ResponseFacts {
        code: 403,
        edge_code: 1020,
    };
    let (id, custom) = p
        .error_rule(zone, &facts, facts.peer, blocked, Some("no-admin"))
        .unwrap();
    assert_eq!((id, custom.status), ("no-admin", Some(404)));
    assert!(
        p.error_rule(zone, &facts, facts.peer, blocked, Some("login"))
            .is_none()
    );
}

#[test]
fn only_a_block_rule_has_a_response() {
    let text = "[[custom_rule]]\nid = \"c\"\naction = \"log\"\nexpression = 'http.host eq \"x\"'\n\
                response = { title = \"t ::NOPE::\" }\n\
                [[rate_limit]]\nid = \"r\"\nperiod = \"1m\"\nrequests_per_period = 1\n\
                response = { status = 302 }\n";
    assert_errors(
        text,
        Path::new("."),
        &[
            "policy.toml:5:12: only a `block` rule refuses, so only it can have a `response`",
            "policy.toml:10:23: `status` must be from 400 to 599",
        ],
    );
}
