//! Key directories: a JWKS (RFC 7517) of which the Ed25519 keys are kept, each named by its JWK
//! thumbprint (RFC 7638, RFC 8037 Appendix A.3).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

/// One Ed25519 key of a directory, named by its thumbprint (the `keyid` signers send).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryKey {
    pub keyid: String,
    pub key: [u8; 32],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectoryError {
    /// Not a JSON object with a `keys` array.
    NotJwks,
    /// More Ed25519 keys than the caller allows: refused whole rather than cut, so a directory
    /// is never half read.
    TooManyKeys,
}

impl DirectoryError {
    pub fn name(self) -> &'static str {
        match self {
            DirectoryError::NotJwks => "not_jwks",
            DirectoryError::TooManyKeys => "too_many_keys",
        }
    }
}

impl fmt::Display for DirectoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for DirectoryError {}

/// The RFC 7638 thumbprint of an Ed25519 public key: base64url (no padding) of the SHA-256 of
/// `{"crv":"Ed25519","kty":"OKP","x":"<x>"}`, the required members in lexicographic order.
pub fn jwk_thumbprint(ed25519_x: &[u8; 32]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(ed25519_x)
    );
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// Reads a JWKS. Keys other than `OKP`/`Ed25519`, and entries that are not well formed (an `x`
/// that is not 32 bytes of base64url), are skipped; a key whose `kid` is present and differs from
/// its thumbprint is refused (the draft: `kid` MUST be the thumbprint), so it cannot be
/// selected under a name the directory chose. At most `max_keys` Ed25519 keys.
pub fn parse_directory(json: &[u8], max_keys: usize) -> Result<Vec<DirectoryKey>, DirectoryError> {
    let document: serde_json::Value =
        serde_json::from_slice(json).map_err(|_| DirectoryError::NotJwks)?;
    let entries = document
        .get("keys")
        .and_then(serde_json::Value::as_array)
        .ok_or(DirectoryError::NotJwks)?;
    let mut keys = Vec::new();
    for entry in entries {
        let field = |name: &str| entry.get(name).and_then(serde_json::Value::as_str);
        if field("kty") != Some("OKP") || field("crv") != Some("Ed25519") {
            continue;
        }
        let Some(key) = field("x")
            .and_then(|x| URL_SAFE_NO_PAD.decode(x).ok())
            .and_then(|x| <[u8; 32]>::try_from(x).ok())
        else {
            continue;
        };
        let keyid = jwk_thumbprint(&key);
        if entry
            .get("kid")
            .is_some_and(|kid| kid.as_str() != Some(&keyid))
        {
            continue;
        }
        if keys.len() == max_keys {
            return Err(DirectoryError::TooManyKeys);
        }
        keys.push(DirectoryKey { keyid, key });
    }
    Ok(keys)
}
