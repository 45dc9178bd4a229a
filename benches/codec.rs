//! Codec and ring micro-benchmarks: frame encode, decode (header checks and
//! CRC32C), the poller turning a ring of frames into batches, and CRC32C
//! alone, for 64 B, 1 KiB and 64 KiB values, next to a plain memcpy of the
//! same value bytes. Throughput is counted in value bytes; frames/s is that
//! divided by the value size.
//!
//! Run: `cargo bench --no-default-features --bench codec` (`scripts/bench.sh`
//! does, and tabulates the results). The default feature `module` installs
//! the Redis allocator, which only exists inside redis-server, so with it
//! this binary only says how to run it.

#[cfg(feature = "module")]
fn main() {
    eprintln!("benches/codec: run with --no-default-features (the `module` feature installs the Redis allocator)");
}

#[cfg(not(feature = "module"))]
criterion::criterion_main!(pure::benches);

#[cfg(not(feature = "module"))]
mod pure {
    use std::hint::black_box;
    use std::time::Duration;

    use criterion::{BenchmarkId, Criterion, Throughput};
    use rdmasync::proto::entry::Batch;
    use rdmasync::proto::ring::RingGeometry;
    use rdmasync::proto::wire::{
        decode_frame, encode_frame, frame_len, FrameHeader, FrameKind, FLAG_BATCH_END,
    };
    use rdmasync::receive::poller::Poller;

    /// Value sizes measured, with their labels.
    const SIZES: [(usize, &str); 3] = [(64, "64B"), (1024, "1KiB"), (64 * 1024, "64KiB")];
    /// A typical key: 16 bytes.
    const KEY: &[u8] = b"key:000000123456";
    /// Ring the poller benchmark fills (frames never wrap in it).
    const RING: usize = 4 << 20;
    /// Frames per batch in the poller benchmark (a pipelined client's iteration).
    const BATCH: usize = 16;

    fn header(value_len: usize, seq: u64) -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Value,
            flags: 0,
            db: 0,
            origin: 0x1234_5678_9abc_def0,
            seq,
            clock: seq << 16,
            expiry_ms: 0,
            key_len: KEY.len() as u32,
            value_len: value_len as u32,
            value_total_len: value_len as u32,
            arg: 0,
        }
    }

    fn value(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 131 + 7) as u8).collect()
    }

    fn encode(c: &mut Criterion) {
        let mut g = c.benchmark_group("encode");
        for (size, label) in SIZES {
            let v = value(size);
            let h = header(size, 1);
            let mut out = vec![0u8; frame_len(KEY.len(), size)];
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::from_parameter(label), |b| {
                b.iter(|| encode_frame(black_box(&h), KEY, black_box(&v), &mut out))
            });
        }
        g.finish();
    }

    fn decode(c: &mut Criterion) {
        let mut g = c.benchmark_group("decode");
        for (size, label) in SIZES {
            let mut buf = vec![0u8; frame_len(KEY.len(), size)];
            encode_frame(&header(size, 1), KEY, &value(size), &mut buf).expect("room");
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::from_parameter(label), |b| {
                b.iter(|| decode_frame(black_box(&buf)).map(|f| f.value.len()))
            });
        }
        g.finish();
    }

    fn memcpy(c: &mut Criterion) {
        let mut g = c.benchmark_group("memcpy");
        for (size, label) in SIZES {
            let src = value(size);
            let mut dst = vec![0u8; size];
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::from_parameter(label), |b| {
                b.iter(|| {
                    dst.copy_from_slice(black_box(&src));
                    black_box(&mut dst);
                })
            });
        }
        g.finish();
    }

    fn crc(c: &mut Criterion) {
        let mut g = c.benchmark_group("crc32c");
        for (size, label) in SIZES {
            let src = value(size);
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::from_parameter(label), |b| {
                b.iter(|| rdmasync::proto::wire::checksum(black_box(&src)))
            });
        }
        g.finish();
    }

    /// A ring filled from position 0 with as many frames as fit; the placed position.
    fn filled_ring(size: usize) -> (Vec<u8>, u64, usize) {
        let mut ring = vec![0u8; RING];
        let v = value(size);
        let len = frame_len(KEY.len(), size);
        let frames = RING / len;
        for i in 0..frames {
            let mut h = header(size, i as u64 + 1);
            if (i + 1) % BATCH == 0 || i + 1 == frames {
                h.flags |= FLAG_BATCH_END;
            }
            encode_frame(&h, KEY, &v, &mut ring[i * len..]).expect("room");
        }
        (ring, (frames * len) as u64, frames)
    }

    /// Ring -> verified frames -> entries (key and value copied out) -> batches.
    fn poller(c: &mut Criterion) {
        let mut g = c.benchmark_group("poller");
        let geometry = RingGeometry::new(RING as u64).expect("power of two");
        for (size, label) in SIZES {
            let (ring, placed, frames) = filled_ring(size);
            let mut out: Vec<Batch> = Vec::new();
            g.throughput(Throughput::Bytes((frames * size) as u64));
            g.bench_function(BenchmarkId::from_parameter(label), |b| {
                b.iter(|| {
                    out.clear();
                    let mut p = Poller::new(geometry);
                    p.consume(black_box(&ring), placed, &mut out)
                        .expect("valid");
                    debug_assert_eq!(p.frames(), frames as u64);
                    out.len()
                })
            });
        }
        g.finish();
    }

    fn config() -> Criterion {
        Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(30)
            .configure_from_args()
    }

    criterion::criterion_group! {
        name = benches;
        config = config();
        targets = encode, decode, memcpy, crc, poller
    }
}
