//! The key ring: the current key signs, the previous one still verifies during a rotation.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// The shortest secret accepted, in bytes: HMAC-SHA256's own output size, so that the key is
/// never the weakest part.
pub const MIN_SECRET_LEN: usize = 32;

/// One signing key, known by a one-byte id that every cookie and challenge carries.
///
/// Two keys are derived from the secret, one for clearances and one for challenges, so that a
/// value signed as one can never be taken for the other. Each is kept as a keyed HMAC state: a
/// check clones it instead of hashing the key's two blocks again.
#[derive(Clone)]
pub struct Key {
    id: u8,
    pub(crate) clearance: HmacSha256,
    pub(crate) challenge: HmacSha256,
}

impl Key {
    /// A key from its secret (at least [`MIN_SECRET_LEN`] bytes of randomness, e.g. 32 bytes
    /// from `openssl rand`).
    pub fn new(id: u8, secret: &[u8]) -> Result<Key, KeyError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::SecretTooShort);
        }
        Ok(Key {
            id,
            clearance: derive(secret, b"signpost-challenge clearance v1")?,
            challenge: derive(secret, b"signpost-challenge challenge v1")?,
        })
    }

    /// The id the key's cookies and challenges carry.
    pub fn id(&self) -> u8 {
        self.id
    }
}

/// HMAC(secret, label) as the key of a keyed HMAC state.
fn derive(secret: &[u8], label: &[u8]) -> Result<HmacSha256, KeyError> {
    // HMAC takes keys of any length: these errors cannot happen, and are not unwrapped anyway.
    let mut outer = HmacSha256::new_from_slice(secret).map_err(|_| KeyError::SecretTooShort)?;
    outer.update(label);
    let derived = outer.finalize().into_bytes();
    HmacSha256::new_from_slice(&derived).map_err(|_| KeyError::SecretTooShort)
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret, not even derived.
        f.debug_struct("Key")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The keys in use: `current` signs everything new; `previous`, during a rotation, still
/// verifies what it signed until those clearances expire. A rotation is: add the new key as
/// current and keep the old one as previous for at least the longest clearance lifetime, then
/// drop it (whatever it signed is then refused and challenged again).
#[derive(Clone, Debug)]
pub struct KeyRing {
    current: Key,
    previous: Option<Key>,
}

impl KeyRing {
    /// A ring; the two keys must have different ids.
    pub fn new(current: Key, previous: Option<Key>) -> Result<KeyRing, KeyError> {
        if previous.as_ref().is_some_and(|p| p.id == current.id) {
            return Err(KeyError::SameId);
        }
        Ok(KeyRing { current, previous })
    }

    /// The key that signs.
    pub fn current(&self) -> &Key {
        &self.current
    }

    /// The key with this id, if the ring holds it.
    pub(crate) fn find(&self, id: u8) -> Option<&Key> {
        if self.current.id == id {
            Some(&self.current)
        } else {
            self.previous.as_ref().filter(|p| p.id == id)
        }
    }
}

/// Why a key or ring was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The secret is shorter than [`MIN_SECRET_LEN`] bytes.
    SecretTooShort,
    /// The current and the previous key have the same id: a cookie would not say which signed it.
    SameId,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::SecretTooShort => write!(
                f,
                "a challenge key's secret must be at least {MIN_SECRET_LEN} bytes"
            ),
            KeyError::SameId => f.write_str("the current and previous challenge keys share an id"),
        }
    }
}

impl std::error::Error for KeyError {}
