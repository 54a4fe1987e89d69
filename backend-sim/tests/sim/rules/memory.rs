//! Device memory and its contents: alignment, sizes, out of memory, poison, bad frees and
//! copies.

use super::*;

#[test]
fn memory_holds_what_was_written() {
    let g = gpu();
    let a = g.mem_alloc(10_000).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    g.memcpy_htod(a, &data, None).unwrap();
    let mut back = vec![0; 10_000];
    g.memcpy_dtoh(&mut back, a, None).unwrap();
    assert_eq!(back, data);
    let b = g.mem_alloc(10_000).unwrap();
    g.memcpy_dtod(b, a.offset(100), 5000, None).unwrap();
    let mut part = vec![0; 5000];
    g.memcpy_dtoh(&mut part, b, None).unwrap();
    assert_eq!(part, data[100..5100]);
    g.memset_d8(b.offset(10), 0x42, 20, None).unwrap();
    let mut set = [0u8; 40];
    g.memcpy_dtoh(&mut set, b, None).unwrap();
    assert_eq!(&set[..10], &data[100..110]);
    assert!(set[10..30].iter().all(|&x| x == 0x42));
    g.mem_free(a).unwrap();
    g.mem_free(b).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn allocations_are_aligned_and_never_overlap() {
    let g = gpu();
    let mut got: Vec<(u64, u64)> = Vec::new();
    for size in [1usize, 255, 256, 257, 4096, 1 << 20, 3] {
        let p = g.mem_alloc(size).unwrap();
        assert_eq!(p.0 % 256, 0, "{p} not 256-byte aligned");
        for (b, s) in &got {
            assert!(p.0 >= b + s || p.0 + size as u64 <= *b, "{p} overlaps");
        }
        got.push((p.0, size as u64));
    }
}

#[test]
fn zero_and_absurd_sizes_are_errors_not_panics() {
    let g = gpu();
    assert_eq!(code(g.mem_alloc(0)), CudaCode::INVALID_VALUE);
    let e = g.mem_alloc(1 << 50).unwrap_err();
    assert_eq!(e.code, CudaCode::OUT_OF_MEMORY);
    assert!(e.to_string().contains("1.0 PiB"), "{e}");
    assert_eq!(code(g.mem_alloc(usize::MAX)), CudaCode::OUT_OF_MEMORY);
    assert_eq!(code(g.mem_alloc_managed(0, true)), CudaCode::INVALID_VALUE);
    assert_eq!(
        code(g.mem_alloc_managed(usize::MAX, true)),
        CudaCode::OUT_OF_MEMORY
    );
    assert_eq!(
        code(g.host_alloc(0, HostAllocFlags::default())),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        code(g.host_alloc(usize::MAX, HostAllocFlags::default())),
        CudaCode::OUT_OF_MEMORY
    );
    assert_eq!(
        code(g.mem_alloc_async(usize::MAX, StreamId::DEFAULT)),
        CudaCode::OUT_OF_MEMORY
    );
    // Still usable afterwards.
    let p = g.mem_alloc(100).unwrap();
    g.mem_free(p).unwrap();
}

#[test]
fn out_of_memory_leaves_the_device_usable_and_frees_make_room() {
    let g = gpu();
    let a = g.mem_alloc((GIB / 2) as usize).unwrap();
    let b = g.mem_alloc((GIB / 2) as usize).unwrap();
    let e = g.mem_alloc(1).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    g.mem_free(a).unwrap();
    let c = g.mem_alloc(1).unwrap();
    for p in [b, c] {
        g.mem_free(p).unwrap();
    }
    assert_eq!(g.mem_get_info().unwrap().free, GIB);
}

#[test]
fn freed_memory_is_poisoned_and_use_after_free_is_reported() {
    let g = gpu();
    let a = g.mem_alloc(64).unwrap();
    g.memcpy_htod(a, &[1; 64], None).unwrap();
    g.mem_free(a).unwrap();
    let mut buf = [0u8; 8];
    let e = g.memcpy_dtoh(&mut buf, a, None).unwrap_err();
    assert_eq!(e.code, CudaCode::ILLEGAL_ADDRESS);
    assert!(
        matches!(g.report().violations[0], Violation::UseAfterFree { addr, .. } if addr == a.0)
    );
    // Stream-ordered memory that is reused comes back poisoned, not with the old bytes.
    let s = g.stream_create(false).unwrap();
    let b = g.mem_alloc_async(64, s).unwrap();
    g.memcpy_htod(b, &[9; 64], Some(s)).unwrap();
    g.mem_free_async(b, s).unwrap();
    let c = g.mem_alloc_async(64, s).unwrap();
    assert_eq!(c, b, "the pool reuses the block on the same stream");
    g.memcpy_dtoh(&mut buf, c, Some(s)).unwrap();
    assert_eq!(buf, [POISON; 8]);
    g.mem_free_async(c, s).unwrap();
    g.stream_destroy(s).unwrap();
}

#[test]
fn double_free_and_interior_free_are_typed_errors_and_violations() {
    let g = gpu();
    let a = g.mem_alloc(1024).unwrap();
    assert_eq!(code(g.mem_free(a.offset(256))), CudaCode::INVALID_VALUE);
    g.mem_free(a).unwrap();
    let e = g.mem_free(a).unwrap_err();
    assert!(e.to_string().contains("double free"), "{e}");
    assert_eq!(
        code(g.mem_free(DevicePtr(0xdead_beef))),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(code(g.mem_free(DevicePtr::NULL)), CudaCode::INVALID_VALUE);
    let v = g.report().violations;
    assert!(matches!(v[0], Violation::InvalidFree { .. }));
    assert!(matches!(v[1], Violation::DoubleFree { .. }));
    assert!(matches!(v[2], Violation::InvalidFree { .. }));
    // A host pointer is not device memory.
    let h = g.host_alloc(64, HostAllocFlags::default()).unwrap();
    assert_eq!(code(g.mem_free(DevicePtr(h.0))), CudaCode::INVALID_VALUE);
    assert_eq!(
        code(g.host_free(emm_core::HostPtr(h.0 + 1))),
        CudaCode::INVALID_VALUE
    );
    g.host_free(h).unwrap();
}

#[test]
fn out_of_bounds_copies_are_refused_and_change_nothing() {
    let g = gpu();
    let a = g.mem_alloc(100).unwrap();
    g.memcpy_htod(a, &[7; 100], None).unwrap();
    assert_eq!(
        code(g.memcpy_htod(a.offset(50), &[1; 51], None)),
        CudaCode::INVALID_VALUE
    );
    let b = g.mem_alloc(10).unwrap();
    assert_eq!(
        code(g.memcpy_dtod(b, a, 100, None)),
        CudaCode::INVALID_VALUE
    );
    let mut back = [0u8; 100];
    g.memcpy_dtoh(&mut back, a, None).unwrap();
    assert_eq!(back, [7; 100]);
    assert!(g
        .report()
        .violations
        .iter()
        .all(|v| matches!(v, Violation::OutOfBounds { .. })));
    assert_eq!(g.report().violations.len(), 2);
}

#[test]
fn the_host_cannot_load_device_memory() {
    let g = gpu();
    let a = g.mem_alloc(16).unwrap();
    let e = g.host_read(a.as_host(), &mut [0; 4]).unwrap_err();
    assert!(e.to_string().contains("copy it with memcpy"), "{e}");
}
