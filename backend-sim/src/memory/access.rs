//! The checks on every access: an address resolved to its allocation (use after free, out of
//! bounds, wrong device, no peer access), its ordering on a stream, and races between streams.
//!
//! Each allocation remembers its recent accesses and finds a race among them
//! (`Alloc::record_access`); the checks here supply the accessor's vector clock (its process's
//! host or its stream), name the actors, and record what they find in the `audit` part.

use emm_core::{CudaCode, DriverResult, StreamId};

use crate::allocation_table::{Access, AllocKind};
use crate::config::CostModel;
use crate::report::Violation;
use crate::state::State;
use crate::stream_table::Accessor;

impl State {
    /// Checks an access of `len` bytes at `addr` by `who`, returning the base of the allocation
    /// that holds the bytes and the address inside it (translated through IPC mappings).
    /// `device_side`: the access comes from the device (a kernel or a copy engine).
    pub(crate) fn resolve(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        device_side: bool,
        kernel: bool,
    ) -> DriverResult<(u64, u64)> {
        let call = self.call.name();
        let caller = self.caller;
        let Some((base, a)) = self.allocs.containing(addr) else {
            if self.allocs.was_freed(addr) {
                self.violate(Violation::UseAfterFree { call, addr, caller });
                return Err(self.err(
                    CudaCode::ILLEGAL_ADDRESS,
                    format!("{addr:#x} was freed; it is used after free"),
                ));
            }
            self.violate(Violation::OutOfBounds {
                call,
                addr,
                len,
                caller,
            });
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} is not inside any live allocation"),
            ));
        };
        // `addr` is inside the allocation, so `room` is exact; `addr + len` could wrap for an
        // absurd `len` and pass (found by fuzz/fuzz_targets/sim_driver_ops.rs).
        let room = (base + a.size).saturating_sub(addr);
        if len > room {
            let msg = format!(
                "{len} bytes at {addr:#x} run {} bytes past the end of {} ({} bytes at {base:#x})",
                len - room,
                a.kind.describe(),
                a.size
            );
            self.violate(Violation::OutOfBounds {
                call,
                addr,
                len,
                caller,
            });
            return Err(self.err(CudaCode::INVALID_VALUE, msg));
        }
        if a.process != p {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{addr:#x} belongs to process {}; open an IPC handle to use it here",
                    a.process
                ),
            ));
        }
        match &a.kind {
            AllocKind::Device { .. } | AllocKind::PoolBlock { .. } | AllocKind::Reserved(_)
                if !device_side =>
            {
                Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!(
                        "{addr:#x} is {}; the host cannot load or store it: copy it with memcpy",
                        a.kind.describe()
                    ),
                ))
            }
            AllocKind::Pinned { .. } | AllocKind::Pageable
                if kernel && !self.host_mapped(a, addr, len) =>
            {
                Err(self.err(
                    CudaCode::ILLEGAL_ADDRESS,
                    format!(
                        "{addr:#x} is {} not mapped into the device; a kernel cannot touch it",
                        a.kind.describe()
                    ),
                ))
            }
            AllocKind::IpcAlias { target, serial } => {
                let (target, serial) = (*target, *serial);
                let off = addr - base;
                match self.allocs.get(target) {
                    Some(t) if t.serial == serial => Ok((target, target + off)),
                    _ => {
                        self.violate(Violation::UseAfterFree { call, addr, caller });
                        Err(self.err(
                            CudaCode::ILLEGAL_ADDRESS,
                            format!("{addr:#x} maps IPC memory that its exporter freed"),
                        ))
                    }
                }
            }
            AllocKind::Reserved(_) => self
                .check_mapped(base, addr, len, None)
                .map(|()| (base, addr)),
            _ => Ok((base, addr)),
        }
    }

    /// Records a host-side write-like touch of `start..end` in the allocation at `base` (a
    /// free or an unpin), reporting any unordered stream access as a race.
    pub(super) fn host_touch(&mut self, p: u32, base: u64, start: u64, end: u64, op: &'static str) {
        let pr = &mut self.processes[p as usize];
        let (actor, epoch) = (pr.host_actor, pr.clock.tick(pr.host_actor));
        self.check_races(base, start, end, actor, epoch, true, op, Accessor::Host);
    }

    /// A kernel on stream `s` may touch another device's memory only once its context has
    /// enabled peer access to that device.
    pub(super) fn check_peer_access(
        &mut self,
        base: u64,
        addr: u64,
        len: u64,
        s: u64,
    ) -> DriverResult<()> {
        let owner = match self.allocs.get(base).map(|a| &a.kind) {
            Some(AllocKind::Device { device } | AllocKind::PoolBlock { device, .. }) => *device,
            Some(AllocKind::Reserved(_)) => {
                // Mapped memory is reachable from the devices cuMemSetAccess names.
                let device = self.streams[s].device;
                return self.check_mapped(base, addr, len, Some(device));
            }
            _ => return Ok(()),
        };
        let st = &self.streams[s];
        if owner == st.device || self.contexts[st.ctx as usize].peers.contains(&owner) {
            return Ok(());
        }
        let reason = format!(
            "device {} has no access to device {owner}'s memory; call enable_peer_access first",
            st.device
        );
        let (call, caller) = (self.call.name(), self.caller);
        self.violate(Violation::PeerAccess {
            call,
            addr: base,
            caller,
            reason: reason.clone(),
        });
        Err(self.err(CudaCode::ILLEGAL_ADDRESS, reason))
    }

    /// Records an access and reports a race with any earlier unordered conflicting access.
    #[allow(
        clippy::too_many_arguments,
        reason = "one access is all of these facts"
    )]
    pub(crate) fn check_races(
        &mut self,
        base: u64,
        start: u64,
        end: u64,
        actor: u32,
        epoch: u64,
        write: bool,
        op: &'static str,
        who: Accessor,
    ) {
        if !self.cfg.track_races {
            return;
        }
        let clock = match who {
            Accessor::Host => {
                &self
                    .processes
                    .iter()
                    .find(|pr| pr.host_actor == actor)
                    .expect("host actor")
                    .clock
            }
            Accessor::Stream(s) => &self.streams[s].clock,
        };
        let Some(alloc) = self.allocs.get_mut(base) else {
            return;
        };
        let access = Access {
            start,
            end,
            actor,
            epoch,
            write,
            op,
        };
        let race = alloc.record_access(access, clock);
        if let Some((addr, first_actor, first_op)) = race {
            let name = |st: &State, a: u32| {
                if st.processes.iter().any(|pr| pr.host_actor == a) {
                    "the host".to_string()
                } else {
                    st.streams
                        .with_actor(a)
                        .map_or_else(|| "a destroyed stream".into(), |id| format!("stream:{id}"))
                }
            };
            let first = format!("{first_op} on {}", name(self, first_actor));
            let second = format!("{op} on {}", name(self, actor));
            self.violate(Violation::Race {
                addr,
                first,
                second,
            });
        }
    }

    /// One access by `who` to `len` bytes at `addr`: resolves it, migrates managed pages as
    /// needed, orders it (queuing `duration_ns` of work on a stream), and checks for races.
    #[allow(
        clippy::too_many_arguments,
        reason = "one access is all of these facts"
    )]
    pub(crate) fn access(
        &mut self,
        p: u32,
        who: Accessor,
        addr: u64,
        len: u64,
        write: bool,
        kernel: bool,
        duration_ns: u64,
    ) -> DriverResult<u64> {
        let (base, target) = self.resolve(p, addr, len, who != Accessor::Host, kernel)?;
        if let (true, Accessor::Stream(s)) = (kernel, who) {
            self.check_peer_access(base, target, len, s)?;
        }
        let migrate = kernel || who == Accessor::Host;
        let migration_ns = self.touch_managed(base, target, len, who, migrate, write);
        let (actor, epoch) = match who {
            Accessor::Host => {
                self.charge(p, migration_ns);
                let pr = &mut self.processes[p as usize];
                (pr.host_actor, pr.clock.tick(pr.host_actor))
            }
            Accessor::Stream(s) => self.enqueue(p, s, duration_ns + migration_ns),
        };
        let op = self.call.name();
        self.check_races(base, target, target + len, actor, epoch, write, op, who);
        Ok(target)
    }

    // ---- contents --------------------------------------------------------------------------
    /// A kernel on `stream` reading or writing `len` bytes at `addr`.
    pub(crate) fn device_access(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        stream: StreamId,
        write: bool,
    ) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        self.charge(p, self.cfg.costs.call_ns);
        if len == 0 {
            return Ok(());
        }
        let ns = CostModel::transfer_ns(len, self.cfg.costs.d2d_bytes_per_us);
        self.access(p, Accessor::Stream(s), addr, len, write, true, ns)?;
        Ok(())
    }
}
