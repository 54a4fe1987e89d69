//! One `check_<rule>` per contract sentence (the sentences are in [`crate::checks::CHECKS`]).
//!
//! Each takes what an operation produced and says what is wrong with it, in a message that
//! names what was asked, what came back and what the rule wants. The system under test
//! ([`crate::sut`]) calls them and files a failure under the check's name.

use std::any::Any;

use emm_core::contract::{EmmError, EmmResult, HostMemory, IpcHandle, MemoryInfo, MemoryPointer};
use emm_core::units::Bytes;
use emm_core::{DevicePtr, Driver};

use crate::backend::Seen;
use crate::checks::CheckId;
use crate::model::Model;
use crate::transition::Op;

/// The alignment every device pointer must have (what `cuMemAlloc` guarantees).
pub const ALIGNMENT: u64 = 256;

/// The message of a panic caught at the plugin boundary.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-text payload".to_string());
    format!("the plugin panicked: {text:?}; a plugin returns errors as values and never panics")
}

/// DESIGN: "`interface_version` is checked when the manager is set".
pub fn check_interface_version(name: &str, factory: u32, manager: u32) -> Result<(), String> {
    for (who, v) in [("factory", factory), ("manager", manager)] {
        emm_core::contract::check_interface_version(name, v)
            .map_err(|e| format!("the {who} reports version {v}: {e}"))?;
    }
    Ok(())
}

/// "256-byte aligned", or aligned to the larger `align` a request asked for.
pub fn check_memalloc_aligned(ptr: DevicePtr, requested: usize, align: u64) -> Result<(), String> {
    let align = align.max(ALIGNMENT);
    if ptr.0.is_multiple_of(align) {
        return Ok(());
    }
    let asked = if align == ALIGNMENT {
        format!("memalloc({requested})")
    } else {
        format!("allocate_aligned({requested}, {align})")
    };
    Err(format!(
        "{asked} returned {ptr}, which is {} bytes past a {align}-byte boundary",
        ptr.0 % align
    ))
}

/// "Allocate on-device memory": at least `requested` bytes, all inside one driver allocation.
pub fn check_memalloc_in_device_memory(
    driver: &dyn Driver,
    memory: &MemoryPointer,
    requested: usize,
) -> Result<(), String> {
    let ptr = memory.device_ptr();
    if memory.size() < requested {
        return Err(format!(
            "memalloc({requested}) returned a pointer of {} bytes; it must hold at least what was asked",
            memory.size()
        ));
    }
    let end = ptr.0.saturating_add(requested as u64);
    // Memory a pool maps granule by granule (cuMemMap) is several driver allocations end to
    // end: every byte must lie in one of them, with no gap.
    let mut at = ptr;
    while at.0 < end {
        let (base, len) = driver.mem_get_address_range(at).map_err(|e| {
            if at == ptr {
                format!("memalloc({requested}) returned {ptr}, which is not device memory: {e}")
            } else {
                format!(
                    "memalloc({requested}) returned {ptr}, but its bytes from {at} on ({} before the end) are not device memory: {e}",
                    Bytes(end - at.0)
                )
            }
        })?;
        let next = base.0.saturating_add(len as u64);
        if next <= at.0 {
            return Err(format!(
                "memalloc({requested}) returned {ptr}: cuMemGetAddressRange({at}) gave ({base}, {}), which does not hold it",
                Bytes(len as u64)
            ));
        }
        at = DevicePtr(next);
    }
    Ok(())
}

/// "never overlapping another live allocation".
pub fn check_memalloc_never_overlaps(
    model: &Model,
    what: &str,
    ptr: DevicePtr,
    requested: usize,
) -> Result<(), String> {
    match model.overlapping(ptr.0, requested as u64) {
        None => Ok(()),
        Some(o) => Err(format!(
            "{what} returned [{:#x}, {:#x}), which overlaps live allocation #{} at [{:#x}, {:#x})",
            ptr.0,
            ptr.0.saturating_add(requested as u64),
            o.buffer,
            o.base,
            o.end
        )),
    }
}

/// "writes to one allocation never change another": bytes read back are the bytes written.
pub fn check_writes_stay_in_their_allocation(
    buffer: u32,
    at: u64,
    expected: u8,
    read: &[u8],
) -> Result<(), String> {
    match read.iter().position(|&b| b != expected) {
        None => Ok(()),
        Some(i) => Err(format!(
            "allocation #{buffer} was written with {expected:#04x} but byte {} reads {:#04x}: something else wrote to it",
            at + i as u64,
            read[i]
        )),
    }
}

/// Size 0 is an [`EmmError::InvalidArgument`] (any error is accepted; a pointer is not).
pub fn check_zero_size_is_an_error<T>(
    operation: &str,
    result: &EmmResult<T>,
) -> Result<(), String> {
    match result {
        Err(_) => Ok(()),
        Ok(_) => Err(format!(
            "{operation}(0) returned memory; a request of 0 bytes must be refused with InvalidArgument"
        )),
    }
}

/// An absurd request is an out-of-memory error (`usize::MAX` may also be InvalidArgument).
pub fn check_out_of_memory_is_an_error<T>(
    operation: &str,
    requested: usize,
    result: &EmmResult<T>,
) -> Result<(), String> {
    match result {
        Err(e) if e.is_out_of_memory() => Ok(()),
        Err(EmmError::InvalidArgument { .. }) if requested == usize::MAX => Ok(()),
        Err(e) => Err(format!(
            "{operation}({}) failed with {e:?}; a request larger than the device must be an out-of-memory error",
            Bytes(requested as u64)
        )),
        Ok(_) => Err(format!(
            "{operation}({}) succeeded; no device has that much memory, so it must be an out-of-memory error",
            Bytes(requested as u64)
        )),
    }
}

/// free ≤ total ≤ the device's memory; unsupported only where the capabilities say so.
pub fn check_get_memory_info_consistent(
    result: &EmmResult<MemoryInfo>,
    advertised: bool,
    device_total: u64,
) -> Result<(), String> {
    match result {
        Ok(i) if i.free > i.total => Err(format!(
            "get_memory_info() says free {} > total {}",
            i.free, i.total
        )),
        Ok(i) if i.total > device_total => Err(format!(
            "get_memory_info() says total {}, more than the device's {}",
            Bytes(i.total),
            Bytes(device_total)
        )),
        Ok(_) => Ok(()),
        Err(EmmError::Unsupported { .. }) if !advertised => Ok(()),
        Err(e) => Err(format!(
            "get_memory_info() failed ({e}) although capabilities().memory_info is {advertised}"
        )),
    }
}

/// The handle names the driver allocation holding `memory`, with the right offset and size.
pub fn check_ipc_handle_addresses_same_bytes(
    driver: &dyn Driver,
    memory: &MemoryPointer,
    handle: &IpcHandle,
) -> Result<(), String> {
    let ptr = memory.device_ptr();
    if handle.size != memory.size() as u64 {
        return Err(format!(
            "the handle for {ptr} says {} bytes; the exported pointer has {}",
            handle.size,
            memory.size()
        ));
    }
    let (base, len) = driver
        .mem_get_address_range(ptr)
        .map_err(|e| format!("the exported pointer {ptr} is not device memory: {e}"))?;
    if base.offset(handle.offset) != ptr {
        return Err(format!(
            "the handle's offset is {}, but {ptr} lies {} bytes into the driver allocation at {base}: an importer would read other bytes",
            handle.offset,
            ptr.0 - base.0
        ));
    }
    if handle.offset + handle.size > len as u64 {
        return Err(format!(
            "offset {} + size {} runs past the driver allocation's {} bytes",
            handle.offset, handle.size, len
        ));
    }
    Ok(())
}

/// `mapped` gives `MappedMemory` with a device pointer; otherwise `PinnedMemory`.
pub fn check_memhostalloc_honours_flags(
    what: &str,
    memory: &HostMemory,
    mapped: bool,
    requested: usize,
) -> Result<(), String> {
    if memory.is_mapped() != mapped {
        return Err(format!(
            "{what} with mapped={mapped} returned {} memory",
            if memory.is_mapped() {
                "mapped"
            } else {
                "pinned (not mapped)"
            }
        ));
    }
    if memory.size() < requested {
        return Err(format!(
            "{what} of {requested} bytes returned {} bytes",
            memory.size()
        ));
    }
    if memory.device_ptr() == Some(DevicePtr::NULL) {
        return Err(format!(
            "{what} returned mapped memory with a null device pointer"
        ));
    }
    Ok(())
}

/// The check a sandbox breach named in an error `message` breaks, if the message names one:
/// a misaligned answer is `memalloc_aligned`'s, an overlap `memalloc_never_overlaps`', an
/// answer outside its chunk `memalloc_in_device_memory`'s, whichever call reports it.
pub fn check_for_breach(message: &str) -> Option<CheckId> {
    use emm_sandbox::Rule;
    [
        (Rule::Misaligned, CheckId::MemallocAligned),
        (Rule::Overlap, CheckId::MemallocNeverOverlaps),
        (Rule::OutsideChunk, CheckId::MemallocInDeviceMemory),
        (Rule::ForeignChunk, CheckId::MemallocInDeviceMemory),
        (Rule::ChunkInUse, CheckId::WritesStayInTheirAllocation),
    ]
    .into_iter()
    .find(|(rule, _)| message.contains(&format!("broke the rule \"{}\"", rule.sentence())))
    .map(|(_, check)| check)
}

/// The check a misuse the backend saw during `op` breaks.
pub fn check_for_seen(seen: &Seen, op: Option<&Op>) -> CheckId {
    match (seen, op) {
        (Seen::Race(_), Some(Op::ProducerConsumer { .. })) => {
            CheckId::ProducerConsumerAcrossStreams
        }
        (Seen::Race(_), Some(Op::Concurrent { .. })) => CheckId::ConcurrentUseNeverOverlaps,
        (Seen::Race(_), _) => CheckId::StreamOrderedReuse,
        (Seen::BadFree(_), _) => CheckId::FinalizerRunsOnce,
        (Seen::OutOfBounds(_), _) => CheckId::MemallocInDeviceMemory,
        (_, Some(Op::Initialize)) => CheckId::InitializeKeepsState,
        (Seen::UseAfterFree(_) | Seen::Other(_), _) => CheckId::WritesStayInTheirAllocation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_came_back_and_what_the_rule_wants() {
        let e = check_memalloc_aligned(DevicePtr(0x1008), 64, ALIGNMENT).unwrap_err();
        assert_eq!(
            e,
            "memalloc(64) returned dptr:0x1008, which is 8 bytes past a 256-byte boundary"
        );
        assert!(check_memalloc_aligned(DevicePtr(0x1100), 64, ALIGNMENT).is_ok());
        let e = check_memalloc_aligned(DevicePtr(0x1100), 64, 4096).unwrap_err();
        assert_eq!(
            e,
            "allocate_aligned(64, 4096) returned dptr:0x1100, which is 256 bytes past a 4096-byte boundary"
        );
        let info = Ok(MemoryInfo { free: 10, total: 5 });
        let e = check_get_memory_info_consistent(&info, true, 100).unwrap_err();
        assert_eq!(e, "get_memory_info() says free 10 > total 5");
        let r: EmmResult<()> = Ok(());
        assert!(check_out_of_memory_is_an_error("memalloc", 1 << 50, &r)
            .unwrap_err()
            .contains("1.0 PiB"));
        let e = check_writes_stay_in_their_allocation(3, 64, 0xab, &[0xab, 0xcd]).unwrap_err();
        assert!(e.contains("byte 65 reads 0xcd"), "{e}");
    }

    #[test]
    fn a_sandbox_breach_is_filed_under_the_check_named_for_its_rule() {
        let m =
            "plugin x broke the rule \"an answer must be aligned as asked\": chunk 1 offset 0x8";
        assert_eq!(check_for_breach(m), Some(CheckId::MemallocAligned));
        let m = "plugin x broke the rule \"an answer must not overlap a live allocation\": ...";
        assert_eq!(check_for_breach(m), Some(CheckId::MemallocNeverOverlaps));
        assert_eq!(check_for_breach("out of memory"), None);
    }

    #[test]
    fn what_the_backend_saw_is_filed_under_the_operation_s_rule() {
        let race = Seen::Race("race".into());
        assert_eq!(check_for_seen(&race, None), CheckId::StreamOrderedReuse);
        let pc = Op::ProducerConsumer {
            items: 1,
            size: crate::transition::Size::One,
        };
        assert_eq!(
            check_for_seen(&race, Some(&pc)),
            CheckId::ProducerConsumerAcrossStreams
        );
        let uaf = Seen::UseAfterFree("uaf".into());
        assert_eq!(
            check_for_seen(&uaf, Some(&Op::Initialize)),
            CheckId::InitializeKeepsState
        );
        assert_eq!(
            check_for_seen(&uaf, None),
            CheckId::WritesStayInTheirAllocation
        );
    }
}
