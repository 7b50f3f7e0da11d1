//! Recursive-descent parser: tokens → `Expr`, with Cloudflare's precedence
//! (`not` binds tightest, then `and`, `xor`, `or`) and a bound on nesting.

use std::ops::Range;

use super::error::ExprError;
use super::lex::{Tok, Token, lex};

/// Deepest nesting of parentheses, `not` and function calls accepted.
pub const MAX_NESTING: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Xor(Box<Expr>, Box<Expr>),
    Not(Box<Expr>, Range<usize>),
    /// `value op value`; the right side of `in` is a `Value::Set`.
    Compare {
        lhs: Value,
        op: CmpOp,
        op_span: Range<usize>,
        rhs: Value,
    },
    /// A value used as a condition; must be boolean (`ssl`, `starts_with(...)`).
    Bare(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
    Matches,
    In,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Value {
    pub kind: ValueKind,
    pub span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ValueKind {
    Field(String),
    /// `http.request.headers["name"]`
    Header(String),
    Str(String),
    Int(i64),
    Ip(String),
    Call(String, Vec<Value>),
    Set(Vec<Value>),
}

/// Parses an expression.
pub(crate) fn parse(src: &str) -> Result<Expr, ExprError> {
    let tokens = lex(src)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let e = p.or()?;
    let t = p.peek();
    if t.kind != Tok::Eof {
        return Err(ExprError::new(
            t.span.clone(),
            format!(
                "expected `and`, `or`, `xor` or the end, found {}",
                describe(&t.kind)
            ),
        ));
    }
    Ok(e)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        // The lexer always ends with Eof, and `bump` never moves past it.
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.kind != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    fn is_word(&self, words: &[&str]) -> bool {
        matches!(&self.peek().kind, Tok::Ident(w) if words.contains(&w.as_str()))
    }

    fn enter(&mut self, span: &Range<usize>) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(ExprError::new(
                span.clone(),
                format!("expression nests deeper than {MAX_NESTING} levels"),
            ));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        let mut lhs = self.xor()?;
        while self.is_word(&["or"]) || self.peek().kind == Tok::OrOr {
            self.bump();
            lhs = Expr::Or(Box::new(lhs), Box::new(self.xor()?));
        }
        Ok(lhs)
    }

    fn xor(&mut self) -> Result<Expr, ExprError> {
        let mut lhs = self.and()?;
        while self.is_word(&["xor"]) || self.peek().kind == Tok::XorXor {
            self.bump();
            lhs = Expr::Xor(Box::new(lhs), Box::new(self.and()?));
        }
        Ok(lhs)
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut lhs = self.unary()?;
        while self.is_word(&["and"]) || self.peek().kind == Tok::AndAnd {
            self.bump();
            lhs = Expr::And(Box::new(lhs), Box::new(self.unary()?));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.is_word(&["not"]) || self.peek().kind == Tok::Bang {
            let t = self.bump();
            self.enter(&t.span)?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner), t.span));
        }
        if self.peek().kind == Tok::LParen {
            let t = self.bump();
            self.enter(&t.span)?;
            let inner = self.or()?;
            self.depth -= 1;
            self.expect(Tok::RParen, "`)`")?;
            return Ok(inner);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, ExprError> {
        let lhs = self.value()?;
        let t = self.peek().clone();
        let op = match &t.kind {
            Tok::EqEq => Some(CmpOp::Eq),
            Tok::NotEq => Some(CmpOp::Ne),
            Tok::Lt => Some(CmpOp::Lt),
            Tok::Le => Some(CmpOp::Le),
            Tok::Gt => Some(CmpOp::Gt),
            Tok::Ge => Some(CmpOp::Ge),
            Tok::Tilde => Some(CmpOp::Matches),
            Tok::Ident(w) => match w.as_str() {
                "eq" => Some(CmpOp::Eq),
                "ne" => Some(CmpOp::Ne),
                "lt" => Some(CmpOp::Lt),
                "le" => Some(CmpOp::Le),
                "gt" => Some(CmpOp::Gt),
                "ge" => Some(CmpOp::Ge),
                "contains" => Some(CmpOp::Contains),
                "matches" => Some(CmpOp::Matches),
                "in" => Some(CmpOp::In),
                _ => None,
            },
            _ => None,
        };
        let Some(op) = op else {
            return Ok(Expr::Bare(lhs));
        };
        self.bump();
        let rhs = if op == CmpOp::In {
            self.set()?
        } else {
            self.value()?
        };
        Ok(Expr::Compare {
            lhs,
            op,
            op_span: t.span,
            rhs,
        })
    }

    fn set(&mut self) -> Result<Value, ExprError> {
        let open = self.expect(Tok::LBrace, "`{` to start a set")?;
        let mut items = Vec::new();
        loop {
            let t = self.peek().clone();
            match t.kind {
                Tok::RBrace => {
                    self.bump();
                    return Ok(Value {
                        kind: ValueKind::Set(items),
                        span: open.start..t.span.end,
                    });
                }
                Tok::Comma => {
                    self.bump();
                }
                Tok::Str(_) | Tok::Int(_) | Tok::Ip(_) => items.push(self.value()?),
                _ => {
                    return Err(ExprError::new(
                        t.span,
                        format!(
                            "expected a string, number or IP address in the set, or `}}`, found {}",
                            describe(&t.kind)
                        ),
                    ));
                }
            }
        }
    }

    fn value(&mut self) -> Result<Value, ExprError> {
        let t = self.bump();
        let span = t.span.clone();
        let kind = match t.kind {
            Tok::Str(s) => ValueKind::Str(s),
            Tok::Int(n) => ValueKind::Int(n),
            Tok::Ip(s) => ValueKind::Ip(s),
            Tok::Ident(name) => {
                if self.peek().kind == Tok::LParen {
                    self.bump();
                    self.enter(&span)?;
                    let mut args = Vec::new();
                    if self.peek().kind != Tok::RParen {
                        loop {
                            args.push(self.value()?);
                            if self.peek().kind == Tok::Comma {
                                self.bump();
                                continue;
                            }
                            break;
                        }
                    }
                    self.depth -= 1;
                    let close = self.expect(Tok::RParen, "`)` to close the call")?;
                    return Ok(Value {
                        kind: ValueKind::Call(name, args),
                        span: span.start..close.end,
                    });
                }
                if self.peek().kind == Tok::LBracket {
                    self.bump();
                    let key = self.bump();
                    let Tok::Str(header) = key.kind else {
                        return Err(ExprError::new(
                            key.span,
                            "expected a quoted header name, as in http.request.headers[\"x-api-key\"]",
                        ));
                    };
                    let close = self.expect(Tok::RBracket, "`]`")?;
                    if name != super::fields::HEADERS {
                        return Err(ExprError::new(
                            span.start..close.end,
                            format!(
                                "`{name}` cannot be indexed; only http.request.headers[\"name\"] can"
                            ),
                        ));
                    }
                    return Ok(Value {
                        kind: ValueKind::Header(header),
                        span: span.start..close.end,
                    });
                }
                ValueKind::Field(name)
            }
            other => {
                return Err(ExprError::new(
                    span,
                    format!(
                        "expected a field, function or value, found {}",
                        describe(&other)
                    ),
                ));
            }
        };
        Ok(Value { kind, span })
    }

    fn expect(&mut self, want: Tok, what: &str) -> Result<Range<usize>, ExprError> {
        let t = self.peek().clone();
        if t.kind == want {
            self.bump();
            Ok(t.span)
        } else {
            Err(ExprError::new(
                t.span,
                format!("expected {what}, found {}", describe(&t.kind)),
            ))
        }
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(w) => format!("`{w}`"),
        Tok::Str(s) => format!("string \"{s}\""),
        Tok::Int(n) => format!("number {n}"),
        Tok::Ip(s) => format!("address `{s}`"),
        Tok::Eof => "the end of the expression".into(),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::LBrace => "`{`".into(),
        Tok::RBrace => "`}`".into(),
        Tok::LBracket => "`[`".into(),
        Tok::RBracket => "`]`".into(),
        Tok::Comma => "`,`".into(),
        Tok::EqEq => "`==`".into(),
        Tok::NotEq => "`!=`".into(),
        Tok::Lt => "`<`".into(),
        Tok::Le => "`<=`".into(),
        Tok::Gt => "`>`".into(),
        Tok::Ge => "`>=`".into(),
        Tok::Tilde => "`~`".into(),
        Tok::Bang => "`!`".into(),
        Tok::AndAnd => "`&&`".into(),
        Tok::OrOr => "`||`".into(),
        Tok::XorXor => "`^^`".into(),
    }
}
