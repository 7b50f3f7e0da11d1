//! The `challenge` action: parsed and checked with `file:line:col`, noted by the phases that
//! take it (custom, access, rate-limit rules, crawl control) and decided by the last phase:
//! exempt paths and verified clients pass, refusals win, the highest difficulty asked stands.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use signpost_policy::{
    BotStatus, ChallengeBypass, CompiledPolicy, Difficulty, Evidence, RequestFacts, ReverseDnsName,
    Signature, SignatureOutcome, Verdict,
};

/// A scratch directory holding a key file; the policy names it relative to itself.
fn with_key(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "signpost-policy-challenge-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("k.key"), "0123456789abcdef0123456789abcdef\n").unwrap();
    dir
}

const KEYS: &str = "[challenge]\nkeys = [{ id = 1, secret_file = \"k.key\" }]\n";

fn zone(extra: &str) -> String {
    format!(
        "[[zone]]\nname = \"z\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:1\"\n{extra}\n"
    )
}

fn compile(dir: &Path, text: &str) -> Result<CompiledPolicy, String> {
    CompiledPolicy::from_toml(text, "p.toml", dir, None).map_err(|e| e.to_string())
}

fn decide_with(
    p: &CompiledPolicy,
    uri: &str,
    peer: &str,
    evidence: &dyn Evidence,
) -> signpost_policy::Decision {
    let mut headers = http::HeaderMap::new();
    headers.insert("user-agent", "Mozilla/5.0".parse().unwrap());
    let facts = RequestFacts {
        peer: peer.parse().unwrap(),
        host: "example.com",
        method: "GET",
        uri,
        tls: false,
        sni: None,
        headers: &headers,
    };
    p.decide_with(&facts, evidence, Instant::now())
}

fn decide(p: &CompiledPolicy, uri: &str, peer: &str) -> signpost_policy::Decision {
    decide_with(p, uri, peer, &signpost_policy::NoEvidence)
}

fn challenged(d: &signpost_policy::Decision) -> Option<u8> {
    match d.verdict {
        Verdict::Challenge { difficulty } => Some(difficulty.get()),
        _ => None,
    }
}

#[test]
fn custom_access_and_rate_rules_challenge_and_later_phases_still_refuse() {
    let dir = with_key("phases");
    let text = format!(
        "{KEYS}
[[access_rule]]
id = \"net\"
action = \"challenge\"
ip = [\"203.0.113.0/24\"]

[[custom_rule]]
id = \"app\"
action = \"challenge\"
difficulty = 6
expression = 'starts_with(http.request.uri.path, \"/app\")'

[[custom_rule]]
id = \"never\"
action = \"block\"
expression = 'http.request.uri.path eq \"/app/admin\"'

[[rate_limit]]
id = \"burst\"
action = \"challenge\"
period = \"1m\"
requests_per_period = 2
expression = 'http.request.uri.path eq \"/burst\"'

[[rate_limit]]
id = \"hard\"
period = \"1m\"
requests_per_period = 1
expression = 'http.request.uri.path eq \"/hard\"'
{}",
        zone("[zone.challenge]\ndifficulty = 3\n")
    );
    let p = compile(&dir, &text).unwrap();
    // Access challenge at the zone's difficulty.
    let d = decide(&p, "/", "203.0.113.9");
    assert_eq!(
        (challenged(&d), d.rule_id.as_deref()),
        (Some(3), Some("net"))
    );
    // A custom rule's own difficulty; the higher of two challenges stands.
    let d = decide(&p, "/app/x", "203.0.113.9");
    assert_eq!(
        (challenged(&d), d.rule_id.as_deref()),
        (Some(6), Some("app"))
    );
    let d = decide(&p, "/app/x", "192.0.2.1");
    assert_eq!(challenged(&d), Some(6));
    // A custom challenge ends the custom rules (first match): the block after it does not run.
    let d = decide(&p, "/app/admin", "192.0.2.1");
    assert_eq!(challenged(&d), Some(6));
    // Nothing asked: proxied.
    assert_eq!(decide(&p, "/", "192.0.2.1").verdict, Verdict::Proxy);
    // A rate limit over its limit challenges instead of refusing; the counting goes on.
    for _ in 0..2 {
        assert_eq!(decide(&p, "/burst", "192.0.2.2").verdict, Verdict::Proxy);
    }
    let d = decide(&p, "/burst", "192.0.2.2");
    assert_eq!(
        (challenged(&d), d.rule_id.as_deref()),
        (Some(3), Some("burst"))
    );
    // A refusal after a challenge wins.
    assert_eq!(challenged(&decide(&p, "/hard", "203.0.113.1")), Some(3));
    let d = decide(&p, "/hard", "203.0.113.1");
    assert!(
        matches!(d.verdict, Verdict::Refuse { .. }),
        "{:?}",
        d.verdict
    );
}

#[test]
fn exempt_paths_pass_by_default_and_as_configured() {
    let dir = with_key("exempt");
    let rule = "[[custom_rule]]\nid = \"all\"\naction = \"challenge\"\nexpression = 'http.request.uri.path ne \"\"'\n";
    let p = compile(&dir, &format!("{KEYS}{rule}{}", zone(""))).unwrap();
    for path in [
        "/robots.txt",
        "/feed",
        "/blog/feed/",
        "/index.xml",
        "/x.rss",
        "/.well-known/a",
        "/%72obots.txt",
    ] {
        let d = decide(&p, path, "192.0.2.1");
        assert_eq!(d.verdict, Verdict::Proxy, "{path}");
        assert_eq!(
            d.challenge.as_ref().and_then(|n| n.bypass),
            Some(ChallengeBypass::Exempt),
            "{path}"
        );
    }
    assert_eq!(challenged(&decide(&p, "/blog/post", "192.0.2.1")), Some(4));
    // Configured: the list replaces the defaults.
    let z = zone("[zone.challenge]\nexempt_paths = [\"/api/*\"]\n");
    let p = compile(&dir, &format!("{KEYS}{rule}{z}")).unwrap();
    assert_eq!(decide(&p, "/api/v1", "192.0.2.1").verdict, Verdict::Proxy);
    assert_eq!(challenged(&decide(&p, "/robots.txt", "192.0.2.1")), Some(4));
}

/// What the edge would know: a verified signature, or nothing.
struct Signed(bool);

impl Evidence for Signed {
    fn signature(&self, _: std::net::IpAddr) -> Signature {
        if !self.0 {
            return Signature::default();
        }
        Signature {
            outcome: SignatureOutcome::Verified,
            agent: Some(Arc::from("https://agent.example")),
            keyid: Some(Arc::from("k1")),
            ..Signature::default()
        }
    }
    fn in_ip_list(&self, _: &str, _: std::net::IpAddr) -> Option<bool> {
        Some(false)
    }
    fn reverse_dns(&self, _: std::net::IpAddr) -> ReverseDnsName {
        ReverseDnsName::Unconfirmed
    }
}

#[test]
fn verified_clients_pass_unless_a_rule_names_them() {
    let dir = with_key("verified");
    let text = format!(
        "{KEYS}[bots]\n
[[custom_rule]]
id = \"signed-agents\"
action = \"challenge\"
expression = 'http.request.uri.path eq \"/named\" and signpost.bot.signature eq \"verified\"'

[[custom_rule]]
id = \"everyone\"
action = \"challenge\"
expression = 'http.request.uri.path ne \"\"'
{}",
        zone("")
    );
    let p = compile(&dir, &text).unwrap();
    let d = decide_with(&p, "/page", "192.0.2.1", &Signed(true));
    assert_eq!(d.verdict, Verdict::Proxy);
    assert_eq!(
        d.challenge.as_ref().and_then(|n| n.bypass),
        Some(ChallengeBypass::Verified)
    );
    assert_eq!(
        challenged(&decide_with(&p, "/page", "192.0.2.1", &Signed(false))),
        Some(4)
    );
    // The rule that reads the signature names verified agents: challenged.
    let d = decide_with(&p, "/named", "192.0.2.1", &Signed(true));
    assert_eq!(
        (challenged(&d), d.rule_id.as_deref()),
        (Some(4), Some("signed-agents"))
    );
}

#[test]
fn crawl_control_challenges_impostors() {
    let dir = with_key("crawl");
    let text = format!(
        "{KEYS}{}",
        zone("[zone.crawl]\nimpostors = \"challenge\"\n")
    );
    let p = compile(&dir, &text).unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "user-agent",
        "Mozilla/5.0 (compatible; Googlebot/2.1)".parse().unwrap(),
    );
    let facts = RequestFacts {
        peer: "192.0.2.1".parse().unwrap(),
        host: "example.com",
        method: "GET",
        uri: "/page",
        tls: false,
        sni: None,
        headers: &headers,
    };
    let d = p.decide_with(&facts, &Signed(false), Instant::now());
    assert_eq!(d.identity.status, BotStatus::Failed);
    assert_eq!(challenged(&d), Some(4));
    assert_eq!(
        d.challenge.as_ref().map(|n| n.label()),
        Some("crawl_control")
    );
}

#[test]
fn a_trace_shows_the_challenge_phase() {
    let dir = with_key("trace");
    let rule = "[[custom_rule]]\nid = \"all\"\naction = \"challenge\"\ndifficulty = 5\nexpression = 'http.request.uri.path ne \"\"'\n";
    let p = compile(&dir, &format!("{KEYS}{rule}{}", zone(""))).unwrap();
    let headers = http::HeaderMap::new();
    let facts = RequestFacts {
        peer: "192.0.2.1".parse().unwrap(),
        host: "example.com",
        method: "GET",
        uri: "/",
        tls: false,
        sni: None,
        headers: &headers,
    };
    let t = p.trace(&facts, Instant::now());
    assert_eq!(t.stopped_at, Some("challenge"));
    let last = t.steps.last().unwrap();
    assert_eq!(last.action.as_deref(), Some("challenge"));
    assert!(
        last.action_parameters
            .contains(&("difficulty".into(), "5".into()))
    );
    assert_eq!(
        t.decision.verdict,
        Verdict::Challenge {
            difficulty: Difficulty::new(5).unwrap()
        }
    );
}

#[test]
fn wrong_challenge_settings_are_reported_in_place() {
    let dir = with_key("errors");
    let text = format!(
        "[challenge]
keys = [{{ id = 1, secret_file = \"k.key\" }}, {{ id = 1, secret_file = \"k.key\" }}]
[[custom_rule]]
id = \"a\"
action = \"challenge\"
difficulty = 9
expression = 'http.request.uri.path ne \"\"'
[[custom_rule]]
id = \"b\"
action = \"block\"
difficulty = 2
expression = 'http.request.uri.path ne \"\"'
[[rate_limit]]
id = \"r\"
action = \"challeng\"
period = \"1m\"
requests_per_period = 1
{}",
        zone(
            "[zone.challenge]\nipv4_prefix = 33\nclearance_ttl = \"3d\"\nlanguage = \"xx\"\nexempt_paths = [\"feed\"]\n"
        )
    );
    let e = compile(&dir, &text).unwrap_err();
    for want in [
        "p.toml:2:51: the current and previous challenge keys share an id",
        "p.toml:6:14: a difficulty is 0 to 8",
        "p.toml:11:14: only a rule with action = \"challenge\" takes a difficulty",
        "p.toml:15:10: unknown rate-limit action `challeng`",
        "p.toml:23:15: a prefix length is 0 to 32",
        "p.toml:24:17: at most 1day",
        "p.toml:25:12: `xx` is not a language",
        "p.toml:26:17: an exempt path",
    ] {
        assert!(e.contains(want), "{want} not in\n{e}");
    }
    let missing = compile(&dir, &format!("{}{}", "[[custom_rule]]\nid = \"a\"\naction = \"challenge\"\nexpression = 'http.request.uri.path ne \"\"'\n", zone(""))).unwrap_err();
    assert!(
        missing.contains("p.toml:3:10: a challenge needs the keys"),
        "{missing}"
    );
    let unreadable = compile(
        &dir,
        &format!(
            "[challenge]\nkeys = [{{ id = 1, secret_file = \"nope.key\" }}]\n{}",
            zone("")
        ),
    )
    .unwrap_err();
    assert!(
        unreadable.contains("p.toml:2:33: cannot read the challenge key"),
        "{unreadable}"
    );
}

#[test]
fn a_zone_under_attack_challenges_what_no_rule_asked_and_lets_verified_and_exempt_through() {
    let dir = with_key("under-attack");
    let text = format!(
        "{KEYS}[bots]\n
[[custom_rule]]
id = \"hard\"
action = \"challenge\"
difficulty = 6
expression = 'http.request.uri.path eq \"/hard\"'
{}",
        zone("[zone.challenge]\nunder_attack = true\ndifficulty = 3\n")
    );
    let p = compile(&dir, &text).unwrap();
    // Every request, at the zone's difficulty, under no rule.
    let d = decide(&p, "/page", "192.0.2.1");
    assert_eq!(
        (challenged(&d), d.rule_id.as_deref()),
        (Some(3), None),
        "{d:?}"
    );
    assert_eq!(
        d.challenge.as_ref().map(|n| n.label()),
        Some("under_attack")
    );
    // A rule's own challenge stands, with its difficulty.
    let d = decide(&p, "/hard", "192.0.2.1");
    assert_eq!(
        (challenged(&d), d.rule_id.as_deref()),
        (Some(6), Some("hard"))
    );
    // Verified clients and exempt paths pass.
    let d = decide_with(&p, "/page", "192.0.2.1", &Signed(true));
    assert_eq!(d.verdict, Verdict::Proxy);
    assert_eq!(
        d.challenge.as_ref().and_then(|n| n.bypass),
        Some(ChallengeBypass::Verified)
    );
    assert_eq!(
        decide(&p, "/robots.txt", "192.0.2.1").verdict,
        Verdict::Proxy
    );
    // Off, the same zone challenges nothing no rule asks for.
    let calm = text.replace("under_attack = true", "under_attack = false");
    let p = compile(&dir, &calm).unwrap();
    assert_eq!(decide(&p, "/page", "192.0.2.1").verdict, Verdict::Proxy);
    // Under attack needs the keys that sign clearances, like any challenge.
    let no_keys = zone("[zone.challenge]\nunder_attack = true\n");
    let err = compile(&dir, &no_keys).unwrap_err();
    assert!(err.contains("add a [challenge] table"), "{err}");
}
