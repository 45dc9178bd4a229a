//! Queue -> frames in a staging buffer -> one write per contiguous run into
//! the peer's ring at its tail, never past the credit the peer returned.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::entry::Batch;
use crate::error::{Error, Result};
use crate::ring::{Placement, RingGeometry};
use crate::runtime::Shared;
use crate::status::Stats;
use crate::transport::RingWriter;
use crate::wire::{self, chunk_entry, encode_frame, encode_padding, frame_len, PAD_LEN};

/// Bytes gathered before a write is posted, at most.
const STAGING_BYTES: usize = 1 << 20;
/// Send a keepalive after this long without traffic.
pub const KEEPALIVE_MS: u64 = 1000;

/// The sender's position in one link's ring.
struct RingCursor {
    link: Arc<dyn RingWriter>,
    geometry: RingGeometry,
    /// Next ring position to write; `tail - credit <= capacity`.
    tail: u64,
    /// Frames encoded but not yet posted; they start at `staged_at`.
    staging: Vec<u8>,
    staged_at: u64,
}

impl RingCursor {
    fn new(link: Arc<dyn RingWriter>) -> Self {
        let geometry = link.geometry();
        Self {
            link,
            geometry,
            tail: 0,
            staging: Vec::with_capacity(STAGING_BYTES),
            staged_at: 0,
        }
    }

    /// Posts the staged bytes as one write.
    fn post(&mut self, shared: &Shared) -> Result<()> {
        if !self.staging.is_empty() {
            self.link.post_write(self.staged_at, &self.staging)?;
            Stats::add(&shared.stats.bytes_sent, self.staging.len() as u64);
            self.staging.clear();
            shared.stats.ring_tail.store(self.tail, Ordering::Relaxed);
        }
        self.staged_at = self.tail;
        Ok(())
    }

    /// Waits until `needed` bytes are free at the tail.
    fn wait_for_room(&mut self, needed: u64, shared: &Shared) -> Result<()> {
        let mut stalled = false;
        loop {
            let credit = self.link.credit();
            if self.geometry.free(self.tail, credit.min(self.tail)) >= needed {
                return Ok(());
            }
            // Everything staged must reach the peer before it can free room.
            self.post(shared)?;
            if !stalled {
                stalled = true;
                Stats::add(&shared.stats.credit_stalls, 1);
            }
            if !self.link.is_alive() || shared.stopping() {
                return Err(Error::LinkClosed);
            }
            if self.link.idle_ms() >= KEEPALIVE_MS {
                self.link.send_keepalive()?;
            }
            let link = &self.link;
            shared.queue.wake.wait(Duration::from_millis(100), || {
                link.credit() != credit || !link.is_alive()
            });
        }
    }

    /// Stages one frame at the tail, wrapping with a padding marker if needed.
    fn stage_frame(
        &mut self,
        header: &wire::FrameHeader,
        key: &[u8],
        value: &[u8],
        shared: &Shared,
    ) -> Result<()> {
        let len = frame_len(key.len(), value.len());
        self.wait_for_room(self.geometry.needed(self.tail, len as u64), shared)?;
        if let Placement::WrapAfterPadding { pad } = self.geometry.place(self.tail, len as u64) {
            let at = self.staging.len();
            self.staging.resize(at + PAD_LEN, 0);
            encode_padding(&mut self.staging[at..])?;
            self.tail += pad;
            self.post(shared)?;
        }
        if self.staging.len() + len > STAGING_BYTES {
            self.post(shared)?;
        }
        let at = self.staging.len();
        self.staging.resize(at + len, 0);
        encode_frame(header, key, value, &mut self.staging[at..])?;
        self.tail += len as u64;
        Ok(())
    }

    /// Stages a whole batch; the last frame carries the batch-end flag.
    fn stage_batch(&mut self, batch: &Batch, shared: &Shared) -> Result<u64> {
        let max_frame = self.geometry.max_frame();
        let mut planned = Vec::with_capacity(batch.entries.len());
        for e in &batch.entries {
            match chunk_entry(e, max_frame) {
                Some(chunks) => planned.push((e, chunks)),
                None => {
                    Stats::add(&shared.stats.entries_refused, 1);
                    let msg = format!(
                        "entry for key of {} bytes refused: no frame of at most {max_frame} bytes can carry it",
                        e.key().map_or(0, <[u8]>::len)
                    );
                    redis_module::logging::log_warning(format!("rdmasync: {msg}"));
                    shared.stats.set_error(msg);
                }
            }
        }
        let last = planned.len().wrapping_sub(1);
        for (i, (entry, chunks)) in planned.iter().enumerate() {
            let (_, key, value) = wire::entry_header(entry);
            let last_chunk = chunks.len() - 1;
            for (j, c) in chunks.iter().enumerate() {
                let mut h = c.header;
                if i == last && j == last_chunk {
                    h.flags |= wire::FLAG_BATCH_END;
                }
                self.stage_frame(&h, key, &value[c.value_range.0..c.value_range.1], shared)?;
            }
        }
        Ok(planned.len() as u64)
    }
}

/// The sender thread: runs until unload.
pub fn run(shared: Arc<Shared>) {
    shared.queue.wake.register_current();
    let mut cursor: Option<RingCursor> = None;
    while !shared.stopping() {
        let Some(batch) = shared.queue.pop() else {
            if let Some(link) = shared.current_link() {
                if link.is_alive() && link.idle_ms() >= KEEPALIVE_MS {
                    let _ = link.send_keepalive();
                }
            }
            let q = &shared.queue;
            q.wake
                .wait(Duration::from_millis(KEEPALIVE_MS / 2), || !q.is_empty());
            continue;
        };
        let Some(link) = shared.current_link() else {
            cursor = None;
            Stats::add(&shared.stats.entries_dropped, batch.entries.len() as u64);
            continue;
        };
        if cursor.as_ref().is_none_or(|c| !Arc::ptr_eq(&c.link, &link)) {
            cursor = Some(RingCursor::new(link));
        }
        let Some(c) = cursor.as_mut() else { continue };
        let sent = c.stage_batch(&batch, &shared).and_then(|n| {
            if shared.queue.is_empty() {
                c.post(&shared)?;
            }
            Ok(n)
        });
        match sent {
            Ok(n) => {
                Stats::add(&shared.stats.entries_sent, n);
                Stats::add(&shared.stats.batches_sent, 1);
            }
            Err(e) => {
                Stats::add(&shared.stats.entries_dropped, batch.entries.len() as u64);
                if !shared.stopping() {
                    shared.stats.set_error(format!("send: {e}"));
                }
                c.link.close();
                cursor = None;
            }
        }
    }
}
