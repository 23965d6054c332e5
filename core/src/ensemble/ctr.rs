//! CatBoost online CTR features, computed per row the way CatBoost's applier computes them
//! (`static_ctr_provider.cpp`, `CalcHashes`): hash the row's projection, look the hash up in
//! the model's own counter table, and take the precomputed CTR value (or the value for an
//! unseen combination). Nothing here allocates.
//!
//! Categorical inputs are category codes (what the filter's hashed features and the feature
//! log hold); CatBoost saw each code as its decimal string, so a code's CatBoost hash is
//! `CalcCatFeatureHash` — the low 32 bits of CityHash64 v1.0 — of that string. NaN, values at
//! or below -1 and values from 2^32 up are the category "-1", which integer codes logged by the
//! filter never are: an unseen category.

use crate::artifact::layout::{ctr_part, CtrFeature, CtrPart};

const K2: u64 = 0x9ae1_6a3b_2f90_404f;
const K3: u64 = 0xc949_d7c7_509e_6557;

fn hash_len16(u: u64, v: u64) -> u64 {
    const MUL: u64 = 0x9ddf_ea08_eb38_2d69;
    let mut a = (u ^ v).wrapping_mul(MUL);
    a ^= a >> 47;
    let mut b = (v ^ a).wrapping_mul(MUL);
    b ^= b >> 47;
    b.wrapping_mul(MUL)
}

/// CityHash64 v1.0 (CatBoost's `util/digest/city.cpp`) for strings of at most 16 bytes, which
/// every decimal category code is.
fn city_hash64_short(s: &[u8]) -> u64 {
    let len = s.len();
    let load64 = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let load32 = |i: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&s[i..i + 4]);
        u32::from_le_bytes(b) as u64
    };
    if len > 8 {
        let a = load64(0);
        let b = load64(len - 8);
        hash_len16(a, b.wrapping_add(len as u64).rotate_right(len as u32)) ^ b
    } else if len >= 4 {
        let a = load32(0);
        hash_len16((len as u64).wrapping_add(a << 3), load32(len - 4))
    } else if len > 0 {
        let (a, b, c) = (s[0] as u32, s[len >> 1] as u32, s[len - 1] as u32);
        let y = a.wrapping_add(b << 8);
        let z = (len as u32).wrapping_add(c << 2);
        let m = (y as u64).wrapping_mul(K2) ^ (z as u64).wrapping_mul(K3);
        (m ^ (m >> 47)).wrapping_mul(K2)
    } else {
        K2
    }
}

/// CatBoost's hash of the category string of code `code` (its decimal form).
pub fn code_hash(code: u32) -> u32 {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    let mut n = code;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    city_hash64_short(&buf[i..]) as u32
}

/// CatBoost's hash of the category a feature value stands for (see the module note).
pub fn category_hash(x: f32) -> u32 {
    if x > -1.0 && x < 4294967296.0 {
        code_hash(x as u32)
    } else {
        city_hash64_short(b"-1") as u32
    }
}

/// CatBoost's `CalcHash(a, b)`: how a projection's elements are folded into one key.
pub fn combine(a: u64, b: u64) -> u64 {
    const MAGIC_MULT: u64 = 0x4906_ba49_4954_cb65;
    MAGIC_MULT.wrapping_mul(a.wrapping_add(MAGIC_MULT.wrapping_mul(b)))
}

/// The key of a row's projection. `x` must hold every part's feature (validated at load).
pub fn projection_key(parts: &[CtrPart], x: &[f32]) -> u64 {
    let mut key = 0u64;
    for p in parts {
        let v = x[p.feature as usize];
        let element = match p.kind {
            // CatBoost widens the signed 32-bit hash to 64 bits.
            ctr_part::CATEGORY => category_hash(v) as i32 as i64 as u64,
            ctr_part::ABOVE => (v > f32::from_bits(p.value)) as u64,
            ctr_part::ABOVE_NAN_TRUE => (v.is_nan() || v > f32::from_bits(p.value)) as u64,
            _ => (category_hash(v) == p.value) as u64,
        };
        key = combine(key, element);
    }
    key
}

/// The CTR feature's value for a row.
pub fn value(ctr: &CtrFeature, parts: &[CtrPart], keys: &[u64], values: &[f32], x: &[f32]) -> f32 {
    let key = projection_key(parts, x);
    match keys.binary_search(&key) {
        Ok(i) => values[i],
        Err(_) => ctr.empty_value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_hashes_match_catboost() {
        // CatBoost's own hashes of these strings (catboost 1.2.10, exported model mapping).
        let known: [(u32, i32); 6] = [(0, -1438285038), (1, 1121341681), (9, -1829579975), (12, 1445320840), (29, -354276528), (6, 504640797)];
        for (code, hash) in known {
            assert_eq!(code_hash(code), hash as u32, "{code}");
            assert_eq!(category_hash(code as f32 + 0.5), hash as u32, "{code}.5 truncates to {code}");
        }
        assert_eq!(category_hash(f32::NAN), category_hash(-1.0));
        assert_eq!(category_hash(4294967296.0), category_hash(-7.0));
    }
}
