//! How cases are drawn: the weight of each operation, the size classes, and the fixed
//! scenarios every run starts with.
//!
//! Weights favour what finds allocator bugs — many allocations and frees in random order
//! (RMM's random-allocations benchmark), writes and read-backs, frees on other streams —
//! and keep the expensive operations (threads, teardown-like resets) rare.

use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

use crate::transition::{Op, Size};

/// Sizes: mostly small and odd, sometimes pages and MiB, rarely the edge cases.
pub fn size() -> BoxedStrategy<Size> {
    prop_oneof![
        30 => Just(Size::One),
        30 => (0u16..2048).prop_map(Size::Odd),
        20 => (0u8..16).prop_map(Size::Pages),
        8 => (0u8..8).prop_map(Size::Mib),
        8 => (0u8..crate::transition::CLASSES, any::<u16>())
            .prop_map(|(exp, frac)| Size::Class { exp, frac }),
        6 => (0u8..4, 0u8..4, 0u8..3).prop_map(|(unit, n, delta)| Size::Edge { unit, n, delta }),
        3 => Just(Size::Zero),
        3 => (0u8..4).prop_map(Size::NearTotal),
        2 => Just(Size::Absurd),
        1 => Just(Size::Max),
    ]
    .boxed()
}

/// Small sizes only (host memory, threads).
fn small() -> BoxedStrategy<Size> {
    prop_oneof![
        3 => Just(Size::One),
        3 => (0u16..2048).prop_map(Size::Odd),
        2 => (0u8..4).prop_map(Size::Pages),
        1 => Just(Size::Zero),
    ]
    .boxed()
}

/// One operation, drawn with the suite's weights.
pub fn op() -> BoxedStrategy<Op> {
    let lane = 0u8..4;
    prop_oneof![
        20 => size().prop_map(|size| Op::Memalloc { size }),
        14 => any::<u16>().prop_map(|pick| Op::Drop { pick }),
        8 => (size(), lane.clone()).prop_map(|(size, lane)| Op::MemallocAsync { size, lane }),
        6 => (any::<u16>(), lane.clone()).prop_map(|(pick, lane)| Op::FreeAsync { pick, lane }),
        8 => (any::<u16>(), lane.clone()).prop_map(|(pick, lane)| Op::Write { pick, lane }),
        5 => Just(Op::Verify),
        4 => (any::<u16>(), any::<u16>()).prop_map(|(pick, start)| Op::View { pick, start }),
        4 => (lane.clone(), lane).prop_map(|(from, to)| Op::RecordAndWait { from, to }),
        4 => (small(), any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(size, mapped, portable, wc)| Op::Memhostalloc { size, mapped, portable, wc }),
        3 => (small(), any::<bool>()).prop_map(|(size, mapped)| Op::Mempin { size, mapped }),
        3 => (small(), any::<bool>())
            .prop_map(|(size, attach_global)| Op::Memallocmanaged { size, attach_global }),
        4 => (any::<u16>(), any::<u16>()).prop_map(|(pick, start)| Op::GetIpcHandle { pick, start }),
        3 => Just(Op::GetMemoryInfo),
        3 => Just(Op::DeferCleanup),
        3 => Just(Op::EndDeferCleanup),
        1 => Just(Op::DeferCleanupWithError),
        2 => Just(Op::Initialize),
        1 => Just(Op::Reset),
        1 => (2u8..=4, 1u8..=8, small())
            .prop_map(|(threads, allocs, size)| Op::Concurrent { threads, allocs, size }),
        1 => (1u8..=8, small()).prop_map(|(items, size)| Op::ProducerConsumer { items, size }),
        1 => Just(Op::FreeAllAndRetry),
    ]
    .boxed()
}

/// A case: up to `max_ops` operations.
pub fn case(max_ops: usize) -> BoxedStrategy<Vec<Op>> {
    proptest::collection::vec(op(), 0..=max_ops.max(1)).boxed()
}

/// Fixed scenarios run before the random cases, so that every rule is exercised in every
/// run, however few cases it has: the lifecycle, RMM's generic cases, and each kind of
/// memory once.
pub fn scenarios() -> Vec<(&'static str, Vec<Op>)> {
    use Op::*;
    let s = |n| Size::Pages(n);
    let alloc_on = |size, lane| MemallocAsync { size, lane };
    vec![
        ("reset before initialize", vec![Reset, Initialize, Reset]),
        (
            "initialize twice with memory live",
            vec![
                Memalloc { size: s(0) },
                Memalloc {
                    size: Size::Odd(100),
                },
                Initialize,
                Verify,
                Initialize,
            ],
        ),
        (
            "RMM: 1 PiB is out of memory; the same near-total request succeeds after frees",
            vec![
                Memalloc { size: Size::Absurd },
                Memalloc { size: Size::Mib(7) },
                Memalloc {
                    size: Size::NearTotal(0),
                },
                FreeAllAndRetry,
                Memalloc { size: Size::Max },
                Memalloc { size: Size::Zero },
            ],
        ),
        (
            "RMM: mixed allocations and frees in random order",
            vec![
                Memalloc { size: Size::One },
                Memalloc {
                    size: Size::Odd(300),
                },
                Memalloc { size: s(3) },
                Drop { pick: 1 },
                Memalloc { size: Size::Odd(7) },
                Drop { pick: 0 },
                Memalloc { size: Size::Mib(0) },
                Write { pick: 1, lane: 0 },
                Verify,
            ],
        ),
        (
            "RMM: producer/consumer across threads and streams",
            vec![
                ProducerConsumer {
                    items: 8,
                    size: s(1),
                },
                Concurrent {
                    threads: 4,
                    allocs: 8,
                    size: Size::Odd(500),
                },
            ],
        ),
        (
            "stream-ordered reuse with and without event waits",
            vec![
                alloc_on(s(1), 1),
                Write { pick: 0, lane: 1 },
                FreeAsync { pick: 0, lane: 1 },
                alloc_on(s(1), 1),
                alloc_on(s(1), 2),
                Write { pick: 0, lane: 2 },
                FreeAsync { pick: 1, lane: 2 },
                RecordAndWait { from: 2, to: 3 },
                alloc_on(s(1), 3),
                Verify,
            ],
        ),
        (
            "memory freed on one stream taken on another with no wait between them",
            vec![
                alloc_on(s(1), 1),
                Write { pick: 0, lane: 1 },
                FreeAsync { pick: 0, lane: 1 },
                alloc_on(s(1), 2),
                Write { pick: 0, lane: 2 },
                FreeAsync { pick: 0, lane: 2 },
                alloc_on(Size::One, 3),
                Write { pick: 0, lane: 3 },
                Drop { pick: 0 },
                alloc_on(Size::One, 1),
                FreeAsync { pick: 0, lane: 1 },
                Memalloc { size: Size::One },
                Verify,
            ],
        ),
        (
            "host, pinned, mapped and managed memory, IPC, memory info",
            vec![
                Memhostalloc {
                    size: s(0),
                    mapped: true,
                    portable: false,
                    wc: false,
                },
                Memhostalloc {
                    size: s(0),
                    mapped: false,
                    portable: true,
                    wc: true,
                },
                Mempin {
                    size: s(1),
                    mapped: true,
                },
                Mempin {
                    size: s(0),
                    mapped: false,
                },
                Memallocmanaged {
                    size: s(2),
                    attach_global: true,
                },
                Memalloc {
                    size: Size::Odd(1000),
                },
                Memalloc { size: s(2) },
                GetIpcHandle { pick: 2, start: 40 },
                GetIpcHandle { pick: 1, start: 0 },
                GetMemoryInfo,
                Drop { pick: 2 },
                Drop { pick: 0 },
            ],
        ),
        // One scenario for sizes and alignments: another scenario would move the seeds of
        // the random cases that follow (a case's seed comes from its index).
        (
            "every size class and boundary, 1 B to 64 GiB, and every alignment the ABI allows, \
             512 B to 1 TiB (allocate_aligned)",
            [sizes(), alignments()].concat(),
        ),
        (
            "steady state: thousands of allocations and frees",
            vec![SteadyState { rounds: 48 }],
        ),
        (
            "defer_cleanup nested and left by an error",
            vec![
                DeferCleanup,
                Memalloc { size: s(0) },
                DeferCleanup,
                Drop { pick: 0 },
                DeferCleanupWithError,
                EndDeferCleanup,
                Memalloc { size: Size::One },
                EndDeferCleanup,
                Reset,
            ],
        ),
    ]
}

/// Two requests at every alignment above 256 bytes (an odd size and a page), both live while
/// a third at the next alignment comes, written and read back, then freed.
fn alignments() -> Vec<Op> {
    let mut ops = Vec::new();
    for align in crate::transition::ALIGN_CLASSES {
        ops.push(Op::MemallocAligned {
            size: Size::Odd(300),
            align,
        });
        ops.push(Op::MemallocAligned {
            size: Size::Pages(0),
            align,
        });
        ops.push(Op::Write { pick: 1, lane: 0 });
        ops.push(Op::Verify);
        ops.push(Op::Drop { pick: 0 });
        ops.push(Op::Drop { pick: 0 });
    }
    ops
}

/// One request in every power-of-two class and at every boundary ±1 byte, each freed before
/// the next (so that the largest fit together with nothing), a view and a write on some.
fn sizes() -> Vec<Op> {
    let mut ops = Vec::new();
    for exp in 0..crate::transition::CLASSES {
        ops.push(Op::Memalloc {
            size: Size::Class {
                exp,
                frac: u16::from(exp) * 977,
            },
        });
        if exp % 5 == 0 {
            ops.push(Op::Write { pick: 0, lane: 0 });
        }
        ops.push(Op::Drop { pick: 0 });
    }
    for unit in 0..4u8 {
        for delta in 0..3u8 {
            ops.push(Op::Memalloc {
                size: Size::Edge { unit, n: 0, delta },
            });
        }
        ops.push(Op::Verify);
        for _ in 0..3 {
            ops.push(Op::Drop { pick: 0 });
        }
    }
    ops
}
