//! The wasm32 side of `export_plugin!`: host imports, the policy's slot, the config buffer,
//! the heap and the panic handler. Not for direct use.

use alloc::vec::Vec;
use core::cell::UnsafeCell;

use crate::{abi, Answer, Chunk, Config, Error, Level, Policy, Request, Upstream};

#[link(wasm_import_module = "emm")]
extern "C" {
    #[link_name = "upstream_alloc"]
    fn host_upstream_alloc(size: i64, align: i64) -> i32;
    #[link_name = "upstream_free"]
    fn host_upstream_free(handle: i32) -> i32;
    #[link_name = "log"]
    fn host_log(level: i32, ptr: i32, len: i32);
    #[link_name = "stream_order"]
    fn host_stream_order(from: i64, to: i64) -> i32;
}

#[global_allocator]
static HEAP: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // A trap: the host quarantines the plugin and names the call.
    core::arch::wasm32::unreachable()
}

/// A value only ever touched from the one wasm thread.
pub struct Slot<T>(UnsafeCell<Option<T>>);

// SAFETY: wasm32-unknown-unknown without the `atomics` feature runs one thread; the host
// calls a plugin one call at a time, so no two references to the contents coexist.
unsafe impl<T> Sync for Slot<T> {}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot::new()
    }
}

impl<T> Slot<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Slot(UnsafeCell::new(None))
    }

    /// The contents. Each export takes it once, for the length of the call.
    #[allow(clippy::mut_from_ref)]
    fn get(&self) -> &mut Option<T> {
        // SAFETY: one thread, one call at a time, and no export holds the reference past its
        // return or calls another export (see the Sync impl).
        unsafe { &mut *self.0.get() }
    }
}

static CONFIG: Slot<Vec<u8>> = Slot::new();
static STATS: Slot<[u64; 4]> = Slot::new();

/// The host's chunks, through the imports.
struct Host;

impl Upstream for Host {
    fn alloc_chunk(&mut self, size: u64, align: u64) -> Result<Chunk, Error> {
        let (Ok(s), Ok(a)) = (i64::try_from(size), i64::try_from(align)) else {
            return Err(Error::Invalid);
        };
        // SAFETY: a host import taking plain numbers.
        let h = unsafe { host_upstream_alloc(s, a) };
        match u32::try_from(h) {
            Ok(handle) if handle > 0 => Ok(Chunk { handle, size }),
            _ => Err(Error::from_status(h)),
        }
    }

    fn free_chunk(&mut self, handle: u32) -> Result<(), Error> {
        let h = i32::try_from(handle).map_err(|_| Error::Invalid)?;
        // SAFETY: a host import taking a plain number.
        match unsafe { host_upstream_free(h) } {
            abi::STATUS_OK => Ok(()),
            s => Err(Error::from_status(s)),
        }
    }

    fn order_streams(&mut self, from: u64, to: u64) -> bool {
        let (Ok(f), Ok(t)) = (i64::try_from(from), i64::try_from(to)) else {
            return false;
        };
        // SAFETY: a host import taking plain numbers.
        unsafe { host_stream_order(f, t) == abi::STATUS_OK }
    }

    fn log(&mut self, level: Level, message: &str) {
        // SAFETY: the host reads `len` bytes at `ptr` of our memory, which `message` holds.
        unsafe { host_log(level as i32, message.as_ptr() as i32, message.len() as i32) }
    }
}

fn status(r: Result<(), Error>) -> i32 {
    match r {
        Ok(()) => abi::STATUS_OK,
        Err(e) => e.status(),
    }
}

pub fn buffer(len: i32) -> i32 {
    let Ok(len) = usize::try_from(len) else {
        return 0;
    };
    let buf = CONFIG.get().insert(alloc::vec![0; len]);
    buf.as_mut_ptr() as i32
}

pub fn init<P: Policy>(slot: &Slot<P>, _ptr: i32, len: i32) -> i32 {
    let config = CONFIG.get().take().unwrap_or_default();
    let used = usize::try_from(len).unwrap_or(0).min(config.len());
    match P::init(&Config::new(&config[..used])) {
        Ok(p) => {
            *slot.get() = Some(p);
            abi::STATUS_OK
        }
        Err(e) => e.status(),
    }
}

pub fn alloc<P: Policy>(slot: &Slot<P>, size: i64, align: i64, stream: i64) -> i64 {
    let Some(p) = slot.get() else {
        return i64::from(abi::STATUS_INVALID);
    };
    let req = Request {
        size: size as u64,
        align: align as u64,
        stream: stream as u64,
    };
    match p.alloc(&mut Host, req) {
        Ok(a) => a.key() as i64,
        Err(e) => i64::from(e.status()),
    }
}

pub fn free<P: Policy>(slot: &Slot<P>, chunk: i32, offset: i64, size: i64, stream: i64) -> i32 {
    let Some(p) = slot.get() else {
        return abi::STATUS_INVALID;
    };
    let answer = Answer {
        chunk: chunk as u32,
        offset: offset as u64,
    };
    status(p.free(&mut Host, answer, size as u64, stream as u64))
}

pub fn reset<P: Policy>(slot: &Slot<P>) -> i32 {
    slot.get()
        .as_mut()
        .map_or(abi::STATUS_INVALID, |p| status(p.reset(&mut Host)))
}

pub fn trim<P: Policy>(slot: &Slot<P>, keep: i64) -> i32 {
    slot.get().as_mut().map_or(abi::STATUS_INVALID, |p| {
        status(p.trim(&mut Host, keep.max(0) as u64))
    })
}

pub fn stats<P: Policy>(slot: &Slot<P>) -> i32 {
    let Some(p) = slot.get() else {
        return abi::STATUS_INVALID;
    };
    let s = p.stats();
    let words = STATS
        .get()
        .insert([s.free_bytes, s.free_blocks, s.largest_free, s.held_bytes]);
    words.as_ptr() as i32
}

pub fn defer_enter<P: Policy>(slot: &Slot<P>) {
    if let Some(p) = slot.get() {
        p.defer_enter();
    }
}

pub fn defer_exit<P: Policy>(slot: &Slot<P>) -> i32 {
    slot.get()
        .as_mut()
        .map_or(abi::STATUS_INVALID, |p| status(p.defer_exit(&mut Host)))
}
