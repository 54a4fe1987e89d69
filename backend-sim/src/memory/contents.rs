//! The copies and fills that change what memory holds (`cuMemcpy*`, `cuMemsetD8`, host loads
//! and stores): each access is checked, then the bytes move in the `byte_store` part.

use emm_core::{DriverResult, StreamId};

use crate::allocation_table::AllocKind;
use crate::config::CostModel;
use crate::state::State;
use crate::stream_table::Accessor;

/// A copy or set as it starts.
struct Transfer {
    /// The stream it runs on.
    stream: u64,
    /// No stream was given: the synchronous form of the call.
    sync: bool,
    /// What moving its bytes costs.
    ns: u64,
}

impl State {
    // ---- copies ----------------------------------------------------------------------------

    /// Starts a copy or set of `size` bytes on `stream` (or synchronously on the default
    /// stream) that moves `bytes_per_us`: charges the call, and gives `None` for 0 bytes, which
    /// touch nothing.
    fn start_transfer(
        &mut self,
        p: u32,
        stream: Option<StreamId>,
        size: u64,
        bytes_per_us: u64,
    ) -> DriverResult<Option<Transfer>> {
        let s = self.stream(p, stream.unwrap_or(StreamId::DEFAULT))?;
        self.charge(p, self.cfg.costs.call_ns);
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(Transfer {
            stream: s,
            sync: stream.is_none(),
            ns: CostModel::transfer_ns(size, bytes_per_us),
        }))
    }

    pub(crate) fn memcpy_htod(
        &mut self,
        p: u32,
        dst: u64,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let bandwidth = self.cfg.costs.copy_bytes_per_us;
        let Some(t) = self.start_transfer(p, stream, src.len() as u64, bandwidth)? else {
            return Ok(());
        };
        // CUDA's synchronous form from pageable memory waits for the stream's earlier work,
        // stages the bytes and returns: the copy itself may still be in flight.
        if t.sync {
            self.host_wait_stream(p, t.stream);
        }
        let on = Accessor::Stream(t.stream);
        let target = self.access(p, on, dst, src.len() as u64, true, false, t.ns)?;
        self.contents.write(target, src);
        Ok(())
    }

    pub(crate) fn memcpy_dtoh(
        &mut self,
        p: u32,
        dst: &mut [u8],
        src: u64,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let bandwidth = self.cfg.costs.copy_bytes_per_us;
        let Some(t) = self.start_transfer(p, stream, dst.len() as u64, bandwidth)? else {
            return Ok(());
        };
        let on = Accessor::Stream(t.stream);
        let target = self.access(p, on, src, dst.len() as u64, false, false, t.ns)?;
        self.contents.read(target, dst);
        // A pageable destination holds the bytes when the call returns: the host waits.
        self.host_wait_stream(p, t.stream);
        Ok(())
    }

    pub(crate) fn memcpy_dtod(
        &mut self,
        p: u32,
        dst: u64,
        src: u64,
        size: u64,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let bandwidth = self.cfg.costs.d2d_bytes_per_us;
        let Some(t) = self.start_transfer(p, stream, size, bandwidth)? else {
            return Ok(());
        };
        // Resolve both ends before touching either, so a bad destination changes nothing.
        self.resolve(p, dst, size, true, false)?;
        let from = self.access(p, Accessor::Stream(t.stream), src, size, false, false, t.ns)?;
        let to = self.access(p, Accessor::Stream(t.stream), dst, size, true, false, 0)?;
        if self.contents.tracks() {
            let mut buf = vec![0u8; size as usize];
            self.contents.read(from, &mut buf);
            self.contents.write(to, &buf);
        }
        // A device-to-device copy never synchronizes the host, even in its synchronous form.
        Ok(())
    }

    pub(crate) fn memset_d8(
        &mut self,
        p: u32,
        dst: u64,
        value: u8,
        size: u64,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let bandwidth = self.cfg.costs.d2d_bytes_per_us;
        let Some(t) = self.start_transfer(p, stream, size, bandwidth)? else {
            return Ok(());
        };
        // cuMemsetD8 runs as a kernel: it needs device-accessible memory (a host range only
        // while it is mapped), faults managed pages over, and needs peer access across devices.
        let target = self.access(p, Accessor::Stream(t.stream), dst, size, true, true, t.ns)?;
        self.contents.fill(target, value, size);
        // cuMemsetD8 is asynchronous with respect to the host unless it sets pinned host memory.
        let pinned = self
            .allocs
            .containing(target)
            .is_some_and(|(_, a)| matches!(a.kind, AllocKind::Pinned { .. }));
        if t.sync && pinned {
            self.host_wait_stream(p, t.stream);
        }
        Ok(())
    }

    pub(crate) fn host_read(&mut self, p: u32, src: u64, dst: &mut [u8]) -> DriverResult<()> {
        self.charge(p, self.cfg.costs.call_ns);
        if dst.is_empty() {
            return Ok(());
        }
        let target = self.access(p, Accessor::Host, src, dst.len() as u64, false, false, 0)?;
        self.contents.read(target, dst);
        Ok(())
    }

    pub(crate) fn host_write(&mut self, p: u32, dst: u64, src: &[u8]) -> DriverResult<()> {
        self.charge(p, self.cfg.costs.call_ns);
        if src.is_empty() {
            return Ok(());
        }
        let target = self.access(p, Accessor::Host, dst, src.len() as u64, true, false, 0)?;
        self.contents.write(target, src);
        Ok(())
    }
}
