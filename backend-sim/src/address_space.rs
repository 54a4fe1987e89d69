//! The simulated address space: where each kind of memory takes its addresses. Every range is
//! far from the others, so an address alone says what kind of memory it was; addresses are
//! never reused, so an access to freed memory is always caught (only driver pools hand the
//! same address out again, as CUDA's do).

/// Start of device `d`'s address range: `DEVICE_VA + d * VA_SPAN`.
pub(crate) const DEVICE_VA: u64 = 1 << 48;
/// Start of managed memory's address range (shared by all devices, like UVA).
pub(crate) const MANAGED_VA: u64 = 2 << 48;
/// Start of process `p`'s host range: `HOST_VA + p * VA_SPAN`.
pub(crate) const HOST_VA: u64 = 3 << 48;
/// Start of process `p`'s range for opened IPC handles.
pub(crate) const IPC_VA: u64 = 4 << 48;
/// Start of the range address reservations (`cuMemAddressReserve`) take from, all devices and
/// processes together; it spans [`RESERVE_SPAN`] bytes.
pub(crate) const RESERVE_VA: u64 = 5 << 48;
/// Bytes of address space for reservations: 256 TiB, three thousand 80 GiB reservations.
pub(crate) const RESERVE_SPAN: u64 = 1 << 48;
/// Where the bytes of physical memory (`cuMemCreate`) are kept while it is not mapped; never
/// a device address.
pub(crate) const PHYS_STORE: u64 = 6 << 48;
/// Bytes of address space in each range.
pub(crate) const VA_SPAN: u64 = 1 << 44;

// The store of unmapped bytes and the reservations lie outside every device's range.
const _: () =
    assert!(PHYS_STORE >= RESERVE_VA + RESERVE_SPAN && RESERVE_VA >= IPC_VA + 16 * VA_SPAN);

/// Rounds `n` up to a multiple of `to` (a power of two); `None` on overflow.
#[inline]
pub(crate) fn round_up(n: u64, to: u64) -> Option<u64> {
    Some(n.checked_add(to - 1)? & !(to - 1))
}
