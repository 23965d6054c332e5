//! The user-agent family by its definition (`core/src/features/ua.rs`): the first token of the
//! list, in this order, found anywhere in the value ignoring ASCII case; failing every token,
//! the value up to its first `/` or space. Searched naively, token by token, unlike the core's
//! one pass.

const FAMILIES: &[(&str, &str)] = &[
    ("headlesschrome", "headless-chrome"),
    ("phantomjs", "phantomjs"),
    ("puppeteer", "puppeteer"),
    ("selenium", "selenium"),
    ("curl/", "curl"),
    ("wget/", "wget"),
    ("python-requests", "python-requests"),
    ("python-urllib", "python-urllib"),
    ("aiohttp", "aiohttp"),
    ("httpx", "httpx"),
    ("go-http-client", "go"),
    ("okhttp", "okhttp"),
    ("java/", "java"),
    ("apache-httpclient", "java"),
    ("node-fetch", "node"),
    ("axios", "node"),
    ("scrapy", "scrapy"),
    ("googlebot", "googlebot"),
    ("bingbot", "bingbot"),
    ("edg/", "edge"),
    ("opr/", "opera"),
    ("samsungbrowser", "samsung"),
    ("firefox/", "firefox"),
    ("chrome/", "chrome"),
    ("crios/", "chrome"),
    ("safari/", "safari"),
    ("bot", "other-bot"),
    ("spider", "other-bot"),
    ("crawl", "other-bot"),
];

/// The names of the families above (what a UA fingerprint table may list).
pub fn family_names() -> impl Iterator<Item = &'static [u8]> {
    FAMILIES.iter().map(|(_, f)| f.as_bytes())
}

pub fn family(ua: &[u8]) -> &[u8] {
    let lower = ua.to_ascii_lowercase();
    for (token, family) in FAMILIES {
        // Byte by byte rather than `==` on slices: libFuzzer hooks every failed `memcmp`, and
        // a call per position of a long value would cut the rate of runs tenfold.
        let at = |i: usize| token.bytes().zip(&lower[i..]).all(|(t, &b)| t == b);
        if (0..=lower.len().saturating_sub(token.len())).any(|i| lower.len() >= token.len() && at(i)) {
            return family.as_bytes();
        }
    }
    let end = ua.iter().position(|&b| b == b'/' || b == b' ').unwrap_or(ua.len());
    &ua[..end]
}
