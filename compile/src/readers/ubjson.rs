//! Universal Binary JSON (the format XGBoost writes for `save_model("m.ubj")` and returns from
//! `save_raw()`) → JSON text, so the XGBoost reader has one parser and one set of semantics.
//!
//! Written here rather than taken from a crate: the UBJSON crates on crates.io are unmaintained
//! or lack the optimised (`$` type, `#` count) containers XGBoost writes for every array, and
//! the format is small (draft 12: <https://ubjson.org/type-reference/>).
//!
//! Floats are written in the shortest text that reads back to the same value (`{:e}` of the
//! `f32`/`f64`), so a model read from `.ubj` holds exactly the values of the same model read
//! from `.json`, and compiles to the same bytes.

use std::fmt::Write;

/// Nesting deeper than this is refused (XGBoost models nest about eight levels).
const MAX_DEPTH: usize = 64;

pub fn to_json(bytes: &[u8]) -> Result<String, String> {
    let mut r = Reader { bytes, at: 0, out: String::with_capacity(bytes.len() * 2) };
    let marker = r.byte()?;
    r.value(marker, 0)?;
    while r.at < bytes.len() && bytes[r.at] == b'N' {
        r.at += 1;
    }
    if r.at != bytes.len() {
        return Err(format!("{} trailing bytes after the document", bytes.len() - r.at));
    }
    Ok(r.out)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    out: String,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("truncated document")?;
        self.at += 1;
        Ok(b)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let end = self.at.checked_add(N).filter(|&e| e <= self.bytes.len()).ok_or("truncated document")?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(a)
    }

    /// An integer of the type `marker` (big-endian, as UBJSON stores every number).
    fn int(&mut self, marker: u8) -> Result<i64, String> {
        Ok(match marker {
            b'i' => i8::from_be_bytes(self.take()?) as i64,
            b'U' => u8::from_be_bytes(self.take()?) as i64,
            b'I' => i16::from_be_bytes(self.take()?) as i64,
            b'l' => i32::from_be_bytes(self.take()?) as i64,
            b'L' => i64::from_be_bytes(self.take()?),
            other => return Err(format!("expected an integer type, found marker {:?} at byte {}", other as char, self.at - 1)),
        })
    }

    fn length(&mut self) -> Result<usize, String> {
        let marker = self.byte()?;
        let n = self.int(marker)?;
        // Every string byte and every container element takes at least one byte of input, so a
        // length beyond the bytes left is damage, refused before anything is reserved for it.
        let left = self.bytes.len() - self.at;
        usize::try_from(n).ok().filter(|&n| n <= left).ok_or_else(|| format!("length {n} at byte {} exceeds the {left} bytes left", self.at))
    }

    fn string_body(&mut self) -> Result<(), String> {
        let n = self.length()?;
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or("truncated string")?;
        let s = std::str::from_utf8(&self.bytes[self.at..end]).map_err(|_| format!("string at byte {} is not UTF-8", self.at))?;
        self.at = end;
        let quoted = serde_json::to_string(s).map_err(|e| e.to_string())?;
        self.out.push_str(&quoted);
        Ok(())
    }

    fn float(&mut self, v: f64, text: impl std::fmt::LowerExp) -> Result<(), String> {
        if !v.is_finite() {
            return Err(format!("non-finite number {v} at byte {} (JSON cannot hold it)", self.at));
        }
        let _ = write!(self.out, "{text:e}");
        Ok(())
    }

    fn value(&mut self, marker: u8, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        match marker {
            b'Z' => self.out.push_str("null"),
            b'T' => self.out.push_str("true"),
            b'F' => self.out.push_str("false"),
            b'i' | b'U' | b'I' | b'l' | b'L' => {
                let v = self.int(marker)?;
                let _ = write!(self.out, "{v}");
            }
            b'd' => {
                let v = f32::from_be_bytes(self.take()?);
                self.float(v as f64, v)?;
            }
            b'D' => {
                let v = f64::from_be_bytes(self.take()?);
                self.float(v, v)?;
            }
            b'H' => {
                // High-precision number: its decimal text, written as a JSON number.
                let n = self.length()?;
                let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or("truncated number")?;
                let text = std::str::from_utf8(&self.bytes[self.at..end]).map_err(|_| "high-precision number is not text")?;
                if text.parse::<f64>().is_err() {
                    return Err(format!("high-precision number {text:?} is not a number"));
                }
                self.out.push_str(text);
                self.at = end;
            }
            b'C' => {
                let c = self.byte()?;
                let quoted = serde_json::to_string(&(c as char).to_string()).map_err(|e| e.to_string())?;
                self.out.push_str(&quoted);
            }
            b'S' => self.string_body()?,
            b'[' => self.container(false, depth)?,
            b'{' => self.container(true, depth)?,
            other => return Err(format!("unknown type marker {:?} at byte {}", other as char, self.at - 1)),
        }
        Ok(())
    }

    /// An array or object after its opening marker, in any of UBJSON's three forms: plain
    /// (ends with `]`/`}`), counted (`#n`), typed and counted (`$t#n`, values without markers).
    fn container(&mut self, object: bool, depth: usize) -> Result<(), String> {
        let (mut typed, mut count) = (None, None);
        if self.bytes.get(self.at) == Some(&b'$') {
            self.at += 1;
            typed = Some(self.byte()?);
            if self.bytes.get(self.at) != Some(&b'#') {
                return Err(format!("typed container without a count at byte {}", self.at));
            }
        }
        if self.bytes.get(self.at) == Some(&b'#') {
            self.at += 1;
            count = Some(self.length()?);
        }
        self.out.push(if object { '{' } else { '[' });
        let mut i = 0usize;
        loop {
            match count {
                Some(n) if i == n => break,
                None => {
                    while self.bytes.get(self.at) == Some(&b'N') {
                        self.at += 1;
                    }
                    if *self.bytes.get(self.at).ok_or("truncated container")? == if object { b'}' } else { b']' } {
                        self.at += 1;
                        break;
                    }
                }
                _ => {}
            }
            if i > 0 {
                self.out.push(',');
            }
            if object {
                self.string_body()?;
                self.out.push(':');
            }
            let marker = match typed {
                Some(t) => t,
                None => self.byte()?,
            };
            self.value(marker, depth + 1)?;
            i += 1;
        }
        self.out.push(if object { '}' } else { ']' });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::to_json;

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
        assert_eq!(to_json(&doc).unwrap(), r#"{"a":[1,2.5e0,"x"],"b":[1,2],"c":[true,null]}"#);
    }

    #[test]
    fn floats_read_back_exactly() {
        for v in [0.1f32, 1e-45, -3.4028235e38, 0.37469396] {
            let mut doc = vec![b'[', b'd'];
            doc.extend_from_slice(&v.to_be_bytes());
            doc.push(b']');
            let text = to_json(&doc).unwrap();
            let back: Vec<f32> = serde_json::from_str(&text).unwrap();
            assert_eq!(back[0].to_bits(), v.to_bits(), "{text}");
        }
    }

    #[test]
    fn damaged_documents_are_errors_not_panics() {
        let good = b"{i\x01a[$d#i\x01\x3f\x80\x00\x00]".to_vec();
        for cut in 0..good.len() {
            let _ = to_json(&good[..cut]);
        }
        assert!(to_json(b"[$d#L\x7f\xff\xff\xff\xff\xff\xff\xff").is_err());
        assert!(to_json(b"[d\x7f\xc0\x00\x00]").unwrap_err().contains("non-finite"));
        assert!(to_json(b"[X]").unwrap_err().contains("unknown type marker"));
        let deep = vec![b'['; 100];
        assert!(to_json(&deep).unwrap_err().contains("deeper"));
    }
}
