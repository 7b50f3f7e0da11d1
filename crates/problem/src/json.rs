//! The flat RFC 9457 JSON body, members in the contract's order.
//!
//! Written straight into one buffer, byte for byte what serde_json's compact serialiser writes
//! for the same members (the tests hold the two together): an operator's `json` members are
//! written where they belong, their token values escaped as JSON strings, with no intermediate
//! `serde_json::Value` of the whole body.

use serde_json::{Map, Value};

use crate::custom::Custom;
use crate::problem::{Branding, Prose, View};
use crate::tokens::{Piece, TokenValues, expand_with};

/// The text members an operator's `json` may replace, in the contract's order of them.
const TITLE: usize = 0;
const DETAIL: usize = 1;
const GUIDANCE: usize = 2;
const FOOTER: usize = 3;

pub(crate) fn render(
    view: &View<'_>,
    prose: &Prose,
    branding: &Branding,
    custom: &Custom,
    tokens: &TokenValues<'_>,
) -> Vec<u8> {
    let problem = view.problem;
    let entry = problem.entry;
    // The operator's members: a text member replaces the contract's where it stands, a member
    // the contract keeps (fixed or header-bound) is skipped whatever the policy said, any other
    // is added after the contract's, in the operator's order.
    let mut replaced: [Option<&Value>; 4] = [None; 4];
    let mut added = false;
    if let Some(extra) = &custom.json {
        for (key, value) in extra {
            match key.as_str() {
                "title" => replaced[TITLE] = Some(value),
                "detail" => replaced[DETAIL] = Some(value),
                "what_you_should_do" => replaced[GUIDANCE] = Some(value),
                "footer" => replaced[FOOTER] = Some(value),
                _ => added |= !kept(key),
            }
        }
    }
    let mut out = Vec::with_capacity(1024 + if added { 256 } else { 0 });
    let text = |out: &mut Vec<u8>, which: usize, contract: &str| match replaced[which] {
        Some(value) => write_value(out, value, tokens),
        None => write_str(out, contract),
    };
    out.extend_from_slice(b"{\"type\":");
    write_str(&mut out, &branding.type_uri(entry));
    out.extend_from_slice(b",\"title\":");
    text(&mut out, TITLE, &prose.wire_title);
    out.extend_from_slice(b",\"status\":");
    write_u32(&mut out, u32::from(view.status));
    out.extend_from_slice(b",\"detail\":");
    text(&mut out, DETAIL, &prose.detail);
    out.extend_from_slice(b",\"instance\":");
    write_str(&mut out, problem.ray_id);
    out.extend_from_slice(b",\"error_code\":");
    write_u32(&mut out, u32::from(entry.code.get()));
    out.extend_from_slice(b",\"error_name\":");
    write_str(&mut out, &entry.error_name);
    out.extend_from_slice(b",\"error_category\":");
    write_str(&mut out, entry.error_category.as_str());
    out.extend_from_slice(b",\"ray_id\":");
    write_str(&mut out, problem.ray_id);
    out.extend_from_slice(b",\"timestamp\":");
    write_str(&mut out, &problem.timestamp_string());
    out.extend_from_slice(b",\"zone\":");
    write_str(&mut out, problem.zone);
    // Agents written against Cloudflare check it to tell edge errors from origin errors: true
    // on every body the edge made, false on an origin's error it reshaped, which alone says
    // `"source": "origin"` (the edge's own bodies stay Cloudflare's byte for byte).
    if entry.from_origin {
        out.extend_from_slice(b",\"cloudflare_error\":false,\"source\":\"origin\"");
    } else {
        out.extend_from_slice(b",\"cloudflare_error\":true");
    }
    out.extend_from_slice(b",\"retryable\":");
    write_bool(&mut out, view.retryable);
    if let Some(seconds) = view.retry_after {
        out.extend_from_slice(b",\"retry_after\":");
        write_u32(&mut out, seconds);
    }
    out.extend_from_slice(b",\"owner_action_required\":");
    write_bool(&mut out, entry.owner_action_required);
    out.extend_from_slice(b",\"what_you_should_do\":");
    text(&mut out, GUIDANCE, &prose.guidance);
    out.extend_from_slice(b",\"footer\":");
    text(&mut out, FOOTER, &branding.footer);
    if let (true, Some(extra)) = (added, &custom.json) {
        for (key, value) in extra {
            if kept(key) || is_text_member(key) {
                continue;
            }
            out.push(b',');
            write_str(&mut out, key);
            out.push(b':');
            write_value(&mut out, value, tokens);
        }
    }
    out.push(b'}');
    out
}

/// A member the contract keeps, which an operator's `json` never sets: one of `FIXED_MEMBERS`
/// or `HEADER_MEMBERS` (a test holds the lists and this together), matched by length first
/// rather than compared with each in turn.
fn kept(key: &str) -> bool {
    matches!(
        key,
        "type"
            | "instance"
            | "error_code"
            | "error_name"
            | "error_category"
            | "ray_id"
            | "timestamp"
            | "zone"
            | "cloudflare_error"
            | "source"
            | "owner_action_required"
            | "status"
            | "retryable"
            | "retry_after"
    )
}

fn is_text_member(key: &str) -> bool {
    matches!(key, "title" | "detail" | "what_you_should_do" | "footer")
}

/// Writes an operator's value with the tokens of its strings (at any depth) expanded; object
/// keys are written as given.
fn write_value(out: &mut Vec<u8>, value: &Value, tokens: &TokenValues<'_>) {
    match value {
        Value::String(text) => {
            out.push(b'"');
            expand_with(text, tokens, |piece| match piece {
                // JSON escaping is character by character, so escaping the operator's text and
                // each value apart writes what escaping the expanded string whole would.
                Piece::Text(text) | Piece::Value(text) => write_escaped(out, text),
                Piece::Number(n) => write_u32(out, n),
            });
            out.push(b'"');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item, tokens);
            }
            out.push(b']');
        }
        Value::Object(members) => write_object(out, members, tokens),
        // Numbers, booleans and null as serde_json writes them; writing to memory cannot fail.
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

fn write_object(out: &mut Vec<u8>, members: &Map<String, Value>, tokens: &TokenValues<'_>) {
    out.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, key);
        out.push(b':');
        write_value(out, value, tokens);
    }
    out.push(b'}');
}

fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

fn write_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(crate::tokens::decimal(n, &mut [0; 10]).as_bytes());
}

/// Writes `text` as a JSON string, quotes included.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    write_escaped(out, text);
    out.push(b'"');
}

/// Writes `text` escaped for the inside of a JSON string as serde_json escapes it: `"` and `\`,
/// the short escapes `\b \f \n \r \t`, other control characters below U+0020 as `\u00xx`
/// (lower-case hex), everything else (DEL, non-ASCII) as is. Runs that need no escape are
/// copied whole.
pub(crate) fn write_escaped(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xF)]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
    }
    out.extend_from_slice(&bytes[run..]);
}

/// For each byte, 0 when a JSON string holds it as is, else the letter after the backslash of
/// its escape (`u` for `\u00xx`).
static ESCAPE: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x0C] = b'f';
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;
    use crate::catalog::{Category, catalog, origin_entry};
    use crate::custom::{FIXED_MEMBERS, HEADER_MEMBERS};
    use crate::problem::Problem;
    use crate::tokens::{Escape, TOKENS, expand};

    /// The body as it was first made, the reference this writer must match byte for byte: a
    /// serde struct, and an operator's members merged through a `serde_json::Value`.
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
        #[serde(skip_serializing_if = "Option::is_none")]
        source: Option<&'static str>,
        retryable: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_after: Option<u32>,
        owner_action_required: bool,
        what_you_should_do: &'a str,
        footer: &'a str,
    }

    fn reference(
        view: &View<'_>,
        prose: &Prose,
        branding: &Branding,
        custom: &Custom,
        tokens: &TokenValues<'_>,
    ) -> Vec<u8> {
        let problem = view.problem;
        let entry = problem.entry;
        let body = Body {
            type_uri: &branding.type_uri(entry),
            title: &prose.wire_title,
            status: view.status,
            detail: &prose.detail,
            instance: problem.ray_id,
            error_code: entry.code.get(),
            error_name: &entry.error_name,
            error_category: entry.error_category,
            ray_id: problem.ray_id,
            timestamp: &problem.timestamp_string(),
            zone: problem.zone,
            cloudflare_error: !entry.from_origin,
            source: entry.from_origin.then_some("origin"),
            retryable: view.retryable,
            retry_after: view.retry_after,
            owner_action_required: entry.owner_action_required,
            what_you_should_do: &prose.guidance,
            footer: &branding.footer,
        };
        let Some(extra) = &custom.json else {
            return serde_json::to_vec(&body).unwrap();
        };
        let Value::Object(mut object) = serde_json::to_value(&body).unwrap() else {
            unreachable!("a struct serialises to an object")
        };
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
        for (key, value) in extra {
            let key = key.as_str();
            if !FIXED_MEMBERS.contains(&key) && !HEADER_MEMBERS.contains(&key) {
                object.insert(key.to_owned(), expand_value(value, tokens));
            }
        }
        serde_json::to_vec(&Value::Object(object)).unwrap()
    }

    /// Text with tokens, quotes, backslashes, control characters and multi-byte characters.
    fn tricky() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            prop::sample::select(TOKENS).prop_map(|t| format!("::{t}::")),
            Just("::".to_owned()),
            "[ -~]{0,5}",
            "[\\x{0}-\\x{1f}\\x{7f}\\x{85}\\x{2028}\"\\\\/é😀]{0,3}",
        ];
        prop::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
    }

    /// Keys an operator might write: every contract member, and others.
    fn key() -> impl Strategy<Value = String> {
        let contract: Vec<&str> = FIXED_MEMBERS
            .iter()
            .chain(HEADER_MEMBERS)
            .chain(crate::custom::TEXT_MEMBERS)
            .copied()
            .collect();
        prop_oneof![
            prop::sample::select(contract).prop_map(str::to_owned),
            tricky()
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            tricky().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn kept_members_are_the_fixed_and_header_members() {
        for member in FIXED_MEMBERS.iter().chain(HEADER_MEMBERS) {
            assert!(kept(member), "{member}");
            assert!(!is_text_member(member), "{member}");
        }
        for member in crate::custom::TEXT_MEMBERS {
            assert!(!kept(member), "{member}");
            assert!(is_text_member(member), "{member}");
        }
        assert!(!kept("Type") && !kept("types") && !kept("") && !is_text_member("Title"));
    }

    proptest! {
        #[test]
        fn the_body_is_what_serde_json_wrote(
            at in 0usize..1000,
            origin in prop::option::of(400u16..600),
            ray_id in tricky(),
            zone in tricky(),
            host in tricky(),
            footer in tricky(),
            template in prop::option::of(tricky()),
            status in prop::option::of(400u16..600),
            retryable in prop::option::of(any::<bool>()),
            retry_after in prop::option::of(any::<u32>()),
            title in prop::option::of(tricky()),
            detail in prop::option::of(tricky()),
            guidance in prop::option::of(tricky()),
            json in prop::option::of(prop::collection::vec((key(), value()), 0..6)),
        ) {
            let entry = match origin.and_then(origin_entry) {
                Some(entry) => entry,
                None => &catalog()[at % catalog().len()],
            };
            let problem = Problem {
                entry,
                ray_id: &ray_id,
                timestamp: UNIX_EPOCH + Duration::from_secs(1_773_054_688),
                zone: &zone,
                retry_after: None,
            };
            let branding = Branding { type_uri_template: template, footer };
            let custom = Custom {
                status,
                retryable,
                retry_after,
                title,
                detail,
                what_you_should_do: guidance,
                json: json.map(|members| members.into_iter().collect()),
                ..Custom::default()
            };
            let tokens = TokenValues {
                client_ip: "2001:db8::1",
                ray_id: &ray_id,
                geo: "FR",
                code: entry.code.get(),
                retry_after,
                zone: &zone,
                host: &host,
            };
            let view = View {
                problem: &problem,
                status: status.unwrap_or(entry.status),
                retryable: retryable.unwrap_or(entry.retryable),
                retry_after,
            };
            let prose = Prose::new(entry, &custom, &tokens, retry_after, Escape::None);
            let ours = render(&view, &prose, &branding, &custom, &tokens);
            let theirs = reference(&view, &prose, &branding, &custom, &tokens);
            prop_assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(theirs).unwrap());
        }
    }
}
