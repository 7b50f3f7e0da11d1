// signpost patch: this whole file.

//! One idle timer per connection, rather than one per wait.
//!
//! Pingora armed a new fast timer for every read that waits for the next request on a
//! kept-alive connection, and for every read of an origin's response that has to wait (its
//! `read_timeout`): a clock read, a registration in the timer table, a boxed future and a
//! waiter, once per request. An [`IdleDeadline`] keeps the timer it armed across the
//! connection's requests (a client connection keeps it in the pool, in its
//! `l4::stream::Stream`). When that timer fires before the current wait's deadline (it was armed
//! for an earlier wait), it arms one more for what is left of the wait; a busy connection arms
//! about one timer per idle timeout instead of one per request. The deadline itself is the same
//! as before: `idle` after the wait begins, to the fast timer's 10 ms resolution.

use pingora_timeout::fast_timeout::FastOrTokioTimeout;
use pingora_timeout::ToTimeout;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

type Timer = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// The idle timer of one connection, carried from each request's session to the next.
#[derive(Default)]
pub struct IdleDeadline {
    /// The timer armed last; boxed, so that the sessions and connections that carry it (and are
    /// moved as futures run) grow by a pointer.
    armed: Option<Box<Armed>>,
}

struct Armed {
    /// The instant the timer was armed to fire at: it fires then or later, never before.
    at: Instant,
    timer: Timer,
    /// The waker the timer last returned `Pending` to: it wakes that task when it fires.
    polled_with: Option<Waker>,
}

impl std::fmt::Debug for IdleDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleDeadline")
            .field("armed_for", &self.armed_for())
            .finish()
    }
}

impl IdleDeadline {
    /// Runs `work` until it finishes (`Some` of its output) or until `idle` has passed since
    /// this call (`None`).
    pub async fn run<F: Future>(&mut self, idle: Duration, work: F) -> Option<F::Output> {
        let mut work = pin!(work);
        // The deadline is taken at the first poll that has to wait (this call's first poll): work
        // that is ready at once, such as a read of bytes already buffered, reads no clock.
        let mut deadline = None;
        poll_fn(|cx| {
            if let Poll::Ready(output) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            let mut now = None;
            let deadline = *deadline.get_or_insert_with(|| {
                let at = Instant::now();
                now = Some(at);
                at + idle
            });
            loop {
                // A timer armed for a later instant (the timeout was shortened) would fire too
                // late: it is replaced. One armed for an earlier wait is kept.
                let armed = match &mut self.armed {
                    Some(armed) if armed.at <= deadline => armed,
                    slot => {
                        let from = *now.get_or_insert_with(Instant::now);
                        let timer =
                            FastOrTokioTimeout::create(deadline.saturating_duration_since(from))
                                .timeout();
                        slot.insert(Box::new(Armed {
                            at: deadline,
                            timer,
                            polled_with: None,
                        }))
                    }
                };
                // A timer that returned `Pending` to this task will wake it when it fires, and
                // it cannot have fired before its instant: polling it again would only register
                // the same waker once more (a lock in the timer's `Notify`).
                let same_task = armed
                    .polled_with
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()));
                if same_task && *now.get_or_insert_with(Instant::now) < armed.at {
                    return Poll::Pending;
                }
                if armed.timer.as_mut().poll(cx).is_pending() {
                    if !same_task {
                        armed.polled_with = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                let armed_for = armed.at;
                self.armed = None;
                // The timer of this wait fired: the work made no progress for `idle`. One armed
                // for an earlier wait fired early for this one: arm one for what is left.
                if armed_for >= deadline || Instant::now() >= deadline {
                    return Poll::Ready(None);
                }
                now = None;
            }
        })
        .await
    }

    /// The instant the kept timer was armed to fire at, if one is armed.
    pub fn armed_for(&self) -> Option<Instant> {
        self.armed.as_ref().map(|armed| armed.at)
    }
}

// Its tests are in the workspace that carries this patch
// (`crates/edge/src/vendored_pingora_tests.rs`), where CI runs them.
