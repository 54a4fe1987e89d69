//! The standard allocation workloads W1, W2 and W3.
//!
//! Every allocator benchmark in emm replays these op lists, and the peers (cudaMalloc,
//! cudaMallocAsync, RMM, PyTorch, CuPy) were measured on the same lists, so the figures compare
//! directly. The generators follow the document step for step: one [`SplitMix64`] per list, a
//! live set of sizes with swap-remove, and a free naming its index in the live set at the time.
//! [`Workload::summary`] must print the document's expected line; the tests below check it.
//!
//! # Examples
//!
//! ```
//! use emm_core::workloads;
//!
//! let w1 = workloads::w1();
//! assert_eq!(
//!     w1.summary().to_string(),
//!     "W1 ops=100468  allocs=50234  frees=50234  peak_live_bytes=264138769  peak_live_count=476"
//! );
//!
//! // Drive any allocator: here a counter of live bytes stands in for one.
//! use std::cell::Cell;
//! let (live, peak) = (Cell::new(0u64), Cell::new(0u64));
//! let result: Result<(), std::convert::Infallible> = workloads::replay(
//!     &w1,
//!     |size| {
//!         live.set(live.get() + size);
//!         peak.set(peak.get().max(live.get()));
//!         Ok(size) // the handle: here just the size
//!     },
//!     |_handle, size| live.set(live.get() - size),
//! );
//! assert!(result.is_ok());
//! assert_eq!(live.get(), 0);
//! assert_eq!(peak.get(), 264_138_769);
//! ```

use std::fmt;

/// One step of an op list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Allocate this many bytes and append the allocation to the live set.
    Alloc(u64),
    /// Free live entry `j` (written `-(j + 1)` in the document's encoding); the last live entry
    /// moves into slot `j` (swap-remove).
    Free(usize),
}

/// A named op list. A well-formed list frees only live entries and ends with nothing live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The list's name, as in the summary line (`W1`).
    pub name: String,
    /// The ops, in order.
    pub ops: Vec<Op>,
}

/// Counts describing one op list; its `Display` is the document's summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The list's name.
    pub name: String,
    /// Number of ops.
    pub ops: usize,
    /// Number of [`Op::Alloc`].
    pub allocs: usize,
    /// Number of [`Op::Free`].
    pub frees: usize,
    /// Largest sum of live sizes after any op.
    pub peak_live_bytes: u64,
    /// Largest number of live allocations after any op.
    pub peak_live_count: usize,
}

/// SplitMix64, the random source every workload draws from.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state starts at `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `next() % n`, as the document defines it (modulo bias included).
    ///
    /// # Panics
    ///
    /// If `n` is zero.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `lo + below(hi - lo + 1)`: uniform in `lo..=hi`.
    ///
    /// # Panics
    ///
    /// If `hi < lo` or the range spans all of `u64`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// The live set while generating: sizes, with swap-remove, plus the ops written so far.
struct Generator {
    rng: SplitMix64,
    ops: Vec<Op>,
    live: Vec<u64>,
    live_bytes: u64,
}

impl Generator {
    fn new(seed: u64, capacity: usize) -> Self {
        Self {
            rng: SplitMix64::new(seed),
            ops: Vec::with_capacity(capacity),
            live: Vec::new(),
            live_bytes: 0,
        }
    }

    fn alloc(&mut self, size: u64) {
        self.ops.push(Op::Alloc(size));
        self.live.push(size);
        self.live_bytes += size;
    }

    /// Frees a live entry chosen by `below(len(live))`; the live set must not be empty.
    fn free_random(&mut self) {
        // usize -> u64 and back: the index is below the live set's length, so both are lossless.
        let j = self.rng.below(self.live.len() as u64) as usize;
        self.ops.push(Op::Free(j));
        self.live_bytes -= self.live.swap_remove(j);
    }

    fn drain(mut self) -> Vec<Op> {
        while !self.live.is_empty() {
            self.free_random();
        }
        self.ops
    }
}

/// The document's random walk: each step allocates `range(1, max_size)` bytes or frees a random
/// live entry with even odds, freeing instead when the allocation would push live bytes past
/// `cap`; then frees everything left in random order.
///
/// # Time complexity
///
/// O(`steps` + ops), one random draw per decision.
pub fn random_walk(seed: u64, steps: u64, max_size: u64, cap: u64) -> Vec<Op> {
    let mut g = Generator::new(seed, usize::try_from(steps).unwrap_or(0));
    for _ in 0..steps {
        let want_alloc = (g.rng.next_u64() >> 63) == 0 || g.live.is_empty();
        if want_alloc {
            let size = g.rng.range(1, max_size);
            if g.live_bytes + size > cap && !g.live.is_empty() {
                g.free_random();
            } else {
                g.alloc(size);
            }
        } else {
            g.free_random();
        }
    }
    g.drain()
}

/// The document's churn: `max_live` allocations of `range(lo, hi)` bytes, then
/// `(total_ops - 2 * max_live) / 2` pairs (none if negative) of (free a random live entry, allocate), then frees
/// everything left in random order.
///
/// # Panics
///
/// If `max_live` is zero while pairs remain (there is nothing to free).
///
/// # Time complexity
///
/// O(`total_ops`).
pub fn churn(seed: u64, total_ops: u64, max_live: u64, lo: u64, hi: u64) -> Vec<Op> {
    let mut g = Generator::new(seed, usize::try_from(total_ops).unwrap_or(0));
    for _ in 0..max_live {
        let size = g.rng.range(lo, hi);
        g.alloc(size);
    }
    for _ in 0..total_ops.saturating_sub(2 * max_live) / 2 {
        g.free_random();
        let size = g.rng.range(lo, hi);
        g.alloc(size);
    }
    g.drain()
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// W1: random walk, seed `0xA11C0001`, 100 000 steps, sizes up to 1 MiB, 8 GiB cap.
pub fn w1() -> Workload {
    Workload::new("W1", random_walk(0xA11C_0001, 100_000, MIB, 8 * GIB))
}

/// W1's walk (its seed, sizes and cap) cut to `steps` steps: W1's shape in less time.
pub fn w1_shaped(steps: u64) -> Workload {
    Workload::new("w1-shaped", random_walk(0xA11C_0001, steps, MIB, 8 * GIB))
}

/// W2: random walk, seed `0xA11C0002`, 20 000 steps, sizes up to 64 MiB, 32 GiB cap.
pub fn w2() -> Workload {
    Workload::new("W2", random_walk(0xA11C_0002, 20_000, 64 * MIB, 32 * GIB))
}

/// W3: churn, seed `0xA11C0003`, 1 000 000 ops, 1 000 live, sizes from 8 B to 64 KiB.
pub fn w3() -> Workload {
    Workload::new("W3", churn(0xA11C_0003, 1_000_000, 1_000, 8, 64 * KIB))
}

/// The names [`by_name`] knows, in order.
pub const NAMES: [&str; 3] = ["W1", "W2", "W3"];

/// The standard workload called `name` (`W1`, `W2`, `W3`; case-insensitive), or `None`.
pub fn by_name(name: &str) -> Option<Workload> {
    match name.to_ascii_uppercase().as_str() {
        "W1" => Some(w1()),
        "W2" => Some(w2()),
        "W3" => Some(w3()),
        _ => None,
    }
}

impl Workload {
    /// A workload named `name` with these ops.
    pub fn new(name: impl Into<String>, ops: Vec<Op>) -> Self {
        Self {
            name: name.into(),
            ops,
        }
    }

    /// Counts the list's ops and its live-set peaks.
    ///
    /// # Panics
    ///
    /// If a free names an entry that is not live (a malformed list).
    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            name: self.name.clone(),
            ops: self.ops.len(),
            allocs: 0,
            frees: 0,
            peak_live_bytes: 0,
            peak_live_count: 0,
        };
        let mut live: Vec<u64> = Vec::new();
        let mut live_bytes = 0u64;
        for op in &self.ops {
            match *op {
                Op::Alloc(size) => {
                    s.allocs += 1;
                    live.push(size);
                    live_bytes += size;
                    s.peak_live_bytes = s.peak_live_bytes.max(live_bytes);
                    s.peak_live_count = s.peak_live_count.max(live.len());
                }
                Op::Free(j) => {
                    s.frees += 1;
                    live_bytes -= live.swap_remove(j);
                }
            }
        }
        s
    }
}

impl fmt::Display for Summary {
    /// The document's line. Each count is left-aligned in a column as wide as that count is in
    /// the widest of W1, W2, W3 (ops 7, allocs 6, frees 6, peak_live_bytes 10), followed by one
    /// space, so the three lines align as in the document; a wider value just widens its column.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops={:<7} allocs={:<6} frees={:<6} peak_live_bytes={:<10} peak_live_count={}",
            self.name,
            self.ops,
            self.allocs,
            self.frees,
            self.peak_live_bytes,
            self.peak_live_count
        )
    }
}

/// Replays `workload` against an allocator: `alloc(size)` for each allocation, keeping its
/// handle in a live set that mirrors the list's, and `free(handle, size)` for each free.
///
/// If `alloc` fails, every handle still live is freed (last first) and its error is returned,
/// so a failed replay leaks nothing. Entries a malformed list leaves live are freed at the end.
///
/// # Errors
///
/// The first error `alloc` returns.
///
/// # Panics
///
/// If a free names an entry that is not live (a malformed list).
///
/// # Time complexity
///
/// O(ops) besides the closures: one push or one swap-remove per op.
pub fn replay<H, E>(
    workload: &Workload,
    mut alloc: impl FnMut(u64) -> Result<H, E>,
    mut free: impl FnMut(H, u64),
) -> Result<(), E> {
    let mut live: Vec<(H, u64)> = Vec::new();
    let mut failure = None;
    for op in &workload.ops {
        match *op {
            Op::Alloc(size) => match alloc(size) {
                Ok(handle) => live.push((handle, size)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            },
            Op::Free(j) => {
                let (handle, size) = live.swap_remove(j);
                free(handle, size);
            }
        }
    }
    while let Some((handle, size)) = live.pop() {
        free(handle, size);
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected summaries, verbatim: an implementation that prints these replays the same lists.
    const EXPECTED: [&str; 3] = [
        "W1 ops=100468  allocs=50234  frees=50234  peak_live_bytes=264138769  peak_live_count=476",
        "W2 ops=20068   allocs=10034  frees=10034  peak_live_bytes=4493822174 peak_live_count=131",
        "W3 ops=1000000 allocs=500000 frees=500000 peak_live_bytes=34955388   peak_live_count=1000",
    ];

    #[test]
    fn summaries_match_the_document() {
        for (w, expected) in [w1(), w2(), w3()].iter().zip(EXPECTED) {
            assert_eq!(w.summary().to_string(), expected);
        }
    }

    #[test]
    fn by_name_knows_the_three() {
        for name in NAMES {
            assert_eq!(by_name(name).map(|w| w.name), Some(name.to_string()));
        }
        assert_eq!(by_name("w2").map(|w| w.name), Some("W2".to_string()));
        assert!(by_name("W4").is_none());
    }

    #[test]
    fn replay_frees_each_handle_once_with_its_size() {
        let w = w1();
        let mut next_id = 0u64;
        let mut sizes = Vec::new();
        let mut freed = Vec::new();
        let r: Result<(), ()> = replay(
            &w,
            |size| {
                sizes.push(size);
                next_id += 1;
                Ok(next_id - 1)
            },
            |id, size| freed.push((id, size)),
        );
        assert_eq!(r, Ok(()));
        assert_eq!(freed.len(), sizes.len());
        freed.sort_unstable();
        for (i, (id, size)) in freed.iter().enumerate() {
            assert_eq!(*id, i as u64);
            assert_eq!(*size, sizes[i]);
        }
    }

    #[test]
    fn failed_replay_frees_everything_live() {
        let w = Workload::new(
            "t",
            vec![
                Op::Alloc(1),
                Op::Alloc(2),
                Op::Free(0),
                Op::Alloc(3),
                Op::Alloc(4),
            ],
        );
        let live = std::cell::Cell::new(0i32);
        let r = replay(
            &w,
            |size| {
                if size == 4 {
                    return Err("out of memory");
                }
                live.set(live.get() + 1);
                Ok(size)
            },
            |_, _| live.set(live.get() - 1),
        );
        assert_eq!(r, Err("out of memory"));
        assert_eq!(live.get(), 0);
    }
}
