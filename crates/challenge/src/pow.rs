//! The challenge: a stateless, expiring, client-bound token, and the proof of work on it.
//!
//! The token is 59 bytes, base64url without padding (79 characters):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version (1) |
//! | 1 | key id |
//! | 8 | issue time, Unix seconds, big-endian |
//! | 1 | difficulty |
//! | 16 | random |
//! | 32 | HMAC-SHA256 over the 27 bytes above, the zone and the client's bound parts |
//!
//! The edge keeps nothing per challenge: the MAC proves it issued the token, to this client, for
//! this zone, at this time and difficulty. So a flood of challenge requests costs no memory, an
//! answer cannot be computed before the token exists (the random part and the MAC are unknown
//! until then), and a token solved by one client is refused from another. Within its lifetime the
//! same client may redeem one answer more than once; that earns it nothing it does not already
//! hold (a clearance bound to itself), so no spent-token state is kept.
//!
//! The work (Anubis' scheme): find a decimal `n` such that the hex SHA-256 of the token's text
//! followed by `n` starts with `difficulty` zeros, about `16^difficulty` tries. The check is one
//! hash.

use hmac::Mac;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::token::{
    MAX_SKEW_SECS, Method, Rejected, Settings, VERSION, decode, encode, encoded_len,
};
use crate::{KeyRing, Visitor};

const LEN: usize = 59;
const SIGNED: usize = 27;

/// The length of a challenge token's text.
pub const TOKEN_LEN: usize = encoded_len(LEN);

/// The longest answer accepted: `u64::MAX` has 20 digits.
const MAX_NONCE_DIGITS: usize = 20;

/// The number of leading hex zeros the work must find: 0 (no work) to [`Difficulty::MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Difficulty(u8);

impl Difficulty {
    /// 4, Anubis' default: about 65,000 hashes, a median 0.6 s in headless Chromium here.
    pub const DEFAULT: Difficulty = Difficulty(4);
    /// 8: about 4.3 billion hashes, hours in a browser; nothing above it is a challenge a person
    /// could pass.
    pub const MAX: Difficulty = Difficulty(8);

    /// A difficulty, `None` above [`Difficulty::MAX`].
    pub const fn new(zeros: u8) -> Option<Difficulty> {
        if zeros <= Self::MAX.0 {
            Some(Difficulty(zeros))
        } else {
            None
        }
    }

    /// The number of leading hex zeros.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The expected number of hashes: `16^difficulty`.
    pub const fn expected_work(self) -> u64 {
        1u64 << (4 * self.0 as u32)
    }
}

impl Default for Difficulty {
    fn default() -> Self {
        Difficulty::DEFAULT
    }
}

/// What a redeemed challenge earned: the clearance to issue is at this difficulty, by this
/// method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Solved {
    /// The challenge's difficulty.
    pub difficulty: Difficulty,
    /// Work or wait.
    pub method: Method,
}

/// Whether `hash` starts with `difficulty` hex zeros.
pub fn meets(hash: &[u8; 32], difficulty: Difficulty) -> bool {
    let zeros = usize::from(difficulty.get());
    let (whole, half) = (zeros / 2, zeros % 2 == 1);
    hash[..whole].iter().all(|&b| b == 0) && (!half || hash[whole] >> 4 == 0)
}

/// `sha256(token ‖ nonce)`, the hash the work searches.
pub fn work_hash(token: &[u8], nonce: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(token);
    hasher.update(nonce);
    hasher.finalize().into()
}

/// A canonical decimal `u64`: digits only, no sign, no leading zero (so each number has one
/// text).
fn canonical_decimal(nonce: &[u8]) -> bool {
    !nonce.is_empty()
        && nonce.len() <= MAX_NONCE_DIGITS
        && nonce.iter().all(u8::is_ascii_digit)
        && (nonce == b"0" || nonce[0] != b'0')
        && std::str::from_utf8(nonce).is_ok_and(|s| s.parse::<u64>().is_ok())
}

impl KeyRing {
    /// A challenge for `visitor` at `difficulty`, issued at `now` (Unix seconds). `random` must
    /// come from the operating system's generator (the edge has one); it makes two challenges of
    /// the same second differ, so no answer can be prepared in advance.
    pub fn issue_challenge(
        &self,
        visitor: &Visitor<'_>,
        settings: &Settings,
        difficulty: Difficulty,
        now: u64,
        random: [u8; 16],
    ) -> String {
        let key = self.current();
        let mut bytes = [0u8; LEN];
        bytes[0] = VERSION;
        bytes[1] = key.id();
        bytes[2..10].copy_from_slice(&now.to_be_bytes());
        bytes[10] = difficulty.get();
        bytes[11..27].copy_from_slice(&random);
        let mut mac = key.challenge.clone();
        mac.update(&bytes[..SIGNED]);
        settings.binding.feed(&mut mac, visitor);
        bytes[SIGNED..].copy_from_slice(&mac.finalize().into_bytes());
        encode(&bytes)
    }

    /// Checks an answer of the page's proof of work: the token is authentic, this client's and
    /// not expired, and `sha256(token ‖ nonce)` meets its difficulty. Never panics on any bytes.
    pub fn check_solution(
        &self,
        token: &[u8],
        nonce: &[u8],
        visitor: &Visitor<'_>,
        settings: &Settings,
        now: u64,
    ) -> Result<Solved, Rejected> {
        if !canonical_decimal(nonce) {
            return Err(Rejected::Malformed);
        }
        let (issued, difficulty) = self.open(token, visitor, settings, now)?;
        if now >= issued.saturating_add(settings.challenge_ttl.as_secs()) {
            return Err(Rejected::Expired);
        }
        if !meets(&work_hash(token, nonce), difficulty) {
            return Err(Rejected::WrongAnswer);
        }
        Ok(Solved {
            difficulty,
            method: Method::Work,
        })
    }

    /// Redeems a challenge by the no-JavaScript fallback: accepted from
    /// [`Settings::fallback_delay`] after its issue, for [`Settings::challenge_ttl`] more.
    /// Before that, [`Rejected::TooEarly`] says how long is left.
    pub fn check_wait(
        &self,
        token: &[u8],
        visitor: &Visitor<'_>,
        settings: &Settings,
        now: u64,
    ) -> Result<Solved, Rejected> {
        let (issued, difficulty) = self.open(token, visitor, settings, now)?;
        let opens = issued.saturating_add(settings.fallback_delay.as_secs());
        if now < opens {
            return Err(Rejected::TooEarly { wait: opens - now });
        }
        if now >= opens.saturating_add(settings.challenge_ttl.as_secs()) {
            return Err(Rejected::Expired);
        }
        Ok(Solved {
            difficulty,
            method: Method::Wait,
        })
    }

    /// The issue time and difficulty of an authentic token of this client's.
    fn open(
        &self,
        token: &[u8],
        visitor: &Visitor<'_>,
        settings: &Settings,
        now: u64,
    ) -> Result<(u64, Difficulty), Rejected> {
        let bytes: [u8; LEN] = decode(token).ok_or(Rejected::Malformed)?;
        let (signed, tag) = bytes.split_at(SIGNED);
        if signed[0] != VERSION {
            return Err(Rejected::Malformed);
        }
        let key = self.find(signed[1]).ok_or(Rejected::UnknownKey)?;
        let mut mac = key.challenge.clone();
        mac.update(signed);
        settings.binding.feed(&mut mac, visitor);
        if !bool::from(mac.finalize().into_bytes().as_slice().ct_eq(tag)) {
            return Err(Rejected::Forged);
        }
        let mut issued = [0u8; 8];
        issued.copy_from_slice(&signed[2..10]);
        let issued = u64::from_be_bytes(issued);
        if from_the_future(issued, now) {
            return Err(Rejected::Expired);
        }
        let difficulty = Difficulty::new(signed[10]).ok_or(Rejected::Malformed)?;
        Ok((issued, difficulty))
    }
}

/// Whether a token was issued in the future by more than the allowed skew (a fleet's clocks
/// disagree a little); such a token would otherwise live longer than its lifetime.
fn from_the_future(issued: u64, now: u64) -> bool {
    issued > now.saturating_add(MAX_SKEW_SECS)
}
