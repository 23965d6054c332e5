//! One HTTP request's context: hands each callback to the configuration's [`Serving`]; for a
//! request on the text path it keeps where the request is ([`TextState`]).

use crate::serving::{Serving, TextState};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::cell::RefCell;
use std::rc::Rc;

pub struct Stream {
    serving: Rc<RefCell<Option<Serving>>>,
    text: TextState,
    /// The request's client, when the models read its answers' shares.
    client: Option<u64>,
}

impl Stream {
    pub fn new(serving: Rc<RefCell<Option<Serving>>>) -> Stream {
        Stream { serving, text: TextState::None, client: None }
    }

    fn with_serving(&mut self, f: impl FnOnce(&mut Serving, &mut TextState, &mut Option<u64>) -> Action) -> Action {
        match self.serving.try_borrow_mut() {
            Ok(mut serving) => match serving.as_mut() {
                Some(a) => f(a, &mut self.text, &mut self.client),
                None => Action::Continue,
            },
            Err(_) => Action::Continue,
        }
    }
}

impl Context for Stream {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize, _num_trailers: usize) {
        let TextState::Calling { token: t, .. } = &self.text else { return };
        if *t != token {
            return;
        }
        let TextState::Calling { started_ns, tree, scores, .. } = std::mem::replace(&mut self.text, TextState::None) else { return };
        if let Ok(mut serving) = self.serving.try_borrow_mut() {
            if let Some(a) = serving.as_mut() {
                a.on_text_verdict(num_headers, body_size, started_ns, tree, &scores);
                return;
            }
        }
        crate::host::continue_request();
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        #[cfg(feature = "test-trap")]
        crate::test_trap::on_request();
        self.with_serving(|a, text, client| a.on_request_headers(end_of_stream, text, client))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.with_serving(|a, text, _| a.on_request_body(body_size, end_of_stream, text))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        if matches!(self.text, TextState::None) {
            return Action::Continue;
        }
        self.with_serving(|a, text, _| a.on_request_trailers(text))
    }
}

/// The SDK drops a stream's context in `proxy_on_delete`, after Envoy's access log, when the
/// stream's status is known (`Serving::on_stream_end`).
impl Drop for Stream {
    fn drop(&mut self) {
        let Some(client) = self.client else { return };
        if let Ok(mut serving) = self.serving.try_borrow_mut() {
            if let Some(a) = serving.as_mut() {
                a.on_stream_end(client);
            }
        }
    }
}
