//! What Web Bot Auth made of a payment intent: pay per crawl takes payment only from a request
//! whose signature verifies and covers the price header it sent.

use super::intent::PaymentHeaders;

/// What Web Bot Auth made of the request's payment intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaymentAuth {
    /// No `Signature` / `Signature-Input`.
    Absent,
    /// A signature that is malformed or does not verify.
    Invalid,
    /// A verified signature; `covers_price_header` when its covered components include the
    /// price header the request sent.
    Verified {
        /// Whether `crawler-exact-price` or `crawler-max-price` (the one sent) is covered.
        covers_price_header: bool,
    },
}

impl PaymentAuth {
    /// From the identify phase's [`Signature`](crate::Signature): verified, and covering every
    /// price header the request sent ([`crate::COVERED_HEADERS`]: bit 0 `crawler-exact-price`,
    /// bit 1 `crawler-max-price`). A signature that could not be checked (its directory unknown
    /// or unreachable) is no strong authentication either: `Absent`.
    pub fn of(signature: &crate::Signature, headers: PaymentHeaders<'_>) -> PaymentAuth {
        use crate::SignatureOutcome;
        match signature.outcome {
            SignatureOutcome::Verified => {
                let mut wanted = 0u8;
                if headers.exact.is_some() {
                    wanted |= 1;
                }
                if headers.max.is_some() {
                    wanted |= 2;
                }
                PaymentAuth::Verified {
                    covers_price_header: signature.covered_headers & wanted == wanted,
                }
            }
            SignatureOutcome::Invalid => PaymentAuth::Invalid,
            SignatureOutcome::Absent | SignatureOutcome::Unverified => PaymentAuth::Absent,
        }
    }
}
