//! Guest memory helpers: reading and writing linear memory, and handing bytes to the guest
//! through its exported allocator.

use super::{C, R};
use crate::state::status::*;

pub(super) fn read(c: &C, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let m = c.data().memory?;
    let data = m.data(c);
    let (p, l) = (ptr as u32 as usize, len as u32 as usize);
    data.get(p..p.checked_add(l)?).map(|s| s.to_vec())
}

pub(super) fn write(c: &mut C, ptr: i32, bytes: &[u8]) -> bool {
    let Some(m) = c.data().memory else {
        return false;
    };
    let p = ptr as u32 as usize;
    match m.data_mut(c).get_mut(p..p + bytes.len()) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

pub(super) fn write_u32(c: &mut C, ptr: i32, v: u32) -> bool {
    write(c, ptr, &v.to_le_bytes())
}

pub(super) fn write_u64(c: &mut C, ptr: i32, v: u64) -> bool {
    write(c, ptr, &v.to_le_bytes())
}

/// Ends a call that returns `v` through the guest pointer `ptr`: OK, or INVALID_MEMORY_ACCESS
/// where `ptr` is outside guest memory.
pub(super) fn out_u32(c: &mut C, ptr: i32, v: u32) -> R {
    Ok(if write_u32(c, ptr, v) {
        OK
    } else {
        INVALID_MEMORY_ACCESS
    })
}

pub(super) fn out_u64(c: &mut C, ptr: i32, v: u64) -> R {
    Ok(if write_u64(c, ptr, v) {
        OK
    } else {
        INVALID_MEMORY_ACCESS
    })
}

/// cpp-host `copyToPointerSize`: empty → writes (0, 0) without allocating; otherwise calls the
/// guest's exported allocator (counted), copies, and writes (ptr, len).
pub(super) fn copy_out(c: &mut C, bytes: &[u8], ptr_ptr: i32, size_ptr: i32) -> R {
    let mut ptr = 0u32;
    if !bytes.is_empty() {
        let Some(alloc) = c.data().alloc.clone() else {
            return Ok(INVALID_MEMORY_ACCESS);
        };
        c.data_mut().alloc_calls += 1;
        c.data_mut().alloc_bytes += bytes.len() as u64;
        ptr = alloc.call(&mut *c, bytes.len() as i32)? as u32;
        if ptr == 0 || !write(c, ptr as i32, bytes) {
            return Ok(INVALID_MEMORY_ACCESS);
        }
    }
    if !write_u32(c, ptr_ptr, ptr) || !write_u32(c, size_ptr, bytes.len() as u32) {
        return Ok(INVALID_MEMORY_ACCESS);
    }
    Ok(OK)
}
