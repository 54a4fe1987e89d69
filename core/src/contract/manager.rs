//! [`MemoryManager`]: the EMM plugin interface, version [`INTERFACE_VERSION`].
//!
//! The contract of NBEP 7 as shipped in Numba's EMM plugin reference. Where the
//! two differ, emm follows the shipped reference:
//! - `get_memory_info` may say it is unsupported (004: "May raise NotImplementedError"; 001
//!   makes it mandatory) — here [`EmmError::Unsupported`].
//! - One manager instance per context (004: "Numba instantiates one instance of the EMM Plugin
//!   class per context"; 001 does not say).
//! - `IpcHandle` carries an `offset` for suballocators, and a default `get_ipc_handle` exists
//!   (004's `GetIpcHandleMixin`; 001 sketches it inside the RMM example).
//!
//! Beyond both: `memallocmanaged` (Numba's context calls it although the base class omits it,
//! numba#6328) and an opt-in stream-ordered extension, advertised through
//! [`MemoryManager::capabilities`]; their defaults say [`EmmError::Unsupported`], so a v1-only
//! manager keeps working.

use crate::contract::error::{EmmError, EmmResult};
use crate::contract::guard::DeferCleanupGuard;
use crate::contract::host_memory::HostMemory;
use crate::contract::ipc::IpcHandle;
use crate::contract::managed::ManagedMemory;
use crate::contract::pointer::{MemoryPointer, PinOwner};
use crate::driver::{HostPtr, MemInfo, StreamId};

/// The version of the plugin interface emm implements. "At present, this should always be 1."
pub const INTERFACE_VERSION: u32 = 1;

/// Free and total memory of the device, in bytes (Numba's `MemoryInfo` named tuple).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryInfo {
    /// Free device memory in bytes.
    pub free: u64,
    /// Total device memory in bytes.
    pub total: u64,
}

impl From<MemInfo> for MemoryInfo {
    fn from(m: MemInfo) -> Self {
        MemoryInfo {
            free: m.free,
            total: m.total,
        }
    }
}

/// What a manager offers beyond the v1 methods every manager has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// `memalloc_async` and `memfree_async` work (the stream-ordered extension).
    pub stream_ordered: bool,
    /// `get_memory_info` answers rather than saying it is unsupported.
    pub memory_info: bool,
    /// `memallocmanaged` works.
    pub managed_memory: bool,
    /// `get_ipc_handle` works (memory from a driver pool or managed memory cannot be exported
    /// with `cuIpcGetMemHandle`; such a manager says [`EmmError::Unsupported`]).
    pub ipc: bool,
}

impl Capabilities {
    /// A v1-only manager that can tell its memory info: the plain contract.
    pub const V1: Capabilities = Capabilities {
        stream_ordered: false,
        memory_info: true,
        managed_memory: false,
        ipc: true,
    };

    /// With the stream-ordered extension on or off.
    pub const fn with_stream_ordered(mut self, on: bool) -> Self {
        self.stream_ordered = on;
        self
    }
    /// With `get_memory_info` supported or not.
    pub const fn with_memory_info(mut self, on: bool) -> Self {
        self.memory_info = on;
        self
    }
    /// With `get_ipc_handle` supported or not.
    pub const fn with_ipc(mut self, on: bool) -> Self {
        self.ipc = on;
        self
    }
    /// With `memallocmanaged` supported or not.
    pub const fn with_managed_memory(mut self, on: bool) -> Self {
        self.managed_memory = on;
        self
    }
}

/// An EMM plugin: the memory manager of one context.
///
/// All methods take `&self`: a context shares its manager across threads, so a manager keeps
/// its state behind its own locks. The allocation methods are "always called when the current
/// CUDA context is the context that owns the EMM Plugin instance" (`Context` makes sure).
/// A manager never panics on bad input: size 0, an absurd size, a foreign pointer are errors.
pub trait MemoryManager: Send + Sync {
    /// A short name for messages and caller tags, e.g. `DefaultManager`.
    fn name(&self) -> &str;

    /// Prepares the manager for allocations in the current context. "This method may be called
    /// multiple times, and must not invalidate previous state when it is called."
    ///
    /// # Errors
    ///
    /// Whatever stops the manager from becoming usable (usually a driver error).
    fn initialize(&self) -> EmmResult<()>;

    /// `size` bytes of device memory in the current context.
    ///
    /// # Errors
    ///
    /// [`EmmError::OutOfMemory`], [`EmmError::InvalidArgument`] for size 0.
    fn memalloc(&self, size: usize) -> EmmResult<MemoryPointer>;

    /// `size` bytes of pinned host memory; `mapped` maps it into the device address space,
    /// `portable` pins it for every context, `wc` makes it write-combined.
    ///
    /// # Errors
    ///
    /// [`EmmError::OutOfMemory`], [`EmmError::InvalidArgument`] for size 0.
    fn memhostalloc(
        &self,
        size: usize,
        mapped: bool,
        portable: bool,
        wc: bool,
    ) -> EmmResult<HostMemory>;

    /// Pins `size` bytes of existing host memory at `ptr`, owned by `owner` (kept alive while
    /// pinned); `mapped` also maps it. Unpinning happens in the finalizer.
    ///
    /// # Errors
    ///
    /// A driver error when the range cannot be pinned (already pinned, not host memory);
    /// [`EmmError::InvalidArgument`] for size 0.
    fn mempin(
        &self,
        owner: Option<PinOwner>,
        ptr: HostPtr,
        size: usize,
        mapped: bool,
    ) -> EmmResult<HostMemory>;

    /// `size` bytes of managed memory; `attach_global` makes it accessible from any stream.
    ///
    /// # Errors
    ///
    /// By default [`EmmError::Unsupported`].
    fn memallocmanaged(&self, size: usize, attach_global: bool) -> EmmResult<ManagedMemory> {
        let _ = (size, attach_global);
        Err(EmmError::unsupported(
            self.name(),
            "memallocmanaged",
            "this manager does not allocate managed memory; use a manager whose \
             capabilities().managed_memory is true",
        ))
    }

    /// Free and total device memory for the context.
    ///
    /// # Errors
    ///
    /// [`EmmError::Unsupported`] where it is not practical (a pool allocator, say).
    fn get_memory_info(&self) -> EmmResult<MemoryInfo>;

    /// An IPC handle for `memory`, with the offset of `memory` inside the driver allocation
    /// that holds it. [`crate::contract::ipc::get_ipc_handle_via_driver`] is the default
    /// behaviour (Numba's `GetIpcHandleMixin`).
    ///
    /// # Errors
    ///
    /// A driver error (IPC unsupported, pointer not device memory).
    fn get_ipc_handle(&self, memory: &MemoryPointer) -> EmmResult<IpcHandle>;

    /// "Clears up all memory allocated in this context" that the manager holds (pending
    /// deallocations, caches). May come before `initialize`.
    ///
    /// # Errors
    ///
    /// Failures of the cleanup it ran.
    fn reset(&self) -> EmmResult<()>;

    /// A guard that defers expensive cleanup while alive. The manager documents what it
    /// defers.
    fn defer_cleanup(&self) -> DeferCleanupGuard;

    /// The interface version the manager implements; must equal [`INTERFACE_VERSION`].
    fn interface_version(&self) -> u32;

    /// What the manager offers beyond the v1 methods. The default: [`Capabilities::V1`].
    fn capabilities(&self) -> Capabilities {
        Capabilities::V1
    }

    /// `size` bytes of device memory usable on `stream` at once, freed on `stream` when the
    /// last owner goes (the stream-ordered extension).
    ///
    /// # Errors
    ///
    /// By default [`EmmError::Unsupported`].
    fn memalloc_async(&self, size: usize, stream: StreamId) -> EmmResult<MemoryPointer> {
        let _ = (size, stream);
        Err(unsupported_async(self.name(), "memalloc_async"))
    }

    /// Frees `memory` on `stream`: reusable at once on `stream`, elsewhere only after an
    /// ordering with it. `memory` must be the last owner and not a view.
    ///
    /// # Errors
    ///
    /// By default [`EmmError::Unsupported`]; [`EmmError::InvalidArgument`] when other owners
    /// are alive or the pointer is not this manager's. On an error `memory` is dropped as
    /// usual, so its own finalizer releases it: nothing is lost.
    fn memfree_async(&self, memory: MemoryPointer, stream: StreamId) -> EmmResult<()> {
        let _ = (memory, stream);
        Err(unsupported_async(self.name(), "memfree_async"))
    }

    /// Device memory the manager holds from the driver now, handed out or kept for reuse
    /// (PyTorch's reserved bytes), where its resource tracks it (an emm extension, not in
    /// NBEP 7). The default: `None`.
    fn held_bytes(&self) -> Option<u64> {
        None
    }
}

fn unsupported_async(manager: &str, operation: &'static str) -> EmmError {
    EmmError::unsupported(
        manager,
        operation,
        "this manager implements only the v1 interface (capabilities().stream_ordered is \
         false); use memalloc, whose memory is usable on every stream",
    )
}

/// Checks a manager's interface version against [`INTERFACE_VERSION`].
///
/// # Errors
///
/// [`EmmError::VersionMismatch`] naming both versions.
pub fn check_interface_version(manager: &str, found: u32) -> EmmResult<()> {
    if found == INTERFACE_VERSION {
        Ok(())
    } else {
        Err(EmmError::VersionMismatch {
            expected: INTERFACE_VERSION,
            found,
            manager: manager.to_string(),
        })
    }
}

/// Writes, inside an `impl MemoryManager for …`, the methods that a manager wrapping another
/// passes on unchanged to the manager in field `$inner` (a name or a tuple index): every
/// [`MemoryManager`] method but `name` may be listed. A wrapper then writes out only the calls
/// it changes, and a method it does not list keeps the trait's default.
///
/// ```
/// use emm_core::contract::{DeferCleanupGuard, EmmResult, MemoryManager, MemoryPointer};
/// use emm_core::managers::DefaultManager;
///
/// /// The default manager under another name.
/// struct Renamed(DefaultManager);
///
/// impl MemoryManager for Renamed {
///     fn name(&self) -> &str {
///         "Renamed"
///     }
///
///     emm_core::forward_manager_calls!(0: initialize, memalloc, memhostalloc, mempin,
///         memallocmanaged, get_memory_info, get_ipc_handle, reset, defer_cleanup,
///         interface_version, capabilities, memalloc_async, memfree_async);
/// }
/// ```
#[macro_export]
macro_rules! forward_manager_calls {
    ($inner:tt: $($method:ident),+ $(,)?) => {
        $($crate::forward_manager_calls!(@one $inner $method);)+
    };
    (@one $inner:tt initialize) => {
        $crate::forward_manager_calls!(@pass $inner initialize()
            -> $crate::contract::EmmResult<()>);
    };
    (@one $inner:tt memalloc) => {
        $crate::forward_manager_calls!(@pass $inner memalloc(size: usize)
            -> $crate::contract::EmmResult<$crate::contract::MemoryPointer>);
    };
    (@one $inner:tt memhostalloc) => {
        $crate::forward_manager_calls!(@pass $inner memhostalloc(
            size: usize,
            mapped: bool,
            portable: bool,
            wc: bool
        ) -> $crate::contract::EmmResult<$crate::contract::HostMemory>);
    };
    (@one $inner:tt mempin) => {
        $crate::forward_manager_calls!(@pass $inner mempin(
            owner: Option<$crate::contract::PinOwner>,
            ptr: $crate::HostPtr,
            size: usize,
            mapped: bool
        ) -> $crate::contract::EmmResult<$crate::contract::HostMemory>);
    };
    (@one $inner:tt memallocmanaged) => {
        $crate::forward_manager_calls!(@pass $inner memallocmanaged(
            size: usize,
            attach_global: bool
        ) -> $crate::contract::EmmResult<$crate::contract::ManagedMemory>);
    };
    (@one $inner:tt get_memory_info) => {
        $crate::forward_manager_calls!(@pass $inner get_memory_info()
            -> $crate::contract::EmmResult<$crate::contract::MemoryInfo>);
    };
    (@one $inner:tt get_ipc_handle) => {
        $crate::forward_manager_calls!(@pass $inner get_ipc_handle(
            memory: &$crate::contract::MemoryPointer
        ) -> $crate::contract::EmmResult<$crate::contract::IpcHandle>);
    };
    (@one $inner:tt reset) => {
        $crate::forward_manager_calls!(@pass $inner reset()
            -> $crate::contract::EmmResult<()>);
    };
    (@one $inner:tt defer_cleanup) => {
        $crate::forward_manager_calls!(@pass $inner defer_cleanup()
            -> $crate::contract::DeferCleanupGuard);
    };
    (@one $inner:tt interface_version) => {
        $crate::forward_manager_calls!(@pass $inner interface_version()
            -> u32);
    };
    (@one $inner:tt capabilities) => {
        $crate::forward_manager_calls!(@pass $inner capabilities()
            -> $crate::contract::Capabilities);
    };
    (@one $inner:tt memalloc_async) => {
        $crate::forward_manager_calls!(@pass $inner memalloc_async(
            size: usize,
            stream: $crate::StreamId
        ) -> $crate::contract::EmmResult<$crate::contract::MemoryPointer>);
    };
    (@one $inner:tt held_bytes) => {
        $crate::forward_manager_calls!(@pass $inner held_bytes() -> Option<u64>);
    };
    (@one $inner:tt memfree_async) => {
        $crate::forward_manager_calls!(@pass $inner memfree_async(
            memory: $crate::contract::MemoryPointer,
            stream: $crate::StreamId
        ) -> $crate::contract::EmmResult<()>);
    };
    // One method, as the trait declares it, passed on to `self.$inner`.
    (@pass $inner:tt $method:ident($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        fn $method(&self, $($arg: $ty),*) -> $ret {
            self.$inner.$method($($arg),*)
        }
    };
}
