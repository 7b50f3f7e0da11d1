//! Web Bot Auth: RFC 9421 HTTP Message Signatures with the `web-bot-auth` profile of
//! `draft-ietf-webbotauth-httpsig-protocol` (-01): parsing `Signature-Input`, `Signature` and
//! `Signature-Agent`, the signature base, Ed25519 verification, and key directories (JWKS).
//!
//! No I/O: the caller gives the request as received and the current time, and fetches key
//! directories itself. The work is split so that a request pays the Ed25519 operation (about
//! 100 µs) only after every cheap check passed: [`parse`] does the cheap checks and builds the
//! signature base; [`Candidate::verify`] is the public-key operation.
//!
//! Bounds (every one applies to hostile input): the three signature fields together are at most
//! [`Limits::max_header_bytes`]; at most [`Limits::max_signatures`] `web-bot-auth` signatures of
//! one request are examined; a signature covers at most [`Limits::max_components`] components;
//! the signature base is therefore bounded by the request's header block.

mod directory;
mod parse;

pub use directory::{DirectoryError, DirectoryKey, jwk_thumbprint, parse_directory};
pub use parse::parse;

use std::fmt;
use std::time::Duration;

/// The request as received, before any rewrite by the edge.
pub struct SignedRequest<'a> {
    /// The method as sent (`GET`).
    pub method: &'a str,
    /// `https` or `http`: how the request reached the edge.
    pub scheme: &'a str,
    /// The `Host` header or HTTP/2 `:authority`, as sent.
    pub authority: &'a str,
    /// The request target as received: the raw `path?query` (origin form).
    pub target: &'a str,
    pub headers: &'a http::HeaderMap,
}

/// The bounds and clock rules of verification.
#[derive(Clone, Debug)]
pub struct Limits {
    /// How far `created` may be in the future and `expires` in the past: clocks disagree.
    pub max_skew: Duration,
    /// The longest `expires - created` accepted. The draft RECOMMENDS at most 24 hours; the
    /// default is 1 hour, because a signature is a bearer credential until it expires (one that
    /// covers `@authority` alone opens every path of the site), the draft's own test vector signs
    /// for 1 hour, and Cloudflare recommends minutes. An operator whose agents sign for longer
    /// raises it.
    pub max_validity: Duration,
    /// `Signature-Input`, `Signature` and `Signature-Agent` together, in bytes (all field lines).
    pub max_header_bytes: usize,
    /// `web-bot-auth` signatures examined per request; others (other tags) are skipped unread.
    pub max_signatures: usize,
    /// Covered components per signature.
    pub max_components: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_skew: Duration::from_secs(60),
            max_validity: Duration::from_secs(3600),
            max_header_bytes: 8 * 1024,
            max_signatures: 2,
            max_components: 24,
        }
    }
}

/// What the cheap checks found: everything but the public-key operation.
#[derive(Debug)]
pub enum Parsed {
    /// No `Signature-Input`: the request is not signed.
    Absent,
    /// Signed, but not acceptably: the three outcomes of the draft keep this apart from
    /// "unverified" (key unknown).
    Invalid(Invalid),
    /// A `web-bot-auth` signature whose every cheap check passed; the key is the caller's to find.
    Candidate(Box<Candidate>),
}

/// Where an agent's keys are published, from its `Signature-Agent` member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Agent {
    /// For [`AgentKind::Directory`] the agent's https origin (`https://signer.example`, host
    /// lowercased, default port dropped, no trailing slash); for [`AgentKind::JwksUri`] the URI
    /// normalised, query and fragment dropped (the draft's identifier).
    pub url: String,
    pub kind: AgentKind,
    /// Sent in the legacy form, a bare string rather than a dictionary member (accepted, as the
    /// draft allows verifiers to).
    pub legacy: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgentKind {
    /// `type=directory` (or no `type`): keys at `<origin>/.well-known/http-message-signatures-directory`.
    Directory,
    /// `type=jwks_uri`: keys at the URI itself.
    JwksUri,
}

impl Agent {
    /// The URL to fetch the agent's keys from.
    pub fn directory_url(&self) -> String {
        match self.kind {
            AgentKind::Directory => {
                format!("{}/.well-known/http-message-signatures-directory", self.url)
            }
            AgentKind::JwksUri => self.url.clone(),
        }
    }
}

/// One covered component of a signature: a derived component (`@authority`) or a header field,
/// with the dictionary member it selects (`"signature-agent";key="sig1"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    pub name: String,
    pub key: Option<String>,
}

/// A signature that passed every cheap check, with its signature base built.
#[derive(Debug)]
pub struct Candidate {
    label: String,
    keyid: String,
    created: u64,
    expires: u64,
    nonce: Option<String>,
    agent: Option<Agent>,
    components: Vec<Component>,
    base: Vec<u8>,
    signature: [u8; 64],
}

impl Candidate {
    /// The signature's label in `Signature-Input` (`sig1`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The key's JWK thumbprint (RFC 7638) as the signer states it.
    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// The covered `Signature-Agent` member. `None` when the request sent no `Signature-Agent`,
    /// or a member the draft says to ignore (`type=cimd`, a `directory` that is not an origin):
    /// such a signature can only be verified with a key known without a directory.
    pub fn agent(&self) -> Option<&Agent> {
        self.agent.as_ref()
    }

    pub fn created(&self) -> u64 {
        self.created
    }

    pub fn expires(&self) -> u64 {
        self.expires
    }

    pub fn nonce(&self) -> Option<&str> {
        self.nonce.as_deref()
    }

    /// The 64 signature bytes: with the keyid, what a replay cache would remember.
    pub fn signature(&self) -> &[u8; 64] {
        &self.signature
    }

    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// The signature base (RFC 9421 section 2.5) the signature is checked against.
    pub fn signature_base(&self) -> &[u8] {
        &self.base
    }

    /// Whether the whole header field `lowercase_name` is covered (a `key` member alone is not).
    pub fn covers_header(&self, lowercase_name: &str) -> bool {
        self.components
            .iter()
            .any(|c| c.key.is_none() && c.name == lowercase_name)
    }

    /// The Ed25519 operation. Refuses the RFC 9421 example keys, which are public.
    pub fn verify(&self, public_key: &[u8; 32]) -> Result<(), Invalid> {
        if is_known_test_key(public_key) {
            return Err(Invalid::TestKey);
        }
        verify_ed25519(public_key, &self.base, &self.signature)
    }
}

pub(crate) fn verify_ed25519(
    public_key: &[u8; 32],
    message: &[u8],
    signature: &[u8],
) -> Result<(), Invalid> {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public_key)
        .verify(message, signature)
        .map_err(|_| Invalid::BadSignature)
}

/// The RFC 9421 example Ed25519 key (`test-key-ed25519`, Appendix B.1.4), which the draft's test
/// vectors use too: its private half is published, so nothing it signs proves anything.
const RFC9421_TEST_KEY_ED25519: [u8; 32] = [
    0x26, 0xb4, 0x0b, 0x8f, 0x93, 0xff, 0xf3, 0xd8, 0x97, 0x11, 0x2f, 0x7e, 0xbc, 0x58, 0x2b, 0x23,
    0x2d, 0xbd, 0x72, 0x51, 0x7d, 0x08, 0x2f, 0xe8, 0x3c, 0xfb, 0x30, 0xdd, 0xce, 0x43, 0xd1, 0xbb,
];

/// Whether `key` is a published example key (RFC 9421 Appendix B.1.4).
pub fn is_known_test_key(key: &[u8; 32]) -> bool {
    *key == RFC9421_TEST_KEY_ED25519
}

/// Why a signed request is not acceptable. [`Invalid::name`] is stable, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// A signature field is not a structured field of the right shape, or a signature parameter
    /// is missing or of the wrong type.
    Malformed,
    /// The signature fields exceed [`Limits::max_header_bytes`], or a signature covers more than
    /// [`Limits::max_components`] components.
    TooLarge,
    /// No signature carries `tag="web-bot-auth"`.
    WrongTag,
    /// `Signature` has no member for the label, or it is not 64 bytes.
    SignatureMissing,
    Expired,
    NotYetValid,
    /// `expires - created` is above [`Limits::max_validity`] (or negative).
    ValidityTooLong,
    /// Neither `@authority` nor `@target-uri` is covered.
    AuthorityNotCovered,
    /// `Signature-Agent` was sent but no member of it is covered.
    AgentNotCovered,
    /// The covered `Signature-Agent` member is not an `https` URI.
    AgentNotHttps,
    /// A component this verifier does not build (`@query-param`, `@status`, `sf`, `bs`, `req`, ...).
    UnsupportedComponent,
    /// `alg` is present and not `ed25519`.
    UnsupportedAlgorithm,
    /// A covered header field or dictionary member is absent from the request.
    ComponentMissing,
    BadSignature,
    /// The key is a published example key.
    TestKey,
}

impl Invalid {
    pub fn name(self) -> &'static str {
        match self {
            Invalid::Malformed => "malformed",
            Invalid::TooLarge => "too_large",
            Invalid::WrongTag => "wrong_tag",
            Invalid::SignatureMissing => "signature_missing",
            Invalid::Expired => "expired",
            Invalid::NotYetValid => "not_yet_valid",
            Invalid::ValidityTooLong => "validity_too_long",
            Invalid::AuthorityNotCovered => "authority_not_covered",
            Invalid::AgentNotCovered => "agent_not_covered",
            Invalid::AgentNotHttps => "agent_not_https",
            Invalid::UnsupportedComponent => "unsupported_component",
            Invalid::UnsupportedAlgorithm => "unsupported_algorithm",
            Invalid::ComponentMissing => "component_missing",
            Invalid::BadSignature => "bad_signature",
            Invalid::TestKey => "test_key",
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Invalid {}

#[cfg(test)]
mod tests;
