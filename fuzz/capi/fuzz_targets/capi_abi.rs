//! The C ABI entry points with arbitrary arguments, on the simulated GPU (`EMM_BACKEND=sim`):
//! sizes (0, huge, negative for PyTorch's), device ordinals, streams (NULL, the per-thread
//! default, made ones, destroyed ones), pointers emm gave, stale or never gave, buffer handles,
//! offsets and lengths, manager specs and JSON options. Every call returns a status (never a
//! panic caught at the boundary: `EMM_STATUS_PANIC` fails the target), an error always comes
//! with a message, and what emm gave is freed by the end of each input. Out-pointers are always
//! valid (a NULL one is tried too); host buffers always have the length passed, as the ABI's
//! safety sections require.
#![no_main]

use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr;

use arbitrary::Arbitrary;
use emm::*;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Size {
    Small(u16),
    Mib(u8),
    Raw(u64),
}

impl Size {
    fn bytes(self) -> usize {
        match self {
            Size::Small(n) => usize::from(n),
            Size::Mib(n) => usize::from(n % 32) << 20,
            Size::Raw(n) => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Pick {
    Live(u8),
    Raw(u64),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc(Size, i8, u8),
    Free(Pick, u8),
    StreamCreate(i8),
    StreamDestroy(u8, bool),
    StreamSync(u8),
    ManagedAlloc(Size, i8, bool),
    HostAlloc(Size, i8, u8),
    TorchAlloc(i64, i8, u8),
    TorchFree(Pick, i8, u8),
    BufferNew(Size, i8, bool),
    BufferCopyIn(Pick, u32, u16),
    BufferCopyOut(Pick, u32, u16),
    BufferResize(Pick, Size),
    BufferInfo(Pick),
    BufferFree(Pick),
    Info(i8, bool),
    Reset(i8),
    DeferBegin(i8),
    DeferEnd(Pick),
    Stats,
    StatusName(i32),
    Configure(String),
    Reinitialize(String),
    IpcHandle(Pick),
}

#[derive(Default)]
struct Held {
    ptrs: Vec<*mut c_void>,
    streams: Vec<cudaStream_t>,
    buffers: Vec<u64>,
    tokens: Vec<u64>,
}

fn pick<T: Copy>(p: Pick, live: &[T], raw: impl Fn(u64) -> T) -> T {
    match p {
        Pick::Live(i) if !live.is_empty() => live[usize::from(i) % live.len()],
        Pick::Live(i) => raw(u64::from(i)),
        Pick::Raw(n) => raw(n),
    }
}

/// NULL, the per-thread default stream (2), or a made one: what the ABI's safety sections allow.
fn stream(i: u8, h: &Held) -> cudaStream_t {
    match i % 4 {
        0 => ptr::null_mut(),
        1 => 2usize as cudaStream_t,
        _ if !h.streams.is_empty() => h.streams[usize::from(i) % h.streams.len()],
        _ => ptr::null_mut(),
    }
}

/// A status is one the ABI defines, never a caught panic, and an error has a message.
fn check(what: &str, s: EmmStatus) -> bool {
    assert!(s != EmmStatus::Panic, "{what} panicked inside emm: {}", message());
    if s != EmmStatus::Ok {
        assert!(!message().is_empty(), "{what} failed with {s:?} and no message");
    }
    s == EmmStatus::Ok
}

fn message() -> String {
    let m = emm_last_error_message();
    if m.is_null() {
        return String::new();
    }
    // SAFETY: emm returns a NUL-terminated string valid until the thread's next call.
    unsafe { CStr::from_ptr(m) }.to_string_lossy().into_owned()
}

fn run(ops: &[Op], h: &mut Held) {
    for op in ops {
        // SAFETY (every call below): out-pointers point to locals; host buffers have the length
        // passed; streams are NULL, 2 or made by emm_stream_create (see `stream`).
        unsafe {
            match *op {
                Op::Alloc(s, d, st) => {
                    let mut p = ptr::null_mut();
                    if check("emm_alloc", emm_alloc(s.bytes(), c_int::from(d), stream(st, h), &mut p)) {
                        h.ptrs.push(p);
                    }
                }
                Op::Free(p, st) => {
                    let at = pick(p, &h.ptrs, |n| n as usize as *mut c_void);
                    if check("emm_free", emm_free(at, stream(st, h))) {
                        h.ptrs.retain(|&q| q != at);
                    }
                }
                Op::StreamCreate(d) => {
                    let mut s = ptr::null_mut();
                    if check("emm_stream_create", emm_stream_create(c_int::from(d), &mut s)) {
                        h.streams.push(s);
                    }
                }
                Op::StreamDestroy(i, forget) if !h.streams.is_empty() => {
                    let j = usize::from(i) % h.streams.len();
                    let s = h.streams[j];
                    let r = if forget {
                        emm_stream_forget(s)
                    } else {
                        emm_stream_destroy(0, s)
                    };
                    // Destroyed or forgotten, it is no longer one the ABI lets us pass.
                    check("emm_stream_destroy", r);
                    h.streams.swap_remove(j);
                }
                Op::StreamDestroy(..) => {}
                Op::StreamSync(i) => {
                    check("emm_stream_synchronize", emm_stream_synchronize(0, stream(i, h)));
                }
                Op::ManagedAlloc(s, d, g) => {
                    let mut p = ptr::null_mut();
                    if check("emm_managed_alloc", emm_managed_alloc(s.bytes(), c_int::from(d), c_int::from(g), &mut p)) {
                        h.ptrs.push(p);
                    }
                }
                Op::HostAlloc(s, d, f) => {
                    let (mut hp, mut dp) = (ptr::null_mut(), ptr::null_mut());
                    if check("emm_host_alloc", emm_host_alloc(s.bytes().min(1 << 26), c_int::from(d), u32::from(f), &mut hp, &mut dp)) {
                        h.ptrs.push(hp);
                    }
                }
                Op::TorchAlloc(n, d, st) => {
                    let p = emm_torch_alloc(n as isize, c_int::from(d), stream(st, h));
                    if !p.is_null() {
                        h.ptrs.push(p);
                    }
                }
                Op::TorchFree(p, d, st) => {
                    let at = pick(p, &h.ptrs, |n| n as usize as *mut c_void);
                    emm_clear_last_error();
                    emm_torch_free(at, 0, c_int::from(d), stream(st, h));
                    // PyTorch's free returns nothing: the thread's last error says how it went.
                    if check("emm_torch_free", emm_last_error_code()) {
                        h.ptrs.retain(|&q| q != at);
                    }
                }
                Op::BufferNew(s, d, with_data) => {
                    let n = s.bytes().min(1 << 22);
                    let data = vec![7u8; if with_data { n } else { 0 }];
                    let src = if with_data { data.as_ptr().cast() } else { ptr::null() };
                    let mut handle = 0u64;
                    if check("emm_device_buffer_new", emm_device_buffer_new(src, n, c_int::from(d), ptr::null_mut(), &mut handle)) {
                        h.buffers.push(handle);
                    }
                }
                Op::BufferCopyIn(b, off, len) => {
                    let data = vec![3u8; usize::from(len)];
                    let handle = pick(b, &h.buffers, |n| n);
                    check("emm_device_buffer_copy_from_host", emm_device_buffer_copy_from_host(handle, off as usize, data.as_ptr().cast(), data.len()));
                }
                Op::BufferCopyOut(b, off, len) => {
                    let mut data = vec![0u8; usize::from(len)];
                    let handle = pick(b, &h.buffers, |n| n);
                    check("emm_device_buffer_copy_to_host", emm_device_buffer_copy_to_host(handle, off as usize, data.as_mut_ptr().cast(), data.len(), ptr::null_mut()));
                }
                Op::BufferResize(b, s) => {
                    let handle = pick(b, &h.buffers, |n| n);
                    check("emm_device_buffer_resize", emm_device_buffer_resize(handle, s.bytes().min(1 << 24), ptr::null_mut()));
                }
                Op::BufferInfo(b) => {
                    let (mut size, mut p) = (0usize, ptr::null_mut());
                    check("emm_device_buffer_info", emm_device_buffer_info(pick(b, &h.buffers, |n| n), &mut size, &mut p));
                }
                Op::BufferFree(b) => {
                    let handle = pick(b, &h.buffers, |n| n);
                    if check("emm_device_buffer_free", emm_device_buffer_free(handle)) {
                        h.buffers.retain(|&x| x != handle);
                    }
                }
                Op::Info(d, null) => {
                    let (mut free, mut total) = (0usize, 0usize);
                    let fp: *mut usize = if null { ptr::null_mut() } else { &mut free };
                    if check("emm_memory_info", emm_memory_info(c_int::from(d), fp, &mut total)) {
                        assert!(free <= total, "free {free} > total {total}");
                    }
                }
                Op::Reset(d) => {
                    check("emm_reset", emm_reset(c_int::from(d)));
                }
                Op::DeferBegin(d) => {
                    let mut t = 0u64;
                    if check("emm_defer_cleanup_begin", emm_defer_cleanup_begin(c_int::from(d), &mut t)) {
                        h.tokens.push(t);
                    }
                }
                Op::DeferEnd(p) => {
                    let t = pick(p, &h.tokens, |n| n);
                    if check("emm_defer_cleanup_end", emm_defer_cleanup_end(t)) {
                        h.tokens.retain(|&x| x != t);
                    }
                }
                Op::Stats => {
                    let s = emm_stats_json();
                    if !s.is_null() {
                        emm_string_free(s);
                    }
                }
                Op::StatusName(n) => {
                    let s = emm_status_name(n);
                    assert!(!s.is_null());
                }
                Op::Configure(ref spec) => {
                    // Only while nothing is live: a new manager for live memory is refused anyway.
                    if let Ok(c) = CString::new(spec.as_str()) {
                        check("emm_configure", emm_configure(c.as_ptr()));
                    }
                }
                Op::Reinitialize(ref json) => {
                    if let Ok(c) = CString::new(json.as_str()) {
                        check("emm_reinitialize", emm_reinitialize(c.as_ptr()));
                    }
                }
                Op::IpcHandle(p) => {
                    let at = pick(p, &h.ptrs, |n| n as usize as *mut c_void);
                    let mut handle = [0u8; EMM_IPC_HANDLE_SIZE];
                    let mut offset = 0usize;
                    check("emm_ipc_get_handle", emm_ipc_get_handle(at, handle.len(), handle.as_mut_ptr(), &mut offset));
                }
            }
        }
    }
}

/// Frees everything the input made, so the next input starts from nothing live.
fn release(h: Held) {
    // SAFETY: as in `run`.
    unsafe {
        for t in h.tokens {
            check("emm_defer_cleanup_end", emm_defer_cleanup_end(t));
        }
        for b in h.buffers {
            check("emm_device_buffer_free", emm_device_buffer_free(b));
        }
        for p in h.ptrs {
            check("emm_free", emm_free(p, ptr::null_mut()));
        }
        for s in h.streams {
            check("emm_stream_destroy", emm_stream_destroy(0, s));
        }
    }
}

fuzz_target!(
    init: {
        // SAFETY: set once, before any thread reads the environment.
        unsafe { std::env::set_var("EMM_BACKEND", "sim") };
    },
    |ops: Vec<Op>| {
        if ops.len() > 128 {
            return;
        }
        let mut h = Held::default();
        run(&ops, &mut h);
        release(h);
    }
);
