//! The two structured fields (RFC 8941) a signed request carries, read in place: `Signature-Input`
//! (a dictionary of inner lists of component names with the signature's parameters) and
//! `Signature` (a dictionary of byte sequences). Only what RFC 9421 puts in them is accepted;
//! nothing is allocated, and the component and parameter counts are bounded, so a hostile
//! header costs one linear scan of its bytes.

use super::Refusal;

/// Most components one signature may cover.
pub const MAX_COMPONENTS: usize = 16;
/// Most parameters one signature may carry (RFC 9421 defines six).
pub const MAX_PARAMS: usize = 8;

/// A bare item (RFC 8941 §3.3) as it appears in a signature's parameters. Strings keep their
/// escaped text, which is their canonical serialisation too (only `\"` and `\\` are escapes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bare<'a> {
    Integer(i64),
    String(&'a [u8]),
    Token(&'a [u8]),
    Bytes(&'a [u8]),
    Boolean(bool),
}

/// One signature's `Signature-Input` member: its label, the covered components in order and its
/// parameters in order (the `@signature-params` line serialises both back).
#[derive(Clone, Copy, Debug)]
pub struct SignatureInput<'a> {
    pub label: &'a [u8],
    components: [&'a [u8]; MAX_COMPONENTS],
    n_components: usize,
    params: [(&'a [u8], Bare<'a>); MAX_PARAMS],
    n_params: usize,
}

impl<'a> SignatureInput<'a> {
    /// The covered components' names (the string contents; component parameters are refused).
    pub fn components(&self) -> &[&'a [u8]] {
        &self.components[..self.n_components]
    }

    pub fn params(&self) -> &[(&'a [u8], Bare<'a>)] {
        &self.params[..self.n_params]
    }

    pub fn param(&self, key: &[u8]) -> Option<Bare<'a>> {
        self.params().iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    pub fn integer(&self, key: &[u8]) -> Result<Option<i64>, Refusal> {
        match self.param(key) {
            None => Ok(None),
            Some(Bare::Integer(i)) => Ok(Some(i)),
            Some(_) => Err(Refusal::Malformed("a time parameter is not an integer")),
        }
    }

    pub fn string(&self, key: &[u8]) -> Result<Option<&'a [u8]>, Refusal> {
        match self.param(key) {
            None => Ok(None),
            Some(Bare::String(s)) => Ok(Some(s)),
            Some(_) => Err(Refusal::Malformed("a keyid, alg, nonce or tag parameter is not a string")),
        }
    }
}

/// The first member of a `Signature-Input` value that `wanted` accepts.
pub fn find_input<'a>(value: &'a [u8], mut wanted: impl FnMut(&SignatureInput<'a>) -> bool) -> Result<Option<SignatureInput<'a>>, Refusal> {
    let mut c = Cursor { s: value, at: 0 };
    c.spaces();
    if c.done() {
        return Err(Refusal::Malformed("an empty Signature-Input"));
    }
    loop {
        let label = c.key()?;
        c.expect(b'=', "a Signature-Input member is not an inner list")?;
        let input = c.inner_list(label)?;
        if wanted(&input) {
            return Ok(Some(input));
        }
        if !c.next_member()? {
            return Ok(None);
        }
    }
}

/// The byte sequence's base64 text of member `label` of a `Signature` value.
pub fn find_signature<'a>(value: &'a [u8], label: &[u8]) -> Result<Option<&'a [u8]>, Refusal> {
    let mut c = Cursor { s: value, at: 0 };
    c.spaces();
    if c.done() {
        return Err(Refusal::Malformed("an empty Signature"));
    }
    loop {
        let key = c.key()?;
        c.expect(b'=', "a Signature member is not a byte sequence")?;
        let Bare::Bytes(b64) = c.bare()? else { return Err(Refusal::Malformed("a Signature member is not a byte sequence")) };
        c.params_skipped()?;
        if key == label {
            return Ok(Some(b64));
        }
        if !c.next_member()? {
            return Ok(None);
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn done(&self) -> bool {
        self.at >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    fn ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, b: u8, why: &'static str) -> Result<(), Refusal> {
        if self.peek() != Some(b) {
            return Err(Refusal::Malformed(why));
        }
        self.at += 1;
        Ok(())
    }

    /// After a dictionary member: `true` at a following one, `false` at the end.
    fn next_member(&mut self) -> Result<bool, Refusal> {
        self.ows();
        if self.done() {
            return Ok(false);
        }
        self.expect(b',', "dictionary members are not separated by commas")?;
        self.ows();
        if self.done() {
            return Err(Refusal::Malformed("a trailing comma"));
        }
        Ok(true)
    }

    /// RFC 8941 §3.1.2 key: `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
    fn key(&mut self) -> Result<&'a [u8], Refusal> {
        let start = self.at;
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
            return Err(Refusal::Malformed("a key does not start with a lowercase letter or `*`"));
        }
        while matches!(self.peek(), Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')) {
            self.at += 1;
        }
        Ok(&self.s[start..self.at])
    }

    fn inner_list(&mut self, label: &'a [u8]) -> Result<SignatureInput<'a>, Refusal> {
        let mut input = SignatureInput { label, components: [&[]; MAX_COMPONENTS], n_components: 0, params: [(&[], Bare::Boolean(true)); MAX_PARAMS], n_params: 0 };
        self.expect(b'(', "a Signature-Input member is not an inner list")?;
        loop {
            self.spaces();
            if self.peek() == Some(b')') {
                self.at += 1;
                break;
            }
            let Bare::String(name) = self.bare()? else { return Err(Refusal::Malformed("a covered component is not a string")) };
            if self.peek() == Some(b';') {
                return Err(Refusal::Unsupported("component parameters (sf, key, bs, req, tr, name)"));
            }
            if input.n_components == MAX_COMPONENTS {
                return Err(Refusal::TooLarge("more covered components than the verifier accepts"));
            }
            input.components[input.n_components] = name;
            input.n_components += 1;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return Err(Refusal::Malformed("inner-list items are not separated by spaces"));
            }
        }
        while self.peek() == Some(b';') {
            self.at += 1;
            self.spaces();
            let key = self.key()?;
            let value = if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare()?
            } else {
                Bare::Boolean(true)
            };
            // A repeated key keeps its last value in place of the first (RFC 8941 §4.2.3.2).
            if let Some(p) = input.params[..input.n_params].iter_mut().find(|(k, _)| *k == key) {
                p.1 = value;
                continue;
            }
            if input.n_params == MAX_PARAMS {
                return Err(Refusal::TooLarge("more signature parameters than the verifier accepts"));
            }
            input.params[input.n_params] = (key, value);
            input.n_params += 1;
        }
        Ok(input)
    }

    /// Parameters after a `Signature` member, which RFC 9421 does not use: read and ignored.
    fn params_skipped(&mut self) -> Result<(), Refusal> {
        while self.peek() == Some(b';') {
            self.at += 1;
            self.spaces();
            self.key()?;
            if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare()?;
            }
        }
        Ok(())
    }

    fn bare(&mut self) -> Result<Bare<'a>, Refusal> {
        match self.peek() {
            Some(b'"') => {
                self.at += 1;
                let start = self.at;
                loop {
                    match self.peek() {
                        None => return Err(Refusal::Malformed("an unterminated string")),
                        Some(b'"') => break,
                        Some(b'\\') => {
                            if !matches!(self.s.get(self.at + 1), Some(b'"' | b'\\')) {
                                return Err(Refusal::Malformed("a string escapes something other than `\"` or `\\`"));
                            }
                            self.at += 2;
                        }
                        Some(0x20..=0x7e) => self.at += 1,
                        Some(_) => return Err(Refusal::Malformed("a string holds a byte outside printable ASCII")),
                    }
                }
                let s = &self.s[start..self.at];
                self.at += 1;
                Ok(Bare::String(s))
            }
            Some(b':') => {
                self.at += 1;
                let start = self.at;
                while matches!(self.peek(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=')) {
                    self.at += 1;
                }
                let b = &self.s[start..self.at];
                self.expect(b':', "an unterminated byte sequence")?;
                Ok(Bare::Bytes(b))
            }
            Some(b'?') => {
                let v = match self.s.get(self.at + 1) {
                    Some(b'0') => false,
                    Some(b'1') => true,
                    _ => return Err(Refusal::Malformed("a boolean is neither ?0 nor ?1")),
                };
                self.at += 2;
                Ok(Bare::Boolean(v))
            }
            Some(b'-' | b'0'..=b'9') => {
                let negative = self.peek() == Some(b'-');
                if negative {
                    self.at += 1;
                }
                let start = self.at;
                let mut v: i64 = 0;
                while let Some(d @ b'0'..=b'9') = self.peek() {
                    // RFC 8941 integers have at most 15 digits.
                    if self.at - start == 15 {
                        return Err(Refusal::Malformed("an integer of more than 15 digits"));
                    }
                    v = v * 10 + i64::from(d - b'0');
                    self.at += 1;
                }
                if self.at == start {
                    return Err(Refusal::Malformed("a `-` without digits"));
                }
                if self.peek() == Some(b'.') {
                    return Err(Refusal::Unsupported("decimal parameters"));
                }
                Ok(Bare::Integer(if negative { -v } else { v }))
            }
            Some(b'A'..=b'Z' | b'a'..=b'z' | b'*') => {
                let start = self.at;
                self.at += 1;
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c)) {
                    self.at += 1;
                }
                Ok(Bare::Token(&self.s[start..self.at]))
            }
            _ => Err(Refusal::Malformed("not a structured-field item")),
        }
    }
}
