//! The clearance check runs on every request of a challenged zone: it must not allocate. A
//! counting allocator (this test binary's own) proves it, for a valid, a forged and a malformed
//! cookie.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use signpost_challenge::{Difficulty, Key, KeyRing, Method, Settings, Visitor, find_clearance};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn checking_a_clearance_allocates_nothing() {
    let ring = KeyRing::new(
        Key::new(2, &[9; 32]).unwrap(),
        Some(Key::new(1, &[7; 32]).unwrap()),
    )
    .unwrap();
    let settings = Settings::default();
    let visitor = Visitor {
        zone: "shop.example",
        addr: "2001:db8::7".parse().unwrap(),
        user_agent: b"Mozilla/5.0",
    };
    let now = 1_800_000_000;
    let value = ring
        .issue_clearance(&visitor, &settings, Difficulty::DEFAULT, Method::Work, now)
        .value;
    let header = format!("a=1; signpost_clearance={value}; b=2");
    let mut forged = value.clone().into_bytes();
    forged[20] = if forged[20] == b'x' { b'y' } else { b'x' };

    let mut verdicts = Vec::with_capacity(3);
    let count = allocations_during(|| {
        let cookie = find_clearance(header.as_bytes()).unwrap();
        for candidate in [cookie, &forged[..], b"nonsense"] {
            verdicts.push(
                ring.verify_clearance(candidate, &visitor, &settings, Difficulty::DEFAULT, now)
                    .is_ok(),
            );
        }
    });
    assert_eq!(verdicts, [true, false, false]);
    assert_eq!(count, 0, "the check allocated");
    // The counter does count: an allocation in the closure shows.
    assert_eq!(allocations_during(|| drop(black_box_vec())), 1);
}

#[inline(never)]
fn black_box_vec() -> Vec<u8> {
    std::hint::black_box(Vec::with_capacity(16))
}
