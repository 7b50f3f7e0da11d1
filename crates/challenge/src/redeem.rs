//! The edge's two challenge endpoints in one call: read what was sent, check it, and say what to
//! answer. The edge only writes the response.

use crate::form::{Submission, VERIFY_PATH, WAIT_PATH};
use crate::{KeyRing, Rejected, Settings, Solved, Visitor};

/// One of the challenge endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// [`VERIFY_PATH`]: the page's answer, `POST`ed as a form.
    Verify,
    /// [`WAIT_PATH`]: the no-JavaScript fallback, a `GET` with a query.
    Wait,
}

impl Endpoint {
    /// The endpoint a request path names, exactly (no prefix match: `/cdn-cgi/challenge/verifyx`
    /// is an ordinary path).
    pub fn of(path: &str) -> Option<Endpoint> {
        match path {
            VERIFY_PATH => Some(Endpoint::Verify),
            WAIT_PATH => Some(Endpoint::Wait),
            _ => None,
        }
    }

    /// The method the endpoint takes: `POST` for [`Endpoint::Verify`], `GET` (or `HEAD`) for
    /// [`Endpoint::Wait`]; another method is the edge's 405.
    pub fn allows(self, method: &str) -> bool {
        match self {
            Endpoint::Verify => method == "POST",
            Endpoint::Wait => method == "GET" || method == "HEAD",
        }
    }
}

/// What to answer at an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redeemed {
    /// `303 See Other` to `location` with this `Set-Cookie`: the browser goes back to the
    /// challenged URL with a `GET` (a request with a body is not replayed: the page said so).
    Cleared {
        /// The return path, checked ([`crate::return_path`]).
        location: String,
        /// The `Set-Cookie` header value.
        set_cookie: String,
        /// What was redeemed, for logs and metrics.
        solved: Solved,
    },
    /// The challenge page again, never an error page: a browser must always have a way on.
    Refused {
        /// Why, for logs and metrics.
        reason: Rejected,
        /// Where the page's next answer returns to.
        return_to: String,
        /// For a fallback redeemed too early ([`Rejected::TooEarly`]): the same token, to show
        /// again with the seconds left, so the wait does not start over. Otherwise the edge
        /// issues a new challenge.
        retry_token: Option<String>,
    },
}

impl KeyRing {
    /// Redeems what a client sent to `endpoint`: the form body for [`Endpoint::Verify`], the
    /// query for [`Endpoint::Wait`] (each at most [`crate::MAX_FORM_LEN`] bytes; the edge reads
    /// no more). `secure` is whether the zone is served over TLS (the cookie's `Secure`).
    pub fn redeem(
        &self,
        endpoint: Endpoint,
        form: &[u8],
        visitor: &Visitor<'_>,
        settings: &Settings,
        now: u64,
        secure: bool,
    ) -> Redeemed {
        let submission = match Submission::parse(form) {
            Ok(submission) => submission,
            Err(reason) => {
                return Redeemed::Refused {
                    reason,
                    return_to: "/".into(),
                    retry_token: None,
                };
            }
        };
        let verdict = match endpoint {
            Endpoint::Verify => self.check_solution(
                submission.token.as_bytes(),
                submission.nonce.as_bytes(),
                visitor,
                settings,
                now,
            ),
            Endpoint::Wait => self.check_wait(submission.token.as_bytes(), visitor, settings, now),
        };
        match verdict {
            Ok(solved) => {
                let clearance =
                    self.issue_clearance(visitor, settings, solved.difficulty, solved.method, now);
                Redeemed::Cleared {
                    location: submission.return_to,
                    set_cookie: clearance.set_cookie(secure),
                    solved,
                }
            }
            Err(reason) => Redeemed::Refused {
                reason,
                retry_token: matches!(reason, Rejected::TooEarly { .. })
                    .then_some(submission.token),
                return_to: submission.return_to,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{COOKIE_NAME, Difficulty, Key, Method, find_clearance, meets, work_hash};

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn endpoints_and_methods() {
        assert_eq!(Endpoint::of(VERIFY_PATH), Some(Endpoint::Verify));
        assert_eq!(Endpoint::of(WAIT_PATH), Some(Endpoint::Wait));
        for other in ["/cdn-cgi/challenge", "/cdn-cgi/challenge/verifyx", "/x"] {
            assert_eq!(Endpoint::of(other), None);
        }
        assert!(Endpoint::Verify.allows("POST") && !Endpoint::Verify.allows("GET"));
        assert!(Endpoint::Wait.allows("GET") && Endpoint::Wait.allows("HEAD"));
        assert!(!Endpoint::Wait.allows("POST"));
    }

    #[test]
    fn an_answer_is_redeemed_for_a_cookie_and_a_way_back() {
        let ring = KeyRing::new(Key::new(1, &[7; 32]).unwrap(), None).unwrap();
        let settings = Settings {
            fallback_delay: Duration::from_secs(10),
            ..Settings::default()
        };
        let v = Visitor {
            zone: "shop.example",
            addr: "192.0.2.1".parse().unwrap(),
            user_agent: b"UA",
        };
        let d = Difficulty::new(2).unwrap();
        let token = ring.issue_challenge(&v, &settings, d, NOW, [4; 16]);
        let nonce = (0u64..)
            .map(|n| n.to_string())
            .find(|n| meets(&work_hash(token.as_bytes(), n.as_bytes()), d))
            .unwrap();
        let form = format!("token={token}&nonce={nonce}&return=%2Fcart%3Fitem%3D3");
        let Redeemed::Cleared {
            location,
            set_cookie,
            solved,
        } = ring.redeem(
            Endpoint::Verify,
            form.as_bytes(),
            &v,
            &settings,
            NOW + 1,
            true,
        )
        else {
            panic!("refused")
        };
        assert_eq!(location, "/cart?item=3");
        assert_eq!(solved.method, Method::Work);
        assert!(set_cookie.starts_with(COOKIE_NAME) && set_cookie.ends_with("; Secure"));
        let value = find_clearance(set_cookie.split(';').next().unwrap().as_bytes()).unwrap();
        assert!(
            ring.verify_clearance(value, &v, &settings, d, NOW + 2)
                .is_ok()
        );

        // A wrong answer: the page again, returning to the same place, with a new challenge.
        let wrong = format!("token={token}&nonce=x&return=%2Fcart");
        assert_eq!(
            ring.redeem(Endpoint::Verify, wrong.as_bytes(), &v, &settings, NOW, true),
            Redeemed::Refused {
                reason: Rejected::Malformed,
                return_to: "/cart".into(),
                retry_token: None
            }
        );
        // The fallback: too early keeps the token; after the delay, cleared by waiting.
        let query = format!("token={token}&return=%2F");
        assert_eq!(
            ring.redeem(
                Endpoint::Wait,
                query.as_bytes(),
                &v,
                &settings,
                NOW + 4,
                false
            ),
            Redeemed::Refused {
                reason: Rejected::TooEarly { wait: 6 },
                return_to: "/".into(),
                retry_token: Some(token.clone())
            }
        );
        let Redeemed::Cleared {
            solved, set_cookie, ..
        } = ring.redeem(
            Endpoint::Wait,
            query.as_bytes(),
            &v,
            &settings,
            NOW + 10,
            false,
        )
        else {
            panic!("refused after the delay")
        };
        assert_eq!(solved.method, Method::Wait);
        assert!(!set_cookie.contains("Secure"));
        // Garbage: the page again, back to the root.
        assert!(matches!(
            ring.redeem(Endpoint::Verify, b"\xff\xfe", &v, &settings, NOW, true),
            Redeemed::Refused { reason: Rejected::Malformed, ref return_to, .. } if return_to == "/"
        ));
    }
}
