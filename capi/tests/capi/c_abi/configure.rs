//! Configuring the manager: reinitializing with live memory, wasm plugins, configuration
//! errors, a chain on no device, an allocation log on a full disk.

use super::*;

#[test]
fn configure_and_reinitialize_keep_live_memory_valid() {
    let _g = setup();
    let old = alloc(1 << 16, 0, null_mut());
    // SAFETY: NUL-terminated literals.
    unsafe {
        succeeds(emm_configure(c"arena".as_ptr()));
        assert_eq!(stats()["manager"], "arena");
        let a = alloc(4096, 0, null_mut());
        free(a, null_mut());
        let opts = cr#"{"pool_allocator": true, "initial_pool_size": 1048576, "statistics": true}"#;
        succeeds(emm_reinitialize(opts.as_ptr()));
        assert!(manager_name().starts_with("reinitialize("));
        let b = alloc(4096, 1, null_mut());
        free(b, null_mut());
        succeeds(emm_reinitialize(null()));
        let opts = cr#"{"devices": [0]}"#;
        succeeds(emm_reinitialize(opts.as_ptr()));
        let mut p = null_mut();
        fails(
            emm_alloc(64, 1, null_mut(), &mut p),
            EmmStatus::InvalidArgument,
            "was not set up by emm_reinitialize",
        );
        succeeds(emm_configure(null()));
        assert_eq!(stats()["manager"], "pool-vmm-tight");
    }
    // Memory from the first manager goes back to it.
    free(old, null_mut());
    assert_eq!(stats()["devices"][0]["current_bytes"], 0);
}

/// `EMM_MOVE_SHARE` is read when the default manager makes a context's pool: a value it cannot
/// read fails that with a message naming the variable, and the next configuration without it
/// works.
#[test]
fn a_bad_move_share_fails_the_manager_with_the_variable_named() {
    let _g = setup();
    std::env::set_var("EMM_MOVE_SHARE", "lots");
    let mut p = null_mut();
    // SAFETY: a NUL pointer (the default), and a writable out-pointer.
    let (configured, allocated) = unsafe {
        (
            emm_configure(null()),
            emm_alloc(4096, 0, null_mut(), &mut p),
        )
    };
    std::env::remove_var("EMM_MOVE_SHARE");
    let status = if configured == EmmStatus::Ok {
        allocated
    } else {
        configured
    };
    fails(
        status,
        EmmStatus::InvalidArgument,
        "EMM_MOVE_SHARE=\"lots\"",
    );
    assert!(p.is_null());
    // SAFETY: as above.
    succeeds(unsafe { emm_configure(null()) });
    free(alloc(4096, 0, null_mut()), null_mut());
}

/// A library's choice (`emm_configure_if_unset`, as `emm.numba` asks for `pool`) applies only
/// while the manager in use is the default: never over the program's choice.
#[test]
fn a_library_s_choice_applies_only_over_the_default() {
    let _g = setup();
    let mut applied: std::ffi::c_int = -1;
    // SAFETY: NUL-terminated literals and a writable out-pointer.
    unsafe {
        // `setup` configured `pool`: the program chose.
        succeeds(emm_configure_if_unset(c"arena".as_ptr(), &mut applied));
        assert_eq!((applied, manager_name()), (0, "pool".to_owned()));
        succeeds(emm_configure(null()));
        assert_eq!(manager_name(), "pool-vmm-tight", "the default");
        succeeds(emm_configure_if_unset(c"arena".as_ptr(), &mut applied));
        assert_eq!((applied, manager_name()), (1, "arena".to_owned()));
        // Once a library chose, a second does not override it; a name it would not apply is
        // not resolved, and a spec that does not parse is refused.
        succeeds(emm_configure_if_unset(c"binning".as_ptr(), null_mut()));
        succeeds(emm_configure_if_unset(c"nope".as_ptr(), &mut applied));
        assert_eq!((applied, manager_name()), (0, "arena".to_owned()));
        fails(
            emm_configure_if_unset(c"{not json".as_ptr(), &mut applied),
            EmmStatus::InvalidArgument,
            "not valid",
        );
        fails(
            emm_configure_if_unset(null(), &mut applied),
            EmmStatus::InvalidArgument,
            "spec is NULL",
        );
        // Over the default, a name that does not resolve is refused and changes nothing.
        succeeds(emm_configure(null()));
        fails(
            emm_configure_if_unset(c"nope".as_ptr(), &mut applied),
            EmmStatus::Config,
            "nope",
        );
        assert_eq!(manager_name(), "pool-vmm-tight", "nothing changed");
    }
    let p = alloc(4096, 0, null_mut());
    free(p, null_mut());
}

/// A `.wasm` plugin (built by `cargo xtask wasm`, which `cargo xtask test` runs first) loads
/// through emm-sandbox's loader and serves the C ABI.
#[test]
fn a_wasm_plugin_serves_the_c_abi() {
    let _g = setup();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm/first_fit.wasm");
    assert!(
        path.exists(),
        "{} is missing: build the example plugins with `cargo xtask wasm`",
        path.display()
    );
    let spec = CString::new(path.to_string_lossy().into_owned()).expect("no NUL in the path");
    // SAFETY: a NUL-terminated string.
    succeeds(unsafe { emm_configure(spec.as_ptr()) });
    assert!(manager_name().ends_with("first_fit.wasm"));
    let ptrs: Vec<_> = (1..=8).map(|i| alloc(i * 1000, 0, null_mut())).collect();
    assert_eq!(stats()["devices"][0]["current_allocations"], 8);
    for p in ptrs {
        free(p, null_mut());
    }
    // SAFETY: writable out-pointer.
    unsafe {
        let mut p = null_mut();
        fails(
            emm_alloc(0, 0, null_mut(), &mut p),
            EmmStatus::InvalidArgument,
            "size 0",
        );
    }
}

/// A configuration error quotes a short excerpt of the input, however long it is: a 64 MiB
/// spec once came back as a 64 MiB message.
#[test]
fn a_configuration_error_quotes_an_excerpt_not_the_whole_input() {
    let _g = setup();
    let big = "y".repeat(64 << 20);
    for (spec, status) in [
        (
            format!("{{\"pool_allocator\": {big}}}"),
            EmmStatus::InvalidArgument,
        ),
        (format!("{{\"{big}\": true}}"), EmmStatus::InvalidArgument),
        (big.clone(), EmmStatus::Config),
    ] {
        let c = CString::new(spec).unwrap();
        // SAFETY: a NUL-terminated string.
        let s = unsafe { emm_configure(c.as_ptr()) };
        assert_eq!(s, status);
        let m = message();
        assert!(
            m.len() < 1024,
            "{} bytes of message: {}",
            m.len(),
            &m[..200]
        );
        assert!(m.contains("bytes in all"), "{m}");
    }
    assert_eq!(stats()["manager"], "pool", "nothing changed");
}

/// `{"devices": []}` would set up no device, so that every allocation failed: refused.
#[test]
fn a_chain_on_no_device_is_refused() {
    let _g = setup();
    for json in [
        cr#"{"devices": []}"#,
        cr#"{"pool_allocator": true, "devices": []}"#,
    ] {
        // SAFETY: NUL-terminated literals.
        fails(
            unsafe { emm_configure(json.as_ptr()) },
            EmmStatus::InvalidArgument,
            "devices is empty",
        );
        // SAFETY: as above.
        fails(
            unsafe { emm_reinitialize(json.as_ptr()) },
            EmmStatus::InvalidArgument,
            "devices is empty",
        );
    }
    assert_eq!(stats()["manager"], "pool", "nothing changed");
    let p = alloc(4096, 0, null_mut());
    free(p, null_mut());
}

/// An allocation log on a full disk (`/dev/full`): allocations go on, and the lost lines are
/// reported by `emm_log_check` (`EMM_STATUS_IO`) and in the statistics, not dropped silently.
#[test]
fn a_log_on_a_full_disk_is_reported_by_status_and_statistics() {
    let _g = setup();
    assert_eq!(stats()["devices"][0]["log"], serde_json::Value::Null);
    let opts = cr#"{"pool_allocator": true, "devices": [0], "log_file_name": "/dev/full"}"#;
    // SAFETY: a NUL-terminated literal.
    succeeds(unsafe { emm_reinitialize(opts.as_ptr()) });
    assert_eq!(emm_log_check(-1), EmmStatus::Ok, "nothing logged yet");
    let ptrs: Vec<_> = (0..3).map(|_| alloc(4096, 0, null_mut())).collect();
    for p in ptrs {
        free(p, null_mut());
    }
    fails(emm_log_check(0), EmmStatus::Io, "No space left on device");
    assert!(message().contains("6 event lines lost"), "{}", message());
    fails(emm_log_check(-1), EmmStatus::Io, "device 0");
    let log = &stats()["devices"][0]["log"];
    assert_eq!(log["lines_dropped"], 6, "{log}");
    assert!(
        log["failure"].as_str().unwrap_or("").contains("incomplete"),
        "{log}"
    );
    assert_eq!(stats()["devices"][1]["log"], serde_json::Value::Null);
    // SAFETY: a NUL-terminated literal.
    assert_eq!(unsafe { emm_configure(c"pool".as_ptr()) }, EmmStatus::Ok);
    assert_eq!(emm_log_check(-1), EmmStatus::Ok, "the pool writes no log");
}
