//! proxy-wasm's serialised header map, written and read here without the core's code, so the
//! `features` target can check `HeaderMap::parse` against a second reading of the same bytes:
//! `u32 count`, `count × (u32 name_len, u32 value_len)`, then every name and value each
//! followed by one terminator byte (NUL from Envoy). All integers little-endian.

pub fn encode(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (name, value) in pairs {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (name, value) in pairs {
        for part in [name, value] {
            out.extend_from_slice(part);
            out.push(0);
        }
    }
    out
}

/// The pairs of `buf`, or `None` when a length does not fit the buffer. Like the filter, the
/// reading trusts the lengths, not the terminators, and ignores bytes after the last entry;
/// Envoy hands an empty buffer for an empty map.
pub fn decode(buf: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    if buf.is_empty() {
        return Some(Vec::new());
    }
    let u32_at = |at: usize| -> Option<usize> {
        let bytes: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(u32::from_le_bytes(bytes) as usize)
    };
    let count = u32_at(0)?;
    let mut sizes = Vec::new();
    for i in 0..count {
        // A count the buffer cannot hold is refused before anything is allocated for it.
        let at = 4usize.checked_add(i.checked_mul(8)?)?;
        sizes.push((u32_at(at)?, u32_at(at + 4)?));
    }
    let mut at = 4 + 8 * count;
    let mut take = |len: usize| -> Option<&[u8]> {
        let part = buf.get(at..at.checked_add(len)?)?;
        at = at.checked_add(len + 1)?;
        (at <= buf.len()).then_some(part)
    };
    let mut pairs = Vec::with_capacity(count);
    for (name_len, value_len) in sizes {
        let name = take(name_len)?;
        let value = take(value_len)?;
        pairs.push((name, value));
    }
    Some(pairs)
}
