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

#[test]
fn every_catalog_code_renders_in_every_format() {
    let (_origin, edge) = edge();
    let http = client(&edge);
    let codes: Vec<u16> = [
        1000u16, 1001, 1003, 1005, 1006, 1009, 1010, 1011, 1013, 1015, 1016, 1020, 1026, 1033,
        1101, 1200, 1205,
    ]
    .into_iter()
    .chain([500, 502, 504, 520, 521, 522, 523, 524, 525, 526])
    .collect();
    for code in codes {
        let json: Value = http
            .get(edge.url(&format!("/cdn-cgi/error/{code}")))
            .header("accept", "application/json")
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(json["error_code"], code);
        let md = http
            .get(edge.url(&format!("/cdn-cgi/error/{code}")))
            .header("accept", "text/markdown")
            .send()
            .unwrap();
        let status = md.status().as_u16();
        assert_eq!(
            json["status"], status,
            "{code}: JSON status equals the HTTP status"
        );
        let (meta, _) = frontmatter(&md.text().unwrap());
        assert_eq!(meta["error_code"].as_u64(), Some(u64::from(code)));
        assert_eq!(
            meta["retryable"].as_bool(),
            json["retryable"].as_bool(),
            "{code}: same facts in both formats"
        );
        let html = http
            .get(edge.url(&format!("/cdn-cgi/error/{code}")))
            .send()
            .unwrap();
        assert_eq!(html.status().as_u16(), status);
        assert!(html.text().unwrap().contains(&code.to_string()));
    }
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
