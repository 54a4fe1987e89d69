//! The registry's unit tests (beside it, to keep `registry.rs` short).

use super::*;

fn reg() -> (Registry, u32) {
    let mut r = Registry::default();
    let h = r.add_chunk(DevicePtr(0x10_0000), 0x1000).unwrap();
    (r, h)
}

/// [`reg`], with 64 bytes live at the start of its chunk.
fn reg_with_64_live_bytes() -> (Registry, u32, DevicePtr) {
    let (mut r, h) = reg();
    let p = r
        .check_answer(
            Answer {
                chunk: h,
                offset: 0,
            },
            64,
            256,
        )
        .unwrap();
    r.insert_live(p, 64, h);
    (r, h, p)
}

#[test]
fn answers_are_checked_for_each_rule() {
    let (mut r, h) = reg();
    let a = |offset| Answer { chunk: h, offset };
    let p = r.check_answer(a(0x100), 0x100, 256).unwrap();
    assert_eq!(p, DevicePtr(0x10_0100));
    r.insert_live(p, 0x100, h);
    let rule = |res: Result<DevicePtr, (Rule, String)>| res.unwrap_err().0;
    assert_eq!(rule(r.check_answer(a(0x100), 0x10, 256)), Rule::Overlap);
    assert_eq!(rule(r.check_answer(a(0x0), 0x101, 256)), Rule::Overlap);
    assert_eq!(
        rule(r.check_answer(a(0x80), 0x10, 128)),
        Rule::Misaligned,
        "every answer is aligned to at least 256 bytes"
    );
    assert!(
        r.check_answer(a(0x0), 0x100, 256).is_ok(),
        "adjacent is fine"
    );
    assert!(
        r.check_answer(a(0x200), 0x100, 256).is_ok(),
        "adjacent is fine"
    );
    assert_eq!(rule(r.check_answer(a(0x210), 0x10, 256)), Rule::Misaligned);
    assert_eq!(
        rule(r.check_answer(a(0xf00), 0x101, 256)),
        Rule::OutsideChunk
    );
    assert_eq!(rule(r.check_answer(a(u64::MAX), 1, 1)), Rule::OutsideChunk);
    let foreign = Answer {
        chunk: 9,
        offset: 0,
    };
    assert_eq!(rule(r.check_answer(foreign, 1, 1)), Rule::ForeignChunk);
}

#[test]
fn overlaps_are_found_across_the_levels_of_a_large_chunk() {
    // 64 MiB at a base that is not a multiple of 256: answers are still aligned addresses.
    let mut r = Registry::default();
    let base = 0x4000_0080u64;
    let h = r.add_chunk(DevicePtr(base), 64 << 20).unwrap();
    let a = |addr: u64| Answer {
        chunk: h,
        offset: addr - base,
    };
    let big = 0x4010_0000;
    r.accept(a(big), (8 << 20) + 1, 256).unwrap();
    let rule = |res: Result<DevicePtr, (Rule, String)>| res.map_err(|e| e.0);
    // The one before reaches 8 MiB + 1 byte past its start: the next granule is taken.
    assert_eq!(
        rule(r.check_answer(a(big + (8 << 20)), 1, 256)),
        Err(Rule::Overlap)
    );
    assert!(r.check_answer(a(big + (8 << 20) + 256), 1, 256).is_ok());
    // Ending one byte into it, from far below.
    assert_eq!(
        rule(r.check_answer(a(0x4000_0100), big - 0x4000_0100 + 1, 256)),
        Err(Rule::Overlap)
    );
    assert!(r
        .check_answer(a(0x4000_0100), big - 0x4000_0100, 256)
        .is_ok());
    let e = r.check_answer(a(big + 4096), 16, 256).unwrap_err().1;
    assert!(
        e.contains("overlaps the live allocation at 0x40100000 (8388609 bytes)"),
        "{e}"
    );
    r.remove_live(DevicePtr(big), (8 << 20) + 1).unwrap();
    assert!(r.check_answer(a(big + 4096), 16, 256).is_ok());
    assert_eq!(r.live_count(), 0);
}

#[test]
fn frees_need_the_exact_pointer_and_size_and_chunks_go_only_when_empty() {
    let (mut r, h, p) = reg_with_64_live_bytes();
    assert_eq!(r.release_chunk(h).unwrap_err().0, Rule::ChunkInUse);
    assert!(r.remove_live(p, 65).unwrap_err().contains("64 bytes"));
    assert!(r.remove_live(p.offset(1), 64).is_err());
    assert_eq!(r.remove_live(p, 64).unwrap().origin, h);
    assert!(r.remove_live(p, 64).is_err(), "double free");
    assert_eq!(r.release_chunk(h).unwrap().size, 0x1000);
    assert_eq!(r.release_chunk(h).unwrap_err().0, Rule::ForeignChunk);
    assert_eq!((r.held_bytes, r.chunk_count()), (0, 0));
    let again = r.add_chunk(DevicePtr(0x20_0000), 0x2000).unwrap();
    assert_eq!(again, h, "handles are reused");
}

#[test]
fn orphans_leave_only_when_empty_and_are_foreign_to_the_new_generation() {
    let (mut r, h, p) = reg_with_64_live_bytes();
    let empty = r.add_chunk(DevicePtr(0x30_0000), 0x1000).unwrap();
    r.orphan_all();
    let taken = r.take_empty_orphans();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].base, DevicePtr(0x30_0000));
    assert!(r.chunk(empty).is_none());
    let rule = r
        .check_answer(
            Answer {
                chunk: h,
                offset: 0x100,
            },
            1,
            1,
        )
        .unwrap_err()
        .0;
    assert_eq!(
        rule,
        Rule::ForeignChunk,
        "an orphan is no longer the plugin's"
    );
    r.remove_live(p, 64).unwrap();
    assert_eq!(r.take_empty_orphans().len(), 1);
    assert_eq!(r.held_bytes, 0);
}

#[test]
fn overlap_checks_agree_with_an_ordered_map() {
    use std::collections::BTreeMap;
    // Two 4 MiB chunks, one at a base that is not a multiple of 256.
    let mut r = Registry::default();
    let bases = [0x1000_0000u64, 0x2000_0080];
    let handles: Vec<u32> = bases
        .iter()
        .map(|&b| r.add_chunk(DevicePtr(b), 4 << 20).unwrap())
        .collect();
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut x = 0x0123_4567_89ab_cdefu64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..30_000 {
        let c = usize::from(next() % 2 == 0);
        let (h, base) = (handles[c], bases[c]);
        if next() % 3 == 0 && !model.is_empty() {
            let nth = usize::try_from(next() % model.len() as u64).unwrap();
            let (&start, &size) = model.iter().nth(nth).unwrap();
            assert!(r.remove_live(DevicePtr(start), size).is_ok());
            model.remove(&start);
            continue;
        }
        // Aligned addresses inside the chunk, sizes from 1 byte to 64 KiB.
        let first = base.next_multiple_of(256);
        let addr = first + (next() % ((4 << 20) / 256 - 256)) * 256;
        let size = next() % (64 << 10) + 1;
        let a = Answer {
            chunk: h,
            offset: addr - base,
        };
        let overlaps = model
            .range(..addr + size)
            .next_back()
            .is_some_and(|(&s, &n)| s + n > addr);
        match r.accept(a, size, 256) {
            Ok(p) => {
                assert!(!overlaps, "accepted {addr:#x}+{size} over {model:x?}");
                assert_eq!(p, DevicePtr(addr));
                model.insert(addr, size);
                accepted += 1;
            }
            Err((rule, _)) => {
                let outside = addr + size > base + (4 << 20);
                assert_eq!(
                    rule,
                    if outside {
                        Rule::OutsideChunk
                    } else {
                        Rule::Overlap
                    }
                );
                assert!(overlaps || outside, "refused {addr:#x}+{size}");
                refused += 1;
            }
        }
    }
    assert!(accepted > 1000 && refused > 1000, "{accepted} {refused}");
    assert_eq!(r.live_count(), model.len());
}
