//! Benchmarks only: see `policy_decide.rs` and README.md. This library is empty on purpose.
