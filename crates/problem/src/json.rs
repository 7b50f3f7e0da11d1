//! The flat RFC 9457 JSON body, members in the contract's order.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::catalog::Category;
use crate::custom::{Custom, FIXED_MEMBERS, HEADER_MEMBERS};
use crate::problem::{Branding, Prose, View};
use crate::tokens::{Escape, TokenValues, expand};

/// The wire object. Field order here is the member order on the wire (serde keeps declaration
/// order), and serde_json does the escaping.
#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    type_uri: &'a str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    instance: &'a str,
    error_code: u16,
    error_name: &'a str,
    error_category: Category,
    ray_id: &'a str,
    timestamp: &'a str,
    zone: &'a str,
    cloudflare_error: bool,
    /// `"origin"` on an origin's error answered in the contract's shape; absent on the edge's
    /// own, whose bodies stay Cloudflare's byte for byte.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u32>,
    owner_action_required: bool,
    what_you_should_do: &'a str,
    footer: &'a str,
}

pub(crate) fn render(
    view: &View<'_>,
    prose: &Prose,
    branding: &Branding,
    custom: &Custom,
    tokens: &TokenValues<'_>,
) -> Vec<u8> {
    let problem = view.problem;
    let entry = problem.entry;
    let type_uri = branding.type_uri(entry);
    let timestamp = problem.timestamp_string();
    let body = Body {
        type_uri: &type_uri,
        title: &prose.wire_title,
        status: view.status,
        detail: &prose.detail,
        instance: problem.ray_id,
        error_code: entry.code.get(),
        error_name: &entry.error_name,
        error_category: entry.error_category,
        ray_id: problem.ray_id,
        timestamp: &timestamp,
        zone: problem.zone,
        // Agents written against Cloudflare check it to tell edge errors from origin errors:
        // true on every body the edge made, false on an origin's error it reshaped.
        cloudflare_error: !entry.from_origin,
        source: entry.from_origin.then_some("origin"),
        retryable: view.retryable,
        retry_after: view.retry_after,
        owner_action_required: entry.owner_action_required,
        what_you_should_do: &prose.guidance,
        footer: &branding.footer,
    };
    let Some(extra) = &custom.json else {
        // Cannot fail: strings, integers and booleans only, written to memory.
        return serde_json::to_vec(&body).unwrap_or_default();
    };
    let mut object = match serde_json::to_value(&body) {
        Ok(Value::Object(object)) => object,
        _ => Map::new(),
    };
    merge(&mut object, extra, tokens);
    serde_json::to_vec(&Value::Object(object)).unwrap_or_default()
}

/// Merges the operator's members into the contract's object: a member the contract keeps
/// (fixed or header-bound) is skipped whatever the policy said, a text member replaces the
/// contract's, any other is added after them. Token values go into JSON strings unescaped:
/// serde_json escapes the whole string when it writes it.
fn merge(object: &mut Map<String, Value>, extra: &Map<String, Value>, tokens: &TokenValues<'_>) {
    for (key, value) in extra {
        if FIXED_MEMBERS.contains(&key.as_str()) || HEADER_MEMBERS.contains(&key.as_str()) {
            continue;
        }
        object.insert(key.clone(), expand_value(value, tokens));
    }
}

fn expand_value(value: &Value, tokens: &TokenValues<'_>) -> Value {
    match value {
        Value::String(s) => Value::String(expand(s, tokens, Escape::None)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| expand_value(v, tokens)).collect())
        }
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), expand_value(v, tokens)))
                .collect(),
        ),
        other => other.clone(),
    }
}
