//! IPC: handles opened in another process, and opened only after they are made.

use super::*;

#[test]
fn an_ipc_handle_opened_in_another_process_addresses_the_same_bytes() {
    let exporter = gpu();
    let importer = exporter.process();
    let a = exporter.mem_alloc(1 << 20).unwrap();
    exporter
        .memcpy_htod(a.offset(4096), b"shared bytes", None)
        .unwrap();
    // A handle for a pointer inside the allocation names the whole allocation, as in CUDA.
    let h = exporter.ipc_get_mem_handle(a.offset(4096)).unwrap();
    let opened = importer.ipc_open_mem_handle(&h).unwrap();
    assert_ne!(opened, a, "another process maps it at its own address");
    let mut back = [0; 12];
    importer
        .memcpy_dtoh(&mut back, opened.offset(4096), None)
        .unwrap();
    assert_eq!(&back, b"shared bytes");
    assert_eq!(
        code(importer.ipc_open_mem_handle(&h)),
        CudaCode::ALREADY_MAPPED
    );
    assert_eq!(
        code(exporter.ipc_open_mem_handle(&h)),
        CudaCode::INVALID_CONTEXT
    );
    // The importer cannot use the exporter's address directly.
    assert_eq!(
        code(importer.memcpy_dtoh(&mut back, a, None)),
        CudaCode::INVALID_VALUE
    );
    importer.ipc_close_mem_handle(opened).unwrap();
    assert_eq!(
        code(importer.ipc_close_mem_handle(opened)),
        CudaCode::INVALID_VALUE
    );
    let mut corrupt = h;
    corrupt.0[20] ^= 1;
    assert_eq!(
        code(importer.ipc_open_mem_handle(&corrupt)),
        CudaCode::INVALID_VALUE
    );
    exporter.mem_free(a).unwrap();
    assert_eq!(
        code(importer.ipc_open_mem_handle(&h)),
        CudaCode::INVALID_VALUE,
        "freed"
    );
    let other_machine = gpu().process();
    assert_eq!(
        code(other_machine.ipc_open_mem_handle(&h)),
        CudaCode::INVALID_VALUE
    );
}

#[test]
fn opening_an_ipc_handle_happens_after_making_it() {
    let exporter = gpu();
    let importer = exporter.process();
    let a = exporter.mem_alloc(4096).unwrap();
    exporter.memcpy_htod(a, &[1; 4096], None).unwrap();
    // The copy may still be in flight when cuMemcpyHtoD returns: finish it before exporting.
    exporter.stream_synchronize(StreamId::DEFAULT).unwrap();
    let h = exporter.ipc_get_mem_handle(a).unwrap();
    let opened = importer.ipc_open_mem_handle(&h).unwrap();
    importer.memcpy_dtoh(&mut [0; 4096], opened, None).unwrap();
    assert_eq!(
        exporter.report().races().count(),
        0,
        "{}",
        exporter.report()
    );
    // A write by the exporter after the handle was sent is ordered with neither the importer's
    // earlier read nor its later write.
    exporter.memset_d8(a, 2, 4096, None).unwrap();
    importer.memset_d8(opened, 3, 4096, None).unwrap();
    assert_eq!(
        exporter.report().races().count(),
        2,
        "{}",
        exporter.report()
    );
}
