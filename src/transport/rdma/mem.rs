//! Page-aligned `mmap`ed memory and its registration with the NIC.
//!
//! Registered memory never comes from the Redis allocator: a registration
//! marks whole pages, and a page shared with heap data would break a BGSAVE
//! child (see Valkey's `page_aligned_zalloc`).

use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_reg_mr};

use super::verbs::ProtectionDomain;
use super::RdmaError;
use crate::proto::ring::RingMemory;

/// Anonymous, page-aligned, zeroed memory, unmapped on drop.
pub struct MmapRegion {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone and `munmap` may run on
// any thread.
unsafe impl Send for MmapRegion {}
// SAFETY: no `&self` method touches the mapped bytes: `as_ptr` and `len`
// hand out the address and length, and every read or write through that
// pointer is an `unsafe` block of its own with its own argument (the ring's
// `copy_out`, the staging and slot copies in `conn`). Sharing the value
// shares only the address.
unsafe impl Sync for MmapRegion {}

impl MmapRegion {
    /// Maps `len` bytes (rounded up to whole pages by the kernel).
    ///
    /// # Errors
    /// [`RdmaError::Mmap`] when `mmap` fails.
    pub fn new(len: usize) -> Result<Self, RdmaError> {
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked below.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(RdmaError::Mmap(std::io::Error::last_os_error()));
        }
        let addr =
            NonNull::new(p.cast::<u8>()).ok_or(RdmaError::Mmap(std::io::Error::other("null")))?;
        Ok(Self { addr, len })
    }

    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for MmapRegion {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`, once.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

/// A registered memory region over an [`MmapRegion`]; deregistered on drop,
/// before the memory is unmapped (a `Drop` runs before its fields drop).
pub struct MemoryRegion {
    mr: NonNull<ibv_mr>,
    _pd: Arc<ProtectionDomain>,
    /// Unmapped by `Drop` only once deregistered (else left mapped).
    memory: ManuallyDrop<MmapRegion>,
}

// SAFETY: an ibv_mr may be deregistered from any thread (libibverbs keeps
// no per-thread state for it) and the mapping it covers is owned (Send, above).
unsafe impl Send for MemoryRegion {}
// SAFETY: through `&self` only lkey/rkey/addr/len are read (fixed at
// registration) and bytes are copied out by `RingMemory::copy_out`, whose
// argument holds from any thread; deregistration needs `&mut` (Drop).
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `memory` in `pd` with `access` flags (`IBV_ACCESS_*`).
    ///
    /// # Errors
    /// [`RdmaError::RegisterMemory`] when `ibv_reg_mr` fails.
    pub fn register(
        pd: &Arc<ProtectionDomain>,
        memory: MmapRegion,
        access: u32,
    ) -> Result<Self, RdmaError> {
        // SAFETY: `pd` is a live protection domain and `memory` a live mapping
        // of `len` bytes that this value keeps alive past deregistration.
        let mr = unsafe {
            ibv_reg_mr(
                pd.as_ptr(),
                memory.as_ptr().cast(),
                memory.len(),
                access as i32,
            )
        };
        let mr = NonNull::new(mr)
            .ok_or_else(|| RdmaError::RegisterMemory(std::io::Error::last_os_error()))?;
        Ok(Self {
            mr,
            _pd: pd.clone(),
            memory: ManuallyDrop::new(memory),
        })
    }

    /// Local key for scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live until drop.
        unsafe { self.mr.as_ref().lkey }
    }

    /// Remote key the peer uses to write here.
    pub fn rkey(&self) -> u32 {
        // SAFETY: `mr` is live until drop.
        unsafe { self.mr.as_ref().rkey }
    }

    /// Start address (as the NIC sees it: the virtual address).
    pub fn addr(&self) -> u64 {
        self.memory.as_ptr() as u64
    }

    /// Start pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.memory.as_ptr()
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.memory.len()
    }
}

/// The ring the peer writes into with RDMA WRITEs: its bytes may change at
/// any time, so they are only ever copied out through a raw pointer, never
/// borrowed as a slice (no `&[u8]` over memory the NIC writes).
impl RingMemory for MemoryRegion {
    fn len(&self) -> usize {
        self.memory.len()
    }

    fn copy_out(&self, off: usize, dst: &mut [u8]) -> bool {
        if off
            .checked_add(dst.len())
            .is_none_or(|end| end > self.memory.len())
        {
            return false;
        }
        // SAFETY: `off..off + dst.len()` lies inside the live mapping this
        // region owns (checked above); `dst` is a unique borrow of other
        // memory (the mapping is never lent out as a reference, so no
        // borrow can point into it). No reference to the mapping exists, so
        // the NIC writing it meanwhile breaks no aliasing rule, and a byte
        // has no invalid value: a read torn by such a write gives wrong
        // bytes at worst, which the caller's checks on its copy (header,
        // lengths, CRC) refuse.
        unsafe {
            ptr::copy_nonoverlapping(self.memory.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        true
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: deregisters the region registered in `register`, once,
        // before its memory is unmapped. A QP still live may not use it after
        // (its requests would fail with a protection error; `conn::Endpoint`
        // destroys its QP first anyway).
        let rc = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if rc == 0 {
            // SAFETY: dropped here once; the NIC no longer maps it.
            unsafe { ManuallyDrop::drop(&mut self.memory) };
        } else {
            // Still registered: the NIC may write it, so it stays mapped
            // (leaked) rather than be reused by the allocator.
            redis_module::logging::log_warning(format!(
                "rdmasync: ibv_dereg_mr failed ({rc}): {} bytes left mapped",
                self.memory.len()
            ));
        }
    }
}
