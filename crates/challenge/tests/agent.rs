//! `Accept-Signature` asks for what the edge verifies: an agent that signs exactly as the header
//! asks (as REDbot does on a 403 carrying it) produces a signature `signpost-webbotauth` takes.

use http::{HeaderMap, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair};
use sfv::{BareItem, ListEntry, Parser};
use signpost_challenge::{ACCEPT_SIGNATURE, CF_MITIGATED, accept_signature};
use signpost_webbotauth::{Limits, Parsed, SignedRequest, jwk_thumbprint, parse};

const NOW: u64 = 1_800_000_000;
const AGENT: &str = "\"https://signer.example\"";

#[test]
fn accept_signature_is_a_structured_dictionary_asking_for_web_bot_auth() {
    assert_eq!(accept_signature(), ACCEPT_SIGNATURE);
    assert_eq!(CF_MITIGATED, "challenge");
    let dict = Parser::parse_dictionary(ACCEPT_SIGNATURE.as_bytes()).unwrap();
    assert_eq!(dict.len(), 1);
    let Some(ListEntry::InnerList(list)) = dict.get("sig1") else {
        panic!("sig1 is an inner list of components")
    };
    let components: Vec<String> = list
        .items
        .iter()
        .map(|item| match &item.bare_item {
            BareItem::String(s) => s.to_string(),
            other => panic!("component {other:?} is not a string"),
        })
        .collect();
    assert_eq!(components, ["@authority", "signature-agent"]);
    let param = |name: &str| list.params.get(name).cloned();
    for asked in ["created", "expires", "keyid"] {
        assert_eq!(param(asked), Some(BareItem::Boolean(true)), "{asked}");
    }
    assert!(matches!(param("tag"), Some(BareItem::String(s)) if s == "web-bot-auth"));
    assert!(matches!(param("alg"), Some(BareItem::String(s)) if s == "ed25519"));
    assert_eq!(param("nonce"), None);
}

/// Signs a request as the header asks: its components, its parameters (values for the booleans,
/// the given values for the rest), a legacy `Signature-Agent` string as REDbot sends it.
#[test]
fn a_signature_made_as_asked_is_one_the_edge_verifies() {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let public: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();

    let dict = Parser::parse_dictionary(ACCEPT_SIGNATURE.as_bytes()).unwrap();
    let (label, ListEntry::InnerList(list)) = dict.iter().next().unwrap() else {
        panic!("an inner list")
    };
    let mut covered = Vec::new();
    let mut lines = String::new();
    for item in &list.items {
        let BareItem::String(name) = &item.bare_item else {
            panic!("a string")
        };
        let value = match name.as_str() {
            "@authority" => "shop.example",
            "signature-agent" => AGENT,
            other => panic!("the header asks for {other}, which this signer cannot build"),
        };
        covered.push(format!("\"{name}\""));
        lines.push_str(&format!("\"{name}\": {value}\n"));
    }
    let mut params = format!("({})", covered.join(" "));
    for (name, value) in &list.params {
        let value = match (name.as_str(), value) {
            ("created", BareItem::Boolean(true)) => (NOW - 5).to_string(),
            ("expires", BareItem::Boolean(true)) => (NOW + 295).to_string(),
            ("keyid", BareItem::Boolean(true)) => format!("\"{}\"", jwk_thumbprint(&public)),
            (_, BareItem::String(s)) => format!("\"{s}\""),
            (other, v) => panic!("unexpected parameter {other}={v:?}"),
        };
        params.push_str(&format!(";{name}={value}"));
    }
    params.push_str(";nonce=\"bm9uY2Utb2YtYS1zaWduZXI=\"");
    let base = format!("{lines}\"@signature-params\": {params}");
    let signature = base64_standard(pair.sign(base.as_bytes()).as_ref());

    let mut headers = HeaderMap::new();
    headers.insert("signature-agent", HeaderValue::from_static(AGENT));
    headers.insert(
        "signature-input",
        HeaderValue::from_str(&format!("{label}={params}")).unwrap(),
    );
    headers.insert(
        "signature",
        HeaderValue::from_str(&format!("{label}=:{signature}:")).unwrap(),
    );
    let request = SignedRequest {
        method: "GET",
        scheme: "https",
        authority: "shop.example",
        target: "/challenged",
        headers: &headers,
    };
    let Parsed::Candidate(candidate) = parse(&request, NOW, &Limits::default()) else {
        panic!("the edge's verifier refused the signature the header asked for")
    };
    assert_eq!(candidate.keyid(), jwk_thumbprint(&public));
    assert_eq!(
        candidate.agent().map(|a| a.url.as_str()),
        Some("https://signer.example")
    );
    assert_eq!(candidate.verify(&public), Ok(()));
}

fn base64_standard(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
