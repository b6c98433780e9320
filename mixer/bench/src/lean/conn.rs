//! One HTTP/2 connection of the lean driver: just what unary gRPC calls need, on a
//! non-blocking socket that the driver's loop polls.
//!
//! Requests carry a header block encoded once (no dynamic table on our side, so every block
//! is the same bytes) and their framed message. Answers are read frame by frame; every header
//! block is decoded, in order, so that the server's dynamic table stays in step.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use rustix::event::{PollFd, PollFlags, poll};
use rustix::time::Timespec;

use super::hpack::request_block;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Our receive windows: large, so that answers never wait for a window update from us.
const RECEIVE_WINDOW: u32 = 1 << 30;
/// The window every connection starts with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: i64 = 65_535;

/// A call that finished: when it was sent and what came back.
#[derive(Debug)]
pub struct Finished {
    /// The caller's tag for the call (the driver's schedule slot).
    pub tag: u64,
    /// The answer's one gRPC message, when the call succeeded (HTTP 200, `grpc-status: 0`).
    pub message: Option<Vec<u8>>,
}

#[derive(Default)]
struct Stream {
    tag: u64,
    send_window: i64,
    http_ok: bool,
    grpc_status: Option<u32>,
    body: Vec<u8>,
    /// The request message not sent yet (flow control held it back).
    unsent: Option<Bytes>,
}

/// One connection.
pub struct Conn {
    socket: TcpStream,
    out: Vec<u8>,
    written: usize,
    input: Vec<u8>,
    decoder: httlib_hpack::Decoder<'static>,
    header_block: Vec<u8>,
    /// The stream whose header block is being assembled, and whether it ended the stream.
    assembling: Option<(u32, bool)>,
    next_stream: u32,
    send_window: i64,
    peer_stream_window: i64,
    max_frame: usize,
    max_streams: usize,
    streams: HashMap<u32, Stream>,
    blocked: VecDeque<u32>,
    unacknowledged: u32,
    request_block: Vec<u8>,
    /// No new streams: the server sent GOAWAY or the connection broke.
    closed: bool,
    /// The server's first SETTINGS arrived (with its stream limit and windows).
    settled: bool,
}

impl Conn {
    /// Connects to `addr` and sends the preface; `path` is the method every call goes to.
    pub fn connect(addr: SocketAddr, path: &str) -> anyhow::Result<Conn> {
        let socket = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to {addr}"))?;
        socket.set_nodelay(true)?;
        socket.set_nonblocking(true)?;
        let mut conn = Conn {
            socket,
            out: Vec::with_capacity(64 * 1024),
            written: 0,
            input: Vec::with_capacity(64 * 1024),
            decoder: httlib_hpack::Decoder::default(),
            header_block: Vec::new(),
            assembling: None,
            next_stream: 1,
            send_window: DEFAULT_WINDOW,
            peer_stream_window: DEFAULT_WINDOW,
            max_frame: 16_384,
            max_streams: usize::MAX,
            streams: HashMap::new(),
            blocked: VecDeque::new(),
            unacknowledged: 0,
            request_block: request_block(path, &addr.to_string()),
            closed: false,
            settled: false,
        };
        conn.out.extend_from_slice(PREFACE);
        // ENABLE_PUSH = 0, INITIAL_WINDOW_SIZE = RECEIVE_WINDOW.
        let mut settings = Vec::new();
        settings.extend_from_slice(&2u16.to_be_bytes());
        settings.extend_from_slice(&0u32.to_be_bytes());
        settings.extend_from_slice(&4u16.to_be_bytes());
        settings.extend_from_slice(&RECEIVE_WINDOW.to_be_bytes());
        conn.frame(SETTINGS, 0, 0, &settings);
        let grow = RECEIVE_WINDOW - DEFAULT_WINDOW as u32;
        conn.frame(WINDOW_UPDATE, 0, 0, &grow.to_be_bytes());
        // Calls start once the server's limits are known: streams opened before its
        // SETTINGS could exceed its concurrency limit and be refused.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut done = Vec::new();
        while !conn.settled {
            anyhow::ensure!(
                !conn.closed,
                "{addr} closed the connection during the handshake"
            );
            anyhow::ensure!(Instant::now() < deadline, "no HTTP/2 SETTINGS from {addr}");
            conn.flush()
                .with_context(|| format!("HTTP/2 handshake with {addr}"))?;
            let mut fds = [PollFd::new(&conn.socket, PollFlags::IN)];
            let tick = Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            let _ = poll(&mut fds, Some(&tick));
            conn.receive(&mut done);
        }
        Ok(conn)
    }

    /// The socket, for polling.
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Whether a new call can start here now.
    pub fn can_start(&self) -> bool {
        !self.closed && self.streams.len() < self.max_streams
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.streams.len()
    }

    /// Whether bytes wait to be written.
    pub fn wants_write(&self) -> bool {
        self.written < self.out.len()
    }

    /// Starts a call with the framed request `message`, tagged `tag`.
    pub fn start(&mut self, tag: u64, message: Bytes) {
        let id = self.next_stream;
        self.next_stream += 2;
        frame_into(&mut self.out, HEADERS, END_HEADERS, id, &self.request_block);
        self.streams.insert(
            id,
            Stream {
                tag,
                send_window: self.peer_stream_window,
                unsent: Some(message),
                ..Stream::default()
            },
        );
        self.send_data(id);
    }

    /// Writes what is pending; `Err` when the connection broke.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.written < self.out.len() {
            match self.socket.write(&self.out[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
        }
        Ok(())
    }

    /// Reads what arrived and handles it, adding finished calls to `done`. On a broken
    /// connection every call in flight finishes without an answer.
    pub fn receive(&mut self, done: &mut Vec<(Finished, Instant)>) {
        if let Err(_broken) = self.read_and_handle(done) {
            self.closed = true;
            let now = Instant::now();
            for (_, stream) in self.streams.drain() {
                done.push((finish(stream, false), now));
            }
        }
    }

    fn read_and_handle(&mut self, done: &mut Vec<(Finished, Instant)>) -> anyhow::Result<()> {
        let mut chunk = [0u8; 32 * 1024];
        loop {
            match self.socket.read(&mut chunk) {
                Ok(0) => anyhow::bail!("connection closed"),
                Ok(n) => {
                    self.input.extend_from_slice(&chunk[..n]);
                    // A short read took all there was: asking again would only say so.
                    if n < chunk.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Taken out while its frames are handled, which need `self` but never the input.
        let mut input = std::mem::take(&mut self.input);
        let handled = self.handle_frames(&input, done);
        input.drain(..handled?);
        self.input = input;
        if self.unacknowledged >= RECEIVE_WINDOW / 2 {
            let grow = std::mem::take(&mut self.unacknowledged);
            self.frame(WINDOW_UPDATE, 0, 0, &grow.to_be_bytes());
        }
        Ok(())
    }

    /// Handles the complete frames at the start of `input`; returns the bytes they took.
    fn handle_frames(
        &mut self,
        input: &[u8],
        done: &mut Vec<(Finished, Instant)>,
    ) -> anyhow::Result<usize> {
        let mut at = 0;
        let now = Instant::now();
        while let Some(h) = input.get(at..at + 9) {
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let Some(payload) = input.get(at + 9..at + 9 + len) else {
                break;
            };
            let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            self.handle(h[3], h[4], id, payload, now, done)?;
            at += 9 + len;
        }
        Ok(at)
    }

    fn handle(
        &mut self,
        kind: u8,
        flags: u8,
        id: u32,
        payload: &[u8],
        now: Instant,
        done: &mut Vec<(Finished, Instant)>,
    ) -> anyhow::Result<()> {
        if self.assembling.is_some() && kind != CONTINUATION {
            anyhow::bail!("frame type {kind} inside a header block");
        }
        match kind {
            DATA => {
                self.unacknowledged += u32::try_from(payload.len()).unwrap_or(u32::MAX);
                let data = unpad(flags, payload)?;
                if let Some(stream) = self.streams.get_mut(&id) {
                    stream.body.extend_from_slice(data);
                }
                if flags & END_STREAM != 0 {
                    self.end(id, now, done);
                }
            }
            HEADERS => {
                let mut block = unpad(flags, payload)?;
                if flags & PRIORITY != 0 {
                    block = block.get(5..).context("short PRIORITY fields")?;
                }
                self.header_block.clear();
                self.header_block.extend_from_slice(block);
                self.assembling = Some((id, flags & END_STREAM != 0));
                if flags & END_HEADERS != 0 {
                    self.headers_done(now, done)?;
                }
            }
            CONTINUATION => {
                self.header_block.extend_from_slice(payload);
                if flags & END_HEADERS != 0 {
                    self.headers_done(now, done)?;
                }
            }
            RST_STREAM => {
                if let Some(stream) = self.streams.remove(&id) {
                    done.push((finish(stream, false), now));
                }
            }
            SETTINGS if flags & ACK == 0 => {
                for setting in payload.chunks_exact(6) {
                    let value =
                        u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
                    match u16::from_be_bytes([setting[0], setting[1]]) {
                        3 => self.max_streams = value as usize,
                        4 => {
                            let delta = i64::from(value) - self.peer_stream_window;
                            self.peer_stream_window = i64::from(value);
                            for stream in self.streams.values_mut() {
                                stream.send_window += delta;
                            }
                        }
                        5 => self.max_frame = value as usize,
                        _ => {}
                    }
                }
                self.frame(SETTINGS, ACK, 0, &[]);
                self.settled = true;
                self.send_blocked();
            }
            PING if flags & ACK == 0 => self.frame(PING, ACK, 0, payload),
            GOAWAY => self.closed = true,
            WINDOW_UPDATE => {
                let bytes: [u8; 4] = payload.try_into().context("WINDOW_UPDATE size")?;
                let grow = i64::from(u32::from_be_bytes(bytes) & 0x7fff_ffff);
                if id == 0 {
                    self.send_window += grow;
                } else if let Some(stream) = self.streams.get_mut(&id) {
                    stream.send_window += grow;
                }
                self.send_blocked();
            }
            PUSH_PROMISE => anyhow::bail!("PUSH_PROMISE although push is disabled"),
            // PRIORITY, acknowledgements, unknown frame types: nothing to do.
            _ => {}
        }
        Ok(())
    }

    fn headers_done(
        &mut self,
        now: Instant,
        done: &mut Vec<(Finished, Instant)>,
    ) -> anyhow::Result<()> {
        let Some((id, ends)) = self.assembling.take() else {
            return Ok(());
        };
        let mut block = std::mem::take(&mut self.header_block);
        let mut fields = Vec::new();
        self.decoder
            .decode(&mut block, &mut fields)
            .map_err(|e| anyhow::anyhow!("header block does not decode: {e:?}"))?;
        self.header_block = block;
        if let Some(stream) = self.streams.get_mut(&id) {
            for (name, value, _) in &fields {
                match name.as_slice() {
                    b":status" => stream.http_ok = value.as_slice() == b"200",
                    b"grpc-status" => {
                        stream.grpc_status =
                            std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                    }
                    _ => {}
                }
            }
        }
        if ends {
            self.end(id, now, done);
        }
        Ok(())
    }

    fn end(&mut self, id: u32, now: Instant, done: &mut Vec<(Finished, Instant)>) {
        if let Some(stream) = self.streams.remove(&id) {
            done.push((finish(stream, true), now));
        }
    }

    /// Sends as much of stream `id`'s message as the windows allow; the rest waits.
    fn send_data(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(mut rest) = stream.unsent.take() else {
            return;
        };
        while !rest.is_empty() {
            let room = self.send_window.min(stream.send_window).max(0) as usize;
            let n = rest.len().min(room).min(self.max_frame);
            if n == 0 {
                stream.unsent = Some(rest);
                self.blocked.push_back(id);
                return;
            }
            let chunk = rest.split_to(n);
            self.send_window -= n as i64;
            stream.send_window -= n as i64;
            let flags = if rest.is_empty() { END_STREAM } else { 0 };
            frame_into(&mut self.out, DATA, flags, id, &chunk);
        }
    }

    fn send_blocked(&mut self) {
        for _ in 0..self.blocked.len() {
            let Some(id) = self.blocked.pop_front() else {
                break;
            };
            self.send_data(id);
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, id: u32, payload: &[u8]) {
        frame_into(&mut self.out, kind, flags, id, payload);
    }
}

fn finish(stream: Stream, ended: bool) -> Finished {
    let ok = ended && stream.http_ok && stream.grpc_status == Some(0);
    // One uncompressed gRPC message: flag 0, big-endian length, the message.
    let one_message = |b: &[u8]| {
        let len = b
            .get(1..5)
            .and_then(|l| l.try_into().ok())
            .map(u32::from_be_bytes);
        b.first() == Some(&0) && len.is_some_and(|len| b.len() == 5 + len as usize)
    };
    let mut body = stream.body;
    let message = (ok && one_message(&body)).then(|| {
        body.drain(..5);
        body
    });
    Finished {
        tag: stream.tag,
        message,
    }
}

fn unpad(flags: u8, payload: &[u8]) -> anyhow::Result<&[u8]> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let pad = usize::from(*payload.first().context("empty padded frame")?);
    payload
        .get(1..payload.len().saturating_sub(pad))
        .filter(|_| pad < payload.len())
        .context("padding longer than the frame")
}

fn frame_into(out: &mut Vec<u8>, kind: u8, flags: u8, id: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_stripped_and_checked() {
        assert_eq!(unpad(PADDED, &[2, b'a', b'b', 0, 0]).ok(), Some(&b"ab"[..]));
        assert!(unpad(PADDED, &[5, b'a']).is_err());
        assert_eq!(unpad(0, b"xy").ok(), Some(&b"xy"[..]));
    }
}
