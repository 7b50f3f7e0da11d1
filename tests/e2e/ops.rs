use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

fn policy_with_hosts(
    listen: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    origin: &str,
    hosts: &[&str],
) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        "listen = [\"{listen}\"]\nadmin = \"{admin}\"\n\n[[zone]]\nname = \"test\"\nhosts = [{}]\norigin = \"{origin}\"\n",
        hosts.join(", ")
    )
}

fn status_of(http: &reqwest::blocking::Client, url: &str) -> u16 {
    http.get(url)
        .send()
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[test]
fn reloads_under_load_drop_nothing_and_apply_every_time() {
    let origin = EchoOrigin::start();
    let o = origin.addr.to_string();
    let edge = Edge::start(
        "reload",
        |l, a| policy_with_hosts(l, a, &o, &["example.com"]),
        &[],
    );
    let (listen, admin) = (edge.addr, edge.admin);

    // Steady load on the host every policy serves, from two clients, for the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, sent, failed) = (stop.clone(), sent.clone(), failed.clone());
            let http = client(&edge);
            let url = edge.url("/steady");
            thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    sent.fetch_add(1, Ordering::Relaxed);
                    if status_of(&http, &url) != 200 {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    // Fifty reloads that alternately add and remove a second host; each must take effect.
    let http = client(&edge);
    let www = format!("http://www.example.com:{}/", listen.port());
    for round in 0..50 {
        let serve_www = round % 2 == 0;
        let hosts: &[&str] = if serve_www {
            &["example.com", "www.example.com"]
        } else {
            &["example.com"]
        };
        std::fs::write(&edge.config, policy_with_hosts(listen, admin, &o, hosts)).unwrap();
        edge.signal("HUP");
        let want = if serve_www { 200 } else { 409 };
        let deadline = Instant::now() + Duration::from_secs(10);
        while status_of(&http, &www) != want {
            assert!(
                Instant::now() < deadline,
                "reload {round} did not take effect"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    // A policy that does not validate is refused and the last good one keeps serving.
    std::fs::write(&edge.config, "listen = [\"oops\"\n[[zone]]\nname = 3\n").unwrap();
    edge.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = admin_get(&edge, "/metrics");
        if metric(
            &text,
            "signpost_policy_reloads_total",
            &[("outcome", "rejected")],
        ) == Some(1.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broken policy was not reported as rejected"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        status_of(&http, &www),
        409,
        "the last good policy (www not served) still applies"
    );
    assert_eq!(status_of(&http, &edge.url("/")), 200);
    let log = edge.log();
    assert!(log.contains("policy rejected"), "the rejection is logged");
    assert!(
        log.contains("policy.toml:"),
        "the log names the file, line and column:\n{log}"
    );

    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let (_, text) = admin_get(&edge, "/metrics");
    assert_eq!(
        metric(&text, "signpost_policy_reloads_total", &[("outcome", "ok")]),
        Some(50.0)
    );
    assert!(sent.load(Ordering::Relaxed) > 100, "the load kept flowing");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "no request failed during {} requests and 51 reloads",
        sent.load(Ordering::Relaxed)
    );
}

#[test]
fn metrics_count_the_requests_just_made() {
    let every_client =
        "[[rate_limit]]\nid = \"every-client\"\nperiod = \"60s\"\nrequests_per_period = 1000\n";
    let (_origin, edge) = echo_edge("metrics", every_client, "", &[]);
    let http = client(&edge);
    for _ in 0..3 {
        assert_eq!(status_of(&http, &edge.url("/counted")), 200);
    }
    for _ in 0..2 {
        let r = http
            .get(edge.url("/cdn-cgi/error/1015"))
            .header("accept", "application/json")
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 429);
    }
    let (status, text) = admin_get(&edge, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        metric(
            &text,
            "signpost_requests_total",
            &[("zone", "test"), ("status", "200"), ("format", "origin")]
        ),
        Some(3.0)
    );
    assert_eq!(
        metric(
            &text,
            "signpost_requests_total",
            &[
                ("status", "429"),
                ("error_code", "1015"),
                ("format", "json")
            ]
        ),
        Some(2.0)
    );
    let latency_count = metric(
        &text,
        "signpost_upstream_latency_seconds_count",
        &[("zone", "test")],
    );
    assert_eq!(
        latency_count,
        Some(3.0),
        "the upstream latency histogram saw the proxied requests:\n{text}"
    );
    // One client, one key, in the one rule.
    assert_eq!(
        metric(
            &text,
            "signpost_rate_limit_keys",
            &[("rule", "every-client")]
        ),
        Some(1.0)
    );
}

#[test]
fn health_and_readiness() {
    let (_origin, edge) = echo_edge("health", "", "", &[]);
    assert_eq!(admin_get(&edge, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(admin_get(&edge, "/readyz"), (200, "ready\n".to_string()));
    assert_eq!(admin_get(&edge, "/nope").0, 404);
    let health = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(["health", "--url", &format!("http://{}/healthz", edge.admin)])
        .status()
        .unwrap();
    assert!(
        health.success(),
        "`signpost health` succeeds against a live admin listener"
    );
    let dead = std::process::Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args([
            "health",
            "--url",
            &format!("http://127.0.0.1:{}/healthz", free_port()),
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        !dead.success(),
        "`signpost health` fails when nothing answers"
    );
}

#[test]
fn sigterm_drains_in_flight_requests() {
    let (_origin, mut edge) = echo_edge("drain", "", "", &["--grace-period", "3"]);
    let http = client(&edge);
    let url = edge.url("/slow?delay_ms=1500");
    let in_flight = thread::spawn(move || http.get(url).send().map(|r| r.status().as_u16()));
    thread::sleep(Duration::from_millis(400));
    edge.signal("TERM");
    let status = in_flight
        .join()
        .unwrap()
        .expect("the in-flight request completes");
    assert_eq!(status, 200);
    thread::sleep(Duration::from_millis(300));
    assert!(
        std::net::TcpStream::connect_timeout(&edge.addr, Duration::from_millis(500)).is_err(),
        "no new connections after SIGTERM"
    );
    let exit = edge
        .wait_exit(Duration::from_secs(15))
        .expect("the process exits after the grace period");
    assert!(exit.success(), "graceful exit: {exit}");
}

#[test]
fn json_access_log_carries_the_ray_id() {
    let (_origin, edge) = echo_edge("jsonlog", "", "", &["--log-format", "json"]);
    let response = client(&edge).get(edge.url("/logged")).send().unwrap();
    let ray = response.headers()["cf-ray"].to_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let access: Vec<serde_json::Value> = edge
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "access")
            .collect();
        if let Some(line) = access.iter().find(|v| v["ray_id"] == ray.as_str()) {
            assert_eq!(line["path"], "/logged");
            assert_eq!(line["status"], 200);
            assert!(
                line["host"].as_str().unwrap().starts_with("example.com:"),
                "the host as the client sent it"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no JSON access line with ray id {ray}:\n{}",
            edge.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn watch_reloads_when_the_file_changes() {
    let origin = EchoOrigin::start();
    let o = origin.addr.to_string();
    let edge = Edge::start(
        "watch",
        |l, a| policy_with_hosts(l, a, &o, &["example.com"]),
        &["--watch"],
    );
    let http = client(&edge);
    let www = format!("http://www.example.com:{}/", edge.addr.port());
    assert_eq!(status_of(&http, &www), 409);
    // Written elsewhere and renamed over the old file, as editors and config managers do.
    let next = edge.config.with_extension("next");
    std::fs::write(
        &next,
        policy_with_hosts(
            edge.addr,
            edge.admin,
            &o,
            &["example.com", "www.example.com"],
        ),
    )
    .unwrap();
    std::fs::rename(&next, &edge.config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of(&http, &www) != 200 {
        assert!(
            Instant::now() < deadline,
            "--watch did not pick up the change:\n{}",
            edge.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
}
