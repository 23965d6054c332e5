//! Keyed hashing of categorical values into buckets.
//!
//! Categorical request features (method, user agent, path prefix, header order, …) have
//! unbounded vocabularies, so the filter hashes each value and the model sees `bucket =
//! hash mod buckets`. The hash is keyed with the operator's secret: without the key an attacker
//! cannot compute which bucket a crafted value lands in, so cannot steer a request into a bucket
//! the model learned to trust. xxh3 with a secret is fast and well distributed but is not a MAC;
//! the key protects bucket placement, nothing else.

use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_secret, Xxh3};

/// The xxh3 secret size (`xxhash_rust::xxh3::DEFAULT_SECRET_SIZE`).
const SECRET_LEN: usize = 192;

/// Shortest configured key accepted.
pub const MIN_KEY_LEN: usize = 16;

/// A 192-byte xxh3 secret derived from the configured key.
#[derive(Clone)]
pub struct HashKey {
    secret: [u8; SECRET_LEN],
}

impl HashKey {
    /// Expands `key` into an xxh3 secret: twelve 128-bit blocks `xxh3_128(key, seed = block)`.
    /// Deterministic, so every worker and the native tools bucket values identically.
    pub fn new(key: &[u8]) -> HashKey {
        let mut secret = [0u8; SECRET_LEN];
        for (i, block) in secret.chunks_exact_mut(16).enumerate() {
            block.copy_from_slice(&xxh3_128_with_seed(key, 0x6564_6765_7363_6f72 ^ i as u64).to_le_bytes());
        }
        HashKey { secret }
    }

    pub fn hash(&self, value: &[u8]) -> u64 {
        xxh3_64_with_secret(value, &self.secret)
    }

    /// A hasher with the same key for a value built from parts (the header order).
    pub fn hasher(&self) -> PartsHasher<'_> {
        PartsHasher { key: self, buf: [0; PARTS_BUF], len: 0, stream: None }
    }
}

/// Parts gather here before one [`HashKey::hash`] call; a typical header order (~150 bytes)
/// fits. xxh3's streaming state copies the 192-byte secret and buffers 256 bytes itself, several
/// hundred instructions per request, so it is used only for values that outgrow this.
const PARTS_BUF: usize = 512;

/// Hashes the concatenation of the parts given to [`update`](Self::update), bit for bit as
/// [`HashKey::hash`] would the whole (xxh3's streaming and one-shot forms agree).
pub struct PartsHasher<'k> {
    key: &'k HashKey,
    buf: [u8; PARTS_BUF],
    len: usize,
    stream: Option<Xxh3>,
}

impl PartsHasher<'_> {
    pub fn update(&mut self, part: &[u8]) {
        if let Some(stream) = self.stream.as_mut() {
            return stream.update(part);
        }
        if let Some(room) = self.buf.get_mut(self.len..self.len + part.len()) {
            room.copy_from_slice(part);
            self.len += part.len();
            return;
        }
        let mut stream = Xxh3::with_secret(self.key.secret);
        stream.update(&self.buf[..self.len]);
        stream.update(part);
        self.stream = Some(stream);
    }

    pub fn digest(&self) -> u64 {
        match &self.stream {
            Some(stream) => stream.digest(),
            None => self.key.hash(&self.buf[..self.len]),
        }
    }
}

/// Maps a 64-bit hash onto `0..buckets` by multiply-shift (Lemire): uniform like `%`, no
/// division.
#[inline]
pub fn bucket(hash: u64, buckets: u32) -> u32 {
    ((hash as u128 * buckets as u128) >> 64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_hash_as_their_concatenation() {
        let key = HashKey::new(b"0123456789abcdef");
        let mut whole = Vec::new();
        let mut h = key.hasher();
        assert_eq!(h.digest(), key.hash(b""));
        // Parts of every length around the stack buffer's size and xxh3's internal 256 bytes.
        for n in 0..90usize {
            let part: Vec<u8> = (0..n).map(|i| (i * 31 + n) as u8).collect();
            h.update(&part);
            whole.extend_from_slice(&part);
            assert_eq!(h.digest(), key.hash(&whole), "after {} bytes", whole.len());
        }
        assert!(whole.len() > 2 * PARTS_BUF);
    }

    #[test]
    fn keyed_and_stable() {
        let a = HashKey::new(b"0123456789abcdef");
        let b = HashKey::new(b"0123456789abcdeg");
        assert_eq!(a.hash(b"GET"), HashKey::new(b"0123456789abcdef").hash(b"GET"));
        assert_ne!(a.hash(b"GET"), b.hash(b"GET"));
        let mut h = a.hasher();
        h.update(b"G");
        h.update(b"ET");
        assert_eq!(h.digest(), a.hash(b"GET"));
    }

    #[test]
    fn buckets_in_range_and_spread() {
        let k = HashKey::new(b"0123456789abcdef");
        let mut seen = [0u32; 16];
        for i in 0..16_000u32 {
            let b = bucket(k.hash(&i.to_le_bytes()), 16);
            seen[b as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
        assert_eq!(bucket(u64::MAX, 7), 6);
        assert_eq!(bucket(0, 7), 0);
    }
}
