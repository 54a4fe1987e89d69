//! The pointer rules of the contract: finalizers, owners and views.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use emm_core::contract::{
    EmmError, Finalizer, ManagedMemory, MappedMemory, MemoryPointer, PinOwner, PinnedMemory,
};
use emm_core::{ContextId, DevicePtr, HostPtr};

const CTX: ContextId = ContextId(1);

fn counted() -> (Arc<AtomicUsize>, Option<Finalizer>) {
    let n = Arc::new(AtomicUsize::new(0));
    let m = Arc::clone(&n);
    let f = Finalizer::new(move || {
        m.fetch_add(1, Ordering::SeqCst);
    });
    (n, Some(f))
}

fn runs(n: &AtomicUsize) -> usize {
    n.load(Ordering::SeqCst)
}

/// Numba's `test_user_extension`: "Ensure finalizer is called when
/// pointer is deleted" and "Ensure removing derived pointer doesn't call finalizer".
#[test]
fn finalizer_runs_exactly_once_when_the_last_owner_goes() {
    let (n, f) = counted();
    let ptr = MemoryPointer::new(CTX, DevicePtr(0xdead_0000), 40, f);
    assert_eq!(runs(&n), 0);
    drop(ptr);
    assert_eq!(runs(&n), 1);

    let (n, f) = counted();
    let ptr = MemoryPointer::new(CTX, DevicePtr(0xdead_0000), 40, f);
    let owned = ptr.clone(); // Numba's `ptr.own()`
    assert_eq!(ptr.owner_count(), 2);
    drop(owned);
    assert_eq!(runs(&n), 0, "removing a derived pointer does not finalize");
    drop(ptr);
    assert_eq!(runs(&n), 1);

    // Many owners on many threads: still exactly once.
    let (n, f) = counted();
    let ptr = MemoryPointer::new(CTX, DevicePtr(0x1000), 4096, f);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let p = ptr.view(i * 16..).unwrap();
            std::thread::spawn(move || drop(p))
        })
        .collect();
    drop(ptr);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(runs(&n), 1);
}

/// NBEP 7: "owner: The owner is sometimes set by the internals of the class" — a view
/// keeps the owner's buffer alive, and a view of a view adds the offsets.
#[test]
fn views_keep_the_owner_alive_and_a_view_of_a_view_adds_offsets() {
    let (n, f) = counted();
    let ptr = MemoryPointer::new(CTX, DevicePtr(0x10_0000), 1024, f);
    let v1 = ptr.view(100..900).unwrap();
    let v2 = v1.view(50..).unwrap();
    assert_eq!(v1.device_ptr(), DevicePtr(0x10_0000 + 100));
    assert_eq!((v1.offset(), v1.size()), (100, 800));
    assert_eq!(v2.device_ptr(), DevicePtr(0x10_0000 + 150));
    assert_eq!((v2.offset(), v2.size()), (150, 750));
    assert!(v2.shares_owner(&ptr));
    assert_eq!(v2.owner().device_ptr(), DevicePtr(0x10_0000));
    assert_eq!(v2.owner().size(), 1024);
    drop(ptr);
    drop(v1);
    assert_eq!(runs(&n), 0, "the view of a view still holds the owner");
    drop(v2);
    assert_eq!(runs(&n), 1);
}

/// Numba's reference: "When the instance is deleted, the finalizer will be called" — its own, no
/// other.
#[test]
fn deleting_one_array_runs_only_its_finalizer() {
    let (na, fa) = counted();
    let (nb, fb) = counted();
    let a = MemoryPointer::new(CTX, DevicePtr(0x1000), 64, fa);
    let b = MemoryPointer::new(CTX, DevicePtr(0x2000), 64, fb);
    let b_view = b.view(8..16).unwrap();
    drop(a);
    assert_eq!((runs(&na), runs(&nb)), (1, 0));
    assert!(!b_view.shares_owner(&MemoryPointer::new(CTX, DevicePtr(0x1000), 64, None)));
    drop((b, b_view));
    assert_eq!((runs(&na), runs(&nb)), (1, 1));
}

#[test]
fn a_range_outside_the_pointer_is_an_error_not_a_panic() {
    let ptr = MemoryPointer::new(CTX, DevicePtr(0x1000), 100, None);
    let bad = [
        ptr.view(0..101).unwrap_err(),
        ptr.view(101..).unwrap_err(),
        ptr.view(usize::MAX..).unwrap_err(),
        ptr.view(..=usize::MAX).unwrap_err(),
    ];
    for e in bad {
        assert!(matches!(e, EmmError::InvalidArgument { .. }), "{e}");
    }
    let e = ptr.view(10..200).unwrap_err();
    assert_eq!(
        e.to_string(),
        "MemoryPointer::view: range Included(10)..Excluded(200) is outside the pointer's 100 \
         bytes; give start <= end <= 100"
    );
    let empty = ptr.view(100..).unwrap();
    assert_eq!(
        empty.size(),
        0,
        "an empty view at the end is allowed, as in Numba"
    );
    assert_eq!(ptr.view(..).unwrap().device_ptr(), ptr.device_ptr());
}

/// NBEP 7: "MappedMemory: used to hold information about host memory that is mapped into
/// the device address space (a subclass of MemoryPointer)".
#[test]
fn mapped_pinned_and_managed_memory_share_the_owner_model() {
    let (n, f) = counted();
    let owner: PinOwner = Arc::new(vec![0u8; 16]);
    let m = MappedMemory::new(CTX, HostPtr(0x5000), DevicePtr(0x9000), 256, Some(owner), f);
    let v = m.view(16..32).unwrap();
    assert_eq!(
        (v.host_ptr(), v.device_ptr()),
        (HostPtr(0x5010), DevicePtr(0x9010))
    );
    let as_ptr = v.as_memory_pointer();
    assert_eq!(as_ptr.device_ptr(), DevicePtr(0x9010));
    assert!(v.pin_owner().is_some());
    drop((m, v));
    assert_eq!(runs(&n), 0, "the MemoryPointer view holds the mapping");
    drop(as_ptr);
    assert_eq!(runs(&n), 1);

    let (n, f) = counted();
    let p = PinnedMemory::new(CTX, HostPtr(0x8000), 64, None, f);
    assert_eq!(p.view(8..).unwrap().host_ptr(), HostPtr(0x8008));
    assert!(p.view(..65).is_err());
    drop(p);
    assert_eq!(runs(&n), 1);

    let (n, f) = counted();
    let g = ManagedMemory::new(CTX, DevicePtr(0xa000), 128, f);
    assert_eq!(
        g.host_ptr(),
        HostPtr(0xa000),
        "one address for host and device"
    );
    let gv = g.view(64..).unwrap();
    drop(g);
    assert_eq!(gv.device_ptr(), DevicePtr(0xa040));
    drop(gv);
    assert_eq!(runs(&n), 1);
}

#[test]
fn only_the_last_whole_owner_can_take_the_buffer_apart() {
    let (n, f) = counted();
    let ptr = MemoryPointer::new(CTX, DevicePtr(0x1000), 64, f);
    let view = ptr.view(8..).unwrap();
    let ptr = ptr.try_release().unwrap_err(); // a view is alive
    let view = view.try_release().unwrap_err(); // a view is not the whole buffer
    drop(view);
    let released = ptr.try_release().unwrap();
    assert_eq!(
        (released.device_ptr, released.size),
        (DevicePtr(0x1000), 64)
    );
    assert_eq!(runs(&n), 0, "taking apart does not finalize");
    released.finalizer.unwrap().run();
    assert_eq!(runs(&n), 1);
}
