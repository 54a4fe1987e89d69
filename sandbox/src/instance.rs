//! [`PluginInstance`]: one running instance of a plugin — its store and the typed exports —
//! with every call made under the limits and every failure turned into a [`PluginFault`].

use wasmtime::{Store, Trap, TypedFunc};

use crate::abi::STATS_WORDS;
use crate::fault::{host_bug, PluginFault, Rule};
use crate::host::HostState;
use crate::registry::Registry;

/// The typed exports of ABI v1; the optional ones are `None` when the guest lacks them.
pub(crate) struct Exports {
    pub alloc: TypedFunc<(i64, i64, i64), i64>,
    pub free: TypedFunc<(i32, i64, i64, i64), i32>,
    pub reset: Option<TypedFunc<(), i32>>,
    pub trim: Option<TypedFunc<i64, i32>>,
    pub stats: Option<TypedFunc<(), i32>>,
    pub defer_enter: Option<TypedFunc<(), ()>>,
    pub defer_exit: Option<TypedFunc<(), i32>>,
    pub memory: wasmtime::Memory,
}

/// One instance and its store.
pub(crate) struct PluginInstance {
    pub store: Store<HostState>,
    pub exports: Exports,
    fuel: Option<u64>,
    deadline_ticks: Option<u64>,
    deadline_ms: u128,
}

impl PluginInstance {
    pub fn new(
        store: Store<HostState>,
        exports: Exports,
        fuel: Option<u64>,
        deadline_ticks: Option<u64>,
        deadline_ms: u128,
    ) -> Self {
        PluginInstance {
            store,
            exports,
            fuel,
            deadline_ticks,
            deadline_ms,
        }
    }

    /// Refills fuel and sets the deadline: every call starts with the whole budget.
    #[inline]
    fn arm(&mut self) -> Result<(), PluginFault> {
        self.store.data_mut().begin_call();
        if let Some(fuel) = self.fuel {
            self.store.set_fuel(fuel).map_err(|_| host_bug!())?;
        }
        if let Some(ticks) = self.deadline_ticks {
            self.store.set_epoch_deadline(ticks);
        }
        Ok(())
    }

    /// What went wrong in a call: a rule a host function saw broken, a limit, or a trap.
    #[cold]
    fn classify(&mut self, e: &wasmtime::Error) -> PluginFault {
        if let Some(fault) = self.store.data_mut().fault.take() {
            return fault;
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => PluginFault::OutOfFuel {
                fuel: self.fuel.unwrap_or(0),
            },
            Some(Trap::Interrupt) => PluginFault::Deadline {
                millis: self.deadline_ms,
            },
            Some(trap) => PluginFault::Trap(trap.to_string()),
            None => PluginFault::Trap(format!("{e}")),
        }
    }

    /// `emm_alloc(size, align, stream)`: the raw result (an answer or a status).
    #[inline]
    pub fn alloc(&mut self, size: i64, align: i64, stream: i64) -> Result<i64, PluginFault> {
        self.arm()?;
        self.exports
            .alloc
            .call(&mut self.store, (size, align, stream))
            .map_err(|e| self.classify(&e))
    }

    /// `emm_free(chunk, offset, size, stream)`: the status.
    #[inline]
    pub fn free(
        &mut self,
        chunk: i32,
        offset: i64,
        size: i64,
        stream: i64,
    ) -> Result<i32, PluginFault> {
        self.arm()?;
        self.exports
            .free
            .call(&mut self.store, (chunk, offset, size, stream))
            .map_err(|e| self.classify(&e))
    }

    /// `emm_reset()`, or `OK` when the guest has none.
    pub fn reset(&mut self) -> Result<i32, PluginFault> {
        let Some(f) = self.exports.reset.clone() else {
            return Ok(crate::abi::STATUS_OK);
        };
        self.arm()?;
        f.call(&mut self.store, ()).map_err(|e| self.classify(&e))
    }

    /// `emm_trim(keep)`, or `OK` when the guest has none.
    pub fn trim(&mut self, keep: i64) -> Result<i32, PluginFault> {
        let Some(f) = self.exports.trim.clone() else {
            return Ok(crate::abi::STATUS_OK);
        };
        self.arm()?;
        f.call(&mut self.store, keep).map_err(|e| self.classify(&e))
    }

    /// `emm_defer_enter()`, when the guest has it.
    pub fn defer_enter(&mut self) -> Result<(), PluginFault> {
        let Some(f) = self.exports.defer_enter.clone() else {
            return Ok(());
        };
        self.arm()?;
        f.call(&mut self.store, ()).map_err(|e| self.classify(&e))
    }

    /// `emm_defer_exit()`, or `OK` when the guest has none.
    pub fn defer_exit(&mut self) -> Result<i32, PluginFault> {
        let Some(f) = self.exports.defer_exit.clone() else {
            return Ok(crate::abi::STATUS_OK);
        };
        self.arm()?;
        f.call(&mut self.store, ()).map_err(|e| self.classify(&e))
    }

    /// `emm_stats`: the guest's own counters, `None` when it has no `emm_stats` or reports a
    /// failure. The guest says where they are; the host reads them with bounds checks.
    pub fn stats(&mut self) -> Result<Option<[u64; STATS_WORDS]>, PluginFault> {
        let Some(f) = self.exports.stats.clone() else {
            return Ok(None);
        };
        self.arm()?;
        let status = f.call(&mut self.store, ()).map_err(|e| self.classify(&e))?;
        if status < 0 {
            return Ok(None);
        }
        // A non-negative status is the address the guest wrote the words to.
        let data = self.exports.memory.data(&self.store);
        let start = usize::try_from(status).map_err(|_| host_bug!())?;
        let words = start
            .checked_add(STATS_WORDS * 8)
            .and_then(|end| data.get(start..end))
            .ok_or_else(|| PluginFault::BadAnswer {
                rule: Rule::BadGuestPointer,
                detail: format!("emm_stats returned address {status}, outside its memory"),
            })?;
        let mut out = [0u64; STATS_WORDS];
        for (slot, bytes) in out.iter_mut().zip(words.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            *slot = u64::from_le_bytes(b);
        }
        Ok(Some(out))
    }

    /// Takes the registry out (the instance is being dropped after a quarantine).
    pub fn take_registry(&mut self) -> Registry {
        std::mem::take(&mut self.store.data_mut().registry)
    }
}
