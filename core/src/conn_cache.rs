//! Connection properties, remembered per downstream connection.
//!
//! The properties features read (`request.protocol`, `connection.tls_version`,
//! `connection.requested_server_name`, `source.address`) belong to the connection, yet every
//! property the host returns costs a call back into the module (`proxy_on_memory_allocate`):
//! in Envoy 1.40's V8 that round trip is the most expensive part of a host call (measured:
//! ~11.6k instructions for a found property against ~2.7k for a missing one, see
//! `benches/envoy_load/README.md`). With two or more properties wanted, the filter reads only
//! `connection_id` per request and the properties once per connection, into this table.
//!
//! A direct-mapped table of fixed-size slots, allocated once: a lookup or an insert never
//! allocates. A value longer than its slot (an SNI over 255 bytes, say) is not remembered; the
//! filter then reads the properties on every request of that connection, as without the
//! cache. Envoy's connection ids are unique for the life of the process, so a slot is never
//! mistaken for another connection's; a newer connection simply takes its slot over.
//!
//! `request.protocol` is a request property: with HTTP/2 and HTTP/3 it is fixed for the
//! connection, but an HTTP/1.x client could send `HTTP/1.0` and `HTTP/1.1` requests on one
//! keep-alive connection. The cache keeps the first request's value; `http_protocol` of later
//! requests on that connection follows it.

/// The properties, in [`crate::request::Property::ALL`] order: protocol, TLS version, SNI,
/// source address.
const PROPERTIES: usize = crate::request::Property::ALL.len();
/// Room per property in a slot (bytes): `HTTP/1.1`, `TLSv1.3`, a DNS name (at most 253),
/// `[ipv6]:port` (at most 47).
const CAPS: [usize; PROPERTIES] = [16, 16, 256, 64];
const ROOM: usize = CAPS[0] + CAPS[1] + CAPS[2] + CAPS[3];

struct Slot {
    id: u64,
    used: bool,
    /// Per property: its length, or `u16::MAX` for no value (the host had none).
    lens: [u16; PROPERTIES],
    bytes: [u8; ROOM],
}

const NONE: u16 = u16::MAX;

/// See the module documentation.
pub struct ConnCache {
    slots: Box<[Slot]>,
}

impl ConnCache {
    /// A table of `slots` connections (rounded up to a power of two, at least 1).
    pub fn new(slots: usize) -> ConnCache {
        let n = slots.max(1).next_power_of_two();
        ConnCache { slots: (0..n).map(|_| Slot { id: 0, used: false, lens: [NONE; PROPERTIES], bytes: [0; ROOM] }).collect() }
    }

    fn slot(&self, id: u64) -> usize {
        // Ids are sequential: the low bits spread consecutive connections over the table.
        (id as usize) & (self.slots.len() - 1)
    }

    /// The remembered properties of connection `id`, if any.
    pub fn get(&self, id: u64) -> Option<[Option<&[u8]>; PROPERTIES]> {
        let s = &self.slots[self.slot(id)];
        if !s.used || s.id != id {
            return None;
        }
        let mut at = 0;
        let mut out = [None; PROPERTIES];
        for (k, (o, &len)) in out.iter_mut().zip(&s.lens).enumerate() {
            if len != NONE {
                *o = Some(&s.bytes[at..at + len as usize]);
            }
            at += CAPS[k];
        }
        Some(out)
    }

    /// Remembers the properties of connection `id`; false (and nothing remembered) when a
    /// value does not fit its slot.
    pub fn put(&mut self, id: u64, values: [Option<&[u8]>; PROPERTIES]) -> bool {
        if values.iter().zip(CAPS).any(|(v, cap)| v.is_some_and(|v| v.len() > cap)) {
            return false;
        }
        let i = self.slot(id);
        let s = &mut self.slots[i];
        let mut at = 0;
        for (k, v) in values.iter().enumerate() {
            match v {
                Some(v) => {
                    s.bytes[at..at + v.len()].copy_from_slice(v);
                    s.lens[k] = v.len() as u16;
                }
                None => s.lens[k] = NONE,
            }
            at += CAPS[k];
        }
        s.id = id;
        s.used = true;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_connection() {
        let mut c = ConnCache::new(4);
        assert!(c.get(7).is_none());
        assert!(c.put(7, [Some(b"HTTP/2"), Some(b"TLSv1.3"), Some(b""), None]));
        assert_eq!(c.get(7), Some([Some(&b"HTTP/2"[..]), Some(&b"TLSv1.3"[..]), Some(&b""[..]), None]));
        // Same slot, another connection: not mistaken for 7, and takes the slot over.
        assert!(c.get(11).is_none());
        assert!(c.put(11, [Some(b"HTTP/1.1"), None, None, Some(b"192.0.2.1:5555")]));
        assert!(c.get(7).is_none());
        assert_eq!(c.get(11), Some([Some(&b"HTTP/1.1"[..]), None, None, Some(&b"192.0.2.1:5555"[..])]));
        assert_eq!(c.get(8), None);
        // Longest values fit; longer ones are refused and leave the slot as it was.
        let sni = [b'a'; 256];
        assert!(c.put(8, [Some(b"HTTP/1.1"), Some(b"TLSv1.2"), Some(&sni), Some(&[b'9'; 64])]));
        assert_eq!(c.get(8).unwrap()[2], Some(&sni[..]));
        assert!(!c.put(12, [None, None, Some(&[b'a'; 257]), None]));
        assert!(c.get(12).is_none());
        assert!(c.get(8).is_some());
    }
}
