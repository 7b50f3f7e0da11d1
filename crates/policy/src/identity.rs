//! Who is asking: the request's Web Bot Auth signature and the known bot it claims to be,
//! checked against what the edge knows from outside (key directories, published address lists,
//! reverse DNS), which reaches the policy through [`Evidence`].

use std::net::IpAddr;
use std::sync::Arc;

use crate::bots::{Bot, BotCatalog};

/// What became of a request's Web Bot Auth signature. The draft's three outcomes are kept apart,
/// plus "no signature at all".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SignatureOutcome {
    /// The request carries no `Signature-Input`.
    #[default]
    Absent,
    /// The signature verifies with a key its agent's directory publishes.
    Verified,
    /// The signature is malformed, outside its validity window, does not cover what it must, or
    /// does not verify: the request is not what it says.
    Invalid,
    /// The signature could not be checked: its key directory is not known yet, cannot be
    /// reached, or does not list the key. Says nothing against the request.
    Unverified,
}

impl SignatureOutcome {
    /// The outcome as `signpost.bot.signature`, logs and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureOutcome::Absent => "absent",
            SignatureOutcome::Verified => "verified",
            SignatureOutcome::Invalid => "invalid",
            SignatureOutcome::Unverified => "unverified",
        }
    }
}

/// A request's signature as the edge found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signature {
    /// What became of it.
    pub outcome: SignatureOutcome,
    /// Why it is invalid or unverified, a short stable name (`expired`, `key_unknown`, ...);
    /// empty otherwise.
    pub reason: &'static str,
    /// The signing agent's key directory (normalised as [`crate::normalize_agent`] does), when
    /// the signature names one.
    pub agent: Option<Arc<str>>,
    /// The key's id (its JWK thumbprint).
    pub keyid: Option<Arc<str>>,
    /// Request headers the signature covers, among those the policy asks about
    /// ([`Evidence::COVERED_HEADERS`]): bit `i` for entry `i`.
    pub covered_headers: u8,
}

/// The answer of a reverse DNS check, forward-confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReverseDnsName {
    /// Not known yet: a lookup is under way or could not run.
    Pending,
    /// The address has no name, or no name of it resolves back to it.
    Unconfirmed,
    /// A name of the address, lower case without the final dot, that resolves back to it.
    Confirmed(Arc<str>),
}

/// What the edge knows about a request from outside the policy. The policy asks only when it
/// identifies requests (a `[bots]` section, or a rule reading a bot field), and each question at
/// most once per request. Implementations never wait on the network: what is not known yet is
/// answered as such.
pub trait Evidence {
    /// The request's Web Bot Auth signature, checked. `client_ip` is the client the policy
    /// resolved, whose budget of failed verifications the edge keeps.
    fn signature(&self, client_ip: IpAddr) -> Signature;
    /// Whether `ip` is in the address list published at `url`; `None` while the list has not
    /// been loaded.
    fn in_ip_list(&self, url: &str, ip: IpAddr) -> Option<bool>;
    /// The forward-confirmed reverse DNS name of `ip`.
    fn reverse_dns(&self, ip: IpAddr) -> ReverseDnsName;
}

/// Request headers whose coverage by the signature the policy reads (pay per crawl's price
/// offers): [`Signature::covered_headers`] bit `i` is entry `i`.
pub const COVERED_HEADERS: [&str; 2] = ["crawler-exact-price", "crawler-max-price"];

/// Evidence of nothing: no signature, no list loaded, no name known. What a policy test or a
/// trace without an edge sees.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvidence;

impl Evidence for NoEvidence {
    fn signature(&self, _: IpAddr) -> Signature {
        Signature::default()
    }
    fn in_ip_list(&self, _: &str, _: IpAddr) -> Option<bool> {
        None
    }
    fn reverse_dns(&self, _: IpAddr) -> ReverseDnsName {
        ReverseDnsName::Pending
    }
}

/// How a bot was verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// A Web Bot Auth signature from one of its key directories.
    WebBotAuth,
    /// An address its operator lists (in the policy or published).
    IpRange,
    /// A forward-confirmed reverse DNS name under one of its suffixes.
    ReverseDns,
}

impl Method {
    /// The method as logs and the origin header name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::WebBotAuth => "web-bot-auth",
            Method::IpRange => "ip-range",
            Method::ReverseDns => "reverse-dns",
        }
    }
}

/// Where a request's claim to be a known bot stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum BotStatus {
    /// The request claims no known bot.
    #[default]
    None,
    /// Proven, by this method.
    Verified(Method),
    /// Claimed by its User-Agent, but the bot cannot be verified by any method.
    Unverifiable,
    /// Claimed, and some check has no answer yet (a list not loaded, a DNS lookup under way):
    /// neither verified nor an impostor.
    Pending,
    /// Claimed, and every way the bot can be verified says no: an impostor.
    Failed,
}

impl BotStatus {
    /// The status as logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            BotStatus::None => "none",
            BotStatus::Verified(_) => "verified",
            BotStatus::Unverifiable => "unverifiable",
            BotStatus::Pending => "pending",
            BotStatus::Failed => "failed",
        }
    }
}

/// Who a request says it is, and what of that holds. Built once per request, only when the
/// policy identifies requests; [`Identity::default`] (nobody in particular) otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The Web Bot Auth signature.
    pub signature: Signature,
    /// The known bot the request is or claims to be.
    pub bot: Option<Arc<Bot>>,
    /// Where that claim stands.
    pub status: BotStatus,
}

impl Identity {
    /// Whether there is nothing to say: no signature and no bot claimed (most requests).
    pub fn is_nobody(&self) -> bool {
        self.bot.is_none() && self.signature.outcome == SignatureOutcome::Absent
    }

    /// The bot, when the request proved it is that bot.
    pub fn verified_bot(&self) -> Option<&Arc<Bot>> {
        match self.status {
            BotStatus::Verified(_) => self.bot.as_ref(),
            _ => None,
        }
    }

    /// Whether the request claimed a known bot and failed every check of it.
    pub fn claim_failed(&self) -> bool {
        self.status == BotStatus::Failed
    }

    /// Whether the signature verified.
    pub fn signed(&self) -> bool {
        self.signature.outcome == SignatureOutcome::Verified
    }

    /// Whether the verified signature covers the request header `name` (one of
    /// [`COVERED_HEADERS`]).
    pub fn signature_covers(&self, name: &str) -> bool {
        self.signed()
            && COVERED_HEADERS
                .iter()
                .position(|h| *h == name)
                .is_some_and(|i| self.signature.covered_headers & (1 << i) != 0)
    }

    /// The key a rate limit counts this agent under (`signpost.bot.agent`): the signing key
    /// (directory and key id) when the signature verified, else the verified bot's name, else
    /// nothing (the caller counts the client address).
    pub fn agent_key(&self) -> Option<(&str, &str)> {
        if self.signed() {
            let agent = self.signature.agent.as_deref().unwrap_or("");
            let keyid = self.signature.keyid.as_deref().unwrap_or("");
            return Some((agent, keyid));
        }
        self.verified_bot().map(|b| ("bot", &*b.name))
    }
}

/// Identifies a request: its signature first (a verified signature from a known bot's key
/// directory proves that bot, whatever the User-Agent says), else the bot its User-Agent claims,
/// checked by each method the bot can be verified by.
pub(crate) fn identify(
    catalog: &BotCatalog,
    user_agent: &[u8],
    client_ip: IpAddr,
    evidence: &dyn Evidence,
) -> Identity {
    // The edge names the agent as the verifier normalised it, which is `normalize_agent`'s form.
    let signature = evidence.signature(client_ip);
    if signature.outcome == SignatureOutcome::Verified
        && let Some(bot) = signature
            .agent
            .as_deref()
            .and_then(|a| catalog.signing_from(a))
    {
        return Identity {
            bot: Some(Arc::clone(bot)),
            status: BotStatus::Verified(Method::WebBotAuth),
            signature,
        };
    }
    let Some(bot) = catalog.claimed_by(user_agent) else {
        return Identity {
            signature,
            bot: None,
            status: BotStatus::None,
        };
    };
    let status = check_claim(bot, &signature, client_ip, evidence);
    Identity {
        signature,
        bot: Some(Arc::clone(bot)),
        status,
    }
}

/// Checks a claim to be `bot` by every method the bot has. The cheap ones first: the policy's
/// own ranges, the signature already checked, the loaded lists; reverse DNS last.
fn check_claim(
    bot: &Bot,
    signature: &Signature,
    client_ip: IpAddr,
    evidence: &dyn Evidence,
) -> BotStatus {
    if !bot.is_verifiable() {
        return BotStatus::Unverifiable;
    }
    if bot.listed_ip(client_ip) {
        return BotStatus::Verified(Method::IpRange);
    }
    let mut pending = false;
    if !bot.web_bot_auth.is_empty() && signature.outcome == SignatureOutcome::Unverified {
        // Signed by a directory we cannot read yet: it may still prove the bot.
        pending = true;
    }
    for url in &bot.ip_ranges_url {
        match evidence.in_ip_list(url, client_ip) {
            Some(true) => return BotStatus::Verified(Method::IpRange),
            Some(false) => {}
            None => pending = true,
        }
    }
    if !bot.rdns.is_empty() {
        match evidence.reverse_dns(client_ip) {
            ReverseDnsName::Confirmed(host) if host_in_suffixes(&host, &bot.rdns) => {
                return BotStatus::Verified(Method::ReverseDns);
            }
            ReverseDnsName::Pending => pending = true,
            _ => {}
        }
    }
    if pending {
        BotStatus::Pending
    } else {
        BotStatus::Failed
    }
}

/// Whether a confirmed host name is within one of the suffixes, on a label boundary:
/// `crawl-66-249-66-1.googlebot.com` is within `googlebot.com` (and `.googlebot.com`), and so
/// is `googlebot.com` itself; `evilgooglebot.com` is not. Case and a final dot are ignored; an
/// empty suffix matches nothing. Generic over the text type so that the policy's suffixes
/// (`Box<str>`) are read where they are, without a copy per request.
pub fn host_in_suffixes<S: AsRef<str>>(host: &str, suffixes: &[S]) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    suffixes.iter().any(|suffix| {
        let suffix = suffix.as_ref().trim().trim_start_matches('.');
        let suffix = suffix.strip_suffix('.').unwrap_or(suffix);
        let Some(cut) = host.len().checked_sub(suffix.len()) else {
            return false;
        };
        // `get` and not slicing: a host that is not ASCII may have no character boundary there.
        match (host.get(..cut), host.get(cut..)) {
            (Some(head), Some(tail)) => {
                !suffix.is_empty()
                    && tail.eq_ignore_ascii_case(suffix)
                    && (head.is_empty() || head.ends_with('.'))
            }
            _ => false,
        }
    })
}
