//! `/metrics` by Prometheus' conventions: `promtool check metrics` (Debian's `prometheus`
//! package) finds nothing to fix on a real edge that served traffic; OpenMetrics for whoever
//! asks for it; a counter per rule and action, bounded by the loaded policy; the policy's hash,
//! build info and process metrics; AI referrals by assistant.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::*;

/// Whether Debian's `promtool` is installed ([`required`]).
pub fn promtool_required() -> bool {
    let probe = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    required(
        probe.is_ok_and(|s| s.success()),
        "promtool (Debian's prometheus package)",
    )
}

/// Rules of every kind the metrics label, and a rate limit, over one zone.
const RULES: &str = r#"
[[access_rule]]
id = "office"
action = "allow"
ip = ["192.0.2.10"]

[[custom_rule]]
id = "no-admin"
action = "block"
expression = 'http.request.uri.path eq "/admin"'

[[custom_rule]]
id = "note-api"
action = "log"
expression = 'starts_with(http.request.uri.path, "/api/")'

[[rate_limit]]
id = "per-client"
period = "60s"
requests_per_period = 4
"#;

/// Some of each: proxied, refused by a rule, noted by a log rule, rate limited, referred by
/// assistants.
fn traffic(edge: &Edge) {
    let http = client(edge);
    let get = |path: &str, referer: Option<&str>| {
        let mut request = http.get(edge.url(path));
        if let Some(referer) = referer {
            request = request.header("referer", referer);
        }
        request.send().unwrap().status().as_u16()
    };
    assert_eq!(get("/", Some("https://chatgpt.com/")), 200);
    assert_eq!(get("/api/x", Some("https://www.perplexity.ai/search")), 200);
    assert_eq!(get("/admin", None), 403);
    assert_eq!(get("/?utm_source=claude.ai", None), 200);
    assert_eq!(get("/", Some("https://example.org/")), 200);
    // The fifth request the rate limit counts (the refused one it never saw) is over its limit.
    assert_eq!(get("/", None), 429);
}

fn metrics_text(edge: &Edge) -> String {
    let (status, text) = admin_get(edge, "/metrics");
    assert_eq!(status, 200);
    text
}

#[test]
fn promtool_finds_nothing_to_fix() {
    if !promtool_required() {
        return;
    }
    let (_origin, edge) = echo_edge("promtool", RULES, "", &[]);
    traffic(&edge);
    let text = metrics_text(&edge);
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {} {said}\n--- /metrics ---\n{text}",
        out.status
    );
    // What was checked is the edge's whole exposition, every family with help text.
    for family in [
        "signpost_requests_total",
        "signpost_rule_actions_total",
        "signpost_rate_limit_keys",
        "signpost_rate_limit_evicted_keys_total",
        "signpost_ai_referrals_total",
        "signpost_build_info",
        "signpost_policy_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# HELP {family} "))),
            "{family} has help text:\n{text}"
        );
    }
}

#[test]
fn the_classic_format_unless_openmetrics_is_asked_for() {
    let (_origin, edge) = echo_edge("exposition", RULES, "", &[]);
    traffic(&edge);
    let url = format!("http://{}/metrics", edge.admin);
    let classic = reqwest::blocking::get(&url).unwrap();
    assert_eq!(
        classic.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let classic = classic.text().unwrap();
    assert!(classic.contains("# TYPE signpost_requests_total counter\n"));
    assert!(!classic.contains("# EOF"));
    // As Prometheus asks.
    let openmetrics = reqwest::blocking::Client::new()
        .get(&url)
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        )
        .send()
        .unwrap();
    assert_eq!(
        openmetrics.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let openmetrics = openmetrics.text().unwrap();
    assert!(openmetrics.contains("# TYPE signpost_requests counter\n"));
    assert!(openmetrics.ends_with("# EOF\n"));
    // The same samples in both.
    for name in ["signpost_requests_total", "signpost_rule_actions_total"] {
        assert_eq!(
            metric(&classic, name, &[]),
            metric(&openmetrics.replace("# EOF\n", ""), name, &[]),
            "{name}"
        );
    }
}

#[test]
fn each_rule_counts_what_it_did_and_a_reload_keeps_the_label_set_to_the_policy() {
    let (_origin, edge) = echo_edge("rule-actions", RULES, "", &[]);
    let text = metrics_text(&edge);
    let actions = |text: &str, rule: &str, action: &str| {
        metric(
            text,
            "signpost_rule_actions_total",
            &[("rule", rule), ("action", action)],
        )
    };
    // Every rule has its series from the start, at 0.
    assert_eq!(actions(&text, "office", "allow"), Some(0.0));
    assert_eq!(actions(&text, "no-admin", "block"), Some(0.0));
    assert_eq!(actions(&text, "per-client", "rate_limit"), Some(0.0));
    let hash = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("signpost_policy_info{sha256=\""))
            .and_then(|l| l.split('"').next())
            .map(str::to_owned)
            .expect("signpost_policy_info")
    };
    let first_hash = hash(&text);
    let file = std::fs::read(&edge.config).unwrap();
    use sha2::Digest;
    let expected: String = sha2::Sha256::digest(&file)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(first_hash, expected, "the hash of the policy file");

    traffic(&edge);
    let text = metrics_text(&edge);
    assert_eq!(
        metric(
            &text,
            "signpost_rule_actions_total",
            &[("phase", "custom_rules"), ("rule", "no-admin")]
        ),
        Some(1.0)
    );
    assert_eq!(actions(&text, "note-api", "log"), Some(1.0));
    assert_eq!(actions(&text, "per-client", "rate_limit"), Some(1.0));
    assert_eq!(actions(&text, "office", "allow"), Some(0.0));
    assert_eq!(
        metric(&text, "signpost_rate_limit_keys", &[("rule", "per-client")]),
        Some(1.0)
    );

    // A reload that renames a rule: its old series goes, the new one starts at 0, the others
    // keep their counts, and the policy's hash follows.
    let policy = std::fs::read_to_string(&edge.config).unwrap();
    std::fs::write(&edge.config, policy.replace("no-admin", "no-admin-area")).unwrap();
    edge.signal("HUP");
    let text = wait_for_metrics(&edge, |text| {
        metric(text, "signpost_policy_reloads_total", &[("outcome", "ok")]) == Some(1.0)
    });
    assert_eq!(actions(&text, "no-admin", "block"), None, "{text}");
    assert_eq!(actions(&text, "no-admin-area", "block"), Some(0.0));
    assert_eq!(actions(&text, "note-api", "log"), Some(1.0));
    assert_ne!(hash(&text), first_hash);
    assert_eq!(
        text.matches("signpost_policy_info{").count(),
        1,
        "one policy is loaded"
    );
}

/// `/metrics` once `done` holds for it (a reload is applied by a background task).
fn wait_for_metrics(edge: &Edge, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..200 {
        let text = metrics_text(edge);
        if done(&text) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("/metrics never showed the change:\n{}", metrics_text(edge));
}

#[test]
fn ai_referrals_are_counted_per_assistant_beside_build_and_process_facts() {
    let (_origin, edge) = echo_edge("referrals", RULES, "", &[]);
    traffic(&edge);
    let text = metrics_text(&edge);
    let referrals = |assistant: &str| {
        metric(
            &text,
            "signpost_ai_referrals_total",
            &[("zone", "test"), ("assistant", assistant)],
        )
    };
    assert_eq!(referrals("ChatGPT"), Some(1.0));
    assert_eq!(referrals("Perplexity"), Some(1.0));
    // By utm_source, no Referer.
    assert_eq!(referrals("Claude"), Some(1.0));
    assert_eq!(
        metric(&text, "signpost_ai_referrals_total", &[]),
        Some(3.0),
        "example.org is no assistant"
    );
    assert_eq!(
        metric(
            &text,
            "signpost_ai_referrals_total",
            &[("assistant", "ChatGPT"), ("operator", "OpenAI")]
        ),
        Some(1.0)
    );

    assert_eq!(
        metric(
            &text,
            "signpost_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    let started = metric(&text, "process_start_time_seconds", &[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now + 1.0 && started > now - 600.0,
        "the edge started {started}, now is {now}"
    );
    assert!(metric(&text, "process_resident_memory_bytes", &[]).unwrap() > 1e6);
    // Listeners, the admin connection, the log: more than the three standard descriptors.
    assert!(metric(&text, "process_open_fds", &[]).unwrap() > 3.0);
    assert!(metric(&text, "process_cpu_seconds_total", &[]).is_some());
}
