//! Error rules (`[[error_rule]]`, `[[zone.error_rule]]`): what the edge answers instead of its
//! default when an error matches. Checked and read (assets included) when the policy loads, so
//! nothing is read at request time; evaluated only when an error is being answered.

use std::path::Path;
use std::sync::Arc;

use serde_spanned::Spanned;
use signpost_problem::{Custom, MAX_ASSET_BYTES, MAX_INLINE_CONTENT};

use super::common::{Needs, RuleIds, expression_in, map_string_offset, sp};
use crate::error::{Diagnostics, ProblemKind};
use crate::expr::{Cx, Filter};
use crate::file::{AnswerFile, ErrorRuleFile, PolicyFile};

/// The longest wait a rule may announce: a day. A longer `Retry-After` reads as "never" to
/// clients, which `retryable = false` says better.
pub const MAX_RULE_RETRY_AFTER: i64 = 86_400;

/// How much inline content one kind of answer may carry, Cloudflare's limits for each: a custom
/// error rule's content 10 KB, a WAF custom rule's own response 2 KB, a rate-limit rule's 30 KB.
/// (Pages larger than that go in `html_file`, up to 1.5 MB.)
#[derive(Clone, Copy)]
struct InlineLimit {
    bytes: usize,
    of: &'static str,
}

const ERROR_RULE_CONTENT: InlineLimit = InlineLimit {
    bytes: MAX_INLINE_CONTENT,
    of: "an error rule's inline content",
};
/// A WAF custom rule's `response`: 2 KB.
pub const MAX_CUSTOM_RULE_RESPONSE: usize = 2 * 1024;
const CUSTOM_RULE_RESPONSE: InlineLimit = InlineLimit {
    bytes: MAX_CUSTOM_RULE_RESPONSE,
    of: "a custom rule's inline response",
};
/// A rate-limit rule's `response`: 30 KB.
pub const MAX_RATE_LIMIT_RESPONSE: usize = 30 * 1024;
const RATE_LIMIT_RESPONSE: InlineLimit = InlineLimit {
    bytes: MAX_RATE_LIMIT_RESPONSE,
    of: "a rate-limit rule's inline response",
};

#[derive(Debug)]
pub(crate) struct ErrorRule {
    pub id: Arc<str>,
    filter: Filter,
    pub custom: Custom,
}

/// Every error rule: the global ones and each zone's, in file order; and the responses of
/// custom and rate-limit rules, which come first.
#[derive(Debug, Default)]
pub(crate) struct ErrorRules {
    global: Vec<ErrorRule>,
    /// Indexed like the policy's zones.
    zones: Vec<Vec<ErrorRule>>,
    /// `response = {...}` of custom (block) and rate-limit rules, by rule id, with the code their
    /// refusal has (1020 or 1015).
    responses: std::collections::HashMap<Arc<str>, (u16, Custom)>,
}

impl ErrorRules {
    pub(crate) fn is_empty(&self) -> bool {
        self.global.is_empty() && self.zones.iter().all(Vec::is_empty) && self.responses.is_empty()
    }

    /// The response of the custom or rate-limit rule `id` for an answer with catalog code
    /// `edge_code`: only the refusal that rule makes (1020 or 1015) carries it.
    pub(crate) fn rule_response(&self, id: &str, edge_code: u16) -> Option<(&str, &Custom)> {
        let (key, (code, custom)) = self.responses.get_key_value(id)?;
        (*code == edge_code).then_some((&**key, custom))
    }

    /// The first rule that matches: the zone's rules first, then the global ones.
    pub(crate) fn first_match(&self, zone: Option<usize>, cx: &Cx<'_>) -> Option<&ErrorRule> {
        let zone_rules = zone
            .and_then(|z| self.zones.get(z))
            .map_or(&[][..], Vec::as_slice);
        zone_rules
            .iter()
            .chain(&self.global)
            .find(|rule| rule.filter.matches(cx))
    }
}

/// Checks every error rule, global and per zone, reading their assets.
pub(super) fn validate(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    needs: &mut Needs,
    base_dir: &Path,
) -> ErrorRules {
    let mut rules = ErrorRules::default();
    for r in &file.error_rule {
        if let Some(rule) = validate_one(r.get_ref(), d, ids, needs, base_dir) {
            rules.global.push(rule);
        }
    }
    for zone in &file.zone {
        let mut zone_rules = Vec::new();
        for r in &zone.get_ref().error_rule {
            if let Some(rule) = validate_one(r.get_ref(), d, ids, needs, base_dir) {
                zone_rules.push(rule);
            }
        }
        rules.zones.push(zone_rules);
    }
    for r in &file.custom_rule {
        let r = r.get_ref();
        let Some(response) = &r.response else {
            continue;
        };
        if r.action.get_ref() != "block" {
            d.at(
                ProblemKind::Invalid,
                sp(response),
                "only a `block` rule refuses, so only it can have a `response`",
            );
            continue;
        }
        if let Some(custom) = content(d, response.get_ref(), base_dir, CUSTOM_RULE_RESPONSE) {
            rules
                .responses
                .insert(Arc::from(r.id.get_ref().trim()), (1020, custom));
        }
    }
    for r in &file.rate_limit {
        let r = r.get_ref();
        let Some(response) = &r.response else {
            continue;
        };
        if let Some(custom) = content(d, response.get_ref(), base_dir, RATE_LIMIT_RESPONSE) {
            rules
                .responses
                .insert(Arc::from(r.id.get_ref().trim()), (1015, custom));
        }
    }
    rules
}

fn validate_one(
    r: &ErrorRuleFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    needs: &mut Needs,
    base_dir: &Path,
) -> Option<ErrorRule> {
    let id = ids.check(d, &r.id);
    let filter = expression_in(d, &r.expression, needs, true);
    let custom = content(d, &r.answer, base_dir, ERROR_RULE_CONTENT);
    Some(ErrorRule {
        id,
        filter: filter?,
        custom: custom?,
    })
}

/// Checks an answer's status, retry and content, reading its asset; `None` after any problem.
fn content(
    d: &mut Diagnostics<'_>,
    r: &AnswerFile,
    base_dir: &Path,
    limit: InlineLimit,
) -> Option<Custom> {
    let mut custom = Custom::default();
    let mut ok = true;
    if let Some(status) = &r.status {
        match u16::try_from(*status.get_ref()) {
            Ok(n @ 400..=599) => custom.status = Some(n),
            _ => bad(
                d,
                &mut ok,
                sp(status),
                "`status` must be from 400 to 599: an error answer must stay an error (a 2xx or 3xx would be cached and followed as a success), and clients understand no status past 599".into(),
            ),
        }
    }
    if let Some(wait) = &r.retry_after {
        match u32::try_from(*wait.get_ref()) {
            Ok(n) if n >= 1 && i64::from(n) <= MAX_RULE_RETRY_AFTER => {
                custom.retry_after = Some(n);
            }
            _ => bad(
                d,
                &mut ok,
                sp(wait),
                format!("`retry_after` must be whole seconds from 1 to {MAX_RULE_RETRY_AFTER}"),
            ),
        }
        if r.retryable == Some(false) {
            bad(
                d,
                &mut ok,
                sp(wait),
                "`retry_after` with `retryable = false`: a wait is only announced on a retryable answer".into(),
            );
        }
    }
    // A wait implies the answer is retryable.
    custom.retryable = r.retryable.or(custom.retry_after.map(|_| true));
    for (name, value, one_line, slot) in [
        ("title", r.title.as_ref(), true, &mut custom.title),
        ("detail", r.detail.as_ref(), true, &mut custom.detail),
        (
            "what_you_should_do",
            r.what_you_should_do.as_ref(),
            false,
            &mut custom.what_you_should_do,
        ),
        ("markdown", r.markdown.as_ref(), false, &mut custom.markdown),
        ("text", r.text.as_ref(), false, &mut custom.text),
        ("html", r.html.as_ref(), false, &mut custom.html),
    ] {
        let Some(value) = value else { continue };
        if inline(d, name, value, one_line, limit) {
            *slot = Some(value.get_ref().clone());
        } else {
            ok = false;
        }
    }
    if let Some(file) = &r.html_file {
        if r.html.is_some() {
            d.at(
                ProblemKind::Invalid,
                sp(file),
                "give `html` or `html_file`, not both",
            );
            ok = false;
        } else {
            match asset(d, file, base_dir) {
                Some(page) => custom.html = Some(page),
                None => ok = false,
            }
        }
    }
    if let Some(json) = &r.json {
        if inline(d, "json", json, false, limit) {
            match serde_json::from_str::<serde_json::Value>(json.get_ref()) {
                Ok(value) => match signpost_problem::check_json_content(&value) {
                    Ok(()) => custom.json = value.as_object().cloned(),
                    Err(why) => bad(d, &mut ok, sp(json), why),
                },
                Err(e) => bad(d, &mut ok, sp(json), format!("`json` is not JSON: {e}")),
            }
        } else {
            ok = false;
        }
    }
    ok.then_some(custom)
}

fn bad(d: &mut Diagnostics<'_>, ok: &mut bool, at: std::ops::Range<usize>, why: String) {
    d.at(ProblemKind::Invalid, at, why);
    *ok = false;
}

/// Checks inline content: its size, one line where the text is a title, and its tokens.
fn inline(
    d: &mut Diagnostics<'_>,
    name: &str,
    value: &Spanned<String>,
    one_line: bool,
    limit: InlineLimit,
) -> bool {
    let text = value.get_ref();
    let mut ok = true;
    if text.len() > limit.bytes {
        d.at(
            ProblemKind::Invalid,
            sp(value),
            format!(
                "`{name}` is {} bytes; {} is at most {} bytes (Cloudflare's limit); put a page in `html_file`",
                text.len(),
                limit.of,
                limit.bytes
            ),
        );
        ok = false;
    }
    if one_line && text.contains(['\n', '\r']) {
        d.at(
            ProblemKind::Invalid,
            sp(value),
            format!("`{name}` must be one line: it is a heading in Markdown and HTML"),
        );
        ok = false;
    }
    for (range, token) in signpost_problem::unknown_tokens(text) {
        let start = map_string_offset(d.text(), sp(value), range.start);
        let end = map_string_offset(d.text(), sp(value), range.end).max(start + 1);
        d.at_with_hint(
            ProblemKind::Invalid,
            start..end,
            format!("unknown token `::{token}::`"),
            Some(format!("tokens are {}", signpost_problem::token_list())),
        );
        ok = false;
    }
    ok
}

/// Reads an `html_file` asset (relative to the policy's directory): it must exist, be UTF-8, be
/// at most [`MAX_ASSET_BYTES`] and hold only known tokens. Problems are reported at the key.
fn asset(d: &mut Diagnostics<'_>, file: &Spanned<String>, base_dir: &Path) -> Option<String> {
    let written = file.get_ref();
    let path = base_dir.join(written);
    let hint = Path::new(written)
        .is_relative()
        .then(|| "relative paths are resolved against the policy file's directory".to_owned());
    let read = std::fs::File::open(&path).and_then(|f| {
        use std::io::Read;
        let mut bytes = Vec::new();
        // One byte past the limit tells an oversized file without reading all of it.
        f.take(MAX_ASSET_BYTES as u64 + 1).read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(e) => {
            d.at_with_hint(
                ProblemKind::Read,
                sp(file),
                format!("cannot read `html_file` `{written}`: {e}"),
                hint,
            );
            return None;
        }
    };
    if bytes.len() > MAX_ASSET_BYTES {
        d.at(
            ProblemKind::Invalid,
            sp(file),
            format!(
                "`html_file` `{written}` is over {MAX_ASSET_BYTES} bytes (1.5 MB, Cloudflare's limit for an error page asset)"
            ),
        );
        return None;
    }
    let Ok(page) = String::from_utf8(bytes) else {
        d.at(
            ProblemKind::Invalid,
            sp(file),
            format!("`html_file` `{written}` is not UTF-8 text"),
        );
        return None;
    };
    let unknown = signpost_problem::unknown_tokens(&page);
    for (range, token) in &unknown {
        let before = &page[..range.start];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        d.at_with_hint(
            ProblemKind::Invalid,
            sp(file),
            format!("`html_file` `{written}`:{line}:{column}: unknown token `::{token}::`"),
            Some(format!("tokens are {}", signpost_problem::token_list())),
        );
    }
    unknown.is_empty().then_some(page)
}
