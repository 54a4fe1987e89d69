//! [`MoveBudget`]: how much of the host's time a tight segment may spend moving physical
//! memory from free blocks to where requests go.
//!
//! Moving keeps held memory at live bytes, but each move is a few VMM calls (an unmap and a
//! map, tens of µs on an H200). A training step spends milliseconds on the device between
//! requests, so its moves cost a few percent of its time; a loop that does nothing but
//! allocate (W2) would spend nearly all of its time moving (1.4 to 2.3 µs an operation against
//! 45 ns). The budget lets moves take a share of the time that passes on the driver's clock
//! ([`Driver::host_clock_ns`](crate::driver::Driver::host_clock_ns)); past it the segment maps
//! instead and its mark rises, as an expandable segment's does.
//!
//! On an H200, with moves that waited for the stream, the training traces' moves used most of
//! the default 5 %: transformer-train's steps took 3 to 5 % longer than under PyTorch's caching
//! allocator, at 1.01 × live. Tried: a share of 1 % (steps as fast as caching, but the
//! transformer's allocator held 1.11 × live: moves cost more there than on the simulator,
//! where 1 % holds the same), and moves without the wait (steps 1 to 3 % longer, 1.08 × live:
//! the memory moved stayed mapped beside the new mapping until the stream was done). Moves now
//! lend the holes' handles (`segment::unmap`): mapped where the request goes while the hole's
//! mapping waits for its event, with no host wait where the lent handles cover the request.
//! Steps then took 0.8 % longer than under caching on transformer-train, 0.5 % on
//! finetune-checkpoint and none on cnn-varsize and llm-decode, at the same memory (six runs
//! each, within the runs' spread).

use crate::mr::PoolOptions;

/// Time over which unspent credit accrues at the most.
const WINDOW_NS: u64 = PoolOptions::MOVE_SHARE_WINDOW_NS;

/// A token bucket on the driver's clock: credit accrues at `permille` / 1000 of the time that
/// passes, up to a [`WINDOW_NS`]'s worth; a move spends the time it took, measured after (so
/// credit may go below zero), and none starts without credit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MoveBudget {
    /// The share of the host's time moves may take, in parts per thousand; `None`: no bound.
    permille: Option<u16>,
    /// Nanoseconds of moves the budget still allows.
    credit: i64,
    /// When credit last accrued.
    last: u64,
}

impl MoveBudget {
    /// A budget of `permille` / 1000 of the time from `now` on (`None`: moves are never
    /// refused), with no credit yet.
    pub(crate) const fn new(permille: Option<u16>, now: u64) -> Self {
        MoveBudget {
            permille,
            credit: 0,
            last: now,
        }
    }

    /// Whether a move may start at `now`: credit accrued since the last look is above zero.
    pub(crate) fn allows(&mut self, now: u64) -> bool {
        let Some(permille) = self.permille else {
            return true;
        };
        let share = |ns: u64| ns.saturating_mul(u64::from(permille)) / 1000;
        let accrued = share(now.saturating_sub(self.last));
        self.last = self.last.max(now);
        let cap = i64::try_from(share(WINDOW_NS)).unwrap_or(i64::MAX);
        let accrued = i64::try_from(accrued).unwrap_or(i64::MAX);
        self.credit = self.credit.saturating_add(accrued).min(cap);
        self.credit > 0
    }

    /// Spends the `ns` a move took.
    pub(crate) fn spend(&mut self, ns: u64) {
        if self.permille.is_some() {
            self.credit = self
                .credit
                .saturating_sub(i64::try_from(ns).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn moves_take_their_share_of_the_time_that_passes_and_no_more() {
        // 5 %: a 2 ms move needs 40 ms to pass before the next.
        let mut b = MoveBudget::new(Some(50), 0);
        assert!(!b.allows(0), "no credit at the start");
        assert!(b.allows(MS));
        b.spend(2 * MS);
        assert!(!b.allows(20 * MS), "1 ms of credit spent 2");
        assert!(!b.allows(40 * MS), "exactly back to zero");
        assert!(b.allows(41 * MS));
        // A long wait accrues one window's share at the most.
        let late = 100 * WINDOW_NS;
        assert!(b.allows(late));
        b.spend(WINDOW_NS / 20);
        assert!(!b.allows(late));
        assert!(b.allows(late + MS));
    }

    #[test]
    fn no_bound_allows_every_move_and_a_clock_that_goes_back_accrues_nothing() {
        let mut b = MoveBudget::new(None, 0);
        b.spend(u64::MAX);
        assert!(b.allows(0));
        let mut b = MoveBudget::new(Some(1000), 10 * MS);
        assert!(!b.allows(5 * MS), "the clock went back");
        assert!(b.allows(10 * MS + 1));
        b.spend(u64::MAX);
        assert!(!b.allows(u64::MAX), "one window's credit cannot repay that");
    }
}
