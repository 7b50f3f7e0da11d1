//! Renders real catalog entries and reads them back the way clients do: serde_json, a YAML
//! parser, an HTML parser, a tokenizer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use serde_json::Value as Json;
use signpost_problem::{
    Branding, Code, Format, Problem, Rendered, catalog, lookup, lookup_path_code, negotiate, render,
};

const RAY: &str = "9d99a39dc992d168";
/// 2026-03-09T11:11:28Z, the moment of the contract's Markdown example.
fn fixed_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_773_054_688)
}

fn problem<'a>(code: u16, zone: &'a str, ray_id: &'a str) -> Problem<'a> {
    Problem {
        entry: lookup(Code::new(code)).expect("code in catalog"),
        ray_id,
        timestamp: fixed_time(),
        zone,
        retry_after: None,
    }
}

fn body(rendered: &Rendered) -> &str {
    std::str::from_utf8(&rendered.body).expect("bodies are UTF-8")
}

/// The YAML between the opening `---` line and the closing one.
fn frontmatter(markdown: &str) -> &str {
    let rest = markdown.strip_prefix("---\n").expect("opens with ---");
    let end = rest.find("\n---\n").expect("frontmatter closes");
    &rest[..end + 1]
}

// === snapshots ===

/// Every format of a few codes, byte for byte, as insta snapshots (`tests/snapshots/`); the
/// project's one snapshot tool. `cargo insta review` (or `INSTA_UPDATE=always`) accepts changes.
#[test]
fn snapshots() {
    for code in [1015, 1020, 522, 1001, 404, 405] {
        let p = problem(code, "example.com", RAY);
        let branding = Branding::default();
        for (format, ext) in [
            (Format::Json, "json"),
            (Format::Markdown, "md"),
            (Format::Html, "html"),
        ] {
            insta::assert_snapshot!(
                format!("{code}.{ext}"),
                body(&render(&p, format, &branding))
            );
        }
    }
}

// === JSON ===

const MEMBERS: &[&str] = &[
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
fn json_members_order_and_types() {
    for entry in catalog() {
        let p = problem(entry.code.get(), "example.com", RAY);
        let rendered = render(&p, Format::Json, &Branding::default());
        assert_eq!(
            rendered.body,
            render(&p, Format::ProblemJson, &Branding::default()).body
        );
        let value: Json = serde_json::from_slice(&rendered.body).expect("valid JSON");
        let object = value.as_object().expect("an object");
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        let expected: Vec<&str> = MEMBERS
            .iter()
            .copied()
            .filter(|m| *m != "retry_after" || entry.retryable)
            .collect();
        assert_eq!(keys, expected, "{}", entry.code);

        assert_eq!(object["status"], entry.status);
        assert_eq!(rendered.status, entry.status);
        assert_eq!(object["error_code"], entry.code.get());
        assert_eq!(
            object["title"],
            format!("Error {}: {}", entry.code, entry.title)
        );
        assert_eq!(object["instance"], object["ray_id"]);
        assert_eq!(object["ray_id"], RAY);
        assert_eq!(object["timestamp"], "2026-03-09T11:11:28Z");
        assert_eq!(object["cloudflare_error"], true);
        assert_eq!(object["retryable"], entry.retryable);
        assert_eq!(object["owner_action_required"], entry.owner_action_required);
        assert_eq!(object["error_category"], entry.error_category.as_str());
        assert!(object["type"].as_str().unwrap().starts_with("https://"));
        if entry.retryable {
            assert!(object["retry_after"].is_u64());
            assert_eq!(
                object["retry_after"].as_u64(),
                entry.retry_after.map(u64::from)
            );
        }
        assert!(
            object["what_you_should_do"]
                .as_str()
                .unwrap()
                .starts_with("**")
        );
        assert!(!object["what_you_should_do"].as_str().unwrap().contains('{'));
    }
}

#[test]
fn type_uris() {
    let branding = Branding::default();
    let uri = |code| branding.type_uri(lookup(Code::new(code)).unwrap());
    let base = "https://developers.cloudflare.com/support/troubleshooting/http-status-codes/";
    assert_eq!(
        uri(1015),
        format!("{base}cloudflare-1xxx-errors/error-1015/")
    );
    assert_eq!(
        uri(1008),
        format!("{base}cloudflare-1xxx-errors/error-1006/")
    );
    assert_eq!(uri(1026), format!("{base}cloudflare-1xxx-errors/"));
    assert_eq!(uri(522), format!("{base}cloudflare-5xx-errors/error-522/"));
    assert_eq!(uri(404), base);
    let custom = Branding {
        type_uri_template: Some("https://errors.example.com/{code}".into()),
        ..Branding::default()
    };
    assert_eq!(
        custom.type_uri(lookup(Code::new(1020)).unwrap()),
        "https://errors.example.com/1020"
    );
}

#[test]
fn json_escapes_hostile_zone() {
    let zone = "\"},\"cloudflare_error\":false,\"x\":\"\u{0}\n<script>";
    let p = problem(1020, zone, RAY);
    let value: Json =
        serde_json::from_slice(&render(&p, Format::Json, &Branding::default()).body).unwrap();
    assert_eq!(value["zone"], zone);
    assert_eq!(value["cloudflare_error"], true);
}

// === retry and headers ===

#[test]
fn headers_agree_with_body() {
    for entry in catalog() {
        for format in [
            Format::Html,
            Format::Json,
            Format::ProblemJson,
            Format::Markdown,
        ] {
            let p = problem(entry.code.get(), "example.com", RAY);
            let rendered = render(&p, format, &Branding::default());
            let headers = rendered.headers(RAY);
            let get = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str())
            };
            assert_eq!(get("content-type"), Some(format.content_type()));
            assert_eq!(
                get("content-length"),
                Some(rendered.body.len().to_string().as_str())
            );
            assert_eq!(
                get("cache-control"),
                Some("private, max-age=0, no-store, no-cache, must-revalidate")
            );
            assert_eq!(get("vary"), Some("Accept"));
            assert_eq!(get("cf-ray"), Some(RAY));
            let retry = entry.retry_after.map(|s| s.to_string());
            assert_eq!(get("retry-after"), retry.as_deref(), "{}", entry.code);
            assert_eq!(rendered.retry_after, entry.retry_after);
        }
    }
}

#[test]
fn rate_limiter_wait_overrides_everywhere() {
    let mut p = problem(1015, "example.com", RAY);
    p.retry_after = Some(7);
    let json = render(&p, Format::Json, &Branding::default());
    assert_eq!(json.retry_after, Some(7));
    assert!(json.headers(RAY).contains(&("retry-after", "7".into())));
    let value: Json = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(value["retry_after"], 7);
    assert!(
        value["what_you_should_do"]
            .as_str()
            .unwrap()
            .contains("Wait at least 7 seconds")
    );
    let markdown = render(&p, Format::Markdown, &Branding::default());
    assert_eq!(markdown.retry_after, Some(7));
    assert!(body(&markdown).contains("retry_after: 7\n"));
    assert!(body(&markdown).contains("Wait at least 7 seconds"));
    // The page for people says the same wait, in its details and its guidance.
    let html = render(&p, Format::Html, &Branding::default());
    assert_eq!(html.retry_after, Some(7));
    assert!(html.headers(RAY).contains(&("retry-after", "7".into())));
    let page = scraper::Html::parse_document(body(&html));
    let details: Vec<String> = page
        .select(&scraper::Selector::parse("dl dt, dl dd").unwrap())
        .map(|e| e.text().collect())
        .collect();
    let at = details.iter().position(|t| t == "Retry after").unwrap();
    assert_eq!(details[at + 1], "7 s");
    let todo: String = page
        .select(&scraper::Selector::parse("section[aria-labelledby=todo]").unwrap())
        .flat_map(|e| e.text())
        .collect();
    assert!(todo.contains("Wait at least 7 seconds"), "{todo}");

    // Not retryable: the override is ignored, and no Retry-After is sent.
    let mut p = problem(1020, "example.com", RAY);
    p.retry_after = Some(7);
    let rendered = render(&p, Format::Markdown, &Branding::default());
    assert_eq!(rendered.retry_after, None);
    assert!(!body(&rendered).contains("retry_after"));
    assert!(
        rendered
            .headers(RAY)
            .iter()
            .all(|(n, _)| *n != "retry-after")
    );
}

#[test]
fn timestamps_out_of_range_do_not_panic() {
    for time in [
        UNIX_EPOCH - Duration::from_secs(10),
        UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 100),
    ] {
        let mut p = problem(1015, "example.com", RAY);
        p.timestamp = time;
        for format in [Format::Html, Format::Json, Format::Markdown] {
            assert!(!render(&p, format, &Branding::default()).body.is_empty());
        }
    }
}

// === Markdown ===

#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Front {
    error_code: u16,
    error_name: String,
    error_category: String,
    status: u16,
    ray_id: String,
    timestamp: String,
    zone: String,
    cloudflare_error: bool,
    retryable: bool,
    retry_after: Option<u32>,
    owner_action_required: bool,
}

fn zone_reads_back(zone: &str, ray_id: &str) {
    let p = problem(1015, zone, ray_id);
    let rendered = render(&p, Format::Markdown, &Branding::default());
    let markdown = body(&rendered);
    let yaml = frontmatter(markdown);
    // Typed read: every key and type as the contract says.
    let front: Front =
        serde_norway::from_str(yaml).unwrap_or_else(|e| panic!("zone {zone:?}: {e}\n{yaml}"));
    assert_eq!(front.zone, zone);
    assert_eq!(front.ray_id, ray_id);
    assert_eq!(front.timestamp, "2026-03-09T11:11:28Z");
    assert_eq!(
        (front.error_code, front.status, front.retry_after),
        (1015, 429, Some(30))
    );
    // Untyped read: the zone is a string scalar, not a number or bool that happens to print alike.
    let value: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
    assert_eq!(value["zone"], serde_norway::Value::String(zone.to_string()));
    assert_eq!(
        value["ray_id"],
        serde_norway::Value::String(ray_id.to_string())
    );
    // And the prose after the frontmatter is intact.
    let after = &markdown[4 + yaml.len()..];
    assert!(
        after.starts_with("---\n\n# Error 1015: You are being rate limited\n\n## What Happened\n")
    );
    assert_eq!(front.error_name, "rate_limited");
    assert_eq!(front.error_category, "rate_limit");
    assert!(front.cloudflare_error && front.retryable && !front.owner_action_required);
}

const HOSTILE: &[&str] = &[
    "a: b",
    "'x'",
    "\"q\"",
    "<script>alert(1)</script>",
    "*alias",
    "&anchor",
    "!tag",
    "!!str x",
    "- x",
    "? x",
    "#c",
    "x #c",
    "%",
    "@",
    "`",
    "|",
    ">",
    "{a: 1}",
    "[1]",
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "Yes",
    "NO",
    "True",
    "null",
    "Null",
    "~",
    "1e3",
    "1E3",
    "0x1F",
    "0o17",
    "0b1",
    "1_000",
    "1:20",
    "12:30:00",
    "2026-03-09",
    "2026-03-09T11:11:28Z",
    ".inf",
    "-.inf",
    ".NaN",
    "=",
    "<<",
    "",
    " ",
    " x",
    "x ",
    "a\nb",
    "a\r\nb",
    "\r",
    "---",
    "...",
    "---\n# x",
    "\t",
    "tab\there",
    "ünïcödé.example",
    "例え.jp",
    "\u{0}",
    "\u{7f}",
    "\u{85}",
    "\u{2028}",
    "\u{feff}x",
    "\u{fffe}",
    "\u{1F600}",
    "\\",
    "\\n",
    "example.com",
    "1234567890123456",
    "9e99999999999999",
];

#[test]
fn markdown_frontmatter_reads_back_hostile_zones() {
    for zone in HOSTILE {
        zone_reads_back(zone, RAY);
        zone_reads_back("example.com", zone);
    }
    zone_reads_back(&"a".repeat(64 * 1024), RAY);
    zone_reads_back(&"a:\n\"".repeat(16 * 1024), RAY);
}

#[test]
fn markdown_layout_matches_contract() {
    let p = problem(1015, "example.com", RAY);
    let markdown = body(&render(&p, Format::Markdown, &Branding::default())).to_string();
    let expected_head = "---\nerror_code: 1015\nerror_name: rate_limited\nerror_category: rate_limit\nstatus: 429\nray_id: 9d99a39dc992d168\ntimestamp: \"2026-03-09T11:11:28Z\"\nzone: example.com\ncloudflare_error: true\nretryable: true\nretry_after: 30\nowner_action_required: false\n---\n\n# Error 1015: You are being rate limited\n\n## What Happened\n\nYou are being rate-limited by the website owner's configuration.\n\n## What You Should Do\n\n**Wait and retry.**";
    assert!(markdown.starts_with(expected_head), "{markdown}");
    assert!(markdown.ends_with(
        "\n\n---\n\nThis error was generated by signpost on behalf of the website owner.\n"
    ));
}

#[test]
fn footer_cannot_add_markdown_structure() {
    let branding = Branding {
        footer: "Served by us.\n\n# Injected\r\n---".into(),
        ..Branding::default()
    };
    let p = problem(1020, "example.com", RAY);
    let markdown = body(&render(&p, Format::Markdown, &branding)).to_string();
    assert!(
        markdown.ends_with("\n\n---\n\nServed by us. # Injected ---\n"),
        "{markdown}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_zone_reads_back(zone in any::<String>(), ray in "[ -~]{0,20}") {
        zone_reads_back(&zone, &ray);
    }

    #[test]
    fn yamlish_zones_read_back(zone in r#"[-a-zA-Z0-9.:#&*!|>'"%@`{}\[\],?~_+ \n\t]{0,24}"#) {
        zone_reads_back(&zone, RAY);
    }
}

// === HTML ===

#[test]
fn html_escapes_the_request() {
    let zone = "<script>alert('x')</script>\"&.example";
    let ray = "<b>ray</b>";
    let p = problem(1020, zone, ray);
    let html = body(&render(&p, Format::Html, &Branding::default())).to_string();
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("<b>ray"));
    let doc = scraper::Html::parse_document(&html);
    let text = |selector: &str| {
        let selector = scraper::Selector::parse(selector).unwrap();
        doc.select(&selector)
            .next()
            .map(|e| e.text().collect::<String>())
    };
    assert_eq!(text("dd.zone").as_deref(), Some(zone));
    assert_eq!(text("p.host").as_deref(), Some(zone));
    assert_eq!(text("dd.ray-id").as_deref(), Some(ray));
    assert_eq!(text("h1").as_deref(), Some("Access denied"));
    assert_eq!(
        text("title").unwrap(),
        format!("Error 1020: Access denied | {zone}")
    );
    let script = scraper::Selector::parse("script").unwrap();
    assert_eq!(doc.select(&script).count(), 0);
}

#[test]
fn html_is_self_contained_and_accessible() {
    for entry in catalog() {
        let p = problem(entry.code.get(), "example.com", RAY);
        let html = body(&render(&p, Format::Html, &Branding::default())).to_string();
        assert!(html.starts_with("<!doctype html>\n<html lang=\"en\">"));
        for needle in [
            "<meta charset=\"utf-8\">",
            "name=\"viewport\"",
            "<main>",
            "<footer>",
            "<h1",
            "prefers-color-scheme",
        ] {
            assert!(html.contains(needle), "{needle}");
        }
        for banned in ["<script", "<link", "src=", "@import", "url("] {
            assert!(!html.contains(banned), "{banned}");
        }
        assert!(
            html.len() < 6 * 1024,
            "{} is {} bytes",
            entry.code,
            html.len()
        );
        // The guidance Markdown became HTML.
        assert!(html.contains("<strong>"));
        assert!(!html.contains("**"));
    }
}

// === negotiation and the test endpoint ===

#[test]
fn path_codes_render() {
    let e = lookup_path_code("9999");
    assert_eq!((e.code.get(), e.status), (404, 404));
    let p = Problem {
        entry: e,
        ..problem(1015, "example.com", RAY)
    };
    let rendered = render(&p, negotiate(None), &Branding::default());
    assert_eq!((rendered.status, rendered.format), (404, Format::Html));
}

// === token budget ===

#[test]
fn token_budget_for_1015() {
    let bpe = tiktoken_rs::cl100k_base().expect("cl100k_base is bundled");
    let p = problem(1015, "example.com", RAY);
    let count = |format| {
        let rendered = render(&p, format, &Branding::default());
        let text = body(&rendered).to_string();
        (
            rendered.body.len(),
            bpe.encode_with_special_tokens(&text).len(),
        )
    };
    let (md_bytes, md_tokens) = count(Format::Markdown);
    let (json_bytes, json_tokens) = count(Format::Json);
    let (html_bytes, html_tokens) = count(Format::Html);
    println!(
        "1015 cl100k_base: markdown {md_bytes} B / {md_tokens} tokens, json {json_bytes} B / {json_tokens} tokens, html {html_bytes} B / {html_tokens} tokens"
    );
    assert!(md_tokens <= 221, "markdown: {md_tokens} tokens");
    assert!(json_tokens <= 256, "json: {json_tokens} tokens");
}

/// The edge's 5xx pages draw the request's way (you, the edge, the host) and mark where it broke,
/// as an ordered list a screen reader and a page without CSS read in order; refusals draw none.
#[test]
fn failure_pages_show_where_the_way_broke() {
    let states = |code: u16| -> Option<Vec<(String, String)>> {
        let p = problem(code, "<b>shop</b>.example", RAY);
        let page =
            scraper::Html::parse_document(body(&render(&p, Format::Html, &Branding::default())));
        let hop = scraper::Selector::parse("figure.way li").unwrap();
        let part = |li: &scraper::ElementRef<'_>, class: &str| {
            let s = scraper::Selector::parse(class).unwrap();
            li.select(&s).next().unwrap().text().collect::<String>()
        };
        let hops: Vec<_> = page
            .select(&hop)
            .map(|li| (part(&li, ".what"), part(&li, ".state")))
            .collect();
        (!hops.is_empty()).then_some(hops)
    };
    let origin_down = states(522).expect("a 52x draws the way");
    assert_eq!(origin_down[0].1, "Working");
    assert_eq!(origin_down[1].1, "Working");
    assert_eq!(
        origin_down[2],
        ("<b>shop</b>.example".to_string(), "Error".to_string()),
        "the host, as text, marked broken"
    );
    let edge_failed = states(500).expect("the edge's own 500 draws the way");
    assert_eq!(edge_failed[1].1, "Error");
    assert_eq!(edge_failed[2].1, "Not reached");
    assert_eq!(states(1020), None, "a refusal: nothing broke");
    assert_eq!(states(404), None);
}
