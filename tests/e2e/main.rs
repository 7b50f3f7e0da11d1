//! End-to-end tests: placeholder
