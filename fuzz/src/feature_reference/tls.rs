//! The TLS fingerprint headers Envoy writes (`x-edgescore-ja4`, `x-edgescore-ja3`), read the
//! plain way: the JA4 split on `_` into its three parts, each checked against FoxIO's spec as
//! Envoy 1.40 prints it (lower-case hex in `b` and `c`).

pub struct Ja4<'a> {
    pub whole: &'a [u8],
    pub a: &'a [u8],
    pub ciphers: f32,
    pub extensions: f32,
    pub alpn: &'a [u8],
}

pub fn ja4(value: Option<&[u8]>) -> Option<Ja4<'_>> {
    let whole = value?;
    let text = std::str::from_utf8(whole).ok()?;
    let parts: Vec<&str> = text.split('_').collect();
    let [a, b, c] = parts[..] else { return None };
    let hex = |s: &str| s.len() == 12 && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    if a.len() != 10 || !a.is_ascii() || !hex(b) || !hex(c) {
        return None;
    }
    let versions = ["13", "12", "11", "10", "s3", "s2", "d1", "d2", "d3", "00"];
    let ok = ["t", "q", "d"].contains(&&a[0..1]) && versions.contains(&&a[1..3]) && ["d", "i"].contains(&&a[3..4]);
    let count = |s: &str| s.chars().all(|c| c.is_ascii_digit()).then(|| s.parse::<u8>().ok()).flatten();
    let alpn = &a[8..10];
    if !ok || !alpn.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    Some(Ja4 { whole, a: a.as_bytes(), ciphers: count(&a[4..6])? as f32, extensions: count(&a[6..8])? as f32, alpn: alpn.as_bytes() })
}

pub fn is_ja3(value: &[u8]) -> bool {
    value.len() == 32 && value.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}
