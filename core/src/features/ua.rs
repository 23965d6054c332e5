//! User-agent family: a coarse product name, so a model can learn "curl" or "headless chrome"
//! without seeing every version string. Order matters: browsers carry each other's tokens
//! (Edge says Chrome and Safari, Chrome says Safari), so the most specific token wins.

/// Token (matched case-insensitively anywhere in the value) → family.
const FAMILIES: &[(&[u8], &[u8])] = &[
    (b"headlesschrome", b"headless-chrome"),
    (b"phantomjs", b"phantomjs"),
    (b"puppeteer", b"puppeteer"),
    (b"selenium", b"selenium"),
    (b"curl/", b"curl"),
    (b"wget/", b"wget"),
    (b"python-requests", b"python-requests"),
    (b"python-urllib", b"python-urllib"),
    (b"aiohttp", b"aiohttp"),
    (b"httpx", b"httpx"),
    (b"go-http-client", b"go"),
    (b"okhttp", b"okhttp"),
    (b"java/", b"java"),
    (b"apache-httpclient", b"java"),
    (b"node-fetch", b"node"),
    (b"axios", b"node"),
    (b"scrapy", b"scrapy"),
    (b"googlebot", b"googlebot"),
    (b"bingbot", b"bingbot"),
    (b"edg/", b"edge"),
    (b"opr/", b"opera"),
    (b"samsungbrowser", b"samsung"),
    (b"firefox/", b"firefox"),
    (b"chrome/", b"chrome"),
    (b"crios/", b"chrome"),
    (b"safari/", b"safari"),
    (b"bot", b"other-bot"),
    (b"spider", b"other-bot"),
    (b"crawl", b"other-bot"),
];

/// Whether `name` is a family [`family`] gives for a token it knows (not a first product
/// token): what a UA fingerprint table may list.
pub fn is_family(name: &[u8]) -> bool {
    FAMILIES.iter().any(|(_, f)| *f == name)
}

/// Every family name [`is_family`] accepts, once each, in `FAMILIES` order.
pub fn family_names() -> impl Iterator<Item = &'static [u8]> {
    FAMILIES.iter().enumerate().filter(|(i, (_, f))| !FAMILIES[..*i].iter().any(|(_, g)| g == f)).map(|(_, (_, f))| *f)
}

/// Per byte value: the tokens (bits, by index in `FAMILIES`) whose byte at `AT` is that byte
/// in either case, so [`family`] compares a token only where its first two bytes occur.
const fn tokens_with_byte<const AT: usize>() -> [u32; 256] {
    assert!(FAMILIES.len() < 32, "token sets are u32 masks");
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < FAMILIES.len() {
        assert!(FAMILIES[i].0.len() > AT, "every token has two bytes or more");
        let c = FAMILIES[i].0[AT];
        t[c.to_ascii_lowercase() as usize] |= 1 << i;
        t[c.to_ascii_uppercase() as usize] |= 1 << i;
        i += 1;
    }
    t
}
const FIRST: [u32; 256] = tokens_with_byte::<0>();
const SECOND: [u32; 256] = tokens_with_byte::<1>();

/// The family name of a user-agent value; the first product token (up to `/` or space) when no
/// known token matches, e.g. `MyClient/1.0` → `MyClient`.
///
/// One pass over the value: at each byte only the tokens starting with it and the next byte
/// (and listed before the best match so far) are compared, instead of searching the value
/// once per token — this runs on every request, on values the client chose. Browser values
/// hold most tokens' first letters many times over; pairs of letters rule out nearly all.
pub fn family(ua: &[u8]) -> &[u8] {
    let mut best = FAMILIES.len();
    for (i, pair) in ua.windows(2).enumerate() {
        // `best < 32`: only tokens listed before the best match can still win.
        let mut candidates = FIRST[pair[0] as usize] & SECOND[pair[1] as usize] & ((1u32 << best) - 1);
        while candidates != 0 {
            let t = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let token = FAMILIES[t].0;
            if ua.len() - i >= token.len() && ua[i + 2..i + token.len()].eq_ignore_ascii_case(&token[2..]) {
                // The remaining candidates come later in the list: this one wins here.
                best = t;
                break;
            }
        }
        if best == 0 {
            break;
        }
    }
    if let Some((_, name)) = FAMILIES.get(best) {
        return name;
    }
    let end = ua.iter().position(|&b| b == b'/' || b == b' ').unwrap_or(ua.len());
    &ua[..end]
}

#[cfg(test)]
mod tests {
    use super::{family, FAMILIES};

    /// The definition: the first token in `FAMILIES` order found anywhere in the value.
    fn reference(ua: &[u8]) -> &[u8] {
        let contains = |hay: &[u8], needle: &[u8]| needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle));
        for (token, name) in FAMILIES {
            if contains(ua, token) {
                return name;
            }
        }
        let end = ua.iter().position(|&b| b == b'/' || b == b' ').unwrap_or(ua.len());
        &ua[..end]
    }

    #[test]
    fn one_pass_matches_the_definition() {
        let mut values: Vec<Vec<u8>> = vec![b"".to_vec(), b"b".to_vec(), b"BOT".to_vec(), b"xbo".to_vec(), b"Crawl".to_vec(), b"edg".to_vec()];
        // Every token, in both cases, alone, at the end, cut short, and after another token.
        for (i, (token, _)) in FAMILIES.iter().enumerate() {
            let upper = token.to_ascii_uppercase();
            values.push(token.to_vec());
            values.push(upper.clone());
            values.push([b"Mozilla/5.0 x".as_slice(), &upper].concat());
            values.push(token[..token.len() - 1].to_vec());
            let other = FAMILIES[(i * 7 + 3) % FAMILIES.len()].0;
            values.push([other, b" ".as_slice(), token].concat());
            values.push([*token, b" ".as_slice(), other].concat());
        }
        // Pseudo-random mixes of token fragments and bytes (a fixed LCG: deterministic).
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as usize
        };
        for _ in 0..5000 {
            let mut v = Vec::new();
            for _ in 0..next() % 6 {
                match next() % 3 {
                    0 => {
                        let t = FAMILIES[next() % FAMILIES.len()].0;
                        v.extend_from_slice(&t[..1 + next() % t.len()]);
                    }
                    1 => {
                        let bytes = b"/ abcdefghijklmnopqrstuvwxyzCHROMEbot\xff";
                        v.push(bytes[next() % bytes.len()]);
                    }
                    _ => v.extend_from_slice(b"Mozilla/5.0 "),
                }
            }
            values.push(v);
        }
        for v in &values {
            assert_eq!(family(v), reference(v), "{:?}", String::from_utf8_lossy(v));
        }
    }

    #[test]
    fn families() {
        let cases: &[(&str, &str)] = &[
            ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "chrome"),
            ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", "edge"),
            ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "firefox"),
            ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", "safari"),
            ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36", "headless-chrome"),
            ("curl/8.5.0", "curl"),
            ("python-requests/2.32.3", "python-requests"),
            ("Go-http-client/1.1", "go"),
            ("MyClient/1.0", "MyClient"),
            ("", ""),
        ];
        for (ua, fam) in cases {
            assert_eq!(family(ua.as_bytes()), fam.as_bytes(), "{ua}");
        }
    }
}
