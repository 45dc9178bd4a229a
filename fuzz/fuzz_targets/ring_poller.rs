//! A peer that writes arbitrary bytes into our ring, placed in arbitrary
//! steps: the poller returns errors or batches, never panics, never reads
//! past what is placed, and its head never passes the placed position.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmasync::receive::poller::Poller;
use rdmasync::proto::ring::RingGeometry;

fuzz_target!(|data: &[u8]| {
    let Some(geometry) = RingGeometry::new(4096) else {
        return;
    };
    let mut ring = vec![0u8; 4096];
    let mut poller = Poller::new(geometry);
    let mut placed = 0u64;
    let mut out = Vec::new();
    for chunk in data.chunks(97) {
        let step = u64::from(chunk[0]) * 8 + 8;
        for (i, b) in chunk.iter().enumerate() {
            let at = geometry.offset(placed + i as u64);
            ring[at] = *b;
        }
        let next = (placed + step).min(poller.head() + 4096);
        if next <= placed {
            break;
        }
        placed = next;
        match poller.consume(&ring, placed, &mut out) {
            Ok(()) => assert!(poller.head() <= placed),
            Err(_) => break,
        }
    }
});
