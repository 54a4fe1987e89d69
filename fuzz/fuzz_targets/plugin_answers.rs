//! The wasm plugin host against a scripted guest: a fixed module whose every answer
//! (`emm_alloc`'s answers and statuses, the chunks it asks for, `emm_free`'s statuses, chunks
//! returned early) is read from a script the fuzzer writes, passed as the config blob. Whatever
//! the answers, the host never panics, refuses or quarantines with a typed error, never hands
//! out overlapping memory, every allocation keeps its contents, and after the allocations are
//! freed and the resource dropped the simulated GPU holds nothing.
#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sandbox::{PluginLimits, PluginModule, PluginResource};
use emm_sim::{SimConfig, SimDriver, MIB};
use libfuzzer_sys::fuzz_target;

/// The scripted guest. `$next` reads the script's words in a cycle. `emm_alloc` takes a word:
/// low 3 bits 0 → answer the rest verbatim (signed), 1 → out of memory, 2 → a new chunk of
/// up to 16 MiB and an offset from the next word, otherwise an aligned offset in the last
/// chunk (asking for a 4 MiB one first if it has none). `emm_free` answers 1 (a refusal) on
/// one word in 16 and returns its last chunk early on another; `emm_reset` may return it.
const GUEST: &str = r#"
(module
  (import "emm" "upstream_alloc" (func $up_alloc (param i64 i64) (result i32)))
  (import "emm" "upstream_free" (func $up_free (param i32) (result i32)))
  (import "emm" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (global $len (mut i32) (i32.const 0))
  (global $pc (mut i32) (i32.const 0))
  (global $last (mut i32) (i32.const 0))
  (func (export "emm_abi_version") (result i32) (i32.const 1))
  (func (export "emm_buffer") (param i32) (result i32) (i32.const 1024))
  (func (export "emm_init") (param $ptr i32) (param $len i32) (result i32)
    (global.set $len (i32.and (local.get $len) (i32.const -8)))
    (i32.const 0))
  (func $next (result i64)
    (local $at i32)
    (if (i32.eqz (global.get $len)) (then (return (i64.const 2))))
    (local.set $at (i32.rem_u (i32.mul (global.get $pc) (i32.const 8)) (global.get $len)))
    (global.set $pc (i32.add (global.get $pc) (i32.const 1)))
    (i64.load (i32.add (i32.const 1024) (local.get $at))))
  (func $chunk (param $size i64) (result i32)
    (local $h i32)
    (local.set $h (call $up_alloc (local.get $size) (i64.const 256)))
    (if (i32.gt_s (local.get $h) (i32.const 0)) (then (global.set $last (local.get $h))))
    (local.get $h))
  (func (export "emm_alloc") (param $size i64) (param $align i64) (param $stream i64) (result i64)
    (local $w i64) (local $h i32) (local $mode i64)
    (local.set $w (call $next))
    (local.set $mode (i64.and (local.get $w) (i64.const 7)))
    (if (i64.eqz (local.get $mode)) (then (return (i64.shr_s (local.get $w) (i64.const 3)))))
    (if (i64.eq (local.get $mode) (i64.const 1)) (then (return (i64.const -1))))
    (if (i64.eq (local.get $mode) (i64.const 2))
      (then
        (local.set $h (call $chunk
          (i64.add (i64.and (i64.shr_u (local.get $w) (i64.const 8)) (i64.const 0xffffff)) (i64.const 1))))
        (if (i32.lt_s (local.get $h) (i32.const 0)) (then (return (i64.const -1))))
        (return (i64.or (i64.shl (i64.extend_i32_u (local.get $h)) (i64.const 40))
                        (i64.and (call $next) (i64.const 0xfffff))))))
    (if (i32.eqz (global.get $last))
      (then (if (i32.lt_s (call $chunk (i64.const 4194304)) (i32.const 0))
        (then (return (i64.const -1))))))
    (i64.or (i64.shl (i64.extend_i32_u (global.get $last)) (i64.const 40))
            (i64.and (i64.shr_u (local.get $w) (i64.const 8)) (i64.const 0x3fff00))))
  (func (export "emm_free") (param i32 i64 i64 i64) (result i32)
    (local $w i64)
    (local.set $w (i64.and (call $next) (i64.const 15)))
    (if (i64.eq (local.get $w) (i64.const 1))
      (then (if (global.get $last) (then (drop (call $up_free (global.get $last))) (global.set $last (i32.const 0))))))
    (i64.eqz (local.get $w)))
  (func (export "emm_reset") (result i32)
    (if (i32.and (i32.wrap_i64 (call $next)) (i32.const 1))
      (then (if (global.get $last) (then (drop (call $up_free (global.get $last))) (global.set $last (i32.const 0))))))
    (i32.const 0))
)
"#;

fn limits() -> PluginLimits {
    PluginLimits::default()
        .deadline(None)
        .fuel_per_call(Some(100_000))
        .max_restarts(2)
}

fn precompiled() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        PluginModule::from_wat("scripted", GUEST, limits(), Vec::new())
            .and_then(|m| m.precompiled())
            .unwrap_or_else(|e| panic!("the scripted guest must load: {e}"))
    })
}

#[derive(Arbitrary, Debug)]
enum HostOp {
    Alloc(u16),
    Free(u8),
    Reset,
}

#[derive(Arbitrary, Debug)]
struct Input {
    script: Vec<u64>,
    ops: Vec<HostOp>,
}

fuzz_target!(|input: Input| {
    if input.script.len() > 1024 || input.ops.len() > 128 {
        return;
    }
    let config: Vec<u8> = input.script.iter().flat_map(|w| w.to_le_bytes()).collect();
    // SAFETY: the bytes are this build's own serialization of GUEST (item 1).
    #[allow(unsafe_code)]
    let module = match unsafe {
        PluginModule::from_precompiled("scripted", precompiled(), limits(), config)
    } {
        Ok(m) => m,
        Err(e) => panic!(
            "a config blob of {} bytes must load: {e}",
            input.script.len() * 8
        ),
    };
    let Ok(g) = SimDriver::new(SimConfig::new(9).memory_per_device(128 * MIB)) else {
        return;
    };
    let g = Arc::new(g);
    let upstream: Arc<dyn DeviceMemoryResource> =
        Arc::new(CudaResource::<SimDriver>::new(Arc::clone(&g)));
    let r = PluginResource::new(Arc::new(module), upstream);
    let s = StreamId::DEFAULT;
    let mut live: Vec<(DevicePtr, usize, u8)> = Vec::new();
    let mut tag = 0u8;
    for op in &input.ops {
        match *op {
            HostOp::Alloc(n) => {
                let size = usize::from(n) + 1;
                match r.allocate(size, s) {
                    Ok(p) => {
                        for &(q, qs, _) in &live {
                            assert!(
                                p.0 + size as u64 <= q.0 || q.0 + qs as u64 <= p.0,
                                "{p} ({size} B) overlaps {q} ({qs} B)"
                            );
                        }
                        tag = tag.wrapping_add(1).max(1);
                        g.memcpy_htod(p, &vec![tag; size], None)
                            .expect("a checked answer is writable");
                        live.push((p, size, tag));
                    }
                    Err(e) => assert!(!e.to_string().is_empty()),
                }
            }
            HostOp::Free(i) if !live.is_empty() => {
                let (p, size, _) = live.swap_remove(usize::from(i) % live.len());
                // A refused free (a hostile guest) still gives the memory back eventually;
                // the error must say so, typed.
                if let Err(e) = r.deallocate(p, size, s) {
                    assert!(!e.to_string().is_empty());
                }
            }
            HostOp::Free(_) => {}
            HostOp::Reset => {
                let _ = r.reset();
            }
        }
    }
    for (p, size, v) in live {
        let mut back = vec![0; size];
        g.memcpy_dtoh(&mut back, p, None).expect("still live");
        assert!(back.iter().all(|&b| b == v), "allocation at {p} corrupted");
        let _ = r.deallocate(p, size, s);
    }
    drop(r);
    let report = g.report();
    assert!(report.is_clean(), "left behind:\n{report}");
});
