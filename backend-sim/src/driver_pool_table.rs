//! [`DriverPools`]: the machine's driver memory pools (`cuMemPoolCreate`, each device's default
//! pool), an owned part of the state. It keeps each pool's free blocks and byte counts; the
//! device accounting, the streams' ordering and the errors stay with the state, which asks
//! this part what a call changes and applies the rest.

use std::collections::BTreeMap;

use crate::clock::Actor;

/// A block freed back to its pool, kept for reuse.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreeBlock {
    /// The stream actor and epoch of the free, when it was stream-ordered: another stream may
    /// take the block only once it has seen that point.
    pub(crate) freed_on: Option<(Actor, u64)>,
    /// The virtual time at which the free completes; the block is released no earlier.
    pub(crate) done_at: u64,
}

/// One driver pool.
///
/// Invariants: `reserved` is the bytes of its live blocks (`used`) plus those of its `free`
/// blocks, all counted against its device; a destroyed pool keeps no free block and is
/// forgotten once `used` reaches 0.
#[derive(Debug)]
pub(crate) struct Pool {
    pub(crate) device: u32,
    pub(crate) is_default: bool,
    pub(crate) destroyed: bool,
    pub(crate) release_threshold: u64,
    pub(crate) reserved: u64,
    pub(crate) used: u64,
    /// Free blocks by (reserved size, base).
    pub(crate) free: BTreeMap<(u64, u64), FreeBlock>,
}

impl Pool {
    fn new(device: u32, is_default: bool) -> Self {
        Pool {
            device,
            is_default,
            destroyed: false,
            release_threshold: 0,
            reserved: 0,
            used: 0,
            free: BTreeMap::new(),
        }
    }
}

/// The machine's driver pools by handle.
#[derive(Debug, Default)]
pub(crate) struct DriverPools {
    pools: BTreeMap<u64, Pool>,
}

impl DriverPools {
    /// Adds an empty pool on `device` under handle `id`.
    pub(crate) fn create(&mut self, id: u64, device: u32, is_default: bool) {
        self.pools.insert(id, Pool::new(device, is_default));
    }

    /// Pool `id`, if it is live (not destroyed).
    pub(crate) fn live(&self, id: u64) -> Option<&Pool> {
        self.pools.get(&id).filter(|pl| !pl.destroyed)
    }

    /// Pool `id`, live or destroyed with blocks still in use.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Pool> {
        self.pools.get_mut(&id)
    }

    /// Every pool, by handle.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Pool)> {
        self.pools.iter().map(|(&id, pl)| (id, pl))
    }

    /// Takes from pool `id` the smallest free block of at least `reserved` bytes and at most
    /// twice that which `reusable` accepts; returns its (size, base).
    pub(crate) fn take_free_block(
        &mut self,
        id: u64,
        reserved: u64,
        reusable: impl Fn(&FreeBlock) -> bool,
    ) -> Option<(u64, u64)> {
        let pl = self.pools.get_mut(&id)?;
        let key = pl
            .free
            .range((reserved, 0)..)
            .take_while(|((sz, _), _)| *sz <= reserved.saturating_mul(2))
            .find(|(_, fb)| reusable(fb))
            .map(|(k, _)| *k)?;
        pl.free.remove(&key);
        Some(key)
    }

    /// A block of `reserved` bytes at `base` comes back to pool `id`, freed as `freed_on`
    /// says (actor, epoch, completion time). Returns the bytes its device gets back: the
    /// block's, when the pool was destroyed (then the pool is forgotten once unused); else 0.
    pub(crate) fn give_back(
        &mut self,
        id: u64,
        base: u64,
        reserved: u64,
        freed_on: Option<(Actor, u64, u64)>,
    ) -> (u32, u64) {
        let Some(pl) = self.pools.get_mut(&id) else {
            return (0, 0);
        };
        pl.used -= reserved;
        if pl.destroyed {
            pl.reserved -= reserved;
            let device = pl.device;
            if pl.used == 0 {
                self.pools.remove(&id);
            }
            return (device, reserved);
        }
        let block = FreeBlock {
            freed_on: freed_on.map(|(a, e, _)| (a, e)),
            done_at: freed_on.map_or(0, |(_, _, t)| t),
        };
        pl.free.insert((reserved, base), block);
        (pl.device, 0)
    }

    /// Releases free blocks of the pools `which` selects, each down to the floor `floor`
    /// gives it, if their frees completed by `now` (or at once with `force`). Returns the bytes
    /// released.
    pub(crate) fn release_free(
        &mut self,
        which: impl Fn(u64, &Pool) -> bool,
        floor: impl Fn(&Pool) -> u64,
        force: bool,
        now: u64,
    ) -> u64 {
        let mut released = 0;
        for (_, pl) in self.pools.iter_mut().filter(|(&id, pl)| which(id, pl)) {
            let floor = floor(pl);
            let mut gone = Vec::new();
            for (&(size, base), fb) in &pl.free {
                if pl.reserved <= floor {
                    break;
                }
                if fb.done_at <= now || force {
                    pl.reserved -= size;
                    released += size;
                    gone.push((size, base));
                }
            }
            for k in gone {
                pl.free.remove(&k);
            }
        }
        released
    }

    /// Whether any pool of `device` holds a free block.
    pub(crate) fn has_free_blocks(&self, device: u32) -> bool {
        self.pools
            .values()
            .any(|pl| pl.device == device && !pl.free.is_empty())
    }

    /// Destroys live pool `id`: its free blocks go at once, the pool itself once its blocks in
    /// use are freed. Returns its device and the bytes released.
    pub(crate) fn destroy(&mut self, id: u64) -> (u32, u64) {
        let pl = self.pools.get_mut(&id).expect("a live pool");
        let free: u64 = pl.free.keys().map(|(s, _)| s).sum();
        pl.free.clear();
        pl.reserved -= free;
        pl.destroyed = true;
        let (device, used) = (pl.device, pl.used);
        if used == 0 {
            self.pools.remove(&id);
        }
        (device, free)
    }
}
