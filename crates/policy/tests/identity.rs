//! Who is asking, through the decision: bot fields in custom and rate-limit rules, the evidence
//! the edge gives, and a rate limit that counts per verified agent.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use signpost_policy::{
    BotStatus, Code, CompiledPolicy, Evidence, Method, NoEvidence, RequestFacts, ReverseDnsName,
    Signature, SignatureOutcome, Verdict,
};

const POLICY: &str = r#"
[[zone]]
name = "site"
hosts = ["site.test"]
origin = "127.0.0.1:9"

[[custom_rule]]
id = "impostors"
action = "block"
expression = "signpost.bot.claim_failed"

[[custom_rule]]
id = "no-training"
action = "block"
expression = 'signpost.bot.behaviors contains "training" and cf.verified_bot_category eq "AI Crawler"'

[[rate_limit]]
id = "per-agent"
expression = "cf.bot_management.signed_agent"
characteristics = ["signpost.bot.agent"]
period = "1m"
requests_per_period = 2
"#;

struct Given {
    signature: Signature,
    rdns: ReverseDnsName,
}

impl Evidence for Given {
    fn signature(&self, _: IpAddr) -> Signature {
        self.signature.clone()
    }
    fn in_ip_list(&self, _: &str, _: IpAddr) -> Option<bool> {
        Some(false)
    }
    fn reverse_dns(&self, _: IpAddr) -> ReverseDnsName {
        self.rdns.clone()
    }
}

fn signed(agent: &str, keyid: &str) -> Given {
    Given {
        signature: Signature {
            outcome: SignatureOutcome::Verified,
            agent: Some(Arc::from(agent)),
            keyid: Some(Arc::from(keyid)),
            ..Signature::default()
        },
        rdns: ReverseDnsName::Unconfirmed,
    }
}

fn decide(
    policy: &CompiledPolicy,
    ua: &str,
    peer: &str,
    evidence: &dyn Evidence,
    now: Instant,
) -> signpost_policy::Decision {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::USER_AGENT, ua.parse().unwrap());
    let facts = RequestFacts {
        peer: peer.parse().unwrap(),
        host: "site.test",
        method: "GET",
        uri: "/",
        tls: false,
        sni: None,
        headers: &headers,
    };
    policy.decide_with(&facts, evidence, now)
}

fn blocked_by(d: &signpost_policy::Decision) -> Option<&str> {
    match d.verdict {
        Verdict::Refuse { .. } | Verdict::Challenge { .. } => d.rule_id.as_deref(),
        Verdict::Proxy => None,
    }
}

#[test]
fn rules_read_who_is_asking() {
    let policy = CompiledPolicy::from_toml(POLICY, "p.toml", Path::new("."), None).unwrap();
    assert!(policy.identifies(), "a rule reads a bot field");
    let now = Instant::now();
    let unconfirmed = Given {
        signature: Signature::default(),
        rdns: ReverseDnsName::Unconfirmed,
    };
    // A Googlebot claim from an address whose name does not confirm: an impostor.
    let d = decide(&policy, "Googlebot/2.1", "203.0.113.7", &unconfirmed, now);
    assert_eq!(d.identity.status, BotStatus::Failed);
    assert_eq!(blocked_by(&d), Some("impostors"));
    assert!(
        matches!(d.verdict, Verdict::Refuse { code, .. } if code == Code::FIREWALL_RULE_BLOCKED)
    );
    // The same claim confirmed by reverse DNS passes.
    let confirmed = Given {
        signature: Signature::default(),
        rdns: ReverseDnsName::Confirmed(Arc::from("crawl-1.googlebot.com")),
    };
    let d = decide(&policy, "Googlebot/2.1", "66.249.66.1", &confirmed, now);
    assert_eq!(d.identity.status, BotStatus::Verified(Method::ReverseDns));
    assert_eq!(blocked_by(&d), None);
    // Nothing known yet: not an impostor.
    let d = decide(&policy, "Googlebot/2.1", "66.249.66.1", &NoEvidence, now);
    assert_eq!(d.identity.status, BotStatus::Pending);
    assert_eq!(blocked_by(&d), None);
    // A verified AI crawler that trains.
    let mut p = String::from(POLICY);
    p.push_str(
        "\n[[bot]]\nname = \"TrainBot\"\ncategory = \"AI Crawler\"\nbehaviors = [\"training\"]\nuser_agent = \"TrainBot\"\nweb_bot_auth = [\"https://train.example\"]\n",
    );
    let policy = CompiledPolicy::from_toml(&p, "p.toml", Path::new("."), None).unwrap();
    let d = decide(
        &policy,
        "Mozilla/5.0",
        "203.0.113.7",
        &signed("https://train.example", "k"),
        now,
    );
    assert_eq!(
        d.identity.verified_bot().map(|b| &*b.name),
        Some("TrainBot")
    );
    assert_eq!(blocked_by(&d), Some("no-training"));
}

#[test]
fn a_rate_limit_counts_two_agents_behind_one_address_apart() {
    let policy = CompiledPolicy::from_toml(POLICY, "p.toml", Path::new("."), None).unwrap();
    let now = Instant::now();
    let a = signed("https://agents.example", "key-a");
    let b = signed("https://agents.example", "key-b");
    for _ in 0..2 {
        assert_eq!(
            blocked_by(&decide(&policy, "A", "198.51.100.1", &a, now)),
            None
        );
    }
    // Agent a is over its limit; agent b, from the same address, is not.
    assert_eq!(
        blocked_by(&decide(&policy, "A", "198.51.100.1", &a, now)),
        Some("per-agent")
    );
    assert_eq!(
        blocked_by(&decide(&policy, "B", "198.51.100.1", &b, now)),
        None
    );
    assert_eq!(
        blocked_by(&decide(&policy, "B", "198.51.100.1", &b, now)),
        None
    );
    assert_eq!(
        blocked_by(&decide(&policy, "B", "198.51.100.1", &b, now)),
        Some("per-agent")
    );
}

#[test]
fn a_policy_without_bots_does_not_identify() {
    let text = "[[zone]]\nname = \"s\"\nhosts = [\"s.test\"]\norigin = \"127.0.0.1:9\"\n";
    let policy = CompiledPolicy::from_toml(text, "p.toml", Path::new("."), None).unwrap();
    assert!(!policy.identifies());
    let d = decide(
        &policy,
        "Googlebot",
        "203.0.113.7",
        &signed("https://x.example", "k"),
        Instant::now(),
    );
    assert_eq!(d.identity, signpost_policy::Identity::default());
}

#[test]
fn bots_settings_are_checked_at_their_place() {
    let base = "[[zone]]\nname = \"s\"\nhosts = [\"s.test\"]\norigin = \"127.0.0.1:9\"\n";
    for (section, expect) in [
        (
            "[bots]\norigin_header = \"bad header\"\n",
            "not a header name",
        ),
        ("[bots]\nmax_validity = \"48h\"\n", "at most \"24h\""),
        (
            "[bots]\nnameservers = [\"dns.example\"]\n",
            "not an address",
        ),
        (
            "[bots]\n[[bots.key]]\nagent = \"https://a.example\"\nx = \"c2hvcnQ\"\n",
            "32 bytes",
        ),
        (
            "[bots]\ntrusted_roots = [\"missing-ca.pem\"]\n",
            "cannot read",
        ),
    ] {
        let text = format!("{base}{section}");
        let err = CompiledPolicy::from_toml(&text, "p.toml", Path::new("."), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expect), "{section}\n{err}");
        assert!(err.contains("p.toml:"), "{err}");
    }
    let ok = format!(
        "{base}[bots]\norigin_header = \"x-verified-bot\"\nnameservers = [\"127.0.0.1:5353\"]\n[[bots.key]]\nagent = \"https://a.example\"\nx = \"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"\n"
    );
    let policy = CompiledPolicy::from_toml(&ok, "p.toml", Path::new("."), None).unwrap();
    let bots = policy.bots().unwrap();
    assert_eq!(
        bots.origin_header.as_ref().unwrap().as_str(),
        "x-verified-bot"
    );
    assert_eq!(bots.keys.len(), 1);
    assert_eq!(&*bots.keys[0].0, "https://a.example");
}
