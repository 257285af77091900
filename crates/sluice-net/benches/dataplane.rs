//! Data plane throughput: 100-byte messages (SOL's shape: an Int64 key and
//! a 100-byte Utf8 message per row, in batches) from one task to another,
//!
//! - `inproc`: through an in-process credit channel (the baseline);
//! - `loopback`: through two data planes in this process, over TCP on
//!   127.0.0.1;
//! - `process`: to a data plane in a child process (this binary
//!   re-executed), over TCP on 127.0.0.1 — the goal;
//! - `codec`: Arrow IPC encode + decode alone, with the schema sent once
//!   per channel and with it before every batch.
//!
//! Prints messages/s, payload GB/s (100 bytes a message), CPU time per
//! message (both processes for `process`, from /proc/<pid>/stat) and the
//! data plane's counters. Arguments (after `cargo bench --bench dataplane
//! --`): `MODE… [--messages N] [--batch ROWS] [--channels C] [--reps R]`.

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_dataflow::channel::{ChannelKey, ChannelReceiver, ChannelSender, Transport, channel};
use sluice_dataflow::message::Message;
use sluice_net::{ChannelDecoder, ChannelEncoder, DataPlane, DataPlaneConfig, Decoded};
use sluice_types::{EdgeId, PipelineId, WorkerId};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESSAGE_BYTES: usize = 100;
const CHILD: &str = "SLUICE_NET_BENCH_CHILD";

struct Args {
    modes: Vec<String>,
    messages: u64,
    batch: usize,
    channels: u32,
    reps: u32,
}

fn args() -> Args {
    let mut a = Args {
        modes: Vec::new(),
        messages: 20_000_000,
        batch: 8192,
        channels: 1,
        reps: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().expect("a value").parse::<u64>().expect("a number");
        match arg.as_str() {
            "--messages" => a.messages = value(),
            "--batch" => a.batch = value() as usize,
            "--channels" => a.channels = value() as u32,
            "--reps" => a.reps = value() as u32,
            "--bench" => {}
            mode => a.modes.push(mode.to_string()),
        }
    }
    if a.modes.is_empty() {
        a.modes = vec!["codec".into(), "inproc".into(), "loopback".into(), "process".into()];
    }
    a
}

fn message_batch(rows: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, false),
    ]));
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let keys = Int64Array::from_iter_values((0..rows).map(|_| next() as i64));
    let msgs = StringArray::from_iter_values((0..rows).map(|_| {
        (0..MESSAGE_BYTES)
            .map(|_| char::from(b'a' + (next() % 26) as u8))
            .collect::<String>()
    }));
    RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(msgs)]).unwrap()
}

fn key(edge: u32) -> ChannelKey {
    ChannelKey {
        pipeline: PipelineId(1),
        deployment: 1,
        edge: EdgeId(edge),
        from: 0,
        to: 0,
    }
}

/// User + system CPU of a process so far, in seconds.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after ")".
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

async fn send_all(tx: ChannelSender, batch: RecordBatch, messages: u64) {
    let mut left = messages;
    while left > 0 {
        let rows = (left as usize).min(batch.num_rows());
        tx.send(Message::Data(batch.slice(0, rows))).await.unwrap();
        left -= rows as u64;
    }
    tx.send(Message::EndOfInput).await.unwrap();
}

async fn count(mut rx: ChannelReceiver) -> u64 {
    let mut rows = 0;
    while let Some(m) = rx.recv().await {
        match m {
            Message::Data(b) => rows += b.num_rows() as u64,
            Message::EndOfInput => break,
            _ => {}
        }
    }
    rows
}

struct Run {
    wall_s: f64,
    cpu_s: f64,
}

fn report(mode: &str, total: u64, runs: &[Run], extra: &str) {
    for (i, r) in runs.iter().enumerate() {
        println!(
            "{mode:9} rep {i}: {:6.2} M msg/s  {:5.2} GB/s payload  {:6.1} ns CPU/msg  ({:.2} s wall, {:.2} s CPU)",
            total as f64 / r.wall_s / 1e6,
            (total * MESSAGE_BYTES as u64) as f64 / r.wall_s / 1e9,
            r.cpu_s / total as f64 * 1e9,
            r.wall_s,
            r.cpu_s,
        );
    }
    if !extra.is_empty() {
        println!("{mode:9} {extra}");
    }
}

fn codec(a: &Args) {
    let batch = message_batch(a.batch);
    for schema_each_batch in [false, true] {
        let mut runs = Vec::new();
        for _ in 0..a.reps {
            let (start, cpu0) = (Instant::now(), cpu_s(std::process::id()));
            let mut encoder = ChannelEncoder::default();
            let mut decoder = ChannelDecoder::default();
            let mut frames = Vec::new();
            let mut rows = 0u64;
            while rows < a.messages {
                if schema_each_batch {
                    encoder = ChannelEncoder::default();
                }
                encoder.encode(Message::Data(batch.clone()), &mut frames).unwrap();
                for f in frames.drain(..) {
                    if let Decoded::Message(m) = decoder.decode(f).unwrap() {
                        rows += m.rows() as u64;
                    }
                }
            }
            runs.push(Run {
                wall_s: start.elapsed().as_secs_f64(),
                cpu_s: cpu_s(std::process::id()) - cpu0,
            });
        }
        let mode = if schema_each_batch { "codec+sch" } else { "codec" };
        report(mode, a.messages, &runs, "");
    }
}

async fn inproc(a: &Args) -> Run {
    let batch = message_batch(a.batch);
    let (start, cpu0) = (Instant::now(), cpu_s(std::process::id()));
    let mut tasks = Vec::new();
    for _ in 0..a.channels {
        let (tx, rx) = channel(sluice_dataflow::channel::CHANNEL_CREDITS_DEFAULT);
        tokio::spawn(send_all(tx, batch.clone(), a.messages));
        tasks.push(tokio::spawn(count(rx)));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), a.messages);
    }
    Run {
        wall_s: start.elapsed().as_secs_f64(),
        cpu_s: cpu_s(std::process::id()) - cpu0,
    }
}

async fn plane(name: &str) -> Arc<DataPlane> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    DataPlane::start(WorkerId(name.into()), listener, DataPlaneConfig::default()).unwrap()
}

async fn loopback(a: &Args) -> (Run, String) {
    let batch = message_batch(a.batch);
    let (pa, pb) = (plane("a").await, plane("b").await);
    pa.set_peers(HashMap::from([(WorkerId("b".into()), pb.local_addr().to_string())]));
    let (start, cpu0) = (Instant::now(), cpu_s(std::process::id()));
    let mut tasks = Vec::new();
    for c in 0..a.channels {
        let rx = pb.receiver_from(key(c), &WorkerId("a".into())).unwrap();
        let tx = pa.sender_to(key(c), &WorkerId("b".into())).unwrap();
        tokio::spawn(send_all(tx, batch.clone(), a.messages));
        tasks.push(tokio::spawn(count(rx)));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), a.messages);
    }
    let run = Run {
        wall_s: start.elapsed().as_secs_f64(),
        cpu_s: cpu_s(std::process::id()) - cpu0,
    };
    (run, format!("{:?}", pa.metrics()))
}

/// The child: receives `channels` channels from the parent and prints its
/// CPU time when every one ended.
async fn child(parent: String, channels: u32, messages: u64) {
    let pb = plane("b").await;
    pb.set_peers(HashMap::from([(WorkerId("a".into()), parent)]));
    let rxs: Vec<_> = (0..channels)
        .map(|c| pb.receiver_from(key(c), &WorkerId("a".into())).unwrap())
        .collect();
    println!("ADDR {}", pb.local_addr());
    let cpu0 = cpu_s(std::process::id());
    let tasks: Vec<_> = rxs.into_iter().map(|rx| tokio::spawn(count(rx))).collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), messages);
    }
    let m = pb.metrics();
    println!(
        "DONE {} {} {}",
        cpu_s(std::process::id()) - cpu0,
        m.grpc_messages_received,
        m.fields_gathered
    );
}

async fn process(a: &Args) -> (Run, String) {
    let batch = message_batch(a.batch);
    let pa = plane("a").await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, format!("{} {} {}", pa.local_addr(), a.channels, a.messages))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = lines.next().unwrap().unwrap();
    let addr = addr.strip_prefix("ADDR ").unwrap().to_string();
    pa.set_peers(HashMap::from([(WorkerId("b".into()), addr)]));
    let (start, cpu0) = (Instant::now(), cpu_s(std::process::id()));
    for c in 0..a.channels {
        let tx = pa.sender_to(key(c), &WorkerId("b".into())).unwrap();
        tokio::spawn(send_all(tx, batch.clone(), a.messages));
    }
    let done = tokio::task::spawn_blocking(move || lines.next().unwrap().unwrap())
        .await
        .unwrap();
    let wall_s = start.elapsed().as_secs_f64();
    let mut done = done.strip_prefix("DONE ").unwrap().split(' ');
    let mut field = || done.next().unwrap();
    let child_cpu: f64 = field().parse().unwrap();
    let (received, gathered) = (field().to_string(), field().to_string());
    child.wait().unwrap();
    let run = Run {
        wall_s,
        cpu_s: cpu_s(std::process::id()) - cpu0 + child_cpu,
    };
    let metrics = format!(
        "{:?}; receiver: {gathered} bytes fields in {received} gRPC messages spanned DATA frames (copied)",
        pa.metrics()
    );
    (run, metrics)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(spec) = std::env::var(CHILD) {
        let mut parts = spec.split(' ');
        let parent = parts.next().unwrap().to_string();
        let channels = parts.next().unwrap().parse().unwrap();
        let messages = parts.next().unwrap().parse().unwrap();
        runtime.block_on(child(parent, channels, messages));
        return;
    }
    let a = args();
    println!(
        "{} messages of {MESSAGE_BYTES} bytes per channel, {} channel(s), batches of {} rows, {} reps",
        a.messages, a.channels, a.batch, a.reps
    );
    for mode in a.modes.clone() {
        match mode.as_str() {
            "codec" => codec(&a),
            "inproc" => {
                let runs: Vec<Run> = (0..a.reps).map(|_| runtime.block_on(inproc(&a))).collect();
                report("inproc", a.messages * u64::from(a.channels), &runs, "");
            }
            "loopback" | "process" => {
                let mut runs = Vec::new();
                let mut last = String::new();
                for _ in 0..a.reps {
                    let (run, metrics) = runtime.block_on(async {
                        if mode == "loopback" {
                            loopback(&a).await
                        } else {
                            process(&a).await
                        }
                    });
                    runs.push(run);
                    last = metrics;
                }
                report(
                    &mode,
                    a.messages * u64::from(a.channels),
                    &runs,
                    &format!("sender metrics (last rep): {last}"),
                );
            }
            other => panic!("unknown mode {other}"),
        }
    }
}
