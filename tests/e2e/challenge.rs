//! Challenges through the running edge: a browser gets the page, solves its proof of work as the
//! page does (SHA-256 of the token and a decimal nonce, in Rust here), is sent back with a
//! clearance and passes; a clearance from another address prefix or User-Agent, tampered,
//! expired, or signed by a key rotated out is challenged again, one signed by the previous key
//! during a rotation passes; agents get the negotiated problem with `cf-mitigated` and
//! `Accept-Signature`, never the page; a signed agent from a real key directory passes, its
//! first request waiting for the directory; feeds and robots.txt pass; the no-JavaScript
//! fallback; a flood of bad answers is served without state.

use scraper::{Html, Selector};
use sha2::{Digest, Sha256};
use signpost_challenge::{Difficulty, Key, KeyRing, Method, Settings, Visitor};

use crate::signing::{Directory, Signer, now, to_map};
use crate::support::{Edge, Scratch, admin_get, client, echo_edge, frontmatter, metric, policy};

const CURRENT: &str = "c2b1f0b3a1d4e5f60718293a4b5c6d7e8f9012345678abcdef0123456789abcd";
const PREVIOUS: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A policy that challenges every request to `/app/*` at difficulty 2 (quick to solve here),
/// trusting the test's `X-Forwarded-For` for the client address; `keys` the `[challenge]` keys.
fn top(keys: &Scratch, list: &[(u8, &str)], extra: &str) -> String {
    let keys_list: Vec<String> = list
        .iter()
        .map(|(id, secret)| {
            let path = keys.write(&format!("key-{id}"), &format!("{secret}\n"));
            format!(
                "{{ id = {id}, secret_file = {:?} }}",
                path.display().to_string()
            )
        })
        .collect();
    format!(
        r#"[client_ip]
trusted_proxies = ["127.0.0.1/32"]

[challenge]
keys = [{}]

[[custom_rule]]
id = "app-challenge"
action = "challenge"
difficulty = 2
expression = 'starts_with(http.request.uri.path, "/app") or http.request.uri.path in {{"/feed" "/robots.txt"}}'
{extra}
"#,
        keys_list.join(", ")
    )
}

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140";
const CLIENT: &str = "198.51.100.7";

fn get(
    c: &reqwest::blocking::Client,
    edge: &Edge,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::blocking::Response {
    let mut r = c.get(edge.url(path));
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    r.send().unwrap()
}

/// The page's form: token, difficulty, return path.
fn form_of(html: &str) -> (String, u8, String) {
    let doc = Html::parse_document(html);
    let form = doc
        .select(&Selector::parse("form#challenge-form").unwrap())
        .next()
        .expect("the page has the challenge form");
    assert_eq!(
        form.value().attr("action"),
        Some("/cdn-cgi/challenge/verify")
    );
    let difficulty: u8 = form
        .value()
        .attr("data-difficulty")
        .unwrap()
        .parse()
        .unwrap();
    let field = |name: &str| {
        form.select(&Selector::parse(&format!("input[name={name}]")).unwrap())
            .next()
            .and_then(|i| i.value().attr("value"))
            .unwrap()
            .to_owned()
    };
    (field("token"), difficulty, field("return"))
}

/// The page's search: the first decimal nonce whose hex SHA-256 of token ‖ nonce starts with
/// `difficulty` zeros.
fn solve(token: &str, difficulty: u8) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            let hex: String = Sha256::digest(format!("{token}{n}"))
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            hex.starts_with(&"0".repeat(usize::from(difficulty)))
        })
        .unwrap()
}

fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Challenged at `path` as a browser from `ip` with `ua`, solves, and returns the cookie pair
/// (`signpost_clearance=...`).
fn clear(c: &reqwest::blocking::Client, edge: &Edge, path: &str, ip: &str, ua: &str) -> String {
    let page = get(
        c,
        edge,
        path,
        &[
            ("accept", "text/html"),
            ("x-forwarded-for", ip),
            ("user-agent", ua),
        ],
    );
    assert_eq!(page.status(), 403);
    let (token, difficulty, return_to) = form_of(&page.text().unwrap());
    assert_eq!(difficulty, 2);
    assert_eq!(return_to, path);
    let nonce = solve(&token, difficulty);
    let redeemed = c
        .post(edge.url("/cdn-cgi/challenge/verify"))
        .header("x-forwarded-for", ip)
        .header("user-agent", ua)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "token={}&nonce={nonce}&return={}",
            encode(&token),
            encode(&return_to)
        ))
        .send()
        .unwrap();
    assert_eq!(
        redeemed.status(),
        303,
        "{}",
        redeemed.text().unwrap_or_default()
    );
    assert_eq!(redeemed.headers()["location"], path);
    let set_cookie = redeemed.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"));
    set_cookie.split(';').next().unwrap().to_owned()
}

fn passes(c: &reqwest::blocking::Client, edge: &Edge, cookie: &str, ip: &str, ua: &str) -> u16 {
    get(
        c,
        edge,
        "/app/cart",
        &[
            ("accept", "text/html"),
            ("x-forwarded-for", ip),
            ("user-agent", ua),
            ("cookie", cookie),
        ],
    )
    .status()
    .as_u16()
}

#[test]
fn a_browser_is_challenged_solves_and_passes_and_its_clearance_stays_its_own() {
    let keys = Scratch::new("challenge-keys");
    let (origin, edge) = echo_edge(
        "challenge-browser",
        &top(&keys, &[(2, CURRENT)], ""),
        "",
        &[],
    );
    let c = client(&edge);

    // The page: 403, the headers of a challenge, in the visitor's language.
    let page = get(
        &c,
        &edge,
        "/app/cart?item=3",
        &[
            ("accept", "text/html"),
            ("accept-language", "fr-CH, en;q=0.5"),
            ("x-forwarded-for", CLIENT),
            ("user-agent", BROWSER),
        ],
    );
    assert_eq!(page.status(), 403);
    let h = page.headers().clone();
    assert_eq!(h["cf-mitigated"], "challenge");
    assert_eq!(h["content-language"], "fr");
    assert_eq!(h["vary"], "Accept, Accept-Language");
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("worker-src blob:")
    );
    assert!(h.contains_key("cf-ray"));
    let html = page.text().unwrap();
    let doc = Html::parse_document(&html);
    assert_eq!(
        doc.select(&Selector::parse("html").unwrap())
            .next()
            .unwrap()
            .value()
            .attr("lang"),
        Some("fr")
    );
    let (_, _, return_to) = form_of(&html);
    assert_eq!(return_to, "/app/cart?item=3");
    assert_eq!(origin.received(), 0, "the origin saw a challenged request");

    // Solved: the cookie passes, to the origin.
    let cookie = clear(&c, &edge, "/app/cart", CLIENT, BROWSER);
    assert_eq!(passes(&c, &edge, &cookie, CLIENT, BROWSER), 200);
    assert_eq!(origin.received(), 1);
    // Another address in the same /24 keeps it (carrier-grade NAT, roaming).
    assert_eq!(passes(&c, &edge, &cookie, "198.51.100.200", BROWSER), 200);
    // Another /24, another User-Agent, a tampered value: challenged again.
    assert_eq!(passes(&c, &edge, &cookie, "203.0.113.7", BROWSER), 403);
    assert_eq!(passes(&c, &edge, &cookie, CLIENT, "curl/8.0"), 403);
    let mut tampered = cookie.clone().into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(passes(&c, &edge, &tampered, CLIENT, BROWSER), 403);
    // Expired: signed with the zone's key, two hours ago.
    let ring = KeyRing::new(Key::new(2, CURRENT.as_bytes()).unwrap(), None).unwrap();
    let visitor = Visitor {
        zone: "test",
        addr: CLIENT.parse().unwrap(),
        user_agent: BROWSER.as_bytes(),
    };
    let d2 = Difficulty::new(2).unwrap();
    let settings = Settings::default();
    let expired = ring.issue_clearance(&visitor, &settings, d2, Method::Work, now() - 7200);
    let fresh = ring.issue_clearance(&visitor, &settings, d2, Method::Work, now());
    let pair = |v: &str| format!("signpost_clearance={v}");
    assert_eq!(
        passes(&c, &edge, &pair(&expired.value), CLIENT, BROWSER),
        403
    );
    assert_eq!(passes(&c, &edge, &pair(&fresh.value), CLIENT, BROWSER), 200);
    // Earned at a lower difficulty than the rule asks: challenged.
    let low = ring.issue_clearance(
        &visitor,
        &settings,
        Difficulty::new(1).unwrap(),
        Method::Work,
        now(),
    );
    assert_eq!(passes(&c, &edge, &pair(&low.value), CLIENT, BROWSER), 403);
    // A path no rule challenges never reads the cookie.
    assert_eq!(
        get(&c, &edge, "/about", &[("accept", "text/html")]).status(),
        200
    );

    let (_, metrics) = admin_get(&edge, "/metrics");
    let m = |name: &str, labels: &[(&str, &str)]| metric(&metrics, name, labels).unwrap_or(0.0);
    assert_eq!(
        m(
            "signpost_challenges_solved_total",
            &[("zone", "test"), ("method", "work")]
        ),
        1.0
    );
    assert_eq!(
        m(
            "signpost_challenges_bypassed_total",
            &[
                ("zone", "test"),
                ("rule", "app-challenge"),
                ("reason", "cleared")
            ]
        ),
        3.0
    );
    assert!(
        m(
            "signpost_challenges_issued_total",
            &[("rule", "app-challenge"), ("answer", "page")]
        ) >= 7.0
    );
    assert!(
        edge.log().contains("challenge=\"cleared\"") || edge.log().contains("challenge=cleared")
    );
}

#[test]
fn during_a_rotation_the_previous_key_still_clears_and_a_dropped_one_does_not() {
    let keys = Scratch::new("challenge-rotation-keys");
    let (_origin, edge) = echo_edge(
        "challenge-rotation",
        &top(&keys, &[(2, CURRENT), (1, PREVIOUS)], ""),
        "",
        &[],
    );
    let c = client(&edge);
    let visitor = Visitor {
        zone: "test",
        addr: CLIENT.parse().unwrap(),
        user_agent: BROWSER.as_bytes(),
    };
    let d2 = Difficulty::new(2).unwrap();
    let old = KeyRing::new(Key::new(1, PREVIOUS.as_bytes()).unwrap(), None).unwrap();
    let by_old = old.issue_clearance(&visitor, &Settings::default(), d2, Method::Work, now());
    let cookie = format!("signpost_clearance={}", by_old.value);
    assert_eq!(passes(&c, &edge, &cookie, CLIENT, BROWSER), 200);
    // A key the ring no longer holds (id 3): challenged again.
    let gone = KeyRing::new(Key::new(3, PREVIOUS.as_bytes()).unwrap(), None).unwrap();
    let by_gone = gone.issue_clearance(&visitor, &Settings::default(), d2, Method::Work, now());
    assert_eq!(
        passes(
            &c,
            &edge,
            &format!("signpost_clearance={}", by_gone.value),
            CLIENT,
            BROWSER
        ),
        403
    );
}

#[test]
fn agents_get_the_problem_with_accept_signature_never_the_page() {
    let keys = Scratch::new("challenge-agent-keys");
    let (_origin, edge) = echo_edge(
        "challenge-agents",
        &top(&keys, &[(2, CURRENT)], ""),
        "",
        &[],
    );
    let c = client(&edge);
    for accept in ["application/json", "application/problem+json"] {
        let r = get(&c, &edge, "/app/data", &[("accept", accept)]);
        assert_eq!(r.status(), 403);
        assert_eq!(r.headers()["cf-mitigated"], "challenge");
        let sig = r.headers()["accept-signature"].to_str().unwrap().to_owned();
        assert!(
            sig.contains("tag=\"web-bot-auth\"") && sig.contains("\"@authority\""),
            "{sig}"
        );
        let body: serde_json::Value = serde_json::from_str(&r.text().unwrap()).unwrap();
        assert_eq!(body["error_name"], "challenge_required", "{body}");
        assert_eq!(body["status"], 403);
    }
    let r = get(&c, &edge, "/app/data", &[("accept", "text/markdown")]);
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["cf-mitigated"], "challenge");
    assert!(r.headers().contains_key("accept-signature"));
    let (yaml, body) = frontmatter(&r.text().unwrap());
    assert_eq!(yaml["error_name"].as_str(), Some("challenge_required"));
    assert!(body.contains("Web Bot Auth"));
}

#[test]
fn feeds_and_robots_txt_pass_a_rule_that_names_them() {
    let keys = Scratch::new("challenge-exempt-keys");
    let (_origin, edge) = echo_edge(
        "challenge-exempt",
        &top(&keys, &[(2, CURRENT)], ""),
        "",
        &[],
    );
    let c = client(&edge);
    for path in [
        "/feed",
        "/robots.txt",
        "/app/feed/",
        "/app/posts.rss",
        "/app/.well-known/x",
    ] {
        let r = get(
            &c,
            &edge,
            path,
            &[("accept", "text/html"), ("user-agent", "miniflux")],
        );
        // `/app/.well-known/x` is not under `/.well-known/`: challenged.
        let want = if path == "/app/.well-known/x" {
            403
        } else {
            200
        };
        assert_eq!(r.status(), want, "{path}");
    }
    let (_, metrics) = admin_get(&edge, "/metrics");
    assert_eq!(
        metric(
            &metrics,
            "signpost_challenges_bypassed_total",
            &[("reason", "exempt")]
        ),
        Some(4.0)
    );
}

#[test]
fn without_javascript_the_wait_fallback_clears_and_too_early_keeps_the_token() {
    let keys = Scratch::new("challenge-wait-keys");
    let (_origin, edge) = echo_edge("challenge-wait", &top(&keys, &[(2, CURRENT)], ""), "", &[]);
    let c = client(&edge);
    let headers = [
        ("accept", "text/html"),
        ("x-forwarded-for", CLIENT),
        ("user-agent", BROWSER),
    ];
    let page = get(&c, &edge, "/app/x", &headers).text().unwrap();
    let doc = Html::parse_document(&page);
    // The fallback's link, as the page gives it to a browser without JavaScript.
    let link = doc
        .select(&Selector::parse("noscript a").unwrap())
        .chain(doc.select(&Selector::parse("#challenge-fallback a").unwrap()))
        .filter_map(|a| a.value().attr("href"))
        .next()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            // `<noscript>` content is text to a parser with scripting on: read it from the
            // fallback paragraph instead.
            panic!("no fallback link in the page")
        });
    assert!(link.starts_with("/cdn-cgi/challenge/wait?token="), "{link}");
    // Too early: the page again, with the same token.
    let early = get(&c, &edge, &link, &headers);
    assert_eq!(early.status(), 403);
    let (token, _, _) = form_of(&early.text().unwrap());
    assert!(link.contains(&encode(&token)) || link.contains(&token));
    // A token issued long enough ago (signed with the zone's key, as the edge would have):
    // redeemed by waiting.
    let ring = KeyRing::new(Key::new(2, CURRENT.as_bytes()).unwrap(), None).unwrap();
    let visitor = Visitor {
        zone: "test",
        addr: CLIENT.parse().unwrap(),
        user_agent: BROWSER.as_bytes(),
    };
    let old = ring.issue_challenge(
        &visitor,
        &Settings::default(),
        Difficulty::new(2).unwrap(),
        now() - 20,
        [9; 16],
    );
    let waited = get(
        &c,
        &edge,
        &format!(
            "/cdn-cgi/challenge/wait?token={}&return=%2Fapp%2Fx",
            encode(&old)
        ),
        &headers,
    );
    assert_eq!(waited.status(), 303);
    assert_eq!(waited.headers()["location"], "/app/x");
    let cookie = waited.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    assert_eq!(passes(&c, &edge, &cookie, CLIENT, BROWSER), 200);
    let (_, metrics) = admin_get(&edge, "/metrics");
    assert_eq!(
        metric(
            &metrics,
            "signpost_challenges_solved_total",
            &[("method", "wait")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_flood_of_bad_answers_is_answered_with_the_page_and_costs_no_state() {
    let keys = Scratch::new("challenge-flood-keys");
    let (origin, edge) = echo_edge("challenge-flood", &top(&keys, &[(2, CURRENT)], ""), "", &[]);
    let c = client(&edge);
    let page = get(&c, &edge, "/app/x", &[("accept", "text/html")])
        .text()
        .unwrap();
    let (token, _, _) = form_of(&page);
    const N: usize = 300;
    for i in 0..N {
        let body = match i % 3 {
            0 => format!("token={}&nonce=1{i}&return=%2F", encode(&token)),
            1 => format!("token=garbage{i}&nonce=1"),
            _ => "x".repeat(9000),
        };
        let r = c
            .post(edge.url("/cdn-cgi/challenge/verify"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .unwrap();
        // A wrong answer may, rarely, meet difficulty 2 by chance: then it is a real solution.
        assert!(matches!(r.status().as_u16(), 403 | 303));
    }
    let (_, metrics) = admin_get(&edge, "/metrics");
    let failed = metric(
        &metrics,
        "signpost_challenges_failed_total",
        &[("zone", "test")],
    )
    .unwrap();
    assert!(failed >= (N - 5) as f64, "{failed}");
    // Normal clients are still served.
    assert_eq!(get(&c, &edge, "/about", &[]).status(), 200);
    assert!(origin.received() >= 1);
}

#[test]
fn a_signed_agent_from_a_real_key_directory_passes_on_its_first_request() {
    let scratch = Scratch::new("challenge-wba");
    let directory = Directory::start(&scratch);
    let signer = Signer::new(&directory.origin());
    directory.publish(&[&signer]);
    let cert = scratch.0.join("directory-cert.pem");
    let keys = Scratch::new("challenge-wba-keys");
    let bots = format!(
        "[bots]\nallow_private_fetch = true\ntrusted_roots = [{:?}]\n",
        cert.display().to_string()
    );
    let (origin, edge) = echo_edge(
        "challenge-wba-edge",
        &format!("{bots}{}", top(&keys, &[(2, CURRENT)], "")),
        "",
        &[],
    );
    let c = client(&edge);
    let authority = format!("example.com:{}", edge.addr.port());
    // The first signed request: the directory is fetched while it waits (at most 2 s), and the
    // verified agent passes the rule, which does not name verified clients.
    let headers = signer.headers(&authority, None, now(), 300);
    let r = c
        .get(edge.url("/app/data"))
        .headers(to_map(&headers))
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
    assert_eq!(origin.received(), 1);
    // Unsigned, the same request is challenged.
    let r = get(&c, &edge, "/app/data", &[("accept", "application/json")]);
    assert_eq!(r.status(), 403);
    let (_, metrics) = admin_get(&edge, "/metrics");
    assert_eq!(
        metric(
            &metrics,
            "signpost_challenges_bypassed_total",
            &[("reason", "verified")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_policy_that_challenges_without_keys_is_refused_in_place() {
    let scratch = Scratch::new("challenge-nokeys");
    let text = policy(
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
        "127.0.0.1:3",
        "[[custom_rule]]\nid = \"c\"\naction = \"challenge\"\nexpression = 'true'\n",
        "",
    );
    let path = scratch.write("policy.toml", &text);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("policy.toml:5:10: a challenge needs the keys"),
        "{err}"
    );
}

#[test]
fn signpost_test_asserts_challenge_outcomes() {
    let keys = Scratch::new("challenge-cases-keys");
    let scratch = Scratch::new("challenge-cases");
    let text = policy(
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
        "127.0.0.1:3",
        &top(&keys, &[(2, CURRENT)], ""),
        "",
    );
    let policy_path = scratch.write("policy.toml", &text);
    // A clearance of this client's, signed with the zone's key: the trace checks it.
    let ring = KeyRing::new(Key::new(2, CURRENT.as_bytes()).unwrap(), None).unwrap();
    let visitor = Visitor {
        zone: "test",
        addr: CLIENT.parse().unwrap(),
        user_agent: BROWSER.as_bytes(),
    };
    let cookie = ring.issue_clearance(
        &visitor,
        &Settings::default(),
        Difficulty::new(2).unwrap(),
        Method::Work,
        now(),
    );
    let cases = format!(
        r#"
[[case]]
name = "a browser is challenged"
url = "http://example.com/app/x"
headers = ["Accept: text/html"]
expect = {{ status = 403, verdict = "challenge", challenge = "issued", rule = "app-challenge" }}

[[case]]
name = "an agent is challenged too"
url = "http://example.com/app/x"
headers = ["Accept: application/json"]
expect = {{ status = 403, code = 403, verdict = "challenge", challenge = "issued" }}

[[case]]
name = "a cleared browser passes"
url = "http://example.com/app/x"
ip = "{CLIENT}"
headers = ["Accept: text/html", "User-Agent: {BROWSER}", "Cookie: a=1; signpost_clearance={}"]
expect = {{ proxied = true, verdict = "proxy", challenge = "cleared" }}

[[case]]
name = "robots.txt is exempt"
url = "http://example.com/robots.txt"
expect = {{ proxied = true, challenge = "exempt" }}

[[case]]
name = "other paths are not challenged"
url = "http://example.com/about"
expect = {{ proxied = true, challenge = "" }}

[[case]]
name = "this case fails: the path is challenged"
url = "http://example.com/app/y"
expect = {{ verdict = "proxy" }}
"#,
        cookie.value
    );
    let cases_path = scratch.write("cases.toml", &cases);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .arg("test")
        .arg("-c")
        .arg(&policy_path)
        .arg(&cases_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("5 passed, 1 failed"), "{stdout}");
    assert!(
        stdout.contains("verdict: expected \"proxy\", got \"challenge\""),
        "{stdout}"
    );
    // The JSON trace names the challenge and carries the page a browser would get.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(["trace", "--config"])
        .arg(&policy_path)
        .args([
            "--json",
            "--header",
            "Accept: text/html",
            "--url",
            "http://example.com/app/x",
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(json["verdict"], "challenge");
    assert_eq!(json["challenge"], "issued");
    assert_eq!(json["stopped_at"], "challenge_clearance");
    let body = json["response"]["body"].as_str().unwrap();
    let (_, difficulty, _) = form_of(body);
    assert_eq!(difficulty, 2);
}

#[test]
fn a_zone_under_attack_challenges_every_request_and_a_cleared_browser_passes() {
    let keys = Scratch::new("challenge-under-attack-keys");
    let (_origin, edge) = echo_edge(
        "challenge-under-attack",
        &top(&keys, &[(2, CURRENT)], ""),
        "[zone.challenge]\nunder_attack = true\ndifficulty = 2\n",
        &[],
    );
    let c = client(&edge);
    let browser = [
        ("accept", "text/html"),
        ("user-agent", BROWSER),
        ("x-forwarded-for", CLIENT),
    ];
    // A page no rule names: challenged all the same, the page for a browser.
    let r = get(&c, &edge, "/about", &browser);
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["cf-mitigated"], "challenge");
    // The problem for an agent.
    let r = get(
        &c,
        &edge,
        "/about",
        &[("accept", "application/json"), ("x-forwarded-for", CLIENT)],
    );
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["cf-mitigated"], "challenge");
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["error_name"], "challenge_required");
    // Exempt paths pass; a solved challenge clears the browser for the zone.
    assert_eq!(get(&c, &edge, "/robots.txt", &browser).status(), 200);
    let cookie = clear(&c, &edge, "/about", CLIENT, BROWSER);
    assert_eq!(passes(&c, &edge, &cookie, CLIENT, BROWSER), 200);
    let (_, metrics) = admin_get(&edge, "/metrics");
    assert!(
        metric(
            &metrics,
            "signpost_challenges_issued_total",
            &[("rule", "under_attack")]
        )
        .is_some_and(|n| n >= 2.0),
        "{metrics}"
    );
}
