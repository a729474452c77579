//! Reading `X-Forwarded-For` costs no allocation per hop: a head full of commas (one hop
//! each) once made the gateway collect every hop before walking the chain, about 18 bytes
//! each, so one 1 MiB head (`max_header_bytes` allows that much) cost ~9 MB, per request.
//! No server is involved: the walk is pure, measured by counting the allocations of the
//! thread that walks (the other tests of this binary allocate on threads of their own).

use hyper::header::{HeaderMap, HeaderValue};
use rl_gateway::fuzzing::client_ip;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Const-initialised and without a destructor: reading it never allocates, so the
    // allocator may use it.
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

/// The bytes this thread allocated so far.
fn allocated_here() -> usize {
    ALLOCATED.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|bytes| bytes.set(bytes.get() + layout.size()));
        // SAFETY: the caller's layout is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

#[test]
fn a_chain_of_many_hops_is_walked_without_collecting_it() {
    let trusted = vec!["10.0.0.0/8".parse().expect("a network")];
    let peer = "10.0.0.1".parse().expect("an address");
    let mut headers = HeaderMap::new();
    // Half a million empty hops, then the client and two trusted proxies, read from the
    // right: the walk stops at the client.
    let mut chain = ",".repeat(500_000);
    chain.push_str("203.0.113.5, 10.0.0.9");
    headers.append(
        "x-forwarded-for",
        HeaderValue::from_str(&chain).expect("a value"),
    );
    headers.append("x-forwarded-for", HeaderValue::from_static("10.0.0.8"));
    let before = allocated_here();
    let client = client_ip(peer, &headers, &trusted);
    let allocated = allocated_here() - before;
    assert_eq!(
        client,
        "203.0.113.5".parse::<std::net::IpAddr>().expect("ip")
    );
    assert!(allocated < 64 * 1024, "{allocated} bytes allocated");
}
