//! IPC between simulated processes: a handle exported by one process, opened by another,
//! addresses the same bytes through a mapping of its own.
//!
//! Handle layout (64 bytes, little endian): `b"emm-sim\0"`, machine id, exported base,
//! allocation serial, size, device, exporting process, then an FNV-1a checksum of the first 48
//! bytes; the rest is zero. A handle from another machine, a corrupted one or one whose memory
//! was freed is refused.

use emm_core::{CudaCode, DriverResult, IpcMemHandle};

use crate::allocation_table::AllocKind;
use crate::memory::Region;
use crate::state::State;

const MAGIC: &[u8; 8] = b"emm-sim\0";

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn field(h: &[u8; 64], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    u64::from_le_bytes(b)
}

impl State {
    pub(crate) fn ipc_get_mem_handle(&mut self, p: u32, addr: u64) -> DriverResult<IpcMemHandle> {
        self.charge(p, self.cfg.costs.ipc_ns);
        if !self.cfg.supports_ipc {
            return Err(self.err(
                CudaCode::NOT_SUPPORTED,
                "this simulated device does not support IPC",
            ));
        }
        let (base, a) = match self.allocs.containing(addr) {
            Some((base, a)) if a.process == p => (base, a),
            _ => {
                return Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!("{addr:#x} is not device memory of this process"),
                ))
            }
        };
        let device = match a.kind {
            AllocKind::Device { device } => device,
            _ => {
                return Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!(
                    "{addr:#x} is {}; only cuMemAlloc memory can be exported with an IPC handle",
                    a.kind.describe()
                ),
                ))
            }
        };
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(MAGIC);
        h[8..16].copy_from_slice(&self.machine_id.to_le_bytes());
        h[16..24].copy_from_slice(&base.to_le_bytes());
        h[24..32].copy_from_slice(&a.serial.to_le_bytes());
        h[32..40].copy_from_slice(&a.size.to_le_bytes());
        h[40..44].copy_from_slice(&device.to_le_bytes());
        h[44..48].copy_from_slice(&p.to_le_bytes());
        let serial = a.serial;
        let clock = self.processes[p as usize].clock.clone();
        self.ipc_exports.insert(serial, clock);
        let sum = checksum(&h[..48]);
        h[48..56].copy_from_slice(&sum.to_le_bytes());
        Ok(IpcMemHandle(h))
    }

    pub(crate) fn ipc_open_mem_handle(
        &mut self,
        p: u32,
        handle: &IpcMemHandle,
    ) -> DriverResult<u64> {
        self.charge(p, self.cfg.costs.ipc_ns * 10);
        let h = &handle.0;
        if &h[..8] != MAGIC || field(h, 48) != checksum(&h[..48]) || h[56..].iter().any(|b| *b != 0)
        {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                "the IPC handle is corrupt or was not made by ipc_get_mem_handle",
            ));
        }
        if field(h, 8) != self.machine_id {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                "the IPC handle comes from another simulated machine",
            ));
        }
        let (base, serial, size) = (field(h, 16), field(h, 24), field(h, 32));
        let exporter = u32::from_le_bytes([h[44], h[45], h[46], h[47]]);
        if exporter == p {
            return Err(self.err(CudaCode::INVALID_CONTEXT, "an IPC handle cannot be opened in the process that exported it; use the pointer itself"));
        }
        match self.allocs.get(base) {
            Some(a) if a.serial == serial => {}
            _ => {
                return Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!(
                        "the memory behind the IPC handle ({base:#x}) was freed by its exporter"
                    ),
                ))
            }
        }
        if self.processes[p as usize].opened.contains_key(&serial) {
            return Err(self.err(CudaCode::ALREADY_MAPPED, format!("the IPC handle for {base:#x} is already open in this process; close it first or reuse the open pointer")));
        }
        let alias = self.take_va(Region::Ipc(p), size)?;
        if let Some(clock) = self.ipc_exports.get(&serial) {
            let clock = clock.clone();
            self.processes[p as usize].clock.merge(&clock);
        }
        self.insert_alloc(
            alias,
            size,
            0,
            AllocKind::IpcAlias {
                target: base,
                serial,
            },
            p,
        );
        self.processes[p as usize].opened.insert(serial, alias);
        Ok(alias)
    }

    pub(crate) fn ipc_close_mem_handle(&mut self, p: u32, addr: u64) -> DriverResult<()> {
        self.charge(p, self.cfg.costs.ipc_ns);
        let serial = match self.allocs.get(addr) {
            Some(a) if a.process == p => match a.kind {
                AllocKind::IpcAlias { serial, .. } => serial,
                _ => return Err(self.err(CudaCode::INVALID_VALUE, format!("{addr:#x} is {}, not an open IPC mapping", a.kind.describe()))),
            },
            _ => return Err(self.err(CudaCode::INVALID_VALUE, format!("{addr:#x} is not an open IPC mapping of this process (never opened, or closed already)"))),
        };
        let size = self.allocs[addr].size;
        self.allocs.remove(addr);
        self.processes[p as usize].opened.remove(&serial);
        self.retire(addr, size);
        Ok(())
    }
}
