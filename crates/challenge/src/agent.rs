//! What an agent is told: the RFC 9421 `Accept-Signature` that asks for the signature the edge
//! verifies.

/// The `Accept-Signature` header value (RFC 9421 section 5.1) a challenge sends to agents: one
/// signature labelled `sig1`, tagged `web-bot-auth`, Ed25519, with `created`, `expires` and
/// `keyid`, covering `@authority` and `signature-agent`.
///
/// These are what `signpost-webbotauth` requires: the `web-bot-auth` tag, `created`, `expires`
/// and a `keyid` (parameters), `alg` absent or `ed25519`, `@authority` (or `@target-uri`)
/// covered, and the `Signature-Agent` member covered whenever the header is sent, which is how
/// the edge finds the agent's key directory. `nonce` is not asked: the edge does not keep
/// nonces. REDbot 2.7.1 answers exactly this by retrying once, signed.
pub const ACCEPT_SIGNATURE: &str = r#"sig1=("@authority" "signature-agent");created;expires;keyid;alg="ed25519";tag="web-bot-auth""#;

/// The `cf-mitigated` header value every challenge answer carries, page or problem, as
/// Cloudflare marks its challenges ("challenge is the only valid value").
pub const CF_MITIGATED: &str = "challenge";

/// The `Accept-Signature` header value; see [`ACCEPT_SIGNATURE`].
pub fn accept_signature() -> &'static str {
    ACCEPT_SIGNATURE
}
