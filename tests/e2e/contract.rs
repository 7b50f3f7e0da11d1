use serde_json::Value;

use crate::support::*;

fn edge() -> (EchoOrigin, Edge) {
    echo_edge("contract", "", "", &[])
}

const JSON_MEMBERS: [&str; 17] = [
    "type",
    "title",
    "status",
    "detail",
    "instance",
    "error_code",
    "error_name",
    "error_category",
    "ray_id",
    "timestamp",
    "zone",
    "cloudflare_error",
    "retryable",
    "retry_after",
    "owner_action_required",
    "what_you_should_do",
    "footer",
];

#[test]
fn json_problem_for_1015_follows_the_contract() {
    let (_origin, edge) = edge();
    let response = client(&edge)
        .get(edge.url("/cdn-cgi/error/1015"))
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/json; charset=utf-8");
    assert_eq!(
        headers["cache-control"],
        "private, max-age=0, no-store, no-cache, must-revalidate"
    );
    assert_eq!(headers["vary"], "Accept");
    let body = response.text().unwrap();
    assert_eq!(
        headers["content-length"].to_str().unwrap(),
        body.len().to_string()
    );
    let problem: serde_json::Map<String, Value> = serde_json::from_str(&body).unwrap();
    let keys: Vec<&str> = problem.keys().map(String::as_str).collect();
    assert_eq!(keys, JSON_MEMBERS, "members and their order");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["error_code"], 1015);
    assert_eq!(problem["error_name"], "rate_limited");
    assert_eq!(problem["error_category"], "rate_limit");
    assert_eq!(problem["cloudflare_error"], true);
    assert_eq!(problem["retryable"], true);
    assert_eq!(problem["zone"], "example.com");
    let retry_after = problem["retry_after"].as_u64().unwrap();
    assert_eq!(
        headers["retry-after"].to_str().unwrap(),
        retry_after.to_string()
    );
    let ray = problem["ray_id"].as_str().unwrap();
    assert_eq!(problem["instance"], ray);
    assert_eq!(headers["cf-ray"].to_str().unwrap(), ray);
    assert!(
        ray.len() == 16
            && ray
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{ray}"
    );
    let timestamp = problem["timestamp"].as_str().unwrap();
    assert!(
        timestamp.len() == 20 && timestamp.ends_with('Z') && timestamp.as_bytes()[10] == b'T',
        "{timestamp}"
    );
    assert!(
        problem["what_you_should_do"]
            .as_str()
            .unwrap()
            .starts_with("**Wait and retry.**")
    );
}

#[test]
fn problem_json_is_asked_and_answered() {
    let (_origin, edge) = edge();
    let response = client(&edge)
        .get(edge.url("/cdn-cgi/error/1020"))
        .header("accept", "application/problem+json")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json; charset=utf-8"
    );
    assert!(
        response.headers().get("retry-after").is_none(),
        "1020 is not retryable"
    );
    let problem: Value = response.json().unwrap();
    assert_eq!(problem["error_name"], "firewall_rule_blocked");
    assert_eq!(problem["retryable"], false);
    assert!(problem.get("retry_after").is_none());
    assert_eq!(problem["owner_action_required"], true);
}

#[test]
fn markdown_problem_has_yaml_frontmatter_and_sections() {
    let (_origin, edge) = edge();
    let response = client(&edge)
        .get(edge.url("/cdn-cgi/error/1015"))
        .header("accept", "text/markdown")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(
        response.headers()["content-type"],
        "text/markdown; charset=utf-8"
    );
    let ray = response.headers()["cf-ray"].to_str().unwrap().to_string();
    let retry_header = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .to_string();
    let (meta, prose) = frontmatter(&response.text().unwrap());
    assert_eq!(meta["error_code"].as_u64(), Some(1015));
    assert_eq!(meta["error_name"].as_str(), Some("rate_limited"));
    assert_eq!(meta["status"].as_u64(), Some(429));
    assert_eq!(meta["ray_id"].as_str(), Some(ray.as_str()));
    assert_eq!(meta["zone"].as_str(), Some("example.com"));
    assert_eq!(meta["cloudflare_error"].as_bool(), Some(true));
    assert_eq!(meta["retryable"].as_bool(), Some(true));
    assert_eq!(
        meta["retry_after"].as_u64().map(|s| s.to_string()),
        Some(retry_header)
    );
    assert_eq!(meta["owner_action_required"].as_bool(), Some(false));
    for absent in ["type", "title", "instance", "footer"] {
        assert!(
            meta.get(absent).is_none(),
            "{absent} is not in the frontmatter"
        );
    }
    assert!(
        prose.contains("# Error 1015: You are being rate limited"),
        "{prose}"
    );
    assert!(prose.contains("## What Happened"), "{prose}");
    assert!(prose.contains("## What You Should Do"), "{prose}");
}

#[test]
fn browsers_get_a_complete_html_page() {
    let (_origin, edge) = edge();
    let accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let response = client(&edge)
        .get(edge.url("/cdn-cgi/error/1020"))
        .header("accept", accept)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert_eq!(
        response.headers()["content-type"],
        "text/html; charset=utf-8"
    );
    let ray = response.headers()["cf-ray"].to_str().unwrap().to_string();
    let html = response.text().unwrap();
    let document = scraper::Html::parse_document(&html);
    assert!(
        html.to_ascii_lowercase().starts_with("<!doctype html>"),
        "a complete document"
    );
    assert!(
        document
            .select(&scraper::Selector::parse("main").unwrap())
            .next()
            .is_some(),
        "a <main> landmark"
    );
    let title = document
        .select(&scraper::Selector::parse("title").unwrap())
        .next()
        .expect("a <title>");
    assert!(title.text().collect::<String>().contains("1020"));
    let text: String = document.root_element().text().collect();
    assert!(text.contains(&ray), "the page shows the ray id");
    assert!(text.contains("example.com"), "the page shows the host");
    assert!(
        document
            .select(&scraper::Selector::parse("html[lang]").unwrap())
            .next()
            .is_some(),
        "the page declares its language"
    );
}

#[test]
fn no_accept_and_wildcard_get_html() {
    let (_origin, edge) = edge();
    let http = client(&edge);
    let bare = http.get(edge.url("/cdn-cgi/error/1009")).send().unwrap();
    assert_eq!(bare.headers()["content-type"], "text/html; charset=utf-8");
    let any = http
        .get(edge.url("/cdn-cgi/error/1009"))
        .header("accept", "*/*")
        .send()
        .unwrap();
    assert_eq!(any.headers()["content-type"], "text/html; charset=utf-8");
    let text_any = http
        .get(edge.url("/cdn-cgi/error/1009"))
        .header("accept", "text/*")
        .send()
        .unwrap();
    assert_eq!(
        text_any.headers()["content-type"],
        "text/markdown; charset=utf-8"
    );
}

/// Every code of the catalog (`signpost_problem::catalog()`, the list the binary is built with)
/// answers `/cdn-cgi/error/<code>` in JSON, Markdown and HTML, each read with a real parser
/// (serde_json, the YAML frontmatter, an HTML parser), with the catalog's facts in each.
#[test]
fn every_catalog_code_renders_in_every_format() {
    let (_origin, edge) = edge();
    let http = client(&edge);
    let catalog = signpost_problem::catalog();
    assert!(catalog.len() >= 60, "{} codes", catalog.len());
    let selector = |s: &str| scraper::Selector::parse(s).unwrap();
    for entry in catalog {
        let code = entry.code.get();
        let path = format!("/cdn-cgi/error/{code}");
        let ask = |accept: Option<&str>| {
            let mut request = http.get(edge.url(&path));
            if let Some(accept) = accept {
                request = request.header("accept", accept);
            }
            let response = request.send().unwrap();
            assert_eq!(
                response.status().as_u16(),
                entry.status,
                "{code} {accept:?}"
            );
            let content_type = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            let ray = response.headers()["cf-ray"].to_str().unwrap().to_string();
            let retry_header = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u32>().unwrap());
            assert_eq!(retry_header, entry.retry_after, "{code} {accept:?}");
            (content_type, ray, response.text().unwrap())
        };

        let (content_type, ray, body) = ask(Some("application/json"));
        assert_eq!(content_type, "application/json; charset=utf-8", "{code}");
        let json: serde_json::Map<String, Value> = serde_json::from_str(&body).unwrap();
        let keys: Vec<&str> = json.keys().map(String::as_str).collect();
        let expected: Vec<&str> = JSON_MEMBERS
            .into_iter()
            .filter(|m| *m != "retry_after" || entry.retry_after.is_some())
            .collect();
        assert_eq!(keys, expected, "{code}: members and their order");
        assert_eq!(json["error_code"], code);
        assert_eq!(json["status"], entry.status, "{code}");
        assert_eq!(json["title"], entry.wire_title(), "{code}");
        assert_eq!(json["detail"], entry.detail.as_str(), "{code}");
        assert_eq!(json["error_name"], entry.error_name.as_str(), "{code}");
        assert_eq!(
            json["error_category"],
            entry.error_category.as_str(),
            "{code}"
        );
        assert_eq!(json["retryable"], entry.retryable, "{code}");
        assert_eq!(
            json.get("retry_after").and_then(Value::as_u64),
            entry.retry_after.map(u64::from),
            "{code}"
        );
        assert_eq!(
            json["owner_action_required"], entry.owner_action_required,
            "{code}"
        );
        assert_eq!(json["cloudflare_error"], true, "{code}");
        assert_eq!(json["ray_id"], ray.as_str(), "{code}");
        assert_eq!(json["zone"], "example.com", "{code}");
        assert_eq!(
            json["what_you_should_do"],
            entry.guidance(None).as_str(),
            "{code}"
        );

        let (content_type, ray, body) = ask(Some("text/markdown"));
        assert_eq!(content_type, "text/markdown; charset=utf-8", "{code}");
        let (meta, prose) = frontmatter(&body);
        assert_eq!(meta["error_code"].as_u64(), Some(u64::from(code)));
        assert_eq!(meta["status"].as_u64(), Some(u64::from(entry.status)));
        assert_eq!(
            meta["error_name"].as_str(),
            Some(entry.error_name.as_str()),
            "{code}"
        );
        assert_eq!(
            meta["error_category"].as_str(),
            Some(entry.error_category.as_str()),
            "{code}"
        );
        assert_eq!(meta["retryable"].as_bool(), Some(entry.retryable), "{code}");
        assert_eq!(
            meta["retry_after"].as_u64(),
            entry.retry_after.map(u64::from),
            "{code}"
        );
        assert_eq!(
            meta["owner_action_required"].as_bool(),
            Some(entry.owner_action_required),
            "{code}"
        );
        assert_eq!(meta["cloudflare_error"].as_bool(), Some(true), "{code}");
        assert_eq!(meta["ray_id"].as_str(), Some(ray.as_str()), "{code}");
        assert_eq!(
            markdown_headings(&prose),
            [
                (1, entry.wire_title().to_string()),
                (2, "What Happened".to_string()),
                (2, "What You Should Do".to_string()),
            ],
            "{code}: {prose}"
        );

        let (content_type, ray, body) = ask(None);
        assert_eq!(content_type, "text/html; charset=utf-8", "{code}");
        let document = scraper::Html::parse_document(&body);
        let text_of = |s: &str| -> String {
            document
                .select(&selector(s))
                .next()
                .unwrap_or_else(|| panic!("{code}: no {s} in {body}"))
                .text()
                .collect()
        };
        assert_eq!(
            text_of("title"),
            format!("{} | example.com", entry.wire_title()),
            "{code}"
        );
        assert_eq!(text_of("main .code"), format!("Error {code}"));
        assert_eq!(text_of("main h1"), entry.title, "{code}");
        assert_eq!(text_of("main .ray-id"), ray, "{code}");
        assert_eq!(text_of("main .zone"), "example.com", "{code}");
        assert_eq!(
            text_of("section[aria-labelledby=happened] p"),
            entry.detail,
            "{code}"
        );
    }
}

/// The headings of a Markdown document, level and text, read with a CommonMark parser.
fn markdown_headings(md: &str) -> Vec<(u8, String)> {
    use pulldown_cmark::{Event, Parser, Tag, TagEnd};
    let mut out = Vec::new();
    let mut current: Option<(u8, String)> = None;
    for event in Parser::new(md) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                current = Some((level as u8, String::new()))
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, text)) = current.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => out.extend(current.take()),
            _ => {}
        }
    }
    out
}

#[test]
fn unknown_or_malformed_codes_get_a_negotiated_404() {
    let (_origin, edge) = edge();
    let http = client(&edge);
    for path in [
        "/cdn-cgi/error/abc",
        "/cdn-cgi/error/99999999999",
        "/cdn-cgi/error/",
        "/cdn-cgi/error",
        "/cdn-cgi/error/9999",
        "/cdn-cgi/error/1015/x",
    ] {
        let json = http
            .get(edge.url(path))
            .header("accept", "application/json")
            .send()
            .unwrap();
        assert_eq!(json.status().as_u16(), 404, "{path}");
        assert_eq!(
            json.headers()["content-type"],
            "application/json; charset=utf-8",
            "{path}"
        );
        let problem: Value = json.json().unwrap();
        assert_eq!(problem["status"], 404, "{path}");
        let md = http
            .get(edge.url(path))
            .header("accept", "text/markdown")
            .send()
            .unwrap();
        assert_eq!(md.status().as_u16(), 404, "{path}");
        let (meta, _) = frontmatter(&md.text().unwrap());
        assert_eq!(meta["status"].as_u64(), Some(404), "{path}");
        let html = http.get(edge.url(path)).send().unwrap();
        assert_eq!(html.status().as_u16(), 404, "{path}");
        assert!(
            html.text().unwrap().to_ascii_lowercase().contains("<html"),
            "{path}: a page, not a bare body"
        );
    }
}

#[test]
fn error_pages_are_never_forwarded() {
    let (_origin, edge) = edge();
    let response = client(&edge)
        .get(edge.url("/cdn-cgi/error/1015"))
        .send()
        .unwrap();
    assert!(
        response.headers().get("x-origin").is_none(),
        "the origin must not see /cdn-cgi/error"
    );
}

#[test]
fn ray_ids_differ_between_requests() {
    let (_origin, edge) = edge();
    let http = client(&edge);
    let rays: std::collections::HashSet<String> = (0..50)
        .map(|_| {
            http.get(edge.url("/cdn-cgi/error/1015"))
                .send()
                .unwrap()
                .headers()["cf-ray"]
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(rays.len(), 50);
}
