use std::net::IpAddr;
use std::sync::Arc;

use super::*;
use crate::identity::{
    BotStatus, Evidence, Method, ReverseDnsName, Signature, SignatureOutcome, identify,
};

#[test]
fn shipped_catalog_parses_without_a_problem() {
    let mut d = Diagnostics::new(SHIPPED, "bots/catalog.toml");
    let bots = shipped_into(&mut d);
    assert!(!d.has_errors(), "{}", d.into_error());
    assert!(bots.len() >= 15, "{} bots", bots.len());
    for bot in &bots {
        assert!(CATEGORIES.contains(&&*bot.category), "{}", bot.name);
        assert!(
            bot.user_agent.is_some(),
            "{} has no User-Agent token",
            bot.name
        );
    }
    let catalog = shipped_catalog();
    assert!(catalog.named("GPTBot").is_some());
    assert!(
        catalog
            .ip_range_urls()
            .iter()
            .any(|u| &**u == "https://openai.com/gptbot.json")
    );
}

#[test]
fn user_agent_claims_are_found_anywhere_in_any_case() {
    let c = shipped_catalog();
    let name = |ua: &str| c.claimed_by(ua.as_bytes()).map(|b| b.name.to_string());
    assert_eq!(
        name("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)").as_deref(),
        Some("Googlebot")
    );
    assert_eq!(name("mozilla/5.0 gptbot/1.2").as_deref(), Some("GPTBot"));
    // The longest token wins where two start at one place.
    assert_eq!(
        name("Claude-SearchBot/1.0").as_deref(),
        Some("Claude-SearchBot")
    );
    assert_eq!(name("Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0"), None);
    assert_eq!(name(""), None);
    // Bytes that are not UTF-8 around a token do not hide it.
    assert_eq!(
        c.claimed_by(b"\xff\xfeGPTBot\xc3").map(|b| &*b.name),
        Some("GPTBot")
    );
}

proptest::proptest! {
    /// Over arbitrary bytes around a token, in any ASCII case, and User-Agents longer than the
    /// stack buffer: the bot found is the one a case-blind search of each token finds first
    /// and longest.
    #[test]
    fn claims_ignore_ascii_case_whatever_the_bytes(
        before in proptest::collection::vec(proptest::num::u8::ANY, 0..700),
        after in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        pick in 0usize..1000,
        flips in proptest::collection::vec(proptest::bool::ANY, 0..40),
    ) {
        let c = shipped_catalog();
        let bots: Vec<&Arc<Bot>> = c.bots().iter().filter(|b| b.user_agent.is_some()).collect();
        let bot = bots[pick % bots.len()];
        let token: Vec<u8> = bot
            .user_agent
            .as_deref()
            .unwrap()
            .bytes()
            .zip(flips.iter().chain(std::iter::repeat(&false)))
            .map(|(b, &flip)| if flip { b.to_ascii_uppercase() } else { b.to_ascii_lowercase() })
            .collect();
        let ua: Vec<u8> = [&before[..], &token[..], &after[..]].concat();
        // The reference: leftmost, then longest, of every token found case-blind.
        let lower = ua.to_ascii_lowercase();
        let expected = bots
            .iter()
            .filter_map(|b| {
                let t = b.user_agent.as_deref()?.to_ascii_lowercase();
                let at = lower.windows(t.len()).position(|w| w == t.as_bytes())?;
                Some((at, std::cmp::Reverse(t.len()), &*b.name))
            })
            .min()
            .map(|(_, _, name)| name);
        proptest::prop_assert_eq!(c.claimed_by(&ua).map(|b| &*b.name), expected);
    }
}

proptest::proptest! {
    /// The skip table never hides a token: over tokens and User-Agents drawn from a few bytes
    /// (so that tokens overlap, share prefixes and nearly match; letters in both cases, bytes
    /// that are not ASCII, one-byte tokens that leave nothing to skip), the token found is the
    /// one a single pass of the automaton finds, pattern for pattern.
    #[test]
    fn the_skip_table_finds_what_the_automaton_finds(
        tokens in proptest::collection::vec("[aAbBc\\-é]{1,6}", 1..8),
        haystack in proptest::collection::vec(
            proptest::sample::select(vec![b'a', b'A', b'b', b'B', b'c', b'-', 0xc3, 0xa9, b' ']),
            0..80,
        ),
    ) {
        let search = TokenSearch::new(&tokens).unwrap();
        let reference = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::LeftmostLongest)
            .build(&tokens)
            .unwrap();
        let expected = reference.find(&haystack[..]).map(|m| m.pattern().as_usize());
        proptest::prop_assert_eq!(search.find(&haystack), expected);
    }
}

#[test]
fn the_shipped_catalog_is_searched_with_its_skip_table() {
    let c = shipped_catalog();
    assert!(c.user_agents.as_ref().is_some_and(|s| s.skip.is_some()));
}

fn policy_catalog(text: &str) -> Result<BotCatalog, String> {
    #[derive(serde::Deserialize)]
    struct F {
        #[serde(default)]
        bot: Vec<Spanned<BotFile>>,
    }
    let f: F = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut d = Diagnostics::new(text, "policy.toml");
    let catalog = validate(&f.bot, &mut d);
    if d.has_errors() {
        return Err(d.into_error().to_string());
    }
    Ok(catalog)
}

#[test]
fn a_policy_adds_changes_and_removes_bots() {
    let c = policy_catalog(
        r#"
        [[bot]]
        name = "ExampleBot"
        operator = "Example"
        category = "AI Crawler"
        behaviors = ["training", "search"]
        user_agent = "ExampleBot"
        web_bot_auth = ["https://Bot.Example:443/"]
        ip_ranges = ["192.0.2.0/24"]

        [[bot]]
        name = "GPTBot"
        behaviors = ["training", "agent"]

        [[bot]]
        name = "Bytespider"
        remove = true
        "#,
    )
    .unwrap();
    let example = c.named("ExampleBot").unwrap();
    assert_eq!(example.behaviors.as_str(), "search training");
    assert_eq!(&*example.web_bot_auth[0], "https://bot.example");
    assert!(c.signing_from("https://bot.example").is_some());
    assert_eq!(
        c.named("GPTBot").unwrap().behaviors.as_str(),
        "agent training"
    );
    assert_eq!(
        &*c.named("GPTBot").unwrap().operator,
        "OpenAI",
        "unchanged fields kept"
    );
    assert!(c.named("Bytespider").is_none());
    assert!(c.claimed_by(b"Bytespider").is_none());
}

#[test]
fn bad_bot_entries_are_refused_at_their_place() {
    for (text, expect) in [
        (
            "[[bot]]\nname = \"X\"\nuser_agent = \"XBot\"\n",
            "needs `category` and `behaviors`",
        ),
        (
            "[[bot]]\nname = \"X\"\ncategory = \"AI Crawlr\"\nbehaviors = []\n",
            "did you mean `AI Crawler`?",
        ),
        (
            "[[bot]]\nname = \"X\"\ncategory = \"Other\"\nbehaviors = [\"scraping\"]\n",
            "not a behavior",
        ),
        (
            "[[bot]]\nname = \"X\"\ncategory = \"Other\"\nbehaviors = []\nuser_agent = \"python-requests/2\"\n",
            "HTTP library",
        ),
        (
            "[[bot]]\nname = \"X\"\ncategory = \"Other\"\nbehaviors = []\nweb_bot_auth = [\"http://x.example\"]\n",
            "https URL",
        ),
        (
            "[[bot]]\nname = \"Nope\"\nremove = true\n",
            "nothing to remove",
        ),
        (
            "[[bot]]\nname = \"GPTBot\"\nrdns = [\"com\"]\n",
            "at least two labels",
        ),
    ] {
        let err = policy_catalog(text).unwrap_err();
        assert!(err.contains(expect), "{text}\n{err}");
        assert!(err.contains("policy.toml:"), "{err}");
    }
}

/// Evidence made up for a test.
#[derive(Default)]
struct Given {
    signature: Signature,
    lists: Vec<(&'static str, IpAddr)>,
    loaded: bool,
    rdns: Option<ReverseDnsName>,
}

impl Evidence for Given {
    fn signature(&self, _: IpAddr) -> Signature {
        self.signature.clone()
    }
    fn in_ip_list(&self, url: &str, ip: IpAddr) -> Option<bool> {
        self.loaded
            .then(|| self.lists.iter().any(|(u, i)| *u == url && *i == ip))
    }
    fn reverse_dns(&self, _: IpAddr) -> ReverseDnsName {
        self.rdns.clone().unwrap_or(ReverseDnsName::Pending)
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_claim_is_verified_by_each_method_and_failed_only_when_every_one_answers_no() {
    let c = shipped_catalog();
    let googlebot = b"Mozilla/5.0 (compatible; Googlebot/2.1)";
    let crawler = ip("66.249.66.1");
    // Nothing known yet: pending, not an impostor.
    let id = identify(&c, googlebot, crawler, &Given::default());
    assert_eq!(id.status, BotStatus::Pending);
    assert!(!id.claim_failed());
    assert_eq!(id.bot.as_deref().map(|b| &*b.name), Some("Googlebot"));
    // Reverse DNS confirms a name under googlebot.com.
    let dns = Given {
        rdns: Some(ReverseDnsName::Confirmed(Arc::from(
            "crawl-66-249-66-1.googlebot.com",
        ))),
        loaded: true,
        ..Given::default()
    };
    let id = identify(&c, googlebot, crawler, &dns);
    assert_eq!(id.status, BotStatus::Verified(Method::ReverseDns));
    assert_eq!(id.verified_bot().map(|b| &*b.name), Some("Googlebot"));
    // A name that merely ends in the same letters is not under the suffix.
    let evil = Given {
        rdns: Some(ReverseDnsName::Confirmed(Arc::from(
            "crawl.evilgooglebot.com",
        ))),
        loaded: true,
        ..Given::default()
    };
    assert_eq!(
        identify(&c, googlebot, crawler, &evil).status,
        BotStatus::Failed
    );
    // The published list says yes.
    let listed = Given {
        lists: vec![(
            "https://developers.google.com/static/search/apis/ipranges/googlebot.json",
            crawler,
        )],
        loaded: true,
        rdns: Some(ReverseDnsName::Unconfirmed),
        ..Given::default()
    };
    assert_eq!(
        identify(&c, googlebot, crawler, &listed).status,
        BotStatus::Verified(Method::IpRange)
    );
    // Every method answers no: an impostor.
    let no = Given {
        loaded: true,
        rdns: Some(ReverseDnsName::Unconfirmed),
        ..Given::default()
    };
    let id = identify(&c, googlebot, ip("203.0.113.9"), &no);
    assert_eq!(id.status, BotStatus::Failed);
    assert!(id.claim_failed() && id.verified_bot().is_none());
    // A bot that cannot be verified is claimed, never failed.
    let id = identify(&c, b"ClaudeBot/1.0", ip("203.0.113.9"), &no);
    assert_eq!(id.status, BotStatus::Unverifiable);
    // No claim at all.
    let id = identify(&c, b"curl/8.0", ip("203.0.113.9"), &no);
    assert_eq!(id.status, BotStatus::None);
    assert!(id.bot.is_none());
}

#[test]
fn a_verified_signature_from_a_bots_directory_is_that_bot_whatever_the_user_agent() {
    let c = shipped_catalog();
    let signed = Given {
        signature: Signature {
            outcome: SignatureOutcome::Verified,
            agent: Some(Arc::from("https://chatgpt.com")),
            keyid: Some(Arc::from("k1")),
            ..Signature::default()
        },
        loaded: true,
        rdns: Some(ReverseDnsName::Unconfirmed),
        ..Given::default()
    };
    let id = identify(&c, b"Mozilla/5.0 Firefox", ip("203.0.113.9"), &signed);
    assert_eq!(id.status, BotStatus::Verified(Method::WebBotAuth));
    assert_eq!(id.verified_bot().map(|b| &*b.name), Some("ChatGPT-User"));
    assert_eq!(id.agent_key(), Some(("https://chatgpt.com", "k1")));
    // A directory no bot signs from: a signed agent, but no known bot.
    let other = Given {
        signature: Signature {
            outcome: SignatureOutcome::Verified,
            agent: Some(Arc::from("https://agent.example")),
            keyid: Some(Arc::from("k2")),
            ..Signature::default()
        },
        ..Given::default()
    };
    let id = identify(&c, b"Mozilla/5.0", ip("203.0.113.9"), &other);
    assert!(id.signed() && id.verified_bot().is_none());
    assert_eq!(id.agent_key(), Some(("https://agent.example", "k2")));
    // A signature that cannot be checked yet keeps a ChatGPT-User claim pending.
    let unknown = Given {
        signature: Signature {
            outcome: SignatureOutcome::Unverified,
            ..Signature::default()
        },
        loaded: true,
        ..Given::default()
    };
    let id = identify(&c, b"ChatGPT-User/1.0", ip("203.0.113.9"), &unknown);
    assert_eq!(id.status, BotStatus::Pending);
}

#[test]
fn suffixes_match_at_label_boundaries_only() {
    let s: Vec<Box<str>> = vec!["googlebot.com".into()];
    assert!(crate::identity::host_in_suffixes("googlebot.com", &s));
    assert!(crate::identity::host_in_suffixes("a.b.GoogleBot.com.", &s));
    assert!(!crate::identity::host_in_suffixes("evilgooglebot.com", &s));
    assert!(!crate::identity::host_in_suffixes(
        "googlebot.com.evil.net",
        &s
    ));
    assert!(!crate::identity::host_in_suffixes("", &s));
}

#[test]
fn agent_urls_normalise() {
    assert_eq!(
        normalize_agent("https://Bot.Example:443/"),
        "https://bot.example"
    );
    assert_eq!(
        normalize_agent(" https://bot.example:8443 "),
        "https://bot.example:8443"
    );
    assert_eq!(
        normalize_agent("https://bot.example/keys/jwks.json"),
        "https://bot.example/keys/jwks.json"
    );
}
