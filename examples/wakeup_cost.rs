//! What one wake-up round trip costs on this machine, between two threads on one CPU and
//! on two: the floor under every FUSE request (a client queues a request and sleeps, a
//! mount thread is woken, answers and wakes the client back).
//!
//! ```sh
//! cargo run --release --example wakeup_cost [ROUND_TRIPS]
//! ```
//!
//! Two threads pass one byte back and forth through two pipes, pinned to the CPUs named
//! in each row, then left where the scheduler puts them. On a virtual machine whose idle
//! vCPUs halt without polling (`haltpoll.guest_halt_poll_ns=0`), waking a thread on
//! another, idle vCPU costs a VM exit and the host's wake-up of that vCPU, an order of
//! magnitude over a wake-up on the same CPU (docs/benchmarks.md, "Issue 11, round 6").

use std::time::Instant;

fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: a local cpu set of the size given; 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn pipe() -> [libc::c_int; 2] {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        eprintln!("pipe: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    fds
}

fn byte(fd: libc::c_int, write: bool) {
    let mut b = [0u8; 1];
    // SAFETY: one byte to or from a local buffer on a descriptor this program owns.
    let n = unsafe {
        if write {
            libc::write(fd, b.as_ptr().cast(), 1)
        } else {
            libc::read(fd, b.as_mut_ptr().cast(), 1)
        }
    };
    if n != 1 {
        eprintln!("pipe i/o: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
}

/// Microseconds per round trip between a thread on `a` and one on `b` (`None`: not pinned).
fn round_trip(a: Option<usize>, b: Option<usize>, n: u32) -> f64 {
    let (ping, pong) = (pipe(), pipe());
    let echo = std::thread::spawn(move || {
        pin(b);
        for _ in 0..n {
            byte(ping[0], false);
            byte(pong[1], true);
        }
    });
    pin(a);
    let t = Instant::now();
    for _ in 0..n {
        byte(ping[1], true);
        byte(pong[0], false);
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let _ = echo.join();
    for fd in ping.into_iter().chain(pong) {
        // SAFETY: closing descriptors this function opened and no longer uses.
        unsafe { libc::close(fd) };
    }
    us
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let halt_poll = std::fs::read_to_string("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
        .map_or_else(|_| "not present".to_string(), |s| s.trim().to_string());
    println!("{cpus} CPUs; guest halt polling (haltpoll.guest_halt_poll_ns): {halt_poll}");
    // Each row runs in a fresh thread pair: the main thread's own affinity stays as it was.
    let row = |label: &str, a: Option<usize>, b: Option<usize>| {
        let us = std::thread::spawn(move || round_trip(a, b, n))
            .join()
            .unwrap_or(f64::NAN);
        println!("{label:<28} {us:8.2} us per round trip ({n} round trips)");
    };
    row("same CPU (0 <-> 0)", Some(0), Some(0));
    if cpus >= 2 {
        row("two CPUs (0 <-> 1)", Some(0), Some(1));
    }
    row("unpinned", None, None);
}
