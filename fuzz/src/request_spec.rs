//! Requests for the `features` target, described by the fuzzer's bytes (`arbitrary`) and
//! rendered to the header pairs and connection properties Envoy would hand the filter. The
//! shapes aim at the feature definitions' corners: pseudo-headers absent, duplicated or out
//! of place, arbitrary bytes in names and values, list separators and whitespace, decimal
//! numbers with padding and leading zeros, IP literals with and without ports and brackets,
//! user-agent tokens in any case, and now and then thousands of headers or values of hundreds
//! of kilobytes.

use arbitrary::Arbitrary;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Bytes of header names and values one request may render to: far past what Envoy accepts
/// (60 KiB by default), yet small enough to keep the rate of runs up.
const BYTE_BUDGET: usize = 512 << 10;
/// The longest repeated value: past Envoy's limit for all headers together (60 KiB); longer
/// ones would mostly slow the naive reference down (`ua_family` searches once per token).
const MAX_REPEAT: usize = 80 << 10;
/// Header pairs one request may render to (Envoy's default limit is 100).
const PAIR_BUDGET: usize = 5_000;

#[derive(Arbitrary, Debug)]
pub struct RequestSpec {
    pub headers: Vec<HeaderSpec>,
    /// In `Property::ALL` order: protocol, TLS version, SNI, source address.
    pub properties: [Option<ValueSpec>; 4],
}

#[derive(Arbitrary, Debug)]
pub struct HeaderSpec {
    pub name: NameSpec,
    pub value: ValueSpec,
    /// Mostly 1; the top values repeat the header (see [`copies`]).
    pub copies: u8,
}

#[derive(Arbitrary, Debug)]
pub enum NameSpec {
    Pseudo(u8),
    Known(u8),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
pub enum ValueSpec {
    Raw(Vec<u8>),
    Known(u8),
    Pieces(Vec<Piece>),
    Number(NumberSpec),
    Address(AddressSpec),
    /// `pattern` (at most 4 bytes) repeated `times` times, up to [`MAX_REPEAT`] bytes.
    Repeat { pattern: Vec<u8>, times: u16 },
}

/// One piece of a value built from parts: paths, queries, cookie and language lists,
/// user agents.
#[derive(Arbitrary, Debug)]
pub enum Piece {
    Separator(u8),
    Word(u8),
    Byte(u8),
    Digits(u16),
}

#[derive(Arbitrary, Debug)]
pub struct NumberSpec {
    pub digits: DigitsSpec,
    pub leading_zeros: u8,
    /// Bits: spaces before, tabs after, a sign, a trailing non-digit, other whitespace.
    pub decoration: u8,
}

#[derive(Arbitrary, Debug)]
pub enum DigitsSpec {
    Small(u16),
    Wide(u64),
    Huge(u128),
    /// Any count of digits, from bytes.
    Many(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
pub enum AddressSpec {
    V4 { octets: [u8; 4], port: PortSpec },
    V6 { segments: [u16; 8], form: u8, port: PortSpec },
    Name { name: u8, port: PortSpec },
}

#[derive(Arbitrary, Debug)]
pub enum PortSpec {
    None,
    Number(u16),
    Empty,
    Junk(Vec<u8>),
    Twice(u16, u16),
}

const PSEUDO: &[&str] = &[":method", ":path", ":authority", ":scheme", ":protocol", ":", ":PATH", ":status"];

const KNOWN_NAMES: &[&str] = &[
    "user-agent", "cookie", "accept-language", "content-length", "host", "accept", "x-forwarded-for",
    "x-country", "referer", "accept-encoding", "sec-ch-ua", "connection", "x-a", "User-Agent", "Cookie",
    "content-length ", "user-agent\n", "", "cookie2", "x-edgescore-score", "x-edgescore-ja4", "x-edgescore-ja3",
];

const KNOWN_VALUES: &[&str] = &[
    "GET", "POST", "HEAD", "get", "",
    "/", "/api/v1/items?id=42&x=", "/a//b/c?x=1&&y=2&", "*", "?", "/?", "//", "api/v1", "/products/shoes/running?color=blue&size=42",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
    "curl/8.5.0", "python-requests/2.32.3", "Go-http-client/1.1", "MyClient/1.0", "Mozilla/5.0 zgrab/0.x",
    "session=8f2c1d0e9a7b4c3d; _ga=GA1.1.1234567890.1731000000; theme=dark", "a=1; ; b=2;", " ; ",
    "en-US,en;q=0.9,de;q=0.8", "en, ,\t,", "42", " 42 ", "0", "-1", "+5", "1e3", "0x10", "18446744073709551615",
    "18446744073709551616", "99999999999999999999",
    "HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/2.0", "HTTP/3", "HTTP/3.0", "HTTP/1.2", "http/1.1", "HTTP/2 ",
    "TLSv1", "TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3", "TLSv1.4", "SSLv3", "tlsv1.3",
    "example.com", "shop.example.com", "localhost",
    "t13d1516h2_8daaf6152771_d8a2da3f94cd", "t13i3111h2_e8f1e7e78f70_b26ce05bbdd6", "q00d0000h3_000000000000_000000000000",
    "t13d1516h2_8daaf6152771_d8a2da3f94c", "t13d1+16h2_8daaf6152771_d8a2da3f94cd", "t13d1516h2_8DAAF6152771_d8a2da3f94cd",
    "e7d705a3286e19ea42f587b344ee6865", "E7D705A3286E19EA42F587B344EE6865", "-",
];

const SEPARATORS: &[u8] = b"/?&;,= \t:.[]%#";

const WORDS: &[&str] = &[
    "HeadlessChrome", "headlesschrom", "PhantomJS", "puppeteer", "Selenium", "curl/", "curl", "Wget/", "python-requests",
    "Python-urllib", "aiohttp", "httpx", "Go-http-client", "okhttp", "Java/", "Apache-HttpClient", "node-fetch", "axios",
    "Scrapy", "Googlebot", "bingbot", "Edg/", "OPR/", "SamsungBrowser", "Firefox/", "Chrome/", "CriOS/", "Safari/", "bot",
    "BOT", "spider", "crawl", "Mozilla/5.0 ", "api", "v1", "en-US", "q=0.9", "session", "id", "..", "::", "::ffff:",
];

const HOST_NAMES: &[&str] = &[
    "example.com", "localhost", "1.2.3", "1.2.3.4.5", "01.2.3.4", "256.1.1.1", "[::1", "::1]", "[v1.x]", "1.2.3.4%25",
    "", "[]", "[1.2.3.4]", "::1", "2001:db8::1", "1:2:3:4:5:6:7:8", "[fe80::1%25eth0]", "user@1.2.3.4", " 1.2.3.4",
];

/// How many times a header is sent: mostly once; the top values repeat it up to 5,000 times.
fn copies(byte: u8) -> usize {
    match byte {
        251 => 2,
        252 => 3,
        253 => 17,
        254 => 300,
        255 => 5_000,
        _ => 1,
    }
}

impl RequestSpec {
    /// The header pairs in order, within the byte and pair budgets.
    pub fn header_pairs(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut pairs = Vec::new();
        let mut bytes = 0;
        for header in &self.headers {
            let name = header.name.render();
            let value = header.value.render();
            for _ in 0..copies(header.copies) {
                bytes += name.len() + value.len();
                if bytes > BYTE_BUDGET || pairs.len() >= PAIR_BUDGET {
                    return pairs;
                }
                pairs.push((name.clone(), value.clone()));
            }
        }
        pairs
    }

    pub fn property_values(&self) -> [Option<Vec<u8>>; 4] {
        self.properties.each_ref().map(|p| p.as_ref().map(ValueSpec::render))
    }
}

impl NameSpec {
    fn render(&self) -> Vec<u8> {
        match self {
            NameSpec::Pseudo(i) => PSEUDO[*i as usize % PSEUDO.len()].into(),
            NameSpec::Known(i) => KNOWN_NAMES[*i as usize % KNOWN_NAMES.len()].into(),
            NameSpec::Raw(bytes) => bytes.clone(),
        }
    }
}

impl ValueSpec {
    fn render(&self) -> Vec<u8> {
        match self {
            ValueSpec::Raw(bytes) => bytes.clone(),
            ValueSpec::Known(i) => KNOWN_VALUES[*i as usize % KNOWN_VALUES.len()].into(),
            ValueSpec::Pieces(pieces) => pieces.iter().flat_map(Piece::render).collect(),
            ValueSpec::Number(n) => n.render(),
            ValueSpec::Address(a) => a.render(),
            ValueSpec::Repeat { pattern, times } => {
                let mut value = pattern[..pattern.len().min(4)].repeat(*times as usize);
                value.truncate(MAX_REPEAT);
                value
            }
        }
    }
}

impl Piece {
    fn render(&self) -> Vec<u8> {
        match self {
            Piece::Separator(i) => vec![SEPARATORS[*i as usize % SEPARATORS.len()]],
            Piece::Word(i) => WORDS[*i as usize % WORDS.len()].into(),
            Piece::Byte(b) => vec![*b],
            Piece::Digits(n) => n.to_string().into_bytes(),
        }
    }
}

impl NumberSpec {
    fn render(&self) -> Vec<u8> {
        let digits = match &self.digits {
            DigitsSpec::Small(n) => n.to_string(),
            DigitsSpec::Wide(n) => n.to_string(),
            DigitsSpec::Huge(n) => n.to_string(),
            DigitsSpec::Many(bytes) => bytes.iter().map(|b| char::from(b'0' + b % 10)).collect(),
        };
        let d = self.decoration;
        let mut out = Vec::new();
        out.extend(std::iter::repeat_n(b' ', (d & 3) as usize));
        match (d >> 4) & 3 {
            1 => out.push(b'+'),
            2 => out.push(b'-'),
            _ => {}
        }
        out.extend(std::iter::repeat_n(b'0', self.leading_zeros as usize % 48));
        out.extend_from_slice(digits.as_bytes());
        out.extend(std::iter::repeat_n(b'\t', ((d >> 2) & 3) as usize));
        match d >> 6 {
            1 => out.push(b'x'),
            2 => out.extend_from_slice(b"\r\n\x0c"),
            3 => out.extend_from_slice("\u{a0}".as_bytes()),
            _ => {}
        }
        out
    }
}

impl AddressSpec {
    fn render(&self) -> Vec<u8> {
        let (mut out, port) = match self {
            AddressSpec::V4 { octets, port } => (Ipv4Addr::from(*octets).to_string(), port),
            AddressSpec::V6 { segments, form, port } => {
                let ip = Ipv6Addr::from(*segments);
                let text = match form % 4 {
                    0 => ip.to_string(),
                    1 => segments.iter().map(|s| format!("{s:x}")).collect::<Vec<_>>().join(":"),
                    2 => ip.to_ipv4().map_or(ip, |v4| v4.to_ipv6_mapped()).to_string(),
                    _ => format!("::ffff:{}", Ipv4Addr::from(ip.octets()[12..].try_into().unwrap_or([0; 4]))),
                };
                // Bare (unbracketed) now and then: not an IP literal with or without a port.
                (if form & 4 == 0 { format!("[{text}]") } else { text }, port)
            }
            AddressSpec::Name { name, port } => (HOST_NAMES[*name as usize % HOST_NAMES.len()].to_string(), port),
        };
        match port {
            PortSpec::None => {}
            PortSpec::Number(p) => out += &format!(":{p}"),
            PortSpec::Empty => out.push(':'),
            PortSpec::Junk(bytes) => {
                let mut raw = out.into_bytes();
                raw.extend_from_slice(bytes);
                return raw;
            }
            PortSpec::Twice(a, b) => out += &format!(":{a}:{b}"),
        }
        out.into_bytes()
    }
}
