//! Requests the HTTP layer cannot parse (a header value with control bytes,
//! a request line it cannot read, a header section or target too large) are
//! answered by hyper itself, before any handler runs, with a bare status and
//! an empty body, and hyper has no hook for that answer. This wraps each
//! connection and turns exactly that answer into our problem document, so
//! every error the API sends is `application/problem+json`.
//!
//! What is recognised: one write that is a whole response head and nothing
//! more, of status 400, 414 or 431, with `content-length: 0` and no
//! `content-type`. No response of ours looks like that (every error of ours
//! has a problem body, and a body never starts a write with a status line:
//! JSON cannot hold a raw CR LF).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ApiError;

/// A listener whose connections send hyper's own parse-error answers as problems.
#[derive(Debug)]
pub(super) struct ProblemListener<L>(pub(super) L);

impl<L: axum::serve::Listener> axum::serve::Listener for ProblemListener<L> {
    type Io = ProblemIo<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (
            ProblemIo {
                inner: io,
                replacement: None,
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection; `replacement` is a problem response still being written in
/// place of the bare one hyper asked for (reported to hyper as written).
#[derive(Debug)]
pub(super) struct ProblemIo<T> {
    inner: T,
    replacement: Option<(Vec<u8>, usize)>,
}

impl<T: AsyncWrite + Unpin> ProblemIo<T> {
    /// Writes out what is left of a replacement, if any.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                self.replacement = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` in place of writing it when it is hyper's bare answer.
    fn replaced(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Option<Poll<io::Result<usize>>> {
        let problem = problem_for(buf)?;
        self.replacement = Some((problem, 0));
        Some(match self.poll_drain(cx) {
            // Still going out: poll_flush and poll_shutdown finish it first.
            Poll::Ready(Ok(())) | Poll::Pending => Poll::Ready(Ok(buf.len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        })
    }
}

/// The problem response to send instead of `buf`, when `buf` is hyper's
/// automatic answer to a request it could not parse.
fn problem_for(buf: &[u8]) -> Option<Vec<u8>> {
    let head_len = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    if head_len != buf.len() {
        return None;
    }
    let head = std::str::from_utf8(&buf[..head_len - 4]).ok()?;
    let mut lines = head.split("\r\n");
    let error = match lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)? {
        "400" => ApiError::Malformed,
        "414" => ApiError::UriTooLong,
        "431" => ApiError::HeadersTooLarge,
        _ => return None,
    };
    let mut kept = Vec::new();
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => return None,
            "content-length" => empty = value.trim() == "0",
            "connection" => {}
            _ => kept.push(line),
        }
    }
    if !empty {
        return None;
    }
    let status = error.status();
    let body = serde_json::to_vec(&error.problem()).ok()?;
    let mut response = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len()
    );
    for line in kept {
        response.push_str(line);
        response.push_str("\r\n");
    }
    response.push_str("\r\n");
    let mut bytes = response.into_bytes();
    bytes.extend_from_slice(&body);
    Some(bytes)
}

impl<T: AsyncRead + Unpin> AsyncRead for ProblemIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ProblemIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_drain(cx))?;
        if let Some(done) = self.replaced(cx, buf) {
            return done;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_drain(cx))?;
        let mut non_empty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (non_empty.next(), non_empty.next())
            && let Some(done) = self.replaced(cx, only)
        {
            return done;
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::problem_for;

    #[test]
    fn hypers_bare_parse_error_answer_becomes_a_problem() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n";
        let problem = String::from_utf8(problem_for(bare).expect("replaced")).unwrap();
        let (head, body) = problem.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("content-type: application/problem+json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("date: Tue, 01 Dec 2026"));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["type"], "/problems/malformed-request");
        assert_eq!(body["status"], 400);
        let large = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(
            String::from_utf8(problem_for(large).unwrap())
                .unwrap()
                .contains("/problems/headers-too-large")
        );
    }

    #[test]
    fn responses_of_our_own_pass_untouched() {
        for ours in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert!(problem_for(ours).is_none(), "{}", String::from_utf8_lossy(ours));
        }
    }
}
