//! A guest trap on demand (cargo feature `test-trap`; never in the shipped `.wasm`): a request
//! carrying `x-edgescore-test-trap` makes the VM execute `unreachable`, as a bug would, so
//! that tests can watch Envoy's `failure_policy` (FAIL_RELOAD, FAIL_OPEN, FAIL_CLOSED) act
//! on a trapped VM. Envoy marks the VM failed (`FailState::RuntimeError`); what happens to
//! the following requests is the policy's business (docs/reliability.md).

use proxy_wasm::hostcalls;
use proxy_wasm::types::MapType;

pub fn on_request() {
    if let Ok(Some(_)) = hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, "x-edgescore-test-trap") {
        core::arch::wasm32::unreachable();
    }
}
