//! [`Bug`] and [`Broken`]: a correct manager with one thing broken, one bug class of the
//! issue each, and [`ZooFactory`], which makes them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use emm_core::contract::{
    EmmError, EmmResult, Finalizer, IpcHandle, ManagerFactory, ManagerTarget, MemoryInfo,
    MemoryManager, MemoryPointer, INTERFACE_VERSION,
};
use emm_core::managers::{DefaultManager, HostOnlyManager};
use emm_core::{ContextId, DevicePtr, Driver};

use super::block::{BlockResource, Flaw};

/// One class of contract bug the suite must catch, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// A correct manager over [`BlockResource`] (the control: it must pass everything).
    None,
    OverlappingAllocations,
    MisalignedPointers,
    LeakAtReset,
    FinalizerRunTwice,
    WrongIpcOffset,
    CrashOnResetBeforeInitialize,
    InitializeWipesState,
    CrossStreamReuseWithoutWaiting,
    PanicInsteadOfOutOfMemory,
    MemoryInfoFreeAboveTotal,
    PointerOutsideDeviceMemory,
    WriteAfterFreeThroughRecycledBlock,
    AllocationBehindTheManagersBack,
    /// Answers out of memory for a request over 1 MiB while it has anything live, without
    /// asking the driver (a retry after every allocation is dropped succeeds).
    OutOfMemoryWithoutAsking,
    /// Keeps its empty chunk when the driver refuses a large request, so that after every
    /// allocation is dropped the same request still fails (a reset gives the chunk back).
    KeepsMemoryOnOutOfMemory,
}

impl Bug {
    /// Every bug class, in a fixed order.
    pub const ALL: [Bug; 15] = [
        Bug::OverlappingAllocations,
        Bug::MisalignedPointers,
        Bug::LeakAtReset,
        Bug::FinalizerRunTwice,
        Bug::WrongIpcOffset,
        Bug::CrashOnResetBeforeInitialize,
        Bug::InitializeWipesState,
        Bug::CrossStreamReuseWithoutWaiting,
        Bug::PanicInsteadOfOutOfMemory,
        Bug::MemoryInfoFreeAboveTotal,
        Bug::PointerOutsideDeviceMemory,
        Bug::WriteAfterFreeThroughRecycledBlock,
        Bug::AllocationBehindTheManagersBack,
        Bug::OutOfMemoryWithoutAsking,
        Bug::KeepsMemoryOnOutOfMemory,
    ];

    /// Whether the bug lives in a [`BlockResource`] under a `HostOnlyManager`, rather than in
    /// a wrapper of `DefaultManager`.
    fn on_blocks(self) -> Option<Flaw> {
        match self {
            Bug::None | Bug::WrongIpcOffset | Bug::InitializeWipesState => Some(Flaw::None),
            Bug::OverlappingAllocations => Some(Flaw::HalfStride),
            Bug::CrossStreamReuseWithoutWaiting => Some(Flaw::NoStreamWait),
            Bug::WriteAfterFreeThroughRecycledBlock => Some(Flaw::ScrubLate),
            Bug::KeepsMemoryOnOutOfMemory => Some(Flaw::KeepsChunkOnOutOfMemory),
            _ => None,
        }
    }
}

/// Makes a [`Broken`] manager with `bug`.
pub struct ZooFactory(pub Bug);

impl ManagerFactory for ZooFactory {
    fn name(&self) -> &str {
        "zoo"
    }
    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }
    fn create(&self, t: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        let driver = Arc::clone(&t.driver);
        let (inner, blocks): (Box<dyn MemoryManager>, _) = match self.0.on_blocks() {
            Some(flaw) => {
                let r = Arc::new(BlockResource::new(driver.clone(), flaw));
                let hook = Arc::clone(&r);
                let m = HostOnlyManager::new(driver.clone(), t.context, Arc::clone(&r))
                    .with_reset_hook(move || hook.release_empty().map_err(Into::into));
                (Box::new(m), Some(r))
            }
            None => (
                Box::new(DefaultManager::new(driver.clone(), t.context)),
                None,
            ),
        };
        Ok(Box::new(Broken {
            inner,
            bug: self.0,
            driver,
            context: t.context,
            blocks,
            initialized: AtomicBool::new(false),
            scratch: Mutex::new(None),
            live: Arc::new(AtomicUsize::new(0)),
        }))
    }
}

/// A correct manager with one bug.
pub struct Broken {
    inner: Box<dyn MemoryManager>,
    bug: Bug,
    driver: Arc<dyn Driver>,
    context: ContextId,
    blocks: Option<Arc<BlockResource>>,
    initialized: AtomicBool,
    scratch: Mutex<Option<DevicePtr>>,
    /// Pointers handed out and not yet finalized (for the bug that depends on it).
    live: Arc<AtomicUsize>,
}

impl Broken {
    /// A pointer at `ptr` whose finalizer drops `keep` (and runs `also` after).
    fn wrap(
        &self,
        ptr: DevicePtr,
        size: usize,
        keep: MemoryPointer,
        also: Option<Box<dyn FnOnce() + Send>>,
    ) -> MemoryPointer {
        let f = Finalizer::new(move || {
            drop(keep);
            if let Some(a) = also {
                a();
            }
        });
        MemoryPointer::new(self.context, ptr, size, Some(f))
    }
}

impl MemoryManager for Broken {
    fn name(&self) -> &str {
        "Broken"
    }

    fn initialize(&self) -> EmmResult<()> {
        self.inner.initialize()?;
        self.initialized.store(true, Ordering::SeqCst);
        if let (Bug::InitializeWipesState, Some(b)) = (self.bug, &self.blocks) {
            b.wipe();
        }
        Ok(())
    }

    fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer> {
        match self.bug {
            Bug::MisalignedPointers => {
                let p = self.inner.memalloc(size.saturating_add(8))?;
                p.view(8..8 + size)
            }
            Bug::PanicInsteadOfOutOfMemory => match self.inner.memalloc(size) {
                Err(e) if e.is_out_of_memory() => panic!("allocation failed: {e}"),
                r => r,
            },
            Bug::PointerOutsideDeviceMemory => {
                let p = self.inner.memalloc(size)?;
                let far = p.device_ptr().offset(1 << 44);
                Ok(self.wrap(far, size, p, None))
            }
            Bug::FinalizerRunTwice => {
                let p = self.inner.memalloc(size)?;
                let (d, at) = (Arc::clone(&self.driver), p.device_ptr());
                let again = Box::new(move || {
                    let _s = emm_core::attribution::CallerScope::enter("Broken");
                    let _ = d.mem_free(at);
                });
                Ok(self.wrap(at, size, p, Some(again)))
            }
            Bug::AllocationBehindTheManagersBack => {
                let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
                if s.is_none() {
                    // No CallerScope: nobody answers for this allocation.
                    *s = Some(self.driver.mem_alloc(4096)?);
                }
                drop(s);
                self.inner.memalloc(size)
            }
            Bug::OutOfMemoryWithoutAsking => {
                if size > 1 << 20 && self.live.load(Ordering::SeqCst) > 0 {
                    return Err(EmmError::OutOfMemory {
                        manager: "Broken".into(),
                        requested: size as u64,
                        available: None,
                    });
                }
                let p = self.inner.memalloc(size)?;
                let (at, live) = (p.device_ptr(), Arc::clone(&self.live));
                live.fetch_add(1, Ordering::SeqCst);
                let done = Box::new(move || {
                    live.fetch_sub(1, Ordering::SeqCst);
                });
                Ok(self.wrap(at, size, p, Some(done)))
            }
            _ => self.inner.memalloc(size),
        }
    }

    // The host side and the stream-ordered extension are the wrapped manager's, unbroken.
    emm_core::forward_manager_calls!(
        inner: memhostalloc,
        mempin,
        memallocmanaged,
        defer_cleanup,
        capabilities,
        memalloc_async,
        memfree_async,
    );

    fn get_memory_info(&self) -> EmmResult<MemoryInfo> {
        let i = self.inner.get_memory_info()?;
        Ok(match self.bug {
            Bug::MemoryInfoFreeAboveTotal => MemoryInfo {
                free: i.free.saturating_mul(2),
                total: i.total,
            },
            _ => i,
        })
    }

    fn get_ipc_handle(&self, memory: &MemoryPointer) -> EmmResult<IpcHandle> {
        let h = self.inner.get_ipc_handle(memory)?;
        if self.bug != Bug::WrongIpcOffset {
            return Ok(h);
        }
        // The classic slip: the view's offset, forgetting where the block lies in its chunk.
        let offset = memory.offset() as u64;
        Ok(IpcHandle::new(
            h.base().cloned(),
            h.handle,
            h.size,
            h.source_info.clone(),
            offset,
        ))
    }

    fn reset(&self) -> EmmResult<()> {
        match self.bug {
            Bug::CrashOnResetBeforeInitialize if !self.initialized.load(Ordering::SeqCst) => {
                // The bug: state made by initialize is assumed to exist.
                panic!("reset before initialize: no state yet")
            }
            Bug::LeakAtReset => Ok(()),
            Bug::AllocationBehindTheManagersBack => {
                if let Some(p) = self
                    .scratch
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                {
                    let _ = self.driver.mem_free(p);
                }
                self.inner.reset()
            }
            _ => self.inner.reset(),
        }
    }

    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }
}
