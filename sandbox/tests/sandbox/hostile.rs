//! Hostile plugins: each is contained with a clear error, the process keeps running, and no
//! live allocation is lost or corrupted (contents verified on the simulated GPU). After the
//! allocations are freed, the quarantined plugin's chunk is back with the driver.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fill, gpu, holds, upstream, wat_module};
use emm_core::mr::{CudaResource, DeviceMemoryResource, MrError};
use emm_core::{DeviceId, DevicePtr, StreamId};
use emm_sandbox::module::wat_to_wasm;
use emm_sandbox::{PluginFault, PluginLimits, PluginModule, PluginResource, Rule, SandboxError};
use emm_sim::{SimDriver, GIB};

const TEMPLATE: &str = include_str!("../fixtures/hostile.wat");
const S: StreamId = StreamId::DEFAULT;

/// The fixture doing `hostile` on its `nth` allocation (never, for 0).
fn fixture(hostile: &str, nth: u32) -> String {
    fixture_with(hostile, nth, 1, 0, 0)
}

/// The fixture with its ABI version and the statuses `emm_init` and `emm_free` return.
fn fixture_with(hostile: &str, nth: u32, version: i32, init: i32, free: i32) -> String {
    TEMPLATE
        .replace("HOSTILE", hostile)
        .replace("NTH", &nth.to_string())
        .replace("VERSION", &version.to_string())
        .replace("INIT_STATUS", &init.to_string())
        .replace("FREE_STATUS", &free.to_string())
}

/// Deterministic limits: fuel, no wall clock.
fn fuel_only() -> PluginLimits {
    PluginLimits::default().deadline(None)
}

/// Three good allocations with contents, then the hostile call; checks the breach, that the
/// three survive intact, that later requests fail cleanly, and that freeing them returns the
/// chunk to the driver.
fn contained(name: &str, wat: &str, limits: PluginLimits, check: impl Fn(&PluginFault) -> bool) {
    let g = gpu(GIB);
    let r = PluginResource::new(wat_module(name, wat, limits), upstream(&g));
    let good: Vec<DevicePtr> = (0..3u8)
        .map(|i| {
            let p = r
                .allocate(4096, S)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            fill(&g, p, 4096, i);
            p
        })
        .collect();
    let e = r.allocate(4096, S).expect_err(name);
    let text = e.to_string();
    assert!(text.contains(&format!("plugin {name} ")), "{name}: {text}");
    assert!(
        text.contains("in emm_alloc(size=4096, align=256, stream=0)"),
        "{name}: {text}"
    );
    assert!(text.contains("quarantined"), "{name}: {text}");
    let breach = r
        .quarantined()
        .unwrap_or_else(|| panic!("{name}: not quarantined"));
    assert!(check(&breach.fault), "{name}: {:?}", breach.fault);
    for (i, &p) in good.iter().enumerate() {
        assert!(
            holds(&g, p, 4096, i as u8),
            "{name}: allocation {i} corrupted"
        );
    }
    let later = r.allocate(4096, S).expect_err(name).to_string();
    assert!(
        later.contains("Requests fail until it is reloaded"),
        "{name}: {later}"
    );
    assert!(
        g.device_memory_used(DeviceId(0)) > 0,
        "{name}: the chunk is still held"
    );
    for p in good {
        r.deallocate(p, 4096, S)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(
        g.device_memory_used(DeviceId(0)),
        0,
        "{name}: chunk not returned"
    );
    assert_eq!(r.stats().unwrap().chunks, 0);
    assert!(g.report().is_clean(), "{name}: {}", g.report());
}

#[test]
fn an_infinite_loop_runs_out_of_fuel() {
    let wat = fixture("(loop $l (br $l))", 4);
    let limits = fuel_only().fuel_per_call(Some(1_000_000));
    contained("loop", &wat, limits, |f| {
        *f == PluginFault::OutOfFuel { fuel: 1_000_000 }
    });
}

#[test]
fn an_infinite_loop_passes_its_deadline() {
    let wat = fixture("(loop $l (br $l))", 4);
    let limits = PluginLimits::default()
        .fuel_per_call(None)
        .deadline(Some(Duration::from_millis(30)))
        .epoch_tick(Duration::from_millis(2));
    contained("spin", &wat, limits, |f| {
        *f == PluginFault::Deadline { millis: 30 }
    });
}

#[test]
fn a_memory_bomb_hits_its_cap() {
    let wat = fixture("(loop $l (drop (memory.grow (i32.const 16))) (br $l))", 4);
    let limits = fuel_only().memory_cap(8 << 20);
    contained(
        "bomb",
        &wat,
        limits,
        |f| matches!(f, PluginFault::MemoryCap { cap, desired } if *cap == 8 << 20 && *desired > *cap),
    );
}

#[test]
fn a_stack_overflow_traps() {
    let wat = fixture("(drop (call $rec (i64.const 0)))", 4);
    contained(
        "deep",
        &wat,
        fuel_only(),
        |f| matches!(f, PluginFault::Trap(t) if t.contains("call stack exhausted")),
    );
}

#[test]
fn unreachable_on_the_nth_call_traps() {
    let wat = fixture("(unreachable)", 4);
    contained(
        "trap",
        &wat,
        fuel_only(),
        |f| matches!(f, PluginFault::Trap(t) if t.contains("unreachable")),
    );
}

fn broke(rule: Rule) -> impl Fn(&PluginFault) -> bool {
    move |f| matches!(f, PluginFault::BadAnswer { rule: r, .. } if *r == rule)
}

#[test]
fn an_answer_outside_its_chunk_is_refused() {
    let wat = fixture("(return (call $answer (i64.const 1048320)))", 4);
    contained("outside", &wat, fuel_only(), broke(Rule::OutsideChunk));
}

#[test]
fn an_answer_in_a_chunk_it_does_not_hold_is_refused() {
    let wat = fixture("(return (i64.shl (i64.const 77) (i64.const 40)))", 4);
    contained("foreign", &wat, fuel_only(), broke(Rule::ForeignChunk));
}

#[test]
fn an_overlapping_answer_is_refused() {
    let wat = fixture("(return (call $answer (i64.const 256)))", 4);
    contained("overlap", &wat, fuel_only(), broke(Rule::Overlap));
}

#[test]
fn a_misaligned_answer_is_refused() {
    let wat = fixture(
        "(return (call $answer (i64.add (global.get $top) (i64.const 8))))",
        4,
    );
    contained("crooked", &wat, fuel_only(), broke(Rule::Misaligned));
}

#[test]
fn a_status_outside_the_abi_is_refused() {
    let wat = fixture("(return (i64.const -77))", 4);
    contained("mumble", &wat, fuel_only(), broke(Rule::BadStatus));
}

#[test]
fn freeing_a_chunk_it_never_had_is_refused() {
    let wat = fixture("(drop (call $up_free (i32.const 99)))", 4);
    contained("stranger", &wat, fuel_only(), broke(Rule::ForeignChunk));
}

#[test]
fn freeing_a_chunk_with_live_allocations_is_refused() {
    let wat = fixture("(drop (call $up_free (global.get $chunk)))", 4);
    contained("yank", &wat, fuel_only(), broke(Rule::ChunkInUse));
}

#[test]
fn a_plugin_that_refuses_a_free_it_owes_is_quarantined_and_loses_nothing() {
    let wat = fixture_with("(nop)", 0, 1, 0, -4);
    let g = gpu(GIB);
    let r = PluginResource::new(wat_module("forgetful", &wat, fuel_only()), upstream(&g));
    let (a, b) = (r.allocate(512, S).unwrap(), r.allocate(512, S).unwrap());
    fill(&g, b, 512, 5);
    r.deallocate(a, 512, S).expect("the caller's free succeeds");
    let breach = r.quarantined().expect("quarantined");
    assert!(broke(Rule::FreeRefused)(&breach.fault), "{breach}");
    assert!(
        breach
            .call
            .starts_with("emm_free(chunk=1, offset=0x0, size=512"),
        "{breach}"
    );
    assert!(holds(&g, b, 512, 5));
    r.deallocate(b, 512, S).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

fn load_error(name: &str, wat: &str) -> SandboxError {
    PluginModule::from_wat(name, wat, fuel_only(), Vec::new()).expect_err(name)
}

#[test]
fn a_wrong_abi_version_is_refused_at_start() {
    let wat = fixture_with("(nop)", 0, 2, 0, 0);
    let g = gpu(GIB);
    let r = PluginResource::new(wat_module("future", &wat, fuel_only()), upstream(&g));
    let e = r.start().expect_err("version 2");
    assert_eq!(
        e.to_string(),
        "plugin future speaks ABI version 2, this host speaks version 1; rebuild it against \
         emm-plugin-sdk for ABI v1"
    );
    let later = r.allocate(64, S).expect_err("down").to_string();
    assert!(later.contains("ABI version 2"), "{later}");
    assert_eq!(g.device_memory_used(DeviceId(0)), 0);
}

#[test]
fn an_init_failure_is_reported_with_its_status() {
    let wat = fixture_with("(nop)", 0, 1, -3, 0);
    let r = PluginResource::new(wat_module("picky", &wat, fuel_only()), upstream(&gpu(GIB)));
    let e = r.start().expect_err("init refused").to_string();
    assert!(e.contains("emm_init returned -3 (INVALID)"), "{e}");
}

#[test]
fn missing_exports_wrong_types_and_foreign_imports_are_refused_at_load() {
    let no_alloc = fixture("(nop)", 0).replace("(export \"emm_alloc\")", "");
    let e = load_error("partial", &no_alloc);
    assert!(
        matches!(
            e,
            SandboxError::MissingExport {
                name: "emm_alloc",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("does not export emm_alloc ((i64, i64, i64) -> i64)"),
        "{e}"
    );
    let no_memory = fixture("(nop)", 0).replace("(export \"memory\")", "");
    assert!(matches!(
        load_error("amnesiac", &no_memory),
        SandboxError::MissingExport { name: "memory", .. }
    ));
    let typed = fixture("(nop)", 0).replace(
        "(func (export \"emm_free\") (param i32 i64 i64 i64)",
        "(func (export \"emm_free\") (param i32 i32 i64 i64)",
    );
    let e = load_error("typo", &typed);
    assert!(
        e.to_string()
            .contains("exports emm_free as (i32, i32, i64, i64) -> i32"),
        "{e}"
    );
    let wasi = fixture("(nop)", 0).replace(
        "(memory (export",
        "(import \"wasi_snapshot_preview1\" \"fd_write\" (func (param i32 i32 i32 i32) (result i32)))\n  (memory (export",
    );
    let e = load_error("posix", &wasi);
    assert!(
        e.to_string()
            .contains("imports wasi_snapshot_preview1::fd_write"),
        "{e}"
    );
    // A host function imported with another type than the host's: refused before it runs,
    // naming the import and both types.
    let crossed = fixture("(nop)", 0).replace(
        "(memory (export",
        "(import \"emm\" \"upstream_free\" (func $crossed (param i64) (result i64)))\n  (memory (export",
    );
    let e = load_error("crossed", &crossed).to_string();
    assert!(
        e.contains("emm::upstream_free") && e.contains("(func (param i32) (result i32))"),
        "{e}"
    );
    let e = load_error("junk", "this is not wasm");
    assert!(matches!(e, SandboxError::Compile { .. }), "{e}");
    let e = PluginModule::from_bytes("junk", b"this is not wasm", fuel_only(), Vec::new())
        .expect_err("junk");
    assert!(matches!(e, SandboxError::NotWasm { .. }), "{e}");
}

/// A 50 MB module: refused before anything is compiled, from bytes and from a file.
#[test]
fn a_50_mb_module_is_refused_before_compiling() {
    let payload = 50_000_000usize;
    let mut bytes = b"\0asm\x01\0\0\0\0".to_vec();
    let mut len = payload + 2; // name length byte + name byte + payload
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        bytes.push(if len == 0 { byte } else { byte | 0x80 });
        if len == 0 {
            break;
        }
    }
    bytes.extend_from_slice(b"\x01x");
    bytes.resize(bytes.len() + payload, 0);
    let e = PluginModule::from_bytes("huge", &bytes, fuel_only(), Vec::new()).expect_err("huge");
    assert_eq!(
        e.to_string(),
        "plugin huge is 47.7 MiB, over the limit of 16.0 MiB; raise \
         PluginLimits::max_module_bytes if it is trusted to be this large"
    );
    let path = std::env::temp_dir().join(format!("emm-huge-{}.wasm", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let e = PluginModule::from_file(&path, fuel_only(), Vec::new()).expect_err("huge file");
    let _ = std::fs::remove_file(&path);
    assert!(matches!(e, SandboxError::ModuleTooLarge { .. }), "{e}");
    // A larger limit lets the same module through to the checks (it has no exports).
    let roomy = fuel_only().max_module_bytes(64 << 20);
    let e = PluginModule::from_bytes("huge", &bytes, roomy, Vec::new()).expect_err("no exports");
    assert!(matches!(e, SandboxError::MissingExport { .. }), "{e}");
}

/// With restarts allowed, a fresh instance serves later requests; the old one's allocations
/// stay valid and its chunk goes back once they are freed.
#[test]
fn a_quarantined_plugin_restarts_when_allowed() {
    let g = gpu(GIB);
    let limits = fuel_only().max_restarts(1);
    let r = PluginResource::new(
        wat_module("phoenix", &fixture("(unreachable)", 3), limits),
        upstream(&g),
    );
    let old: Vec<_> = (0..2u8)
        .map(|i| {
            let p = r.allocate(1000, S).unwrap();
            fill(&g, p, 1000, i);
            p
        })
        .collect();
    assert!(r.allocate(1000, S).is_err(), "the third call traps");
    let fresh = r.allocate(1000, S).expect("a fresh instance serves");
    assert!(!old.contains(&fresh));
    let s = r.stats().unwrap();
    assert_eq!(
        (s.restarts, s.breaches, s.chunks, s.running),
        (1, 1, 2, true)
    );
    for (i, &p) in old.iter().enumerate() {
        assert!(holds(&g, p, 1000, i as u8));
        r.deallocate(p, 1000, S).unwrap();
    }
    assert_eq!(r.stats().unwrap().chunks, 1, "the orphaned chunk went back");
    r.deallocate(fresh, 1000, S).unwrap();
    assert!(
        r.logs().iter().any(|l| l.message == "hostile fixture"),
        "{:?}",
        r.logs()
    );
}

/// With a fallback, requests after the quarantine are served by it, and freed back to it.
#[test]
fn a_quarantined_plugin_falls_back_when_configured() {
    let g = gpu(GIB);
    let fallback: Arc<dyn DeviceMemoryResource> =
        Arc::new(CudaResource::<SimDriver>::new(Arc::clone(&g)));
    let r = PluginResource::new(
        wat_module("flaky", &fixture("(unreachable)", 2), fuel_only()),
        upstream(&g),
    )
    .with_fallback(fallback);
    let kept = r.allocate(1000, S).unwrap();
    let e = r.allocate(1000, S).unwrap_err();
    assert!(matches!(e, MrError::InvalidArgument { .. }), "{e}");
    let served = r.allocate(3000, S).expect("the fallback serves");
    fill(&g, served, 3000, 1);
    assert!(holds(&g, served, 3000, 1));
    r.deallocate(served, 3000, S).unwrap();
    r.deallocate(kept, 1000, S).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

// ---- Load and hostile modules ----

/// A module of `funcs` functions of type `() -> ()`, each declaring `locals` i64 locals and
/// a body of about `body` bytes of `nop`s, as a wasm binary (no exports: a module that gets
/// past the budgets is then refused for its missing exports).
fn generated(funcs: u32, locals: u32, body: usize) -> Vec<u8> {
    fn leb(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(body.len() as u64, out);
        out.extend_from_slice(body);
    }
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut m);
    let mut f = Vec::new();
    leb(u64::from(funcs), &mut f);
    f.resize(f.len() + funcs as usize, 0);
    section(3, &f, &mut m);
    let mut code = Vec::new();
    leb(u64::from(funcs), &mut code);
    let mut one = Vec::new();
    if locals > 0 {
        one.push(1);
        leb(u64::from(locals), &mut one);
        one.push(0x7e);
    } else {
        one.push(0);
    }
    one.resize(one.len() + body, 0x01);
    one.push(0x0b);
    for _ in 0..funcs {
        leb(one.len() as u64, &mut code);
        code.extend_from_slice(&one);
    }
    section(10, &code, &mut m);
    m
}

fn refused_before_compiling(name: &str, bytes: &[u8], limits: PluginLimits, names: &str) {
    let t = Instant::now();
    let e = PluginModule::from_bytes(name, bytes, limits, Vec::new()).expect_err(name);
    assert!(matches!(e, SandboxError::OverBudget { .. }), "{name}: {e}");
    assert!(e.to_string().contains(names), "{name}: {e}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{name}: {:?}",
        t.elapsed()
    );
}

/// A module of many huge functions compiled for over a minute (and then passed): now every
/// compile budget refuses its kind of bomb before anything is compiled, naming the limit.
#[test]
fn compile_bombs_are_refused_before_compiling() {
    // 30 functions of 500 KB: 15 MB, under the module size limit.
    let bomb = generated(30, 0, 500_000);
    refused_before_compiling("bomb", &bomb, fuel_only(), "PluginLimits::max_code_bytes");
    let one = generated(1, 0, 100_000);
    refused_before_compiling(
        "long",
        &one,
        fuel_only(),
        "PluginLimits::max_function_bytes",
    );
    let many = generated(20_000, 0, 1);
    refused_before_compiling("many", &many, fuel_only(), "PluginLimits::max_functions");
    let locals = generated(1, 5_000, 10);
    refused_before_compiling("locals", &locals, fuel_only(), "PluginLimits::max_locals");
    // Within the budgets it is compiled (and then refused for its missing exports).
    let e = PluginModule::from_bytes("small", &generated(10, 10, 100), fuel_only(), Vec::new())
        .expect_err("no exports");
    assert!(matches!(e, SandboxError::MissingExport { .. }), "{e}");
}

#[test]
fn compiling_past_the_deadline_is_refused() {
    let bytes = wat_to_wasm(&fixture("(nop)", 0)).unwrap();
    let limits = fuel_only().compile_deadline(Some(Duration::from_nanos(1)));
    let e = PluginModule::from_bytes("slow", &bytes, limits, Vec::new()).expect_err("deadline");
    assert!(matches!(e, SandboxError::CompileDeadline { .. }), "{e}");
    assert!(
        e.to_string().contains("PluginLimits::compile_deadline"),
        "{e}"
    );
}

/// A plugin that asks for 1-byte chunks without end gets out of memory at the cap, with a
/// log line naming it; it is not quarantined, and the host keeps only `max_chunks` chunks.
#[test]
fn an_upstream_bomb_stops_at_the_chunk_cap() {
    let bomb = "(loop $l (br_if $l (i32.ge_s (call $up_alloc (i64.const 1) (i64.const 256)) \
                (i32.const 0)))) (return (i64.const -1))";
    let g = gpu(GIB);
    let limits = fuel_only().max_chunks(100);
    let r = PluginResource::new(wat_module("bomb", &fixture(bomb, 4), limits), upstream(&g));
    let good: Vec<DevicePtr> = (0..3u8)
        .map(|i| {
            let p = r.allocate(4096, S).unwrap();
            fill(&g, p, 4096, i);
            p
        })
        .collect();
    let t = Instant::now();
    let e = r
        .allocate(4096, S)
        .expect_err("the bomb answers out of memory");
    assert!(matches!(e, MrError::OutOfMemory { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(r.quarantined().is_none(), "out of memory is not a breach");
    assert_eq!(r.stats().unwrap().chunks, 100, "held at the cap");
    assert!(
        r.logs()
            .iter()
            .any(|l| l.message.contains("PluginLimits::max_chunks")),
        "{:?}",
        r.logs()
    );
    for (i, &p) in good.iter().enumerate() {
        assert!(holds(&g, p, 4096, i as u8), "allocation {i} corrupted");
        r.deallocate(p, 4096, S).unwrap();
    }
}

/// A plugin that logs in a loop keeps a few lines per call (the host's time on them is
/// capped), and runs out of fuel; its earlier allocations are intact.
#[test]
fn a_log_flood_keeps_a_few_lines_per_call() {
    let flood = "(loop $l (call $log (i32.const 2) (i32.const 0) (i32.const 15)) (br $l))";
    let limits = fuel_only().fuel_per_call(Some(2_000_000));
    let g = gpu(GIB);
    let r = PluginResource::new(
        wat_module("chatty", &fixture(flood, 2), limits),
        upstream(&g),
    );
    let kept = r.allocate(4096, S).unwrap();
    fill(&g, kept, 4096, 9);
    let t = Instant::now();
    assert!(r.allocate(4096, S).is_err(), "out of fuel");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(matches!(
        r.quarantined().map(|b| b.fault),
        Some(PluginFault::OutOfFuel { .. })
    ));
    let logs = r.logs();
    // One line from the first call, 16 of the flood, and the host's note.
    assert!(logs.len() <= 1 + 16 + 1, "{}", logs.len());
    assert!(
        logs.iter()
            .any(|l| l.message.contains("PluginLimits::max_log_lines_per_call")),
        "{logs:?}"
    );
    assert!(holds(&g, kept, 4096, 9));
    r.deallocate(kept, 4096, S).unwrap();
}

/// A log range that runs past guest memory is refused as a whole, even though the host
/// keeps only its first KiB.
#[test]
fn a_log_range_is_checked_before_it_is_cut() {
    let wat = fixture(
        "(call $log (i32.const 2) (i32.const 0) (i32.const 1000000))",
        4,
    );
    contained(
        "longwinded",
        &wat,
        fuel_only(),
        broke(Rule::BadGuestPointer),
    );
}

#[test]
fn a_64_bit_memory_is_refused() {
    let wat = fixture("(nop)", 0).replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") i64 1)",
    );
    let e = PluginModule::from_wat("wide", &wat, fuel_only(), Vec::new()).expect_err("memory64");
    assert!(matches!(e, SandboxError::OverBudget { .. }), "{e}");
    assert!(e.to_string().contains("64-bit memory"), "{e}");
}

/// A memory that starts larger than the cap is refused at load, naming emm's limit rather
/// than the pooling allocator's.
#[test]
fn a_memory_over_the_cap_names_emms_limit() {
    let wat = fixture("(nop)", 0).replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") 2000)",
    );
    let e = PluginModule::from_wat("vast", &wat, fuel_only(), Vec::new()).expect_err("too big");
    let text = e.to_string();
    assert!(text.contains("PluginLimits::memory_cap"), "{text}");
    assert!(!text.contains("pool"), "{text}");
}

#[test]
fn compile_errors_keep_their_whole_cause_chain() {
    let wat = fixture("(nop)", 0).replace(
        "(func (export \"emm_abi_version\") (result i32) (i32.const 1))",
        "(func (export \"emm_abi_version\") (result i32) (i64.const 1))",
    );
    let e = PluginModule::from_wat("typo", &wat, fuel_only(), Vec::new()).expect_err("invalid");
    assert!(matches!(e, SandboxError::Compile { .. }), "{e}");
    assert!(e.to_string().contains("type mismatch"), "{e}");
}

#[test]
fn a_text_file_named_wasm_is_refused_not_parsed() {
    let path = std::env::temp_dir().join(format!("emm-text-{}.wasm", std::process::id()));
    std::fs::write(&path, fixture("(nop)", 0)).unwrap();
    let e = PluginModule::from_file(&path, fuel_only(), Vec::new()).expect_err("text");
    let _ = std::fs::remove_file(&path);
    assert!(matches!(e, SandboxError::NotWasm { .. }), "{e}");
    assert!(e.to_string().contains("WAT"), "{e}");
}

/// Loading `path` as a plugin, in a thread: the error, or `None` when it did not return
/// within 10 s (it blocked).
fn load_within_10s(path: &std::path::Path) -> Option<SandboxError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(PluginModule::from_file(&path, fuel_only(), Vec::new()).err());
    });
    rx.recv_timeout(Duration::from_secs(10)).ok().flatten()
}

/// A FIFO never blocks the load and `/dev/zero` is never read: neither is a regular file.
#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_is_refused_as_a_plugin_without_reading_it() {
    let fifo = std::env::temp_dir().join(format!("emm-fifo-{}.wasm", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let e = load_within_10s(&fifo).expect("the FIFO blocked the load");
    let _ = std::fs::remove_file(&fifo);
    assert!(e.to_string().contains("FIFO"), "{e}");
    let e = load_within_10s(std::path::Path::new("/dev/zero")).expect("/dev/zero was read");
    assert!(e.to_string().contains("character device"), "{e}");
}

/// The known-bad plugin `cargo xtask hardware` ships is this fixture as a bump allocator,
/// compiled; `EMM_BLESS=1` writes it again.
#[test]
fn the_known_bad_binary_is_the_fixture_compiled() {
    let wasm = wat_to_wasm(&fixture("(nop)", 0)).unwrap();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/known_bad.wasm");
    if std::env::var_os("EMM_BLESS").is_some() {
        std::fs::write(&path, &wasm).unwrap();
    }
    assert_eq!(
        std::fs::read(&path).ok(),
        Some(wasm),
        "{} is stale: run EMM_BLESS=1 cargo test -p emm-sandbox --test sandbox hostile::known_bad",
        path.display()
    );
}
