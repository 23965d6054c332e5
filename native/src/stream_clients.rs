//! Which client each of a worker's streams is (`velocity` shares), kept from its request
//! headers to its completion, so that the completion reads the status alone: not the request's
//! headers, its address and the client's hash again (~1k instructions of Envoy's and the
//! module's per request, benches/envoy_load/README.md). Direct-mapped on the stream's
//! identity, fixed size: a slot another stream took is found missing, and that completion
//! finds its client the long way.

/// Streams remembered per worker (each 16 bytes): more than a worker holds open at once on
/// most servers; past it, collisions only cost the long way.
const SLOTS: usize = 1024;

pub struct StreamClients {
    /// (stream id, its client); id 0 is an empty slot.
    slots: Box<[(usize, Option<u64>)]>,
}

impl StreamClients {
    pub fn new() -> StreamClients {
        StreamClients { slots: vec![(0, None); SLOTS].into_boxed_slice() }
    }

    fn index(stream: usize) -> usize {
        // Envoy's filter objects are heap pointers: their low bits carry little.
        ((stream as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// Remembers `stream`'s client (`None`: a request without a client key), over whatever the
    /// slot held.
    pub fn remember(&mut self, stream: usize, client: Option<u64>) {
        self.slots[Self::index(stream)] = (stream, client);
    }

    /// `stream`'s client, if its slot still holds it (`Some(None)`: remembered without one),
    /// and forgets it.
    pub fn take(&mut self, stream: usize) -> Option<Option<u64>> {
        let slot = &mut self.slots[Self::index(stream)];
        if slot.0 != stream || stream == 0 {
            return None;
        }
        let client = slot.1;
        *slot = (0, None);
        Some(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_finds_its_client_once_and_a_collision_is_missing() {
        let mut c = StreamClients::new();
        c.remember(0x7f00_1000, Some(7));
        c.remember(0x7f00_2000, None);
        assert_eq!(c.take(0x7f00_1000), Some(Some(7)));
        assert_eq!(c.take(0x7f00_1000), None, "taken once");
        assert_eq!(c.take(0x7f00_2000), Some(None));
        // Another stream in the same slot: the first one is then missing, never given another's client.
        let first = 0x7f00_3000;
        let other = (1..1 << 20).map(|k| first + 16 * k).find(|&s| StreamClients::index(s) == StreamClients::index(first)).unwrap();
        c.remember(first, Some(1));
        c.remember(other, Some(2));
        assert_eq!(c.take(first), None);
        assert_eq!(c.take(other), Some(Some(2)));
    }
}
