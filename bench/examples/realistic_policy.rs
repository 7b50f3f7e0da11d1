//! Prints the benchmarks' realistic policy (see `signpost_bench::policy_text`) for `load.sh`.
//!
//! `cargo run -p signpost-bench --example realistic_policy [-- <geo dir>]`: with a directory
//! holding `country.mmdb` and `asn.mmdb` (default: `../shared/data/geo` when present), the policy
//! includes the country and ASN rules.

fn main() {
    let geo = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .or_else(signpost_bench::geo_dir);
    print!("{}", signpost_bench::policy_text(geo.as_deref()));
}
