//! How much a shard takes and keeps: the two policies of the per-thread front ([`Adaptive`],
//! [`Superblocks`]); for the adaptive one, the chunk a growing shard takes from the shared pool,
//! how much a steal takes, the band of spare memory a shard keeps above its live bytes or its
//! recent peak, and the shared pool's budget.

use crate::mr::detail::growth::TRIM_ABOVE_LIVE;
use crate::mr::detail::record::MAX_CHUNK;

/// How the shards of a [`ShardedPoolResource`](super::ShardedPoolResource) take and keep
/// chunks of its shared pool: [`Adaptive`] (the default) or [`Superblocks`]
/// ([`ArenaResource`](crate::mr::ArenaResource)). Sealed: the front's invariants hold for these two.
pub trait ChunkPolicy: sealed::Sealed + Send + Sync + 'static {
    /// The resource's name, for messages and logs.
    const NAME: &'static str;
    /// Requests above this many bytes go to the shared pool directly, past the shards.
    const DIRECT_ABOVE: u64;
    /// Whether a shard takes chunks of [`SUPERBLOCK`] and, when a free leaves one wholly free,
    /// gives its wholly free chunks back but one; else it takes chunks sized to its live bytes,
    /// keeps what is freed, and chunks move between shards when memory is needed.
    const SUPERBLOCKS: bool;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Adaptive {}
    impl Sealed for super::Superblocks {}
}

/// `ShardedPoolResource`'s policy: every request through the thread's shard, chunks sized to
/// its live bytes (below), kept on frees and moved between shards when memory is needed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Adaptive;

impl ChunkPolicy for Adaptive {
    const NAME: &'static str = "ShardedPoolResource";
    const DIRECT_ABOVE: u64 = u64::MAX;
    const SUPERBLOCKS: bool = false;
}

/// RMM's arena (`ArenaResource`): requests up to [`SUPERBLOCK`] / 8 (256 KiB) from the thread's
/// shard (an *arena*), which takes superblocks of [`SUPERBLOCK`] from the shared pool (the
/// *global arena*) and gives a wholly free one back on the free, keeping one so that a loop
/// filling and emptying one superblock does not take the shared lock every time; larger
/// requests from the shared pool directly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Superblocks;

impl ChunkPolicy for Superblocks {
    const NAME: &'static str = "ArenaResource";
    const DIRECT_ABOVE: u64 = SUPERBLOCK / 8;
    const SUPERBLOCKS: bool = true;
}

/// The chunk an arena ([`Superblocks`]) takes from the global arena at a time: 2 MiB.
pub const SUPERBLOCK: u64 = 2 << 20;

/// Shards take chunks of the request rounded up to this (1 MiB) from the shared pool (more for
/// a shard with much live, `grow_chunk`). Measured
/// here: while shards gave chunks back on frees, W1 (1 B to 1 MiB) by
/// one thread moved 254 chunks through the shared pool per 1 000 operations with 512 KiB
/// chunks, 27 with 2 MiB and 2 with 8 MiB; once shards keep their chunks, the size sets how
/// finely memory moves between threads: on W2 by 2 and 4 threads, 1 MiB chunks moved 3.6–5.4
/// per 1 000 operations holding 1.13–1.16 × peak live, 2 MiB 3.2–65 holding 1.14–1.20; on
/// the W3-shaped churn of `tests/mr_sharded_pool.rs` (32 MB live per thread) 2 MiB chunks held
/// up to 1.54 × by 8 threads.
pub const SHARD_CHUNK: u64 = 1 << 20;

/// A growing shard takes from the shared pool at least this fraction (1/64) of its live bytes
/// (up to [`GROW_MAX`]), so that a thread whose live memory climbs moves a chunk every few
/// allocations, not every one: on W1 by 8 and 16 threads here (about 130 MB live a thread),
/// 1 MiB growths made 0.8–2.6 chunk moves per 1 000 operations, growths of up to 2 MiB
/// 0.4–0.9. At 1/32, W3's shards (35 MB live a thread) took 2 MiB chunks too and held 1.14 ×
/// peak live by one thread against 1.08 with 1 MiB.
pub(super) const GROW_DIVISOR: u64 = 64;

/// The most a growth takes beyond the request (2 MiB, the shared pool's own granularity, so
/// it wastes nothing there): growths of up to 8 MiB made 0.05–0.3 chunk moves per 1 000
/// operations on W1 but held 1.19 × peak live by one thread against 1.08 — W1's requests of
/// up to 1 MiB fragment larger chunks, and a larger chunk is wholly free, and so able to move
/// to another thread, more rarely.
pub(super) const GROW_MAX: u64 = 2 << 20;

/// A thief takes up to this fraction (1/8) of its live bytes in one steal, when that is more
/// than [`STEAL_BATCH`]: on W2 (1 B to 64 MiB) one chunk is already larger than the batch, so
/// each steal took one. On W2 by 8 threads on own streams here (with growths of up to 8 MiB
/// then), 1.6–1.9 chunk moves per 1 000 operations against 2.3–2.8 in five runs each.
pub(super) const STEAL_DIVISOR: u64 = 8;

/// The chunk a growing shard with `live` bytes live (the request's included) takes from the
/// shared pool for a request of `size` bytes, or `None` on overflow: a power of two of at least
/// 1 MiB (a small request's chunk is 1 or 2 MiB; a large one's, see [`LARGE_GROW_DIVISOR`]).
///
/// Chunks of a few sizes are interchangeable: one that a shard gives back serves another's
/// growth whole, so the shared pool neither splits chunks nor trades them with the driver.
/// Rounding large chunks to a power of two, on the simulated GPU with 32 shards and threads in
/// lockstep (`examples/sharded_counts.rs --lockstep 64 --drift 0.3` and `--drift 1`), W2 by 8
/// threads moved 0.37–0.85 chunks per 1 000 operations against 1.5–4.2, made 0.000–0.004
/// `cuMemAlloc`/`cuMemFree` calls per 1 000 against 0.24–0.44, and held 1.17–1.20 × peak live
/// against 1.18–1.21 (one thread: 1.127 against 1.180).
pub(super) fn grow_chunk(size: u64, live: u64) -> Option<u64> {
    if size > MAX_CHUNK {
        return None;
    }
    if size > GROW_MAX {
        let large = (live / LARGE_GROW_DIVISOR).min(LARGE_GROW_TIMES.saturating_mul(size));
        // A heap's block is below 1 TiB: clamped, still at least `size`.
        let pow2 = size
            .max(large)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX);
        return Some(pow2.min(MAX_CHUNK));
    }
    shard_chunk(size.max((live / GROW_DIVISOR).clamp(SHARD_CHUNK, GROW_MAX)))
}

/// A request above [`GROW_MAX`] takes a chunk of up to 1/64 of the shard's live bytes, at most
/// [`LARGE_GROW_TIMES`] × the request: request-sized chunks never merge, so a shard serving
/// large requests (W2: up to 64 MiB) kept taking new ones. On the simulated GPU with 32 shards
/// and threads in lockstep (`examples/sharded_counts.rs --lockstep 64 --drift 0.3`), W2 by 8
/// threads on own streams moved 3.6 chunks per 1 000 operations with request-sized chunks,
/// 1.5 with this, holding 1.19 × peak live against 1.18; 1/32 moved 0.35 but held 1.25–1.29.
pub(super) const LARGE_GROW_DIVISOR: u64 = 64;

/// See [`LARGE_GROW_DIVISOR`].
pub(super) const LARGE_GROW_TIMES: u64 = 4;

/// Bytes a thief with `live` bytes live takes at most in one steal for `size` bytes.
pub(super) fn steal_batch(size: u64, live: u64) -> u64 {
    size.max(STEAL_BATCH).max(live / STEAL_DIVISOR)
}

/// A shard that takes another's spare chunks takes up to this many bytes (8 MiB) at once, so
/// that one event orders them all: on W1 by 2 to 16 threads here, taking one chunk at a time
/// made 1.8–3.1 ordering calls per 1 000 operations.
pub(super) const STEAL_BATCH: u64 = 8 << 20;

/// The chunk a shard takes for a request of `size` bytes, or `None` on overflow.
pub(super) fn shard_chunk(size: u64) -> Option<u64> {
    Some(size.checked_add(SHARD_CHUNK - 1)? & !(SHARD_CHUNK - 1))
}

/// A shard holding more than this × its live bytes gives wholly free chunks back when memory is
/// needed — its own before it grows (beyond one spare chunk, as a pool trims before it grows),
/// another's when another shard grows: the pool's trim threshold, 1.05. A wider band for the
/// other shards (1.25) held up to 1.28 × peak live on W2 and moved no fewer chunks.
pub(super) const KEEP_ABOVE_LIVE: f64 = TRIM_ABOVE_LIVE;

/// What a shard with `live` bytes live keeps: [`KEEP_ABOVE_LIVE`] × live plus `spare`.
pub(super) fn band(live: u64, spare: u64) -> u64 {
    ((KEEP_ABOVE_LIVE * live as f64) as u64).saturating_add(spare)
}

/// A shard's recent peak of live bytes is the largest live over the current window of this
/// many allocations and the peak before it, which halves its distance to the window's largest
/// at each window's end: what the shard's thread needed a while ago it will likely need
/// again, so other shards take only what lies beyond it while memory held stays within
/// [`HELD_BUDGET`]. A long window (65 536), because a thread whose peak decays soon gives up
/// chunks it needs again a few thousand operations later, and then takes them back from
/// another: with threads in lockstep here (`examples/sharded_counts.rs --lockstep 64
/// --drift 0.3`), W1 by 16 threads made 0.86 steals per 1 000 operations with a window of
/// 1 024 allocations, 0.32 with 65 536 and 0.29 with no decay; W2 by 8 threads 5.5, 3.3–4.8
/// and 2.9–5.2 (the budget, not the window, then decides which shard gives).
pub(super) const PEAK_WINDOW: u32 = 65_536;

/// While the shared pool holds at most this × the largest total of live bytes seen (with the
/// chunk a grower wants), a grower takes memory from the shared pool rather than from a shard
/// within its recent peak; beyond it, growers take spare chunks down to the other shards'
/// [`band`] as before. Below the bench's bound of 1.25 × peak live, as the estimate only ever
/// falls short of the true peak. W2 alone holds 1.13 by one thread, so with 1.15 most of its
/// growths by many threads found the pool beyond the budget and took chunks from shards that
/// soon needed them again: on an H200 host, W2
/// by 16 threads ran 71–127 M ops/s with 1.15 and 114–158 M with 1.20, held ≤ 1.200 × peak
/// live, and moved about 3× fewer chunks. With 2.0 they held 1.42.
pub(super) const HELD_BUDGET: f64 = 1.20;

/// Free bytes a shard holds, beyond its live bytes, before a growth merges the free blocks of
/// all its streams (after a context synchronize) instead of taking a chunk: enough that a
/// program on a few streams never pays for the synchronize, small beside a device.
pub(super) const SCATTERED_MIN: u64 = 32 << 20;
/// Which of its chunks a shard keeps from a grower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// Up to [`band`] of its recent peak of live bytes (or of live, if higher).
    Peak,
    /// Up to [`band`] of its live bytes.
    Live,
}

/// How a grower reads what the other shards hold and keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// As each published at its last unlock ([`Published`]): no lock.
    Published,
    /// Under each shard's lock in turn: before the shared pool grows beyond the budget.
    Locked,
}

/// What a shard with `live` bytes live and a recent peak of `peak` keeps from a grower, by
/// `keep`: the rule behind [`Shard::keep`] and [`Published::room`] alike.
pub(super) fn kept(keep: Keep, live: u64, peak: u64) -> u64 {
    match keep {
        Keep::Peak => band(live.max(peak), 0),
        Keep::Live => band(live, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_powers_of_two_a_share_of_live_for_large_requests_at_most_2_mib_for_small() {
        const MIB: u64 = 1 << 20;
        // Small requests: the request rounded to 1 MiB, or 1/64 of live up to 2 MiB.
        assert_eq!(grow_chunk(1000, 0), Some(MIB));
        assert_eq!(grow_chunk(1000, 4096 * MIB), Some(2 * MIB));
        assert_eq!(grow_chunk(2 * MIB, 4096 * MIB), Some(2 * MIB));
        // Large ones: 1/64 of live, at most 4 × the request, never less than the request,
        // rounded up to a power of two.
        assert_eq!(grow_chunk(8 * MIB, 4096 * MIB), Some(32 * MIB));
        assert_eq!(grow_chunk(40 * MIB, 4096 * MIB), Some(64 * MIB));
        assert_eq!(grow_chunk(40 * MIB, 5000 * MIB), Some(128 * MIB));
        assert_eq!(grow_chunk(3 * MIB, 64 * MIB), Some(4 * MIB));
        assert_eq!(grow_chunk(65 * MIB, 0), Some(128 * MIB));
        assert_eq!(grow_chunk(u64::MAX - 1, u64::MAX), None);
        // A heap's block is below 1 TiB: past 512 GiB a chunk is clamped to `MAX_CHUNK`
        // (still holding the request), and a larger request is refused.
        assert_eq!(grow_chunk(600 << 30, 0), Some(MAX_CHUNK));
        assert_eq!(grow_chunk(MAX_CHUNK, u64::MAX), Some(MAX_CHUNK));
        assert_eq!(grow_chunk(MAX_CHUNK + 1, 0), None);
        // Every chunk up to 512 GiB is a power of two, so one given back serves another shard
        // whole.
        for size in (1..200).map(|k| k * 700_001) {
            for live in [0, 10 * MIB, 3000 * MIB] {
                assert!(
                    grow_chunk(size, live).unwrap().is_power_of_two(),
                    "{size} {live}"
                );
            }
        }
    }
}
