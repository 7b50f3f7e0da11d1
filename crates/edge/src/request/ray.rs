//! Ray ids: the 16-hex-digit name of one request, quoted by clients in support requests.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The identifier of one request, shown in the `cf-ray` header, the problem body and the access log.
///
/// Ids come from a per-process counter pushed through a bijective mixer (the SplitMix64 finaliser)
/// keyed by a random seed: a bijection of distinct counter values never collides, so ids are unique
/// within a process without a lock or a random-number call per request, yet they do not reveal how
/// many requests the edge has served.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RayId(u64);

static SEED: LazyLock<u64> = LazyLock::new(|| {
    // RandomState is seeded from the operating system's randomness once per process.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
});
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl RayId {
    /// The next id of this process.
    pub fn next() -> RayId {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        RayId(mix(n ^ *SEED))
    }

    /// The id as 16 lowercase hex digits, without allocating.
    pub fn to_hex(self) -> RayHex {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            let nibble = (self.0 >> (60 - 4 * i)) & 0xf;
            *byte = DIGITS[nibble as usize];
        }
        RayHex(out)
    }
}

/// The `cf-ray` header's name, parsed once: the origin's request and the client's response carry
/// it on every request.
pub static CF_RAY: pingora::http::StaticHeaderName =
    pingora::http::StaticHeaderName::new(signpost_problem::RAY_ID_HEADER);

impl RayId {
    /// The id as the `cf-ray` header value, in one shared allocation: cloning it copies nothing.
    pub fn header_value(self) -> http::HeaderValue {
        // Sixteen hex digits are a valid header value.
        http::HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(self.to_hex()))
            .unwrap_or(http::HeaderValue::from_static("0000000000000000"))
    }
}

/// SplitMix64's finaliser: a bijection on u64 with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A ray id's text form, kept inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RayHex([u8; 16]);

impl AsRef<[u8]> for RayHex {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl RayHex {
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into the array.
        std::str::from_utf8(&self.0).unwrap_or("0000000000000000")
    }
}

impl fmt::Display for RayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.to_hex().as_str())
    }
}

impl fmt::Debug for RayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RayId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_sixteen_lowercase_hex_digits() {
        for _ in 0..1000 {
            let id = RayId::next().to_string();
            assert_eq!(id.len(), 16);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{id}"
            );
        }
    }

    #[test]
    fn ids_do_not_repeat() {
        let ids: HashSet<String> = (0..100_000).map(|_| RayId::next().to_string()).collect();
        assert_eq!(ids.len(), 100_000);
    }

    #[test]
    fn hex_form_keeps_leading_zeros() {
        assert_eq!(RayId(0xab).to_string(), "00000000000000ab");
    }
}
