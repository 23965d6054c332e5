//! A bounds-checked reader of FlatBuffers tables, enough to walk CatBoost's `.cbm` schema
//! (`catboost/libs/model/flatbuffers/*.fbs`) by field slot.
//!
//! Written here rather than taken from the `flatbuffers` crate: its table accessors are
//! `unsafe` without the generated code (which needs `flatc` and CatBoost's schema at build
//! time), and a model file is untrusted input that must never panic or read out of bounds.
//! Every access below checks its bounds and returns an error instead.

use std::fmt;

#[derive(Debug)]
pub struct FbError(pub String);

impl fmt::Display for FbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, FbError>;

fn err<T>(what: impl Into<String>) -> Result<T> {
    Err(FbError(what.into()))
}

fn bytes<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N]> {
    let end = at.checked_add(N).filter(|&e| e <= buf.len());
    let Some(end) = end else { return err(format!("read of {N} bytes at {at} past the end ({} bytes)", buf.len())) };
    let mut a = [0u8; N];
    a.copy_from_slice(&buf[at..end]);
    Ok(a)
}

fn u32_at(buf: &[u8], at: usize) -> Result<u32> {
    bytes::<4>(buf, at).map(u32::from_le_bytes)
}

/// A table: the buffer and where the table starts.
#[derive(Clone, Copy)]
pub struct Table<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The root table of a FlatBuffer.
pub fn root(buf: &[u8]) -> Result<Table<'_>> {
    let pos = u32_at(buf, 0)? as usize;
    Table::at(buf, pos)
}

impl<'a> Table<'a> {
    fn at(buf: &'a [u8], pos: usize) -> Result<Table<'a>> {
        let t = Table { buf, pos };
        t.vtable()?;
        Ok(t)
    }

    /// (vtable position, vtable length in bytes).
    fn vtable(&self) -> Result<(usize, usize)> {
        let soffset = i32::from_le_bytes(bytes::<4>(self.buf, self.pos)?) as i64;
        let vt = self.pos as i64 - soffset;
        if vt < 0 || vt as usize >= self.buf.len() {
            return err(format!("table at {} has its vtable out of the buffer", self.pos));
        }
        let vt = vt as usize;
        let len = u16::from_le_bytes(bytes::<2>(self.buf, vt)?) as usize;
        if len < 4 || vt + len > self.buf.len() {
            return err(format!("vtable at {vt} of length {len} out of the buffer"));
        }
        Ok((vt, len))
    }

    /// Where field `slot` (0-based, in schema order) sits, or `None` when absent (default).
    fn field(&self, slot: usize) -> Result<Option<usize>> {
        let (vt, len) = self.vtable()?;
        let entry = 4 + 2 * slot;
        if entry + 2 > len {
            return Ok(None);
        }
        let off = u16::from_le_bytes(bytes::<2>(self.buf, vt + entry)?) as usize;
        Ok(if off == 0 { None } else { Some(self.pos + off) })
    }

    fn deref(&self, at: usize) -> Result<usize> {
        let target = at.checked_add(u32_at(self.buf, at)? as usize).filter(|&t| t < self.buf.len());
        target.ok_or_else(|| FbError(format!("offset at {at} points out of the buffer")))
    }

    pub fn i32(&self, slot: usize, default: i32) -> Result<i32> {
        self.field(slot)?.map_or(Ok(default), |at| bytes::<4>(self.buf, at).map(i32::from_le_bytes))
    }

    pub fn f32(&self, slot: usize, default: f32) -> Result<f32> {
        self.field(slot)?.map_or(Ok(default), |at| bytes::<4>(self.buf, at).map(f32::from_le_bytes))
    }

    pub fn f64(&self, slot: usize, default: f64) -> Result<f64> {
        self.field(slot)?.map_or(Ok(default), |at| bytes::<8>(self.buf, at).map(f64::from_le_bytes))
    }

    pub fn u8(&self, slot: usize, default: u8) -> Result<u8> {
        self.field(slot)?.map_or(Ok(default), |at| bytes::<1>(self.buf, at).map(|b| b[0]))
    }

    pub fn table(&self, slot: usize) -> Result<Option<Table<'a>>> {
        match self.field(slot)? {
            None => Ok(None),
            Some(at) => Table::at(self.buf, self.deref(at)?).map(Some),
        }
    }

    /// A vector field: (position of its first element, element count), checked to fit
    /// `elem` bytes per element.
    fn vector(&self, slot: usize, elem: usize) -> Result<Option<(usize, usize)>> {
        let Some(at) = self.field(slot)? else { return Ok(None) };
        let v = self.deref(at)?;
        let n = u32_at(self.buf, v)? as usize;
        let start = v + 4;
        let end = n.checked_mul(elem).and_then(|b| b.checked_add(start));
        if end.is_none_or(|e| e > self.buf.len()) {
            return err(format!("vector of {n} elements at {v} runs past the buffer"));
        }
        Ok(Some((start, n)))
    }

    pub fn string(&self, slot: usize) -> Result<Option<String>> {
        let Some((start, n)) = self.vector(slot, 1)? else { return Ok(None) };
        String::from_utf8(self.buf[start..start + n].to_vec()).map(Some).map_err(|_| FbError(format!("string at {start} is not UTF-8")))
    }

    pub fn bytes(&self, slot: usize) -> Result<&'a [u8]> {
        Ok(self.vector(slot, 1)?.map_or(&[][..], |(start, n)| &self.buf[start..start + n]))
    }

    /// A vector of 4-byte scalars (int, float) or of structs made of them, as raw words.
    pub fn words(&self, slot: usize, per_element: usize) -> Result<Vec<[u8; 4]>> {
        let Some((start, n)) = self.vector(slot, 4 * per_element)? else { return Ok(Vec::new()) };
        (0..n * per_element).map(|k| bytes::<4>(self.buf, start + 4 * k)).collect()
    }

    pub fn f64s(&self, slot: usize) -> Result<Vec<f64>> {
        let Some((start, n)) = self.vector(slot, 8)? else { return Ok(Vec::new()) };
        (0..n).map(|k| bytes::<8>(self.buf, start + 8 * k).map(f64::from_le_bytes)).collect()
    }

    pub fn tables(&self, slot: usize) -> Result<Vec<Table<'a>>> {
        let Some((start, n)) = self.vector(slot, 4)? else { return Ok(Vec::new()) };
        (0..n).map(|k| Table::at(self.buf, self.deref(start + 4 * k)?)).collect()
    }

    pub fn strings(&self, slot: usize) -> Result<Vec<String>> {
        let Some((start, n)) = self.vector(slot, 4)? else { return Ok(Vec::new()) };
        (0..n)
            .map(|k| {
                let s = self.deref(start + 4 * k)?;
                let len = u32_at(self.buf, s)? as usize;
                let body = self.buf.get(s + 4..s + 4 + len).ok_or_else(|| FbError(format!("string at {s} runs past the buffer")))?;
                String::from_utf8(body.to_vec()).map_err(|_| FbError(format!("string at {s} is not UTF-8")))
            })
            .collect()
    }
}

pub fn i32s(words: &[[u8; 4]]) -> Vec<i32> {
    words.iter().map(|w| i32::from_le_bytes(*w)).collect()
}

pub fn f32s(words: &[[u8; 4]]) -> Vec<f32> {
    words.iter().map(|w| f32::from_le_bytes(*w)).collect()
}
