//! What a simulated machine looks like: devices, memory, costs and faults.

use emm_core::{CudaCode, DeviceId};

use crate::trace::CallKind;

/// One gibibyte.
pub const GIB: u64 = 1 << 30;
/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// The configuration of a simulated machine. Same config and same calls → same results and the
/// same trace, byte for byte.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seed of the one random source the simulator owns (random faults draw from it).
    pub seed: u64,
    /// Number of devices, 1 to 16.
    pub devices: u32,
    /// Memory per device in bytes.
    pub memory_per_device: u64,
    /// Pinned plus pageable host memory the machine has, in bytes.
    pub host_memory: u64,
    /// Driver allocations are rounded up to a multiple of this many bytes (a power of two, at
    /// least 256) for accounting; `cuMemGetInfo` sees the rounded sizes.
    pub granularity: u64,
    /// Page size of managed memory: the unit of residency and migration.
    pub managed_page_size: u64,
    /// Whether devices support virtual memory management (`cuMemCreate`, `cuMemMap`, …); off,
    /// those calls fail with `CUDA_ERROR_NOT_SUPPORTED`.
    pub virtual_memory_management: bool,
    /// The allocation granularity of virtual memory management (a power of two, at least
    /// 4096): reservations, physical memory and mappings are multiples of it. 2 MiB, as on an
    /// H100.
    pub vmm_granularity: u64,
    /// Keep the bytes of memory (reads see what was written). Off, writes are dropped and reads
    /// see the poison pattern: for benchmarks of allocation alone.
    pub track_contents: bool,
    /// Keep the happens-before order of the host and the streams (vector clocks), which race
    /// reports and the stream-ordered reuse of driver pools (`cuMemAllocAsync`) read. Off,
    /// every access counts as ordered: no race is reported, and a driver pool reuses a block
    /// freed on any stream. Each stream's clock holds an entry for every stream ordered
    /// before it, so a run through thousands of streams that wait on one another costs
    /// memory and time quadratic in the streams with it on: turn it off for replays and
    /// benchmarks that measure memory and time only.
    pub track_races: bool,
    /// Keep every traced call in memory (the trace hash is kept either way).
    pub record_trace: bool,
    /// Whether every device can access every other device's memory.
    pub peer_access: bool,
    /// Whether devices support managed memory with concurrent access (and so oversubscription).
    pub concurrent_managed_access: bool,
    /// Whether devices support IPC memory handles.
    pub supports_ipc: bool,
    /// Virtual-time costs of driver calls.
    pub costs: CostModel,
    /// Faults injected from the start.
    pub faults: Vec<Fault>,
    /// Device memory the driver keeps for itself that `cuMemGetInfo` reports as free, as a GPU
    /// does for the page tables and context structures an allocation needs: an allocation
    /// that would reach into the last `driver_reserve` bytes of a device fails with out of
    /// memory. 0 (the default): every byte reported free can be allocated.
    pub driver_reserve: u64,
    /// Whether the driver answers `false` to `Driver::is_simulated`, as a real GPU does: for
    /// tests of what happens only on hardware (the plugin gate), without a GPU.
    pub present_as_hardware: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            devices: 1,
            memory_per_device: 80 * GIB,
            host_memory: 512 * GIB,
            granularity: 256,
            managed_page_size: 64 * 1024,
            virtual_memory_management: true,
            vmm_granularity: 2 * MIB,
            track_contents: true,
            track_races: true,
            record_trace: true,
            peer_access: true,
            concurrent_managed_access: true,
            supports_ipc: true,
            costs: CostModel::default(),
            faults: Vec::new(),
            driver_reserve: 0,
            present_as_hardware: false,
        }
    }
}

impl SimConfig {
    /// An H100-like single-device machine (80 GiB) seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SimConfig {
            seed,
            ..SimConfig::default()
        }
    }

    /// Sets the number of devices (1 to 16).
    pub fn devices(mut self, n: u32) -> Self {
        self.devices = n;
        self
    }

    /// Sets the memory of each device in bytes.
    pub fn memory_per_device(mut self, bytes: u64) -> Self {
        self.memory_per_device = bytes;
        self
    }

    /// Turns contents tracking on or off.
    pub fn track_contents(mut self, on: bool) -> Self {
        self.track_contents = on;
        self
    }

    /// Turns happens-before tracking, and with it race detection, on or off
    /// ([`SimConfig::track_races`]).
    pub fn track_races(mut self, on: bool) -> Self {
        self.track_races = on;
        self
    }

    /// Turns keeping the trace in memory on or off.
    pub fn record_trace(mut self, on: bool) -> Self {
        self.record_trace = on;
        self
    }

    /// Turns virtual memory management on or off.
    pub fn virtual_memory_management(mut self, on: bool) -> Self {
        self.virtual_memory_management = on;
        self
    }

    /// Adds a fault injected from the start.
    pub fn fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// Presents the machine as hardware (`Driver::is_simulated` answers `false`): the
    /// stubbed device of the plugin gate's tests, which take the path a real GPU takes.
    /// Default: off.
    pub fn present_as_hardware(mut self, on: bool) -> Self {
        self.present_as_hardware = on;
        self
    }

    /// Sets the memory the driver keeps beyond what `cuMemGetInfo` counts
    /// ([`SimConfig::driver_reserve`]).
    pub fn driver_reserve(mut self, bytes: u64) -> Self {
        self.driver_reserve = bytes;
        self
    }

    /// Checks the configuration, saying which field is wrong and why.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=16).contains(&self.devices) {
            return Err(format!(
                "SimConfig.devices is {}; the simulator models 1 to 16 devices",
                self.devices
            ));
        }
        if self.memory_per_device == 0 || self.memory_per_device > (1 << 44) {
            return Err(format!(
                "SimConfig.memory_per_device is {} bytes; give 1 byte to 16 TiB",
                self.memory_per_device
            ));
        }
        if self.driver_reserve >= self.memory_per_device {
            return Err(format!(
                "SimConfig.driver_reserve is {} bytes of a {}-byte device, which leaves nothing \
                 to allocate; give less than memory_per_device",
                self.driver_reserve, self.memory_per_device
            ));
        }
        if !self.granularity.is_power_of_two() || self.granularity < 256 {
            return Err(format!(
                "SimConfig.granularity is {}; it must be a power of two of at least 256",
                self.granularity
            ));
        }
        if !self.vmm_granularity.is_power_of_two() || self.vmm_granularity < 4096 {
            return Err(format!(
                "SimConfig.vmm_granularity is {}; it must be a power of two of at least 4096",
                self.vmm_granularity
            ));
        }
        if !self.managed_page_size.is_power_of_two() || self.managed_page_size < 4096 {
            return Err(format!(
                "SimConfig.managed_page_size is {}; it must be a power of two of at least 4096",
                self.managed_page_size
            ));
        }
        Ok(())
    }
}

/// A fault to inject.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Fail the `nth` call (1-based) of `call` — or of any call when `None` — with `code`.
    /// The failed call changes nothing.
    FailNth {
        /// The kind of call counted, or every call.
        call: Option<CallKind>,
        /// Which call fails, counting from 1 after the fault is injected.
        nth: u64,
        /// The error returned.
        code: CudaCode,
    },
    /// Device memory beyond `bytes` in use on `device` (every device when `None`) is out of
    /// memory: allocations that would cross it fail with `CUDA_ERROR_OUT_OF_MEMORY`.
    OutOfMemoryAbove {
        /// The device limited, or every device.
        device: Option<DeviceId>,
        /// The level in bytes.
        bytes: u64,
    },
    /// Fail each call of the listed kinds (every kind when empty) with probability
    /// `per_million / 1e6`, drawn from the simulator's seeded random source.
    Random {
        /// Calls that may fail.
        calls: Vec<CallKind>,
        /// Failure probability in parts per million.
        per_million: u32,
        /// The error returned.
        code: CudaCode,
    },
}

/// Virtual nanoseconds per driver call. The default is [`CostModel::h200`], calibrated on the
/// H200 from emm's own hardware run; [`CostModel::h100`] keeps the first calibration, from
/// published H100 80GB driver-call figures.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// One `cuMemAlloc` or `cuMemFree` of up to 1 MiB (measured 5–8 µs per op on W1 and W3).
    pub alloc_small_ns: u64,
    /// One `cuMemAlloc` or `cuMemFree` of 64 MiB or more (measured 72–88 µs per op on W2,
    /// whose sizes run up to 64 MiB); sizes in between are interpolated on a log scale.
    pub alloc_large_ns: u64,
    /// One `cuMemAllocAsync` or `cuMemFreeAsync` served by the pool (measured 1.0–1.7 µs).
    pub alloc_async_ns: u64,
    /// `cuMemAllocManaged` (4.7 µs at 4 KiB, 33 µs at 256 MiB) fixed part.
    pub managed_alloc_ns: u64,
    /// `cuMemHostAlloc`: fixed part (32 µs at 4 KiB).
    pub host_alloc_ns: u64,
    /// `cuMemHostAlloc` and `cuMemHostRegister`: per byte, in picoseconds (≈ 580 ps/B from 149 ms
    /// per 256 MiB).
    pub host_alloc_ps_per_byte: u64,
    /// `cuMemHostRegister` fixed part (53 µs at 4 KiB).
    pub host_register_ns: u64,
    /// Host-to-device and device-to-host copies, bytes per microsecond (55 GB/s pinned).
    pub copy_bytes_per_us: u64,
    /// Device-to-device copies, bytes per microsecond.
    pub d2d_bytes_per_us: u64,
    /// Managed prefetch to a device, bytes per microsecond (45 GB/s).
    pub prefetch_to_device_bytes_per_us: u64,
    /// Managed prefetch to the host, bytes per microsecond (9 GB/s).
    pub prefetch_to_host_bytes_per_us: u64,
    /// Migration by page faults, bytes per microsecond (3.3 GB/s).
    pub fault_migration_bytes_per_us: u64,
    /// `cuMemAdvise` (2.6 µs per 2 MiB range).
    pub advise_ns: u64,
    /// `cuEventRecord`, `cuStreamWaitEvent` (0.33 µs).
    pub event_op_ns: u64,
    /// `cuEventQuery`, `cuStreamQuery`, an idle synchronize (0.36–0.53 µs).
    pub query_ns: u64,
    /// `cuEventCreate` + `cuEventDestroy` (0.52 µs), split evenly.
    pub event_create_ns: u64,
    /// `cuStreamCreate` + `cuStreamDestroy` (5.8 µs), split evenly.
    pub stream_create_ns: u64,
    /// `cuMemGetInfo` (7.5 µs).
    pub mem_get_info_ns: u64,
    /// `cuIpcGetMemHandle` (0.28 µs); opening costs ten times more.
    pub ipc_ns: u64,
    /// Extra cost of `cuMemAlloc` per peer with access enabled: mapping a new allocation into
    /// every peer is why P2P registration grows quadratically across a 16-GPU node (RMM).
    pub peer_map_ns: u64,
    /// `cuMemAddressReserve` or `cuMemAddressFree`.
    pub vmm_reserve_ns: u64,
    /// `cuMemCreate` or `cuMemRelease` of one granule; larger sizes cost more, as
    /// [`CostModel::vmm_create_ns`] says.
    pub vmm_create_ns: u64,
    /// `cuMemCreate` or `cuMemRelease`: each further granule, in nanoseconds.
    pub vmm_create_per_granule_ns: u64,
    /// `cuMemMap` of one mapping.
    pub vmm_map_ns: u64,
    /// `cuMemUnmap` of one mapping.
    pub vmm_unmap_ns: u64,
    /// `cuMemSetAccess` of one granule; each further granule adds
    /// `vmm_set_access_per_granule_ns`.
    pub vmm_set_access_ns: u64,
    /// `cuMemSetAccess`: each further granule.
    pub vmm_set_access_per_granule_ns: u64,
    /// Any other call.
    pub call_ns: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel::h200()
    }
}

/// Virtual memory management costs in ns, measured on the H200 by the hardware check
/// `vmm_costs` (`cargo test -p emm-cuda --release --test hardware -- --ignored vmm_costs`): reserve (0.9 µs at
/// 2 MiB, 2.9 µs at 64 MiB), create one granule (14.1 µs; 14.5 µs at 32 granules, while a
/// release grows from 13.3 to 57.3 µs: 0.7 µs per further granule on average), map (1.0–1.1 µs),
/// unmap (18.2 µs), set access on one granule (27.2 µs; 51.7 µs at 32: 0.8 µs per further
/// granule). Growing by one granule costs about ten cuMemAlloc calls.
const VMM_COSTS: [u64; 7] = [1_000, 14_000, 700, 1_000, 18_000, 27_000, 800];

impl CostModel {
    /// Calibrated on the H200 (driver 580.159.04, CUDA 13.0) from emm's hardware run of
    /// 2026-11-22: `cuMemAlloc` + `cuMemFree` measured
    /// 4.4 / 45.1 / 4.0 µs per op on W1 / W2 / W3 (the H100 model predicted 1.4–1.8× more), the
    /// driver's async pool 0.95 / 1.02 / 0.92 µs (predicted 1.4–1.5× more). Calls not measured
    /// there keep their H100 costs.
    pub fn h200() -> Self {
        CostModel {
            alloc_small_ns: 4_200,
            alloc_large_ns: 58_000,
            alloc_async_ns: 950,
            ..CostModel::h100()
        }
    }

    /// The first calibration, from H100 80GB figures (driver 580, CUDA 13.0) of the driver's
    /// allocation calls on the standard workloads; virtual memory management was not measured
    /// there and takes the H200's costs.
    pub fn h100() -> Self {
        CostModel {
            alloc_small_ns: 7_000,
            alloc_large_ns: 80_000,
            alloc_async_ns: 1_400,
            managed_alloc_ns: 4_700,
            host_alloc_ns: 32_000,
            host_alloc_ps_per_byte: 580,
            host_register_ns: 53_000,
            copy_bytes_per_us: 55_000,
            d2d_bytes_per_us: 1_500_000,
            prefetch_to_device_bytes_per_us: 45_000,
            prefetch_to_host_bytes_per_us: 9_000,
            fault_migration_bytes_per_us: 3_300,
            advise_ns: 2_600,
            event_op_ns: 330,
            query_ns: 360,
            event_create_ns: 260,
            stream_create_ns: 2_900,
            mem_get_info_ns: 7_500,
            ipc_ns: 280,
            peer_map_ns: 1_000,
            vmm_reserve_ns: VMM_COSTS[0],
            vmm_create_ns: VMM_COSTS[1],
            vmm_create_per_granule_ns: VMM_COSTS[2],
            vmm_map_ns: VMM_COSTS[3],
            vmm_unmap_ns: VMM_COSTS[4],
            vmm_set_access_ns: VMM_COSTS[5],
            vmm_set_access_per_granule_ns: VMM_COSTS[6],
            call_ns: 100,
        }
    }

    /// Cost of one `cuMemCreate` or `cuMemRelease` of `granules` granules.
    pub fn vmm_create_ns(&self, granules: u64) -> u64 {
        self.vmm_create_ns + granules.saturating_sub(1) * self.vmm_create_per_granule_ns
    }

    /// Cost of one `cuMemSetAccess` over `granules` granules.
    pub fn vmm_set_access_ns(&self, granules: u64) -> u64 {
        self.vmm_set_access_ns + granules.saturating_sub(1) * self.vmm_set_access_per_granule_ns
    }

    /// Cost of one `cuMemAlloc` or `cuMemFree` of `size` bytes: flat to 1 MiB, then growing on
    /// a log scale to `alloc_large_ns` at 64 MiB and beyond.
    pub fn alloc_ns(&self, size: u64) -> u64 {
        if size <= MIB {
            return self.alloc_small_ns;
        }
        let steps = (size.min(64 * MIB) as f64 / MIB as f64).log2() / 6.0;
        let span = self.alloc_large_ns.saturating_sub(self.alloc_small_ns) as f64;
        self.alloc_small_ns + (span * steps) as u64
    }

    /// Time to move `bytes` at `bytes_per_us`.
    pub fn transfer_ns(bytes: u64, bytes_per_us: u64) -> u64 {
        bytes.saturating_mul(1000) / bytes_per_us.max(1)
    }

    /// Cost of pinning `bytes` of host memory with a fixed part of `fixed_ns`.
    pub fn pin_ns(&self, fixed_ns: u64, bytes: u64) -> u64 {
        fixed_ns + bytes.saturating_mul(self.host_alloc_ps_per_byte) / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_cost_follows_the_measured_curve() {
        let c = CostModel::default();
        assert_eq!(c.alloc_ns(4096), c.alloc_small_ns);
        assert_eq!(c.alloc_ns(MIB), c.alloc_small_ns);
        assert_eq!(c.alloc_ns(64 * MIB), c.alloc_large_ns);
        assert_eq!(c.alloc_ns(GIB), c.alloc_large_ns);
        let mid = c.alloc_ns(8 * MIB);
        assert!(mid > c.alloc_small_ns && mid < c.alloc_large_ns);
    }

    #[test]
    fn growing_by_mapping_costs_more_than_cu_mem_alloc_as_measured() {
        let c = CostModel::default();
        let grow = |granules: u64| {
            c.vmm_create_ns(granules) + c.vmm_map_ns + c.vmm_set_access_ns(granules)
        };
        // Measured on the H200: 14.1 + 1.1 + 27.2 µs against 4.4 µs for a cuMemAlloc.
        assert_eq!(grow(1), 42_000);
        assert!(grow(1) > 9 * c.alloc_ns(MIB));
        assert!(grow(32) < c.alloc_ns(64 * MIB) * 2);
        assert!(c.vmm_unmap_ns > c.vmm_map_ns);
        assert!(CostModel::h100().alloc_small_ns > CostModel::h200().alloc_small_ns);
    }

    #[test]
    fn validate_names_the_bad_field() {
        let err = SimConfig::new(1).devices(17).validate().unwrap_err();
        assert!(err.contains("devices"), "{err}");
        let mut c = SimConfig::new(1);
        c.granularity = 100;
        assert!(c.validate().unwrap_err().contains("granularity"));
        let err = SimConfig::new(1)
            .memory_per_device(0)
            .validate()
            .unwrap_err();
        assert!(err.contains("memory_per_device is 0"), "{err}");
        let err = SimConfig::new(1)
            .memory_per_device(MIB)
            .driver_reserve(MIB)
            .validate()
            .unwrap_err();
        assert!(err.contains("driver_reserve"), "{err}");
        assert!(SimConfig::new(1).validate().is_ok());
    }
}
