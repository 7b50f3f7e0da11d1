//! The flat RFC 9457 JSON body, members in the contract's order.

use serde::Serialize;

use crate::catalog::Category;
use crate::problem::{Branding, Problem};

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
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u32>,
    owner_action_required: bool,
    what_you_should_do: &'a str,
    footer: &'a str,
}

pub(crate) fn render(problem: &Problem<'_>, branding: &Branding) -> Vec<u8> {
    let entry = problem.entry;
    let type_uri = branding.type_uri(entry);
    let timestamp = problem.timestamp_string();
    let guidance = problem.guidance();
    let body = Body {
        type_uri: &type_uri,
        title: entry.wire_title(),
        status: entry.status,
        detail: &entry.detail,
        instance: problem.ray_id,
        error_code: entry.code.get(),
        error_name: &entry.error_name,
        error_category: entry.error_category,
        ray_id: problem.ray_id,
        timestamp: &timestamp,
        zone: problem.zone,
        // Always true: agents written against Cloudflare check it to tell edge errors from
        // origin errors, and every body made here is the edge's.
        cloudflare_error: true,
        retryable: entry.retryable,
        retry_after: problem.effective_retry_after(),
        owner_action_required: entry.owner_action_required,
        what_you_should_do: &guidance,
        footer: &branding.footer,
    };
    // Cannot fail: strings, integers and booleans only, written to memory.
    serde_json::to_vec(&body).unwrap_or_default()
}
