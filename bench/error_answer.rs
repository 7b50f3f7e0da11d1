//! What an operator's error rule costs an answer: the edge's answer for a refusal (1015) with a
//! matching error rule, against the default answer, in each format.
//!
//! Each iteration does what the edge does when it answers: asks the policy for the error rule
//! (`CompiledPolicy::error_rule`, the same call `error_rules::find` makes) and renders the problem
//! (`render_custom` with the rule and the request's token values, or `render` when none speaks).
//! Groups, each with `json`, `markdown` and `html`:
//! - `default`: a policy without error rules (the lookup returns at once), the catalog's answer;
//! - `rule_text`: a zone rule that changes the status, the wait, the title, the detail and the
//!   guidance, every token used, rendered in the contract's layout;
//! - `rule_content`: the same rule with its own `json` members, `markdown` body and `html` page
//!   (2.5 KB, tokens in it), each format showing its own content.
//!
//! The rules sit behind four zone rules and one global rule that do not match, so the lookup
//! evaluates six expressions. Left out: writing the answer (the same bytes whatever made them)
//! and the request's token values (three short strings the edge copies once).

use std::hint::black_box;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use signpost_policy::{CompiledPolicy, RequestFacts, ResponseFacts};
use signpost_problem::{Code, Format, Problem, TokenValues, lookup, render, render_custom};

const ZONE: &str = r#"
[[zone]]
name = "shop"
hosts = ["example.com"]
origin = "127.0.0.1:8000"
"#;

/// Rules that do not match a 1015 on `/login`, then the one that does.
fn rules(content: bool) -> String {
    let mut text = String::from(ZONE);
    for (i, code) in [1020, 1009, 1010, 521].iter().enumerate() {
        text.push_str(&format!(
            "[[zone.error_rule]]\nid = \"other-{i}\"\nexpression = 'cf.response.1xxx_code eq {code}'\ntitle = \"Other\"\n"
        ));
    }
    text.push_str(
        r#"[[zone.error_rule]]
id = "login-limit"
expression = 'cf.response.1xxx_code eq 1015 and http.request.uri.path eq "/login"'
status = 503
retry_after = 90
title = "Too many sign-ins from ::CLIENT_IP::"
detail = "Sign-ins to ::ZONE:: from ::CLIENT_IP:: (::GEO::) are paused; ray ::RAY_ID::, code ::CODE::."
what_you_should_do = "**Wait ::RETRY_AFTER:: seconds.** Then sign in again at https://::HOST::/login, or use the API at /api."
"#,
    );
    if content {
        let page = format!(
            "<!doctype html><html lang=en><head><meta charset=utf-8><title>Slow down</title><style>{}</style></head><body><main><h1>Too many sign-ins</h1><p>From ::CLIENT_IP:: (::GEO::) to ::HOST::.</p><p>Wait ::RETRY_AFTER:: seconds.</p><p class=ray>Ray ::RAY_ID:: (::CODE::)</p></main></body></html>",
            "body{font:16px/1.5 system-ui;margin:0;padding:2rem;color:#222;background:#fafafa}"
                .repeat(28)
        );
        text.push_str(&format!(
            "html = '''{page}'''\njson = '{{\"retry_at\": \"https://::HOST::/login\", \"ray\": \"::RAY_ID::\"}}'\nmarkdown = \"# Too many sign-ins\\n\\nFrom ::CLIENT_IP:: to ::HOST::. Wait ::RETRY_AFTER:: seconds, quoting ::RAY_ID::.\\n\"\n"
        ));
    }
    text.push_str(
        "[[error_rule]]\nid = \"global-other\"\nexpression = 'http.response.code eq 418'\ntitle = \"Teapot\"\n",
    );
    text
}

fn bench(c: &mut Criterion) {
    let plain = CompiledPolicy::from_toml(ZONE, "plain.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let with_text = CompiledPolicy::from_toml(&rules(false), "text.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let with_content =
        CompiledPolicy::from_toml(&rules(true), "content.toml", Path::new("."), None)
            .unwrap_or_else(|e| panic!("{e}"));

    let peer: IpAddr = "192.0.2.7".parse().unwrap();
    let headers = http::HeaderMap::new();
    let facts = RequestFacts {
        peer,
        host: "example.com",
        method: "POST",
        uri: "/login",
        tls: true,
        sni: Some("example.com"),
        headers: &headers,
    };
    let zone = plain.decide(&facts, std::time::Instant::now()).zone;
    let entry = lookup(Code::RATE_LIMITED).expect("1015 is in the catalog");
    let problem = Problem {
        entry,
        ray_id: "9d99a39dc992d168",
        timestamp: UNIX_EPOCH + Duration::from_secs(1_773_054_688),
        zone: "example.com",
        retry_after: Some(30),
    };
    let response = ResponseFacts {
        code: entry.status,
        edge_code: entry.code.get(),
    };
    let values = TokenValues {
        client_ip: "192.0.2.7",
        geo: "FR",
        host: "example.com",
        ..TokenValues::default()
    };
    // The answer the edge makes under `policy`: the rule lookup, then the rendering.
    let answer = |policy: &CompiledPolicy, format: Format| {
        let rule = policy.error_rule(zone, &facts, peer, response, None);
        let branding = policy.problem_branding();
        match rule {
            Some((_, custom)) => render_custom(&problem, format, branding, custom, &values),
            None => render(&problem, format, branding),
        }
    };
    for (policy, name) in [(&with_text, "rule_text"), (&with_content, "rule_content")] {
        let (id, _) = policy
            .error_rule(zone, &facts, peer, response, None)
            .expect("the rule matches");
        assert_eq!(id, "login-limit");
        assert_eq!(answer(policy, Format::Json).status, 503, "{name}");
    }
    assert!(
        plain
            .error_rule(zone, &facts, peer, response, None)
            .is_none()
    );

    for (policy, group) in [
        (&plain, "default"),
        (&with_text, "rule_text"),
        (&with_content, "rule_content"),
    ] {
        let mut g = c.benchmark_group(group);
        for format in [Format::Json, Format::Markdown, Format::Html] {
            g.bench_function(format.as_str(), |b| {
                b.iter(|| answer(black_box(policy), black_box(format)))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
