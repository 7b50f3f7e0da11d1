//! The challenge page as a browser's parser reads it: structure, accessibility, escaping of
//! hostile request values, and a Content-Security-Policy that matches what the page holds.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use scraper::{Html, Selector};
use sha2::{Digest, Sha256};
use signpost_challenge::{
    Difficulty, Lang, PageInput, SCRIPT, STYLE, VERIFY_PATH, WAIT_PATH, WORKER, render,
};

const HOSTILE_HOST: &str = "\"><script>alert('host')</script>";
const HOSTILE_TARGET: &str = "/search?q=\"><script>alert(1)</script>&x='onmouseover='alert(2)";
const TOKEN: &str =
    "AQIAAAAAa3n3AAQBAQEBAQEBAQEBAQEBAQEBrb4y1oZ3nZ5h4V9mvKq6n0bH0tq8X6l5Hp2a3m9T1y0";

fn input(lang: Lang) -> PageInput<'static> {
    PageInput {
        lang,
        host: HOSTILE_HOST,
        branding: "<b>Shop</b> & Co",
        footer: "Served by signpost </footer>",
        ray_id: "8f2c1a<i>",
        token: TOKEN,
        difficulty: Difficulty::DEFAULT,
        return_to: HOSTILE_TARGET,
        body_not_resent: false,
        fallback_delay_secs: 10,
    }
}

fn select<'a>(doc: &'a Html, css: &str) -> Vec<scraper::ElementRef<'a>> {
    doc.select(&Selector::parse(css).unwrap()).collect()
}

fn text(el: &scraper::ElementRef<'_>) -> String {
    el.text().collect()
}

#[test]
fn the_page_is_whole_accessible_and_escapes_what_the_request_sent() {
    let page = render(&input(Lang::En));
    let doc = Html::parse_document(&page.html);
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);

    assert_eq!(select(&doc, "html")[0].attr("lang"), Some("en"));
    assert_eq!(page.content_language, "en");
    let h1 = select(&doc, "h1");
    assert_eq!(h1.len(), 1);
    assert_eq!(
        text(&h1[0]),
        format!("Checking your connection to {HOSTILE_HOST}"),
        "the host is text, not markup"
    );
    assert_eq!(text(&select(&doc, ".brand")[0]), "<b>Shop</b> & Co");
    assert_eq!(text(&select(&doc, "footer code")[0]), "8f2c1a<i>");
    assert!(text(&select(&doc, "footer")[0]).contains("Served by signpost </footer>"));

    // Exactly the page's two scripts: the worker's source (not run) and the constant script.
    let scripts = select(&doc, "script");
    assert_eq!(scripts.len(), 2);
    assert_eq!(scripts[0].attr("type"), Some("text/plain"));
    assert_eq!(scripts[0].attr("id"), Some("challenge-worker"));
    assert_eq!(text(&scripts[0]), WORKER);
    assert_eq!(scripts[1].attr("type"), None);
    assert_eq!(text(&scripts[1]), SCRIPT);
    // Nothing from elsewhere, no event handler attributes.
    assert!(select(&doc, "[src], link, img, iframe, object, embed, base").is_empty());
    for el in select(&doc, "*") {
        for (name, _) in el.value().attrs() {
            assert!(!name.starts_with("on"), "{name} on {}", el.value().name());
        }
    }

    // The live region, and the form the script fills in.
    let status = select(&doc, "#challenge-status");
    assert_eq!(status[0].attr("role"), Some("status"));
    assert_eq!(status[0].attr("aria-live"), Some("polite"));
    let form = select(&doc, "form#challenge-form")[0];
    assert_eq!(form.attr("method"), Some("post"));
    assert_eq!(form.attr("action"), Some(VERIFY_PATH));
    assert_eq!(form.attr("data-difficulty"), Some("4"));
    assert_eq!(
        form.attr("data-progress"),
        Some("Still working: {n} tries so far.")
    );
    let field = |name: &str| {
        select(&doc, &format!("form input[type=hidden][name={name}]"))[0]
            .attr("value")
            .map(str::to_owned)
    };
    assert_eq!(field("token").as_deref(), Some(TOKEN));
    assert_eq!(field("nonce").as_deref(), Some(""));
    assert_eq!(field("return").as_deref(), Some(HOSTILE_TARGET));

    // The fallback: hidden until the script gives up, a link to the wait endpoint.
    let fallback = select(&doc, "#challenge-fallback")[0];
    assert!(fallback.attr("hidden").is_some());
    let link = select(&doc, "#challenge-fallback a")[0]
        .attr("href")
        .unwrap();
    assert!(link.starts_with(&format!(
        "{WAIT_PATH}?token={TOKEN}&return=%2Fsearch%3Fq%3D%22%3E%3Cscript"
    )));
    assert!(!link.contains(['"', '<', '>', '\'', ' ']));
    assert!(text(&fallback).contains("wait 10 seconds"));

    // <noscript> (read as text by a scripting parser): a timed refresh to the same link and the
    // link itself, a second later than the fallback opens.
    let noscript: Vec<String> = select(&doc, "noscript").iter().map(text).collect();
    assert_eq!(noscript.len(), 2);
    let head = Html::parse_fragment(&noscript[0]);
    let refresh = select(&head, "meta[http-equiv=refresh]")[0]
        .attr("content")
        .unwrap()
        .to_owned();
    assert_eq!(refresh, format!("11; url={link}"));
    let body = Html::parse_fragment(&noscript[1]);
    assert_eq!(select(&body, "a")[0].attr("href"), Some(link));
    assert!(text(&select(&body, "p")[0]).contains("in 10 seconds"));

    // Not a form post: no notice about a body.
    assert!(select(&doc, ".notice").is_empty());
}

#[test]
fn the_policy_allows_exactly_the_page_s_script_style_and_blob_workers() {
    let page = render(&input(Lang::En));
    let doc = Html::parse_document(&page.html);
    let hash = |s: &str| format!("'sha256-{}'", STANDARD.encode(Sha256::digest(s.as_bytes())));
    let script = text(&select(&doc, "script:not([type])")[0]);
    let style = text(&select(&doc, "style")[0]);
    assert_eq!(style, STYLE);
    let csp = page.content_security_policy;
    let directives: Vec<&str> = csp.split("; ").collect();
    assert_eq!(
        directives,
        [
            "default-src 'none'",
            &format!("script-src {}", hash(&script)),
            &format!("style-src {}", hash(&style)),
            "worker-src blob:",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ]
    );
}

#[test]
fn the_page_speaks_the_chosen_language_and_warns_about_an_unsent_body() {
    for (lang, heading) in [
        (Lang::Fr, "Vérification de votre connexion à"),
        (Lang::De, "Ihre Verbindung zu"),
    ] {
        let page = render(&PageInput {
            body_not_resent: true,
            ..input(lang)
        });
        let doc = Html::parse_document(&page.html);
        assert_eq!(select(&doc, "html")[0].attr("lang"), Some(lang.tag()));
        assert!(text(&select(&doc, "h1")[0]).starts_with(heading));
        assert_eq!(text(&select(&doc, ".notice")[0]), lang.strings().resend);
        assert_eq!(
            select(&doc, "form")[0].attr("data-solved"),
            Some(lang.strings().solved)
        );
    }
}

#[test]
fn an_unsafe_return_target_returns_to_the_root() {
    for target in [
        "//evil.example/",
        "https://evil.example/",
        "/\\evil.example",
        "",
    ] {
        let page = render(&PageInput {
            return_to: target,
            ..input(Lang::En)
        });
        let doc = Html::parse_document(&page.html);
        let value = select(&doc, "input[name=return]")[0].attr("value");
        assert_eq!(value, Some("/"), "{target:?}");
        assert!(!page.html.contains("evil.example"), "{target:?}");
    }
}
