//! The pages for people through the running edge: a refusal's page follows `Accept-Language`
//! (English, French, German) and says why (the country of a 1009, the class of a 1010 or a
//! 1020); a zone that fixes its language answers in it whatever the client asks; agents keep the
//! contract's English JSON. Read back with scraper and serde_json.

use scraper::{Html, Selector};
use serde_json::Value;

use crate::support::*;

/// A browser's `Accept`.
const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// The edge under a policy that refuses by country (SE), browser (empty or `sqlmap`) and a
/// custom rule (`/wp-admin`), with two zones: `example.com` follows Accept-Language,
/// `boutique.test` fixes French. Keep the returned directory alive: it holds the databases.
fn edge() -> (EchoOrigin, Edge, Scratch) {
    let origin = EchoOrigin::start();
    let dbs = Scratch::new("pages-geo");
    let (country, asn) = geo_databases(&dbs.0);
    let o = origin.addr.to_string();
    let edge = Edge::start(
        "pages",
        |listen, admin| {
            format!(
                r#"listen = ["{listen}"]
admin = "{admin}"

[client_ip]
trusted_proxies = ["127.0.0.1/32"]

[geo]
country_db = "{country}"
asn_db = "{asn}"

[[access_rule]]
id = "no-se"
action = "block"
country = ["SE"]

[browser_check]
id = "browsers"
block_empty_user_agent = true
block_user_agents = ["(?i)sqlmap"]

[[custom_rule]]
id = "wordpress"
action = "block"
expression = 'http.request.uri.path eq "/wp-admin"'

[[zone]]
name = "shop"
hosts = ["example.com"]
origin = "{o}"

[[zone]]
name = "boutique"
hosts = ["boutique.test"]
origin = "{o}"
language = "fr"
"#,
                country = country.display(),
                asn = asn.display(),
            )
        },
        &[],
    );
    (origin, edge, dbs)
}

/// One answer: status, headers, body.
struct Got {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The members of the `Vary` list, as a cache reads them.
    fn vary(&self) -> Vec<String> {
        self.headers
            .get_all("vary")
            .iter()
            .flat_map(|v| v.to_str().unwrap().split(','))
            .map(|m| m.trim().to_ascii_lowercase())
            .collect()
    }

    fn page(&self) -> Html {
        Html::parse_document(&self.body)
    }

    /// The text of the first element `selector` picks.
    fn text(&self, selector: &str) -> Option<String> {
        self.page()
            .select(&Selector::parse(selector).unwrap())
            .next()
            .map(|e| e.text().collect())
    }
}

/// GET `path` on `host`, as if from `client` (through the trusted proxy), with `headers`.
fn get(edge: &Edge, host: &str, path: &str, client: &str, headers: &[(&str, &str)]) -> Got {
    let http = reqwest::blocking::Client::builder()
        .resolve(host, edge.addr)
        .build()
        .unwrap();
    let mut request = http
        .get(format!("http://{host}:{}{path}", edge.addr.port()))
        .header("x-forwarded-for", client);
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
    {
        request = request.header("user-agent", "Mozilla/5.0 (X11; Linux x86_64) e2e");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().unwrap();
    Got {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().unwrap(),
    }
}

/// A refusal's page in each language the client can ask for, with the contract's facts and the
/// cause; the same request from an agent gets the contract's English JSON, unchanged.
#[test]
fn a_refusal_page_follows_accept_language() {
    let (_origin, edge, _dbs) = edge();
    let anyone = "192.0.2.10";
    let cases = [
        (
            None,
            "en",
            "Access denied",
            "A firewall rule set by the site owner matched this request.",
        ),
        (
            Some("fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7"),
            "fr",
            "Accès refusé",
            "Une règle de pare-feu définie par le propriétaire du site s’applique à cette requête.",
        ),
        (
            Some("de-DE,de;q=0.9,en;q=0.5"),
            "de",
            "Zugriff verweigert",
            "Eine Firewall-Regel des Website-Betreibers trifft auf diese Anfrage zu.",
        ),
        (
            Some("ja, zh;q=0.5"),
            "en",
            "Access denied",
            "A firewall rule",
        ),
    ];
    for (accept_language, tag, h1, reason) in cases {
        let mut headers = vec![("accept", BROWSER)];
        headers.extend(accept_language.map(|l| ("accept-language", l)));
        let got = get(&edge, "example.com", "/wp-admin", anyone, &headers);
        let what = format!("{accept_language:?}");
        assert_eq!(got.status, 403, "{what}");
        assert_eq!(got.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(got.header("content-language"), Some(tag), "{what}");
        assert!(
            got.vary().contains(&"accept-language".to_string()),
            "{what}: {:?}",
            got.vary()
        );
        assert!(got.vary().contains(&"accept".to_string()), "{what}");
        let lang = got
            .page()
            .select(&Selector::parse("html").unwrap())
            .next()
            .and_then(|h| h.value().attr("lang").map(str::to_owned));
        assert_eq!(lang.as_deref(), Some(tag), "{what}");
        assert_eq!(got.text("main h1").as_deref(), Some(h1), "{what}");
        assert!(got.text("title").unwrap().contains("1020"), "{what}");
        let shown_reason = got
            .text("section[aria-labelledby=happened] p.reason")
            .unwrap();
        assert!(shown_reason.starts_with(reason), "{what}: {shown_reason}");
        let ray = got.header("cf-ray").unwrap().to_owned();
        assert_eq!(got.text("dd.ray-id"), Some(ray), "{what}");
        assert_eq!(got.text("dd.zone").as_deref(), Some("example.com"));
        let todo = got.text("section[aria-labelledby=todo] p").unwrap();
        assert!(!todo.contains("Do not retry"), "{what}: {todo}");
    }

    // An agent asking in French still gets the contract's JSON, in English, unchanged.
    let got = get(
        &edge,
        "example.com",
        "/wp-admin",
        anyone,
        &[("accept", "application/json"), ("accept-language", "fr")],
    );
    assert_eq!(got.status, 403);
    assert_eq!(got.header("content-language"), None);
    assert_eq!(got.vary(), ["accept"]);
    let problem: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(problem["error_code"], 1020);
    assert_eq!(
        problem["what_you_should_do"],
        "**Do not retry.** This block is intentional. Contact the site owner if you believe this is an error."
    );
    assert_eq!(
        problem["detail"],
        "The request was blocked by a firewall rule configured by the site owner."
    );
}

/// 1009, 1010 and 1020 no longer read alike: each page says what the edge knows of the cause.
#[test]
fn refusals_say_why_in_the_readers_language() {
    let (_origin, edge, _dbs) = edge();
    let page = |client: &str, path: &str, ua: &str, language: &str| {
        let got = get(
            &edge,
            "example.com",
            path,
            client,
            &[
                ("accept", BROWSER),
                ("accept-language", language),
                ("user-agent", ua),
            ],
        );
        let code: String = got
            .text("main .code")
            .unwrap()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        (got.status, code, got.text("p.reason"))
    };
    let browser = "Mozilla/5.0 (X11; Linux x86_64) e2e";
    // 89.160.20.112 is in Sweden in the test's database.
    assert_eq!(
        page("89.160.20.112", "/", browser, "de"),
        (
            403,
            "1009".into(),
            Some("Ihre Verbindung scheint aus folgendem Land zu kommen: Schweden (SE).".into())
        )
    );
    assert_eq!(
        page("89.160.20.112", "/", browser, "en"),
        (
            403,
            "1009".into(),
            Some("Your connection appears to come from Sweden (SE).".into())
        )
    );
    let (status, code, listed) = page("192.0.2.10", "/", "sqlmap/1.7", "en");
    assert_eq!((status, code.as_str()), (403, "1010"));
    assert_eq!(
        listed.as_deref(),
        Some(
            "The site blocks the program this request came from, as that program named itself (its User-Agent)."
        )
    );
    let (status, code, empty) = page("192.0.2.10", "/", "", "fr");
    assert_eq!((status, code.as_str()), (403, "1010"));
    assert!(
        empty
            .as_deref()
            .unwrap()
            .contains("aucun en-tête User-Agent"),
        "{empty:?}"
    );
    let (_, code, rule) = page("192.0.2.10", "/wp-admin", browser, "en");
    assert_eq!(code, "1020");
    assert_ne!(rule, listed);
    // The error test endpoint shows what a refusal looks like, but nothing refused: no cause.
    let (status, code, none) = page("89.160.20.112", "/cdn-cgi/error/1009", browser, "en");
    assert_eq!((status, code.as_str(), none), (403, "1009", None));
}

/// A zone that fixes its language answers in it whatever the client asks, and does not vary on
/// Accept-Language; the zone beside it still negotiates.
#[test]
fn a_zone_fixes_the_language_of_its_pages() {
    let (_origin, edge, _dbs) = edge();
    for path in ["/wp-admin", "/cdn-cgi/error/522"] {
        for asked in ["de", "en-US,en;q=0.9", ""] {
            let got = get(
                &edge,
                "boutique.test",
                path,
                "192.0.2.10",
                &[("accept", BROWSER), ("accept-language", asked)],
            );
            let what = format!("{path} {asked:?}");
            assert_eq!(got.header("content-language"), Some("fr"), "{what}");
            assert!(
                !got.vary().contains(&"accept-language".to_string()),
                "{what}: {:?}",
                got.vary()
            );
            let code = got.text("main .code").unwrap();
            assert!(code.starts_with("Erreur "), "{what}: {code}");
            assert_eq!(
                got.text("section[aria-labelledby=todo] h2").as_deref(),
                Some("Que pouvez-vous faire\u{a0}?"),
                "{what}"
            );
        }
    }
    let got = get(
        &edge,
        "boutique.test",
        "/cdn-cgi/error/522",
        "192.0.2.10",
        &[("accept", BROWSER)],
    );
    assert_eq!(got.status, 522);
    assert_eq!(got.header("retry-after"), Some("120"));
    assert_eq!(
        got.text("main h1").as_deref(),
        Some("Délai de connexion dépassé")
    );
    // The other zone negotiates.
    let got = get(
        &edge,
        "example.com",
        "/cdn-cgi/error/522",
        "192.0.2.10",
        &[("accept", BROWSER), ("accept-language", "de")],
    );
    assert_eq!(got.header("content-language"), Some("de"));
    assert_eq!(
        got.text("main h1").as_deref(),
        Some("Zeitüberschreitung beim Verbindungsaufbau")
    );
}
