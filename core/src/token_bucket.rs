//! Token bucket: a bucket of `burst` tokens (default `burst` = `limit`), refilled
//! continuously at `limit` tokens per window; a hit of cost c takes c tokens if there are
//! that many.
//!
//! **The same algorithm as GCRA, seen in tokens.** Refilling at one token per T = window /
//! limit, a bucket is full again at one instant, and until then holds
//! `tokens(now) = burst - (full_at - now) / T`. That instant is exactly GCRA's theoretical
//! arrival time, and "c tokens are there" is exactly GCRA's "`full_at - now + c*T <=
//! burst*T`". So this module stores that instant (the same 8-byte
//! [`BucketState`](super::bucket::BucketState)): [`Token`] is the [`Bucket`] of
//! [`bucket`](super::bucket), whose arithmetic [`Gcra`](super::gcra::Gcra) is too, under
//! another id. There is no refill loop and no separate token count to keep in step: tokens
//! are a function of the clock.
//!
//! **What differs for a user.** Only the vocabulary and the `ALGO` name: `remaining` is the
//! whole tokens left, `limit` in the reply is the bucket's capacity (`burst`), and
//! `reset_after_ms` is the time until the bucket is full. For the same parameters the two
//! answer identically and store identical bytes; the defaults are the same too. Because
//! the stored algorithm id differs, switching a key between them counts as a change of
//! algorithm (`limiter` carries the usage over).
//!
//! **Guarantee, time and memory** are GCRA's (see [`gcra`](super::gcra)): at most
//! `burst + t / T` tokens are taken over any interval of length t; a clock that goes back
//! never refills the bucket; one 8-byte time per tier.
//!
//! **When to choose it.** When users think of capacity and refill rate (cloud API quotas,
//! bandwidth budgets with a cost per byte); choose [`gcra`](super::gcra) when they think of
//! a rate with a tolerance, or for redis-cell compatibility.

use super::bucket::Bucket;

/// The token-bucket algorithm: the [`Bucket`] arithmetic stored under id 4. Its state is a
/// [`BucketState`](super::bucket::BucketState): the instant the bucket is full again.
///
/// # Example
///
/// A bucket of 4 tokens refilled at 2 per second: 3 taken leave 1, and 2 more are there
/// half a second later.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::token_bucket::Token;
///
/// let quota = Quota { limit: 2, window_ms: 1_000, burst: 4, calendar: None };
/// let t0 = 1_796_083_200_000;
/// let three = Token::check(None, t0, &quota, 3)?;
/// let d = three.decision;
/// assert_eq!((d.allowed, d.limit, d.remaining, d.reset_after_ms), (true, 4, 1, 1_500));
/// let two_now = Token::check(three.charged.as_ref(), t0, &quota, 2)?.decision;
/// assert_eq!((two_now.allowed, two_now.retry_after_ms), (false, 500));
/// assert!(Token::check(three.charged.as_ref(), t0 + 500, &quota, 2)?.decision.allowed);
/// # Ok::<(), ratelimit_core::algorithm::OutOfRange>(())
/// ```
pub type Token = Bucket<4>;

/// The whole tokens in the bucket at `now_ms` (`burst` for no state): `view`'s
/// `remaining`, named in token terms for the tests.
#[cfg(test)]
pub fn tokens(
    state: Option<&super::bucket::BucketState>,
    now_ms: i64,
    quota: &super::algorithm::Quota,
) -> Result<i64, super::algorithm::OutOfRange> {
    use super::algorithm::Algorithm;
    Ok(Token::view(state, now_ms, quota)?.remaining)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, Quota};
    use crate::bucket::BucketState;
    use crate::codec::Bytes;
    use crate::decision::NEVER;
    use crate::gcra::Gcra;
    use proptest::prelude::*;

    /// 2026-11-30T00:00:00Z.
    const T0: i64 = 1_796_083_200_000;

    #[test]
    fn tokens_drain_and_refill_continuously() {
        // A bucket of 4 tokens, refilled at 2 per second (one every 500 ms).
        let quota = Quota {
            limit: 2,
            window_ms: 1_000,
            burst: 4,
            calendar: None,
        };
        // (ms after T0, cost, allowed, tokens left, ms until full, retry)
        #[rustfmt::skip]
        let steps = [
            (0,     3, true,  1, 1_500, 0),
            (0,     2, false, 1, 1_500, 500),
            (250,   2, false, 1, 1_250, 250),
            (500,   2, true,  0, 2_000, 0),
            (999,   1, false, 0, 1_501, 1),
            (1_000, 1, true,  0, 2_000, 0),
            (5_000, 5, false, 4, 0,     NEVER),
        ];
        let mut stored = None;
        for (at, cost, allowed, left, full_in, retry) in steps {
            let hit = Token::check(stored.as_ref(), T0 + at, &quota, cost).expect("in range");
            let d = hit.decision;
            assert_eq!(
                (
                    d.allowed,
                    d.limit,
                    d.remaining,
                    d.reset_after_ms,
                    d.retry_after_ms
                ),
                (allowed, 4, left, full_in, retry),
                "at T0+{at}"
            );
            stored = hit.charged.or(stored);
            assert_eq!(tokens(stored.as_ref(), T0 + at, &quota), Ok(left));
        }
        // Emptied at T0+1000 (full at T0+3000): half a token 250 ms later is no token.
        assert_eq!(tokens(stored.as_ref(), T0 + 1_250, &quota), Ok(0));
        assert_eq!(tokens(stored.as_ref(), T0 + 1_500, &quota), Ok(1));
        assert_eq!(tokens(stored.as_ref(), T0 + 3_000, &quota), Ok(4));
        assert_eq!(tokens(None, T0, &quota), Ok(4));
    }

    proptest! {
        /// The two views of the bucket take the same decisions and store the same bytes,
        /// so every property tested for GCRA holds here too.
        #[test]
        fn the_token_bucket_and_gcra_are_one_algorithm(
            limit in 1i64..1_000_000,
            window_ms in 1i64..100_000,
            burst in 1i64..100,
            ops in proptest::collection::vec((-2_000i64..2_000, 0i64..120, 0u8..3), 1..100),
        ) {
            let quota = Quota { limit, window_ms, burst, calendar: None };
            let mut now = T0;
            let mut stored: Option<BucketState> = None;
            for (step, amount, op) in ops {
                now += step;
                match op {
                    0 => {
                        let token = Token::refund(stored.as_ref(), now, &quota, amount);
                        prop_assert_eq!(token, Gcra::refund(stored.as_ref(), now, &quota, amount));
                        stored = token.or(stored);
                    }
                    _ => {
                        let token = Token::check(stored.as_ref(), now, &quota, amount);
                        prop_assert_eq!(&token, &Gcra::check(stored.as_ref(), now, &quota, amount));
                        stored = token.expect("in range").charged.or(stored);
                    }
                }
                if let Some(state) = &stored {
                    prop_assert_eq!(Token::used(state, now, &quota), Gcra::used(state, now, &quota));
                    let (mut a, mut b) = (Bytes::new(), Bytes::new());
                    Token::encode(state, &mut a);
                    Gcra::encode(state, &mut b);
                    prop_assert_eq!(a, b);
                }
            }
            prop_assert_eq!(Token::span_ms(&quota), Gcra::span_ms(&quota));
            prop_assert_eq!(Token::capacity(&quota), Gcra::capacity(&quota));
        }
    }
}
