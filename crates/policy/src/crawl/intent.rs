//! What a crawler offers to pay: the request's `crawler-exact-price` / `crawler-max-price`
//! headers as sent, and the intent they make once checked.

use super::price::Price;

/// The request's payment headers, raw. A header sent twice should be given as its values
/// joined with `, `, which no price parses as: it is refused as an invalid value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaymentHeaders<'a> {
    /// `crawler-exact-price`.
    pub exact: Option<&'a [u8]>,
    /// `crawler-max-price`.
    pub max: Option<&'a [u8]>,
}

impl PaymentHeaders<'_> {
    /// Whether the request offers to pay at all.
    pub fn offers_payment(&self) -> bool {
        self.exact.is_some() || self.max.is_some()
    }
}

/// What the crawler agreed to pay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// `crawler-exact-price`: exactly this.
    Exact(Price),
    /// `crawler-max-price`: anything up to this.
    Max(Price),
}

impl Intent {
    /// The most this intent may be charged.
    pub fn ceiling(self) -> Price {
        match self {
            Intent::Exact(p) | Intent::Max(p) => p,
        }
    }
}

/// The request's payment header `name` as crawl control reads it: its value; its lines joined
/// with `, ` when it was sent more than once (no price parses so, and the exchange refuses it);
/// `None` when it was not sent.
pub fn payment_header<'h>(
    headers: &'h http::HeaderMap,
    name: &str,
) -> Option<std::borrow::Cow<'h, [u8]>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut rest = values.peekable();
    if rest.peek().is_none() {
        return Some(std::borrow::Cow::Borrowed(first.as_bytes()));
    }
    let mut joined = first.as_bytes().to_vec();
    for v in rest {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(v.as_bytes());
    }
    Some(std::borrow::Cow::Owned(joined))
}
