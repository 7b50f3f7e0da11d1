//! Prices of pay per crawl: whole US cents, never floats, parsed from exactly
//! `USD <digits>[.<one or two digits>]`.

use std::fmt;

/// A price in US cents. The only currency pay per crawl speaks is USD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price {
    pub(super) cents: u64,
}

/// The most a price may be: USD 1,000,000.00. Far above any page's price, and it keeps sums of
/// many prices far from `u64::MAX`.
pub const MAX_PRICE_CENTS: u64 = 100_000_000;

/// The smallest price a zone may set (Cloudflare's minimum, USD 0.01).
pub const MIN_ZONE_PRICE_CENTS: u64 = 1;

/// The currency every price is in.
pub const CURRENCY: &str = "USD";

impl Price {
    /// A price of `cents` US cents, `None` above [`MAX_PRICE_CENTS`].
    pub fn from_cents(cents: u64) -> Option<Price> {
        (cents <= MAX_PRICE_CENTS).then_some(Price { cents })
    }

    /// The price in cents.
    pub fn cents(self) -> u64 {
        self.cents
    }

    /// Parses a header or policy value: `USD`, one space, 1 to 9 digits, and optionally a dot
    /// with one or two digits (`USD 0.01`, `USD 3.14`, `USD 2`, `USD 2.5`). Optional whitespace
    /// around the whole value is ignored, as HTTP does for field values. Anything else (another
    /// currency, a sign, an exponent, a third decimal, more than [`MAX_PRICE_CENTS`]) is `None`.
    pub fn parse(value: &[u8]) -> Option<Price> {
        let value = value.trim_ascii();
        let amount = value.strip_prefix(b"USD ")?;
        let (whole, fraction) = match amount.iter().position(|&b| b == b'.') {
            Some(dot) => (&amount[..dot], Some(&amount[dot + 1..])),
            None => (amount, None),
        };
        if whole.is_empty() || whole.len() > 9 || !whole.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut cents: u64 = 0;
        for &digit in whole {
            cents = cents * 10 + u64::from(digit - b'0');
        }
        cents *= 100;
        match fraction {
            None => {}
            Some(f) if (1..=2).contains(&f.len()) && f.iter().all(u8::is_ascii_digit) => {
                let tenths = u64::from(f[0] - b'0') * 10;
                let hundredths = f.get(1).map_or(0, |d| u64::from(d - b'0'));
                cents += tenths + hundredths;
            }
            Some(_) => return None,
        }
        Price::from_cents(cents)
    }
}

impl fmt::Display for Price {
    /// `USD 0.01`: always two decimals, as Cloudflare writes `crawler-price` and
    /// `crawler-charged`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CURRENCY} {}.{:02}", self.cents / 100, self.cents % 100)
    }
}
