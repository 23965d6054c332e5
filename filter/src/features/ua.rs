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

/// The family name of a user-agent value; the first product token (up to `/` or space) when no
/// known token matches, e.g. `MyClient/1.0` → `MyClient`.
pub fn family(ua: &[u8]) -> &[u8] {
    for (token, name) in FAMILIES {
        if contains_ignore_case(ua, token) {
            return name;
        }
    }
    let end = ua.iter().position(|&b| b == b'/' || b == b' ').unwrap_or(ua.len());
    &ua[..end]
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::family;

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
