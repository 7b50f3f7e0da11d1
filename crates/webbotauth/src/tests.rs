//! The published test vectors: RFC 9421 Appendix B.2.6 and the draft's Ed25519 vectors. They are
//! signed with the RFC 9421 example key, which the public `verify` refuses, so these tests reach
//! the Ed25519 check underneath it.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use sfv::{ListEntry, Parser};

use super::*;

fn headers(fields: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        map.append(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

fn signature_bytes(b64: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
}

/// RFC 9421 B.2.6: the signature base is built byte for byte as the RFC prints it, and the
/// signature verifies with the example key.
#[test]
fn rfc9421_b26_signature_base_and_signature() {
    let headers = headers(&[
        ("host", "example.com"),
        ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
        ("content-type", "application/json"),
        ("content-length", "18"),
    ]);
    let req = SignedRequest {
        method: "POST",
        scheme: "https",
        authority: "example.com",
        target: "/foo?param=Value&Pet=dog",
        headers: &headers,
    };
    let input = Parser::parse_dictionary(
        br#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#,
    )
    .unwrap();
    let Some(ListEntry::InnerList(list)) = input.get("sig-b26") else {
        panic!("an inner list")
    };
    let components: Vec<Component> = list
        .items
        .iter()
        .map(|i| parse::component(i).unwrap())
        .collect();
    let base = parse::signature_base(&req, list, &components).unwrap();
    let expected = concat!(
        "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n",
        "\"@method\": POST\n",
        "\"@path\": /foo\n",
        "\"@authority\": example.com\n",
        "\"content-type\": application/json\n",
        "\"content-length\": 18\n",
        "\"@signature-params\": (\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"",
    );
    assert_eq!(String::from_utf8(base.clone()).unwrap(), expected);
    let signature = signature_bytes(
        "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==",
    );
    assert_eq!(
        verify_ed25519(&RFC9421_TEST_KEY_ED25519, &base, &signature),
        Ok(())
    );
    let mut tampered = base.clone();
    tampered[10] ^= 1;
    assert_eq!(
        verify_ed25519(&RFC9421_TEST_KEY_ED25519, &tampered, &signature),
        Err(Invalid::BadSignature)
    );
    // Without the web-bot-auth tag the profile refuses it before any key is looked at.
    let mut signed = headers.clone();
    signed.insert(
        "signature-input",
        HeaderValue::from_static(
            r#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#,
        ),
    );
    signed.insert(
        "signature",
        HeaderValue::from_static(
            "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:",
        ),
    );
    let req = SignedRequest {
        headers: &signed,
        ..req
    };
    assert!(matches!(
        parse(&req, 1618884473, &Limits::default()),
        Parsed::Invalid(Invalid::WrongTag)
    ));
}

const CREATED: u64 = 1735689600;

fn draft_request(headers: &HeaderMap) -> SignedRequest<'_> {
    SignedRequest {
        method: "GET",
        scheme: "https",
        authority: "example.com",
        target: "/",
        headers,
    }
}

/// The draft's Ed25519 vector, dictionary form: the profile accepts it (with a validity long
/// enough for its 100-year `expires`), the Ed25519 check passes, and the public `verify` refuses
/// the key because it is the published example key.
#[test]
fn draft_ed25519_vector_dictionary_form() {
    let headers = headers(&[
        (
            "signature-agent",
            r#"agent2="https://signature-agent.test""#,
        ),
        (
            "signature-input",
            r#"sig2=("@authority" "signature-agent";key="agent2");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=4889289600;nonce="n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==";tag="web-bot-auth""#,
        ),
        (
            "signature",
            "sig2=:RdNFx5Bj6au3YgAMQL/RzmUlZE8QZLIaXGRpw985hWnwPfMxT228NMk6ehRS1PSl4e8PhbNZACSanGdhEwYCCg==:",
        ),
    ]);
    let limits = Limits {
        max_validity: Duration::from_secs(u64::MAX / 2),
        ..Limits::default()
    };
    let Parsed::Candidate(candidate) = parse(&draft_request(&headers), CREATED + 10, &limits)
    else {
        panic!("the draft's vector is a candidate")
    };
    assert_eq!(candidate.keyid(), jwk_thumbprint(&RFC9421_TEST_KEY_ED25519));
    assert_eq!(
        candidate.agent(),
        Some(&Agent {
            url: "https://signature-agent.test".into(),
            kind: AgentKind::Directory,
            legacy: false
        })
    );
    assert_eq!(
        verify_ed25519(
            &RFC9421_TEST_KEY_ED25519,
            candidate.signature_base(),
            candidate.signature()
        ),
        Ok(())
    );
    assert_eq!(
        candidate.verify(&RFC9421_TEST_KEY_ED25519),
        Err(Invalid::TestKey)
    );
    // With the default limits its validity is refused outright.
    assert!(matches!(
        parse(&draft_request(&headers), CREATED + 10, &Limits::default()),
        Parsed::Invalid(Invalid::ValidityTooLong)
    ));
}

/// The draft's legacy vector: a bare-string `Signature-Agent` covered whole, 1 hour of validity.
#[test]
fn draft_ed25519_vector_legacy_string() {
    let headers = headers(&[
        ("signature-agent", r#""https://signature-agent.test""#),
        (
            "signature-input",
            r#"sig2=("@authority" "signature-agent");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==";tag="web-bot-auth""#,
        ),
        (
            "signature",
            "sig2=:jdq0SqOwHdyHr9+r5jw3iYZH6aNGKijYp/EstF4RQTQdi5N5YYKrD+mCT1HA1nZDsi6nJKuHxUi/5Syp3rLWBA==:",
        ),
    ]);
    let Parsed::Candidate(candidate) =
        parse(&draft_request(&headers), CREATED + 10, &Limits::default())
    else {
        panic!("the draft's legacy vector is a candidate")
    };
    assert!(candidate.agent().unwrap().legacy);
    assert_eq!(
        verify_ed25519(
            &RFC9421_TEST_KEY_ED25519,
            candidate.signature_base(),
            candidate.signature()
        ),
        Ok(())
    );
    assert_eq!(
        candidate.verify(&RFC9421_TEST_KEY_ED25519),
        Err(Invalid::TestKey)
    );
    // Past its hour (and the skew) it has expired.
    assert!(matches!(
        parse(
            &draft_request(&headers),
            1735693200 + 61,
            &Limits::default()
        ),
        Parsed::Invalid(Invalid::Expired)
    ));
}

/// RFC 8037 Appendix A.3's thumbprint, and the RFC 9421 example key's (the draft's `keyid`).
#[test]
fn thumbprints() {
    use base64::Engine as _;
    let x: [u8; 32] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        jwk_thumbprint(&x),
        "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
    );
    assert_eq!(
        jwk_thumbprint(&RFC9421_TEST_KEY_ED25519),
        "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"
    );
    assert!(is_known_test_key(&RFC9421_TEST_KEY_ED25519));
    assert!(!is_known_test_key(&x));
}
