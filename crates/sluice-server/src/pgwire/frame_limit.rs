//! Sluice's cap on the length of one client message, checked on the
//! message's header as the bytes arrive, before its body is read or any
//! buffer is reserved for it.
//!
//! pgwire caps Query, Parse, Bind and CopyData at 1 GiB and cannot be told
//! otherwise, and its framing buffers a message until it is complete: a
//! client that declares 1 GiB and trickles bytes holds that much memory.
//! [`FrameLimit`] sits between the (possibly TLS) stream and pgwire's
//! framing, follows the message boundaries (a startup-phase message has no
//! type byte: length and code; every later one a type byte and a length)
//! and fails the read at the first header declaring more than
//! [`MESSAGE_BYTES_MAX`]; the connection then gets a FATAL `54000` and is
//! closed. Messages before that header in the same read are still
//! delivered.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest client message, in bytes, its length field included: 16
/// MiB, room for a statement at Sluice's 1 MiB limit and for Bind
/// parameters and COPY chunks well beyond what clients send (psql and
/// pgJDBC send COPY data in chunks of at most 64 KiB).
pub(crate) const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The startup-phase request codes after which another untyped message
/// follows (SSLRequest, GSSENCRequest).
const SSL_REQUEST_CODE: u32 = 80_877_103;
const GSSENC_REQUEST_CODE: u32 = 80_877_104;

/// Where the reader is in the client's message stream.
#[derive(Debug, Clone)]
pub(crate) struct Framing {
    /// The next message has no type byte (startup phase).
    untyped: bool,
    /// Header bytes of the next message seen so far.
    header: [u8; 8],
    header_len: usize,
    /// Body bytes of the current message still to pass.
    skip: usize,
    /// A malformed length was seen: pgwire reports it; stop following.
    lost: bool,
}

/// A header over the cap: where it starts in the bytes just fed (0 when it
/// began in an earlier read) and the length it declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Oversized {
    pub offset: usize,
    pub declared: usize,
}

impl Framing {
    pub(crate) fn new() -> Self {
        Framing {
            untyped: true,
            header: [0; 8],
            header_len: 0,
            skip: 0,
            lost: false,
        }
    }

    /// Follows `bytes`; the first header declaring more than `max`.
    pub(crate) fn feed(&mut self, bytes: &[u8], max: usize) -> Result<(), Oversized> {
        let mut at = 0;
        while at < bytes.len() && !self.lost {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len() - at);
                self.skip -= n;
                at += n;
                continue;
            }
            let started = at.saturating_sub(self.header_len);
            let need = if self.untyped { 8 } else { 5 };
            let n = (need - self.header_len).min(bytes.len() - at);
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[at..at + n]);
            self.header_len += n;
            at += n;
            if self.header_len < need {
                break;
            }
            self.header_len = 0;
            let length_at = if self.untyped { 0 } else { 1 };
            let raw = u32::from_be_bytes(self.header[length_at..length_at + 4].try_into().expect("4 bytes"));
            // A negative length (as pgwire reads it, an i32) is over any cap.
            let declared = raw as usize;
            if raw > i32::MAX as u32 && self.untyped {
                self.lost = true;
                break;
            }
            if self.untyped {
                if declared < 8 {
                    self.lost = true;
                    break;
                }
                let code = u32::from_be_bytes(self.header[4..8].try_into().expect("4 bytes"));
                self.untyped = declared == 8 && (code == SSL_REQUEST_CODE || code == GSSENC_REQUEST_CODE);
                self.skip = declared - 8;
            } else {
                if declared > max {
                    return Err(Oversized {
                        offset: started,
                        declared,
                    });
                }
                if declared < 4 {
                    self.lost = true;
                    break;
                }
                self.skip = declared - 4;
            }
        }
        Ok(())
    }
}

/// A stream whose reads stop at the first client message over `max`.
pub(crate) struct FrameLimit<S> {
    inner: S,
    max: usize,
    framing: Framing,
    refused: Option<usize>,
}

impl<S> FrameLimit<S> {
    /// Wraps `inner`; `already_read` is what the framing layer read from it
    /// before (the start of the message stream).
    pub(crate) fn new(inner: S, max: usize, already_read: &[u8]) -> Self {
        let mut framing = Framing::new();
        let refused = framing.feed(already_read, max).err().map(|o| o.declared);
        FrameLimit {
            inner,
            max,
            framing,
            refused,
        }
    }

    /// The declared length of the message that was refused, if one was.
    pub(crate) fn refused(&self) -> Option<usize> {
        self.refused
    }

    fn refusal(&self, declared: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {declared} bytes is over the limit of {} bytes", self.max),
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FrameLimit<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(declared) = this.refused {
            return Poll::Ready(Err(this.refusal(declared)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        match this.framing.feed(&buf.filled()[before..], this.max) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(oversized) => {
                this.refused = Some(oversized.declared);
                if oversized.offset == 0 {
                    buf.set_filled(before);
                    return Poll::Ready(Err(this.refusal(oversized.declared)));
                }
                // Deliver the whole messages before it; the next read fails.
                buf.set_filled(before + oversized.offset);
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FrameLimit<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup() -> Vec<u8> {
        let mut body = 196_608u32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0sluice\0\0");
        let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        m.extend(body);
        m
    }

    fn query(sql: &str) -> Vec<u8> {
        let mut m = vec![b'Q'];
        m.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
        m.extend_from_slice(sql.as_bytes());
        m.push(0);
        m
    }

    fn header(declared: u32) -> Vec<u8> {
        let mut m = vec![b'Q'];
        m.extend_from_slice(&declared.to_be_bytes());
        m
    }

    #[test]
    fn messages_up_to_the_limit_pass_in_any_split() {
        let mut stream = startup();
        stream.extend(query("SELECT 1"));
        let at_limit = query(&"x".repeat(100 - 5));
        assert_eq!(
            at_limit.len() - 1,
            100,
            "the length field counts itself, not the type byte"
        );
        stream.extend(&at_limit);
        stream.extend(query("SELECT 2"));
        for chunk in 1..=stream.len() {
            let mut framing = Framing::new();
            for piece in stream.chunks(chunk) {
                assert_eq!(framing.feed(piece, 100), Ok(()), "chunks of {chunk}");
            }
            assert_eq!(framing.header_len + framing.skip, 0, "ends on a boundary");
        }
    }

    #[test]
    fn a_header_over_the_limit_is_found_where_it_starts() {
        let first = [startup(), query("SELECT 1")].concat();
        let stream = [first.clone(), header(101), b"body".to_vec()].concat();
        let mut framing = Framing::new();
        assert_eq!(
            framing.feed(&stream, 100),
            Err(Oversized {
                offset: first.len(),
                declared: 101
            })
        );
        // A 2 GB prefix (as i32: 2 000 000 000) split across reads.
        let mut framing = Framing::new();
        let big = header(2_000_000_000);
        assert_eq!(
            framing.feed(&[first.clone(), big[..3].to_vec()].concat(), MESSAGE_BYTES_MAX),
            Ok(())
        );
        assert_eq!(
            framing.feed(&big[3..], MESSAGE_BYTES_MAX),
            Err(Oversized {
                offset: 0,
                declared: 2_000_000_000
            })
        );
    }

    #[test]
    fn an_ssl_request_is_followed_by_an_untyped_startup() {
        let mut ssl = 8u32.to_be_bytes().to_vec();
        ssl.extend_from_slice(&SSL_REQUEST_CODE.to_be_bytes());
        let stream = [ssl, startup(), header(101)].concat();
        let mut framing = Framing::new();
        assert!(framing.feed(&stream, 100).is_err());
    }
}
