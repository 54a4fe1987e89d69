//! Process-wide selection of the memory manager. These tests share the process's selection,
//! so each takes one lock.

use std::sync::{Arc, Mutex, MutexGuard};

use emm_core::contract::selection::{
    current_factory_with_env, manager_names, set_memory_manager_with_env, set_plugin_loader,
};
use emm_core::contract::{
    clear_memory_manager, register_manager, Context, EmmError, EmmResult, ManagerFactory,
    ManagerTarget, MemoryManager,
};
use emm_core::managers::{DefaultManager, HostOnlyManager};
use emm_core::{DeviceId, Driver};
use emm_sim::{SimConfig, SimDriver, GIB};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A factory of `DefaultManager`s under another name and version (a stand-in plugin).
struct Named(&'static str, u32);

impl ManagerFactory for Named {
    fn name(&self) -> &str {
        self.0
    }
    fn interface_version(&self) -> u32 {
        self.1
    }
    fn create(&self, t: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
        Ok(Box::new(HostOnlyManager::new(
            t.driver.clone(),
            t.context,
            DefaultResource(t.driver.clone()),
        )))
    }
}

/// A device side over `dyn Driver`: `CudaResource` needs a sized driver type.
struct DefaultResource(Arc<dyn Driver>);

impl emm_core::mr::DeviceMemoryResource for DefaultResource {
    fn name(&self) -> &'static str {
        "DefaultResource"
    }
    fn allocate(
        &self,
        bytes: usize,
        _s: emm_core::StreamId,
    ) -> emm_core::mr::MrResult<emm_core::DevicePtr> {
        Ok(self.0.mem_alloc(bytes)?)
    }
    fn deallocate(
        &self,
        p: emm_core::DevicePtr,
        _b: usize,
        _s: emm_core::StreamId,
    ) -> emm_core::mr::MrResult<()> {
        Ok(self.0.mem_free(p)?)
    }
    fn driver(&self) -> &dyn Driver {
        &*self.0
    }
}

fn gpu() -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(2).memory_per_device(GIB)).unwrap())
}

fn context_with_env(g: &Arc<SimDriver>, env: Option<&str>) -> EmmResult<Context<SimDriver>> {
    let f = current_factory_with_env(env)?;
    Context::with_factory(g.clone(), DeviceId(0), &*f)
}

/// Numba's reference: "Changing the memory manager will have no effect on existing contexts - only
/// contexts created after the memory manager was updated will use instances of the new memory
/// manager."
#[test]
fn only_contexts_created_after_set_memory_manager_use_the_new_manager() {
    let _s = serial();
    clear_memory_manager();
    let g = gpu();
    let before = context_with_env(&g, None).unwrap();
    assert_eq!(before.manager().name(), "DefaultManager");
    let selected = set_memory_manager_with_env(Arc::new(Named("plugin", 1)), None).unwrap();
    assert_eq!((selected.name.as_str(), selected.warning), ("plugin", None));
    let after = context_with_env(&g, None).unwrap();
    assert_eq!(after.manager().name(), "HostOnlyManager");
    assert_eq!(before.manager().name(), "DefaultManager", "unchanged");
    // Each context has its own instance.
    let again = context_with_env(&g, None).unwrap();
    assert!(!std::ptr::addr_eq(after.manager(), again.manager()));
    drop(after.memalloc(64).unwrap());
    clear_memory_manager();
    assert_eq!(
        context_with_env(&g, None).unwrap().manager().name(),
        "DefaultManager"
    );
}

/// Numba's reference: "If the EMM Plugin version does not match one supported by this version of
/// Numba, a RuntimeError will be raised."
#[test]
fn set_memory_manager_refuses_another_interface_version_and_keeps_the_old_one() {
    let _s = serial();
    clear_memory_manager();
    let e = set_memory_manager_with_env(Arc::new(Named("future", 2)), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "memory manager interface version mismatch: emm implements version 1, the manager \
         future reports 2; rebuild the plugin against emm's contract v1"
    );
    assert_eq!(current_factory_with_env(None).unwrap().name(), "default");
    assert!(matches!(
        register_manager("future", Arc::new(Named("future", 2))),
        Err(EmmError::VersionMismatch { found: 2, .. })
    ));
    // A factory that misreports its managers' version is caught at the instance.
    struct Liar;
    impl ManagerFactory for Liar {
        fn name(&self) -> &str {
            "liar"
        }
        fn interface_version(&self) -> u32 {
            1
        }
        fn create(&self, t: &ManagerTarget) -> EmmResult<Box<dyn MemoryManager>> {
            Ok(Box::new(V3(DefaultManager::new(
                t.driver.clone(),
                t.context,
            ))))
        }
    }
    let g = gpu();
    let e = Context::with_factory(g.clone(), DeviceId(0), &Liar).unwrap_err();
    assert!(
        matches!(&e, EmmError::VersionMismatch { found: 3, manager, .. } if manager == "V3"),
        "{e}"
    );
}

/// A manager of interface version 3, otherwise the default.
struct V3(DefaultManager);

impl MemoryManager for V3 {
    fn name(&self) -> &str {
        "V3"
    }
    emm_core::forward_manager_calls!(
        0: initialize,
        memalloc,
        memhostalloc,
        mempin,
        get_memory_info,
        get_ipc_handle,
        reset,
        defer_cleanup,
    );
    fn interface_version(&self) -> u32 {
        3
    }
}

/// NBEP 7: "When this variable is set, Numba will automatically use the memory manager
/// from the specified module. Calls to set_memory_manager will issue a warning, but otherwise
/// be ignored."
#[test]
fn the_environment_variable_overrides_the_call_with_a_warning() {
    let _s = serial();
    clear_memory_manager();
    let g = gpu();
    register_manager("cuda-host-only", Arc::new(Named("cuda-host-only", 1))).unwrap();
    assert!(manager_names().contains(&"cuda-host-only".to_string()));
    assert!(manager_names().contains(&"default".to_string()));

    let selected =
        set_memory_manager_with_env(Arc::new(Named("plugin", 1)), Some("default")).unwrap();
    let warning = selected.warning.unwrap();
    assert!(warning.contains("EMM_MEMORY_MANAGER=default overrides set_memory_manager(plugin)"));
    let ctx = context_with_env(&g, Some("default")).unwrap();
    assert_eq!(
        ctx.manager().name(),
        "DefaultManager",
        "the environment wins"
    );
    let ctx = context_with_env(&g, Some("cuda-host-only")).unwrap();
    assert_eq!(ctx.manager().name(), "HostOnlyManager");

    let e = context_with_env(&g, Some("rmm")).unwrap_err();
    assert!(matches!(e, EmmError::UnknownManager { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("no memory manager named \"rmm\"; the built-in managers are"),
        "{e}"
    );

    let e = context_with_env(&g, Some("/plugins/arena.wasm")).unwrap_err();
    assert!(
        e.to_string().contains("no plugin loader is installed"),
        "{e}"
    );
    set_plugin_loader(Arc::new(|path: &std::path::Path| {
        assert_eq!(path, std::path::Path::new("/plugins/arena.wasm"));
        Ok(Arc::new(Named("arena.wasm", 1)) as Arc<dyn ManagerFactory>)
    }));
    let ctx = context_with_env(&g, Some("/plugins/arena.wasm")).unwrap();
    assert_eq!(ctx.manager().name(), "HostOnlyManager");
    set_plugin_loader(Arc::new(|_: &std::path::Path| {
        Ok(Arc::new(Named("old.wasm", 0)) as Arc<dyn ManagerFactory>)
    }));
    assert!(matches!(
        context_with_env(&g, Some("/plugins/old.wasm")),
        Err(EmmError::VersionMismatch { found: 0, .. })
    ));
    clear_memory_manager();
    // The real path reads the process environment (unset in tests): the default.
    let ctx = Context::new(g.clone(), DeviceId(0)).unwrap();
    assert_eq!(ctx.manager().name(), "DefaultManager");
}
