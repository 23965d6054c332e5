//! Universal Binary JSON (the format XGBoost writes for `save_model("m.ubj")` and returns from
//! `save_raw()`) as a serde `Deserializer`, so the XGBoost reader deserializes the same typed
//! document from `.ubj` as from `.json`.
//!
//! Written here rather than taken from a crate: the UBJSON crates on crates.io are unmaintained
//! or lack the optimised (`$` type, `#` count) containers XGBoost writes for every array, and
//! the format is small (draft 12: <https://ubjson.org/type-reference/>).
//!
//! Deserialized directly, not transcoded to JSON text: the text detour (shortest-form float
//! printing, then JSON parsing) cost four times XGBoost's own load. Floats keep their binary
//! value: a `d` is handed to serde as the `f32` XGBoost wrote. Arrays the reader reads as
//! [`F32_ARRAY`] (tree thresholds, leaf weights) therefore hold exactly what the JSON form's
//! shortest text reads back to, and the two forms compile to the same bytes.

use serde::de::{self, DeserializeSeed, Deserializer as _, Visitor};

/// Nesting deeper than this is refused (XGBoost models nest about eight levels).
const MAX_DEPTH: usize = 64;

/// The newtype-struct name under which a reader asks for an array of `f32`: this deserializer
/// hands over the array's values; serde_json, which knows nothing of it, hands the visitor its
/// own deserializer (`visit_newtype_struct`), where the reader takes the raw JSON text.
pub const F32_ARRAY: &str = "$edgescore::ubjson::F32Array";

/// The newtype-struct name under which a reader asks for a value's bytes, unread: the value is
/// stepped over (checked as UBJSON, its typed arrays in one jump each) and handed to the
/// visitor as borrowed bytes, for [`from_span`] to decode later. XGBoost's trees are read this
/// way so that they can be decoded on every core: decoding is most of a `.ubj` compile, and
/// one pass over the document is serial. serde_json, which knows nothing of it, hands the
/// visitor its own deserializer (`visit_newtype_struct`).
pub const SPAN: &str = "$edgescore::ubjson::Span";

/// Damage to the document itself (with where it is), or a document that is sound UBJSON but
/// not what the reader's types describe (`schema`: a missing field, a wrong type).
#[derive(Debug)]
pub struct Error {
    msg: String,
    pub schema: bool,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error { msg: msg.to_string(), schema: true }
    }
}

fn damage(msg: String) -> Error {
    Error { msg, schema: false }
}

type Result<T> = std::result::Result<T, Error>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(damage(msg.into()))
}

/// Deserializes `T` from one UBJSON document (trailing no-op `N` markers allowed).
pub fn from_slice<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T> {
    let mut r = Reader { bytes, at: 0, depth: 0 };
    let marker = r.marker()?;
    let value = T::deserialize(Value { r: &mut r, marker })?;
    while r.bytes.get(r.at) == Some(&b'N') {
        r.at += 1;
    }
    if r.at != bytes.len() {
        return err(format!("{} trailing bytes after the document (at byte {})", bytes.len() - r.at, r.at));
    }
    Ok(value)
}

/// Deserializes `T` from `span`, the bytes of one value of `document` that a [`SPAN`] request
/// handed out. Offsets in errors are `document`'s.
pub fn from_span<'de, T: de::Deserialize<'de>>(document: &'de [u8], span: &'de [u8]) -> Result<T> {
    let start = (span.as_ptr() as usize).wrapping_sub(document.as_ptr() as usize);
    let end = start.checked_add(span.len()).filter(|&e| e <= document.len());
    let end = end.ok_or_else(|| damage("a span outside its document".into()))?;
    let mut r = Reader { bytes: &document[..end], at: start, depth: 0 };
    let marker = r.marker()?;
    let value = T::deserialize(Value { r: &mut r, marker })?;
    if r.at != end {
        return err(format!("{} bytes left in the value at byte {start}", end - r.at));
    }
    Ok(value)
}

struct Reader<'de> {
    bytes: &'de [u8],
    at: usize,
    depth: usize,
}

impl<'de> Reader<'de> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self.bytes.get(self.at).ok_or_else(|| damage(format!("truncated document at byte {}", self.at)))?;
        self.at += 1;
        Ok(b)
    }

    /// The next value's type marker, past any no-op `N`s.
    fn marker(&mut self) -> Result<u8> {
        loop {
            let b = self.byte()?;
            if b != b'N' {
                return Ok(b);
            }
        }
    }

    fn slice(&mut self, n: usize) -> Result<&'de [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| damage(format!("truncated document: {n} bytes wanted at byte {}, {} left", self.at, self.bytes.len() - self.at)))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.slice(N)?);
        Ok(a)
    }

    /// An integer of the type `marker` (big-endian, as UBJSON stores every number).
    fn int(&mut self, marker: u8) -> Result<i64> {
        Ok(match marker {
            b'i' => i8::from_be_bytes(self.take()?) as i64,
            b'U' => u8::from_be_bytes(self.take()?) as i64,
            b'I' => i16::from_be_bytes(self.take()?) as i64,
            b'l' => i32::from_be_bytes(self.take()?) as i64,
            b'L' => i64::from_be_bytes(self.take()?),
            other => return err(format!("expected an integer type, found marker {:?} at byte {}", other as char, self.at - 1)),
        })
    }

    /// A string or container length: every string byte and every container element takes at
    /// least one byte of input, so a length beyond the bytes left is damage, refused before
    /// anything is reserved for it.
    fn length(&mut self) -> Result<usize> {
        let marker = self.byte()?;
        let n = self.int(marker)?;
        let left = self.bytes.len() - self.at;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| damage(format!("length {n} at byte {} exceeds the {left} bytes left", self.at)))
    }

    fn str(&mut self) -> Result<&'de str> {
        let n = self.length()?;
        let at = self.at;
        std::str::from_utf8(self.slice(n)?).map_err(|_| damage(format!("string at byte {at} is not UTF-8")))
    }

    /// A container's header after `[` or `{`: (element type if typed, count if counted).
    fn container_header(&mut self) -> Result<(Option<u8>, Option<usize>)> {
        let mut typed = None;
        if self.bytes.get(self.at) == Some(&b'$') {
            self.at += 1;
            typed = Some(self.byte()?);
            if self.bytes.get(self.at) != Some(&b'#') {
                return err(format!("typed container without a count at byte {}", self.at));
            }
        }
        let mut count = None;
        if self.bytes.get(self.at) == Some(&b'#') {
            self.at += 1;
            count = Some(self.length()?);
        }
        if typed.is_some_and(|t| fixed_size(t) == Some(0)) {
            // Valid UBJSON, but a count of markerless nulls costs no input: refused, as
            // nothing XGBoost writes has it.
            return err(format!("typed container of {:?} at byte {}", typed.map(char::from), self.at));
        }
        Ok((typed, count))
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(format!("nested deeper than {MAX_DEPTH} levels at byte {}", self.at));
        }
        Ok(())
    }
}

/// Bytes a value of type `marker` takes after its marker, when fixed.
fn fixed_size(marker: u8) -> Option<usize> {
    Some(match marker {
        b'Z' | b'T' | b'F' | b'N' => 0,
        b'i' | b'U' | b'C' => 1,
        b'I' => 2,
        b'l' | b'd' => 4,
        b'L' | b'D' => 8,
        _ => return None,
    })
}

/// One value whose marker has been read.
struct Value<'a, 'de> {
    r: &'a mut Reader<'de>,
    marker: u8,
}

impl<'de> de::Deserializer<'de> for Value<'_, 'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let r = self.r;
        match self.marker {
            b'Z' => visitor.visit_unit(),
            b'T' => visitor.visit_bool(true),
            b'F' => visitor.visit_bool(false),
            m @ (b'i' | b'U' | b'I' | b'l' | b'L') => visitor.visit_i64(r.int(m)?),
            b'd' => visitor.visit_f32(f32::from_be_bytes(r.take()?)),
            b'D' => visitor.visit_f64(f64::from_be_bytes(r.take()?)),
            b'H' => {
                let text = r.str()?;
                let v: f64 = text.parse().map_err(|_| damage(format!("high-precision number {text:?} at byte {} is not a number", r.at)))?;
                visitor.visit_f64(v)
            }
            b'C' => visitor.visit_char(r.byte()? as char),
            b'S' => visitor.visit_borrowed_str(r.str()?),
            b'[' => {
                r.enter()?;
                let (typed, count) = r.container_header()?;
                let v = visitor.visit_seq(Seq { r: &mut *r, typed, count, seen: 0 })?;
                r.depth -= 1;
                Ok(v)
            }
            b'{' => {
                r.enter()?;
                let (typed, count) = r.container_header()?;
                let v = visitor.visit_map(Map { r: &mut *r, typed, count, seen: 0 })?;
                r.depth -= 1;
                Ok(v)
            }
            other => err(format!("unknown type marker {:?} at byte {}", other as char, r.at - 1)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.marker == b'Z' {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value> {
        if name == F32_ARRAY {
            self.deserialize_any(visitor)
        } else if name == SPAN {
            // The marker was the byte before `at` (no-op `N`s before it are not the value's).
            let start = self.r.at - 1;
            let bytes = self.r.bytes;
            let r = self.skip()?;
            visitor.visit_borrowed_bytes(&bytes[start..r.at])
        } else {
            visitor.visit_newtype_struct(self)
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.skip()?;
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier
    }
}

impl<'a, 'de> Value<'a, 'de> {
    /// Steps over the value without decoding it (most of a model: gains, hessians; a tree
    /// asked for as a [`SPAN`]): a typed array of fixed-size numbers in one jump. Gives back
    /// the reader, past the value.
    fn skip(self) -> Result<&'a mut Reader<'de>> {
        let r = self.r;
        match self.marker {
            b'[' | b'{' => {
                r.enter()?;
                let object = self.marker == b'{';
                let (typed, count) = r.container_header()?;
                match (typed.and_then(fixed_size), count) {
                    (Some(size), Some(n)) if !object => {
                        let bytes = n.checked_mul(size).ok_or_else(|| damage(format!("container too large at byte {}", r.at)))?;
                        r.slice(bytes)?;
                    }
                    _ => {
                        if object {
                            Map { r: &mut *r, typed, count, seen: 0 }.skip_all()?;
                        } else {
                            Seq { r: &mut *r, typed, count, seen: 0 }.skip_all()?;
                        }
                    }
                }
                r.depth -= 1;
            }
            m => {
                Value { r: &mut *r, marker: m }.deserialize_any(de::IgnoredAny)?;
            }
        }
        Ok(r)
    }
}

struct Seq<'a, 'de> {
    r: &'a mut Reader<'de>,
    typed: Option<u8>,
    count: Option<usize>,
    seen: usize,
}

impl<'de> Seq<'_, 'de> {
    /// The next element's marker, or `None` at the end of the array.
    fn next_marker(&mut self) -> Result<Option<u8>> {
        if let Some(n) = self.count {
            if self.seen == n {
                return Ok(None);
            }
            self.seen += 1;
            return match self.typed {
                Some(t) => Ok(Some(t)),
                None => self.r.marker().map(Some),
            };
        }
        let m = self.r.marker()?;
        Ok((m != b']').then_some(m))
    }

    fn skip_all(&mut self) -> Result<()> {
        while let Some(marker) = self.next_marker()? {
            Value { r: &mut *self.r, marker }.deserialize_ignored_any(de::IgnoredAny)?;
        }
        Ok(())
    }
}

impl<'de> de::SeqAccess<'de> for Seq<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        match self.next_marker()? {
            Some(marker) => seed.deserialize(Value { r: &mut *self.r, marker }).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.count.map(|n| n - self.seen)
    }
}

struct Map<'a, 'de> {
    r: &'a mut Reader<'de>,
    typed: Option<u8>,
    count: Option<usize>,
    seen: usize,
}

impl<'de> Map<'_, 'de> {
    /// The next key, or `None` at the end of the object (keys are strings without a marker).
    fn next_key(&mut self) -> Result<Option<&'de str>> {
        match self.count {
            Some(n) if self.seen == n => return Ok(None),
            Some(_) => {}
            None => {
                while self.r.bytes.get(self.r.at) == Some(&b'N') {
                    self.r.at += 1;
                }
                if self.r.bytes.get(self.r.at) == Some(&b'}') {
                    self.r.at += 1;
                    return Ok(None);
                }
            }
        }
        self.seen += 1;
        self.r.str().map(Some)
    }

    fn value_marker(&mut self) -> Result<u8> {
        match self.typed {
            Some(t) => Ok(t),
            None => self.r.marker(),
        }
    }

    fn skip_all(&mut self) -> Result<()> {
        while self.next_key()?.is_some() {
            let marker = self.value_marker()?;
            Value { r: &mut *self.r, marker }.deserialize_ignored_any(de::IgnoredAny)?;
        }
        Ok(())
    }
}

impl<'de> de::MapAccess<'de> for Map<'_, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        match self.next_key()? {
            Some(key) => {
                seed.deserialize(de::value::BorrowedStrDeserializer::<Error>::new(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        let marker = self.value_marker()?;
        seed.deserialize(Value { r: &mut *self.r, marker })
    }
}

#[cfg(test)]
mod tests {
    use super::from_slice;
    use serde_json::{json, Value};

    #[test]
    fn every_container_form_and_scalar() {
        // {"a": [1, 2.5f32, "x"], "b": typed int8 array [1, 2], "c": counted array [true, null]}
        let mut doc = vec![b'{'];
        doc.extend_from_slice(b"i\x01a[i\x01d");
        doc.extend_from_slice(&2.5f32.to_be_bytes());
        doc.extend_from_slice(b"Si\x01x]");
        doc.extend_from_slice(b"i\x01b[$i#i\x02\x01\x02");
        doc.extend_from_slice(b"i\x01c[#U\x02TZ");
        doc.push(b'}');
        let v: Value = from_slice(&doc).unwrap();
        assert_eq!(v, json!({"a": [1, 2.5, "x"], "b": [1, 2], "c": [true, null]}));
    }

    #[test]
    fn floats_keep_their_bits() {
        for v in [0.1f32, 1e-45, -3.4028235e38, 0.37469396] {
            let mut doc = b"[$d#i\x01".to_vec();
            doc.extend_from_slice(&v.to_be_bytes());
            let back: Vec<f32> = from_slice(&doc).unwrap();
            assert_eq!(back[0].to_bits(), v.to_bits());
        }
    }

    #[test]
    fn skipped_fields_are_stepped_over() {
        #[derive(serde::Deserialize)]
        struct Only {
            b: i64,
        }
        // {"a": typed f32 array of 2, "x": {"y": [Z]}, "b": 7}
        let mut doc = b"{i\x01a[$d#i\x02".to_vec();
        doc.extend_from_slice(&[0; 8]);
        doc.extend_from_slice(b"i\x01x{i\x01y[Z]}i\x01bi\x07}");
        let v: Only = from_slice(&doc).unwrap();
        assert_eq!(v.b, 7);
    }

    /// A value asked for as a `SPAN` is stepped over and handed out as its bytes; decoded
    /// later, its errors give offsets in the whole document.
    #[test]
    fn spans_decode_later_with_the_document_offsets() {
        struct Span<'a>(&'a [u8]);
        impl<'de: 'a, 'a> serde::Deserialize<'de> for Span<'a> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Span<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("bytes")
                    }
                    fn visit_borrowed_bytes<E: serde::de::Error>(self, b: &'de [u8]) -> Result<Span<'de>, E> {
                        Ok(Span(b))
                    }
                }
                d.deserialize_newtype_struct(super::SPAN, V)
            }
        }
        #[derive(serde::Deserialize)]
        struct Doc<'a> {
            #[serde(borrow)]
            trees: Vec<Span<'a>>,
        }
        // {"trees": [[$i#i2 1 2], N [i3 S i1 x]]}: the no-op N is not part of the second span.
        let doc = b"{i\x05trees[[$i#i\x02\x01\x02N[i\x03Si\x01x]]}".to_vec();
        let d: Doc = from_slice(&doc).unwrap();
        assert_eq!(d.trees[0].0, b"[$i#i\x02\x01\x02");
        assert_eq!(d.trees[1].0, b"[i\x03Si\x01x]");
        assert_eq!(super::from_span::<Vec<i64>>(&doc, d.trees[0].0).unwrap(), vec![1, 2]);
        let e = super::from_span::<Vec<i64>>(&doc, d.trees[1].0).unwrap_err();
        assert!(e.schema, "{e}");
        assert!(super::from_span::<Vec<i64>>(&doc, b"[]").unwrap_err().to_string().contains("outside"));
        // Stepping over a span checks it as UBJSON: damage inside one (a string that is not
        // UTF-8) is refused in the first pass, where it is.
        let mut bad = doc.clone();
        let at = bad.len() - 4;
        bad[at] = 0xff;
        let e = from_slice::<Doc>(&bad).err().expect("damage inside a span is found").to_string();
        assert!(e.contains(&format!("string at byte {}", at)), "{e}");
    }

    #[test]
    fn damaged_documents_are_errors_not_panics() {
        let good = b"{i\x01a[$d#i\x01\x3f\x80\x00\x00}".to_vec();
        assert!(from_slice::<Value>(&good).is_ok());
        for cut in 0..good.len() {
            assert!(from_slice::<Value>(&good[..cut]).is_err());
            let _ = from_slice::<serde::de::IgnoredAny>(&good[..cut]);
        }
        assert!(from_slice::<Value>(b"[$d#L\x7f\xff\xff\xff\xff\xff\xff\xff").unwrap_err().to_string().contains("exceeds"));
        assert!(from_slice::<Value>(b"[X]").unwrap_err().to_string().contains("unknown type marker"));
        assert!(from_slice::<Value>(b"[$Z#L\x00\x00\x00\x00\x7f\xff\xff\xff").is_err());
        let deep = vec![b'['; 100];
        assert!(from_slice::<Value>(&deep).unwrap_err().to_string().contains("deeper"));
        assert!(from_slice::<Value>(b"[]x").unwrap_err().to_string().contains("trailing"));
    }
}
