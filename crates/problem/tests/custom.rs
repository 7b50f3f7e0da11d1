//! An operator's error rule rendered in every format, read back the way clients do: the
//! contract's members survive any rule, and a token's value (the Host is the client's to choose)
//! never leaves its place, whatever it holds.

use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use serde_json::{Value, json};
use signpost_problem::{
    Branding, Code, Custom, Format, Problem, TokenValues, lookup, origin_entry, render_custom,
};

const RAY: &str = "9d99a39dc992d168";

fn problem(code: u16, zone: &str) -> Problem<'_> {
    Problem {
        entry: lookup(Code::new(code)).expect("code in catalog"),
        ray_id: RAY,
        timestamp: UNIX_EPOCH + Duration::from_secs(1_773_054_688),
        zone,
        retry_after: None,
    }
}

fn tokens(host: &str) -> TokenValues<'_> {
    TokenValues {
        client_ip: "192.0.2.7",
        geo: "FR",
        host,
        ..TokenValues::default()
    }
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8")
}

/// The frontmatter of a Markdown body, parsed, and the rest.
fn frontmatter(markdown: &str) -> (serde_norway::Value, &str) {
    let rest = markdown.strip_prefix("---\n").expect("opens with ---");
    let end = rest.find("\n---\n").expect("frontmatter closes");
    let meta = serde_norway::from_str(&rest[..=end]).expect("frontmatter parses");
    (meta, &rest[end + 5..])
}

const FRONTMATTER_KEYS: [&str; 11] = [
    "error_code",
    "error_name",
    "error_category",
    "status",
    "ray_id",
    "timestamp",
    "zone",
    "cloudflare_error",
    "retryable",
    "retry_after",
    "owner_action_required",
];

fn rule() -> Custom {
    Custom {
        status: Some(503),
        retryable: Some(true),
        retry_after: Some(90),
        title: Some("Slow down, ::HOST::".into()),
        detail: Some("Too many requests from ::CLIENT_IP:: (::GEO::) to ::ZONE::.".into()),
        what_you_should_do: Some("**Wait ::RETRY_AFTER:: s.** Quote ::RAY_ID:: (::CODE::).".into()),
        ..Custom::default()
    }
}

#[test]
fn a_rule_changes_status_retry_and_text_in_every_format() {
    let p = problem(1015, "example.com");
    let custom = rule();
    let branding = Branding::default();
    let json = render_custom(&p, Format::Json, &branding, &custom, &tokens("example.com"));
    assert_eq!((json.status, json.retry_after), (503, Some(90)));
    let body: Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(body["status"], 503);
    assert_eq!(body["error_code"], 1015);
    assert_eq!(body["error_name"], "rate_limited");
    assert_eq!(body["retry_after"], 90);
    assert_eq!(body["title"], "Error 1015: Slow down, example.com");
    assert_eq!(
        body["detail"],
        "Too many requests from 192.0.2.7 (FR) to example.com."
    );
    assert_eq!(
        body["what_you_should_do"],
        "**Wait 90 s.** Quote 9d99a39dc992d168 (1015)."
    );
    let md = render_custom(
        &p,
        Format::Markdown,
        &branding,
        &custom,
        &tokens("example.com"),
    );
    let (meta, prose) = frontmatter(text(&md.body));
    assert_eq!(meta["status"].as_u64(), Some(503));
    assert_eq!(meta["retry_after"].as_u64(), Some(90));
    assert!(
        prose.contains("# Error 1015: Slow down, example\\.com\n"),
        "{prose}"
    );
    let html = render_custom(&p, Format::Html, &branding, &custom, &tokens("example.com"));
    let page = scraper::Html::parse_document(text(&html.body));
    let h1: String = page
        .select(&scraper::Selector::parse("h1").unwrap())
        .flat_map(|e| e.text())
        .collect();
    assert_eq!(h1, "Slow down, example.com");
    assert!(
        html.headers(RAY)
            .contains(&("retry-after", "90".to_string()))
    );
}

#[test]
fn a_rule_can_stop_retries() {
    let p = problem(1015, "example.com");
    let custom = Custom {
        retryable: Some(false),
        ..Custom::default()
    };
    let r = render_custom(
        &p,
        Format::Json,
        &Branding::default(),
        &custom,
        &tokens("x"),
    );
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        (r.retry_after, body["retryable"].clone()),
        (None, json!(false))
    );
    assert!(body.get("retry_after").is_none());
    assert!(
        !r.headers(RAY)
            .iter()
            .any(|(name, _)| *name == "retry-after")
    );
}

#[test]
fn json_content_adds_members_and_cannot_override_the_contract() {
    assert!(signpost_problem::check_json_content(&json!({"error_code": 1})).is_err());
    assert!(signpost_problem::check_json_content(&json!({"status": 200})).is_err());
    assert!(signpost_problem::check_json_content(&json!([1])).is_err());
    assert!(signpost_problem::check_json_content(&json!({"title": "t", "help": "x"})).is_ok());
    let p = problem(1020, "example.com");
    let mut extra = serde_json::Map::new();
    extra.insert("help_url".into(), json!("https://help.example/::CODE::"));
    extra.insert("title".into(), json!("Blocked at ::HOST::"));
    // Refused at load; and skipped here all the same.
    extra.insert("ray_id".into(), json!("forged"));
    extra.insert("cloudflare_error".into(), json!(false));
    extra.insert("status".into(), json!(200));
    let custom = Custom {
        json: Some(extra),
        ..Custom::default()
    };
    let r = render_custom(
        &p,
        Format::Json,
        &Branding::default(),
        &custom,
        &tokens("h\"<"),
    );
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["ray_id"], RAY);
    assert_eq!(body["cloudflare_error"], true);
    assert_eq!(body["status"], 403);
    assert_eq!(body["title"], "Blocked at h\"<");
    assert_eq!(body["help_url"], "https://help.example/1020");
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.first(), Some(&"type"));
    assert_eq!(keys.last(), Some(&"help_url"), "added members come last");
}

#[test]
fn per_format_content() {
    let p = problem(1020, "example.com");
    let custom = Custom {
        html: Some("<!doctype html><p class=h>::HOST::</p>".into()),
        markdown: Some("# Blocked\n\nAsk ::HOST:: for access.".into()),
        ..Custom::default()
    };
    let branding = Branding::default();
    let host = "<script>x</script>";
    let html = render_custom(&p, Format::Html, &branding, &custom, &tokens(host));
    assert_eq!(
        text(&html.body),
        "<!doctype html><p class=h>&lt;script&gt;x&lt;/script&gt;</p>"
    );
    let md = render_custom(&p, Format::Markdown, &branding, &custom, &tokens(host));
    let (meta, prose) = frontmatter(text(&md.body));
    assert_eq!(meta["error_code"].as_u64(), Some(1020));
    assert_eq!(
        prose,
        "\n# Blocked\n\nAsk \\<script\\>x\\<\\/script\\> for access.\n"
    );
    // No `json` content: the contract's body, with the rule's (absent) text.
    let json = render_custom(&p, Format::Json, &branding, &custom, &tokens(host));
    let body: Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(body["error_name"], "firewall_rule_blocked");
}

#[test]
fn text_content_reads_literally() {
    let p = problem(1020, "example.com");
    let custom = Custom {
        text: Some("# not a heading\n\nhost: ::HOST::".into()),
        ..Custom::default()
    };
    let md = render_custom(
        &p,
        Format::Markdown,
        &Branding::default(),
        &custom,
        &tokens("*x*"),
    );
    let (_, prose) = frontmatter(text(&md.body));
    let events: Vec<_> = pulldown_cmark::Parser::new(prose).collect();
    assert!(!events.iter().any(|e| matches!(
        e,
        pulldown_cmark::Event::Start(pulldown_cmark::Tag::Heading { .. })
    )));
    let shown: String = events
        .iter()
        .filter_map(|e| match e {
            pulldown_cmark::Event::Text(t) => Some(t.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(shown, "# not a headinghost: *x*");
}

#[test]
fn origin_errors_say_so() {
    let entry = origin_entry(503).unwrap();
    let p = Problem {
        entry,
        retry_after: Some(120),
        ..problem(1015, "example.com")
    };
    let r = render_custom(
        &p,
        Format::Json,
        &Branding::default(),
        &Custom::default(),
        &tokens("example.com"),
    );
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["cloudflare_error"], false);
    assert_eq!(body["source"], "origin");
    assert_eq!(body["type"], "about:blank");
    assert_eq!(
        (body["status"].clone(), body["retry_after"].clone()),
        (json!(503), json!(120))
    );
    let md = render_custom(
        &p,
        Format::Markdown,
        &Branding::default(),
        &Custom::default(),
        &tokens("example.com"),
    );
    let (meta, _) = frontmatter(text(&md.body));
    assert_eq!(meta["source"].as_str(), Some("origin"));
    assert_eq!(meta["cloudflare_error"].as_bool(), Some(false));
}

/// Every token in every text field and content, with `host` as the Host.
#[test]
fn text_is_its_own_plain_answer() {
    let p = problem(1015, "example.com");
    let custom = Custom {
        status: Some(503),
        retry_after: Some(90),
        text: Some("Busy. Ray ::RAY_ID::, wait ::RETRY_AFTER:: s. Host ::HOST::".into()),
        ..Custom::default()
    };
    let r = render_custom(
        &p,
        Format::Text,
        &Branding::default(),
        &custom,
        &tokens("a\u{1b}[31m\r\nb"),
    );
    assert_eq!(
        (r.status, r.format, r.retry_after),
        (503, Format::Text, Some(90))
    );
    assert_eq!(
        text(&r.body),
        format!("Busy. Ray {RAY}, wait 90 s. Host a\u{fffd}[31m\u{fffd}\u{fffd}b\n")
    );
    let headers = r.headers(RAY);
    assert!(headers.contains(&("content-type", "text/plain; charset=utf-8".to_owned())));
    assert!(headers.contains(&("retry-after", "90".to_owned())));
    assert!(headers.contains(&("content-length", r.body.len().to_string())));
    // A rule without `text` has no plain answer: the Markdown, labelled as Markdown.
    let r = render_custom(
        &p,
        Format::Text,
        &Branding::default(),
        &rule(),
        &tokens("x"),
    );
    assert_eq!(r.format, Format::Markdown);
    assert!(text(&r.body).starts_with("---\nerror_code: 1015\n"));
}

fn everywhere() -> Custom {
    let all = "::CLIENT_IP:: ::RAY_ID:: ::GEO:: ::CODE:: ::RETRY_AFTER:: ::ZONE:: [::HOST::]";
    let mut extra = serde_json::Map::new();
    extra.insert("note".into(), json!(format!("[::HOST::]")));
    Custom {
        title: Some(format!("t {all}")),
        detail: Some(format!("d {all}")),
        what_you_should_do: Some(format!("**w** {all}")),
        json: Some(extra),
        ..Custom::default()
    }
}

fn check_contained(host: &str) -> Result<(), TestCaseError> {
    let p = problem(1015, "example.com");
    let branding = Branding::default();
    let values = tokens(host);
    let custom = everywhere();

    // JSON parses, and the token's value reads back exactly.
    let r = render_custom(&p, Format::Json, &branding, &custom, &values);
    let body: Value = serde_json::from_slice(&r.body)
        .map_err(|e| TestCaseError::fail(format!("JSON does not parse: {e}")))?;
    let bracketed = format!("[{host}]");
    prop_assert_eq!(body["note"].as_str(), Some(bracketed.as_str()));
    let detail = body["detail"].as_str().unwrap_or_default();
    prop_assert!(detail.ends_with(&bracketed));
    prop_assert_eq!(&body["ray_id"], RAY);

    // The frontmatter parses, with the same keys and values.
    let r = render_custom(&p, Format::Markdown, &branding, &custom, &values);
    let md = text(&r.body);
    let (meta, prose) = frontmatter(md);
    let mapping = meta
        .as_mapping()
        .ok_or_else(|| TestCaseError::fail("frontmatter is a mapping"))?;
    let keys: Vec<&str> = mapping.keys().filter_map(|k| k.as_str()).collect();
    prop_assert_eq!(keys, FRONTMATTER_KEYS.to_vec());
    prop_assert_eq!(meta["ray_id"].as_str(), Some(RAY));
    // The prose keeps its four parts: the value opened no block of its own.
    let headings = pulldown_cmark::Parser::new(prose)
        .filter(|e| {
            matches!(
                e,
                pulldown_cmark::Event::Start(pulldown_cmark::Tag::Heading { .. })
            )
        })
        .count();
    prop_assert_eq!(headings, 3);

    // HTML parses to the same text: the value is shown, never markup.
    let r = render_custom(&p, Format::Html, &branding, &custom, &values);
    let page = scraper::Html::parse_document(text(&r.body));
    let h1: String = page
        .select(&scraper::Selector::parse("h1").unwrap())
        .flat_map(|e| e.text())
        .collect();
    // As an HTML parser reads text: CR LF and CR are LF, NUL is dropped.
    let shown = host
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('\0', "");
    let shown = format!("[{shown}]");
    prop_assert!(h1.ends_with(&shown), "h1 {:?}", h1);
    let elements = page
        .select(&scraper::Selector::parse("script, img, iframe, a").unwrap())
        .count();
    prop_assert_eq!(elements, 0);
    Ok(())
}

const HOSTILE: [&str; 12] = [
    "a: b",
    "'x'",
    "<script>alert(1)</script>",
    "*alias",
    "&anchor",
    "\"quoted\"",
    "- item",
    "yes",
    "line\nbreak\n---\nerror_code: 1",
    "#comment",
    "```",
    "[x](javascript:alert(1))",
];

#[test]
fn hostile_hosts_stay_in_their_place() {
    for host in HOSTILE {
        check_contained(host).unwrap_or_else(|e| panic!("{host:?}: {e}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_host_stays_in_its_place(host in any::<String>()) {
        check_contained(&host)?;
    }

    #[test]
    fn markup_hosts_stay_in_their_place(host in r#"[-<>&"'`*_\[\]()#!|:{}\n\r\t a-z0-9=/\\]{0,40}"#) {
        check_contained(&host)?;
    }
}
