//! The event trace: every driver call, its caller, its arguments, its result and its virtual
//! time, with a running hash so that two runs can be compared byte for byte.

use std::fmt;

use emm_core::CudaCode;

macro_rules! call_kinds {
    ($($kind:ident => $name:literal,)*) => {
        /// A kind of driver call, named after the CUDA entry point it models.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[non_exhaustive]
        pub enum CallKind { $(#[doc = concat!("`", $name, "`")] $kind,)* }

        impl CallKind {
            /// Every kind of call, in declaration order.
            pub const ALL: &'static [CallKind] = &[$(CallKind::$kind),*];

            /// The CUDA entry point's name.
            pub fn name(self) -> &'static str {
                match self { $(CallKind::$kind => $name,)* }
            }
        }
    };
}

call_kinds! {
    DeviceCount => "cuDeviceGetCount",
    DeviceProperties => "cuDeviceGetAttribute",
    PrimaryContext => "cuDevicePrimaryCtxRetain",
    SetCurrentContext => "cuCtxSetCurrent",
    CurrentContext => "cuCtxGetCurrent",
    ContextDevice => "cuCtxGetDevice",
    ContextSynchronize => "cuCtxSynchronize",
    CanAccessPeer => "cuDeviceCanAccessPeer",
    EnablePeerAccess => "cuCtxEnablePeerAccess",
    MemAlloc => "cuMemAlloc",
    MemFree => "cuMemFree",
    MemAllocAsync => "cuMemAllocAsync",
    MemAllocFromPoolAsync => "cuMemAllocFromPoolAsync",
    MemFreeAsync => "cuMemFreeAsync",
    MemPoolCreate => "cuMemPoolCreate",
    MemPoolDestroy => "cuMemPoolDestroy",
    DeviceDefaultMemPool => "cuDeviceGetDefaultMemPool",
    MemPoolSetReleaseThreshold => "cuMemPoolSetAttribute",
    MemPoolTrimTo => "cuMemPoolTrimTo",
    MemPoolUsage => "cuMemPoolGetAttribute",
    MemAllocManaged => "cuMemAllocManaged",
    MemAdvise => "cuMemAdvise",
    MemPrefetch => "cuMemPrefetchAsync",
    HostAlloc => "cuMemHostAlloc",
    HostFree => "cuMemFreeHost",
    HostRegister => "cuMemHostRegister",
    HostUnregister => "cuMemHostUnregister",
    HostDevicePointer => "cuMemHostGetDevicePointer",
    PageableAlloc => "malloc",
    PageableFree => "free",
    MemGetInfo => "cuMemGetInfo",
    MemGetAddressRange => "cuMemGetAddressRange",
    IpcGetMemHandle => "cuIpcGetMemHandle",
    IpcOpenMemHandle => "cuIpcOpenMemHandle",
    IpcCloseMemHandle => "cuIpcCloseMemHandle",
    StreamCreate => "cuStreamCreate",
    StreamDestroy => "cuStreamDestroy",
    StreamSynchronize => "cuStreamSynchronize",
    StreamQuery => "cuStreamQuery",
    StreamWaitEvent => "cuStreamWaitEvent",
    EventCreate => "cuEventCreate",
    EventDestroy => "cuEventDestroy",
    EventRecord => "cuEventRecord",
    EventQuery => "cuEventQuery",
    EventSynchronize => "cuEventSynchronize",
    MemcpyHtoD => "cuMemcpyHtoD",
    MemcpyDtoH => "cuMemcpyDtoH",
    MemcpyDtoD => "cuMemcpy",
    MemsetD8 => "cuMemsetD8",
    HostRead => "host load",
    HostWrite => "host store",
    DeviceAccess => "kernel access",
    MemGetAllocationGranularity => "cuMemGetAllocationGranularity",
    MemAddressReserve => "cuMemAddressReserve",
    MemAddressFree => "cuMemAddressFree",
    MemCreate => "cuMemCreate",
    MemRelease => "cuMemRelease",
    MemMap => "cuMemMap",
    MemUnmap => "cuMemUnmap",
    MemSetAccess => "cuMemSetAccess",
}

impl CallKind {
    /// Whether the call reserves device memory from the driver (what "nothing but the plugin
    /// allocates device memory" is about).
    pub fn allocates_device_memory(self) -> bool {
        matches!(
            self,
            CallKind::MemAlloc
                | CallKind::MemAllocAsync
                | CallKind::MemAllocFromPoolAsync
                | CallKind::MemAllocManaged
                | CallKind::MemCreate
        )
    }
}

/// One traced driver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Position in the machine's call order, from 0.
    pub seq: u64,
    /// The simulated process that made the call.
    pub process: u32,
    /// The caller tag active on the calling thread (`emm_core::attribution`).
    pub caller: &'static str,
    /// Which call.
    pub call: CallKind,
    /// The call's main arguments (sizes, pointers, handles), unused ones 0.
    pub args: [u64; 3],
    /// The returned value (a pointer, a handle, a flag) or the CUDA error code.
    pub result: Result<u64, CudaCode>,
    /// The calling process's virtual time after the call, in nanoseconds.
    pub time_ns: u64,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} p{} [{}] {}({:#x}, {:#x}, {:#x}) -> ",
            self.seq,
            self.process,
            self.caller,
            self.call.name(),
            self.args[0],
            self.args[1],
            self.args[2]
        )?;
        match self.result {
            Ok(v) => write!(f, "{v:#x}")?,
            Err(code) => write!(f, "{}", code.name())?,
        }
        write!(f, " @{}ns", self.time_ns)
    }
}

/// The trace of a machine: the events (when kept) and an FNV-1a hash over all of them.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    pub(crate) events: Vec<TraceEvent>,
    pub(crate) keep: bool,
    pub(crate) hash: u64,
    pub(crate) count: u64,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[inline]
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

impl Trace {
    pub(crate) fn new(keep: bool) -> Self {
        Trace {
            events: Vec::new(),
            keep,
            hash: FNV_OFFSET,
            count: 0,
        }
    }

    /// Appends one event; its fields feed the running hash whether or not it is kept.
    #[inline]
    pub(crate) fn push(&mut self, mut event: TraceEvent) {
        event.seq = self.count;
        self.count += 1;
        let result = match event.result {
            Ok(v) => v,
            Err(code) => (1 << 63) | code.0 as u32 as u64,
        };
        let mut h = self.hash;
        h = fnv(h, &event.process.to_le_bytes());
        h = fnv(h, event.caller.as_bytes());
        h = fnv(h, &(event.call as u32).to_le_bytes());
        for a in event.args {
            h = fnv(h, &a.to_le_bytes());
        }
        h = fnv(h, &result.to_le_bytes());
        h = fnv(h, &event.time_ns.to_le_bytes());
        self.hash = h;
        if self.keep {
            self.events.push(event);
        }
    }
}
