//! Properties of the simulated GPU that hold for any sequence of operations.

use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, MIB};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    AllocAsync(usize),
    Free(usize),
    Write {
        at: usize,
        offset: usize,
        byte: u8,
        len: usize,
    },
    Copy {
        from: usize,
        to: usize,
        len: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..=70_000).prop_map(Op::Alloc),
        2 => (1usize..=70_000).prop_map(Op::AllocAsync),
        2 => any::<usize>().prop_map(Op::Free),
        3 => (any::<usize>(), any::<usize>(), any::<u8>(), 1usize..=5000)
            .prop_map(|(at, offset, byte, len)| Op::Write { at, offset, byte, len }),
        2 => (any::<usize>(), any::<usize>(), 1usize..=5000).prop_map(|(from, to, len)| Op::Copy { from, to, len }),
    ]
}

struct Live {
    ptr: DevicePtr,
    model: Vec<u8>,
    async_: bool,
}

/// Runs `ops`, checking after each one that live allocations are disjoint and hold exactly
/// what the model says; returns the trace hash.
fn run(ops: &[Op], seed: u64) -> Result<u64, TestCaseError> {
    let g = SimDriver::new(SimConfig::new(seed).memory_per_device(64 * MIB)).unwrap();
    let s = g.stream_create(false).unwrap();
    let mut live: Vec<Live> = Vec::new();
    for op in ops {
        match *op {
            Op::Alloc(size) | Op::AllocAsync(size) => {
                let async_ = matches!(op, Op::AllocAsync(_));
                let ptr = if async_ {
                    g.mem_alloc_async(size, s)
                } else {
                    g.mem_alloc(size)
                };
                let Ok(ptr) = ptr else { continue };
                // Give it known contents so the model knows every byte.
                let fill = (live.len() as u8).wrapping_mul(31);
                g.memset_d8(ptr, fill, size, Some(s)).unwrap();
                live.push(Live {
                    ptr,
                    model: vec![fill; size],
                    async_,
                });
            }
            Op::Free(i) if !live.is_empty() => {
                let l = live.swap_remove(i % live.len());
                if l.async_ {
                    g.mem_free_async(l.ptr, s).unwrap()
                } else {
                    g.mem_free(l.ptr).unwrap()
                }
            }
            Op::Write {
                at,
                offset,
                byte,
                len,
            } if !live.is_empty() => {
                let n = live.len();
                let l = &mut live[at % n];
                let offset = offset % l.model.len();
                let len = len.min(l.model.len() - offset);
                g.memcpy_htod(l.ptr.offset(offset as u64), &vec![byte; len], Some(s))
                    .unwrap();
                l.model[offset..offset + len].fill(byte);
            }
            Op::Copy { from, to, len } if !live.is_empty() => {
                let (f, t) = (from % live.len(), to % live.len());
                let len = len.min(live[f].model.len()).min(live[t].model.len());
                g.memcpy_dtod(live[t].ptr, live[f].ptr, len, Some(s))
                    .unwrap();
                let src = live[f].model[..len].to_vec();
                live[t].model[..len].copy_from_slice(&src);
            }
            _ => {}
        }
        let mut spans: Vec<(u64, u64)> = live
            .iter()
            .map(|l| (l.ptr.0, l.ptr.0 + l.model.len() as u64))
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            prop_assert!(w[0].1 <= w[1].0, "live allocations overlap: {:?}", w);
        }
        for l in &live {
            let mut back = vec![0; l.model.len()];
            g.memcpy_dtoh(&mut back, l.ptr, Some(s)).unwrap();
            prop_assert!(
                back == l.model,
                "contents of {} changed by an operation on another allocation",
                l.ptr
            );
        }
    }
    for l in live.drain(..) {
        if l.async_ {
            g.mem_free_async(l.ptr, s).unwrap()
        } else {
            g.mem_free(l.ptr).unwrap()
        }
    }
    g.stream_destroy(s).unwrap();
    let report = g.report();
    prop_assert!(report.violations.is_empty(), "{}", report);
    prop_assert_eq!(report.leaked_bytes(), 0);
    Ok(g.trace_hash())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn live_allocations_never_overlap_and_contents_never_bleed(ops in prop::collection::vec(op(), 1..40)) {
        run(&ops, 9)?;
    }

    #[test]
    fn the_same_seed_and_calls_give_the_same_trace(ops in prop::collection::vec(op(), 1..30), seed in any::<u64>()) {
        prop_assert_eq!(run(&ops, seed)?, run(&ops, seed)?);
    }
}

/// A scripted workload over many kinds of calls, run twice: identical traces, event by event.
#[test]
fn traces_are_identical_byte_for_byte() {
    fn script() -> (u64, Vec<String>) {
        let g = SimDriver::new(SimConfig::new(77).devices(2).memory_per_device(256 * MIB)).unwrap();
        let other = g.process();
        let s = g.stream_create(true).unwrap();
        let e = g.event_create().unwrap();
        let a = g.mem_alloc(1 << 20).unwrap();
        let m = g.mem_alloc_managed(1 << 20, true).unwrap();
        g.memset_d8(a, 3, 1 << 20, Some(s)).unwrap();
        g.event_record(e, s).unwrap();
        g.stream_wait_event(StreamId::DEFAULT, e).unwrap();
        g.device_access(m, 1 << 20, s, true).unwrap();
        g.mem_prefetch(m, 1 << 20, emm_core::Location::Host, s)
            .unwrap();
        let h = g.ipc_get_mem_handle(a).unwrap();
        let opened = other.ipc_open_mem_handle(&h).unwrap();
        other.ipc_close_mem_handle(opened).unwrap();
        let _ = g.mem_free(DevicePtr(12345));
        g.mem_free(a).unwrap();
        g.mem_free(m).unwrap();
        (
            g.trace_hash(),
            g.trace().iter().map(ToString::to_string).collect(),
        )
    }
    let (h1, t1) = script();
    let (h2, t2) = script();
    assert_eq!(t1, t2);
    assert_eq!(h1, h2);
}
