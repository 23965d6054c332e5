//! The shipped module exports exactly the proxy-wasm callbacks the filter implements
//! (`filter/callbacks.txt`, applied by `filter/trim`): Envoy enters the VM for every callback
//! exported, so one left in costs every request; one missing is never called.

use edgescore_filter_trim::{keep_list, trim};
use edgescore_proxy_host::cargo::{filter_wasm, repo_root};
use edgescore_proxy_host::Host;

#[test]
fn the_module_exports_only_the_callbacks_the_filter_implements() {
    let keep_text = std::fs::read_to_string(repo_root().join("filter/callbacks.txt")).unwrap();
    let keep = keep_list(&keep_text);
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut callbacks: Vec<&str> = host.exports().iter().map(String::as_str).filter(|e| e.starts_with("proxy_on_")).collect();
    callbacks.sort_unstable();
    let mut want = keep.clone();
    want.sort_unstable();
    assert_eq!(callbacks, want);
    for gone in ["proxy_on_response_headers", "proxy_on_response_body", "proxy_on_log", "proxy_on_done"] {
        assert!(!callbacks.contains(&gone), "{gone}");
    }
}

#[test]
fn trimming_refuses_a_keep_list_naming_a_callback_the_module_lacks() {
    let wasm = std::fs::read(filter_wasm().unwrap()).unwrap();
    let err = trim(&wasm, &["proxy_on_request_headers", "proxy_on_request_header"]).unwrap_err();
    assert!(err.to_string().contains("`proxy_on_request_header` is in the keep list but the module does not export it"), "{err}");
    // Already trimmed: nothing to do.
    assert!(trim(&wasm, &keep_list(&std::fs::read_to_string(repo_root().join("filter/callbacks.txt")).unwrap())).unwrap().is_none());
}
