//! Page-aligned `mmap`ed memory and its registration with the NIC.
//!
//! Registered memory never comes from the Redis allocator: a registration
//! marks whole pages, and a page shared with heap data would break a BGSAVE
//! child (see Valkey's `page_aligned_zalloc`).

use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_reg_mr};

use super::verbs::ProtectionDomain;
use super::RdmaError;

/// Anonymous, page-aligned, zeroed memory, unmapped on drop.
pub struct MmapRegion {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain memory owned by this value; access is through
// `&self`/`&mut self` or the NIC, never aliased by another owner.
unsafe impl Send for MmapRegion {}
// SAFETY: shared access only reads through raw pointers the owner hands out.
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
    memory: MmapRegion,
}

// SAFETY: an ibv_mr handle may be used from any thread; the memory is owned.
unsafe impl Send for MemoryRegion {}
// SAFETY: lkey/rkey/addr are immutable after registration.
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
            memory,
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

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: deregisters the region registered in `register`, once,
        // before its memory is unmapped. A QP still live may not use it after
        // (its requests would fail with a protection error; `conn::Endpoint`
        // destroys its QP first anyway).
        let rc = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if rc != 0 {
            redis_module::logging::log_warning(format!("rdmasync: ibv_dereg_mr failed: {rc}"));
        }
    }
}
