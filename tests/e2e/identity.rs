//! Who is asking, through the binary: known bots claimed by their User-Agent and verified by the
//! policy's addresses, impostors refused by a rule, the origin told in a header no client can
//! forge, the access log and the metrics.

use crate::support::*;

/// A bot verified by loopback addresses, and one whose only addresses are elsewhere.
const BOTS: &str = r#"
[bots]
origin_header = "x-signpost-bot"

[[bot]]
name = "LoopBot"
operator = "Tests"
category = "AI Crawler"
behaviors = ["training"]
user_agent = "LoopBot"
ip_ranges = ["127.0.0.0/8"]

[[bot]]
name = "FarBot"
operator = "Tests"
category = "Search Engine Crawler"
behaviors = ["search"]
user_agent = "FarBot"
ip_ranges = ["192.0.2.0/24"]

[[custom_rule]]
id = "impostors"
action = "block"
expression = "signpost.bot.claim_failed"

[[custom_rule]]
id = "trainers"
action = "log"
expression = 'signpost.bot.behaviors contains "training"'
"#;

fn echoed(resp: reqwest::blocking::Response) -> serde_json::Value {
    assert_eq!(resp.status(), 200);
    resp.json().unwrap()
}

#[test]
fn bots_are_verified_impostors_refused_and_the_origin_told() {
    let (origin, edge) = echo_edge("identity-bots", BOTS, "", &[]);
    let c = client(&edge);

    // A verified bot: the origin reads who it is; the client's forged copies are gone.
    let echo = echoed(
        c.get(edge.url("/page"))
            .header("user-agent", "Mozilla/5.0 (compatible; LoopBot/1.0)")
            .header("x-signpost-bot", "bot=\"Googlebot\", status=verified")
            .header("signpost-bot", "forged")
            .send()
            .unwrap(),
    );
    let lines: Vec<(String, String)> = serde_json::from_value(echo["lines"].clone()).unwrap();
    let told: Vec<&str> = lines
        .iter()
        .filter(|(n, _)| n == "x-signpost-bot")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        told,
        [
            r#"bot="LoopBot", status=verified, method=ip-range, category="AI Crawler", signature=absent"#
        ]
    );
    assert!(lines.iter().all(|(n, _)| n != "signpost-bot"), "{lines:?}");

    // Nobody in particular: no header at all, forged copies removed.
    let echo = echoed(
        c.get(edge.url("/"))
            .header("user-agent", "Mozilla/5.0 Firefox/140.0")
            .header("x-signpost-bot", "bot=\"LoopBot\", status=verified")
            .send()
            .unwrap(),
    );
    assert!(echo["headers"].get("x-signpost-bot").is_none(), "{echo}");

    // An impostor: claims FarBot from an address FarBot never uses; refused before the origin.
    let before = origin.received();
    let resp = c
        .get(edge.url("/"))
        .header("user-agent", "FarBot/2.0")
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 403);
    let problem: serde_json::Value = resp.json().unwrap();
    assert_eq!(problem["error_code"], 1020);
    assert_eq!(origin.received(), before);

    // The access log names the bot and its status; the metrics count them.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let log = edge.log();
    assert!(
        log.contains(r#"bot="LoopBot" bot_status="verified""#),
        "{log}"
    );
    assert!(log.contains(r#"bot="FarBot" bot_status="failed""#), "{log}");
    assert!(
        log.contains("trainers"),
        "the log rule on training bots matched: {log}"
    );
    let (status, metrics) = admin_get(&edge, "/metrics");
    assert_eq!(status, 200);
    let count = |bot: &str, status: &str| {
        metric(
            &metrics,
            "signpost_bot_requests_total",
            &[("bot", bot), ("status", status)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(count("LoopBot", "verified"), 1.0, "{metrics}");
    assert_eq!(count("FarBot", "failed"), 1.0, "{metrics}");
}

#[test]
fn without_bots_in_the_policy_nothing_is_identified_and_forged_headers_still_go() {
    let (_origin, edge) = echo_edge("identity-off", "", "", &[]);
    let echo = echoed(
        client(&edge)
            .get(edge.url("/"))
            .header("user-agent", "GPTBot/1.0")
            .header("signpost-bot", "bot=\"GPTBot\", status=verified")
            .send()
            .unwrap(),
    );
    assert!(echo["headers"].get("signpost-bot").is_none(), "{echo}");
    // The access line is written once the answer is out: give it a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !edge.log().contains("target=\"access\"") && !edge.log().contains("access:") {
        assert!(
            std::time::Instant::now() < deadline,
            "no access line: {}",
            edge.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        edge.log().contains(r#"bot="-" bot_status="-""#),
        "{}",
        edge.log()
    );
}
