//! `GET /console`: one page, embedded in the binary, for operators: the
//! ledger's counters and charts (inline SVG, kept live by `GET /v1/events`),
//! a search with cursor paging, a command page, the ambiguous list with
//! Probe now and Record resolution, and holds with Release and Reject buttons.
//! It calls the same API as everyone else, with the operator token the
//! page is given (kept in the tab's session storage only).

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use sha2::{Digest as _, Sha256};
use std::sync::LazyLock;

const PAGE: &str = include_str!("console.html");

/// The page's one inline script is allowed by its hash, and nothing else
/// runs: no external scripts, no frames, no inline handlers from elsewhere.
static POLICY: LazyLock<String> = LazyLock::new(|| {
    let script = PAGE
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map_or("", |(script, _)| script);
    let hash = base64(&Sha256::digest(script.as_bytes()));
    format!(
        "default-src 'self'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
});

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) async fn page() -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, POLICY.as_str()),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Html(PAGE),
    )
        .into_response()
}

/// `GET /`: where a newcomer's browser lands. A browser (asking for HTML)
/// is sent to the console; any other caller gets the places to go.
pub(super) async fn index(headers: axum::http::HeaderMap) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if wants_html {
        return (
            axum::http::StatusCode::SEE_OTHER,
            [(header::LOCATION, "/console")],
        )
            .into_response();
    }
    axum::Json(serde_json::json!({
        "console": "/console",
        "openapi": "/openapi.json",
        "commands": "/v1/commands",
        "health": "/healthz",
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn the_policy_allows_exactly_the_page_script() {
        assert!(POLICY.contains("script-src 'sha256-"));
        assert!(!POLICY.contains("script-src 'unsafe-inline'"));
        assert_eq!(
            PAGE.matches("<script>").count(),
            1,
            "one inline script, allowed by hash"
        );
    }
}
