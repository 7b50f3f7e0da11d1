//! Verifies one clearance N times (N from the first argument, default 1,000,000), for counting
//! a check's instructions without a clock: run it under callgrind with two values of N and
//! divide the difference, or under `perf stat -e instructions`.
//!
//! `cargo build --release -p signpost-challenge --example clearance_loop`

use std::hint::black_box;

use signpost_challenge::{Difficulty, Key, KeyRing, Method, Settings, Visitor, find_clearance};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let ring = KeyRing::new(Key::new(2, &[9; 32]).unwrap(), None).unwrap();
    let settings = Settings::default();
    let visitor = Visitor {
        zone: "shop.example",
        addr: "192.0.2.10".parse().unwrap(),
        user_agent: b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36",
    };
    let now = 1_800_000_000;
    let value = ring
        .issue_clearance(&visitor, &settings, Difficulty::DEFAULT, Method::Work, now)
        .value;
    let header = format!("_ga=GA1.2.3.4; theme=dark; signpost_clearance={value}; lang=en");
    let mut passed = 0u64;
    for _ in 0..n {
        let cookie = find_clearance(black_box(header.as_bytes())).unwrap_or_default();
        let verdict =
            ring.verify_clearance(cookie, &visitor, &settings, Difficulty::DEFAULT, now + 60);
        passed += u64::from(verdict.is_ok());
    }
    assert_eq!(passed, n);
}
