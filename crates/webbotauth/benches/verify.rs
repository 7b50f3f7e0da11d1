//! The cost of Web Bot Auth per request: the cheap checks and signature base alone (what an
//! invalid or unknown-key signature costs), and with the Ed25519 verification; and an unsigned
//! request, which pays one header lookup.
//!
//! `cargo bench -p signpost-webbotauth --bench verify`

use std::hint::black_box;

use base64::Engine as _;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair};
use signpost_webbotauth::{Limits, Parsed, SignedRequest, jwk_thumbprint, parse};

const NOW: u64 = 1_800_000_000;

fn signed_headers() -> (HeaderMap, [u8; 32]) {
    let rng = ring::rand::SystemRandom::new();
    let pair =
        Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref()).unwrap();
    let public: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
    let params = format!(
        r#"("@method" "@authority" "@path" "signature-agent";key="sig1");created={};expires={};keyid="{}";tag="web-bot-auth""#,
        NOW - 5,
        NOW + 55,
        jwk_thumbprint(&public)
    );
    let base = format!(
        "\"@method\": GET\n\"@authority\": shop.example\n\"@path\": /articles/1\n\"signature-agent\";key=\"sig1\": \"https://signer.example\"\n\"@signature-params\": {params}"
    );
    let signature = base64::engine::general_purpose::STANDARD.encode(pair.sign(base.as_bytes()));
    let mut headers = HeaderMap::new();
    headers.insert("user-agent", HeaderValue::from_static("ExampleBot/1.0"));
    headers.insert("accept", HeaderValue::from_static("text/html"));
    headers.insert(
        "signature-agent",
        HeaderValue::from_static("sig1=\"https://signer.example\""),
    );
    headers.insert(
        "signature-input",
        HeaderValue::from_str(&format!("sig1={params}")).unwrap(),
    );
    headers.insert(
        "signature",
        HeaderValue::from_str(&format!("sig1=:{signature}:")).unwrap(),
    );
    (headers, public)
}

fn request(headers: &HeaderMap) -> SignedRequest<'_> {
    SignedRequest {
        method: "GET",
        scheme: "https",
        authority: "shop.example",
        target: "/articles/1",
        headers,
    }
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let (headers, public) = signed_headers();
    let mut unsigned = headers.clone();
    unsigned.remove("signature-input");
    c.bench_function("unsigned request", |b| {
        b.iter(|| {
            assert!(matches!(
                parse(black_box(&request(&unsigned)), NOW, &limits),
                Parsed::Absent
            ))
        })
    });
    c.bench_function("parse (cheap checks and signature base)", |b| {
        b.iter(|| {
            assert!(matches!(
                parse(black_box(&request(&headers)), NOW, &limits),
                Parsed::Candidate(_)
            ))
        })
    });
    c.bench_function("parse and verify", |b| {
        b.iter(|| {
            let Parsed::Candidate(candidate) = parse(black_box(&request(&headers)), NOW, &limits)
            else {
                panic!("a candidate")
            };
            candidate.verify(&public).unwrap();
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
