//! What `deploy/` ships works against the real thing: the alert rules pass their `promtool test
//! rules` unit tests and load in a real Prometheus (Debian's), and every query of the Grafana
//! dashboard, evaluated by that Prometheus while it scrapes a real edge under traffic, returns
//! data, except the queries of features that need a setup of their own, listed below with the
//! reason and the test that covers the feature.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::metrics::promtool_required;
use crate::support::*;

/// Metrics whose dashboard queries may come back empty here, and why: each needs a setup of its
/// own, which the named test makes.
const NEEDS_SETUP: &[(&str, &str)] = &[
    (
        "signpost_crawler_charged_cents_total",
        "a signed crawler paying for pages and a ledger (tests/e2e/crawl.rs)",
    ),
    (
        "signpost_robots_violations_total",
        "a verified crawler fetching a path the origin's robots.txt disallows (tests/e2e/crawl.rs)",
    ),
    (
        "signpost_markdown_cache_requests_total",
        "a zone converting HTML to Markdown with a cache (tests/e2e/markdown_cache.rs)",
    ),
    (
        "signpost_markdown_cache_bytes",
        "a zone converting HTML to Markdown with a cache (tests/e2e/markdown_cache.rs)",
    ),
    (
        "signpost_markdown_conversions_total",
        "a zone converting HTML to Markdown (tests/e2e/markdown.rs)",
    ),
    (
        "signpost_fleet_calls_total",
        "fleet rate limits and a Redis server (tests/e2e/fleet.rs)",
    ),
    (
        "signpost_fleet_fallbacks_total",
        "fleet rate limits with Redis down (tests/e2e/fleet.rs)",
    ),
    (
        "event=~\"h2_.*\"",
        "HTTP/2 abuse over a TLS listener (tests/e2e/h2_abuse.rs)",
    ),
];

/// Rules, a rate limit, identification (a known bot's User-Agent is counted) and crawl control;
/// a second zone whose origin is down.
fn policy(listen: std::net::SocketAddr, admin: std::net::SocketAddr, origin: &str) -> String {
    format!(
        r#"listen = ["{listen}"]
admin = "{admin}"

[bots]

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
expression = 'http.request.uri.path eq "/limited"'
period = "60s"
requests_per_period = 1

[[zone]]
name = "test"
hosts = ["example.com"]
origin = "{origin}"

[zone.crawl]
training = "block"

[[zone]]
name = "down"
hosts = ["plain.test"]
origin = "127.0.0.1:{closed}"
"#,
        closed = free_port()
    )
}

/// One wave of traffic: every kind of answer the dashboard draws.
fn traffic(edge: &Edge) {
    let http = client(edge);
    let get = |url: String, headers: &[(&str, &str)]| {
        let mut request = http.get(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().map(|r| r.status().as_u16()).unwrap_or(0)
    };
    assert_eq!(
        get(edge.url("/"), &[("referer", "https://chatgpt.com/")]),
        200
    );
    assert_eq!(get(edge.url("/api/x"), &[]), 200);
    // Once allowed in the minute, then limited.
    assert!(matches!(get(edge.url("/limited"), &[]), 200 | 429));
    assert_eq!(get(edge.url("/limited"), &[]), 429);
    assert_eq!(get(edge.url("/?status=503"), &[]), 503);
    assert_eq!(get(edge.url("/admin"), &[]), 403);
    assert_eq!(
        get(
            edge.url("/"),
            &[("accept", "application/json"), ("user-agent", "GPTBot/1.2")]
        ),
        403,
        "crawl control refuses a training crawler"
    );
    assert_eq!(
        get(format!("http://plain.test:{}/", edge.addr.port()), &[]),
        521
    );
    // An edge answer that is neither a refusal nor an origin failure.
    let trace = http
        .request(reqwest::Method::TRACE, edge.url("/"))
        .send()
        .unwrap();
    assert_eq!(trace.status().as_u16(), 405);
    // A malformed request: a connection event.
    let mut stream = TcpStream::connect(edge.addr).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n")
        .unwrap();
    let _ = read_responses(&mut stream, 1);
}

/// A Prometheus server, stopped when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _scratch: Scratch,
}

impl Prometheus {
    fn start(target: std::net::SocketAddr, rules: &Path) -> Prometheus {
        let scratch = Scratch::new("prometheus");
        let config = scratch.write(
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: signpost\n    static_configs:\n      - targets: [\"{target}\"]\n",
                rules.display()
            ),
        );
        let port = free_port();
        let log = std::fs::File::create(scratch.0.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                scratch.0.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting prometheus");
        let prometheus = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _scratch: scratch,
        };
        for _ in 0..600 {
            let ready = reqwest::blocking::get(format!("{}/-/ready", prometheus.url));
            if ready.is_ok_and(|r| r.status().is_success()) {
                return prometheus;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("prometheus did not get ready:\n{}", prometheus.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._scratch.0.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query: the `data` of Prometheus' answer, or its error.
    fn query(&self, expr: &str) -> Result<serde_json::Value, String> {
        let answer: serde_json::Value = reqwest::blocking::Client::new()
            .get(format!(
                "{}/api/v1/query?{}",
                self.url,
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("query", expr)
                    .finish()
            ))
            .send()
            .map_err(|e| e.to_string())?
            .json()
            .map_err(|e| e.to_string())?;
        if answer["status"] != "success" {
            return Err(answer.to_string());
        }
        Ok(answer["data"].clone())
    }

    /// Whether an instant query returns at least one series.
    fn has_data(&self, expr: &str) -> Result<bool, String> {
        let data = self.query(expr)?;
        Ok(data["result"].as_array().is_some_and(|r| !r.is_empty()))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn deploy_dir() -> PathBuf {
    repo_root().join("deploy")
}

fn prometheus_required() -> bool {
    let probe = Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    required(
        probe.is_ok_and(|s| s.success()),
        "prometheus (Debian's prometheus package)",
    )
}

/// Every query of the dashboard: each panel's targets, with the panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy_dir().join("grafana/signpost.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap().to_owned();
            queries.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    queries
}

/// A dashboard expression as Grafana would send it: its variables at "all" and a one-minute
/// rate window, a five-minute range.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "5m")
        .replace("$zone", ".*")
        .replace("$job", ".*")
}

#[test]
fn the_alert_rules_pass_their_unit_tests() {
    if !promtool_required() {
        return;
    }
    let dir = deploy_dir().join("prometheus");
    for args in [
        &["check", "rules", "signpost-alerts.yml"][..],
        &["test", "rules", "signpost-alerts.test.yml"][..],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_dashboard_is_an_importable_grafana_dashboard() {
    let text = std::fs::read_to_string(deploy_dir().join("grafana/signpost.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dashboard["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(dashboard["__inputs"][0]["pluginId"], "prometheus");
    assert!(dashboard["id"].is_null(), "no id until Grafana saves it");
    assert!(dashboard["uid"].is_string() && dashboard["schemaVersion"].is_u64());
    let mut ids = std::collections::HashSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "unique panel ids"
        );
        let grid = &panel["gridPos"];
        assert!(grid["x"].as_u64().unwrap() + grid["w"].as_u64().unwrap() <= 24);
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{panel}");
            assert!(!panel["targets"].as_array().unwrap().is_empty(), "{panel}");
        }
    }
    // Every special setup listed is one the dashboard queries.
    let queries = dashboard_queries();
    for (metric, _) in NEEDS_SETUP {
        assert!(
            queries.iter().any(|(_, e)| e.contains(metric)),
            "{metric} is listed as needing a setup but no query reads it"
        );
    }
}

#[test]
fn a_real_prometheus_scraping_a_real_edge_answers_every_dashboard_query() {
    if !prometheus_required() {
        return;
    }
    let origin = EchoOrigin::start();
    let o = origin.addr.to_string();
    let edge = Edge::start("dashboard", |l, a| policy(l, a, &o), &[]);
    let prometheus = Prometheus::start(
        edge.admin,
        &deploy_dir().join("prometheus/signpost-alerts.yml"),
    );
    // A reload, so that the reload counter exists.
    edge.signal("HUP");
    // Traffic in waves until Prometheus holds several scrapes of it (rate() needs two).
    let enough = "count_over_time(signpost_requests_total{zone=\"test\"}[1m]) >= 4";
    let mut waves = 0;
    while !prometheus.has_data(enough).unwrap() {
        assert!(
            waves < 60,
            "Prometheus never scraped the edge:\n{}",
            prometheus.log()
        );
        traffic(&edge);
        waves += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    traffic(&edge);
    // One more scrape after the last wave.
    std::thread::sleep(Duration::from_millis(1500));

    let queries = dashboard_queries();
    assert!(queries.len() >= 30, "{} queries", queries.len());
    let mut empty = Vec::new();
    let mut needing_setup = Vec::new();
    for (title, expr) in &queries {
        let sent = as_grafana_sends(expr);
        let has_data = prometheus
            .has_data(&sent)
            .unwrap_or_else(|e| panic!("{title}: {sent}: {e}"));
        let setup = NEEDS_SETUP.iter().find(|(m, _)| expr.contains(m));
        match (has_data, setup) {
            (true, _) => {}
            (false, Some((_, why))) => needing_setup.push(format!("{title}: needs {why}")),
            (false, None) => empty.push(format!("{title}: {sent}")),
        }
    }
    for line in &needing_setup {
        eprintln!("not exercised here: {line}");
    }
    assert!(
        empty.is_empty(),
        "dashboard queries without data:\n{}\n--- /metrics ---\n{}",
        empty.join("\n"),
        admin_get(&edge, "/metrics").1
    );
    // The alert rules loaded in the real server too.
    let groups: serde_json::Value =
        reqwest::blocking::get(format!("{}/api/v1/rules", prometheus.url))
            .unwrap()
            .json()
            .unwrap();
    let loaded = groups["data"]["groups"][0]["rules"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(loaded, 9, "{groups}");
}
