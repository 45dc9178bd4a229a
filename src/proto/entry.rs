//! What travels: one captured change (`Entry`) and the atomic unit of apply (`Batch`).

/// The change an entry carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The key now holds this value, expiring at `expiry_ms` (Unix ms) if set.
    Value {
        /// Key name.
        key: Vec<u8>,
        /// The value, as `encoding` says.
        payload: Vec<u8>,
        /// Absolute expiry in Unix milliseconds.
        expiry_ms: Option<u64>,
        /// How `payload` holds the value.
        encoding: Encoding,
    },
    /// A counter's merge state (`converge::merge::codec`): the key holds
    /// its value, merged with what the receiver holds; expiring at
    /// `expiry_ms` when the incoming base wins.
    Counter {
        /// Key name.
        key: Vec<u8>,
        /// The encoded state.
        state: Vec<u8>,
        /// Absolute expiry in Unix milliseconds.
        expiry_ms: Option<u64>,
    },
    /// A hash's merge state (`converge::merge::hash_codec`): a change of
    /// some fields or a whole write, merged per field with what the
    /// receiver holds; expiring at `expiry_ms` when the incoming whole
    /// write is the newest, or the key was absent.
    Fields {
        /// Key name.
        key: Vec<u8>,
        /// The encoded state.
        state: Vec<u8>,
        /// Absolute expiry in Unix milliseconds.
        expiry_ms: Option<u64>,
    },
    /// Bytes appended to a big string since a version of it the receiver
    /// took (`converge::appends`): applied with `APPEND` onto that version,
    /// never onto another.
    Append {
        /// Key name.
        key: Vec<u8>,
        /// The encoded `converge::appends::AppendEdit`.
        edit: Vec<u8>,
        /// The key's absolute expiry in Unix milliseconds after the append
        /// (a TTL written at once elsewhere may be older than it).
        expiry_ms: Option<u64>,
    },
    /// What the sender had seen of each origin when it read the values
    /// after this in the batch (its merge bound, encoded): a plain write of
    /// a key it held at rest had seen exactly this.
    Bound {
        /// The encoded `Seen`.
        seen: Vec<u8>,
    },
    /// The key no longer exists.
    Delete {
        /// Key name.
        key: Vec<u8>,
    },
    /// `FLUSHDB` of the entry's database.
    FlushDb,
    /// `FLUSHALL`.
    FlushAll,
    /// `SWAPDB` of the entry's database with `other`.
    SwapDb {
        /// The second database.
        other: u32,
    },
    /// Only the key's TTL was written (EXPIRE, PEXPIRE..., PERSIST, GETEX)
    /// of a key whose value ships whole: a write of its TTL register, which
    /// leaves the value as each node has it (`converge::ttl_ops`).
    Expire {
        /// The key.
        key: Vec<u8>,
        /// Its absolute expiry now, Unix ms (`None`: none).
        expiry_ms: Option<u64>,
    },
    /// One function library holds this code (loaded or replaced), applied
    /// with `FUNCTION LOAD REPLACE`; each library has its own version.
    Library {
        /// The library's name (as its code declares it).
        name: Vec<u8>,
        /// Its code.
        code: Vec<u8>,
    },
    /// One function library no longer exists.
    LibraryDelete {
        /// The library's name.
        name: Vec<u8>,
    },
    /// The sender has applied every data entry of ours up to sequence
    /// `applied` (trims what we keep for resending, collects tombstones).
    Ack {
        /// Our sequence number of the last entry it applied.
        applied: u64,
        /// The sender was in step when it sent this: every change of its
        /// own made before is in its stream before this ack.
        in_step: bool,
        /// The sender's watermark of our changes: it holds every change of
        /// ours stamped at or below it, and its writes say so (the removal
        /// a whole write carries). Our merge bound of our own changes rises
        /// no higher, else a whole write of the sender's made after this
        /// ack would seem not to have seen elements at rest here.
        holds: u64,
    },
    /// The sender lost state (it restarted or its dataset was replaced), or
    /// answers such a request of ours: send it what it misses, which is
    /// everything (a full sync) unless `since` says what it holds.
    SyncRequest {
        /// Our sequence number of the last entry it had received when it
        /// lost state (applied, an ack, or dropped while it was a replica):
        /// a full sync of ours whose entries all come after it covers the
        /// request.
        received: u64,
        /// It holds every change of ours stamped at or below this clock
        /// (its durable watermark; 0: unknown, send everything).
        since: u64,
        /// It holds its own changes up to this clock (its newest own stamp
        /// after a restart; it misses later ones we may hold).
        own: u64,
        /// An answer to a request of ours (none is sent back for it).
        answer: bool,
    },
    /// A full sync that sweeps starts: after it, the receiver deletes the
    /// keys it holds at versions these floors vouch for that the sync did
    /// not carry (see `converge::sweep`).
    SweepStart {
        /// What the sender vouches for.
        floors: SweepFloors,
    },
    /// That sync handed out its last entry; `complete` when it carried
    /// every key it found (one it could not read leaves the sweep undone).
    SweepEnd {
        /// The sweep may run.
        complete: bool,
    },
}

/// How a value travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// A `DUMP` payload (RDB-encoded, version and checksum included),
    /// applied with `RESTORE`: any type.
    #[default]
    Dump,
    /// The bytes of a string value, applied with `SET`: cheaper both ways.
    RawString,
}

/// One captured change, stamped at capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Node id of the node where the write happened.
    pub origin: u64,
    /// Per-origin sequence number, increasing by one per entry.
    pub seq: u64,
    /// Hybrid logical clock at capture (see `clock`).
    pub clock: u64,
    /// Database index.
    pub db: u32,
    /// The change.
    pub op: Op,
}

impl Entry {
    /// Whether this entry changes data (not a link-level notice).
    pub fn is_data(&self) -> bool {
        !matches!(
            self.op,
            Op::Ack { .. } | Op::SyncRequest { .. } | Op::Bound { .. }
        )
    }

    /// The key, for per-key operations.
    pub fn key(&self) -> Option<&[u8]> {
        match &self.op {
            Op::Value { key, .. }
            | Op::Expire { key, .. }
            | Op::Delete { key }
            | Op::Counter { key, .. }
            | Op::Fields { key, .. }
            | Op::Append { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Bytes of key and value carried (an estimate of the entry's weight).
    pub fn payload_len(&self) -> usize {
        match &self.op {
            Op::Value { key, payload, .. } => key.len() + payload.len(),
            Op::Delete { key } => key.len(),
            Op::Counter { key, state, .. }
            | Op::Fields { key, state, .. }
            | Op::Append {
                key, edit: state, ..
            } => key.len() + state.len(),
            Op::Bound { seen } => seen.len(),
            Op::Library { name, code } => name.len() + code.len(),
            Op::LibraryDelete { name } => name.len(),
            Op::SweepStart { .. } => FLOORS_LEN,
            _ => 0,
        }
    }
}

/// Entries that must be applied together: one event-loop iteration, one
/// `MULTI/EXEC`, one script. Never empty when queued.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The entries in capture order.
    pub entries: Vec<Entry>,
}

impl Batch {
    /// Sum of `Entry::payload_len`.
    pub fn payload_len(&self) -> usize {
        self.entries.iter().map(Entry::payload_len).sum()
    }
}

/// What the sender of a sweeping full sync vouches for, fixed when the
/// sync starts; held as it travels (four little-endian `u64`s: the floor,
/// the receiver's watermark, the gap's two ends).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SweepFloors([u8; FLOORS_LEN]);

/// Bytes of [`SweepFloors`] on the wire.
pub const FLOORS_LEN: usize = 32;

impl SweepFloors {
    /// Floors from their parts:
    /// - `floor`: the newest tombstone the sender dropped (a delete whose
    ///   tombstone is gone is stamped at or below this clock);
    /// - `receiver_covered`: the sender holds every change of the receiver
    ///   stamped at or below this clock (its watermark of the receiver);
    /// - `(gap_from, gap_to]`: the sender's own changes stamped in it may
    ///   have been lost by its last load (written after what its files
    ///   held, before it went down): it vouches for none of them.
    pub fn new(floor: u64, receiver_covered: u64, gap_from: u64, gap_to: u64) -> Self {
        let mut out = [0u8; FLOORS_LEN];
        let fields = [floor, receiver_covered, gap_from, gap_to];
        for (slot, v) in out.chunks_exact_mut(8).zip(fields) {
            slot.copy_from_slice(&v.to_le_bytes());
        }
        Self(out)
    }

    /// Floors as they travel; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        b.try_into().ok().map(Self)
    }

    /// The bytes that travel.
    pub fn as_bytes(&self) -> &[u8; FLOORS_LEN] {
        &self.0
    }

    fn field(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[8 * i..8 * i + 8]);
        u64::from_le_bytes(b)
    }

    /// The newest dropped tombstone's clock.
    pub fn floor(&self) -> u64 {
        self.field(0)
    }

    /// The sender's watermark of the receiver.
    pub fn receiver_covered(&self) -> u64 {
        self.field(1)
    }

    /// The gap the sender's last load may have left in its own changes.
    pub fn gap(&self) -> (u64, u64) {
        (self.field(2), self.field(3))
    }
}
