//! A snapshot of a short trace: what the simulator logs for each call.

use emm_core::attribution::CallerScope;
use emm_core::{Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

#[test]
fn short_trace() {
    let g = SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap();
    let s = g.stream_create(true).unwrap();
    let a = {
        let _scope = CallerScope::enter("pool");
        g.mem_alloc(1 << 20).unwrap()
    };
    g.memcpy_htod(a, &[1; 4096], Some(s)).unwrap();
    let e = g.event_create().unwrap();
    g.event_record(e, s).unwrap();
    g.stream_wait_event(StreamId::DEFAULT, e).unwrap();
    let b = g.mem_alloc_async(4096, StreamId::DEFAULT).unwrap();
    g.mem_free_async(b, StreamId::DEFAULT).unwrap();
    let h = crate::mapped_host(&g, 4096);
    let _ = g.mem_free(a.offset(8));
    g.mem_free(a).unwrap();
    g.host_free(h).unwrap();
    g.event_destroy(e).unwrap();
    g.stream_destroy(s).unwrap();
    let trace: Vec<String> = g.trace().iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(trace.join("\n"));
}
