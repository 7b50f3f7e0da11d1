//! Clearances and challenges: what passes, and every way one is refused.

use std::net::IpAddr;
use std::time::Duration;

use proptest::prelude::*;

use crate::*;

const NOW: u64 = 1_800_000_000;

fn ring(id: u8, fill: u8) -> KeyRing {
    KeyRing::new(Key::new(id, &[fill; 32]).unwrap(), None).unwrap()
}

fn visitor(addr: &str) -> Visitor<'static> {
    Visitor {
        zone: "shop.example",
        addr: addr.parse::<IpAddr>().unwrap(),
        user_agent: b"Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0",
    }
}

fn level(d: u8) -> Difficulty {
    Difficulty::new(d).unwrap()
}

fn solve(token: &str, difficulty: Difficulty) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| meets(&work_hash(token.as_bytes(), n.as_bytes()), difficulty))
        .unwrap()
}

/// A nonce that does not meet `difficulty` (but may meet less).
fn non_solution(token: &str, difficulty: Difficulty) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| !meets(&work_hash(token.as_bytes(), n.as_bytes()), difficulty))
        .unwrap()
}

// === clearance ===

#[test]
fn a_clearance_passes_for_its_client_until_it_expires() {
    let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
    let issued = ring.issue_clearance(&v, &settings, level(4), Method::Work, NOW);
    assert_eq!(issued.value.len(), COOKIE_VALUE_LEN);
    assert_eq!(issued.max_age, 1800);
    let ok = ring
        .verify_clearance(issued.value.as_bytes(), &v, &settings, level(4), NOW + 1799)
        .unwrap();
    assert_eq!(
        ok,
        Clearance {
            key_id: 1,
            expires: NOW + 1800,
            level: level(4),
            method: Method::Work
        }
    );
    assert_eq!(
        ring.verify_clearance(issued.value.as_bytes(), &v, &settings, level(4), NOW + 1800),
        Err(Rejected::Expired)
    );
}

#[test]
fn a_clearance_satisfies_its_level_and_below_only() {
    let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
    let value = ring
        .issue_clearance(&v, &settings, level(3), Method::Work, NOW)
        .value;
    for (required, ok) in [(0, true), (3, true), (4, false), (8, false)] {
        let verdict = ring.verify_clearance(value.as_bytes(), &v, &settings, level(required), NOW);
        assert_eq!(verdict.is_ok(), ok, "required {required}");
        if !ok {
            assert_eq!(verdict, Err(Rejected::LevelTooLow));
        }
    }
}

#[test]
fn a_clearance_is_bound_to_zone_prefix_and_user_agent() {
    let (ring, settings) = (ring(1, 7), Settings::default());
    let v = visitor("192.0.2.10");
    let value = ring
        .issue_clearance(&v, &settings, level(4), Method::Work, NOW)
        .value;
    let check = |other: &Visitor<'_>| {
        ring.verify_clearance(value.as_bytes(), other, &settings, level(4), NOW)
    };
    // Same /24: still this client (carrier-grade NAT, a roaming Wi-Fi).
    assert!(check(&visitor("192.0.2.200")).is_ok());
    // An IPv4-mapped IPv6 address is the same client.
    assert!(check(&visitor("::ffff:192.0.2.10")).is_ok());
    for other in [
        visitor("192.0.3.10"),
        visitor("2001:db8::1"),
        Visitor {
            zone: "other.example",
            ..v
        },
        Visitor {
            user_agent: b"curl/8.0",
            ..v
        },
    ] {
        assert_eq!(check(&other), Err(Rejected::Forged), "{other:?}");
    }
    // Other binding settings: the old cookie is refused (challenged once, not in a loop).
    let loose = Settings {
        binding: Binding::new(16, 48, true).unwrap(),
        ..Settings::default()
    };
    assert_eq!(
        ring.verify_clearance(value.as_bytes(), &v, &loose, level(4), NOW),
        Err(Rejected::Forged)
    );
}

#[test]
fn ipv6_binds_the_slash_64_by_default_and_the_user_agent_can_be_left_out() {
    let ring = ring(1, 7);
    let settings = Settings {
        binding: Binding::new(24, 64, false).unwrap(),
        ..Settings::default()
    };
    let v = visitor("2001:db8:1:2:aaaa::1");
    let value = ring
        .issue_clearance(&v, &settings, level(4), Method::Work, NOW)
        .value;
    let check = |addr: &str, ua: &'static [u8]| {
        let other = Visitor {
            user_agent: ua,
            ..visitor(addr)
        };
        ring.verify_clearance(value.as_bytes(), &other, &settings, level(4), NOW)
    };
    assert!(check("2001:db8:1:2:bbbb::9", b"another browser").is_ok());
    assert_eq!(check("2001:db8:1:3::1", b"x"), Err(Rejected::Forged));
    assert!(Binding::new(33, 64, true).is_err() && Binding::new(24, 129, true).is_err());
    // Prefix 0 binds no address at all.
    let anywhere = Settings {
        binding: Binding::new(0, 0, true).unwrap(),
        ..Settings::default()
    };
    let value = ring
        .issue_clearance(&v, &anywhere, level(4), Method::Work, NOW)
        .value;
    let far = Visitor {
        addr: "2a00::1".parse().unwrap(),
        ..v
    };
    assert!(
        ring.verify_clearance(value.as_bytes(), &far, &anywhere, level(4), NOW)
            .is_ok()
    );
}

#[test]
fn tampering_with_any_byte_is_refused() {
    let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
    let value = ring
        .issue_clearance(&v, &settings, level(4), Method::Work, NOW)
        .value;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for i in 0..value.len() {
        for &c in alphabet {
            let mut bytes = value.clone().into_bytes();
            if bytes[i] == c {
                continue;
            }
            bytes[i] = c;
            let verdict = ring.verify_clearance(&bytes, &v, &settings, level(0), NOW);
            assert!(verdict.is_err(), "byte {i} set to {}", c as char);
        }
    }
    // A longer expiry or a higher level written in by hand fails the MAC.
    let mut raw =
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &value).unwrap();
    raw[10] = 8;
    let forged = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &raw);
    assert_eq!(
        ring.verify_clearance(forged.as_bytes(), &v, &settings, level(8), NOW),
        Err(Rejected::Forged)
    );
}

#[test]
fn rotation_keeps_the_old_key_verifying_until_it_is_removed() {
    let (settings, v) = (Settings::default(), visitor("192.0.2.10"));
    let old = ring(1, 7);
    let old_cookie = old
        .issue_clearance(&v, &settings, level(4), Method::Work, NOW)
        .value;
    // During the rotation: key 2 signs, key 1 still verifies.
    let rotating = KeyRing::new(
        Key::new(2, &[9; 32]).unwrap(),
        Some(Key::new(1, &[7; 32]).unwrap()),
    )
    .unwrap();
    let ok = rotating
        .verify_clearance(old_cookie.as_bytes(), &v, &settings, level(4), NOW)
        .unwrap();
    assert_eq!(ok.key_id, 1);
    let new_cookie = rotating
        .issue_clearance(&v, &settings, level(4), Method::Work, NOW)
        .value;
    assert_eq!(
        rotating
            .verify_clearance(new_cookie.as_bytes(), &v, &settings, level(4), NOW)
            .unwrap()
            .key_id,
        2
    );
    // After it: key 1 is gone.
    let rotated = ring(2, 9);
    assert_eq!(
        rotated.verify_clearance(old_cookie.as_bytes(), &v, &settings, level(4), NOW),
        Err(Rejected::UnknownKey)
    );
    assert!(
        rotated
            .verify_clearance(new_cookie.as_bytes(), &v, &settings, level(4), NOW)
            .is_ok()
    );
    // A key of the same id but another secret: the MAC fails.
    assert_eq!(
        ring(1, 8).verify_clearance(old_cookie.as_bytes(), &v, &settings, level(4), NOW),
        Err(Rejected::Forged)
    );
}

#[test]
fn keys_are_checked() {
    assert_eq!(Key::new(1, &[0; 31]).unwrap_err(), KeyError::SecretTooShort);
    let same = KeyRing::new(
        Key::new(3, &[1; 32]).unwrap(),
        Some(Key::new(3, &[2; 32]).unwrap()),
    );
    assert_eq!(same.unwrap_err(), KeyError::SameId);
    let debug = format!("{:?}", Key::new(3, &[0xAB; 32]).unwrap());
    assert!(
        !debug.contains("171") && !debug.to_lowercase().contains("ab, "),
        "{debug}"
    );
}

#[test]
fn cookie_attributes_and_lookup() {
    let issued = IssuedClearance {
        value: "v".into(),
        max_age: 1800,
    };
    assert_eq!(
        issued.set_cookie(true),
        "signpost_clearance=v; Path=/; Max-Age=1800; HttpOnly; SameSite=Lax; Secure"
    );
    assert_eq!(
        set_cookie("v", 600, false),
        "signpost_clearance=v; Path=/; Max-Age=600; HttpOnly; SameSite=Lax"
    );
    assert_eq!(
        find_clearance(b"a=1; signpost_clearance=abc ;b=2"),
        Some(&b"abc"[..])
    );
    assert_eq!(find_clearance(b"signpost_clearance=x"), Some(&b"x"[..]));
    assert_eq!(
        find_clearance(b"signpost_clearancex=1; xsignpost_clearance=2"),
        None
    );
    assert_eq!(find_clearance(b""), None);
    assert_eq!(
        find_clearance(b"signpost_clearance=first; signpost_clearance=second"),
        Some(&b"first"[..])
    );
}

// === challenge ===

#[test]
fn a_solved_challenge_earns_its_difficulty() {
    let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("198.51.100.7"));
    let d = level(3);
    let token = ring.issue_challenge(&v, &settings, d, NOW, [1; 16]);
    assert_eq!(token.len(), TOKEN_LEN);
    let nonce = solve(&token, d);
    let solved = ring
        .check_solution(token.as_bytes(), nonce.as_bytes(), &v, &settings, NOW + 5)
        .unwrap();
    assert_eq!(
        solved,
        Solved {
            difficulty: d,
            method: Method::Work
        }
    );
    // Two challenges of the same second and client differ.
    assert_ne!(token, ring.issue_challenge(&v, &settings, d, NOW, [2; 16]));
}

#[test]
fn a_wrong_answer_or_a_tampered_difficulty_is_refused() {
    let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("198.51.100.7"));
    let token = ring.issue_challenge(&v, &settings, level(4), NOW, [1; 16]);
    let wrong = non_solution(&token, level(4));
    assert_eq!(
        ring.check_solution(token.as_bytes(), wrong.as_bytes(), &v, &settings, NOW),
        Err(Rejected::WrongAnswer)
    );
    // An answer to a lower difficulty is not enough (unless it happens to meet 4).
    let easy = solve(&token, level(1));
    if !meets(&work_hash(token.as_bytes(), easy.as_bytes()), level(4)) {
        assert_eq!(
            ring.check_solution(token.as_bytes(), easy.as_bytes(), &v, &settings, NOW),
            Err(Rejected::WrongAnswer)
        );
    }
    // Lowering the difficulty inside the token breaks its MAC.
    let mut raw =
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &token).unwrap();
    raw[10] = 0;
    let easier = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &raw);
    assert_eq!(
        ring.check_solution(easier.as_bytes(), b"0", &v, &settings, NOW),
        Err(Rejected::Forged)
    );
    // Nonces are canonical decimals.
    let right = solve(&token, level(4));
    for bad in [
        format!("0{right}"),
        format!("+{right}"),
        format!("{right} "),
        String::new(),
        "18446744073709551616".into(),
        "1".repeat(21),
    ] {
        assert_eq!(
            ring.check_solution(token.as_bytes(), bad.as_bytes(), &v, &settings, NOW),
            Err(Rejected::Malformed),
            "{bad:?}"
        );
    }
}

#[test]
fn a_challenge_is_bound_to_its_client_zone_and_lifetime() {
    let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("198.51.100.7"));
    let d = level(2);
    let token = ring.issue_challenge(&v, &settings, d, NOW, [1; 16]);
    let nonce = solve(&token, d);
    let check = |who: &Visitor<'_>, now: u64| {
        ring.check_solution(token.as_bytes(), nonce.as_bytes(), who, &settings, now)
    };
    assert!(check(&v, NOW + 299).is_ok());
    assert_eq!(check(&v, NOW + 300), Err(Rejected::Expired));
    // Issued more than a minute ahead of this edge's clock.
    assert_eq!(check(&v, NOW - 61), Err(Rejected::Expired));
    assert!(check(&v, NOW - 60).is_ok());
    assert_eq!(check(&visitor("203.0.113.7"), NOW), Err(Rejected::Forged));
    let other_zone = Visitor {
        zone: "blog.example",
        ..v
    };
    assert_eq!(check(&other_zone, NOW), Err(Rejected::Forged));
    // Challenges and clearances are signed with different derived keys: one is never the other.
    assert_eq!(
        ring.verify_clearance(token.as_bytes(), &v, &settings, level(0), NOW),
        Err(Rejected::Malformed)
    );
    // A removed key.
    assert_eq!(
        self::ring(2, 7).check_solution(token.as_bytes(), nonce.as_bytes(), &v, &settings, NOW),
        Err(Rejected::UnknownKey)
    );
}

#[test]
fn the_fallback_opens_after_its_delay_and_earns_a_shorter_clearance() {
    let (ring, v) = (ring(1, 7), visitor("198.51.100.7"));
    let settings = Settings {
        fallback_delay: Duration::from_secs(10),
        ..Settings::default()
    };
    let token = ring.issue_challenge(&v, &settings, level(4), NOW, [5; 16]);
    assert_eq!(
        ring.check_wait(token.as_bytes(), &v, &settings, NOW + 3),
        Err(Rejected::TooEarly { wait: 7 })
    );
    let solved = ring
        .check_wait(token.as_bytes(), &v, &settings, NOW + 10)
        .unwrap();
    assert_eq!(solved.method, Method::Wait);
    assert_eq!(
        ring.check_wait(token.as_bytes(), &v, &settings, NOW + 10 + 300),
        Err(Rejected::Expired)
    );
    assert_eq!(
        ring.check_wait(
            token.as_bytes(),
            &visitor("203.0.113.9"),
            &settings,
            NOW + 10
        ),
        Err(Rejected::Forged)
    );
    let cookie = ring.issue_clearance(&v, &settings, solved.difficulty, solved.method, NOW + 10);
    assert_eq!(cookie.max_age, 600);
    let cleared = ring
        .verify_clearance(cookie.value.as_bytes(), &v, &settings, level(4), NOW + 11)
        .unwrap();
    assert_eq!(cleared.method, Method::Wait);
}

#[test]
fn difficulty_bounds_and_hex_zeros() {
    assert_eq!(Difficulty::new(9), None);
    assert_eq!(Difficulty::default().get(), 4);
    assert_eq!(Difficulty::DEFAULT.expected_work(), 65_536);
    let mut hash = [0xffu8; 32];
    assert!(meets(&hash, level(0)) && !meets(&hash, level(1)));
    hash[0] = 0x0f;
    assert!(meets(&hash, level(1)) && !meets(&hash, level(2)));
    hash[0] = 0;
    hash[1] = 0x0a;
    assert!(meets(&hash, level(3)) && !meets(&hash, level(4)));
    assert!(meets(&[0; 32], Difficulty::MAX));
}

// === hostile bytes ===

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// No byte string verifies unless `issue_clearance` made it, and none panics.
    #[test]
    fn arbitrary_cookies_never_verify(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
        prop_assert!(ring.verify_clearance(&bytes, &v, &settings, level(0), NOW).is_err());
        prop_assert!(find_clearance(&bytes).is_none_or(|c| c.len() <= bytes.len()));
    }

    /// Texts of the exact length in the cookie's alphabet reach the MAC, and fail it.
    #[test]
    fn well_shaped_cookies_never_verify(text in "[A-Za-z0-9_-]{59}") {
        let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
        let verdict = ring.verify_clearance(text.as_bytes(), &v, &settings, level(0), NOW);
        prop_assert!(verdict.is_err());
    }

    /// Any token and nonce: never a panic, never a pass.
    #[test]
    fn arbitrary_answers_never_pass(
        token in proptest::collection::vec(any::<u8>(), 0..100),
        nonce in proptest::collection::vec(any::<u8>(), 0..24),
        shaped in "[A-Za-z0-9_-]{79}",
    ) {
        let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
        prop_assert!(ring.check_solution(&token, &nonce, &v, &settings, NOW).is_err());
        prop_assert!(ring.check_solution(shaped.as_bytes(), b"12", &v, &settings, NOW).is_err());
        prop_assert!(ring.check_wait(&token, &v, &settings, NOW + 60).is_err());
        prop_assert!(ring.check_wait(shaped.as_bytes(), &v, &settings, NOW + 60).is_err());
        let _ = Submission::parse(&token);
        for endpoint in [Endpoint::Verify, Endpoint::Wait] {
            let redeemed = ring.redeem(endpoint, &token, &v, &settings, NOW + 60, true);
            prop_assert!(
                matches!(redeemed, Redeemed::Refused { ref return_to, .. } if return_path(return_to).is_some()),
                "{redeemed:?}"
            );
        }
        let _ = Lang::from_accept_language(Some(&token));
    }

    /// A real cookie with one byte changed anywhere never verifies.
    #[test]
    fn altered_cookies_never_verify(at in 0usize..59, byte in any::<u8>()) {
        let (ring, settings, v) = (ring(1, 7), Settings::default(), visitor("192.0.2.10"));
        let mut value = ring.issue_clearance(&v, &settings, level(4), Method::Work, NOW).value.into_bytes();
        prop_assume!(value[at] != byte);
        value[at] = byte;
        prop_assert!(ring.verify_clearance(&value, &v, &settings, level(0), NOW).is_err());
    }
}
