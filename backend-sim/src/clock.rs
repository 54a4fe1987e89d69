//! Vector clocks: the happens-before order between the host and streams, for race detection.

use std::collections::BTreeMap;

/// An actor that touches memory: the host thread of a process, or a stream.
pub(crate) type Actor = u32;

/// A vector clock over actors; a missing entry is 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VClock(BTreeMap<Actor, u64>);

impl VClock {
    /// The component of `actor`.
    #[inline]
    pub(crate) fn get(&self, actor: Actor) -> u64 {
        self.0.get(&actor).copied().unwrap_or(0)
    }

    /// Advances `actor`'s own component and returns the new epoch.
    #[inline]
    pub(crate) fn tick(&mut self, actor: Actor) -> u64 {
        let e = self.0.entry(actor).or_insert(0);
        *e += 1;
        *e
    }

    /// Takes the component-wise maximum with `other`: everything `other` has seen, this has now.
    pub(crate) fn merge(&mut self, other: &VClock) {
        for (&actor, &epoch) in &other.0 {
            let e = self.0.entry(actor).or_insert(0);
            if *e < epoch {
                *e = epoch;
            }
        }
    }

    /// Whether the access `(actor, epoch)` happens before everything this clock does next.
    #[inline]
    pub(crate) fn has_seen(&self, actor: Actor, epoch: u64) -> bool {
        self.get(actor) >= epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_orders_and_tick_advances() {
        let mut a = VClock::default();
        let mut b = VClock::default();
        let ea = a.tick(1);
        assert!(!b.has_seen(1, ea));
        b.merge(&a);
        assert!(b.has_seen(1, ea));
        let eb = b.tick(2);
        assert_eq!(eb, 1);
        assert!(!a.has_seen(2, eb));
    }
}
