//! Clearance: the cookie a solved challenge earns.
//!
//! The value is 44 bytes, base64url without padding (59 characters):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version (1) |
//! | 1 | key id |
//! | 8 | expiry, Unix seconds, big-endian |
//! | 1 | the difficulty it was earned at |
//! | 1 | how it was earned ([`Method`]) |
//! | 32 | HMAC-SHA256 over the 12 bytes above, the zone and the client's bound parts |
//!
//! The zone and the client are not in the cookie: the MAC covers them, and the check recomputes
//! them from the request. So the cookie tells a reader nothing about its client, another client
//! or zone fails the MAC, and the check needs no state.

use hmac::Mac;
use subtle::ConstantTimeEq;

use crate::token::{Method, Rejected, Settings, VERSION, decode, encode, encoded_len};
use crate::{Difficulty, KeyRing, Visitor};

/// The cookie's name.
pub const COOKIE_NAME: &str = "signpost_clearance";

const LEN: usize = 44;
const SIGNED: usize = 12;

/// The length of a clearance cookie's value.
pub const COOKIE_VALUE_LEN: usize = encoded_len(LEN);

/// A clearance that passed the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clearance {
    /// The id of the key that signed it (the previous key's during a rotation).
    pub key_id: u8,
    /// When it expires, in Unix seconds.
    pub expires: u64,
    /// The difficulty it was earned at: it satisfies rules at that difficulty or below.
    pub level: Difficulty,
    /// How it was earned.
    pub method: Method,
}

/// A clearance to send: the cookie's value and its lifetime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedClearance {
    /// The cookie's value.
    pub value: String,
    /// Seconds it lasts, for `Max-Age`.
    pub max_age: u64,
}

impl IssuedClearance {
    /// The `Set-Cookie` header value; `secure` on zones served over TLS.
    pub fn set_cookie(&self, secure: bool) -> String {
        set_cookie(&self.value, self.max_age, secure)
    }
}

/// The `Set-Cookie` header value for a clearance: host-only (no `Domain`, so a clearance for one
/// zone is never sent to a sibling), `Path=/`, `HttpOnly` (the page's script never reads it),
/// `SameSite=Lax` (sent on top-level navigations from other sites, so a link to the site does not
/// challenge again; not on cross-site subrequests), `Secure` on TLS zones, and `Max-Age`.
pub fn set_cookie(value: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE_NAME}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}")
}

/// The clearance's value in one `Cookie` header value (`a=1; signpost_clearance=...; b=2`),
/// without allocating; `None` when absent. HTTP/2 may split cookies over several `Cookie` fields:
/// the caller looks in each. Only the first clearance is taken: a client that sends several
/// gets the first one checked.
pub fn find_clearance(cookie_header: &[u8]) -> Option<&[u8]> {
    cookie_header.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let rest = pair.strip_prefix(COOKIE_NAME.as_bytes())?;
        rest.strip_prefix(b"=").map(|v| v.trim_ascii())
    })
}

impl KeyRing {
    /// A clearance for `visitor`, earned at `level` by `method` at `now` (Unix seconds).
    pub fn issue_clearance(
        &self,
        visitor: &Visitor<'_>,
        settings: &Settings,
        level: Difficulty,
        method: Method,
        now: u64,
    ) -> IssuedClearance {
        let ttl = match method {
            Method::Work => settings.clearance_ttl,
            Method::Wait => settings.wait_clearance_ttl,
        }
        .as_secs();
        let key = self.current();
        let mut bytes = [0u8; LEN];
        bytes[0] = VERSION;
        bytes[1] = key.id();
        bytes[2..10].copy_from_slice(&now.saturating_add(ttl).to_be_bytes());
        bytes[10] = level.get();
        bytes[11] = method.byte();
        let mut mac = key.clearance.clone();
        mac.update(&bytes[..SIGNED]);
        settings.binding.feed(&mut mac, visitor);
        bytes[SIGNED..].copy_from_slice(&mac.finalize().into_bytes());
        IssuedClearance {
            value: encode(&bytes),
            max_age: ttl,
        }
    }

    /// Checks a clearance cookie's value for `visitor` against a rule asking for `required`, at
    /// `now`. Never panics and never allocates; the MAC is compared in constant time. The checks
    /// before it depend only on what the cookie shows anyone (its length, version and key id).
    pub fn verify_clearance(
        &self,
        value: &[u8],
        visitor: &Visitor<'_>,
        settings: &Settings,
        required: Difficulty,
        now: u64,
    ) -> Result<Clearance, Rejected> {
        let bytes: [u8; LEN] = decode(value).ok_or(Rejected::Malformed)?;
        let (signed, tag) = bytes.split_at(SIGNED);
        if signed[0] != VERSION {
            return Err(Rejected::Malformed);
        }
        let key = self.find(signed[1]).ok_or(Rejected::UnknownKey)?;
        let mut mac = key.clearance.clone();
        mac.update(signed);
        settings.binding.feed(&mut mac, visitor);
        let expected = mac.finalize().into_bytes();
        if !bool::from(expected.as_slice().ct_eq(tag)) {
            return Err(Rejected::Forged);
        }
        // Authentic from here on: what follows was written by `issue_clearance`.
        let mut expires = [0u8; 8];
        expires.copy_from_slice(&signed[2..10]);
        let expires = u64::from_be_bytes(expires);
        let level = Difficulty::new(signed[10]).ok_or(Rejected::Malformed)?;
        let method = Method::from_byte(signed[11]).ok_or(Rejected::Malformed)?;
        if now >= expires {
            return Err(Rejected::Expired);
        }
        if level < required {
            return Err(Rejected::LevelTooLow);
        }
        Ok(Clearance {
            key_id: signed[1],
            expires,
            level,
            method,
        })
    }
}
