//! The signature base (RFC 9421 §2.5): one line per covered component, `"name": value`, then
//! the `"@signature-params"` line, written into a buffer of fixed capacity that never grows.

use super::fields::{Bare, SignatureInput};
use super::Refusal;
use crate::request::HeaderMap;

/// A byte buffer of fixed capacity: a write past it refuses the signature instead of growing.
pub struct Bounded {
    buf: Vec<u8>,
}

impl Bounded {
    pub fn with_capacity(n: usize) -> Bounded {
        Bounded { buf: Vec::with_capacity(n) }
    }

    pub fn clear(&mut self) {
        self.buf.clear();
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    fn put(&mut self, b: &[u8]) -> Result<(), Refusal> {
        if self.buf.capacity() - self.buf.len() < b.len() {
            return Err(Refusal::TooLarge("the signature base is longer than the verifier accepts"));
        }
        self.buf.extend_from_slice(b);
        Ok(())
    }

    fn put_lowercase(&mut self, b: &[u8]) -> Result<(), Refusal> {
        let start = self.buf.len();
        self.put(b)?;
        self.buf[start..].make_ascii_lowercase();
        Ok(())
    }

    fn put_integer(&mut self, v: i64) -> Result<(), Refusal> {
        if v < 0 {
            self.put(b"-")?;
        }
        let mut digits = [0u8; 20];
        self.put(crate::decision::decimal(v.unsigned_abs(), &mut digits))
    }
}

/// Writes the base of `input` over the request `headers` (Envoy's pseudo-headers give the
/// derived components) into `out`.
pub fn write(out: &mut Bounded, input: &SignatureInput<'_>, headers: &HeaderMap<'_>) -> Result<(), Refusal> {
    out.clear();
    for (i, &name) in input.components().iter().enumerate() {
        if input.components()[..i].contains(&name) {
            return Err(Refusal::Malformed("a component is covered twice"));
        }
        if name.iter().any(|c| c.is_ascii_uppercase()) {
            return Err(Refusal::Malformed("a component name is not lowercase"));
        }
        out.put(b"\"")?;
        out.put(name)?;
        out.put(b"\": ")?;
        if name.first() == Some(&b'@') {
            derived(out, name, headers)?;
        } else {
            field(out, name, headers)?;
        }
        out.put(b"\n")?;
    }
    out.put(b"\"@signature-params\": ")?;
    params(out, input)
}

/// A derived component (RFC 9421 §2.2) of a request.
fn derived(out: &mut Bounded, name: &[u8], h: &HeaderMap<'_>) -> Result<(), Refusal> {
    let pseudo = |p: &[u8]| h.get(p).ok_or(Refusal::MissingComponent);
    let path = pseudo(b":path")?;
    let (path_only, query) = match path.iter().position(|&c| c == b'?') {
        Some(q) => (&path[..q], Some(&path[q + 1..])),
        None => (path, None),
    };
    match name {
        b"@method" => out.put(pseudo(b":method")?),
        b"@authority" => out.put_lowercase(pseudo(b":authority")?),
        b"@scheme" => out.put_lowercase(pseudo(b":scheme")?),
        b"@request-target" => out.put(path),
        b"@path" => out.put(if path_only.is_empty() { b"/" } else { path_only }),
        b"@query" => {
            out.put(b"?")?;
            out.put(query.unwrap_or(b""))
        }
        b"@target-uri" => {
            out.put_lowercase(pseudo(b":scheme")?)?;
            out.put(b"://")?;
            out.put_lowercase(pseudo(b":authority")?)?;
            out.put(path)
        }
        _ => Err(Refusal::Unsupported("a derived component other than @method, @authority, @scheme, @request-target, @path, @query, @target-uri")),
    }
}

/// An HTTP field: every line of it, each without leading and trailing whitespace, joined by
/// `", "` (RFC 9421 §2.1).
fn field(out: &mut Bounded, name: &[u8], h: &HeaderMap<'_>) -> Result<(), Refusal> {
    let mut found = false;
    for (n, v) in h.iter() {
        if n != name {
            continue;
        }
        if found {
            out.put(b", ")?;
        }
        found = true;
        out.put(v.trim_ascii())?;
    }
    if found {
        Ok(())
    } else {
        Err(Refusal::MissingComponent)
    }
}

/// The `@signature-params` value: the inner list and its parameters serialised (RFC 8941 §4.1).
fn params(out: &mut Bounded, input: &SignatureInput<'_>) -> Result<(), Refusal> {
    out.put(b"(")?;
    for (i, name) in input.components().iter().enumerate() {
        if i > 0 {
            out.put(b" ")?;
        }
        out.put(b"\"")?;
        out.put(name)?;
        out.put(b"\"")?;
    }
    out.put(b")")?;
    for (key, value) in input.params() {
        out.put(b";")?;
        out.put(key)?;
        match *value {
            Bare::Boolean(true) => {}
            Bare::Boolean(false) => out.put(b"=?0")?,
            Bare::Integer(v) => {
                out.put(b"=")?;
                out.put_integer(v)?;
            }
            Bare::String(s) => {
                out.put(b"=\"")?;
                out.put(s)?;
                out.put(b"\"")?;
            }
            Bare::Token(t) => {
                out.put(b"=")?;
                out.put(t)?;
            }
            Bare::Bytes(b) => {
                out.put(b"=:")?;
                out.put(b)?;
                out.put(b":")?;
            }
        }
    }
    Ok(())
}
