//! The cost of a clearance check on every request of a challenged zone: a valid cookie (the
//! common case), a forged one (the same work, the MAC fails), and a malformed one (refused
//! before any hashing). Target: under 2 µs.
//!
//! `cargo bench -p signpost-challenge --bench clearance`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use signpost_challenge::{
    Difficulty, Key, KeyRing, Method, Settings, Visitor, find_clearance, meets, work_hash,
};

const NOW: u64 = 1_800_000_000;

fn bench(c: &mut Criterion) {
    let ring = KeyRing::new(
        Key::new(2, &[9; 32]).unwrap(),
        Some(Key::new(1, &[7; 32]).unwrap()),
    )
    .unwrap();
    let settings = Settings::default();
    let visitor = Visitor {
        zone: "shop.example",
        addr: "192.0.2.10".parse().unwrap(),
        // A real browser's User-Agent: its length is part of the cost.
        user_agent: b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36",
    };
    let value = ring
        .issue_clearance(&visitor, &settings, Difficulty::DEFAULT, Method::Work, NOW)
        .value;
    let header = format!("_ga=GA1.2.3.4; theme=dark; signpost_clearance={value}; lang=en");
    let mut forged = value.clone().into_bytes();
    forged[30] = if forged[30] == b'A' { b'B' } else { b'A' };

    let mut group = c.benchmark_group("clearance");
    group.bench_function("valid (cookie header to verdict)", |b| {
        b.iter(|| {
            let cookie = find_clearance(black_box(header.as_bytes())).unwrap();
            ring.verify_clearance(cookie, &visitor, &settings, Difficulty::DEFAULT, NOW + 60)
        })
    });
    group.bench_function("forged", |b| {
        b.iter(|| {
            ring.verify_clearance(
                black_box(&forged),
                &visitor,
                &settings,
                Difficulty::DEFAULT,
                NOW + 60,
            )
        })
    });
    group.bench_function("malformed", |b| {
        b.iter(|| {
            ring.verify_clearance(
                black_box(b"not-a-clearance"),
                &visitor,
                &settings,
                Difficulty::DEFAULT,
                NOW + 60,
            )
        })
    });
    group.finish();

    let token = ring.issue_challenge(&visitor, &settings, Difficulty::DEFAULT, NOW, [3; 16]);
    let nonce = (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            meets(
                &work_hash(token.as_bytes(), n.as_bytes()),
                Difficulty::DEFAULT,
            )
        })
        .unwrap();
    let mut group = c.benchmark_group("challenge");
    group.bench_function("issue", |b| {
        b.iter(|| {
            ring.issue_challenge(
                &visitor,
                &settings,
                Difficulty::DEFAULT,
                black_box(NOW),
                [3; 16],
            )
        })
    });
    group.bench_function("check a solution", |b| {
        b.iter(|| {
            ring.check_solution(
                black_box(token.as_bytes()),
                nonce.as_bytes(),
                &visitor,
                &settings,
                NOW + 1,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
