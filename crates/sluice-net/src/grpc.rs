//! gRPC framing of the `Exchange` stream, by hand on both sides.
//!
//! The data plane's one streaming call is made and served over hyper's
//! bodies directly (tonic's channel and server underneath; the wire format
//! is gRPC's, unchanged) instead of through tonic's codec. Why: tonic's
//! encoder copies every message into its buffer (prost copies each IPC
//! body), and its decoder copies every HTTP/2 DATA chunk into one growing
//! buffer and, since decoded bodies keep slices of that buffer alive,
//! allocates and copies again at each message header. In the profile of a
//! two-worker pipeline those copies were a quarter of the receiving
//! worker's time and a tenth of the sender's.
//!
//! Here the sender hands each large IPC body to HTTP/2 as a DATA chunk of
//! its own ([`encode_frames`]; h2 writes it with a vectored write), and the
//! receiver decodes a message straight from the chunks it arrived in
//! ([`Chunks`]): a body that lies within one chunk becomes a slice of it.
//! The one copy left on each side is the kernel's.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use sluice_proto::v1::data_frame::Body;
use sluice_proto::v1::{DataFrame, DataFrames, IpcMessage};
use std::collections::VecDeque;
use tonic::codegen::http::{self, HeaderMap, HeaderValue};
use tonic::{Code, Status};

/// gRPC's prefix of every message: a compression flag and a big-endian
/// length.
const PREFIX_BYTES: usize = 5;

/// DATA chunks shorter than this are copied together rather than kept each
/// as a `Bytes`: a peer sending a message as tiny frames must not make the
/// reader hold a `Bytes` per byte. So at most two chunks per 4 KiB
/// buffered (one large, one run of small ones) are held.
const SMALL_CHUNK_BYTES: usize = 4096;

/// Splits a gRPC stream's DATA chunks into messages.
pub(crate) struct MessageReader {
    chunks: VecDeque<Bytes>,
    /// Small chunks that came after `chunks`, copied together.
    small: BytesMut,
    /// Bytes in `chunks` and `small`.
    buffered: usize,
    /// The length of the message whose prefix was read, while its bytes
    /// are still arriving.
    body_len: Option<usize>,
    /// The largest message accepted (`message_bytes_max`): a peer cannot
    /// make this side buffer more than that for one message.
    limit: usize,
}

impl MessageReader {
    pub fn new(limit: usize) -> Self {
        MessageReader {
            chunks: VecDeque::new(),
            small: BytesMut::new(),
            buffered: 0,
            body_len: None,
            limit,
        }
    }

    /// Appends a DATA chunk as it came off the connection.
    pub fn push(&mut self, chunk: Bytes) {
        self.buffered += chunk.len();
        if chunk.len() < SMALL_CHUNK_BYTES {
            self.small.extend_from_slice(&chunk);
        } else {
            self.flush_small();
            self.chunks.push_back(chunk);
        }
    }

    /// Ends the run of small chunks (before a large one, or a take).
    fn flush_small(&mut self) {
        if !self.small.is_empty() {
            self.chunks.push_back(self.small.split().freeze());
        }
    }

    #[cfg(test)]
    fn chunks_held(&self) -> usize {
        self.chunks.len()
    }

    /// The next whole message's bytes (without its prefix), if buffered:
    /// the chunks (or parts of chunks) it arrived in, not copied.
    pub fn next_message(&mut self) -> Result<Option<Chunks>, String> {
        let len = match self.body_len {
            Some(len) => len,
            None => {
                if self.buffered < PREFIX_BYTES {
                    return Ok(None);
                }
                let mut prefix = [0u8; PREFIX_BYTES];
                self.take(PREFIX_BYTES).copy_to_slice(&mut prefix);
                match prefix[0] {
                    0 => {}
                    1 => return Err("a compressed gRPC message (the data plane never compresses)".into()),
                    flag => return Err(format!("a gRPC message with compression flag {flag} (0 or 1 expected)")),
                }
                let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
                if len > self.limit {
                    return Err(format!(
                        "a gRPC message of {len} bytes, more than the {} accepted (message_bytes_max)",
                        self.limit
                    ));
                }
                self.body_len = Some(len);
                len
            }
        };
        if self.buffered < len {
            return Ok(None);
        }
        self.body_len = None;
        Ok(Some(self.take(len)))
    }

    /// Whether part of a message is buffered (an end of stream now cuts it).
    pub fn is_mid_message(&self) -> bool {
        self.buffered > 0 || self.body_len.is_some()
    }

    /// The first `n` buffered bytes, as the chunks they lie in.
    fn take(&mut self, n: usize) -> Chunks {
        debug_assert!(n <= self.buffered);
        self.flush_small();
        self.buffered -= n;
        let mut out = Chunks {
            remaining: n,
            ..Chunks::default()
        };
        let mut need = n;
        while need > 0 {
            let front = self.chunks.front_mut().expect("buffered bytes are in chunks");
            if front.len() <= need {
                need -= front.len();
                out.chunks.push_back(self.chunks.pop_front().expect("a front chunk"));
            } else {
                out.chunks.push_back(front.split_to(need));
                need = 0;
            }
        }
        out
    }
}

/// One message's bytes as the chunks they arrived in. As a [`Buf`], a
/// `bytes` field that lies within one chunk is taken as a slice of it
/// (prost decodes `bytes` fields with `copy_to_bytes`); one that spans
/// chunks is copied once.
#[derive(Default)]
pub(crate) struct Chunks {
    chunks: VecDeque<Bytes>,
    remaining: usize,
    /// `copy_to_bytes` calls that had to copy.
    gathered: u64,
}

impl Buf for Chunks {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&[], |c| &c[..])
    }

    fn advance(&mut self, mut n: usize) {
        assert!(n <= self.remaining, "advance past the end of a message");
        self.remaining -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("remaining bytes are in chunks");
            if front.len() <= n {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        assert!(len <= self.remaining, "copy past the end of a message");
        if let Some(front) = self.chunks.front_mut()
            && front.len() >= len
        {
            self.remaining -= len;
            let out = front.split_to(len);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            return out;
        }
        if len > 0 {
            self.gathered += 1;
        }
        let mut out = BytesMut::with_capacity(len);
        out.put((&mut *self).take(len));
        out.freeze()
    }
}

/// A gRPC body (a request's or a response's) read as prost messages.
pub(crate) struct Messages<M> {
    body: tonic::body::Body,
    reader: MessageReader,
    /// A request's: a client that cancels ends it (as tonic treats one).
    request: bool,
    gathered: u64,
    _message: std::marker::PhantomData<fn() -> M>,
}

impl<M: Message + Default> Messages<M> {
    /// The messages of a request's body.
    pub fn request(body: tonic::body::Body, limit: usize) -> Self {
        Self::new(body, limit, true)
    }

    /// The messages of a response, or its status if it failed at once (a
    /// "trailers-only" response, as a refused call gets).
    pub fn response(response: http::Response<tonic::body::Body>, limit: usize) -> Result<Self, Status> {
        if response.status() != http::StatusCode::OK {
            return Err(Status::unknown(format!(
                "HTTP status {} instead of a gRPC response",
                response.status()
            )));
        }
        if let Some(status) = Status::from_header_map(response.headers())
            && status.code() != Code::Ok
        {
            return Err(status);
        }
        Ok(Self::new(response.into_body(), limit, false))
    }

    fn new(body: tonic::body::Body, limit: usize, request: bool) -> Self {
        Messages {
            body,
            reader: MessageReader::new(limit),
            request,
            gathered: 0,
            _message: std::marker::PhantomData,
        }
    }

    /// The next message and its encoded size; `None` at the end of the
    /// stream, an error if the peer's status or the stream says so.
    pub async fn message(&mut self) -> Result<Option<(M, usize)>, Status> {
        loop {
            if let Some(mut chunks) = self.reader.next_message().map_err(Status::invalid_argument)? {
                let len = chunks.remaining();
                let message = M::decode(&mut chunks)
                    .map_err(|e| Status::invalid_argument(format!("an undecodable data plane message: {e}")))?;
                self.gathered += chunks.gathered;
                return Ok(Some((message, len)));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.reader.push(data),
                    Err(frame) => {
                        if let Some(status) = frame.trailers_ref().and_then(Status::from_header_map)
                            && status.code() != Code::Ok
                        {
                            return Err(status);
                        }
                    }
                },
                Some(Err(status)) if self.request && status.code() == Code::Cancelled => return Ok(None),
                Some(Err(status)) => return Err(status),
                None if self.reader.is_mid_message() => {
                    return Err(Status::internal("the stream ended inside a gRPC message"));
                }
                None => return Ok(None),
            }
        }
    }

    /// `bytes` fields so far that spanned DATA chunks and were copied (the
    /// others are slices of the chunk they arrived in).
    pub fn gathered(&self) -> u64 {
        self.gathered
    }
}

/// An `Exchange`-style streaming call's request: `path`, gRPC's headers,
/// `body` (the channel adds the scheme and authority).
pub(crate) fn request(path: &'static str, body: tonic::body::Body) -> http::Request<tonic::body::Body> {
    let mut request = http::Request::new(body);
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = http::Uri::from_static(path);
    let headers = request.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    request
}

/// IPC bodies up to this size are copied into the chunk around them (a
/// DATA frame of their own would cost more than the copy).
const INLINE_BODY_BYTES_MAX: usize = 4096;

/// One `DataFrames` message, with its gRPC prefix, as DATA chunks: each
/// large IPC body (nearly all of the bytes) is a chunk of its own, the
/// `Bytes` the encoder made, not copied; everything else is encoded by
/// prost into the chunks between them. The bytes are exactly prost's
/// encoding of the message: the fields in tag order, and an IPC body
/// (field 2 of `IpcMessage`, its last) comes last in its frame.
///
/// A message over `limit` bytes (`message_bytes_max`, which the receiver
/// applies too) is refused here, with the reason.
pub(crate) fn encode_frames(message: &DataFrames, limit: usize) -> Result<Vec<Bytes>, String> {
    use prost::encoding::{WireType, encode_key, encode_varint, string, uint32, uint64};
    let len = message.encoded_len();
    if len > limit.min(u32::MAX as usize) {
        return Err(format!(
            "a data plane message of {len} bytes, more than the {limit} allowed (message_bytes_max)"
        ));
    }
    let outside: usize = message.frames.iter().filter_map(large).map(|ipc| ipc.body.len()).sum();
    let mut head = BytesMut::with_capacity(PREFIX_BYTES + len - outside);
    head.put_u8(0);
    head.put_u32(len as u32);
    if message.protocol_version != 0 {
        uint32::encode(1, &message.protocol_version, &mut head);
    }
    if !message.sender.is_empty() {
        string::encode(2, &message.sender, &mut head);
    }
    let mut chunks = Vec::with_capacity(2 * message.frames.len() + 1);
    for frame in &message.frames {
        let Some(ipc) = large(frame) else {
            prost::encoding::message::encode(3, frame, &mut head);
            continue;
        };
        let tag = if matches!(frame.body, Some(Body::Batch(_))) {
            4
        } else {
            5
        };
        encode_key(3, WireType::LengthDelimited, &mut head);
        encode_varint(frame.encoded_len() as u64, &mut head);
        if frame.channel != 0 {
            uint64::encode(1, &frame.channel, &mut head);
        }
        encode_key(tag, WireType::LengthDelimited, &mut head);
        encode_varint(ipc.encoded_len() as u64, &mut head);
        if !ipc.header.is_empty() {
            prost::encoding::bytes::encode(1, &ipc.header, &mut head);
        }
        encode_key(2, WireType::LengthDelimited, &mut head);
        encode_varint(ipc.body.len() as u64, &mut head);
        chunks.push(head.split().freeze());
        chunks.push(ipc.body.clone());
    }
    if !head.is_empty() {
        chunks.push(head.freeze());
    }
    debug_assert_eq!(chunks.iter().map(Bytes::len).sum::<usize>(), PREFIX_BYTES + len);
    Ok(chunks)
}

/// The IPC message of a frame whose body goes in a chunk of its own.
fn large(frame: &DataFrame) -> Option<&IpcMessage> {
    match &frame.body {
        Some(Body::Batch(ipc) | Body::Dictionary(ipc)) if ipc.body.len() > INLINE_BODY_BYTES_MAX => Some(ipc),
        _ => None,
    }
}

/// One message with its gRPC prefix, as one DATA chunk.
pub(crate) fn encode<M: Message>(message: &M) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(PREFIX_BYTES + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).expect("a reply message under 4 GiB"));
    message.encode(&mut buf).expect("the buffer has the message's size");
    buf.freeze()
}

/// The trailers that end a response with `status`.
pub(crate) fn trailers(status: &Status) -> Frame<Bytes> {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // A message that cannot be a header value: the code alone.
        map.insert(Status::GRPC_STATUS, HeaderValue::from(status.code() as i32));
    }
    Frame::trailers(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::v1::ChannelOpen;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn all(mut chunks: Chunks) -> Vec<u8> {
        let mut out = vec![0; chunks.remaining()];
        chunks.copy_to_slice(&mut out);
        out
    }

    /// Three messages split into chunks at every possible pair of points:
    /// the same three messages come out.
    #[test]
    fn messages_come_out_whole_wherever_the_chunks_are_cut() {
        let a: Vec<u8> = (0..13u8).collect();
        let b: Vec<u8> = (100..107u8).collect();
        let wire = [framed(&a), framed(&b), framed(&[])].concat();
        for i in 0..=wire.len() {
            for j in i..=wire.len() {
                let mut reader = MessageReader::new(64);
                let mut out = Vec::new();
                for chunk in [&wire[..i], &wire[i..j], &wire[j..]] {
                    reader.push(Bytes::copy_from_slice(chunk));
                    while let Some(m) = reader.next_message().unwrap() {
                        out.push(all(m));
                    }
                }
                assert_eq!(out, vec![a.clone(), b.clone(), Vec::new()], "cut at {i} and {j}");
                assert!(!reader.is_mid_message());
            }
        }
    }

    fn frames() -> DataFrames {
        let ipc = |header: &[u8], body: Vec<u8>| IpcMessage {
            header: Bytes::copy_from_slice(header),
            body: Bytes::from(body),
        };
        let frame = |channel, body| DataFrame {
            channel,
            body: Some(body),
        };
        DataFrames {
            protocol_version: 4,
            sender: "w1".into(),
            frames: vec![
                frame(
                    3,
                    Body::Open(ChannelOpen {
                        pipeline: 7,
                        deployment: 2,
                        edge: 1,
                        from: 0,
                        to: 1,
                        credits_max: 100,
                    }),
                ),
                frame(0, Body::Batch(ipc(b"head", (0..9000u32).map(|i| i as u8).collect()))),
                frame(3, Body::Watermark(-5)),
                frame(300, Body::Dictionary(ipc(b"", vec![7; 5000]))),
                frame(4, Body::Batch(ipc(b"small", vec![1; 10]))),
                frame(1 << 40, Body::Batch(ipc(b"h", vec![2; 200_000]))),
            ],
        }
    }

    /// The chunks are prost's encoding of the message, byte for byte, with
    /// each large body the very `Bytes` the message held; decoded from those
    /// chunks, the message is equal and its large bodies are those `Bytes`
    /// again, not copies.
    #[test]
    fn large_bodies_cross_as_their_own_chunks_without_a_copy() {
        let message = frames();
        let chunks = encode_frames(&message, 1 << 20).unwrap();
        let wire: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut expected = vec![0];
        expected.extend_from_slice(&(message.encoded_len() as u32).to_be_bytes());
        expected.extend_from_slice(&message.encode_to_vec());
        assert_eq!(wire, expected);
        // Three large bodies, each its own chunk after the one that encodes
        // what comes before it (the last frame's body ends the message).
        assert_eq!(chunks.len(), 6);
        let mut reader = MessageReader::new(1 << 20);
        for chunk in chunks {
            reader.push(chunk);
        }
        let mut got = reader.next_message().unwrap().unwrap();
        let decoded = DataFrames::decode(&mut got).unwrap();
        assert_eq!(decoded, message);
        assert_eq!(got.gathered, 0);
        let bodies = |m: &DataFrames| -> Vec<*const u8> {
            m.frames
                .iter()
                .filter_map(|f| match &f.body {
                    Some(Body::Batch(ipc) | Body::Dictionary(ipc)) if ipc.body.len() > INLINE_BODY_BYTES_MAX => {
                        Some(ipc.body.as_ptr())
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(bodies(&decoded), bodies(&message));
    }

    /// The bytes `encode_frames` puts on the wire for `message`, in one piece.
    fn on_the_wire(message: &DataFrames) -> Vec<u8> {
        let chunks = encode_frames(message, 1 << 20).unwrap();
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    /// Cut anywhere else (by a smaller HTTP/2 frame, say), the message still
    /// decodes equal; only the bodies a cut falls inside are copied (or, for
    /// tiny chunks, the whole run as it arrives).
    #[test]
    fn bodies_cut_across_chunks_are_copied_once_and_decode_equal() {
        let message = frames();
        let wire = on_the_wire(&message);
        for size in [1, 7, 4096, 16 << 10, 1 << 20] {
            let mut reader = MessageReader::new(1 << 20);
            for chunk in wire.chunks(size) {
                reader.push(Bytes::copy_from_slice(chunk));
            }
            let mut got = reader.next_message().unwrap().unwrap();
            assert_eq!(DataFrames::decode(&mut got).unwrap(), message, "chunks of {size}");
            assert!(reader.next_message().unwrap().is_none());
            // Chunks under SMALL_CHUNK_BYTES were copied together as they
            // came (one run: nothing to gather); larger ones cut bodies.
            if size >= wire.len() || size < SMALL_CHUNK_BYTES {
                assert_eq!(got.gathered, 0, "chunks of {size}");
            } else {
                assert!(got.gathered > 0, "chunks of {size}");
            }
        }
    }

    /// A message sent as one-byte frames (or small frames between large
    /// ones) holds at most two chunks per 4 KiB, and decodes equal.
    #[test]
    fn tiny_chunks_are_copied_together_not_held_each() {
        let message = frames();
        let wire = on_the_wire(&message);
        let mut reader = MessageReader::new(1 << 20);
        for byte in &wire[..wire.len() - 1] {
            reader.push(Bytes::copy_from_slice(std::slice::from_ref(byte)));
            assert!(reader.next_message().unwrap().is_none());
        }
        assert_eq!(
            reader.chunks_held(),
            0,
            "the prefix was taken; the rest waits as one copied run"
        );
        assert_eq!(reader.buffered, wire.len() - 1 - PREFIX_BYTES);
        reader.push(Bytes::copy_from_slice(&wire[wire.len() - 1..]));
        let mut got = reader.next_message().unwrap().unwrap();
        assert_eq!(DataFrames::decode(&mut got).unwrap(), message);
        // Small and large chunks alternating.
        let mut reader = MessageReader::new(1 << 20);
        let mut at = 0;
        let mut pushed = 0;
        while at < wire.len() {
            let n = if pushed % 2 == 0 { 1 } else { SMALL_CHUNK_BYTES };
            let end = (at + n).min(wire.len());
            reader.push(Bytes::copy_from_slice(&wire[at..end]));
            at = end;
            pushed += 1;
            assert!(reader.chunks_held() <= 2 * at.div_ceil(SMALL_CHUNK_BYTES) + 1);
        }
        let mut got = reader.next_message().unwrap().unwrap();
        assert_eq!(DataFrames::decode(&mut got).unwrap(), message);
    }

    #[test]
    fn a_message_over_the_limit_is_not_sent() {
        let message = frames();
        let len = message.encoded_len();
        assert!(encode_frames(&message, len).is_ok());
        let error = encode_frames(&message, len - 1).unwrap_err();
        assert!(
            error.contains(&format!("{len} bytes, more than the {}", len - 1)),
            "{error}"
        );
    }

    #[test]
    fn a_message_over_the_limit_is_refused_before_its_body_arrives() {
        let mut reader = MessageReader::new(64);
        reader.push(Bytes::from_static(&[0, 0, 0, 0, 65]));
        let error = reader.next_message().err().unwrap();
        assert!(error.contains("65 bytes, more than the 64"), "{error}");
        let mut reader = MessageReader::new(64);
        reader.push(Bytes::from_static(&[0, 0, 0, 0, 64]));
        assert!(reader.next_message().unwrap().is_none());
        assert!(reader.is_mid_message());
    }

    #[test]
    fn compressed_or_malformed_flags_are_refused() {
        for (flag, text) in [(1u8, "compressed"), (7, "compression flag 7")] {
            let mut reader = MessageReader::new(64);
            reader.push(Bytes::from(vec![flag, 0, 0, 0, 1, 9]));
            let error = reader.next_message().err().unwrap();
            assert!(error.contains(text), "{error}");
        }
    }

    #[test]
    fn an_encoded_reply_reads_back() {
        let reply = sluice_proto::v1::CreditFrames {
            protocol_version: 4,
            credits: vec![sluice_proto::v1::Credit {
                channel: 3,
                credits: 1000,
                closed: false,
                error: String::new(),
            }],
        };
        let mut reader = MessageReader::new(1 << 20);
        reader.push(encode(&reply));
        let bytes = reader.next_message().unwrap().unwrap();
        assert_eq!(sluice_proto::v1::CreditFrames::decode(bytes).unwrap(), reply);
    }
}
