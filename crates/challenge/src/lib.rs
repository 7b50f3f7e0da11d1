//! Bot challenges: what the edge needs to challenge a client that claims to be a browser, let
//! it through once it has proved it runs one, and tell an agent how to pass without one.
//!
//! - [`KeyRing::issue_challenge`] makes a **challenge**: a stateless, expiring token, signed by
//!   the edge and bound to the zone and the client, so that an answer cannot be prepared before
//!   it exists nor replayed from another client, and a flood of challenges costs no memory.
//!   [`KeyRing::check_solution`] checks the page's proof of work with one hash;
//!   [`KeyRing::check_wait`] is the no-JavaScript fallback (a timed refresh);
//!   [`KeyRing::redeem`] does either for the edge's endpoints ([`Endpoint`]) and says what to
//!   answer.
//! - [`KeyRing::issue_clearance`] makes the **clearance** cookie a solved challenge earns;
//!   [`KeyRing::verify_clearance`] checks it on every request: statelessly, in constant time,
//!   without allocating (0.3 µs of CPU with SHA extensions; `benches/clearance.rs`,
//!   `examples/clearance_loop.rs`), never panicking on any bytes.
//! - [`render`] makes the **challenge page** in the visitor's language ([`Lang`]), with its
//!   Content-Security-Policy.
//! - [`ACCEPT_SIGNATURE`] is what an **agent** is asked for instead: a Web Bot Auth signature.
//!
//! No I/O: the caller gives the time, the random bytes (from the operating system) and the
//! request's parts. The wiring (the `challenge` action, the `/cdn-cgi/challenge/` endpoints) is
//! the edge's.
//!
//! # Why these crates
//!
//! `hmac` and `sha2` (RustCrypto) for HMAC-SHA256 and the proof of work's SHA-256: the SHA-256
//! already in the tree (Web Bot Auth and the edge use `sha2`), with CPU SHA extensions detected at
//! run time; `subtle` for the constant-time comparison of MACs (a `==` on byte slices returns at
//! the first difference, which leaks how much of a forged MAC is right); `base64` for the
//! cookie's and token's text, whose decoder refuses non-canonical encodings, so each value has
//! one text. HMAC rather than a signature (Ed25519, as Anubis' JWTs): the edge both signs and
//! checks, so a shared secret is enough, and a check costs a few hundred nanoseconds instead of
//! tens of microseconds.
//!
//! # Example
//!
//! ```
//! use signpost_challenge::{Difficulty, Key, KeyRing, Settings, Visitor, meets, work_hash};
//!
//! let ring = KeyRing::new(Key::new(1, &[7; 32])?, None)?;
//! let settings = Settings::default();
//! let visitor = Visitor {
//!     zone: "shop.example",
//!     addr: "192.0.2.10".parse()?,
//!     user_agent: b"Mozilla/5.0",
//! };
//! let now = 1_800_000_000;
//! let difficulty = Difficulty::new(2).unwrap();
//! let token = ring.issue_challenge(&visitor, &settings, difficulty, now, [42; 16]);
//!
//! // What the page does: search for the answer.
//! let nonce = (0u64..)
//!     .map(|n| n.to_string())
//!     .find(|n| meets(&work_hash(token.as_bytes(), n.as_bytes()), difficulty))
//!     .unwrap();
//!
//! let solved = ring.check_solution(token.as_bytes(), nonce.as_bytes(), &visitor, &settings, now + 1)?;
//! let cookie = ring.issue_clearance(&visitor, &settings, solved.difficulty, solved.method, now + 1);
//! let cleared = ring.verify_clearance(cookie.value.as_bytes(), &visitor, &settings, difficulty, now + 60)?;
//! assert_eq!(cleared.level, difficulty);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod agent;
mod binding;
mod clearance;
mod form;
mod keys;
mod lang;
mod page;
mod pow;
mod redeem;
mod token;

pub use agent::{ACCEPT_SIGNATURE, CF_MITIGATED, accept_signature};
pub use binding::{Binding, BindingError, Visitor};
pub use clearance::{
    COOKIE_NAME, COOKIE_VALUE_LEN, Clearance, IssuedClearance, find_clearance, set_cookie,
};
pub use form::{
    MAX_FORM_LEN, MAX_RETURN_LEN, Submission, VERIFY_PATH, WAIT_PATH, return_path, wait_url,
};
pub use keys::{Key, KeyError, KeyRing, MIN_SECRET_LEN};
pub use lang::{Lang, STRINGS, Strings};
pub use page::{
    Page, PageInput, SCRIPT, STATUS, STYLE, WORKER, content_security_policy, escape_into, render,
};
pub use pow::{Difficulty, Solved, TOKEN_LEN, meets, work_hash};
pub use redeem::{Endpoint, Redeemed};
pub use token::{
    DEFAULT_CHALLENGE_TTL, DEFAULT_CLEARANCE_TTL, DEFAULT_FALLBACK_DELAY,
    DEFAULT_WAIT_CLEARANCE_TTL, Method, Rejected, Settings,
};

#[cfg(test)]
mod tests;
