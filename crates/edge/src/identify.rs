//! Who is asking, as the origin and the access log learn it.

use std::fmt::Write;
use std::sync::Arc;

use http::HeaderValue;
use http::header::HeaderName;
use pingora::http::RequestHeader;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use signpost_policy::{BotStatus, Identity, SignatureOutcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BotLabels {
    /// A catalog name: at most `signpost_policy::MAX_BOTS` of them, never request text.
    bot: Arc<str>,
    category: Arc<str>,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignatureLabels {
    outcome: &'static str,
    /// Why a signature is invalid or unverified: a fixed set of names.
    reason: &'static str,
}

/// Requests by the bot they are or claim to be, and signatures by outcome.
pub struct IdentityMetrics {
    bots: Family<BotLabels, Counter>,
    signatures: Family<SignatureLabels, Counter>,
}

impl IdentityMetrics {
    pub fn register(registry: &mut Registry) -> IdentityMetrics {
        let bots = Family::<BotLabels, Counter>::default();
        registry.register(
            "bot_requests",
            "Requests from known bots, by bot, category and status (verified, pending, failed, \
             unverifiable)",
            bots.clone(),
        );
        let signatures = Family::<SignatureLabels, Counter>::default();
        registry.register(
            "signature_verifications",
            "Web Bot Auth signatures, by outcome (verified, invalid, unverified) and reason",
            signatures.clone(),
        );
        IdentityMetrics { bots, signatures }
    }

    /// Counts a request the policy identified as someone.
    pub fn observe(&self, identity: &Identity) {
        if let Some(bot) = &identity.bot {
            self.bots
                .get_or_create(&BotLabels {
                    bot: Arc::clone(&bot.name),
                    category: Arc::clone(&bot.category),
                    status: identity.status.as_str(),
                })
                .inc();
        }
        if identity.signature.outcome != SignatureOutcome::Absent {
            self.signatures
                .get_or_create(&SignatureLabels {
                    outcome: identity.signature.outcome.as_str(),
                    reason: identity.signature.reason,
                })
                .inc();
        }
    }
}

/// Tells the origin who is asking, in `name` (the policy's `origin_header`), after removing every
/// copy of it, and of the default header, that the client sent: the origin can trust what it
/// reads there.
pub fn add_origin_header(
    upstream: &mut RequestHeader,
    identity: Option<&Identity>,
    name: Option<&HeaderName>,
) {
    upstream.remove_header(signpost_policy::DEFAULT_ORIGIN_HEADER);
    let Some(name) = name else { return };
    if name.as_str() != signpost_policy::DEFAULT_ORIGIN_HEADER {
        upstream.remove_header(name);
    }
    if let Some(identity) = identity.filter(|i| !i.is_nobody())
        && let Ok(value) = HeaderValue::from_str(&origin_header_value(identity))
    {
        let _ = upstream.insert_header(name.clone(), value);
    }
}

/// The identity as a structured-field dictionary (RFC 9651):
/// `bot="GPTBot", status=verified, method=ip-range, category="AI Crawler", signature=absent`,
/// with `agent` and `keyid` when the signature names them.
pub fn origin_header_value(identity: &Identity) -> String {
    let mut out = String::new();
    if let Some(bot) = &identity.bot {
        out.push_str("bot=");
        sf_string(&mut out, &bot.name);
        let _ = write!(out, ", status={}", identity.status.as_str());
        if let BotStatus::Verified(method) = identity.status {
            let _ = write!(out, ", method={}", method.as_str());
        }
        out.push_str(", category=");
        sf_string(&mut out, &bot.category);
        out.push_str(", ");
    }
    let _ = write!(out, "signature={}", identity.signature.outcome.as_str());
    if identity.signature.outcome != SignatureOutcome::Absent {
        if let Some(agent) = &identity.signature.agent {
            out.push_str(", agent=");
            sf_string(&mut out, agent);
        }
        if let Some(keyid) = &identity.signature.keyid {
            out.push_str(", keyid=");
            sf_string(&mut out, keyid);
        }
    }
    out
}

/// Appends `text` as a structured-field String: quoted, `"` and `\` escaped, and anything a
/// String cannot hold (controls, non-ASCII) left out, so that no value can break the header.
fn sf_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use signpost_policy::{Identity, Signature, SignatureOutcome};

    use super::*;

    #[test]
    fn the_origin_header_is_a_structured_dictionary_no_value_can_break() {
        let identity = Identity {
            signature: Signature {
                outcome: SignatureOutcome::Verified,
                agent: Some(Arc::from("https://a.example/\"x\\\r\n\u{7f}é")),
                keyid: Some(Arc::from("k1")),
                ..Signature::default()
            },
            ..Identity::default()
        };
        let value = origin_header_value(&identity);
        assert_eq!(
            value,
            r#"signature=verified, agent="https://a.example/\"x\\", keyid="k1""#
        );
        assert!(HeaderValue::from_str(&value).is_ok());
    }

    #[test]
    fn client_copies_are_removed_and_nobody_gets_no_header() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("signpost-bot", "bot=\"Googlebot\", status=verified")
            .unwrap();
        req.append_header("x-verified", "forged").unwrap();
        req.append_header("signpost-bot", "again").unwrap();
        let name = HeaderName::from_static("x-verified");
        add_origin_header(&mut req, Some(&Identity::default()), Some(&name));
        assert!(req.headers.get("signpost-bot").is_none());
        assert!(req.headers.get("x-verified").is_none());
        let signed = Identity {
            signature: Signature {
                outcome: SignatureOutcome::Invalid,
                reason: "expired",
                ..Signature::default()
            },
            ..Identity::default()
        };
        add_origin_header(&mut req, Some(&signed), Some(&name));
        assert_eq!(req.headers.get("x-verified").unwrap(), "signature=invalid");
    }
}
