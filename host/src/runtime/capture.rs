//! Guest stdout and stderr: truncating capture sinks.
//!
//! A sink keeps the first and the last [`STDIO_CAPTURE_BYTES`]`/2` bytes
//! written to it and counts the rest. Every write succeeds and the sink
//! always has room, so a chatty plugin is never failed or killed by a full
//! buffer, and the end of its stderr (where a panic message lands) is kept.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::limits::STDIO_CAPTURE_BYTES;

/// How much a guest may write in one `write` call: the sink takes any amount,
/// this only sizes the guest's chunks.
const WRITE_PERMIT: usize = 64 << 10;

/// A truncating, shareable capture of one output stream.
#[derive(Clone, Default)]
pub(crate) struct Capture {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl Capture {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn push(&self, mut bytes: &[u8]) {
        let half = STDIO_CAPTURE_BYTES / 2;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let room = half - inner.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            inner.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() > half {
            inner.dropped += (inner.tail.len() + bytes.len() - half) as u64;
            inner.tail.clear();
            bytes = &bytes[bytes.len() - half..];
        }
        let overflow = (inner.tail.len() + bytes.len()).saturating_sub(half);
        inner.tail.drain(..overflow);
        inner.dropped += overflow as u64;
        inner.tail.extend(bytes);
    }

    /// What was kept, lossily decoded, with a marker where bytes were dropped.
    pub(crate) fn text(&self) -> String {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::from_utf8_lossy(&inner.head).into_owned();
        if inner.dropped > 0 {
            out.push_str(&format!("\n[... {} bytes dropped ...]\n", inner.dropped));
        }
        let (a, b) = inner.tail.as_slices();
        out.push_str(&String::from_utf8_lossy(&[a, b].concat()));
        out
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_keeps_the_head_and_the_tail() {
        let c = Capture::new();
        c.push(b"start\n");
        for _ in 0..10_000 {
            c.push(&[b'x'; 100]);
        }
        c.push(b"\npanicked at the end");
        let text = c.text();
        assert!(text.starts_with("start\n"));
        assert!(text.ends_with("panicked at the end"));
        assert!(text.contains("bytes dropped"));
        assert!(text.len() < STDIO_CAPTURE_BYTES + 100);
    }

    #[test]
    fn small_output_is_kept_whole() {
        let c = Capture::new();
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.text(), "hello world");
    }
}
