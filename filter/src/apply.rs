//! Applies the core's edits to the request through the host. Each edit is one host call.

use crate::host::{self, REQUEST_HEADERS};
use edgescore_core::decision::{Edit, Edits};

/// Applies `edits` in order; true when one of them answered the request locally (the caller
/// stops the request).
pub fn apply(edits: &Edits<'_>) -> bool {
    let mut replied = false;
    for edit in edits.iter() {
        match edit {
            Edit::AddHeader(name, value) => {
                host::add_header(REQUEST_HEADERS, name, value);
            }
            Edit::ReplaceHeader(name, value) => {
                host::replace_header(REQUEST_HEADERS, name, value);
            }
            Edit::RemoveHeader(name) => {
                host::remove_header(REQUEST_HEADERS, name);
            }
            Edit::SetState(key, value) => {
                host::set_property(key, value);
            }
            Edit::Reply { status, details, body, headers } => {
                host::send_local_response(status as u32, details, body, headers);
                replied = true;
            }
        }
    }
    replied
}
