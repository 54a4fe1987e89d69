//! IPC handles: base + offset for suballocated pointers, opened in a second simulated process.

use crate::common;

use std::sync::Arc;

use common::BumpResource;
use emm_core::contract::{Context, EmmError, IpcHandle, MemoryPointer};
use emm_core::managers::{DefaultManager, HostOnlyManager};
use emm_core::{DeviceId, DevicePtr, Driver};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(9).memory_per_device(GIB)).unwrap())
}

/// A context of `g` whose manager suballocates from one driver allocation.
fn suballocating_context(g: &Arc<SimDriver>) -> Context<SimDriver> {
    let id = g.primary_context(DeviceId(0)).unwrap();
    let m = HostOnlyManager::new(g.clone(), id, BumpResource::new(g.clone(), MIB));
    Context::with_manager(g.clone(), DeviceId(0), Box::new(m)).unwrap()
}

fn read(g: &SimDriver, p: DevicePtr, n: usize) -> Vec<u8> {
    let mut back = vec![0; n];
    g.memcpy_dtoh(&mut back, p, None).unwrap();
    back
}

/// Numba's reference: "If the underlying memory does not point to the base of an allocation returned
/// by the CUDA driver or runtime API (e.g. if a pool allocator is in use) then the offset from
/// the base must be provided." Opened in another process, the handle reaches the same bytes.
#[test]
fn ipc_opened_in_a_second_process_reads_the_same_bytes_at_base_plus_offset() {
    let exporter = gpu();
    let ctx = suballocating_context(&exporter);
    let _first = ctx.memalloc(1000).unwrap(); // push the next slice off the chunk's base
    let array = ctx.memalloc(4096).unwrap();
    let middle = array.view(100..300).unwrap(); // a pointer in the middle of a suballocation
    let bytes: Vec<u8> = (0..200u32).map(|i| (i * 3) as u8).collect();
    exporter
        .memcpy_htod(middle.device_ptr(), &bytes, None)
        .unwrap();

    let handle = ctx.get_ipc_handle(&middle).unwrap();
    let (base, _) = exporter.mem_get_address_range(middle.device_ptr()).unwrap();
    assert_eq!(
        handle.offset,
        1024 + 100,
        "the slice starts at 1024, the view 100 in"
    );
    assert_eq!(base.offset(handle.offset), middle.device_ptr());
    assert_eq!(handle.size, 200);
    assert_eq!(handle.source_info.device, 0);
    assert!(handle.base().is_some_and(|b| b.shares_owner(&array)));

    // Send it as JSON, as a real exporter sends it through a pipe.
    let wire = serde_json::to_string(&handle).unwrap();
    let mut received: IpcHandle = serde_json::from_str(&wire).unwrap();
    assert_eq!(received, handle);
    assert!(
        received.base().is_none(),
        "the importer holds no exporter memory"
    );

    let importer = exporter.process();
    let importer = Arc::new(importer);
    let ictx = Context::with_manager(
        importer.clone(),
        DeviceId(0),
        Box::new(DefaultManager::new(
            importer.clone(),
            importer.primary_context(DeviceId(0)).unwrap(),
        )),
    )
    .unwrap();
    let opened = ictx.open_ipc_handle(&mut received).unwrap();
    assert_ne!(
        opened.device_ptr(),
        middle.device_ptr(),
        "mapped at its own address"
    );
    assert_eq!(opened.size(), 200);
    assert_eq!(read(&importer, opened.device_ptr(), 200), bytes);

    // "opened twice" and "not opened" are errors that change nothing.
    let e = ictx.open_ipc_handle(&mut received).unwrap_err();
    assert!(matches!(e, EmmError::IpcAlreadyOpened { .. }), "{e}");
    assert!(
        e.to_string().contains("close it before opening it again"),
        "{e}"
    );
    assert_eq!(read(&importer, opened.device_ptr(), 4), bytes[..4]);
    received.close().unwrap();
    let e = received.close().unwrap_err();
    assert_eq!(e, EmmError::IpcNotOpened);
    assert_eq!(
        e.to_string(),
        "IpcHandle not opened; open it before closing it"
    );
    // Closed: it can be opened again, and dropping an open handle closes it.
    let again = ictx.open_ipc_handle(&mut received).unwrap();
    assert_eq!(read(&importer, again.device_ptr(), 200), bytes);
    drop(received);
    assert_eq!(exporter.report().open_ipc_handles.count, 0);
}

/// Numba's reference: "An implementation of the get_ipc_handle() function is provided in the
/// GetIpcHandleMixin class. This uses the driver API to determine the base address of an
/// allocation" — for direct allocations the offset is the view's own.
#[test]
fn the_default_manager_exports_direct_allocations_with_offset_zero() {
    let g = gpu();
    let ctx = Context::with_manager(
        g.clone(),
        DeviceId(0),
        Box::new(DefaultManager::new(
            g.clone(),
            g.primary_context(DeviceId(0)).unwrap(),
        )),
    )
    .unwrap();
    let p = ctx.memalloc(4096).unwrap();
    assert_eq!(ctx.get_ipc_handle(&p).unwrap().offset, 0);
    assert_eq!(
        ctx.get_ipc_handle(&p.view(512..).unwrap()).unwrap().offset,
        512
    );
    // A pointer of another context is refused; a pointer that is not device memory fails
    // in the driver. Neither panics.
    let foreign = MemoryPointer::new(emm_core::ContextId(77), p.device_ptr(), 16, None);
    let e = ctx.get_ipc_handle(&foreign).unwrap_err();
    assert!(e.to_string().contains("ask that context's manager"), "{e}");
    let bogus = MemoryPointer::new(ctx.id(), DevicePtr(0x10), 16, None);
    assert!(matches!(
        ctx.get_ipc_handle(&bogus),
        Err(EmmError::Driver(_))
    ));
}

#[test]
fn a_handle_of_the_wrong_length_does_not_deserialize() {
    let g = gpu();
    let ctx = suballocating_context(&g);
    let p = ctx.memalloc(64).unwrap();
    let h = ctx.get_ipc_handle(&p).unwrap();
    let mut json: serde_json::Value = serde_json::to_value(&h).unwrap();
    json["handle"].as_array_mut().unwrap().pop();
    let e = serde_json::from_value::<IpcHandle>(json).unwrap_err();
    assert!(
        e.to_string().contains("64 bytes of a CUDA IPC handle"),
        "{e}"
    );
}
