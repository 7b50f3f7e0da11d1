//! Evaluation of compiled filters against one request.

use std::borrow::Cow;

use super::compile::{Filter, Node, Ord6, Val};
use super::cx::Cx;
use super::fields::V;

impl Filter {
    /// Whether the request matches.
    pub(crate) fn matches(&self, cx: &Cx<'_>) -> bool {
        node(&self.root, cx)
    }
}

fn node(n: &Node, cx: &Cx<'_>) -> bool {
    match n {
        Node::And(a, b) => node(a, cx) && node(b, cx),
        Node::Or(a, b) => node(a, cx) || node(b, cx),
        Node::Xor(a, b) => node(a, cx) != node(b, cx),
        Node::Not(a) => !node(a, cx),
        Node::Truthy(v) => matches!(val(v, cx), V::Bool(true)),
        Node::Cmp(op @ (Ord6::Eq | Ord6::Ne), a, b) => {
            // Equality compares lengths first; most comparisons fail there without a memcmp.
            let equal = match (val(a, cx), val(b, cx)) {
                (V::Str(x), V::Str(y)) => str_eq(&x, &y),
                (x, y) => x == y,
            };
            equal == (*op == Ord6::Eq)
        }
        Node::Cmp(op, a, b) => {
            let (a, b) = (val(a, cx), val(b, cx));
            let ord = match (&a, &b) {
                (V::Str(x), V::Str(y)) => x.as_ref().cmp(y.as_ref()),
                (V::Int(x), V::Int(y)) => x.cmp(y),
                (V::Bool(x), V::Bool(y)) => x.cmp(y),
                (V::Ip(x), V::Ip(y)) => x.cmp(y),
                // Types are checked at compile time; a mismatch cannot match.
                _ => return false,
            };
            match op {
                Ord6::Eq => ord.is_eq(),
                Ord6::Ne => ord.is_ne(),
                Ord6::Lt => ord.is_lt(),
                Ord6::Le => ord.is_le(),
                Ord6::Gt => ord.is_gt(),
                Ord6::Ge => ord.is_ge(),
            }
        }
        Node::Contains(a, b) => val(a, cx).as_str().contains(val(b, cx).as_str()),
        Node::Matches(a, re) => re.is_match(val(a, cx).as_str()),
        Node::InStr(a, set) => set.contains(val(a, cx).as_str()),
        Node::InInt(a, set) => matches!(val(a, cx), V::Int(n) if set.contains(&n)),
        Node::InIp(a, table) => matches!(val(a, cx), V::Ip(ip) if table.contains(ip)),
    }
}

/// String equality that settles most cases on the length and first byte without calling memcmp.
#[inline]
fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len()
        && (a.is_empty() || (a[0] == b[0] && a[a.len() - 1] == b[b.len() - 1] && a == b))
}

fn val<'a>(v: &'a Val, cx: &'a Cx<'_>) -> V<'a> {
    match v {
        Val::Str(s) => V::Str(Cow::Borrowed(s)),
        Val::Int(n) => V::Int(*n),
        Val::Ip(ip) => V::Ip(*ip),
        Val::Field(f) => f.read(cx),
        Val::Lower(a) => V::Str(match val(a, cx) {
            V::Str(s) if s.bytes().any(|b| b.is_ascii_uppercase()) || !s.is_ascii() => {
                Cow::Owned(s.to_lowercase())
            }
            V::Str(s) => s,
            _ => Cow::Borrowed(""),
        }),
        Val::Upper(a) => V::Str(match val(a, cx) {
            V::Str(s) if s.bytes().any(|b| b.is_ascii_lowercase()) || !s.is_ascii() => {
                Cow::Owned(s.to_uppercase())
            }
            V::Str(s) => s,
            _ => Cow::Borrowed(""),
        }),
        Val::Len(a) => V::Int(i64::try_from(val(a, cx).as_str().len()).unwrap_or(i64::MAX)),
        Val::StartsWith(a, b) => V::Bool(val(a, cx).as_str().starts_with(val(b, cx).as_str())),
        Val::EndsWith(a, b) => V::Bool(val(a, cx).as_str().ends_with(val(b, cx).as_str())),
        Val::UrlDecode(a, options) => V::Str(match val(a, cx) {
            V::Str(s) => super::decode::url_decode(s, *options),
            _ => Cow::Borrowed(""),
        }),
        Val::DecodeBase64(a) => V::Str(super::decode::base64(val(a, cx).as_str())),
        Val::RemoveBytes(a, set) => V::Str(match val(a, cx) {
            V::Str(s) => super::decode::remove_chars(s, set),
            _ => Cow::Borrowed(""),
        }),
    }
}
