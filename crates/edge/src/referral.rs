//! AI referrals: requests that a person followed from an AI assistant's answer, told by their
//! `Referer` (or, when an app sends none, a `utm_source` naming the assistant), counted per
//! assistant and its operator (`signpost_ai_referrals_total`). Beside the known bots' requests
//! (`signpost_bot_requests_total`, by the same operator names) they give the crawl-to-referral
//! ratio: how many pages an operator's crawlers take for each visitor its assistant sends.
//!
//! The assistants are a fixed list (below), so the label set is bounded whatever requests say.
//! Many assistants' apps send no `Referer`: these counts are a floor, not a census.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// An AI assistant whose links people follow.
#[derive(Debug, PartialEq, Eq)]
pub struct Assistant {
    /// Its name, as the metric labels it.
    pub name: &'static str,
    /// Who runs it, named as the bot catalog names operators.
    pub operator: &'static str,
    /// The host names its pages are served from: a referrer on one of them, or on a name under
    /// one, is a referral from it.
    pub hosts: &'static [&'static str],
}

/// The known AI assistants: the hosts of their answer pages, from Cloudflare's "referrer domains
/// by operator" and a vendor's list of AI referrers (`../shared/spec/observability.md` §7).
/// Operators' corporate sites (openai.com, anthropic.com) and search engines with an AI mode
/// (google.com, bing.com, search.brave.com, kagi.com) are left out: a visitor from them was
/// not sent by an assistant's answer, or cannot be told from one that was.
pub const ASSISTANTS: &[Assistant] = &[
    Assistant {
        name: "ChatGPT",
        operator: "OpenAI",
        hosts: &["chatgpt.com", "chat.openai.com"],
    },
    Assistant {
        name: "Claude",
        operator: "Anthropic",
        hosts: &["claude.ai"],
    },
    Assistant {
        name: "Perplexity",
        operator: "Perplexity",
        hosts: &["perplexity.ai"],
    },
    Assistant {
        name: "Gemini",
        operator: "Google",
        hosts: &["gemini.google.com", "bard.google.com"],
    },
    Assistant {
        name: "Copilot",
        operator: "Microsoft",
        hosts: &["copilot.microsoft.com"],
    },
    Assistant {
        name: "Meta AI",
        operator: "Meta",
        hosts: &["meta.ai"],
    },
    Assistant {
        name: "DeepSeek",
        operator: "DeepSeek",
        hosts: &["deepseek.com"],
    },
    Assistant {
        name: "Grok",
        operator: "xAI",
        hosts: &["grok.com", "grok.x.ai"],
    },
    Assistant {
        name: "You.com",
        operator: "You.com",
        hosts: &["you.com"],
    },
    Assistant {
        name: "Phind",
        operator: "Phind",
        hosts: &["phind.com"],
    },
];

/// The assistant whose page `referer` (a `Referer` header value, any bytes) is: an `http` or
/// `https` URL whose host is one of an assistant's hosts or a name under one.
pub fn from_referer(referer: &[u8]) -> Option<&'static Assistant> {
    let rest = strip_prefix_ignore_case(referer, b"https://")
        .or_else(|| strip_prefix_ignore_case(referer, b"http://"))?;
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    // After any user information; before any port.
    let host = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = match host.iter().position(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    };
    from_host(host)
}

/// The assistant a `utm_source` parameter of `query` (a request's query string, any bytes)
/// names by one of its hosts, as some assistants tag the links they show
/// (`?utm_source=chatgpt.com`).
pub fn from_query(query: &[u8]) -> Option<&'static Assistant> {
    query
        .split(|&b| b == b'&')
        .find_map(|pair| pair.strip_prefix(b"utm_source="))
        .and_then(from_host)
}

/// The assistant serving `host` (any bytes; ASCII case and one trailing dot ignored).
fn from_host(host: &[u8]) -> Option<&'static Assistant> {
    let host = host.strip_suffix(b".").unwrap_or(host);
    ASSISTANTS.iter().find(|a| {
        a.hosts.iter().any(|known| {
            let known = known.as_bytes();
            host.len() >= known.len()
                && host[host.len() - known.len()..].eq_ignore_ascii_case(known)
                && (host.len() == known.len() || host[host.len() - known.len() - 1] == b'.')
        })
    })
}

fn strip_prefix_ignore_case<'a>(bytes: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (bytes.len() >= prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &bytes[prefix.len()..])
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReferralLabels {
    /// The zone that served the request (`-` for none).
    zone: Arc<str>,
    assistant: &'static str,
    operator: &'static str,
}

/// The AI referrals counter.
#[derive(Clone)]
pub struct ReferralMetrics {
    referrals: Family<ReferralLabels, Counter>,
    /// The zone label of requests no zone served.
    no_zone: Arc<str>,
}

impl ReferralMetrics {
    pub fn register(registry: &mut Registry) -> ReferralMetrics {
        let referrals = Family::<ReferralLabels, Counter>::default();
        registry.register(
            "ai_referrals",
            "Requests referred by an AI assistant (its page in Referer, or its host in \
             utm_source), by zone, assistant and operator (the bot catalog's operator names)",
            referrals.clone(),
        );
        ReferralMetrics {
            referrals,
            no_zone: Arc::from("-"),
        }
    }

    /// Counts the request if an assistant referred it: by its `Referer`, else by a
    /// `utm_source` in its query.
    pub fn observe(&self, zone: Option<&Arc<str>>, referer: Option<&[u8]>, query: Option<&str>) {
        let assistant = referer
            .and_then(from_referer)
            .or_else(|| query.and_then(|q| from_query(q.as_bytes())));
        if let Some(assistant) = assistant {
            self.referrals
                .get_or_create(&ReferralLabels {
                    zone: Arc::clone(zone.unwrap_or(&self.no_zone)),
                    assistant: assistant.name,
                    operator: assistant.operator,
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name(a: Option<&Assistant>) -> Option<&'static str> {
        a.map(|a| a.name)
    }

    #[test]
    fn assistants_are_told_by_the_referring_host() {
        for (referer, expected) in [
            ("https://chatgpt.com/", Some("ChatGPT")),
            ("https://chatgpt.com", Some("ChatGPT")),
            ("https://chat.openai.com/c/123?x=1", Some("ChatGPT")),
            ("HTTPS://ChatGPT.COM/", Some("ChatGPT")),
            ("https://www.perplexity.ai/search?q=x", Some("Perplexity")),
            ("https://claude.ai/chat/abc", Some("Claude")),
            ("https://gemini.google.com/app", Some("Gemini")),
            ("https://copilot.microsoft.com/", Some("Copilot")),
            ("http://user@claude.ai:443/x", Some("Claude")),
            ("https://claude.ai./", Some("Claude")),
            ("https://chat.deepseek.com/", Some("DeepSeek")),
            // Not an assistant's page.
            ("https://www.google.com/search?q=x", None),
            ("https://openai.com/blog", None),
            ("https://notclaude.ai/", None),
            ("https://claude.ai.evil.example/", None),
            ("https://evil.example/?https://claude.ai/", None),
            ("https://evil.example/#claude.ai", None),
            ("android-app://com.openai.chatgpt/", None),
            ("claude.ai", None),
            ("", None),
        ] {
            assert_eq!(
                name(from_referer(referer.as_bytes())),
                expected,
                "{referer}"
            );
        }
    }

    #[test]
    fn a_utm_source_names_the_assistant_when_there_is_no_referer() {
        assert_eq!(name(from_query(b"utm_source=chatgpt.com")), Some("ChatGPT"));
        assert_eq!(
            name(from_query(b"a=1&utm_source=perplexity.ai&b")),
            Some("Perplexity")
        );
        assert_eq!(name(from_query(b"utm_source=newsletter")), None);
        assert_eq!(name(from_query(b"x_utm_source=chatgpt.com")), None);
        assert_eq!(name(from_query(b"")), None);
    }

    #[test]
    fn every_assistant_is_reachable_and_its_operator_named_as_the_catalog_names_it() {
        for assistant in ASSISTANTS {
            for host in assistant.hosts {
                let referer = format!("https://{host}/");
                assert_eq!(from_referer(referer.as_bytes()), Some(assistant));
            }
        }
        let catalog = signpost_policy::BotCatalog::shipped();
        for operator in [
            "OpenAI",
            "Anthropic",
            "Perplexity",
            "Google",
            "Microsoft",
            "Meta",
        ] {
            assert!(
                catalog.bots().iter().any(|b| &*b.operator == operator),
                "the catalog names no operator {operator}"
            );
            assert!(ASSISTANTS.iter().any(|a| a.operator == operator));
        }
    }

    proptest! {
        /// Any bytes at all: no panic, and a match only for a host of the list.
        #[test]
        fn any_referer_is_read_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(a) = from_referer(&bytes) {
                let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
                prop_assert!(a.hosts.iter().any(|h| text.contains(h)));
            }
            let _ = from_query(&bytes);
        }
    }
}
