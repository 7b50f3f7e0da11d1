//! What the edge tells the policy about a request, and what the policy answers.

use std::net::IpAddr;
use std::sync::Arc;

use crate::fleet::FleetCheck;
use crate::verdict::Verdict;

/// The facts about one request that the policy decides on. All borrowed: building one costs
/// nothing.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The TCP peer address.
    pub peer: IpAddr,
    /// The Host header (or HTTP/2 `:authority`) as received, possibly with a port.
    pub host: &'a str,
    /// The request method, e.g. `GET`.
    pub method: &'a str,
    /// The request target as received: `path?query`.
    pub uri: &'a str,
    /// Whether the client connection is TLS.
    pub tls: bool,
    /// The TLS SNI name, when there is one.
    pub sni: Option<&'a str>,
    /// The request headers.
    pub headers: &'a http::HeaderMap,
}

/// The policy's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The client address the policy used: the peer, or what a trusted proxy said.
    pub client_ip: IpAddr,
    /// The zone serving the host: an index into [`CompiledPolicy::zones`](crate::CompiledPolicy::zones).
    pub zone: Option<usize>,
    /// Proxy or refuse.
    pub verdict: Verdict,
    /// The id of the rule that decided, if a rule did (host routing has none).
    pub rule_id: Option<Arc<str>>,
    /// Ids of rules with action `log` that matched, in evaluation order. Empty (and
    /// allocation-free) when none did.
    pub logged: Vec<Arc<str>>,
    /// Fleet-scope rate limits that count this request, in file order: the edge asks Redis for
    /// each (while the verdict is `Proxy`), and the first refusal decides. Empty (and
    /// allocation-free) when none applies.
    pub fleet: Vec<FleetCheck>,
}
