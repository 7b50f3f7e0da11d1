//! The shared pieces of the edge's signed values: settings, the verdicts, base64url framing.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::Binding;

/// The format version every clearance and challenge starts with.
pub(crate) const VERSION: u8 = 1;

/// A zone's challenge settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// What a clearance and a challenge are bound to.
    pub binding: Binding,
    /// How long a clearance earned by proof of work lasts ([`DEFAULT_CLEARANCE_TTL`]).
    pub clearance_ttl: Duration,
    /// How long a clearance earned by the no-JavaScript fallback lasts
    /// ([`DEFAULT_WAIT_CLEARANCE_TTL`]): shorter, because waiting costs a scraper no CPU.
    pub wait_clearance_ttl: Duration,
    /// How long a challenge may be answered ([`DEFAULT_CHALLENGE_TTL`]).
    pub challenge_ttl: Duration,
    /// How long after its issue a challenge may be redeemed without proof of work
    /// ([`DEFAULT_FALLBACK_DELAY`]).
    pub fallback_delay: Duration,
}

/// 30 minutes: Cloudflare's default Challenge Passage (it recommends 15 to 45 minutes).
pub const DEFAULT_CLEARANCE_TTL: Duration = Duration::from_secs(30 * 60);
/// 10 minutes: a visitor without JavaScript waits again three times as often as one with it.
pub const DEFAULT_WAIT_CLEARANCE_TTL: Duration = Duration::from_secs(10 * 60);
/// 5 minutes: the page submits its answer as soon as it is found (seconds, even on slow
/// devices at the default difficulty), and an expired challenge only shows the page again.
pub const DEFAULT_CHALLENGE_TTL: Duration = Duration::from_secs(5 * 60);
/// 10 seconds, against Anubis' `metarefresh` difficulty + 1 s: twice its wait at the default
/// difficulty, because the wait is the whole cost of the fallback.
pub const DEFAULT_FALLBACK_DELAY: Duration = Duration::from_secs(10);
/// How far ahead of the edge's clock a challenge's issue time may be: edges of one fleet share
/// keys, and their clocks disagree a little.
pub(crate) const MAX_SKEW_SECS: u64 = 60;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            binding: Binding::default(),
            clearance_ttl: DEFAULT_CLEARANCE_TTL,
            wait_clearance_ttl: DEFAULT_WAIT_CLEARANCE_TTL,
            challenge_ttl: DEFAULT_CHALLENGE_TTL,
            fallback_delay: DEFAULT_FALLBACK_DELAY,
        }
    }
}

/// How a clearance was earned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// By proof of work in the page.
    Work,
    /// By the no-JavaScript fallback: waiting [`Settings::fallback_delay`].
    Wait,
}

impl Method {
    pub(crate) fn byte(self) -> u8 {
        match self {
            Method::Work => 0,
            Method::Wait => 1,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Method> {
        match b {
            0 => Some(Method::Work),
            1 => Some(Method::Wait),
            _ => None,
        }
    }

    /// `work` or `wait`, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Work => "work",
            Method::Wait => "wait",
        }
    }
}

/// Why a clearance, a challenge or an answer was refused. The edge answers every one of them the
/// same way (the challenge again); the kinds are for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejected {
    /// Not the shape of anything the edge issues.
    Malformed,
    /// Signed by a key the ring no longer holds (rotated out).
    UnknownKey,
    /// The signature does not match: tampered, or presented by another client, for another zone
    /// or under other binding settings. These are indistinguishable by design.
    Forged,
    /// Authentic, but outside its lifetime: expired, or a challenge issued ahead of this edge's
    /// clock by more than a minute.
    Expired,
    /// A clearance earned at a lower difficulty than the rule asks.
    LevelTooLow,
    /// The no-JavaScript fallback was redeemed before its delay: `wait` more seconds.
    TooEarly {
        /// Seconds left.
        wait: u64,
    },
    /// The answer does not meet the challenge's difficulty.
    WrongAnswer,
}

impl Rejected {
    /// A stable snake_case name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::Malformed => "malformed",
            Rejected::UnknownKey => "unknown_key",
            Rejected::Forged => "forged",
            Rejected::Expired => "expired",
            Rejected::LevelTooLow => "level_too_low",
            Rejected::TooEarly { .. } => "too_early",
            Rejected::WrongAnswer => "wrong_answer",
        }
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for Rejected {}

/// The base64url (unpadded) length of `n` bytes.
pub(crate) const fn encoded_len(n: usize) -> usize {
    (n * 4).div_ceil(3)
}

pub(crate) fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The `N` bytes `text` encodes, without allocating; `None` for any other length, alphabet or a
/// non-canonical encoding (the engine refuses stray trailing bits), so each value has exactly one
/// text.
pub(crate) fn decode<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != encoded_len(N) {
        return None;
    }
    // The engine may ask for room for a whole last quantum.
    let mut buf = [0u8; 66];
    let out = buf.get_mut(..N + 2)?;
    match URL_SAFE_NO_PAD.decode_slice(text, out) {
        Ok(n) if n == N => out.get(..N)?.try_into().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trips_and_refuses_other_texts() {
        let bytes: [u8; 44] = std::array::from_fn(|i| (i as u8).wrapping_mul(7));
        let text = encode(&bytes);
        assert_eq!(text.len(), encoded_len(44));
        assert_eq!(decode::<44>(text.as_bytes()), Some(bytes));
        assert_eq!(decode::<44>(&text.as_bytes()[1..]), None);
        assert_eq!(decode::<43>(text.as_bytes()), None);
        // 44 bytes end in a character with 4 bits of payload and 2 spare bits: a text with a
        // spare bit set decodes to the same bytes in a lax decoder; here it is refused.
        let zeros = encode(&[0u8; 44]);
        assert!(zeros.ends_with('A'));
        let loose = format!("{}B", &zeros[..zeros.len() - 1]);
        assert_eq!(decode::<44>(loose.as_bytes()), None);
        let padded = format!("{}=", &text[..text.len() - 1]);
        assert_eq!(decode::<44>(padded.as_bytes()), None);
    }
}
