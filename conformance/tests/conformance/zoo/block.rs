//! [`BlockResource`]: a small suballocator for the zoo — one 64 MiB chunk cut into 256-byte
//! rounded blocks, exact-size free lists that remember the stream each block was freed on,
//! and direct driver allocations for large requests. Correct unless a [`Flaw`] is set.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use emm_core::attribution::CallerScope;
use emm_core::mr::{DeviceMemoryResource, MrError, MrResult};
use emm_core::{DevicePtr, Driver, DriverResult, MemInfo, StreamId};

/// Bytes of the chunk small blocks come from.
pub const CHUNK: u64 = 64 << 20;
/// Requests above this go straight to the driver.
const LARGE: u64 = CHUNK / 4;
const TAG: &str = "BlockResource";

/// The one thing a broken variant gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// None: a correct resource.
    None,
    /// The bump pointer advances by half a block: neighbours overlap.
    HalfStride,
    /// A block freed on one stream is handed to another without an event wait.
    NoStreamWait,
    /// A freed block is scrubbed late, at the next free, after it may have been reused.
    ScrubLate,
    /// A large request the driver refuses is refused at once: the empty chunk is kept, not
    /// given back to make room (a reset still gives it back).
    KeepsChunkOnOutOfMemory,
}

struct Free {
    ptr: DevicePtr,
    size: u64,
    stream: StreamId,
}

#[derive(Default)]
struct State {
    chunk: Option<DevicePtr>,
    bump: u64,
    free: Vec<Free>,
    live: BTreeMap<u64, u64>,
    large: BTreeMap<u64, u64>,
    scrub: Option<DevicePtr>,
}

/// A suballocator over one chunk (see the module doc).
pub struct BlockResource {
    driver: Arc<dyn Driver>,
    flaw: Flaw,
    state: Mutex<State>,
}

impl BlockResource {
    pub fn new(driver: Arc<dyn Driver>, flaw: Flaw) -> Self {
        BlockResource {
            driver,
            flaw,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the chunk back to the driver when no block of it is live (a reset).
    pub fn release_empty(&self) -> MrResult<()> {
        let mut st = self.lock();
        if !st.live.is_empty() {
            return Ok(());
        }
        if let Some(c) = st.chunk.take() {
            let _s = CallerScope::enter(TAG);
            self.driver.mem_free(c)?;
        }
        st.bump = 0;
        st.free.clear();
        st.scrub = None;
        Ok(())
    }

    /// Forgets every block, live ones included (what a broken `initialize` does).
    pub fn wipe(&self) {
        let mut st = self.lock();
        st.bump = 0;
        st.free.clear();
        st.live.clear();
    }

    fn wait(&self, from: StreamId, to: StreamId) -> MrResult<()> {
        let d = &self.driver;
        let e = d.event_create()?;
        let r = d
            .event_record(e, from)
            .and_then(|()| d.stream_wait_event(to, e));
        d.event_destroy(e).and(r).map_err(MrError::from)
    }

    fn oom(&self, bytes: usize, available: u64) -> MrError {
        MrError::OutOfMemory {
            resource: TAG,
            requested: bytes as u64,
            available: Some(available),
        }
    }

    /// Records the driver allocation `got` for `bytes` (`size` rounded) as a large one; the
    /// driver's out of memory is the resource's.
    fn large(&self, bytes: usize, size: u64, got: DriverResult<DevicePtr>) -> MrResult<DevicePtr> {
        let p = got.map_err(|e| {
            if e.is_out_of_memory() {
                self.oom(bytes, 0)
            } else {
                e.into()
            }
        })?;
        self.lock().large.insert(p.0, size);
        Ok(p)
    }
}

impl DeviceMemoryResource for BlockResource {
    fn name(&self) -> &'static str {
        TAG
    }

    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let _s = CallerScope::enter(TAG);
        let size = (bytes as u64).div_ceil(256).saturating_mul(256);
        if size > LARGE {
            let got = match self.driver.mem_alloc(bytes) {
                Err(e) if e.is_out_of_memory() && self.flaw != Flaw::KeepsChunkOnOutOfMemory => {
                    self.release_empty()?;
                    self.driver.mem_alloc(bytes)
                }
                other => other,
            };
            return self.large(bytes, size, got);
        }
        let mut st = self.lock();
        let same = st
            .free
            .iter()
            .position(|f| f.size == size && f.stream == stream);
        let any = same.or_else(|| st.free.iter().position(|f| f.size == size));
        if let Some(i) = any {
            let f = st.free.swap_remove(i);
            drop(st);
            if f.stream != stream && self.flaw != Flaw::NoStreamWait {
                self.wait(f.stream, stream)?;
            }
            self.lock().live.insert(f.ptr.0, size);
            return Ok(f.ptr);
        }
        let base = match st.chunk {
            Some(c) => c,
            None => *st.chunk.insert(self.driver.mem_alloc(CHUNK as usize)?),
        };
        if st.bump + size > CHUNK {
            // The chunk is full: ask the driver, as for a large request (refusing without
            // asking would be a dishonest out of memory).
            drop(st);
            return self.large(bytes, size, self.driver.mem_alloc(bytes));
        }
        let p = base.offset(st.bump);
        st.bump += if self.flaw == Flaw::HalfStride {
            (size / 2) / 256 * 256
        } else {
            size
        };
        st.live.insert(p.0, size);
        Ok(p)
    }

    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let _s = CallerScope::enter(TAG);
        let mut st = self.lock();
        if st.large.remove(&ptr.0).is_some() {
            drop(st);
            return self.driver.mem_free(ptr).map_err(MrError::from);
        }
        let Some(size) = st.live.remove(&ptr.0) else {
            return Err(MrError::InvalidFree {
                resource: TAG,
                ptr,
                bytes: bytes as u64,
                reason: "not a live block of this resource".into(),
            });
        };
        if self.flaw == Flaw::ScrubLate {
            if let Some(old) = st.scrub.replace(ptr) {
                // The flaw: scrubbing a block freed earlier, which may be someone's again.
                self.driver.memset_d8(old, 0xdd, 16, None)?;
            }
        }
        st.free.push(Free { ptr, size, stream });
        Ok(())
    }

    fn memory_info(&self) -> Option<MemInfo> {
        let st = self.lock();
        let free_blocks: u64 = st.free.iter().map(|f| f.size).sum();
        Some(MemInfo {
            free: CHUNK - st.bump + free_blocks,
            total: CHUNK,
        })
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

impl Drop for BlockResource {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let _s = CallerScope::enter(TAG);
        if let Some(c) = st.chunk.take() {
            let _ = self.driver.mem_free(c);
        }
        for &p in st.large.keys() {
            let _ = self.driver.mem_free(DevicePtr(p));
        }
    }
}
