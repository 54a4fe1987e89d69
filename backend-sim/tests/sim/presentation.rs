//! `Driver::is_simulated`: the simulator says so, unless it is asked to present itself as
//! hardware (the stubbed device of the plugin gate's tests); a shared driver says what the
//! driver it shares says.

use std::sync::Arc;

use emm_core::Driver;
use emm_sim::{SimConfig, SimDriver};

#[test]
fn the_simulator_says_it_is_one_unless_it_presents_as_hardware() {
    let sim = SimDriver::new(SimConfig::new(1)).expect("config");
    assert!(sim.is_simulated());
    let shared: Arc<dyn Driver> = Arc::new(sim.clone());
    assert!(shared.is_simulated());
    // A second process of the same machine is simulated too.
    assert!(sim.process().is_simulated());

    let stub = SimDriver::new(SimConfig::new(1).present_as_hardware(true)).expect("config");
    assert!(!stub.is_simulated());
    let shared: Arc<dyn Driver> = Arc::new(stub.clone());
    assert!(!shared.is_simulated());
    assert!(!stub.process().is_simulated());
    // It is still the simulator underneath: memory works as before.
    let p = stub.mem_alloc(4096).expect("alloc");
    stub.mem_free(p).expect("free");
}
