//! Rule expressions: a subset of Cloudflare's Rules language, compiled once and evaluated per
//! request.
//!
//! `parse` gives an `Expr` (syntax only), `compile` type-checks it into a `Filter` (fields resolved,
//! regexes built, IP sets turned into prefix tables), and `Filter::matches` evaluates it against a
//! request's `Cx`, allocating only for `lower`/`upper`, the decoding functions (when there is
//! something to decode) and `http.request.full_uri`.

mod compile;
mod cx;
mod decode;
mod error;
mod eval;
mod fields;
mod index;
mod lex;
mod parse;

use std::ops::Range;

pub use compile::MAX_REGEX_SIZE;
pub(crate) use compile::{Filter, compile};
pub(crate) use cx::Cx;
pub use cx::ResponseFacts;
pub(crate) use error::{ExprError, regex_reason};
pub(crate) use fields::Field;
pub(crate) use index::FilterIndex;
pub use parse::MAX_NESTING;

/// Longest expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 8 * 1024;

/// Parses and compiles an expression that must be a condition (boolean).
#[cfg(test)]
pub(crate) fn build(src: &str) -> Result<Filter, ExprError> {
    build_in(src, false)
}

/// [`build`], for an error rule when `response_fields`: it may read `http.response.code` and
/// `cf.response.1xxx_code`.
pub(crate) fn build_in(src: &str, response_fields: bool) -> Result<Filter, ExprError> {
    if src.len() > MAX_EXPRESSION_LEN {
        return Err(ExprError::new(
            0..src.len(),
            format!("expression is longer than {MAX_EXPRESSION_LEN} bytes"),
        ));
    }
    if src.trim().is_empty() {
        return Err(ExprError::new(0..src.len(), "expression is empty"));
    }
    let ast = parse::parse(src)?;
    let mut filter = compile::compile_in(&ast, response_fields)?;
    filter.text = src.into();
    Ok(filter)
}

#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod tests;

// === Public surface: checking and evaluating one expression on its own ===

/// An error in a standalone expression: where (byte span in the expression) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpressionError {
    /// Byte span inside the expression text.
    pub span: Range<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ExpressionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}..{}: {}",
            self.span.start, self.span.end, self.message
        )
    }
}

impl std::error::Error for ExpressionError {}

impl From<ExprError> for ExpressionError {
    fn from(e: ExprError) -> Self {
        ExpressionError {
            span: e.span,
            message: e.message,
        }
    }
}

/// A rule expression after parsing (syntax only), before type checking.
#[derive(Debug, Clone)]
pub struct ParsedExpression(parse::Expr);

impl ParsedExpression {
    /// Parses an expression, within [`MAX_EXPRESSION_LEN`] and [`MAX_NESTING`].
    pub fn parse(src: &str) -> Result<ParsedExpression, ExpressionError> {
        if src.len() > MAX_EXPRESSION_LEN {
            return Err(ExprError::new(
                0..src.len(),
                format!("expression is longer than {MAX_EXPRESSION_LEN} bytes"),
            )
            .into());
        }
        Ok(ParsedExpression(parse::parse(src)?))
    }

    /// Type-checks and compiles it.
    pub fn compile(&self) -> Result<Expression, ExpressionError> {
        Ok(Expression(compile(&self.0)?))
    }
}

/// A compiled rule expression, evaluated without geo databases (country reads as empty,
/// ASN as 0). Policies compile their expressions themselves; this is for tools and benchmarks.
#[derive(Debug, Clone)]
pub struct Expression(Filter);

impl Expression {
    /// Whether the request matches, with `client_ip` as `ip.src`.
    pub fn matches(&self, facts: &crate::RequestFacts<'_>, client_ip: std::net::IpAddr) -> bool {
        self.0.matches(&Cx::new(
            facts,
            crate::ipset::canonical(client_ip),
            None,
            None,
        ))
    }
}
