//! Tests of crawl control: prices, the policy's `[zone.crawl]`, the exchange and the decision.

use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::CompiledPolicy;
use crate::bots::Behaviors;

fn usd(cents: u64) -> Price {
    Price::from_cents(cents).unwrap()
}

fn zone_crawl(table: &str) -> Result<Option<CrawlConfig>, String> {
    let text = format!(
        "[ledger]\ndir = \"ledger\"\n[[zone]]\nname = \"z\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:8000\"\n{table}"
    );
    CompiledPolicy::from_toml(&text, "t.toml", Path::new("."), None)
        .map(|p| p.zones()[0].crawl.clone())
        .map_err(|e| e.to_string())
}

#[test]
fn prices_parse_exactly() {
    for (text, cents) in [
        ("USD 0.01", 1),
        ("USD 3.14", 314),
        ("USD 2", 200),
        ("USD 2.5", 250),
        ("  USD 0.10\t", 10),
        ("USD 000.01", 1),
        ("USD 1000000.00", MAX_PRICE_CENTS),
        ("USD 0", 0),
    ] {
        assert_eq!(Price::parse(text.as_bytes()), Some(usd(cents)), "{text}");
    }
    for bad in [
        "",
        "USD",
        "USD ",
        "USD  0.01",
        "usd 0.01",
        "EUR 0.01",
        "USD -0.01",
        "USD +1",
        "USD 0.001",
        "USD 1e2",
        "USD 0.",
        "USD .5",
        "USD 1,00",
        "USD 1000000.01",
        "USD 999999999999",
        "USD 0.01, USD 0.02",
        "USD 0x10",
        "USD ٣",
        "0.01",
    ] {
        assert_eq!(Price::parse(bad.as_bytes()), None, "{bad:?}");
    }
    assert_eq!(usd(1).to_string(), "USD 0.01");
    assert_eq!(usd(314).to_string(), "USD 3.14");
    assert_eq!(usd(12_300).to_string(), "USD 123.00");
}

#[test]
fn the_most_restrictive_behavior_decides_unless_the_bot_is_named() {
    let config = zone_crawl(
        "[zone.crawl]\nsearch = \"allow\"\ntraining = \"charge\"\nagent = \"block\"\n[zone.crawl.bots]\n\"GPTBot\" = \"block\"\n\"Googlebot\" = \"allow\"\n",
    )
    .unwrap()
    .unwrap();
    let search = Behaviors::SEARCH;
    let search_training = Behaviors::SEARCH | Behaviors::TRAINING;
    let agent_training = Behaviors::AGENT | Behaviors::TRAINING;
    assert_eq!(config.action_for("Bingbot", search), CrawlAction::Allow);
    assert_eq!(
        config.action_for("Applebot", search_training),
        CrawlAction::Charge
    );
    assert_eq!(
        config.action_for("Other", agent_training),
        CrawlAction::Block
    );
    // An override wins over the behaviors, whichever way, and ignores case.
    assert_eq!(
        config.action_for("googlebot", search_training),
        CrawlAction::Allow
    );
    assert_eq!(config.action_for("GPTBot", search), CrawlAction::Block);
    assert_eq!(
        config.action_for("NoBehavior", Behaviors::default()),
        CrawlAction::Allow
    );
}

#[test]
fn schema_defaults_and_errors() {
    assert_eq!(zone_crawl("").unwrap(), None);
    assert_eq!(
        zone_crawl("[zone.crawl]\n").unwrap(),
        Some(CrawlConfig::default())
    );
    let c = zone_crawl(
        "[zone.crawl]\nprice = \"USD 0.05\"\nblock_status = 402\nmessage = \"License at https://example.com/licensing\"\nfree_paths = [\"/public/*\"]\nimpostors = \"allow\"\n",
    )
    .unwrap()
    .unwrap();
    assert_eq!(c.price, usd(5));
    assert_eq!(c.block_status, 402);
    assert_eq!(c.impostors, CrawlAction::Allow);
    assert!(c.message.unwrap().contains("licensing"));
    for (table, needle) in [
        ("search = \"deny\"", "`deny` is not a crawl action"),
        ("price = \"USD 0.00\"", "at least USD 0.01"),
        ("price = \"EUR 1\"", "is not a price"),
        ("block_status = 401", "402 or 403"),
        ("impostors = \"charge\"", "impostors cannot be charged"),
        ("free_paths = [\"public\"]", "free path"),
        ("message = \"\"", "message must be"),
        ("trainng = \"block\"", "unknown key `trainng`"),
    ] {
        let e = zone_crawl(&format!("[zone.crawl]\n{table}\n")).unwrap_err();
        assert!(
            e.contains("t.toml:8:") && e.contains(needle),
            "{table}: {e}"
        );
    }
    let e = zone_crawl("[zone.crawl.bots]\n\"GPTBot\" = \"block\"\n\"gptbot\" = \"allow\"\n")
        .unwrap_err();
    assert!(e.contains("listed twice"), "{e}");
    let e = zone_crawl("[zone.crawl.bots]\n\"GPTBot\" = \"maybe\"\n").unwrap_err();
    assert!(e.contains("t.toml:8:") && e.contains("`maybe`"), "{e}");
}

#[test]
fn free_paths() {
    let c = zone_crawl("[zone.crawl]\nfree_paths = [\"/public/*\", \"/*.css\", \"/exact\"]\n")
        .unwrap()
        .unwrap();
    for free in [
        "/robots.txt",
        "/sitemap.xml",
        "/security.txt",
        "/.well-known/security.txt",
        "/crawlers.json",
        "/%72obots.txt",
        "/public/",
        "/public/a/b",
        "/x/y.css",
        "/exact",
    ] {
        assert!(c.is_free_path(free), "{free}");
    }
    for charged in [
        "/",
        "/robots.txt.bak",
        "/publication",
        "/exact/",
        "/a.css.map",
        "/public",
    ] {
        assert!(!c.is_free_path(charged), "{charged}");
    }
    assert!(is_always_free("/robots.txt") && !is_always_free("/index.html"));
}

const SIGNED: PaymentAuth = PaymentAuth::Verified {
    covers_price_header: true,
};

fn request(exact: Option<&str>, max: Option<&str>, signature: PaymentAuth) -> RequestOutcome {
    let headers = PaymentHeaders {
        exact: exact.map(str::as_bytes),
        max: max.map(str::as_bytes),
    };
    charge_request(usd(1), headers, signature, false)
}

fn refused(outcome: RequestOutcome) -> (u16, &'static str, Option<String>) {
    match outcome {
        RequestOutcome::Refuse(r) => (
            r.status(),
            r.error.as_str(),
            r.advertise.map(|p| p.to_string()),
        ),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn request_half_every_error() {
    // The first request: 402 with the price.
    assert_eq!(
        refused(request(None, None, PaymentAuth::Absent)),
        (402, "MissingCrawlerPrice", Some("USD 0.01".into()))
    );
    assert_eq!(
        refused(request(Some("USD 0.01"), Some("USD 1"), SIGNED)),
        (400, "ConflictingPriceHeaders", None)
    );
    assert_eq!(
        refused(request(Some("USD 0.01"), None, PaymentAuth::Absent)),
        (400, "StrongAuthRequired", None)
    );
    assert_eq!(
        refused(request(
            None,
            Some("USD 0.01"),
            PaymentAuth::Verified {
                covers_price_header: false
            }
        )),
        (400, "StrongAuthRequired", None)
    );
    assert_eq!(
        refused(request(Some("USD 0.01"), None, PaymentAuth::Invalid)),
        (400, "InvalidSignature", None)
    );
    assert_eq!(
        refused(request(Some("0.01 USD"), None, SIGNED)),
        (400, "InvalidCrawlerPriceValue", None)
    );
    assert_eq!(
        refused(request(None, Some("USD 0.01, USD 0.02"), SIGNED)),
        (400, "InvalidCrawlerPriceValue", None)
    );
    assert_eq!(
        request(Some("USD 0.01"), None, SIGNED),
        RequestOutcome::Forward(Intent::Exact(usd(1)))
    );
    assert_eq!(
        request(None, Some("USD 5"), SIGNED),
        RequestOutcome::Forward(Intent::Max(usd(500)))
    );
    // A free path costs nothing, whatever was sent.
    let any = PaymentHeaders {
        exact: Some(b"junk"),
        max: Some(b"junk"),
    };
    assert_eq!(
        charge_request(usd(1), any, PaymentAuth::Invalid, true),
        RequestOutcome::Free
    );
}

#[test]
fn response_half_every_case() {
    let zone = usd(1);
    // Exact price equal to the zone's: charged the price.
    assert_eq!(
        settle(Intent::Exact(usd(1)), zone, 200, None),
        Settlement::Charge(usd(1))
    );
    // Max above: charged the price, not the max.
    assert_eq!(
        settle(Intent::Max(usd(100)), zone, 200, None),
        Settlement::Charge(usd(1))
    );
    // Exact that differs: another 402 with the price.
    let Settlement::Refuse(r) = settle(Intent::Exact(usd(2)), zone, 200, None) else {
        panic!()
    };
    assert_eq!(
        (r.status(), r.error.as_str(), r.advertise),
        (402, "InvalidCrawlerExactPrice", Some(zone))
    );
    // The origin's price decides: a max below it is refused with the origin's price.
    let Settlement::Refuse(r) = settle(Intent::Max(usd(100)), zone, 200, Some(b"USD 3.14")) else {
        panic!()
    };
    assert_eq!(
        (r.status(), r.error.as_str(), r.advertise),
        (402, "InvalidCrawlerMaxPrice", Some(usd(314)))
    );
    assert_eq!(
        settle(Intent::Max(usd(400)), zone, 200, Some(b"USD 3.14")),
        Settlement::Charge(usd(314))
    );
    assert_eq!(
        settle(Intent::Exact(usd(314)), zone, 200, Some(b"USD 3.14")),
        Settlement::Charge(usd(314))
    );
    // A bad origin price is the origin's fault.
    let Settlement::Refuse(r) = settle(Intent::Max(usd(100)), zone, 200, Some(b"three dollars"))
    else {
        panic!()
    };
    assert_eq!(
        (r.status(), r.error.as_str(), r.advertise),
        (502, "InvalidContentPrice", None)
    );
    // Only successes are charged; an origin's free page is free.
    for status in [301, 304, 404, 500, 503] {
        assert_eq!(
            settle(Intent::Max(usd(100)), zone, status, None),
            Settlement::NoCharge,
            "{status}"
        );
    }
    assert_eq!(
        settle(Intent::Max(usd(100)), zone, 200, Some(b"USD 0.00")),
        Settlement::NoCharge
    );
}

#[test]
fn payment_auth_from_the_identify_phase() {
    use crate::{Signature as Sig, SignatureOutcome};
    let exact = PaymentHeaders {
        exact: Some(b"USD 0.01"),
        max: None,
    };
    let max = PaymentHeaders {
        exact: None,
        max: Some(b"USD 1"),
    };
    let verified = |covered_headers| Sig {
        outcome: SignatureOutcome::Verified,
        covered_headers,
        ..Sig::default()
    };
    assert_eq!(PaymentAuth::of(&verified(1), exact), SIGNED);
    assert_eq!(PaymentAuth::of(&verified(2), max), SIGNED);
    let uncovered = PaymentAuth::Verified {
        covers_price_header: false,
    };
    assert_eq!(PaymentAuth::of(&verified(2), exact), uncovered);
    assert_eq!(PaymentAuth::of(&verified(0), max), uncovered);
    for (outcome, auth) in [
        (SignatureOutcome::Absent, PaymentAuth::Absent),
        (SignatureOutcome::Unverified, PaymentAuth::Absent),
        (SignatureOutcome::Invalid, PaymentAuth::Invalid),
    ] {
        let sig = Sig {
            outcome,
            covered_headers: 3,
            ..Sig::default()
        };
        assert_eq!(PaymentAuth::of(&sig, exact), auth, "{outcome:?}");
    }
}

#[test]
fn blocked_crawlers_cannot_pay() {
    let config = CrawlConfig {
        block_status: 402,
        ..CrawlConfig::default()
    };
    assert_eq!(
        block_answer(&config, PaymentHeaders::default()),
        (402, None)
    );
    let pay = PaymentHeaders {
        exact: Some(b"USD 100"),
        max: None,
    };
    assert_eq!(
        block_answer(&config, pay),
        (403, Some(CrawlerError::CrawlerForbidden))
    );
}

#[test]
fn codes_and_statuses_are_cloudflares() {
    use CrawlerError::*;
    for (e, status, code) in [
        (CrawlerForbidden, 403, 1020),
        (StrongAuthRequired, 400, 400),
        (InvalidSignature, 400, 400),
        (InvalidCrawlerPriceValue, 400, 400),
        (MissingCrawlerPrice, 402, 402),
        (PaymentFailed, 403, 1020),
        (InvalidCrawlerExactPrice, 402, 402),
        (InvalidCrawlerMaxPrice, 402, 402),
        (ConflictingPriceHeaders, 400, 400),
        (InvalidContentPrice, 502, 502),
        (InternalError, 500, 500),
    ] {
        assert_eq!((e.status(), e.code().get()), (status, code), "{e}");
        assert!(
            signpost_problem::lookup(e.code()).is_some(),
            "{e}: no catalog entry"
        );
    }
}

/// A reference matcher: tries every split, exponential but exact, for small inputs.
fn glob_reference(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob_reference(rest, &text[i..])),
        Some((c, rest)) => text.first() == Some(c) && glob_reference(rest, &text[1..]),
    }
}

proptest! {
    #[test]
    fn price_parsing_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
        if let Some(p) = Price::parse(&bytes) {
            prop_assert!(p.cents() <= MAX_PRICE_CENTS);
            prop_assert_eq!(Price::parse(p.to_string().as_bytes()), Some(p));
        }
    }

    #[test]
    fn prices_written_in_the_format_parse(cents in 0..=MAX_PRICE_CENTS) {
        let p = usd(cents);
        prop_assert_eq!(Price::parse(p.to_string().as_bytes()), Some(p));
    }

    #[test]
    fn never_charges_more_than_agreed(
        exact in proptest::option::of("(USD )?[0-9.]{0,6}|\\PC{0,8}"),
        max in proptest::option::of("(USD )?[0-9.]{0,6}|\\PC{0,8}"),
        origin in proptest::option::of("(USD )?[0-9.]{0,6}|\\PC{0,8}"),
        zone_cents in 1..1000u64,
        status in 100..600u16,
        signed in any::<bool>(),
    ) {
        let headers = PaymentHeaders { exact: exact.as_deref().map(str::as_bytes), max: max.as_deref().map(str::as_bytes) };
        let signature = if signed { SIGNED } else { PaymentAuth::Absent };
        match charge_request(usd(zone_cents), headers, signature, false) {
            RequestOutcome::Forward(intent) => {
                prop_assert!(signed);
                match settle(intent, usd(zone_cents), status, origin.as_deref().map(str::as_bytes)) {
                    Settlement::Charge(p) => {
                        prop_assert!(p <= intent.ceiling());
                        prop_assert!((200..300).contains(&status) && p.cents() > 0);
                        if let Intent::Exact(e) = intent { prop_assert_eq!(p, e); }
                    }
                    Settlement::Refuse(r) => prop_assert_eq!(r.advertise.is_some(), r.status() == 402),
                    Settlement::NoCharge => {}
                }
            }
            RequestOutcome::Refuse(r) => prop_assert_eq!(r.advertise.is_some(), r.status() == 402),
            RequestOutcome::Free => prop_assert!(false, "not a free path"),
        }
    }

    #[test]
    fn glob_matches_as_the_reference(pattern in "[ab*/]{0,8}", text in "[ab/]{0,10}") {
        prop_assert_eq!(glob_matches(&pattern, &text, true), glob_reference(pattern.as_bytes(), text.as_bytes()));
        let open = format!("{pattern}*");
        prop_assert_eq!(glob_matches(&pattern, &text, false), glob_reference(open.as_bytes(), text.as_bytes()));
    }
}

fn policy_error(text: &str) -> String {
    CompiledPolicy::from_toml(text, "t.toml", Path::new("."), None)
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string())
}

#[test]
fn a_zone_that_charges_needs_a_ledger_and_overrides_name_known_bots() {
    let zone = "[[zone]]\nname = \"z\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:8000\"\n";
    let e = policy_error(&format!(
        "{zone}[zone.crawl]\nsearch = \"allow\"\ntraining = \"charge\"\n"
    ));
    assert!(e.contains("t.toml:7:12:") && e.contains("[ledger]"), "{e}");
    let e = policy_error(&format!(
        "{zone}[zone.crawl]\n[zone.crawl.bots]\n\"GPTBot\" = \"charge\"\n"
    ));
    assert!(e.contains("t.toml:7:12:") && e.contains("[ledger]"), "{e}");
    // Without a charge, no ledger is needed.
    assert_eq!(
        policy_error(&format!("{zone}[zone.crawl]\ntraining = \"block\"\n")),
        ""
    );
    // An override must name a known bot (ignoring case), shipped or added.
    let e = policy_error(&format!(
        "{zone}[zone.crawl.bots]\n\"gptbot\" = \"block\"\n\"GTPBot\" = \"block\"\n"
    ));
    assert!(e.contains("t.toml:7:12:") && e.contains("`GTPBot`"), "{e}");
    assert!(!e.contains("`gptbot`"), "{e}");
    let added = "[[bot]]\nname = \"MyBot\"\noperator = \"Me\"\ncategory = \"AI Crawler\"\nbehaviors = [\"training\"]\nuser_agent = \"MyBot\"\n";
    assert_eq!(
        policy_error(&format!(
            "{added}{zone}[zone.crawl.bots]\n\"MyBot\" = \"block\"\n"
        )),
        ""
    );
}

fn identity(name: &str, status: crate::BotStatus, signed: bool) -> crate::Identity {
    let catalog = crate::bots::shipped_catalog();
    let bot = catalog.named(name).unwrap().clone();
    let signature = if signed {
        crate::Signature {
            outcome: crate::SignatureOutcome::Verified,
            covered_headers: 1,
            ..Default::default()
        }
    } else {
        crate::Signature::default()
    };
    crate::Identity {
        signature,
        bot: Some(bot),
        status,
    }
}

#[test]
fn control_acts_on_known_crawlers_only_and_never_on_always_free_paths() {
    use crate::{BotStatus, Method};
    let config = zone_crawl(
        "[zone.crawl]\nsearch = \"allow\"\ntraining = \"charge\"\nagent = \"block\"\nblock_status = 402\nmessage = \"Licensing: ask.\"\nfree_paths = [\"/free/*\"]\n",
    )
    .unwrap()
    .unwrap();
    let none = PaymentHeaders::default();
    let verified = BotStatus::Verified(Method::IpRange);
    // Nobody in particular: nothing to say.
    assert_eq!(
        control(&config, &crate::Identity::default(), "/", none),
        None
    );
    // Allowed.
    let step = control(&config, &identity("Bingbot", verified, false), "/", none).unwrap();
    assert_eq!(
        (step.action, &step.outcome),
        (CrawlAction::Allow, &CrawlOutcome::Allowed)
    );
    // Blocked, with the zone's status and message, also when only claimed.
    for status in [verified, BotStatus::Pending, BotStatus::Unverifiable] {
        let step = control(
            &config,
            &identity("ChatGPT-User", status, false),
            "/a",
            none,
        )
        .unwrap();
        let CrawlOutcome::Refused(r) = &step.outcome else {
            panic!("{step:?}")
        };
        assert_eq!((r.status, r.error, r.code()), (402, None, BLOCK_CODE));
        assert_eq!(r.detail, "Licensing: ask.");
    }
    // An impostor gets the zone's `impostors` (block by default).
    let step = control(
        &config,
        &identity("Bingbot", BotStatus::Failed, false),
        "/",
        none,
    )
    .unwrap();
    assert!(step.impostor);
    assert_eq!(step.action, CrawlAction::Block);
    // robots.txt and the other always-free paths: never refused, never charged.
    for path in ALWAYS_FREE_PATHS {
        assert_eq!(
            control(
                &config,
                &identity("ChatGPT-User", verified, false),
                path,
                none
            ),
            None
        );
        assert_eq!(
            control(&config, &identity("GPTBot", verified, true), path, none),
            None
        );
    }
    assert_eq!(
        control(
            &config,
            &identity("ChatGPT-User", verified, false),
            "/%72obots.txt",
            none
        ),
        None,
        "the path is compared normalised"
    );
    // A free path of the zone: not charged, but a block still applies.
    let step = control(
        &config,
        &identity("GPTBot", verified, true),
        "/free/x",
        none,
    )
    .unwrap();
    assert_eq!(step.outcome, CrawlOutcome::Free);
    assert!(matches!(
        control(
            &config,
            &identity("ChatGPT-User", verified, false),
            "/free/x",
            none
        )
        .unwrap()
        .outcome,
        CrawlOutcome::Refused(_)
    ));
    // Charged: the first 402 advertises the price; a signed exact price goes forward.
    let step = control(&config, &identity("GPTBot", verified, true), "/p", none).unwrap();
    let CrawlOutcome::Refused(r) = &step.outcome else {
        panic!("{step:?}")
    };
    assert_eq!(r.error, Some(CrawlerError::MissingCrawlerPrice));
    assert_eq!(r.advertise, Some(usd(1)));
    assert_eq!(r.code(), PAYMENT_REQUIRED_CODE);
    assert!(r.detail.contains("USD 0.01"));
    let exact = PaymentHeaders {
        exact: Some(b"USD 0.01"),
        max: None,
    };
    let step = control(&config, &identity("GPTBot", verified, true), "/p", exact).unwrap();
    assert!(step.charges());
    assert_eq!(
        step.outcome,
        CrawlOutcome::Forward {
            intent: Intent::Exact(usd(1)),
            price: usd(1)
        }
    );
}

#[test]
fn repeated_price_headers_are_joined_and_refused() {
    let mut headers = http::HeaderMap::new();
    assert_eq!(payment_header(&headers, "crawler-max-price"), None);
    headers.append("crawler-max-price", "USD 1".parse().unwrap());
    assert_eq!(
        payment_header(&headers, "crawler-max-price").as_deref(),
        Some(&b"USD 1"[..])
    );
    headers.append("crawler-max-price", "USD 2".parse().unwrap());
    let joined = payment_header(&headers, "crawler-max-price").unwrap();
    assert_eq!(&*joined, b"USD 1, USD 2");
    assert_eq!(Price::parse(&joined), None);
}

/// A request whose claim failed every check (an impostor) but that offers to pay where its
/// crawler is charged is answered as the exchange answers its signature: a legitimate crawler
/// with a signing bug is told to fix it (400), not to stop (403). Without a price header, where
/// its crawler is not charged, or with a signature that verified as someone else, it stays an
/// impostor.
#[test]
fn a_failed_claim_that_offers_to_pay_is_told_to_fix_its_signature() {
    use crate::{BotStatus, SignatureOutcome};
    let config = zone_crawl(
        "[zone.crawl]\ntraining = \"charge\"\nagent = \"block\"\nfree_paths = [\"/free/*\"]\n",
    )
    .unwrap()
    .unwrap();
    let with = |outcome: SignatureOutcome, reason: &'static str, name: &str| {
        let mut id = identity(name, BotStatus::Failed, false);
        id.signature.outcome = outcome;
        id.signature.reason = reason;
        id
    };
    let exact = PaymentHeaders {
        exact: Some(b"USD 0.01"),
        max: None,
    };
    let max = PaymentHeaders {
        exact: None,
        max: Some(b"USD 5"),
    };
    let refusal = |step: &CrawlStep| match &step.outcome {
        CrawlOutcome::Refused(r) => r.clone(),
        other => panic!("not refused: {other:?}"),
    };

    // Tampered or expired, with either price header: InvalidSignature, the reason in the detail.
    for (reason, headers) in [("bad_signature", exact), ("expired", max)] {
        let step = control(
            &config,
            &with(SignatureOutcome::Invalid, reason, "GPTBot"),
            "/p",
            headers,
        )
        .unwrap();
        let r = refusal(&step);
        assert_eq!(
            (r.status, r.error, r.code()),
            (400, Some(CrawlerError::InvalidSignature), Code::new(400)),
            "{reason}"
        );
        assert!(
            r.detail.contains("does not verify") && r.detail.contains(reason),
            "{}",
            r.detail
        );
        assert_eq!((step.action, step.impostor), (CrawlAction::Charge, true));
    }
    // No signature at all: StrongAuthRequired; one that could not be checked is no better.
    for outcome in [SignatureOutcome::Absent, SignatureOutcome::Unverified] {
        let step = control(&config, &with(outcome, "", "GPTBot"), "/p", exact).unwrap();
        assert_eq!(
            refusal(&step).error,
            Some(CrawlerError::StrongAuthRequired),
            "{outcome:?}"
        );
    }
    // Both price headers: the exchange's own order, ConflictingPriceHeaders first.
    let both = PaymentHeaders {
        exact: Some(b"USD 0.01"),
        max: Some(b"USD 5"),
    };
    let step = control(
        &config,
        &with(SignatureOutcome::Invalid, "expired", "GPTBot"),
        "/p",
        both,
    )
    .unwrap();
    assert_eq!(
        refusal(&step).error,
        Some(CrawlerError::ConflictingPriceHeaders)
    );

    // The impostor's answer stays: no price header (the zone's block, no crawler-error) ...
    let step = control(
        &config,
        &with(SignatureOutcome::Invalid, "expired", "GPTBot"),
        "/p",
        PaymentHeaders::default(),
    )
    .unwrap();
    assert_eq!((step.action, step.impostor), (CrawlAction::Block, true));
    assert_eq!((refusal(&step).status, refusal(&step).error), (403, None));
    // ... a crawler that is blocked, not charged ...
    let step = control(
        &config,
        &with(SignatureOutcome::Invalid, "expired", "ChatGPT-User"),
        "/p",
        exact,
    )
    .unwrap();
    assert_eq!(refusal(&step).error, Some(CrawlerError::CrawlerForbidden));
    // ... a free path, where nothing is charged ...
    let step = control(
        &config,
        &with(SignatureOutcome::Invalid, "expired", "GPTBot"),
        "/free/x",
        exact,
    )
    .unwrap();
    assert_eq!(refusal(&step).error, Some(CrawlerError::CrawlerForbidden));
    // ... and a signature that verified, as another agent than the crawler claimed.
    let mut signed_by_another = with(SignatureOutcome::Verified, "", "GPTBot");
    signed_by_another.signature.covered_headers = 1;
    let step = control(&config, &signed_by_another, "/p", exact).unwrap();
    assert_eq!(refusal(&step).error, Some(CrawlerError::CrawlerForbidden));
    assert_eq!(step.action, CrawlAction::Block);

    // A claim still pending with a signature that expired: the same 400, with its reason.
    let mut pending = with(SignatureOutcome::Invalid, "expired", "GPTBot");
    pending.status = BotStatus::Pending;
    let step = control(&config, &pending, "/p", exact).unwrap();
    let r = refusal(&step);
    assert_eq!(r.error, Some(CrawlerError::InvalidSignature));
    assert!(
        r.detail.ends_with("does not verify (expired)."),
        "{}",
        r.detail
    );
    assert!(!step.impostor);
}

#[test]
fn a_ledger_dir_is_checked_where_it_is_written_and_nothing_is_created() {
    // A policy read from the working directory (`signpost check policy.toml`): its base
    // directory is the empty path.
    let ledger = |dir: &str| {
        CompiledPolicy::from_toml(
            &format!("[ledger]\ndir = \"{dir}\"\n"),
            "t.toml",
            Path::new(""),
            None,
        )
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string())
    };
    assert_eq!(ledger("not-made-by-a-check/ledger"), "");
    assert!(!Path::new("not-made-by-a-check").exists());
    // The crate's manifest, a regular file (tests run in the crate's directory).
    let e = ledger("Cargo.toml");
    assert!(
        e.contains("t.toml:2:7: the ledger's dir `Cargo.toml` is not a directory"),
        "{e}"
    );
    let e = ledger("Cargo.toml/ledger");
    assert!(
        e.contains("t.toml:2:7: cannot create the ledger's dir"),
        "{e}"
    );
}
