//! `signpost trace` and `signpost test`: the real binary explains a decision phase by phase, as
//! text and as JSON, and runs test cases with the exit status a CI job branches on.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::*;

fn run(args: &[&OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn example() -> std::path::PathBuf {
    repo_root().join("config/example.toml")
}

/// `signpost trace --config <policy> <args>` as text; exit status 0 expected.
fn trace_text(policy: &Path, args: &[&str]) -> String {
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("trace"),
        OsStr::new("--config"),
        policy.as_os_str(),
    ];
    all.extend(args.iter().map(OsStr::new));
    let (code, stdout, stderr) = run(&all);
    assert_eq!(code, 0, "{stdout}{stderr}");
    stdout
}

/// `signpost trace --json --config <policy> <args>`, parsed.
fn trace_json_os(policy: &Path, args: &[OsString]) -> Value {
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("trace"),
        OsStr::new("--json"),
        OsStr::new("--config"),
        policy.as_os_str(),
    ];
    all.extend(args.iter().map(OsString::as_os_str));
    let (code, stdout, stderr) = run(&all);
    assert_eq!(code, 0, "{stdout}{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn trace_json(policy: &Path, args: &[&str]) -> Value {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    trace_json_os(policy, &args)
}

/// The step named `name` in a trace's `trace` list.
fn step<'a>(trace: &'a Value, name: &str) -> &'a Value {
    trace["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {trace:#}"))
}

/// The rule `id` considered by the phase `phase`.
fn rule<'a>(trace: &'a Value, phase: &str, id: &str) -> &'a Value {
    step(trace, phase)["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_name"] == id)
        .unwrap_or_else(|| panic!("no rule {id} in {phase}: {trace:#}"))
}

/// A refusal's JSON: the verdict, code, rule, the phase that stopped, and the response's status
/// and `cf-ray`, which is the body's `ray_id` when the body is JSON.
fn assert_refused(t: &Value, code: u64, status: u64, rule_id: Option<&str>, phase: &str) {
    assert_eq!(t["verdict"], "refuse", "{t:#}");
    assert_eq!(t["code"], code, "{t:#}");
    assert_eq!(t["status_code"], status, "{t:#}");
    assert_eq!(t["response"]["status"], status, "{t:#}");
    assert_eq!(t["response"]["proxied"], false);
    assert_eq!(t["stopped_at"], phase, "{t:#}");
    match rule_id {
        Some(id) => assert_eq!(t["rule_id"], id, "{t:#}"),
        None => assert!(t["rule_id"].is_null(), "{t:#}"),
    }
    let stopped = step(t, phase);
    assert_eq!(stopped["type"], "phase");
    assert_eq!(stopped["matched"], true);
    assert_eq!(stopped["action"], "block");
    assert_eq!(stopped["action_parameters"]["code"], code.to_string());
    // The phases after the one that stopped are listed, not run.
    let names: Vec<&str> = t["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_name"].as_str().unwrap())
        .collect();
    if let Some(at) = names.iter().position(|n| *n == phase) {
        for later in &t["trace"].as_array().unwrap()[at + 1..] {
            assert_eq!(later["matched"], false, "{later:#}");
            assert!(later["trace"].as_array().unwrap().is_empty(), "{later:#}");
        }
    }
}

#[test]
fn trace_of_a_request_that_passes_every_phase() {
    let t = trace_json(
        &example(),
        &[
            "--url",
            "http://www.example.com/products?page=2",
            "-H",
            "User-Agent: Mozilla/5.0",
            "--ip",
            "192.0.2.10",
        ],
    );
    assert_eq!(t["verdict"], "proxy");
    assert!(t["status_code"].is_null());
    assert!(t["code"].is_null());
    assert_eq!(t["zone"], "www");
    assert_eq!(t["origin"], "http://127.0.0.1:8000");
    assert_eq!(t["response"]["proxied"], true);
    assert_eq!(t["response"]["zone"], "www");
    assert!(t["stopped_at"].is_null());
    assert_eq!(t["request"]["client_ip"], "192.0.2.10");
    let names: Vec<&str> = t["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "head_limits",
            "error_page",
            "challenge_endpoint",
            "tls_sni",
            "host_routing",
            "identify",
            "access_rules",
            "browser_check",
            "hotlink",
            "legal_rules",
            "custom_rules",
            "crawl_control",
            "rate_limits",
            "challenge",
            "challenge_clearance",
            "zone_limits"
        ]
    );
    for s in t["trace"].as_array().unwrap() {
        assert_eq!(s["matched"], false, "{s:#}");
        assert_eq!(s["type"], "phase");
    }
    let route = rule(&t, "host_routing", "www");
    assert_eq!(route["matched"], true);
    assert_eq!(route["action"], "route");
    assert_eq!(
        route["action_parameters"]["origin"],
        "http://127.0.0.1:8000"
    );
    assert_eq!(
        step(&t, "host_routing")["fields"]["http.host"],
        "www.example.com"
    );
    // The custom rules each show their expression, the values they read, and no match.
    let wp = rule(&t, "custom_rules", "wordpress-probes");
    assert_eq!(wp["type"], "rule");
    assert_eq!(wp["matched"], false);
    assert_eq!(wp["action"], "block");
    assert!(
        wp["expression"]
            .as_str()
            .unwrap()
            .starts_with("http.request.uri.path matches")
    );
    assert_eq!(wp["fields"]["http.request.uri.path"], "/products");
    // Rate limits: the key the request is counted under and the count it would reach.
    let everyone = rule(&t, "rate_limits", "everyone");
    assert_eq!(everyone["matched"], true);
    assert_eq!(everyone["action"], "rate_limit");
    assert_eq!(everyone["action_parameters"]["key"], "ip.src=192.0.2.10");
    assert_eq!(everyone["action_parameters"]["count"], "1");
    assert_eq!(everyone["action_parameters"]["requests_per_period"], "300");
    assert_eq!(everyone["action_parameters"]["scope"], "instance");
    let login = rule(&t, "rate_limits", "login");
    assert_eq!(login["matched"], false);
    assert!(login["action_parameters"]["count"].is_null());

    let text = trace_text(
        &example(),
        &[
            "--url",
            "http://www.example.com/",
            "-H",
            "User-Agent: Mozilla/5.0",
        ],
    );
    assert!(text.contains("evaluation ran every step"), "{text}");
    assert!(
        text.contains("response: proxied to zone \"www\" at origin http://127.0.0.1:8000"),
        "{text}"
    );
    assert!(text.contains("key=\"ip.src=192.0.2.1\""), "{text}");
}

/// Each step that can refuse a request on its own refuses one in the trace: the head limits,
/// TLS, host routing, every rule phase and the zone's limits. (The rate limits refuse only a
/// request over a count, which a one-off trace does not reach: the admin `/trace` test below
/// traces one; `identify` refuses nothing, and `error_page` answers the test endpoint.)
#[test]
fn trace_of_a_request_refused_by_each_phase() {
    let ua = "User-Agent: Mozilla/5.0";
    let policy = example();
    // Head limits: CONNECT is never tunnelled, and a target over 16 KiB is 414.
    let t = trace_json(
        &policy,
        &["-X", "CONNECT", "--url", "http://example.com/", "-H", ua],
    );
    assert_refused(&t, 405, 405, None, "head_limits");
    let long = format!("http://example.com/{}", "a".repeat(16 * 1024));
    let t = trace_json(&policy, &["--url", &long, "-H", ua]);
    assert_refused(&t, 414, 414, None, "head_limits");
    // TLS: the Host is not the server the handshake named.
    let t = trace_json(
        &policy,
        &[
            "--url",
            "https://www.example.com/",
            "--sni",
            "api.example.com",
            "-H",
            ua,
        ],
    );
    assert_refused(&t, 1013, 403, None, "tls_sni");
    assert_eq!(step(&t, "tls_sni")["fields"]["tls.sni"], "api.example.com");
    // Host routing: no zone serves the host.
    let t = trace_json(&policy, &["--url", "http://other.org/", "-H", ua]);
    assert_refused(&t, 1001, 409, None, "host_routing");
    assert!(t["zone"].is_null());
    assert_eq!(rule(&t, "host_routing", "host_routing")["matched"], false);
    assert_eq!(step(&t, "host_routing")["fields"]["http.host"], "other.org");
    // Access: a listed address.
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/",
            "--ip",
            "198.51.100.70",
            "-H",
            ua,
        ],
    );
    assert_refused(&t, 1006, 403, Some("abusers"), "access_rules");
    let abusers = rule(&t, "access_rules", "abusers");
    assert_eq!(abusers["matched"], true);
    assert_eq!(abusers["action"], "block");
    assert!(
        abusers["expression"]
            .as_str()
            .unwrap()
            .contains("198.51.100.64/26")
    );
    assert_eq!(
        step(&t, "access_rules")["fields"]["ip.src"],
        "198.51.100.70"
    );
    assert_eq!(rule(&t, "access_rules", "office")["matched"], false);
    // Browser check: no User-Agent.
    let t = trace_json(&policy, &["--url", "http://example.com/"]);
    assert_refused(&t, 1010, 403, Some("browser-signature"), "browser_check");
    let b = rule(&t, "browser_check", "browser-signature");
    assert_eq!(b["matched"], true);
    assert_eq!(b["fields"]["http.user_agent"], "");
    // Hotlink.
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/img/cat.png",
            "-H",
            ua,
            "-H",
            "Referer: https://elsewhere.org/",
        ],
    );
    assert_refused(&t, 1011, 403, Some("hotlink"), "hotlink");
    assert_eq!(
        rule(&t, "hotlink", "hotlink")["fields"]["http.referer"],
        "https://elsewhere.org/"
    );
    // Legal.
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/media/disputed-video.mp4",
            "-H",
            ua,
        ],
    );
    assert_refused(&t, 1026, 451, Some("dmca-2026-0042"), "legal_rules");
    // Custom rules: the rules before the match are shown, the match decides.
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/wp-login.php",
            "-H",
            ua,
            "-H",
            "Accept: application/json",
        ],
    );
    // The rule's own response (`response = { status = 404, ... }`) is what the edge answers.
    assert_refused(&t, 1020, 404, Some("wordpress-probes"), "custom_rules");
    let custom: Vec<&str> = step(&t, "custom_rules")["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step_name"].as_str().unwrap())
        .collect();
    assert_eq!(custom, ["log-admin", "health-checks", "wordpress-probes"]);
    assert_eq!(
        rule(&t, "custom_rules", "wordpress-probes")["matched"],
        true
    );
    // The response is the one a client gets: negotiated JSON, its ray id in cf-ray.
    let headers = t["response"]["headers"].as_array().unwrap();
    let header = |name: &str| {
        headers
            .iter()
            .find(|h| h[0] == name)
            .map(|h| h[1].as_str().unwrap().to_owned())
    };
    assert_eq!(
        header("content-type").as_deref(),
        Some("application/json; charset=utf-8")
    );
    let body: Value = serde_json::from_str(t["response"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["error_code"], 1020);
    assert_eq!(body["zone"], "example.com");
    assert_eq!(
        Some(body["ray_id"].as_str().unwrap().to_owned()),
        header("cf-ray")
    );
    assert_eq!(
        header("content-length"),
        Some(t["response"]["body"].as_str().unwrap().len().to_string())
    );

    // Crawl control: a crawler the zone blocks, with the zone's `block_status`.
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/",
            "-H",
            "User-Agent: Mozilla/5.0 (compatible; Bytespider; spider-feedback@bytedance.com)",
        ],
    );
    assert_refused(&t, 1020, 402, None, "crawl_control");
    // The zone's limits: a declared body over `max_body_size`.
    let t = trace_json(
        &policy,
        &[
            "-X",
            "POST",
            "--url",
            "http://example.com/upload",
            "-H",
            ua,
            "-H",
            "Content-Length: 999999999999",
        ],
    );
    assert_refused(&t, 413, 413, None, "zone_limits");

    // Each refusal as text: where evaluation stopped, the deciding rule, the exact status line.
    let refusals: [(&[&str], &str, Option<&str>, &str); 7] = [
        (
            &[
                "--url",
                "https://www.example.com/",
                "--sni",
                "api.example.com",
                "-H",
                ua,
            ],
            "tls_sni",
            None,
            "HTTP/1.1 403 Forbidden",
        ),
        (
            &["--url", "http://other.org/", "-H", ua],
            "host_routing",
            None,
            "HTTP/1.1 409 Conflict",
        ),
        (
            &[
                "--url",
                "http://example.com/",
                "--ip",
                "198.51.100.70",
                "-H",
                ua,
            ],
            "access_rules",
            Some("abusers"),
            "HTTP/1.1 403 Forbidden",
        ),
        (
            &["--url", "http://example.com/"],
            "browser_check",
            Some("browser-signature"),
            "HTTP/1.1 403 Forbidden",
        ),
        (
            &[
                "--url",
                "http://example.com/a.png",
                "-H",
                ua,
                "-H",
                "Referer: https://elsewhere.org/",
            ],
            "hotlink",
            Some("hotlink"),
            "HTTP/1.1 403 Forbidden",
        ),
        (
            &[
                "--url",
                "http://example.com/media/disputed-video.mp4",
                "-H",
                ua,
            ],
            "legal_rules",
            Some("dmca-2026-0042"),
            "HTTP/1.1 451 Unavailable For Legal Reasons",
        ),
        (
            &["--url", "http://example.com/wp-admin/", "-H", ua],
            "custom_rules",
            Some("wordpress-probes"),
            "HTTP/1.1 404 Not Found",
        ),
    ];
    for (args, phase, rule_id, status_line) in refusals {
        let text = trace_text(&policy, args);
        assert!(
            text.contains(&format!("evaluation stopped at: {phase}")),
            "{text}"
        );
        assert!(text.contains(&format!("■ {phase}")), "{text}");
        if let Some(id) = rule_id {
            assert!(text.contains(&format!("deciding rule: \"{id}\"")), "{text}");
        }
        assert!(text.contains(status_line), "{status_line} in {text}");
    }

    // The same refusals as text: the phases in order, the rule, the exact response.
    let text = trace_text(
        &policy,
        &["--url", "http://example.com/wp-login.php", "-H", ua],
    );
    assert!(
        text.contains("evaluation stopped at: custom_rules"),
        "{text}"
    );
    assert!(
        text.contains("deciding rule: \"wordpress-probes\""),
        "{text}"
    );
    assert!(
        text.contains("✓ block \"wordpress-probes\": the expression matches"),
        "{text}"
    );
    // The rule's own response answers: 404, as the edge would.
    assert!(text.contains("HTTP/1.1 404 Not Found"), "{text}");
    assert!(
        text.contains("<!DOCTYPE html>") || text.contains("<!doctype html>"),
        "HTML by default: {text}"
    );
    let text = trace_text(
        &policy,
        &[
            "--url",
            "http://other.org/x",
            "-H",
            ua,
            "-H",
            "Accept: text/markdown",
        ],
    );
    assert!(
        text.contains("evaluation stopped at: host_routing"),
        "{text}"
    );
    assert!(text.contains("no zone serves this host"), "{text}");
    assert!(text.contains("error_code: 1001"), "{text}");
}

/// Every step a trace runs, in the edge's order: the edge's own, the policy's phases, the
/// zone's limits.
const EVERY_TRACED_STEP: [&str; 16] = [
    "head_limits",
    "error_page",
    "challenge_endpoint",
    "tls_sni",
    "host_routing",
    "identify",
    "access_rules",
    "browser_check",
    "hotlink",
    "legal_rules",
    "custom_rules",
    "crawl_control",
    "rate_limits",
    "challenge",
    "challenge_clearance",
    "zone_limits",
];

#[test]
fn a_trace_lists_every_step_after_the_one_that_answered_as_not_reached() {
    let policy = example();
    let ua = "User-Agent: Mozilla/5.0";
    let cases: [(&[&str], &str, u64); 4] = [
        (
            &["--url", "http://www.example.com/", "--method", "CONNECT"],
            "head_limits",
            405,
        ),
        (
            &[
                "--url",
                "http://www.example.com/cdn-cgi/error/1020",
                "-H",
                ua,
            ],
            "error_page",
            1020,
        ),
        (
            &["--url", "http://example.com/admin/users", "-H", ua],
            "custom_rules",
            1020,
        ),
        (
            &[
                "--url",
                "http://www.example.com/upload",
                "--method",
                "POST",
                "-H",
                ua,
                "-H",
                "Content-Length: 1000000000000",
            ],
            "zone_limits",
            413,
        ),
    ];
    for (args, stop, code) in cases {
        let t = trace_json(&policy, args);
        assert_eq!(t["stopped_at"], stop, "{t:#}");
        assert_eq!(t["code"], code, "{t:#}");
        let steps = t["trace"].as_array().unwrap();
        let names: Vec<&str> = steps
            .iter()
            .map(|s| s["step_name"].as_str().unwrap())
            .collect();
        assert_eq!(names, EVERY_TRACED_STEP, "{stop}");
        let at = names.iter().position(|n| *n == stop).unwrap();
        assert_eq!(steps[at]["matched"], true, "{stop}: {t:#}");
        for later in &steps[at + 1..] {
            assert_eq!(
                later["description"],
                format!("not reached: evaluation stopped at {stop}"),
                "{stop}: {later:#}"
            );
            assert_eq!(later["matched"], false, "{later:#}");
            assert!(later["trace"].as_array().unwrap().is_empty(), "{later:#}");
        }
        // The text lists the same steps, the last one too.
        let text = trace_text(&policy, args);
        let last = text
            .lines()
            .find(|l| l.starts_with("16 · zone_limits") || l.starts_with("16 ■ zone_limits"))
            .unwrap_or_else(|| panic!("no zone_limits step in {text}"));
        if stop != "zone_limits" {
            assert!(
                last.ends_with(&format!("not reached: evaluation stopped at {stop}")),
                "{text}"
            );
        }
    }
}

#[test]
fn trace_of_country_and_asn_rules_uses_the_policy_databases() {
    let scratch = Scratch::new("trace-geo");
    let (country, asn) = geo_databases(&scratch.0);
    let policy = scratch.write(
        "geo.toml",
        &format!(
            "[geo]\ncountry_db = {country:?}\nasn_db = {asn:?}\n\
             [[zone]]\nname = \"a\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:1\"\n\
             [[access_rule]]\nid = \"no-gb\"\naction = \"block\"\ncountry = [\"GB\"]\n\
             [[access_rule]]\nid = \"no-as1221\"\naction = \"block\"\nasn = [1221]\n"
        ),
    );
    let t = trace_json(
        &policy,
        &["--url", "http://example.com/", "--ip", "81.2.69.142"],
    );
    assert_refused(&t, 1009, 403, Some("no-gb"), "access_rules");
    assert_eq!(step(&t, "access_rules")["fields"]["ip.src.country"], "GB");
    let t = trace_json(
        &policy,
        &["--url", "http://example.com/", "--ip", "1.128.0.1"],
    );
    assert_refused(&t, 1005, 403, Some("no-as1221"), "access_rules");
    assert_eq!(step(&t, "access_rules")["fields"]["ip.src.asnum"], "1221");
    // --country and --asn stand in for the databases' answers: what would a client from there
    // get; the trace says so.
    let t = trace_json(
        &policy,
        &["--url", "http://example.com/", "--ip", "192.0.2.1"],
    );
    assert_eq!(t["verdict"], "proxy", "{t:#}");
    assert_eq!(step(&t, "access_rules")["fields"]["ip.src.country"], "");
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/",
            "--ip",
            "192.0.2.1",
            "--country",
            "gb",
        ],
    );
    assert_refused(&t, 1009, 403, Some("no-gb"), "access_rules");
    assert_eq!(step(&t, "access_rules")["fields"]["ip.src.country"], "GB");
    assert!(
        t["notes"][0]
            .as_str()
            .unwrap()
            .contains("not the country database's answer"),
        "{t:#}"
    );
    let t = trace_json(
        &policy,
        &[
            "--url",
            "http://example.com/",
            "--ip",
            "81.2.69.142",
            "--country",
            "SE",
        ],
    );
    assert_eq!(t["verdict"], "proxy", "{t:#}");
    let t = trace_json(&policy, &["--url", "http://example.com/", "--asn", "1221"]);
    assert_refused(&t, 1005, 403, Some("no-as1221"), "access_rules");
}

#[test]
fn trace_shows_invalid_header_bytes_as_the_rules_see_them() {
    let policy = example();
    // A User-Agent with bytes that are not UTF-8 next to a blocked tool's name: each reads as
    // U+FFFD, the text around them is kept, and the browser check still sees `sqlmap`.
    let mut ua = b"User-Agent: \xff\xfesqlmap/1.7 caf".to_vec();
    ua.extend_from_slice(b"\xe9");
    let args = vec![
        OsString::from("--url"),
        OsString::from("http://example.com/"),
        OsString::from("-H"),
        OsStr::from_bytes(&ua).to_os_string(),
    ];
    let t = trace_json_os(&policy, &args);
    assert_refused(&t, 1010, 403, Some("browser-signature"), "browser_check");
    let b = rule(&t, "browser_check", "browser-signature");
    assert_eq!(
        b["fields"]["http.user_agent"],
        "\u{fffd}\u{fffd}sqlmap/1.7 caf\u{fffd}"
    );
    assert!(
        b["description"].as_str().unwrap().contains("(?i)sqlmap"),
        "{b:#}"
    );
    // As text, the value is quoted and escaped: a tab shows as \t, not as whitespace.
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("trace"),
        OsStr::new("--config"),
        policy.as_os_str(),
    ];
    let tabbed = OsStr::from_bytes(b"User-Agent: a\tb\xff");
    all.extend([
        OsStr::new("--url"),
        OsStr::new("http://example.com/"),
        OsStr::new("-H"),
        tabbed,
    ]);
    let (code, text, stderr) = run(&all);
    assert_eq!(code, 0, "{text}{stderr}");
    assert!(
        text.contains("http.user_agent = \"a\\tb\u{fffd}\""),
        "{text}"
    );
    // A value a header cannot carry is refused with the bytes shown escaped.
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("trace"),
        OsStr::new("--config"),
        policy.as_os_str(),
    ];
    all.extend([
        OsStr::new("--url"),
        OsStr::new("http://example.com/"),
        OsStr::new("-H"),
        OsStr::from_bytes(b"X-A: \x1b[31mred"),
    ]);
    let (code, _, stderr) = run(&all);
    assert_eq!(code, 2);
    assert!(stderr.contains("\\x1b[31mred"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "no raw escape reaches the terminal: {stderr}"
    );
}

#[test]
fn signpost_test_reports_passes_failures_and_exit_status() {
    let scratch = Scratch::new("test-cases");
    let cases = scratch.write(
        "cases.toml",
        r#"
[[case]]
name = "probe blocked"
url = "http://example.com/wp-admin/"
headers = ["User-Agent: Mozilla/5.0"]
expect = { status = 404, code = 1020, rule = "wordpress-probes", zone = "www" }

[[case]]
name = "wrong expectations"
url = "http://example.com/"
headers = ["User-Agent: Mozilla/5.0"]
expect = { status = 403, code = 1020, rule = "nope", zone = "api", origin = "http://127.0.0.1:9" }
"#,
    );
    let (code, stdout, stderr) = run(&[
        OsStr::new("test"),
        OsStr::new("--config"),
        example().as_os_str(),
        cases.as_os_str(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("PASS \"probe blocked\""), "{stdout}");
    assert!(stdout.contains("FAIL \"wrong expectations\""), "{stdout}");
    for diff in [
        "status: expected 403, got proxied (the origin answers)",
        "code: expected 1020, got none",
        "rule: expected \"nope\", got \"\"",
        "zone: expected \"api\", got \"www\"",
        "origin: expected \"http://127.0.0.1:9\", got \"http://127.0.0.1:8000\"",
    ] {
        assert!(stdout.contains(diff), "{diff} in {stdout}");
    }
    assert!(
        stdout.trim_end().ends_with("1 passed, 1 failed"),
        "{stdout}"
    );

    // A cases file with a typo is an error (2), not a pass.
    let bad = scratch.write(
        "bad.toml",
        "[[case]]\nname = \"x\"\nurl = \"http://example.com/\"\nexpect = { stauts = 200 }\n",
    );
    let (code, _, stderr) = run(&[
        OsStr::new("test"),
        OsStr::new("-c"),
        example().as_os_str(),
        bad.as_os_str(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("stauts"), "{stderr}");
}

/// `POST /trace` on the edge's admin listener.
fn admin_trace(edge: &Edge, request: &Value) -> (u16, Value) {
    let response = reqwest::blocking::Client::new()
        .post(format!("http://{}/trace", edge.admin))
        .json(request)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

#[test]
fn admin_trace_reads_the_live_counters_without_changing_them_and_follows_reloads() {
    let limit = r#"
[[rate_limit]]
id = "six-a-minute"
expression = 'http.request.uri.path eq "/counted"'
period = "1m"
requests_per_period = 6
"#;
    let (origin, edge) = echo_edge("admin-trace", limit, "", &[]);
    let http = client(&edge);
    for _ in 0..5 {
        let status = http.get(edge.url("/counted")).send().unwrap().status();
        assert_eq!(status, 200);
    }
    let request = serde_json::json!({
        "url": "http://example.com/counted",
        "ip": "127.0.0.1",
        "headers": ["Accept: application/json"],
    });
    let count =
        |t: &Value| rule(t, "rate_limits", "six-a-minute")["action_parameters"]["count"].clone();
    // Five counted: this request would be the sixth, within the limit; asked twice, the count
    // does not move.
    for _ in 0..2 {
        let (status, t) = admin_trace(&edge, &request);
        assert_eq!(status, 200, "{t:#}");
        assert_eq!(count(&t), "6", "{t:#}");
        assert_eq!(t["verdict"], "proxy", "{t:#}");
        assert_eq!(t["request"]["client_ip"], "127.0.0.1");
    }
    // Had the traces counted, the sixth real request would be over the limit.
    assert_eq!(http.get(edge.url("/counted")).send().unwrap().status(), 200);
    let (_, t) = admin_trace(&edge, &request);
    assert_eq!(count(&t), "7", "{t:#}");
    assert_eq!(t["verdict"], "refuse", "{t:#}");
    assert_eq!(t["code"], 1015);
    assert_eq!(t["status_code"], 429);
    assert_eq!(t["rule_id"], "six-a-minute");
    let body: Value = serde_json::from_str(t["response"]["body"].as_str().unwrap()).unwrap();
    assert!(body["retry_after"].as_u64().unwrap() >= 1, "{body:#}");

    // After a reload, the trace is the new policy's.
    let o = origin.addr.to_string();
    let blocked = format!(
        "{limit}\n[[custom_rule]]\nid = \"new-rule\"\naction = \"block\"\nexpression = 'http.request.uri.path eq \"/counted\"'\n"
    );
    std::fs::write(
        &edge.config,
        policy(edge.addr, edge.admin, &o, &blocked, ""),
    )
    .unwrap();
    edge.signal("HUP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, t) = admin_trace(&edge, &request);
        if t["rule_id"] == "new-rule" {
            assert_eq!(t["code"], 1020);
            assert_eq!(t["stopped_at"], "custom_rules");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reload did not reach /trace: {t:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // Not a request description: 400 with the reason; not POST: 405.
    let (status, t) = admin_trace(&edge, &serde_json::json!({ "url": "ftp://x/" }));
    assert_eq!(status, 400);
    assert!(t["error"].as_str().unwrap().contains("http://"), "{t:#}");
    let (status, _) = admin_get(&edge, "/trace");
    assert_eq!(status, 405);
}

#[test]
fn admin_trace_beyond_loopback_needs_the_operator_to_opt_in() {
    // The admin listener binds all addresses: /trace is refused unless the policy opts in.
    for (opt_in, want) in [("", 403), ("admin_trace = true\n", 200)] {
        let edge = Edge::start(
            "admin-trace-open",
            |l, a| {
                policy(
                    l,
                    format!("0.0.0.0:{}", a.port()).parse().unwrap(),
                    "127.0.0.1:9",
                    opt_in,
                    "",
                )
            },
            &[],
        );
        let response = reqwest::blocking::Client::new()
            .post(format!("http://127.0.0.1:{}/trace", edge.admin.port()))
            .json(&serde_json::json!({ "url": "http://example.com/" }))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), want);
        let body: Value = response.json().unwrap();
        if want == 403 {
            assert!(
                body["error"]
                    .as_str()
                    .unwrap()
                    .contains("admin_trace = true"),
                "{body:#}"
            );
        } else {
            assert_eq!(body["zone"], "test", "{body:#}");
        }
    }
}
