//! Type checking and compilation: `Expr` → `Filter`, every field, function and operand checked.

use std::collections::HashSet;
use std::net::IpAddr;

use http::header::HeaderName;
use regex::{Regex, RegexBuilder};

use super::error::{ExprError, regex_reason};
use super::fields::{Field, NAMES, Needs, Ty};
use super::parse::{CmpOp, Expr, Value, ValueKind};
use crate::ipset::canonical;
use crate::ipset::{IpTable, parse_net};

const FUNCTIONS: &[&str] = &[
    "lower",
    "upper",
    "len",
    "starts_with",
    "ends_with",
    "url_decode",
    "decode_base64",
    "remove_bytes",
];

/// Largest compiled size of one regex (`regex::RegexBuilder::size_limit`).
pub const MAX_REGEX_SIZE: usize = 1 << 20;

/// A compiled value.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    Field(Field),
    Str(Box<str>),
    Int(i64),
    Ip(IpAddr),
    Lower(Box<Val>),
    Upper(Box<Val>),
    Len(Box<Val>),
    StartsWith(Box<Val>, Box<Val>),
    EndsWith(Box<Val>, Box<Val>),
    /// `url_decode(s[, "ru"])`: percent-escapes and `+` decoded, optionally again and again.
    UrlDecode(Box<Val>, UrlDecodeOptions),
    /// `decode_base64(s)`: standard or URL-safe Base64, padded or not.
    DecodeBase64(Box<Val>),
    /// `remove_bytes(s, "chars")`: every listed character removed.
    RemoveBytes(Box<Val>, Box<str>),
}

/// The options string of `url_decode`, checked at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct UrlDecodeOptions {
    /// `r`: decode until nothing changes (bounded by `decode::MAX_URL_DECODE_PASSES`).
    pub recursive: bool,
    /// `u`: also decode `%uXXXX` escapes, as old IIS servers do.
    pub unicode: bool,
}

/// An ordering comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ord6 {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A compiled condition.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Xor(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Truthy(Val),
    Cmp(Ord6, Val, Val),
    Contains(Val, Val),
    Matches(Val, Box<Regex>),
    InStr(Val, HashSet<Box<str>>),
    InInt(Val, HashSet<i64>),
    InIp(Val, Box<IpTable<()>>),
}

/// A compiled, type-checked condition, ready to evaluate.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub(crate) root: Node,
    /// Whether evaluation may need the client's country (a country database must be loaded).
    pub(crate) needs_country: bool,
    /// Whether evaluation may need the client's ASN.
    pub(crate) needs_asn: bool,
    /// Whether evaluation reads who the request is (a bot field): the policy then identifies
    /// requests.
    pub(crate) needs_identity: bool,
    /// The expression as written, for traces (empty when compiled from a parsed expression).
    pub(crate) text: Box<str>,
}

/// Type-checks and compiles a parsed expression; the result must be a condition.
pub(crate) fn compile(e: &Expr) -> Result<Filter, ExprError> {
    compile_in(e, false)
}

/// [`compile`], where `response_fields` says whether the expression may read the answer's
/// fields (`Needs::Response`): only error rules and a rate limit's `counting_expression` may.
pub(crate) fn compile_in(e: &Expr, response_fields: bool) -> Result<Filter, ExprError> {
    let mut c = Compiler {
        needs_country: false,
        needs_asn: false,
        needs_identity: false,
        response_fields,
    };
    let root = c.node(e)?;
    Ok(Filter {
        root,
        needs_country: c.needs_country,
        needs_asn: c.needs_asn,
        needs_identity: c.needs_identity,
        text: Box::default(),
    })
}

impl Filter {
    /// The fields the expression reads, each once, in the order they are written: what a trace
    /// shows the values of.
    pub(crate) fn fields(&self) -> Vec<&Field> {
        fn node<'a>(n: &'a Node, out: &mut Vec<&'a Field>) {
            match n {
                Node::And(a, b) | Node::Or(a, b) | Node::Xor(a, b) => {
                    node(a, out);
                    node(b, out);
                }
                Node::Not(a) => node(a, out),
                Node::Truthy(v)
                | Node::Matches(v, _)
                | Node::InStr(v, _)
                | Node::InInt(v, _)
                | Node::InIp(v, _) => val(v, out),
                Node::Cmp(_, a, b) | Node::Contains(a, b) => {
                    val(a, out);
                    val(b, out);
                }
            }
        }
        fn val<'a>(v: &'a Val, out: &mut Vec<&'a Field>) {
            match v {
                Val::Field(f) => {
                    if !out.contains(&f) {
                        out.push(f);
                    }
                }
                Val::Str(_) | Val::Int(_) | Val::Ip(_) => {}
                Val::Lower(a)
                | Val::Upper(a)
                | Val::Len(a)
                | Val::UrlDecode(a, _)
                | Val::DecodeBase64(a)
                | Val::RemoveBytes(a, _) => val(a, out),
                Val::StartsWith(a, b) | Val::EndsWith(a, b) => {
                    val(a, out);
                    val(b, out);
                }
            }
        }
        let mut out = Vec::new();
        node(&self.root, &mut out);
        out
    }
}

struct Compiler {
    needs_country: bool,
    needs_asn: bool,
    needs_identity: bool,
    response_fields: bool,
}

impl Compiler {
    fn node(&mut self, e: &Expr) -> Result<Node, ExprError> {
        Ok(match e {
            Expr::And(a, b) => Node::And(Box::new(self.node(a)?), Box::new(self.node(b)?)),
            Expr::Or(a, b) => Node::Or(Box::new(self.node(a)?), Box::new(self.node(b)?)),
            Expr::Xor(a, b) => Node::Xor(Box::new(self.node(a)?), Box::new(self.node(b)?)),
            Expr::Not(a, _) => Node::Not(Box::new(self.node(a)?)),
            Expr::Bare(v) => {
                let (val, ty) = self.value(v)?;
                if ty != Ty::Bool {
                    return Err(ExprError::new(
                        v.span.clone(),
                        format!(
                            "a condition must be Boolean, but this is {ty}; compare it with an operator such as `eq`"
                        ),
                    ));
                }
                Node::Truthy(val)
            }
            Expr::Compare {
                lhs,
                op,
                op_span,
                rhs,
            } => self.compare(lhs, *op, op_span, rhs)?,
        })
    }

    fn compare(
        &mut self,
        lhs: &Value,
        op: CmpOp,
        op_span: &std::ops::Range<usize>,
        rhs: &Value,
    ) -> Result<Node, ExprError> {
        let (l, lt) = self.value(lhs)?;
        if matches!(l, Val::Field(Field::Host)) {
            host_literals_in_lower_case(rhs)?;
        }
        match op {
            CmpOp::In => self.in_set(l, lt, lhs, rhs),
            CmpOp::Matches => {
                if lt != Ty::Str {
                    return Err(mismatch(lhs, "`matches` needs a String on its left", lt));
                }
                let ValueKind::Str(pattern) = &rhs.kind else {
                    return Err(ExprError::new(
                        rhs.span.clone(),
                        "`matches` needs a quoted regular expression on its right",
                    ));
                };
                let re = RegexBuilder::new(pattern)
                    .size_limit(MAX_REGEX_SIZE)
                    .dfa_size_limit(MAX_REGEX_SIZE)
                    .nest_limit(64)
                    .build()
                    .map_err(|e| {
                        let why = e.to_string();
                        let last = regex_reason(&why);
                        ExprError::new(
                            rhs.span.clone(),
                            format!("invalid regular expression: {last}"),
                        )
                    })?;
                Ok(Node::Matches(l, Box::new(re)))
            }
            CmpOp::Contains => {
                let (r, rt) = self.value(rhs)?;
                if lt != Ty::Str {
                    return Err(mismatch(lhs, "`contains` needs a String on its left", lt));
                }
                if rt != Ty::Str {
                    return Err(mismatch(rhs, "`contains` needs a String on its right", rt));
                }
                Ok(Node::Contains(l, r))
            }
            CmpOp::Eq | CmpOp::Ne | CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => {
                if let (Ty::Ip, ValueKind::Ip(text)) = (lt, &rhs.kind)
                    && text.contains('/')
                {
                    return Err(ExprError::new(
                        rhs.span.clone(),
                        "compare an address with a network using `in {...}`",
                    ));
                }
                let (r, rt) = self.value(rhs)?;
                if lt != rt {
                    return Err(ExprError::new(
                        lhs.span.start..rhs.span.end,
                        format!("cannot compare {lt} with {rt}"),
                    ));
                }
                let ord = match op {
                    CmpOp::Eq => Ord6::Eq,
                    CmpOp::Ne => Ord6::Ne,
                    CmpOp::Lt => Ord6::Lt,
                    CmpOp::Le => Ord6::Le,
                    CmpOp::Gt => Ord6::Gt,
                    _ => Ord6::Ge,
                };
                if !matches!(ord, Ord6::Eq | Ord6::Ne) && !matches!(lt, Ty::Int | Ty::Str) {
                    return Err(ExprError::new(
                        op_span.clone(),
                        format!("{lt} values can only be compared with `eq` and `ne`"),
                    ));
                }
                Ok(Node::Cmp(ord, l, r))
            }
        }
    }

    fn in_set(&mut self, l: Val, lt: Ty, lhs: &Value, rhs: &Value) -> Result<Node, ExprError> {
        let ValueKind::Set(items) = &rhs.kind else {
            return Err(ExprError::new(rhs.span.clone(), "`in` needs a set: {...}"));
        };
        let wrong = |item: &Value, want: Ty| {
            ExprError::new(
                item.span.clone(),
                format!("this set holds {want} values, to match the left side"),
            )
        };
        match lt {
            Ty::Str => {
                let mut set = HashSet::new();
                for item in items {
                    let ValueKind::Str(s) = &item.kind else {
                        return Err(wrong(item, Ty::Str));
                    };
                    set.insert(s.clone().into_boxed_str());
                }
                Ok(Node::InStr(l, set))
            }
            Ty::Int => {
                let mut set = HashSet::new();
                for item in items {
                    let ValueKind::Int(n) = &item.kind else {
                        return Err(wrong(item, Ty::Int));
                    };
                    set.insert(*n);
                }
                Ok(Node::InInt(l, set))
            }
            Ty::Ip => {
                let mut table = IpTable::default();
                for item in items {
                    let ValueKind::Ip(text) = &item.kind else {
                        return Err(wrong(item, Ty::Ip));
                    };
                    let net =
                        parse_net(text).map_err(|why| ExprError::new(item.span.clone(), why))?;
                    table.insert(net, ());
                }
                Ok(Node::InIp(l, Box::new(table)))
            }
            Ty::Bool => Err(mismatch(lhs, "`in` does not apply to", lt)),
        }
    }

    fn value(&mut self, v: &Value) -> Result<(Val, Ty), ExprError> {
        Ok(match &v.kind {
            ValueKind::Str(s) => (Val::Str(s.clone().into_boxed_str()), Ty::Str),
            ValueKind::Int(n) => (Val::Int(*n), Ty::Int),
            ValueKind::Ip(text) => {
                let ip = text.parse::<IpAddr>().map_err(|_| {
                    ExprError::new(v.span.clone(), format!("`{text}` is not an IP address"))
                })?;
                (Val::Ip(canonical(ip)), Ty::Ip)
            }
            ValueKind::Set(_) => {
                return Err(ExprError::new(v.span.clone(), "a set can only follow `in`"));
            }
            ValueKind::Header(name) => {
                let name =
                    HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|_| {
                        ExprError::new(v.span.clone(), format!("`{name}` is not a header name"))
                    })?;
                (Val::Field(Field::Header(name)), Ty::Str)
            }
            ValueKind::Field(name) => {
                let Some(field) = Field::by_name(name) else {
                    let hint = crate::error::did_you_mean(name, NAMES.iter().copied())
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    let what = if FUNCTIONS.contains(&name.as_str()) {
                        format!("`{name}` is a function; call it as `{name}(...)`")
                    } else {
                        format!("unknown field `{name}`{hint}")
                    };
                    return Err(ExprError::new(v.span.clone(), what));
                };
                match field.needs() {
                    Needs::Country => self.needs_country = true,
                    Needs::Asn => self.needs_asn = true,
                    Needs::Identity => self.needs_identity = true,
                    Needs::Response if !self.response_fields => {
                        return Err(ExprError::new(
                            v.span.clone(),
                            format!(
                                "`{name}` is only available in error rules (`[[error_rule]]`, `[[zone.error_rule]]`) and in a rate limit's `counting_expression`: other rules run before there is a response"
                            ),
                        ));
                    }
                    Needs::Request | Needs::Response => {}
                }
                let ty = field.ty();
                (Val::Field(field), ty)
            }
            ValueKind::Call(name, args) => self.call(v, name, args)?,
        })
    }

    fn call(&mut self, v: &Value, name: &str, args: &[Value]) -> Result<(Val, Ty), ExprError> {
        let arity = match name {
            "lower" | "upper" | "len" | "decode_base64" => 1..=1,
            "url_decode" => 1..=2,
            "starts_with" | "ends_with" | "remove_bytes" => 2..=2,
            _ => {
                let hint = crate::error::did_you_mean(name, FUNCTIONS.iter().copied())
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_default();
                return Err(ExprError::new(
                    v.span.clone(),
                    format!("unknown function `{name}`{hint}"),
                ));
            }
        };
        if !arity.contains(&args.len()) {
            let (lo, hi) = (arity.start(), arity.end());
            let takes = if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo} or {hi}")
            };
            return Err(ExprError::new(
                v.span.clone(),
                format!("`{name}` takes {takes} argument(s), not {}", args.len()),
            ));
        }
        // Options and byte lists are literals, checked now rather than per request.
        if matches!(name, "url_decode" | "remove_bytes") {
            let Some(literal) = args.get(1) else {
                let a = self.string_arg(name, &args[0])?;
                return Ok((
                    Val::UrlDecode(Box::new(a), UrlDecodeOptions::default()),
                    Ty::Str,
                ));
            };
            let ValueKind::Str(text) = &literal.kind else {
                return Err(ExprError::new(
                    literal.span.clone(),
                    format!("the second argument of `{name}` is a quoted string"),
                ));
            };
            let a = self.string_arg(name, &args[0])?;
            if name == "remove_bytes" {
                return Ok((Val::RemoveBytes(Box::new(a), text.as_str().into()), Ty::Str));
            }
            let mut options = UrlDecodeOptions::default();
            for c in text.chars() {
                match c {
                    'r' => options.recursive = true,
                    'u' => options.unicode = true,
                    other => {
                        return Err(ExprError::new(
                            literal.span.clone(),
                            format!(
                                "unknown `url_decode` option `{other}`; options are \"r\" (recursive) and \"u\" (%uXXXX escapes)"
                            ),
                        ));
                    }
                }
            }
            return Ok((Val::UrlDecode(Box::new(a), options), Ty::Str));
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(Box::new(self.string_arg(name, a)?));
        }
        let mut it = vals.into_iter();
        let (Some(a), b) = (it.next(), it.next()) else {
            return Err(ExprError::new(v.span.clone(), "missing argument"));
        };
        Ok(match (name, b) {
            ("lower", _) => (Val::Lower(a), Ty::Str),
            ("upper", _) => (Val::Upper(a), Ty::Str),
            ("len", _) => (Val::Len(a), Ty::Int),
            ("decode_base64", _) => (Val::DecodeBase64(a), Ty::Str),
            ("starts_with", Some(b)) => (Val::StartsWith(a, b), Ty::Bool),
            (_, Some(b)) => (Val::EndsWith(a, b), Ty::Bool),
            _ => return Err(ExprError::new(v.span.clone(), "missing argument")),
        })
    }

    /// A function argument that must be a String.
    fn string_arg(&mut self, name: &str, a: &Value) -> Result<Val, ExprError> {
        let (val, ty) = self.value(a)?;
        if ty != Ty::Str {
            return Err(mismatch(
                a,
                &format!("`{name}` needs String arguments, not"),
                ty,
            ));
        }
        Ok(val)
    }
}

/// `http.host` reads in lower case, so a literal with an upper-case letter could never match it:
/// say so at load instead of letting the rule silently miss.
fn host_literals_in_lower_case(rhs: &Value) -> Result<(), ExprError> {
    let check = |item: &Value| match &item.kind {
        ValueKind::Str(s) if s.chars().any(char::is_uppercase) => Err(ExprError::new(
            item.span.clone(),
            format!(
                "`http.host` is compared in lower case, so this never matches; write \"{}\"",
                s.to_lowercase()
            ),
        )),
        _ => Ok(()),
    };
    match &rhs.kind {
        ValueKind::Set(items) => items.iter().try_for_each(check),
        _ => check(rhs),
    }
}

fn mismatch(v: &Value, what: &str, got: Ty) -> ExprError {
    if what.ends_with("not") || what.ends_with("to") {
        ExprError::new(v.span.clone(), format!("{what} {got}"))
    } else {
        ExprError::new(v.span.clone(), format!("{what}, not {got}"))
    }
}
