//! IP literals in `:authority` and `source.address`, read by RFC 3986's `host [":" port]`:
//! `v4`, `v4:port`, `[v6]`, `[v6]:port`, with `port = *DIGIT`. Anything else (a name, a bare
//! IPv6 address, which cannot be told from one with a port, junk after the address) is not
//! an IP literal.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub fn ip_literal(authority: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(authority).ok()?;
    let (ip, after) = match text.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, after) = bracketed.split_once(']')?;
            (IpAddr::V6(inside.parse::<Ipv6Addr>().ok()?), after)
        }
        None => {
            let (host, after) = text.split_at(text.find(':').unwrap_or(text.len()));
            (IpAddr::V4(host.parse::<Ipv4Addr>().ok()?), after)
        }
    };
    let port_ok = match after.strip_prefix(':') {
        Some(port) => port.bytes().all(|b| b.is_ascii_digit()),
        None => after.is_empty(),
    };
    port_ok.then_some(ip)
}

/// What `source_prefix` hashes: a family tag and the network's leading octets, `4` and the /24
/// or `6` and the /48. An IPv4 client on a dual-stack listener (`[::ffff:a.b.c.d]`) is an
/// IPv4 client.
pub fn source_network(address: Option<&[u8]>) -> Option<Vec<u8>> {
    let octets = match ip_literal(address?)? {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            if o[..10].iter().all(|&b| b == 0) && o[10] == 0xff && o[11] == 0xff {
                o[12..].to_vec()
            } else {
                o.to_vec()
            }
        }
    };
    Some(match octets.len() {
        4 => [&[4u8][..], &octets[..3]].concat(),
        _ => [&[6u8][..], &octets[..6]].concat(),
    })
}
