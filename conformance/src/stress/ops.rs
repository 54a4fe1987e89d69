//! [`ThreadOp`] and the per-thread op lists: what each thread of a stress run does, drawn from
//! the run's seed alone (one SplitMix64 per thread), so the lists never depend on timing.

use emm_core::workloads::SplitMix64;

/// One step of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadOp {
    /// `memalloc(size)`, then the thread writes its pattern at the ends and the middle.
    Alloc(usize),
    /// `memalloc_async(size, the thread's stream)` where the manager is stream-ordered, else
    /// `memalloc`.
    AllocAsync(usize),
    /// Checks then drops live allocation `i` (modulo the live count).
    Free(usize),
    /// Checks then `memfree_async` of live allocation `i` on the thread's stream (a drop where
    /// the manager is not stream-ordered).
    FreeAsync(usize),
    /// A view into live allocation `i`, written through and read back, then dropped.
    View(usize),
    /// `get_ipc_handle` of live allocation `i`, kept until the next op of this thread.
    Ipc(usize),
    /// `defer_cleanup()`, held for the next `n` ops of this thread.
    Defer(u8),
    /// Rewrites live allocation `i` with a new pattern on the thread's stream.
    Write(usize),
    /// Reads back every live allocation of this thread.
    Check,
}

/// The op list of thread `thread` of a run seeded with `seed`: `ops` steps, sizes from 1 B to
/// 1 MiB (mostly small), ending with frees of what is live.
pub fn thread_ops(seed: u64, thread: usize, ops: usize) -> Vec<ThreadOp> {
    let mut rng = SplitMix64::new(seed ^ (thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut out = Vec::with_capacity(ops + 64);
    let mut live = 0usize;
    let size = |rng: &mut SplitMix64| -> usize {
        let class = rng.below(10);
        let n = match class {
            0..=5 => rng.range(1, 4096),
            6..=8 => rng.range(4097, 64 << 10),
            _ => rng.range((64 << 10) + 1, 1 << 20),
        };
        usize::try_from(n).unwrap_or(4096)
    };
    for _ in 0..ops {
        let pick = usize::try_from(rng.next_u64() >> 33).unwrap_or(0);
        let op = match rng.below(100) {
            0..=24 => ThreadOp::Alloc(size(&mut rng)),
            25..=39 => ThreadOp::AllocAsync(size(&mut rng)),
            40..=54 if live > 0 => ThreadOp::Free(pick),
            55..=64 if live > 0 => ThreadOp::FreeAsync(pick),
            65..=72 if live > 0 => ThreadOp::View(pick),
            73..=78 if live > 0 => ThreadOp::Ipc(pick),
            79..=82 => ThreadOp::Defer(u8::try_from(rng.range(1, 6)).unwrap_or(1)),
            83..=94 if live > 0 => ThreadOp::Write(pick),
            _ => ThreadOp::Check,
        };
        match op {
            ThreadOp::Alloc(_) | ThreadOp::AllocAsync(_) => live += 1,
            ThreadOp::Free(_) | ThreadOp::FreeAsync(_) => live -= 1,
            _ => {}
        }
        out.push(op);
    }
    out.extend((0..live).map(|_| ThreadOp::Free(0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_depend_on_the_seed_and_thread_only_and_free_everything() {
        let a = thread_ops(7, 3, 500);
        assert_eq!(a, thread_ops(7, 3, 500));
        assert_ne!(a, thread_ops(7, 4, 500));
        assert_ne!(a, thread_ops(8, 3, 500));
        let mut live = 0i64;
        for op in &a {
            match op {
                ThreadOp::Alloc(_) | ThreadOp::AllocAsync(_) => live += 1,
                ThreadOp::Free(_) | ThreadOp::FreeAsync(_) => {
                    live -= 1;
                    assert!(live >= 0);
                }
                _ => {}
            }
        }
        assert_eq!(live, 0);
    }
}
