//! A problem in an expression, at a byte span of its text, and the reason in a regex
//! library's message.

use std::ops::Range;

/// A problem in an expression, at a byte span of the expression text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExprError {
    pub span: Range<usize>,
    pub message: String,
}

impl ExprError {
    pub(crate) fn new(span: Range<usize>, message: impl Into<String>) -> Self {
        ExprError {
            span,
            message: message.into(),
        }
    }
}

/// The reason in a `regex` error, without the pattern echo and the `error:` prefix.
pub(crate) fn regex_reason(message: &str) -> &str {
    let last = message.lines().last().unwrap_or("").trim();
    last.strip_prefix("error:").unwrap_or(last).trim()
}
