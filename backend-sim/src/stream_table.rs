//! [`StreamTable`]: the machine's streams and events, an owned part of the state: every live
//! stream with its virtual clocks, every live event with what it recorded, and the per-thread
//! default streams made so far. The ordering rules that also need a process's host clock or a
//! context's streams (queuing work, the host waiting) live with the operations in `streams`.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

use emm_core::{DeviceId, Location};

use crate::clock::{Actor, VClock};

/// A live stream.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) process: u32,
    pub(crate) ctx: u32,
    pub(crate) device: u32,
    pub(crate) actor: Actor,
    pub(crate) non_blocking: bool,
    pub(crate) is_default: bool,
    /// A per-thread default stream: blocking, made on first use, never destroyed.
    pub(crate) per_thread: bool,
    /// The virtual time at which the work queued so far completes.
    pub(crate) busy_until: u64,
    pub(crate) clock: VClock,
}

/// A live event.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) process: u32,
    pub(crate) device: u32,
    /// The stream's vector clock and completion time when last recorded.
    pub(crate) recorded: Option<(VClock, u64)>,
}

/// Who touches memory: the host (a CPU load or store) or a stream (a kernel or a copy on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accessor {
    Host,
    Stream(u64),
}

impl Accessor {
    /// Where the accessor runs: the host, or its stream's device.
    pub(crate) fn location(self, streams: &StreamTable) -> Location {
        match self {
            Accessor::Host => Location::Host,
            Accessor::Stream(s) => streams
                .get(s)
                .map_or(Location::Host, |s| Location::Device(DeviceId(s.device))),
        }
    }
}

/// Streams and events by handle, and the per-thread default streams.
///
/// Invariant: every handle in `per_thread` names a live stream with `per_thread` set (such
/// streams are never destroyed).
#[derive(Debug, Default)]
pub(crate) struct StreamTable {
    streams: BTreeMap<u64, Stream>,
    events: BTreeMap<u64, Event>,
    /// Per-thread default streams by (context, thread).
    per_thread: BTreeMap<(u32, u64), u64>,
}

impl StreamTable {
    /// Adds stream `id`.
    pub(crate) fn insert(&mut self, id: u64, stream: Stream) {
        self.streams.insert(id, stream);
    }

    /// Stream `s`, if live.
    #[inline]
    pub(crate) fn get(&self, s: u64) -> Option<&Stream> {
        self.streams.get(&s)
    }

    /// Forgets stream `s`, returning it.
    pub(crate) fn remove(&mut self, s: u64) -> Option<Stream> {
        self.streams.remove(&s)
    }

    /// Every live stream, by handle.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Stream)> {
        self.streams.iter().map(|(&id, s)| (id, s))
    }

    /// The per-thread default stream of `thread` in context `ctx`, once made.
    #[inline]
    pub(crate) fn per_thread(&self, ctx: u32, thread: u64) -> Option<u64> {
        self.per_thread.get(&(ctx, thread)).copied()
    }

    /// Remembers `s` as the per-thread default stream of `thread` in context `ctx`.
    pub(crate) fn set_per_thread(&mut self, ctx: u32, thread: u64, s: u64) {
        debug_assert!(self.streams.get(&s).is_some_and(|st| st.per_thread));
        self.per_thread.insert((ctx, thread), s);
    }

    /// The handle of the live stream whose actor is `actor`.
    pub(crate) fn with_actor(&self, actor: Actor) -> Option<u64> {
        self.iter()
            .find(|(_, s)| s.actor == actor)
            .map(|(id, _)| id)
    }

    /// Adds event `id`.
    pub(crate) fn insert_event(&mut self, id: u64, event: Event) {
        self.events.insert(id, event);
    }

    /// Event `e`, if live.
    #[inline]
    pub(crate) fn event(&self, e: u64) -> Option<&Event> {
        self.events.get(&e)
    }

    /// Forgets event `e`.
    pub(crate) fn remove_event(&mut self, e: u64) {
        self.events.remove(&e);
    }

    /// The number of live events.
    pub(crate) fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Event `e` records stream `s`'s completion time, and its vector clock when races are
    /// tracked (`races`).
    pub(crate) fn record(&mut self, e: u64, s: u64, races: bool) {
        let st = &self.streams[&s];
        let clock = if races {
            st.clock.clone()
        } else {
            VClock::default()
        };
        if let Some(ev) = self.events.get_mut(&e) {
            ev.recorded = Some((clock, st.busy_until));
        }
    }

    /// Stream `s` waits for what event `e` recorded, if anything: its later work is ordered
    /// after it and starts no earlier.
    pub(crate) fn wait_event(&mut self, s: u64, e: u64) {
        if let Some((clock, at)) = &self.events[&e].recorded {
            let st = self.streams.get_mut(&s).expect("a live stream");
            st.clock.merge(clock);
            st.busy_until = st.busy_until.max(*at);
        }
    }
}

/// Stream `s`; the caller resolved it, so it is live.
impl Index<u64> for StreamTable {
    type Output = Stream;

    #[inline]
    fn index(&self, s: u64) -> &Stream {
        &self.streams[&s]
    }
}

/// Stream `s`, mutably; the caller resolved it, so it is live.
impl IndexMut<u64> for StreamTable {
    #[inline]
    fn index_mut(&mut self, s: u64) -> &mut Stream {
        self.streams.get_mut(&s).expect("a live stream")
    }
}
