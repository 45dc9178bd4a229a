//! The module's global allocator: Redis's (`RedisModule_Alloc`, so that
//! `INFO memory` and `maxmemory` count what the module holds), with every
//! alignment Rust asks for honoured.
//!
//! `redis_module::alloc::RedisAlloc` rounds a request up to a multiple of
//! its alignment and counts on jemalloc placing such a block on that
//! alignment. A server built with `MALLOC=libc` gives 16-byte alignment at
//! most, so a type aligned to a
//! cache line (crossbeam's `CachePadded`, 128 bytes) landed misaligned:
//! Redis 8.0.6 built with `make MALLOC=libc` aborted at load ("misaligned
//! pointer dereference" in crossbeam-channel). [`Aligned`] serves any
//! alignment above [`BASE_ALIGN`] from a larger block, aligned by hand, and
//! keeps the block's address just before the pointer it hands out.

use std::alloc::{GlobalAlloc, Layout};

/// The alignment every Redis allocator gives on a 64-bit host: glibc's
/// malloc, jemalloc and tcmalloc align blocks to 16 bytes, and zmalloc
/// hands out their pointers as they are wherever it can ask a block's size
/// (HAVE_MALLOC_SIZE: all of those; only without it does it add an 8-byte
/// size prefix, which `Aligned` would then need a base of 8 for). Kept at
/// 16 so that hashbrown's tables (aligned to 16) take the direct path.
pub const BASE_ALIGN: usize = 16;

/// Bytes kept before an over-aligned block: the address of the block the
/// base allocator returned.
const HEADER: usize = std::mem::size_of::<usize>();

/// `A`, with alignments above [`BASE_ALIGN`] served by hand.
#[derive(Debug, Default, Clone, Copy)]
pub struct Aligned<A>(pub A);

/// The layout of the block that holds an over-aligned `layout`: room for
/// the header and for moving the start up to the alignment.
fn outer(layout: Layout) -> Option<Layout> {
    let size = layout
        .size()
        .checked_add(layout.align())?
        .checked_add(HEADER)?;
    Layout::from_size_align(size, BASE_ALIGN).ok()
}

// SAFETY: small alignments go to `A` as they are; an over-aligned request
// gets a block of `outer(layout)` from `A`, and the pointer handed out lies
// inside it with `layout.size()` bytes after it and `HEADER` bytes before it
// (see `alloc`), so it is valid for the layout asked; `dealloc` gives `A`
// back exactly the block and layout it handed out.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Aligned<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= BASE_ALIGN {
            // SAFETY: the caller's contract, passed on unchanged.
            return unsafe { self.0.alloc(layout) };
        }
        let Some(outer) = outer(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `outer` has a non-zero size (it counts the header).
        let block = unsafe { self.0.alloc(outer) };
        if block.is_null() {
            return block;
        }
        // The first address at least HEADER bytes into the block that is a
        // multiple of the alignment: at most HEADER + align - 1 bytes in,
        // so `layout.size()` bytes still fit in the block.
        let offset = (block as usize + HEADER).next_multiple_of(layout.align()) - block as usize;
        // SAFETY: `offset <= HEADER + align - 1 < outer.size()`: inside the block.
        let start = unsafe { block.add(offset) };
        // SAFETY: the HEADER bytes before `start` lie in the block (offset
        // >= HEADER); unaligned, as `start - HEADER` need not be.
        unsafe {
            start
                .sub(HEADER)
                .cast::<usize>()
                .write_unaligned(block as usize)
        };
        start
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() <= BASE_ALIGN {
            // SAFETY: the caller's contract, passed on unchanged.
            return unsafe { self.0.dealloc(ptr, layout) };
        }
        // SAFETY: `ptr` came from `alloc` with this layout, which wrote the
        // block's address in the HEADER bytes before it.
        let block = unsafe { ptr.sub(HEADER).cast::<usize>().read_unaligned() } as *mut u8;
        if let Some(outer) = outer(layout) {
            // SAFETY: `block` and `outer` are what `alloc` got from `A`.
            unsafe { self.0.dealloc(block, outer) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    /// An allocator that aligns to 16 bytes and no more, as glibc's
    /// malloc under a `MALLOC=libc` server: every block 16 bytes past a
    /// 4096-byte boundary, so no larger alignment comes by chance.
    struct PrefixedMalloc;

    // SAFETY: hands out System blocks 16 bytes in, and gives System back
    // the same block and layout.
    unsafe impl GlobalAlloc for PrefixedMalloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let inner = Layout::from_size_align(layout.size() + 16, 4096).unwrap();
            // SAFETY: non-zero size.
            let p = unsafe { System.alloc(inner) };
            // SAFETY: 16 bytes into a block of size + 16.
            unsafe { p.add(16) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let inner = Layout::from_size_align(layout.size() + 16, 4096).unwrap();
            // SAFETY: the block `alloc` got.
            unsafe { System.dealloc(ptr.sub(16), inner) };
        }
    }

    #[test]
    fn every_alignment_is_honoured_on_a_base_that_gives_sixteen() {
        let alloc = Aligned(PrefixedMalloc);
        let mut live = Vec::new();
        for align in [1, 8, 16, 32, 64, 128, 4096] {
            for size in [1, 7, 128, 1000, 5000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero size.
                let p = unsafe { alloc.alloc(layout) };
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                // SAFETY: the block is `size` bytes long.
                unsafe { std::ptr::write_bytes(p, 0xAB, size) };
                live.push((p, layout));
            }
        }
        for (p, layout) in live {
            // SAFETY: every byte written above is still there (no block overlaps).
            assert!(unsafe { std::slice::from_raw_parts(p, layout.size()) }
                .iter()
                .all(|&b| b == 0xAB));
            // SAFETY: from `alloc` with this layout.
            unsafe { alloc.dealloc(p, layout) };
        }
    }

    #[test]
    fn a_cache_padded_value_is_aligned_through_the_wrapper() {
        // What crossbeam-channel allocates: a 128-byte aligned counter.
        #[repr(align(128))]
        struct Padded([u8; 200]);
        let layout = Layout::new::<Padded>();
        let alloc = Aligned(PrefixedMalloc);
        // SAFETY: non-zero size.
        let p = unsafe { alloc.alloc(layout) };
        assert_eq!(p as usize % 128, 0);
        // SAFETY: from `alloc` with this layout.
        unsafe { alloc.dealloc(p, layout) };
    }
}
