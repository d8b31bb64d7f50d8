//! What the `#[filter]` and `#[transaction_checker]` attributes expand to call: the handle table,
//! the scratch buffer the host writes into, and the batch loops. Not a public API.

use std::cell::RefCell;

use crate::view::Batch;
use crate::{Decision, Filter, TransactionChecker};

/// Open plugin instances of one type (one per subscription or binding the host opened).
pub struct Handles<T>(RefCell<Vec<Option<T>>>);

impl<T> Handles<T> {
    pub const fn new() -> Handles<T> {
        Handles(RefCell::new(Vec::new()))
    }
}

impl<T> Default for Handles<T> {
    fn default() -> Self {
        Handles::new()
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Packs a guest pointer and a length the way `rockraft_manifest` and `rockraft_last_error` answer.
pub fn pack(ptr: *const u8, len: usize) -> i64 {
    (((ptr as usize as u64) << 32) | (len as u64 & 0xFFFF_FFFF)) as i64
}

/// `rockraft_alloc`: a buffer of at least `size` bytes, valid until the next call.
pub fn alloc(size: i32) -> i32 {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let size = size.max(0) as usize;
        if s.len() < size {
            s.resize(size, 0);
        }
        s.as_mut_ptr() as usize as i32
    })
}

/// `rockraft_last_error`: the reason the last `open` (or a batch call) failed.
pub fn last_error() -> i64 {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        pack(e.as_ptr(), e.len())
    })
}

fn fail(reason: String) -> i32 {
    LAST_ERROR.with(|e| *e.borrow_mut() = reason);
    -1
}

/// # Safety
/// `ptr..ptr+len` must be guest memory the host wrote (it lies within the scratch buffer).
unsafe fn input<'a>(ptr: i32, len: i32) -> &'a [u8] {
    if len <= 0 {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(ptr as usize as *const u8, len as usize) }
}

/// # Safety
/// As [`input`], for the output area the host reserved after the input.
unsafe fn output<'a>(ptr: i32, count: i32) -> &'a mut [u8] {
    if count <= 0 {
        return &mut [];
    }
    unsafe { std::slice::from_raw_parts_mut(ptr as usize as *mut u8, count as usize) }
}

fn open_with<T>(handles: &Handles<T>, made: Result<T, String>) -> i32 {
    match made {
        Ok(t) => {
            let mut h = handles.0.borrow_mut();
            let slot = match h.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    h.push(None);
                    h.len() - 1
                }
            };
            h[slot] = Some(t);
            slot as i32
        }
        Err(reason) => fail(reason),
    }
}

/// `rockraft_open` of a filter module.
///
/// # Safety
/// The host passes a region it wrote with `rockraft_alloc`.
pub unsafe fn open_filter<F: Filter>(handles: &Handles<F>, kind: i32, ptr: i32, len: i32) -> i32 {
    if kind != crate::KIND_FILTER {
        return fail("this plugin is a filter".to_string());
    }
    match std::str::from_utf8(unsafe { input(ptr, len) }) {
        Ok(cfg) => open_with(handles, F::open(cfg)),
        Err(_) => fail("the expression is not UTF-8".to_string()),
    }
}

/// `rockraft_open` of a transaction-checker module.
///
/// # Safety
/// As [`open_filter`].
pub unsafe fn open_checker<C: TransactionChecker>(handles: &Handles<C>, kind: i32, ptr: i32, len: i32) -> i32 {
    if kind != crate::KIND_TX_CHECKER {
        return fail("this plugin is a transaction checker".to_string());
    }
    match std::str::from_utf8(unsafe { input(ptr, len) }) {
        Ok(cfg) => open_with(handles, C::open(cfg)),
        Err(_) => fail("the configuration is not UTF-8".to_string()),
    }
}

/// `rockraft_close`.
pub fn close<T>(handles: &Handles<T>, handle: i32) {
    if let Some(slot) = handles.0.borrow_mut().get_mut(handle.max(0) as usize) {
        *slot = None;
    }
}

/// Runs a filter over an encoded batch: `out[i]` is 1 (match), 0 (no match) or 0xFF (error).
pub fn run_filter<F: Filter>(filter: &F, batch: &[u8], out: &mut [u8]) -> Result<(), String> {
    let batch = Batch::parse(batch).map_err(|e| e.to_string())?;
    if out.len() < batch.len() {
        return Err("output area smaller than the batch".to_string());
    }
    for (slot, m) in out.iter_mut().zip(batch.messages()) {
        *slot = match m.map_err(|e| e.to_string()).and_then(|m| filter.matches(&m)) {
            Ok(true) => 1,
            Ok(false) => 0,
            Err(reason) => {
                // Kept for the host to ask (`plugin eval` shows it); the last one wins.
                fail(reason);
                0xFF
            }
        };
    }
    Ok(())
}

/// Runs a checker over an encoded batch: `out[i]` is a [`Decision`] code.
pub fn run_checker<C: TransactionChecker>(checker: &C, batch: &[u8], out: &mut [u8]) -> Result<(), String> {
    let batch = Batch::parse(batch).map_err(|e| e.to_string())?;
    if out.len() < batch.len() {
        return Err("output area smaller than the batch".to_string());
    }
    for (slot, m) in out.iter_mut().zip(batch.messages()) {
        *slot = m.map_or(Decision::Wait, |m| checker.check(&m)) as u8;
    }
    Ok(())
}

/// `rockraft_filter`.
///
/// # Safety
/// The host passes regions it wrote with `rockraft_alloc`.
pub unsafe fn filter<F: Filter>(handles: &Handles<F>, handle: i32, ptr: i32, len: i32, count: i32, out: i32) -> i32 {
    let h = handles.0.borrow();
    let Some(Some(f)) = h.get(handle.max(0) as usize) else { return fail(format!("no open handle {handle}")) };
    match run_filter(f, unsafe { input(ptr, len) }, unsafe { output(out, count) }) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `rockraft_tx_check`.
///
/// # Safety
/// As [`filter`].
pub unsafe fn tx_check<C: TransactionChecker>(
    handles: &Handles<C>,
    handle: i32,
    ptr: i32,
    len: i32,
    count: i32,
    out: i32,
) -> i32 {
    let h = handles.0.borrow();
    let Some(Some(c)) = h.get(handle.max(0) as usize) else { return fail(format!("no open handle {handle}")) };
    match run_checker(c, unsafe { input(ptr, len) }, unsafe { output(out, count) }) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}
