//! The connection's TLS client fingerprints. The JA4 (FoxIO), as Envoy's `tls_inspector` computes it
//! (`%TLS_JA4_FINGERPRINT%`): `a_b_c`, where `a` is ten characters read in place here —
//! transport (`t` TCP, `q` QUIC, `d` DTLS), TLS version (`13`, `12`, `11`, `10`, `s3`, `s2`,
//! `d1`, `d2`, `d3`, `00`), SNI (`d` a domain, `i` none), the cipher and extension counts (two
//! decimal digits each, capped at 99) and the first and last characters of the first ALPN value
//! (`00` without ALPN) — and `b`, `c` are 12 hex digits each (truncated SHA-256 of the sorted
//! cipher and extension lists), kept as bytes. The JA3 (`%TLS_JA3_FINGERPRINT%`) is an MD5 in
//! 32 lower-case hex digits.
//!
//! No proxy-wasm property nor dynamic-module call gives a filter these, so Envoy writes them into
//! request headers with its formatter before the filter runs (the connection manager's early
//! header mutation, over any client copy), and the header pass reads them on TLS connections only
//! (`connection.tls_version` present). On plain HTTP the formatter is empty and writes nothing, so
//! a header there can only be a client's: it is ignored, which costs Envoy nothing per request,
//! where removing it costs a header-map scan per name (benches/envoy_load/README.md).

/// The request header Envoy writes the JA4 into, from `%TLS_JA4_FINGERPRINT%`.
/// harness/render_envoy.py reads these two constants for the Envoy configurations.
pub const JA4_HEADER: &str = "x-edgescore-ja4";
/// The request header Envoy writes the JA3 into, from `%TLS_JA3_FINGERPRINT%`.
pub const JA3_HEADER: &str = "x-edgescore-ja3";

/// A parsed JA4, borrowing the header value it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ja4<'a> {
    /// The whole fingerprint.
    pub full: &'a [u8],
    /// The ten-character `a` part.
    pub a: &'a [u8],
    pub transport: u8,
    /// The TLS version as a number (1.0–1.3; SSL 2 and 3 as 0.2 and 0.3; DTLS 1.0–1.3 as their
    /// TLS counterparts); `None` for `00` (unknown).
    pub version: Option<f32>,
    pub sni: bool,
    pub ciphers: u8,
    pub extensions: u8,
    /// The ALPN's first and last characters (`00`: none).
    pub alpn: &'a [u8],
}

/// `None` for anything that is not a JA4 as defined above.
pub fn parse(s: &[u8]) -> Option<Ja4<'_>> {
    if s.len() != 36 || s[10] != b'_' || s[23] != b'_' {
        return None;
    }
    if !s[11..23].iter().chain(&s[24..]).all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)) {
        return None;
    }
    let transport = s[0];
    if !matches!(transport, b't' | b'q' | b'd') {
        return None;
    }
    let version = match &s[1..3] {
        b"13" | b"d3" => Some(1.3),
        b"12" | b"d2" => Some(1.2),
        b"11" => Some(1.1),
        b"10" | b"d1" => Some(1.0),
        b"s3" => Some(0.3),
        b"s2" => Some(0.2),
        b"00" => None,
        _ => return None,
    };
    let sni = match s[3] {
        b'd' => true,
        b'i' => false,
        _ => return None,
    };
    let count = |d: &[u8]| (d[0].is_ascii_digit() && d[1].is_ascii_digit()).then(|| (d[0] - b'0') * 10 + (d[1] - b'0'));
    let alpn = &s[8..10];
    if !alpn.iter().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    Some(Ja4 { full: s, a: &s[..10], transport, version, sni, ciphers: count(&s[4..6])?, extensions: count(&s[6..8])?, alpn })
}

/// Whether `p` is the start of some JA4 [`parse`] accepts (the whole of one included): what a
/// UA fingerprint table's `prefix*` entries hold.
pub fn is_prefix(p: &[u8]) -> bool {
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    p.len() <= 36
        && p.iter().enumerate().all(|(i, &c)| match i {
            0 => matches!(c, b't' | b'q' | b'd'),
            1 => matches!(c, b'1' | b'd' | b's' | b'0'),
            2 => matches!(&[p[1], c], b"13" | b"12" | b"11" | b"10" | b"d3" | b"d2" | b"d1" | b"s3" | b"s2" | b"00"),
            3 => matches!(c, b'd' | b'i'),
            4..=7 => c.is_ascii_digit(),
            8 | 9 => c.is_ascii_alphanumeric(),
            10 | 23 => c == b'_',
            _ => hex(c),
        })
}

/// A JA3 hash as Envoy writes it: 32 lower-case hex digits.
pub fn is_ja3(s: &[u8]) -> bool {
    s.len() == 32 && s.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chrome 143's fingerprint (as browserleaks.com reports it), and what Envoy 1.40 computed
    /// for curl on a loopback TLS listener without SNI.
    #[test]
    fn parses_real_fingerprints() {
        let chrome = parse(b"t13d1516h2_8daaf6152771_d8a2da3f94cd").unwrap();
        assert_eq!((chrome.transport, chrome.version, chrome.sni, chrome.ciphers, chrome.extensions, chrome.alpn), (b't', Some(1.3), true, 15, 16, &b"h2"[..]));
        assert_eq!(chrome.a, b"t13d1516h2");
        let curl = parse(b"t13i3111h2_e8f1e7e78f70_b26ce05bbdd6").unwrap();
        assert_eq!((curl.sni, curl.ciphers, curl.extensions), (false, 31, 11));
        let quic = parse(b"q00d0000h3_000000000000_000000000000").unwrap();
        assert_eq!((quic.transport, quic.version, quic.alpn), (b'q', None, &b"h3"[..]));
    }

    #[test]
    fn refuses_what_is_not_a_ja4() {
        for s in [
            &b""[..],
            b"-",
            b"t13d1516h2_8daaf6152771_e5627efa2ab",
            b"t13d1516h2_8daaf6152771_e5627efa2ab1x",
            b"t13d1516h2-8daaf6152771_e5627efa2ab1",
            b"x13d1516h2_8daaf6152771_e5627efa2ab1",
            b"t14d1516h2_8daaf6152771_e5627efa2ab1",
            b"t13x1516h2_8daaf6152771_e5627efa2ab1",
            b"t13d1a16h2_8daaf6152771_e5627efa2ab1",
            b"t13d1516h__8daaf6152771_e5627efa2ab1",
            b"t13d1516h2_8DAAF6152771_e5627efa2ab1",
            b"t13d1516h2_8daaf615277g_e5627efa2ab1",
        ] {
            assert_eq!(parse(s), None, "{:?}", String::from_utf8_lossy(s));
        }
    }

    /// A prefix is exactly what some JA4 starts with: every start of a real one, and of no
    /// string `parse` refuses at that length.
    #[test]
    fn prefixes_are_starts_of_a_ja4() {
        for full in [&b"t13d1516h2_8daaf6152771_d8a2da3f94cd"[..], b"q00d0000h3_000000000000_000000000000", b"ds2i9904h1_abcdef012345_6789abcdef01"] {
            assert!(parse(full).is_some());
            for end in 0..=full.len() {
                assert!(is_prefix(&full[..end]), "{:?}", String::from_utf8_lossy(&full[..end]));
            }
        }
        for bad in [&b"x"[..], b"t14", b"t01", b"t13x", b"t13d1a", b"t13d1516h_", b"t13d1516h2-", b"t13d1516h2_8DA", b"t13d1516h2_8daaf6152771_d8a2da3f94cd0"] {
            assert!(!is_prefix(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ja3_is_32_lower_hex_digits() {
        assert!(is_ja3(b"e7d705a3286e19ea42f587b344ee6865"));
        for s in [&b""[..], b"-", b"e7d705a3286e19ea42f587b344ee686", b"e7d705a3286e19ea42f587b344ee68655", b"E7D705A3286E19EA42F587B344EE6865", b"g7d705a3286e19ea42f587b344ee6865"] {
            assert!(!is_ja3(s), "{:?}", String::from_utf8_lossy(s));
        }
    }
}
