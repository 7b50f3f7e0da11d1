//! What every rule section's check and evaluation share: the actions, rule ids, expressions
//! compiled with their errors at their place in the file, what the rules need loaded, and the
//! refusal that ends the phases.

use std::collections::HashSet;
use std::ops::{ControlFlow, Range};
use std::sync::Arc;

use serde_spanned::Spanned;

use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind};
use crate::expr::{self, ExprError, Filter};
use crate::verdict::Verdict;

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Block,
    Allow,
    Log,
    /// Custom rules: send the request to another origin the zone declares (`[[zone.divert]]`).
    Divert,
    /// Note a challenge and go on (`crate::challenge`).
    Challenge,
}

impl Action {
    /// As the policy writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Block => "block",
            Action::Allow => "allow",
            Action::Log => "log",
            Action::Divert => "divert",
            Action::Challenge => "challenge",
        }
    }
}

/// What the rules need loaded or done for them, found while they are checked.
#[derive(Debug, Default)]
pub(crate) struct Needs {
    /// Where a rule first needs the country database, to report a missing `[geo]` entry.
    pub country_needed_at: Option<Range<usize>>,
    /// Where a rule first needs the ASN database.
    pub asn_needed_at: Option<Range<usize>>,
    /// Whether a rule reads who the request is (a bot field, or a rate limit counting per
    /// agent): the policy then identifies requests.
    pub identity_needed: bool,
    /// Where a rule first challenges, to report a missing `[challenge] keys`.
    pub challenge_needed_at: Option<Range<usize>>,
}

pub(super) fn sp<T>(s: &Spanned<T>) -> Range<usize> {
    s.span()
}

/// Rule ids seen so far: each must be unique and non-empty.
#[derive(Default)]
pub(crate) struct RuleIds {
    seen: HashSet<String>,
}

impl RuleIds {
    pub(super) fn check(&mut self, d: &mut Diagnostics<'_>, id: &Spanned<String>) -> Arc<str> {
        let v = id.get_ref().trim();
        if v.is_empty() {
            d.at(ProblemKind::Invalid, sp(id), "a rule id must not be empty");
        } else if !self.seen.insert(v.to_owned()) {
            d.at(
                ProblemKind::Invalid,
                sp(id),
                format!("rule id `{v}` is used twice"),
            );
        }
        Arc::from(v)
    }
}

/// Compiles an expression, reporting errors at their place inside the TOML string.
pub(super) fn expression(
    d: &mut Diagnostics<'_>,
    e: &Spanned<String>,
    needs: &mut Needs,
) -> Option<Filter> {
    expression_in(d, e, needs, false)
}

/// [`expression`], for an error rule when `response_fields` (it may read the answer's fields).
pub(super) fn expression_in(
    d: &mut Diagnostics<'_>,
    e: &Spanned<String>,
    needs: &mut Needs,
    response_fields: bool,
) -> Option<Filter> {
    match expr::build_in(e.get_ref(), response_fields) {
        Ok(f) => {
            if f.needs_country {
                needs.country_needed_at.get_or_insert(sp(e));
            }
            if f.needs_asn {
                needs.asn_needed_at.get_or_insert(sp(e));
            }
            needs.identity_needed |= f.needs_identity;
            Some(f)
        }
        Err(ExprError { span, message }) => {
            let start = map_string_offset(d.text(), sp(e), span.start);
            let end = map_string_offset(d.text(), sp(e), span.end).max(start + 1);
            d.at(ProblemKind::Expression, start..end, message);
            None
        }
    }
}

/// Maps a byte offset in a TOML string's value to its offset in the file, through the quotes,
/// escapes and line continuations of the four TOML string forms.
pub(crate) fn map_string_offset(text: &str, value: Range<usize>, idx: usize) -> usize {
    let Some(raw) = text.get(value.clone()) else {
        return value.start;
    };
    let (delim, basic) = if raw.starts_with("\"\"\"") {
        (3, true)
    } else if raw.starts_with("'''") {
        (3, false)
    } else if raw.starts_with('"') {
        (1, true)
    } else if raw.starts_with('\'') {
        (1, false)
    } else {
        return value.start;
    };
    let mut pos = delim;
    if delim == 3 {
        // A newline right after the opening delimiter is not part of the value.
        if raw[pos..].starts_with("\r\n") {
            pos += 2;
        } else if raw[pos..].starts_with('\n') {
            pos += 1;
        }
    }
    let bytes = raw.as_bytes();
    let mut decoded = 0;
    while decoded < idx && pos < raw.len() {
        if basic && bytes[pos] == b'\\' {
            let next = bytes.get(pos + 1).copied().unwrap_or(b' ');
            match next {
                b'u' => {
                    let ch = raw
                        .get(pos + 2..pos + 6)
                        .and_then(|h| u32::from_str_radix(h, 16).ok());
                    decoded += ch.and_then(char::from_u32).map_or(1, char::len_utf8);
                    pos += 6;
                }
                b'U' => {
                    let ch = raw
                        .get(pos + 2..pos + 10)
                        .and_then(|h| u32::from_str_radix(h, 16).ok());
                    decoded += ch.and_then(char::from_u32).map_or(1, char::len_utf8);
                    pos += 10;
                }
                b' ' | b'\t' | b'\r' | b'\n' if delim == 3 => {
                    // Line-ending backslash: the break and following whitespace vanish.
                    pos += 1;
                    while pos < raw.len() && bytes[pos].is_ascii_whitespace() {
                        pos += 1;
                    }
                }
                _ => {
                    decoded += 1;
                    pos += 2;
                }
            }
        } else {
            let len = raw[pos..].chars().next().map_or(1, char::len_utf8);
            decoded += len;
            pos += len;
        }
    }
    value.start + pos.min(raw.len())
}

/// Refuses with `code`, naming the rule that decided: the end of the phases.
pub(super) fn refuse<T>(
    decision: &mut Decision,
    code: Code,
    id: Option<Arc<str>>,
) -> ControlFlow<(), T> {
    decision.verdict = Verdict::refuse(code);
    decision.rule_id = id;
    ControlFlow::Break(())
}
