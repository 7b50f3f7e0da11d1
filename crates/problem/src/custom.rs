//! What an operator's error rule changes in an answer, and which members of the contract it may
//! never change.

use serde_json::{Map, Value};

use crate::negotiate::Format;

/// Longest inline content (`html`, `json`, `markdown`, `text`, and each text field) an error
/// rule may hold, in bytes: Cloudflare's limit for a custom error rule's inline `content`.
pub const MAX_INLINE_CONTENT: usize = 10 * 1024;

/// Largest `html_file` asset, in bytes: Cloudflare's limit for a custom error asset (1.5 MB).
pub const MAX_ASSET_BYTES: usize = 1536 * 1024;

/// Members of the JSON body an operator can never set, in `json` content or otherwise: agents
/// branch on them and support quotes them, so they must mean the same on every answer. The
/// identity of the occurrence (`instance`, `ray_id`, `timestamp`, `zone`), what made it
/// (`error_code`, `error_name`, `error_category`, `type`, `cloudflare_error`, `source`) and
/// whether the owner must act.
pub const FIXED_MEMBERS: &[&str] = &[
    "type",
    "instance",
    "error_code",
    "error_name",
    "error_category",
    "ray_id",
    "timestamp",
    "zone",
    "cloudflare_error",
    "source",
    "owner_action_required",
];

/// Members an operator changes only with the rule's own keys (`status`, `retryable`,
/// `retry_after`), never inside `json` content: they must agree with the response's status line
/// and `Retry-After` header, which the edge writes from the same values.
pub const HEADER_MEMBERS: &[&str] = &["status", "retryable", "retry_after"];

/// Members an operator may change, with the rule's keys or inside `json` content.
pub const TEXT_MEMBERS: &[&str] = &["title", "detail", "what_you_should_do", "footer"];

/// An operator's error rule, as the renderer applies it. Text may hold `::NAME::` tokens (see
/// [`crate::TOKENS`]), expanded and escaped at render time for the format they land in.
///
/// What a rule does not give for a format is rendered from the contract with the rule's text,
/// so an agent always gets the stable members it branches on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Custom {
    /// The HTTP status of the answer (400-599); the `status` member follows.
    pub status: Option<u16>,
    /// Whether the client may retry; `Retry-After` and `retry_after` follow.
    pub retryable: Option<bool>,
    /// The wait to announce when retryable.
    pub retry_after: Option<u32>,
    /// The short title; the wire title stays `Error <code>: <title>`.
    pub title: Option<String>,
    /// What happened.
    pub detail: Option<String>,
    /// Guidance, Markdown.
    pub what_you_should_do: Option<String>,
    /// The whole HTML page for browsers.
    pub html: Option<String>,
    /// Members merged into the JSON body (a JSON object): text members replace the contract's,
    /// others are added after them; fixed and header members are refused when the policy loads.
    pub json: Option<Map<String, Value>>,
    /// The Markdown body after the edge's frontmatter.
    pub markdown: Option<String>,
    /// Plain text shown literally as the Markdown body when there is no `markdown`.
    pub text: Option<String>,
}

impl Custom {
    /// Which of the rule's content an answer in `format` shows, as [`crate::render_custom`]
    /// renders it: `html`, `json` (members merged into the contract's), `markdown`, `text`, or
    /// `contract` (the contract's layout with the rule's status, retry advice and text fields).
    /// For traces and previews.
    pub fn content_for(&self, format: Format) -> &'static str {
        match format {
            Format::Html if self.html.is_some() => "html",
            Format::Json | Format::ProblemJson if self.json.is_some() => "json",
            Format::Markdown if self.markdown.is_some() => "markdown",
            Format::Markdown | Format::Text if self.text.is_some() => "text",
            _ => "contract",
        }
    }
}

/// Why an operator's JSON content cannot be used: it is not an object, or it sets a member the
/// contract keeps (`FIXED_MEMBERS`, `HEADER_MEMBERS`).
pub fn check_json_content(value: &Value) -> Result<(), String> {
    let Some(object) = value.as_object() else {
        return Err("`json` must be a JSON object ({...})".to_owned());
    };
    for key in object.keys() {
        if FIXED_MEMBERS.contains(&key.as_str()) {
            return Err(format!(
                "`json` cannot set `{key}`: agents branch on it and support quotes it, so the edge always writes it"
            ));
        }
        if HEADER_MEMBERS.contains(&key.as_str()) {
            return Err(format!(
                "`json` cannot set `{key}`: set the rule's own `{key}` key, so that the headers agree"
            ));
        }
    }
    Ok(())
}
