//! `Driver` op sequences against the simulated GPU: arbitrary calls with arbitrary arguments
//! (live handles, stale ones, raw numbers, absurd sizes) never panic, every error is a typed
//! `DriverError` naming its call, and once everything the sequence made is released the
//! simulator reports nothing held.
#![no_main]

use arbitrary::Arbitrary;
use emm_core::{
    Advice, DeviceId, DevicePtr, Driver, EventId, HostAllocFlags, HostPtr, Location, PhysHandle,
    StreamId,
};
use emm_sim::{SimConfig, SimDriver, MIB};
use libfuzzer_sys::fuzz_target;

/// A size: mostly small, sometimes absurd.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Size {
    Small(u16),
    Mib(u8),
    Granules(u8),
    Raw(u64),
}

impl Size {
    fn bytes(self) -> usize {
        match self {
            Size::Small(n) => usize::from(n),
            Size::Mib(n) => usize::from(n % 16) << 20,
            Size::Granules(n) => usize::from(n % 4) * (2 << 20),
            Size::Raw(n) => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }
}

/// Which handle: one the sequence holds (modulo their number) or a raw number.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Pick {
    Live(u8),
    Raw(u64),
}

fn pick<T: Copy>(p: Pick, live: &[T], raw: impl Fn(u64) -> T) -> T {
    match p {
        Pick::Live(i) if !live.is_empty() => live[usize::from(i) % live.len()],
        Pick::Live(i) => raw(u64::from(i)),
        Pick::Raw(n) => raw(n),
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc(Size),
    Free(Pick),
    AllocAsync(Size, Pick),
    FreeAsync(Pick, Pick),
    StreamCreate(bool),
    StreamDestroy(Pick),
    StreamSync(Pick),
    EventCreate,
    EventRecord(Pick, Pick),
    StreamWait(Pick, Pick),
    EventSync(Pick),
    EventDestroy(Pick),
    Write(Pick, u16, u8, Option<Pick>),
    Read(Pick, u16, u16, Option<Pick>),
    Memset(Pick, u8, Size, Option<Pick>),
    Dtod(Pick, Pick, Size, Option<Pick>),
    Access(Pick, Size, Pick, bool),
    HostAlloc(Size, bool, bool),
    HostFree(Pick),
    Pageable(Size),
    Register(Pick, Size, bool),
    Unregister(Pick),
    Managed(Size, bool),
    Prefetch(Pick, Size, bool, Pick),
    Advise(Pick, Size, u8),
    Reserve(Size),
    Create(Size),
    Map(Pick, Size, Pick),
    Unmap(Pick, Size),
    Release(Pick),
    AddressFree(Pick, Size),
    Info,
    Range(Pick),
    Ipc(Pick),
    Sync,
}

#[derive(Default)]
struct Held {
    device: Vec<DevicePtr>,
    streams: Vec<StreamId>,
    events: Vec<EventId>,
    host: Vec<HostPtr>,
    pageable: Vec<HostPtr>,
    registered: Vec<HostPtr>,
    reserved: Vec<(DevicePtr, usize)>,
    physical: Vec<PhysHandle>,
    mapped: Vec<(DevicePtr, usize)>,
}

fn stream(p: Pick, h: &Held) -> StreamId {
    pick(p, &h.streams, StreamId)
}

fn run(g: &SimDriver, ops: &[Op]) -> Held {
    let mut h = Held::default();
    let dev = |p: Pick, h: &Held| pick(p, &h.device, DevicePtr);
    for op in ops {
        let r: Result<(), emm_core::DriverError> = match *op {
            Op::Alloc(s) => g.mem_alloc(s.bytes()).map(|p| h.device.push(p)),
            Op::Free(p) => g.mem_free(dev(p, &h)),
            Op::AllocAsync(s, st) => g
                .mem_alloc_async(s.bytes(), stream(st, &h))
                .map(|p| h.device.push(p)),
            Op::FreeAsync(p, st) => g.mem_free_async(dev(p, &h), stream(st, &h)),
            Op::StreamCreate(nb) => g.stream_create(nb).map(|s| h.streams.push(s)),
            Op::StreamDestroy(p) => g.stream_destroy(stream(p, &h)),
            Op::StreamSync(p) => g.stream_synchronize(stream(p, &h)),
            Op::EventCreate => g.event_create().map(|e| h.events.push(e)),
            Op::EventRecord(e, s) => g.event_record(pick(e, &h.events, EventId), stream(s, &h)),
            Op::StreamWait(s, e) => g.stream_wait_event(stream(s, &h), pick(e, &h.events, EventId)),
            Op::EventSync(e) => g.event_synchronize(pick(e, &h.events, EventId)),
            Op::EventDestroy(e) => g.event_destroy(pick(e, &h.events, EventId)),
            Op::Write(p, off, v, s) => {
                let data = [v; 16];
                g.memcpy_htod(
                    dev(p, &h).offset(u64::from(off)),
                    &data,
                    s.map(|s| stream(s, &h)),
                )
            }
            Op::Read(p, off, len, s) => {
                let mut back = vec![0u8; usize::from(len % 4096)];
                g.memcpy_dtoh(
                    &mut back,
                    dev(p, &h).offset(u64::from(off)),
                    s.map(|s| stream(s, &h)),
                )
            }
            Op::Memset(p, v, s, st) => {
                g.memset_d8(dev(p, &h), v, s.bytes(), st.map(|s| stream(s, &h)))
            }
            Op::Dtod(a, b, s, st) => {
                g.memcpy_dtod(dev(a, &h), dev(b, &h), s.bytes(), st.map(|s| stream(s, &h)))
            }
            Op::Access(p, s, st, w) => g.device_access(dev(p, &h), s.bytes(), stream(st, &h), w),
            Op::HostAlloc(s, mapped, wc) => g
                .host_alloc(
                    s.bytes(),
                    HostAllocFlags {
                        mapped,
                        portable: false,
                        write_combined: wc,
                    },
                )
                .map(|p| h.host.push(p)),
            Op::HostFree(p) => g.host_free(pick(p, &h.host, HostPtr)),
            Op::Pageable(s) => g.pageable_alloc(s.bytes()).map(|p| h.pageable.push(p)),
            Op::Register(p, s, mapped) => {
                let ptr = pick(p, &h.pageable, HostPtr);
                g.host_register(ptr, s.bytes(), mapped)
                    .map(|()| h.registered.push(ptr))
            }
            Op::Unregister(p) => g.host_unregister(pick(p, &h.registered, HostPtr)),
            Op::Managed(s, global) => g
                .mem_alloc_managed(s.bytes(), global)
                .map(|p| h.device.push(p)),
            Op::Prefetch(p, s, to_host, st) => {
                let loc = if to_host {
                    Location::Host
                } else {
                    Location::Device(DeviceId(0))
                };
                g.mem_prefetch(dev(p, &h), s.bytes(), loc, stream(st, &h))
            }
            Op::Advise(p, s, a) => {
                let advice = [
                    Advice::SetReadMostly,
                    Advice::UnsetReadMostly,
                    Advice::SetPreferredLocation,
                    Advice::UnsetPreferredLocation,
                    Advice::SetAccessedBy,
                    Advice::UnsetAccessedBy,
                ][usize::from(a % 6)];
                g.mem_advise(dev(p, &h), s.bytes(), advice, Location::Device(DeviceId(0)))
            }
            Op::Reserve(s) => {
                let size = s.bytes();
                g.mem_address_reserve(size, 0)
                    .map(|p| h.reserved.push((p, size)))
            }
            Op::Create(s) => g
                .mem_create(s.bytes(), DeviceId(0))
                .map(|p| h.physical.push(p)),
            Op::Map(r, s, p) => {
                let at = pick(r, &h.reserved, |n| (DevicePtr(n), 0)).0;
                let size = s.bytes();
                g.mem_map(at, size, pick(p, &h.physical, PhysHandle))
                    .map(|()| h.mapped.push((at, size)))
            }
            Op::Unmap(r, s) => {
                let (at, size) = pick(r, &h.mapped, |n| (DevicePtr(n), 0));
                let size = if size == 0 { s.bytes() } else { size };
                g.mem_unmap(at, size)
            }
            Op::Release(p) => g.mem_release(pick(p, &h.physical, PhysHandle)),
            Op::AddressFree(r, s) => {
                let (at, size) = pick(r, &h.reserved, |n| (DevicePtr(n), 0));
                let size = if size == 0 { s.bytes() } else { size };
                g.mem_address_free(at, size)
            }
            Op::Info => g
                .mem_get_info()
                .map(|i| assert!(i.free <= i.total, "{i:?}")),
            Op::Range(p) => g.mem_get_address_range(dev(p, &h)).map(|_| ()),
            Op::Ipc(p) => g.ipc_get_mem_handle(dev(p, &h)).map(|_| ()),
            Op::Sync => g.context_synchronize(),
        };
        if let Err(e) = r {
            // Typed and with context: the entry point and a message.
            assert!(!e.call.is_empty(), "{e:?}");
            assert!(!e.detail.is_empty(), "{e:?}");
        }
    }
    h
}

/// Releases everything the sequence made, in the order CUDA needs; failures (already freed
/// by a raw pick) are fine.
fn release(g: &SimDriver, h: Held) {
    let _ = g.context_synchronize();
    for (p, s) in h.mapped {
        let _ = g.mem_unmap(p, s);
    }
    for p in h.physical {
        let _ = g.mem_release(p);
    }
    for (p, s) in h.reserved {
        let _ = g.mem_address_free(p, s);
    }
    for p in h.device {
        // Stream-ordered memory may need its own free.
        if g.mem_free(p).is_err() {
            let _ = g.mem_free_async(p, StreamId::DEFAULT);
        }
    }
    for p in h.registered {
        let _ = g.host_unregister(p);
    }
    for p in h.host {
        let _ = g.host_free(p);
    }
    for p in h.pageable {
        let _ = g.pageable_free(p);
    }
    let _ = g.context_synchronize();
    for e in h.events {
        let _ = g.event_destroy(e);
    }
    for s in h.streams {
        let _ = g.stream_destroy(s);
    }
}

fuzz_target!(|ops: Vec<Op>| {
    if ops.len() > 256 {
        return;
    }
    // The simulator keeps the bytes of what is written: host memory is bounded too, or a
    // memset over a 100 GiB pinned buffer holds 100 GiB of this process.
    let config = SimConfig {
        host_memory: 256 * MIB,
        ..SimConfig::new(3).memory_per_device(256 * MIB)
    };
    let Ok(g) = SimDriver::new(config) else {
        return;
    };
    let h = run(&g, &ops);
    release(&g, h);
    let report = g.report();
    assert!(report.nothing_held(), "{ops:?}\nleft behind:\n{report}");
});
