//! The cheap checks and the signature base (RFC 9421 sections 2 and 3.2, the draft's profile).

use sfv::{BareItem, Dictionary, InnerList, Item, ListEntry, Parser, SerializeValue};

use crate::{Agent, AgentKind, Candidate, Component, Invalid, Limits, Parsed, SignedRequest};

const TAG: &str = "web-bot-auth";

/// Reads the request's signature fields and runs every check that costs no public-key operation.
///
/// Never panics on any header bytes. Of the `Signature-Input` members, only those tagged
/// `web-bot-auth` are examined, at most [`Limits::max_signatures`] of them in the order sent; the
/// first that passes is the candidate, otherwise the first one's reason is returned.
pub fn parse(req: &SignedRequest, now_unix: u64, limits: &Limits) -> Parsed {
    if !req.headers.contains_key("signature-input") {
        return Parsed::Absent;
    }
    match parse_present(req, now_unix, limits) {
        Ok(candidate) => Parsed::Candidate(Box::new(candidate)),
        Err(invalid) => Parsed::Invalid(invalid),
    }
}

fn parse_present(req: &SignedRequest, now: u64, limits: &Limits) -> Result<Candidate, Invalid> {
    // Measured before anything is copied or parsed.
    let header_bytes: usize = ["signature-input", "signature", "signature-agent"]
        .iter()
        .map(|name| field_bytes(req.headers, name))
        .sum();
    if header_bytes > limits.max_header_bytes {
        return Err(Invalid::TooLarge);
    }
    let input = joined(req.headers, "signature-input").ok_or(Invalid::Malformed)?;
    let inputs = Parser::parse_dictionary(&input).map_err(|_| Invalid::Malformed)?;
    let signatures = joined(req.headers, "signature")
        .and_then(|value| Parser::parse_dictionary(&value).ok())
        .ok_or(Invalid::SignatureMissing)?;
    let agents = SignatureAgent::read(req.headers)?;

    let mut first_error = None;
    let tagged = inputs
        .iter()
        .filter_map(|(label, entry)| match entry {
            ListEntry::InnerList(list) if is_web_bot_auth(list) => Some((label, list)),
            _ => None,
        })
        .take(limits.max_signatures);
    for (label, list) in tagged {
        match candidate(req, label, list, &signatures, &agents, now, limits) {
            Ok(candidate) => return Ok(candidate),
            Err(invalid) => {
                first_error.get_or_insert(invalid);
            }
        }
    }
    Err(first_error.unwrap_or(Invalid::WrongTag))
}

fn is_web_bot_auth(list: &InnerList) -> bool {
    matches!(list.params.get("tag"), Some(BareItem::String(tag)) if tag == TAG)
}

/// The checks in order of cost: parameters and clock, the covered set, the agent, then the base.
fn candidate(
    req: &SignedRequest,
    label: &str,
    list: &InnerList,
    signatures: &Dictionary,
    agents: &SignatureAgent,
    now: u64,
    limits: &Limits,
) -> Result<Candidate, Invalid> {
    let params = &list.params;
    let created = unix_param(params.get("created"))?;
    let expires = unix_param(params.get("expires"))?;
    let keyid = match params.get("keyid") {
        Some(BareItem::String(keyid)) if !keyid.is_empty() => keyid.clone(),
        _ => return Err(Invalid::Malformed),
    };
    match params.get("alg") {
        None => {}
        Some(BareItem::String(alg)) if alg == "ed25519" => {}
        Some(_) => return Err(Invalid::UnsupportedAlgorithm),
    }
    let nonce = match params.get("nonce") {
        None => None,
        Some(BareItem::String(nonce)) => Some(nonce.clone()),
        Some(_) => return Err(Invalid::Malformed),
    };
    if expires < created || expires - created > limits.max_validity.as_secs() {
        return Err(Invalid::ValidityTooLong);
    }
    let skew = limits.max_skew.as_secs();
    if created > now.saturating_add(skew) {
        return Err(Invalid::NotYetValid);
    }
    if expires.saturating_add(skew) < now {
        return Err(Invalid::Expired);
    }

    if list.items.len() > limits.max_components {
        return Err(Invalid::TooLarge);
    }
    let components = list
        .items
        .iter()
        .map(component)
        .collect::<Result<Vec<_>, _>>()?;
    for (i, c) in components.iter().enumerate() {
        if components[..i].contains(c) {
            return Err(Invalid::Malformed);
        }
    }
    if !components
        .iter()
        .any(|c| c.name == "@authority" || c.name == "@target-uri")
    {
        return Err(Invalid::AuthorityNotCovered);
    }
    let agent = agents.covered(label, &components)?;

    let signature = match signatures.get(label) {
        Some(ListEntry::Item(Item {
            bare_item: BareItem::ByteSeq(bytes),
            ..
        })) => <[u8; 64]>::try_from(bytes.as_slice()).map_err(|_| Invalid::SignatureMissing)?,
        _ => return Err(Invalid::SignatureMissing),
    };
    let base = signature_base(req, list, &components)?;
    Ok(Candidate {
        label: label.to_owned(),
        keyid,
        created,
        expires,
        nonce,
        agent,
        components,
        base,
        signature,
    })
}

fn unix_param(value: Option<&BareItem>) -> Result<u64, Invalid> {
    match value {
        Some(BareItem::Integer(n)) => u64::try_from(*n).map_err(|_| Invalid::Malformed),
        _ => Err(Invalid::Malformed),
    }
}

/// A covered component identifier, checked against what this verifier builds.
pub(crate) fn component(item: &Item) -> Result<Component, Invalid> {
    let BareItem::String(name) = &item.bare_item else {
        return Err(Invalid::Malformed);
    };
    if let Some(derived) = name.strip_prefix('@') {
        // Derived components take no parameters here (`req` is for responses).
        const SUPPORTED: [&str; 7] = [
            "method",
            "authority",
            "scheme",
            "target-uri",
            "request-target",
            "path",
            "query",
        ];
        if !SUPPORTED.contains(&derived) || !item.params.is_empty() {
            return Err(Invalid::UnsupportedComponent);
        }
        return Ok(Component {
            name: name.clone(),
            key: None,
        });
    }
    // RFC 9421: field names are lowercased in component identifiers.
    if name.is_empty() || name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(Invalid::Malformed);
    }
    let mut key = None;
    for (param, value) in &item.params {
        match (param.as_str(), value) {
            ("key", BareItem::String(member)) => key = Some(member.clone()),
            ("key", _) => return Err(Invalid::Malformed),
            // sf, bs, req, tr: not built by this verifier.
            _ => return Err(Invalid::UnsupportedComponent),
        }
    }
    Ok(Component {
        name: name.clone(),
        key,
    })
}

/// The request's `Signature-Agent`, in either form.
enum SignatureAgent {
    Absent,
    Dictionary(Dictionary),
    /// The legacy form: one string.
    Legacy(Item),
}

impl SignatureAgent {
    fn read(headers: &http::HeaderMap) -> Result<SignatureAgent, Invalid> {
        let Some(value) = joined(headers, "signature-agent") else {
            return Ok(SignatureAgent::Absent);
        };
        // A String Item begins with a double quote, a dictionary member key cannot (the draft).
        if value.first() == Some(&b'"') {
            let item = Parser::parse_item(&value).map_err(|_| Invalid::Malformed)?;
            return Ok(SignatureAgent::Legacy(item));
        }
        Parser::parse_dictionary(&value)
            .map(SignatureAgent::Dictionary)
            .map_err(|_| Invalid::Malformed)
    }

    /// The member this signature covers, per the draft: the covered `"signature-agent";key=K`
    /// (the one keyed by the label when several are covered); the legacy string covered whole.
    fn covered(&self, label: &str, components: &[Component]) -> Result<Option<Agent>, Invalid> {
        let mut covered = components.iter().filter(|c| c.name == "signature-agent");
        match self {
            SignatureAgent::Absent => {
                if covered.next().is_some() {
                    return Err(Invalid::ComponentMissing);
                }
                Ok(None)
            }
            SignatureAgent::Legacy(item) => {
                if !covered.any(|c| c.key.is_none()) {
                    return Err(Invalid::AgentNotCovered);
                }
                agent(item, true)
            }
            SignatureAgent::Dictionary(members) => {
                let keys: Vec<Option<&str>> = covered.map(|c| c.key.as_deref()).collect();
                let member_key = if keys.contains(&None) {
                    // The whole field covered: the label's member, or the only one.
                    if members.contains_key(label) {
                        label
                    } else if members.len() == 1 {
                        members.keys().next().map(String::as_str).unwrap_or(label)
                    } else {
                        return Err(Invalid::AgentNotCovered);
                    }
                } else {
                    match keys.as_slice() {
                        [] => return Err(Invalid::AgentNotCovered),
                        [Some(key)] => key,
                        _ if keys.contains(&Some(label)) => label,
                        _ => return Err(Invalid::AgentNotCovered),
                    }
                };
                match members.get(member_key) {
                    Some(ListEntry::Item(item)) => agent(item, false),
                    Some(ListEntry::InnerList(_)) => Err(Invalid::Malformed),
                    None => Err(Invalid::ComponentMissing),
                }
            }
        }
    }
}

/// An agent from a `Signature-Agent` value: an https URI; `None` for a member the draft says to
/// ignore (an unknown `type`, a `directory` that is not an origin).
fn agent(item: &Item, legacy: bool) -> Result<Option<Agent>, Invalid> {
    let BareItem::String(value) = &item.bare_item else {
        return Err(Invalid::Malformed);
    };
    let url = url::Url::parse(value).map_err(|_| Invalid::Malformed)?;
    if url.scheme() != "https" {
        return Err(Invalid::AgentNotHttps);
    }
    if url.host_str().is_none_or(str::is_empty)
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(Invalid::Malformed);
    }
    let kind = match item.params.get("type") {
        None => AgentKind::Directory,
        Some(BareItem::Token(kind)) if kind == "directory" => AgentKind::Directory,
        Some(BareItem::Token(kind)) if kind == "jwks_uri" => AgentKind::JwksUri,
        Some(_) => return Ok(None),
    };
    let normalised = match kind {
        AgentKind::Directory => {
            if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
                return Ok(None);
            }
            url.origin().ascii_serialization()
        }
        AgentKind::JwksUri => {
            let mut url = url;
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
    };
    Ok(Some(Agent {
        url: normalised,
        kind,
        legacy,
    }))
}

/// RFC 9421 section 2.5: one line per covered component, then `@signature-params`.
pub(crate) fn signature_base(
    req: &SignedRequest,
    list: &InnerList,
    components: &[Component],
) -> Result<Vec<u8>, Invalid> {
    let mut base = Vec::with_capacity(256);
    for (item, component) in list.items.iter().zip(components) {
        // The identifier as serialized by the structured-field rules, parameters included.
        let identifier = vec![ListEntry::Item(item.clone())]
            .serialize_value()
            .map_err(|_| Invalid::Malformed)?;
        base.extend_from_slice(identifier.as_bytes());
        base.extend_from_slice(b": ");
        component_value(req, component, &mut base)?;
        base.push(b'\n');
    }
    let params = vec![ListEntry::InnerList(list.clone())]
        .serialize_value()
        .map_err(|_| Invalid::Malformed)?;
    base.extend_from_slice(b"\"@signature-params\": ");
    base.extend_from_slice(params.as_bytes());
    Ok(base)
}

fn component_value(
    req: &SignedRequest,
    component: &Component,
    out: &mut Vec<u8>,
) -> Result<(), Invalid> {
    let (path, query) = match req.target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (req.target, None),
    };
    match component.name.as_str() {
        "@method" => out.extend_from_slice(req.method.as_bytes()),
        "@authority" => push_authority(req, out),
        "@scheme" => out.extend_from_slice(req.scheme.to_ascii_lowercase().as_bytes()),
        "@target-uri" => {
            if req.target.starts_with('/') {
                out.extend_from_slice(req.scheme.to_ascii_lowercase().as_bytes());
                out.extend_from_slice(b"://");
                push_authority(req, out);
            }
            out.extend_from_slice(req.target.as_bytes());
        }
        "@request-target" => out.extend_from_slice(req.target.as_bytes()),
        "@path" => out.extend_from_slice(if path.is_empty() { "/" } else { path }.as_bytes()),
        "@query" => {
            out.push(b'?');
            out.extend_from_slice(query.unwrap_or("").as_bytes());
        }
        name => {
            let value = joined(req.headers, name).ok_or(Invalid::ComponentMissing)?;
            match &component.key {
                None => out.extend_from_slice(&value),
                Some(key) => {
                    let members =
                        Parser::parse_dictionary(&value).map_err(|_| Invalid::Malformed)?;
                    let member = members.get(key).ok_or(Invalid::ComponentMissing)?;
                    let serialized = vec![member.clone()]
                        .serialize_value()
                        .map_err(|_| Invalid::Malformed)?;
                    out.extend_from_slice(serialized.as_bytes());
                }
            }
        }
    }
    Ok(())
}

/// `@authority`: the host lowercased, the scheme's default port dropped (RFC 9421 2.2.3).
fn push_authority(req: &SignedRequest, out: &mut Vec<u8>) {
    let authority = req.authority.trim();
    let default_port = match req.scheme {
        "https" => Some(":443"),
        "http" => Some(":80"),
        _ => None,
    };
    let authority = match default_port {
        Some(port) if authority.ends_with(port) && !authority.ends_with(']') => {
            &authority[..authority.len() - port.len()]
        }
        _ => authority,
    };
    out.extend(authority.bytes().map(|b| b.to_ascii_lowercase()));
}

/// A field's value as RFC 9421 section 2.1 takes it: every field line, trimmed, joined with
/// `", "`. `None` when the field is absent.
fn joined(headers: &http::HeaderMap, name: &str) -> Option<Vec<u8>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let mut value = trim(first.as_bytes()).to_vec();
    for line in lines {
        value.extend_from_slice(b", ");
        value.extend_from_slice(trim(line.as_bytes()));
    }
    Some(value)
}

fn field_bytes(headers: &http::HeaderMap, name: &str) -> usize {
    headers.get_all(name).iter().map(|v| v.len() + 2).sum()
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}
