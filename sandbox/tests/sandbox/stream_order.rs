//! `emm::stream_order(from, to)` (ABI v1.1): ordering two streams the driver knows answers 0,
//! a negative or unknown stream answers INVALID, a plugin calling it in a loop gets at most
//! `PluginLimits::max_stream_orders_per_call` orderings per call and then NOT_ORDERED without
//! the host calling the driver, and only a plugin that imports it is offered streams.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{gpu, upstream, wat_module};
use emm_core::contract::{ManagerTarget, MemoryManager};
use emm_core::mr::DeviceMemoryResource;
use emm_core::{DeviceId, Driver, StreamId};
use emm_sandbox::{PluginFactory, PluginLimits, PluginResource};
use emm_sim::{SimDriver, GIB};

const TEMPLATE: &str = include_str!("../fixtures/stream_order.wat");

/// The fixture calling `stream_order(from, to)` `times` times per allocation, answering only
/// when `oks` of them answered 0.
fn fixture(from: i64, to: i64, times: u32, oks: u32) -> String {
    TEMPLATE
        .replace("FROM", &from.to_string())
        .replace("TO", &to.to_string())
        .replace("TIMES", &times.to_string())
        .replace("OKS", &oks.to_string())
}

/// A simulated GPU with its context current and two non-blocking streams.
fn gpu_with_streams() -> (Arc<SimDriver>, StreamId, StreamId) {
    let g = gpu(GIB);
    g.set_current_context(g.primary_context(DeviceId(0)).unwrap())
        .unwrap();
    let a = g.stream_create(true).unwrap();
    let b = g.stream_create(true).unwrap();
    (g, a, b)
}

fn id(s: StreamId) -> i64 {
    i64::try_from(s.0).unwrap()
}

#[test]
fn ordering_two_known_streams_answers_ok_and_the_plugin_serves() {
    let (g, a, b) = gpu_with_streams();
    for (from, to) in [(a, b), (b, a), (a, a), (StreamId::DEFAULT, b)] {
        let wat = fixture(id(from), id(to), 3, 3);
        let r = PluginResource::new(
            wat_module("ordered", &wat, PluginLimits::default()),
            upstream(&g),
        );
        let p = r
            .allocate(4096, b)
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
        r.deallocate(p, 4096, b).unwrap();
        assert!(r.breaches().is_empty(), "{:?}", r.breaches());
    }
}

#[test]
fn a_negative_or_unknown_stream_answers_invalid_and_says_why() {
    let (g, a, _) = gpu_with_streams();
    let unknown = 987_654_321;
    for (from, to) in [
        (-1, id(a)),
        (id(a), i64::MIN),
        (unknown, id(a)),
        (id(a), unknown),
    ] {
        let wat = fixture(from, to, 1, 1);
        let r = PluginResource::new(
            wat_module("bad-stream", &wat, PluginLimits::default()),
            upstream(&g),
        );
        let e = r
            .allocate(4096, a)
            .expect_err("the plugin returns the status");
        assert!(
            e.to_string().contains("emm_alloc returned -3 (INVALID)"),
            "stream_order({from}, {to}): {e}"
        );
        if from >= 0 && to >= 0 {
            assert!(
                r.logs()
                    .iter()
                    .any(|l| l.message.contains("a stream the driver does not know")),
                "stream_order({from}, {to}): {:?}",
                r.logs()
            );
        }
    }
}

#[test]
fn a_plugin_ordering_in_a_loop_gets_the_per_call_limit_and_then_not_ordered() {
    let (g, a, b) = gpu_with_streams();
    let limit = 8;
    // A million calls in one allocation: `limit` reach the driver, the rest answer NOT_ORDERED
    // at once, so the host's time stays bounded.
    let wat = fixture(id(a), id(b), 1_000_000, limit);
    let limits = PluginLimits::default()
        .deadline(None)
        .fuel_per_call(Some(200_000_000))
        .max_stream_orders_per_call(limit);
    let r = PluginResource::new(wat_module("loop", &wat, limits), upstream(&g));
    let started = Instant::now();
    let p = r.allocate(4096, b).unwrap_or_else(|e| panic!("{e}"));
    let first = started.elapsed();
    // The limit is per call: the next allocation gets as many again.
    let q = r.allocate(4096, b).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        first < Duration::from_secs(5),
        "a million orderings took {first:?} of host time"
    );
    assert!(
        r.logs().iter().any(|l| l
            .message
            .contains("PluginLimits::max_stream_orders_per_call")),
        "{:?}",
        r.logs()
    );
    r.deallocate(p, 4096, b).unwrap();
    r.deallocate(q, 4096, b).unwrap();

    // Past the limit the answer is NOT_ORDERED (-5).
    let wat = fixture(id(a), id(b), limit + 1, limit + 1);
    let limits = PluginLimits::default().max_stream_orders_per_call(limit);
    let r = PluginResource::new(wat_module("over", &wat, limits), upstream(&g));
    let e = r.allocate(4096, b).expect_err("one ordering too many");
    assert!(
        e.to_string()
            .contains("emm_alloc returned -5 (NOT_ORDERED)"),
        "{e}"
    );
}

#[test]
fn only_a_plugin_importing_stream_order_is_offered_the_stream_ordered_extension() {
    let (g, a, b) = gpu_with_streams();
    let old = include_str!("../../../conformance/tests/conformance/zoo/wasm/passthrough.wat")
        .replace("(i32.const BUG)", "(i32.const 0)");
    let driver: Arc<dyn Driver> = g.clone();
    let target = ManagerTarget {
        context: driver.primary_context(DeviceId(0)).unwrap(),
        device: DeviceId(0),
        driver,
    };
    for (wat, orders) in [(old, false), (fixture(id(a), id(b), 1, 1), true)] {
        let module = wat_module("caps", &wat, PluginLimits::default());
        assert_eq!(module.orders_streams(), orders);
        let m = PluginFactory::new(module)
            .create_plugin_manager(&target)
            .unwrap();
        m.initialize().unwrap();
        assert_eq!(m.capabilities().stream_ordered, orders);
        let p = m.memalloc(4096).unwrap();
        drop(p);
        match m.memalloc_async(4096, b) {
            Ok(p) => {
                assert!(orders);
                m.memfree_async(p, b).unwrap();
            }
            Err(e) => {
                assert!(!orders);
                assert!(e.to_string().contains("emm::stream_order"), "{e}");
            }
        }
    }
}
