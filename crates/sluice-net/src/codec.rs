//! Messages to frames and back: record batches as Arrow IPC (the schema
//! once per channel, then each batch as its flatbuffer header and its body
//! of buffers), control messages as small protobuf frames. Pure logic, no
//! I/O: one [`ChannelEncoder`] per sending channel, one [`ChannelDecoder`]
//! per receiving channel.

use arrow::array::ArrayRef;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use arrow_ipc::MetadataVersion;
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use bytes::Bytes;
use sluice_dataflow::channel::ChannelKey;
use sluice_dataflow::message::{Barrier, Message, Mutation};
use sluice_proto::v1::data_frame::Body;
use sluice_proto::v1::{BarrierFrame, ChannelOpen, Empty, IpcMessage};
use sluice_types::{EdgeId, PipelineId, Watermark};
use std::collections::HashMap;
use std::sync::Arc;

/// Buffers aligned to 8 bytes (Arrow IPC's default is 64): the receiver's
/// decoder copies a buffer only when it lands unaligned for its type, and
/// 8 is what every primitive type needs; 64 would only add padding.
const IPC_ALIGNMENT: usize = 8;

/// Turns one channel's messages into frame bodies.
pub struct ChannelEncoder {
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
    schema: Option<SchemaRef>,
}

impl Default for ChannelEncoder {
    fn default() -> Self {
        ChannelEncoder {
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            options: IpcWriteOptions::try_new(IPC_ALIGNMENT, false, MetadataVersion::V5)
                .expect("8-byte alignment is valid"),
            context: IpcWriteContext::default(),
            schema: None,
        }
    }
}

impl ChannelEncoder {
    /// Appends the frames of `message` to `out`: a data message whose
    /// schema differs from the previous one's gets a schema frame first,
    /// and dictionary frames before the batch that needs them.
    pub fn encode(&mut self, message: Message, out: &mut Vec<Body>) -> Result<(), ArrowError> {
        match message {
            Message::Data(batch) => self.encode_batch(&batch, out)?,
            Message::Watermark(Watermark(t)) => out.push(Body::Watermark(t)),
            Message::Idle => out.push(Body::Idle(Empty {})),
            Message::Barrier(barrier) => out.push(Body::Barrier(BarrierFrame {
                checkpoint_id: barrier.checkpoint_id,
                stop: barrier.stops(),
            })),
            Message::EndOfInput => out.push(Body::EndOfInput(Empty {})),
        }
        Ok(())
    }

    fn encode_batch(&mut self, batch: &RecordBatch, out: &mut Vec<Body>) -> Result<(), ArrowError> {
        let schema = batch.schema();
        let same = self
            .schema
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &schema) || **s == *schema);
        if !same {
            self.dictionaries = DictionaryTracker::new(false);
            let encoded =
                self.generator
                    .schema_to_bytes_with_dictionary_tracker(&schema, &mut self.dictionaries, &self.options);
            out.push(Body::Schema(Bytes::from(encoded.ipc_message)));
            self.schema = Some(schema);
        }
        let (dictionaries, encoded) =
            self.generator
                .encode(batch, &mut self.dictionaries, &self.options, &mut self.context)?;
        for d in dictionaries {
            out.push(Body::Dictionary(IpcMessage {
                header: Bytes::from(d.ipc_message),
                body: Bytes::from(d.arrow_data),
            }));
        }
        out.push(Body::Batch(IpcMessage {
            header: Bytes::from(encoded.ipc_message),
            body: Bytes::from(encoded.arrow_data),
        }));
        Ok(())
    }
}

/// What a frame body means to the receiving channel.
#[derive(Debug)]
pub enum Decoded {
    /// A message for the channel's consumer.
    Message(Message),
    /// A schema or dictionary: state for the batches that follow.
    State,
}

/// Turns one channel's frame bodies back into messages.
#[derive(Default)]
pub struct ChannelDecoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl ChannelDecoder {
    /// Decodes a frame body of a channel already open (`Open` and `Close`
    /// are the stream's business, not the decoder's).
    pub fn decode(&mut self, body: Body) -> Result<Decoded, String> {
        Ok(match body {
            Body::Schema(bytes) => {
                let message = arrow_ipc::root_as_message(&bytes).map_err(|e| format!("IPC schema: {e}"))?;
                let fb = message.header_as_schema().ok_or("a schema frame without a schema")?;
                self.schema = Some(Arc::new(arrow_ipc::convert::fb_to_schema(fb)));
                self.dictionaries.clear();
                Decoded::State
            }
            Body::Dictionary(ipc) => {
                self.decode_dictionary(ipc)
                    .map_err(|e| format!("IPC dictionary: {e}"))?;
                Decoded::State
            }
            Body::Batch(ipc) => Decoded::Message(Message::Data(
                self.decode_batch(ipc).map_err(|e| format!("IPC batch: {e}"))?,
            )),
            Body::Watermark(t) => Decoded::Message(Message::Watermark(Watermark(t))),
            Body::Idle(_) => Decoded::Message(Message::Idle),
            Body::Barrier(b) => Decoded::Message(Message::Barrier(Barrier {
                checkpoint_id: b.checkpoint_id,
                mutation: b.stop.then_some(Mutation::Stop),
            })),
            Body::EndOfInput(_) => Decoded::Message(Message::EndOfInput),
            Body::Open(_) | Body::Close(_) => return Err("open or close frame given to a decoder".into()),
        })
    }

    fn decode_batch(&self, ipc: IpcMessage) -> Result<RecordBatch, ArrowError> {
        let schema = self
            .schema
            .clone()
            .ok_or_else(|| ArrowError::IpcError("a batch before its schema".into()))?;
        let message = arrow_ipc::root_as_message(&ipc.header).map_err(|e| ArrowError::IpcError(e.to_string()))?;
        let fb = message
            .header_as_record_batch()
            .ok_or_else(|| ArrowError::IpcError("a batch frame without a record batch".into()))?;
        // `Buffer::from(Bytes)` shares the received bytes: no copy unless a
        // buffer lands unaligned for its type.
        arrow_ipc::reader::read_record_batch(
            &Buffer::from(ipc.body),
            fb,
            schema,
            &self.dictionaries,
            None,
            &message.version(),
        )
    }

    fn decode_dictionary(&mut self, ipc: IpcMessage) -> Result<(), ArrowError> {
        let schema = self
            .schema
            .clone()
            .ok_or_else(|| ArrowError::IpcError("a dictionary before its schema".into()))?;
        let message = arrow_ipc::root_as_message(&ipc.header).map_err(|e| ArrowError::IpcError(e.to_string()))?;
        let fb = message
            .header_as_dictionary_batch()
            .ok_or_else(|| ArrowError::IpcError("a dictionary frame without a dictionary".into()))?;
        arrow_ipc::reader::read_dictionary(
            &Buffer::from(ipc.body),
            fb,
            &schema,
            &mut self.dictionaries,
            &message.version(),
        )
    }
}

/// The `Open` frame of a channel.
pub fn open_frame(key: ChannelKey, credits_max: u32) -> ChannelOpen {
    ChannelOpen {
        pipeline: key.pipeline.0,
        deployment: key.deployment,
        edge: key.edge.0,
        from: key.from,
        to: key.to,
        credits_max,
    }
}

/// The channel an `Open` frame names.
pub fn open_key(open: &ChannelOpen) -> ChannelKey {
    ChannelKey {
        pipeline: PipelineId(open.pipeline),
        deployment: open.deployment,
        edge: EdgeId(open.edge),
        from: open.from,
        to: open.to,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};

    fn round_trip(messages: Vec<Message>) -> Vec<Message> {
        let mut encoder = ChannelEncoder::default();
        let mut decoder = ChannelDecoder::default();
        let mut frames = Vec::new();
        for m in messages {
            encoder.encode(m, &mut frames).unwrap();
        }
        frames
            .into_iter()
            .filter_map(|f| match decoder.decode(f).unwrap() {
                Decoded::Message(m) => Some(m),
                Decoded::State => None,
            })
            .collect()
    }

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let k = Int64Array::from_iter_values(from..from + rows);
        let s = StringArray::from_iter((from..from + rows).map(|i| (i % 3 != 0).then(|| format!("v{i}"))));
        RecordBatch::try_new(schema, vec![Arc::new(k), Arc::new(s)]).unwrap()
    }

    #[test]
    fn batches_and_control_messages_round_trip_in_order() {
        let b1 = batch(0, 10);
        let b2 = batch(10, 5).slice(1, 3);
        let out = round_trip(vec![
            Message::Data(b1.clone()),
            Message::Watermark(Watermark(7)),
            Message::Idle,
            Message::Data(b2.clone()),
            Message::Barrier(Barrier {
                checkpoint_id: 3,
                mutation: Some(Mutation::Stop),
            }),
            Message::Barrier(Barrier::checkpoint(4)),
            Message::EndOfInput,
        ]);
        assert_eq!(out.len(), 7);
        assert!(matches!(&out[0], Message::Data(b) if *b == b1));
        assert!(matches!(out[1], Message::Watermark(Watermark(7))));
        assert!(matches!(out[2], Message::Idle));
        assert!(matches!(&out[3], Message::Data(b) if *b == b2));
        assert!(matches!(out[4], Message::Barrier(b) if b.checkpoint_id == 3 && b.stops()));
        assert!(matches!(out[5], Message::Barrier(b) if b.checkpoint_id == 4 && !b.stops()));
        assert!(matches!(out[6], Message::EndOfInput));
    }

    #[test]
    fn the_schema_goes_once_until_it_changes() {
        let mut encoder = ChannelEncoder::default();
        let mut frames = Vec::new();
        encoder.encode(Message::Data(batch(0, 3)), &mut frames).unwrap();
        encoder.encode(Message::Data(batch(3, 3)), &mut frames).unwrap();
        let other = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        encoder.encode(Message::Data(other.clone()), &mut frames).unwrap();
        let kinds: Vec<&str> = frames
            .iter()
            .map(|f| match f {
                Body::Schema(_) => "schema",
                Body::Batch(_) => "batch",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["schema", "batch", "batch", "schema", "batch"]);
        let mut decoder = ChannelDecoder::default();
        let last = frames.into_iter().map(|f| decoder.decode(f).unwrap()).last().unwrap();
        assert!(matches!(last, Decoded::Message(Message::Data(b)) if b == other));
    }

    #[test]
    fn dictionary_columns_round_trip() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "d",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false,
        )]));
        let d1: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let d2: DictionaryArray<Int32Type> = vec!["c", "c", "d"].into_iter().collect();
        let b1 = RecordBatch::try_new(schema.clone(), vec![Arc::new(d1)]).unwrap();
        let b2 = RecordBatch::try_new(schema, vec![Arc::new(d2)]).unwrap();
        let out = round_trip(vec![Message::Data(b1.clone()), Message::Data(b2.clone())]);
        assert!(matches!(&out[0], Message::Data(b) if *b == b1));
        assert!(matches!(&out[1], Message::Data(b) if *b == b2));
    }

    #[test]
    fn a_batch_before_its_schema_is_an_error() {
        let mut encoder = ChannelEncoder::default();
        let mut frames = Vec::new();
        encoder.encode(Message::Data(batch(0, 3)), &mut frames).unwrap();
        let mut decoder = ChannelDecoder::default();
        let err = decoder.decode(frames.pop().unwrap()).unwrap_err();
        assert!(err.contains("before its schema"), "{err}");
    }
}
