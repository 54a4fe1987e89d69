//! Streams and events on virtual time, with vector clocks for happens-before.
//!
//! Each stream has a virtual clock (`busy_until`) and a vector clock. Work queued on a stream
//! starts after the host issued it and after earlier work on the stream; the legacy default
//! stream also orders itself with every blocking stream of its context, as CUDA's does. An
//! event snapshots a stream's clocks; waiting on it merges them. The host learns about a
//! stream's work only by synchronizing (or by a query that says it is done).
//!
//! The streams and events themselves are the `stream_table` part; what is here also needs the
//! processes' host clocks and the contexts' stream lists.

use emm_core::{CudaCode, DriverResult, StreamId};

use crate::clock::{Actor, VClock};
use crate::state::State;
use crate::stream_table::{Event, Stream};

impl State {
    /// Resolves a stream handle of process `p`: the legacy default stream to the current
    /// context's, the per-thread default stream to this thread's (made on first use).
    pub(crate) fn stream(&mut self, p: u32, stream: StreamId) -> DriverResult<u64> {
        if stream == StreamId::DEFAULT {
            return Ok(self.contexts[self.current_ctx(p) as usize].default_stream);
        }
        if stream == StreamId::PER_THREAD {
            let ctx = self.current_ctx(p);
            let thread = crate::state::thread_key();
            if let Some(s) = self.streams.per_thread(ctx, thread) {
                return Ok(s);
            }
            let s = self.new_stream(p, ctx, false, true);
            self.streams.set_per_thread(ctx, thread, s);
            return Ok(s);
        }
        match self.streams.get(stream.0) {
            Some(s) if s.process == p && !s.is_default && !s.per_thread => Ok(stream.0),
            _ => Err(self.err(
                CudaCode::INVALID_HANDLE,
                format!(
                    "{stream} is not a live stream of this process (destroyed, or never created)"
                ),
            )),
        }
    }

    /// Queues `duration_ns` of work on stream `s`; returns the actor and epoch of that work.
    pub(crate) fn enqueue(&mut self, p: u32, s: u64, duration_ns: u64) -> (Actor, u64) {
        let proc = &self.processes[p as usize];
        let (ctx, is_default, non_blocking) = {
            let st = &self.streams[s];
            (st.ctx, st.is_default, st.non_blocking)
        };
        // Implicit ordering of the legacy default stream with the blocking streams.
        let races = self.cfg.track_races;
        let mut merged = if races {
            proc.clock.clone()
        } else {
            VClock::default()
        };
        let mut start = proc.now;
        if is_default {
            for other in &self.contexts[ctx as usize].streams {
                let o = &self.streams[*other];
                if !o.non_blocking {
                    if races {
                        merged.merge(&o.clock);
                    }
                    start = start.max(o.busy_until);
                }
            }
        } else if !non_blocking {
            let d = &self.streams[self.contexts[ctx as usize].default_stream];
            if races {
                merged.merge(&d.clock);
            }
            start = start.max(d.busy_until);
        }
        let st = &mut self.streams[s];
        st.clock.merge(&merged);
        let epoch = st.clock.tick(st.actor);
        st.busy_until = st.busy_until.max(start) + duration_ns;
        (st.actor, epoch)
    }

    /// The host waits for everything queued on `s` so far.
    pub(crate) fn host_wait_stream(&mut self, p: u32, s: u64) {
        let st = &self.streams[s];
        let proc = &mut self.processes[p as usize];
        if self.cfg.track_races {
            proc.clock.merge(&st.clock);
        }
        proc.now = proc.now.max(st.busy_until);
        let device = st.device;
        self.release_pools_over_threshold(device);
    }

    /// The host waits for every stream of `device` in process `p` (`cuCtxSynchronize`, and
    /// the implicit synchronization of `cuMemFree`).
    pub(crate) fn host_wait_device(&mut self, p: u32, device: u32) {
        let proc = &mut self.processes[p as usize];
        for (_, st) in self.streams.iter() {
            if st.process == p && st.device == device {
                if self.cfg.track_races {
                    proc.clock.merge(&st.clock);
                }
                proc.now = proc.now.max(st.busy_until);
            }
        }
        self.release_pools_over_threshold(device);
    }

    pub(crate) fn stream_create(&mut self, p: u32, non_blocking: bool) -> DriverResult<u64> {
        let ctx = self.current_ctx(p);
        let id = self.new_stream(p, ctx, non_blocking, false);
        self.charge(p, self.cfg.costs.stream_create_ns);
        Ok(id)
    }

    fn new_stream(&mut self, p: u32, ctx: u32, non_blocking: bool, per_thread: bool) -> u64 {
        let id = self.handle();
        let actor = self.actor();
        let device = self.contexts[ctx as usize].device;
        self.streams.insert(
            id,
            Stream {
                process: p,
                ctx,
                device,
                actor,
                non_blocking,
                is_default: false,
                per_thread,
                busy_until: self.processes[p as usize].now,
                clock: VClock::default(),
            },
        );
        self.contexts[ctx as usize].streams.push(id);
        id
    }

    pub(crate) fn stream_destroy(&mut self, p: u32, stream: StreamId) -> DriverResult<()> {
        if stream == StreamId::DEFAULT || stream == StreamId::PER_THREAD {
            return Err(self.err(
                CudaCode::INVALID_HANDLE,
                "a default stream (legacy or per-thread) cannot be destroyed",
            ));
        }
        let s = self.stream(p, stream)?;
        if let Some(st) = self.streams.remove(s) {
            self.contexts[st.ctx as usize].streams.retain(|x| *x != s);
        }
        self.charge(p, self.cfg.costs.stream_create_ns);
        Ok(())
    }

    pub(crate) fn stream_synchronize(&mut self, p: u32, stream: StreamId) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        self.charge(p, self.cfg.costs.query_ns);
        self.host_wait_stream(p, s);
        Ok(())
    }

    pub(crate) fn stream_query(&mut self, p: u32, stream: StreamId) -> DriverResult<bool> {
        let s = self.stream(p, stream)?;
        self.charge(p, self.cfg.costs.query_ns);
        let done = self.streams[s].busy_until <= self.processes[p as usize].now;
        if done {
            self.host_wait_stream(p, s);
        }
        Ok(done)
    }

    pub(crate) fn event(&self, p: u32, event: u64) -> DriverResult<()> {
        match self.streams.event(event) {
            Some(e) if e.process == p => Ok(()),
            _ => Err(self.err(
                CudaCode::INVALID_HANDLE,
                format!("event:{event} is not a live event of this process (destroyed, or never created)"),
            )),
        }
    }

    pub(crate) fn event_create(&mut self, p: u32) -> DriverResult<u64> {
        let id = self.handle();
        let device = self.current_device(p);
        self.streams.insert_event(
            id,
            Event {
                process: p,
                device,
                recorded: None,
            },
        );
        self.charge(p, self.cfg.costs.event_create_ns);
        Ok(id)
    }

    pub(crate) fn event_destroy(&mut self, p: u32, event: u64) -> DriverResult<()> {
        self.event(p, event)?;
        self.streams.remove_event(event);
        self.charge(p, self.cfg.costs.event_create_ns);
        Ok(())
    }

    pub(crate) fn event_record(
        &mut self,
        p: u32,
        event: u64,
        stream: StreamId,
    ) -> DriverResult<()> {
        self.event(p, event)?;
        let s = self.stream(p, stream)?;
        let ev_dev = self.streams.event(event).expect("checked above").device;
        let st_dev = self.streams[s].device;
        if ev_dev != st_dev {
            return Err(self.err(
                CudaCode::INVALID_HANDLE,
                format!(
                    "event:{event} belongs to device {ev_dev} but {stream} to device {st_dev}; record an event of the stream's context"
                ),
            ));
        }
        self.charge(p, self.cfg.costs.event_op_ns);
        self.enqueue(p, s, 0);
        self.streams.record(event, s, self.cfg.track_races);
        Ok(())
    }

    pub(crate) fn stream_wait_event(
        &mut self,
        p: u32,
        stream: StreamId,
        event: u64,
    ) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        self.event(p, event)?;
        self.charge(p, self.cfg.costs.event_op_ns);
        self.streams.wait_event(s, event);
        Ok(())
    }

    pub(crate) fn event_query(&mut self, p: u32, event: u64) -> DriverResult<bool> {
        self.event(p, event)?;
        self.charge(p, self.cfg.costs.query_ns);
        let now = self.processes[p as usize].now;
        let ev = self.streams.event(event).expect("checked above");
        match &ev.recorded {
            None => Ok(true),
            Some((clock, at)) if *at <= now => {
                self.processes[p as usize].clock.merge(clock);
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    pub(crate) fn event_synchronize(&mut self, p: u32, event: u64) -> DriverResult<()> {
        self.event(p, event)?;
        self.charge(p, self.cfg.costs.query_ns);
        let ev = self.streams.event(event).expect("checked above");
        if let Some((clock, at)) = &ev.recorded {
            let proc = &mut self.processes[p as usize];
            proc.clock.merge(clock);
            proc.now = proc.now.max(*at);
            let device = ev.device;
            self.release_pools_over_threshold(device);
        }
        Ok(())
    }
}
