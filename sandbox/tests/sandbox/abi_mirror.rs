//! The guest SDK keeps its own copy of the ABI's numbers (`plugins/sdk/src/abi.rs`, built for
//! wasm32 outside this workspace); they must be the host's (`emm_sandbox::abi`), or a plugin
//! built with the SDK answers in numbers this host reads otherwise. Every number the SDK has is
//! compared: one it adds and this test leaves out is dead code, which the lints refuse.

#[path = "../../../plugins/sdk/src/abi.rs"]
mod sdk;

use emm_sandbox::abi as host;

#[test]
fn the_sdk_speaks_the_hosts_abi_numbers() {
    assert_eq!(
        (sdk::ABI_VERSION, sdk::ABI_MINOR),
        (host::ABI_VERSION, host::ABI_MINOR)
    );
    assert_eq!(
        [
            sdk::STATUS_OK,
            sdk::STATUS_OUT_OF_MEMORY,
            sdk::STATUS_UNSUPPORTED,
            sdk::STATUS_INVALID,
            sdk::STATUS_UNKNOWN_ALLOCATION,
            sdk::STATUS_NOT_ORDERED,
        ],
        [
            host::STATUS_OK,
            host::STATUS_OUT_OF_MEMORY,
            host::STATUS_UNSUPPORTED,
            host::STATUS_INVALID,
            host::STATUS_UNKNOWN_ALLOCATION,
            host::STATUS_NOT_ORDERED,
        ],
        "ok, out of memory, unsupported, invalid, unknown allocation, not ordered"
    );
    assert_eq!(
        (sdk::OFFSET_BITS, sdk::MAX_CHUNK_BYTES),
        (host::OFFSET_BITS, host::MAX_CHUNK_BYTES)
    );
}
