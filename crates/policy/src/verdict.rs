//! The policy's verdict on one request: forward it, answer it with a catalog error, or challenge
//! it. A leaf: the decision and the fleet checks both give verdicts, and neither needs the other
//! for it.

use signpost_problem::Code;

/// Whether to forward the request to the origin or answer it with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward to the zone's origin.
    Proxy,
    /// Answer with the catalog error `code` (e.g. 1020) instead of forwarding.
    Refuse {
        /// The 1xxx catalog code.
        code: Code,
        /// Seconds until the client may succeed, for rate limits (whole seconds, at least 1).
        retry_after: Option<u32>,
    },
    /// Challenge the client: forward only with a valid clearance earned at `difficulty` or
    /// above; otherwise a browser gets the challenge page, an agent the `challenge_required`
    /// problem (the edge's `challenge` room).
    Challenge {
        /// The proof of work's difficulty.
        difficulty: signpost_challenge::Difficulty,
    },
}

impl Verdict {
    /// A refusal without a retry time.
    pub(crate) const fn refuse(code: Code) -> Verdict {
        Verdict::Refuse {
            code,
            retry_after: None,
        }
    }
}
