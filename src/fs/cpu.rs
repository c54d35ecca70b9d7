//! Request threads follow their clients' CPU.
//!
//! On a machine of virtual CPUs a FUSE round trip costs mostly wake-ups across CPUs: the
//! client queues a request and sleeps, an event-loop thread on another CPU is woken (an
//! inter-processor interrupt, a VM exit), answers, and wakes the client back across the
//! same gap. Measured here (2 vCPUs): 2000 warm `cat`s of ref files take 45–160 ms with
//! the threads left where the scheduler puts them (bimodal: the same CPU or not), 43 ms
//! when they run on the client's CPU, 21 ms on disk (docs/benchmarks.md, "Issue 11,
//! round 4"). The scheduler does not put them together by itself: FUSE's wake-ups are
//! not "sync" ones, so a woken thread stays on its idle CPU.
//!
//! So an event-loop thread moves to the CPU its client last ran on (field 39 of
//! `/proc/<tid>/stat`, read by a prober thread, never by a request handler: see
//! `start_prober`), asked for at a thread's first request from a new client and then
//! once every [`CHECK_EVERY`] requests; the watcher, while it has the kernel drop names,
//! moves to the CPU of the latest client (each drop makes the kernel queue a `FORGET` for
//! the event-loop threads there) and back afterwards. Threads only move within the CPUs
//! the mount itself may use (`taskset`, cpusets), saved when the mount starts. A client
//! that moves away from the threads that followed it is not followed again (`Chase`).
//! This changes where work runs, never what it does. `mount --no-follow-cpu` turns it off.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::OnceLock;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::fs::procfs;

/// A thread checks its client's CPU at most once per this many requests (and at the
/// first request from another client).
pub const CHECK_EVERY: u32 = 64;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// The CPUs the mount may use, as it started.
static ALLOWED: OnceLock<CpuSet> = OnceLock::new();
/// The CPU to follow: the latest checked client's (-1: none yet, or that client runs away
/// from its followers, see [`Chase`]).
static LAST: AtomicI32 = AtomicI32::new(-1);

/// The client thread the prober is asked to look at (0: none).
static ASK: AtomicU32 = AtomicU32::new(0);
/// The prober thread (reads `/proc/<tid>/stat` off the request path).
static PROBER: OnceLock<std::thread::Thread> = OnceLock::new();

thread_local! {
    /// (requests since the last ask, the client of the last request)
    static SEEN: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    /// The CPU this thread was last pinned to (-1: none, it may use every allowed CPU).
    static PINNED: Cell<i32> = const { Cell::new(-1) };
    /// The thread serves one CPU's io_uring queue (`uring.rs`) and stays on that CPU.
    static FIXED: Cell<bool> = const { Cell::new(false) };
}

/// Pins the calling thread to `cpu` for good, whatever the following: a thread of FUSE
/// over io_uring serves the requests of that CPU's clients (`uring.rs`). The CPU is taken
/// even beyond the CPUs the mount started with (the kernel picks the queue by the
/// client's CPU); where a cpuset forbids it the thread stays where it may run.
pub fn pin_for_good(cpu: usize) {
    FIXED.with(|f| f.set(true));
    if cpu < CpuSet::MAX_CPU {
        let mut set = CpuSet::new();
        set.set(cpu);
        let _ = set_affinity(&set);
    }
}

/// Turns following on or off for this process; saves the CPUs it may use and starts the
/// prober thread. Called before the event-loop threads start.
pub fn enable(on: bool) {
    if on && ALLOWED.get().is_none() {
        if let Some(set) = affinity() {
            let _ = ALLOWED.set(set);
        }
    }
    let on = on && ALLOWED.get().is_some() && start_prober();
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether threads follow their clients.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The prober: a request handler never reads a client's `/proc/<tid>/stat` itself (it
/// can wait for a lock the client holds while it waits for that very request, see
/// `procfs.rs`), so it is read here, where waiting blocks nothing but the next probe.
fn start_prober() -> bool {
    if PROBER.get().is_some() {
        return true;
    }
    let spawned = std::thread::Builder::new()
        .name("reftablefs-cpu".into())
        .spawn(|| {
            let mut chase = Chase::default();
            loop {
                std::thread::park();
                let tid = ASK.swap(0, Ordering::Relaxed);
                if tid == 0 {
                    continue;
                }
                if let Some(cpu) = procfs::processor(tid).and_then(|c| i32::try_from(c).ok()) {
                    LAST.store(chase.target(tid, cpu), Ordering::Relaxed);
                }
            }
        });
    match spawned {
        Ok(h) => {
            let _ = PROBER.set(h.thread().clone());
            true
        }
        Err(_) => false,
    }
}

/// How many clients that ran away are remembered (the oldest is forgotten first).
const RUNAWAYS_KEPT: usize = 64;

/// The prober's memory of whom it follows. A client that is seen on another CPU than at
/// its previous probe ran away from the threads that had moved next to it: its own
/// wake-up, issued while a request thread still ran on its CPU, put it on an idle CPU
/// instead (FUSE's wake-ups are not "sync" ones). Following it would only pull the threads
/// after it at every probe while every request in between crosses CPUs, slower than not
/// following at all (a warm git 2.39 `for-each-ref` measured 1.3-1.7x slower), so such a
/// client is not followed again: the threads go back to every CPU the mount may use.
#[derive(Default)]
struct Chase {
    /// (client thread, its CPU) at the previous probe.
    prev: Option<(u32, i32)>,
    /// Clients not to follow, newest last.
    runaways: std::collections::VecDeque<u32>,
}

impl Chase {
    /// The CPU to move to after client `tid` was seen on `cpu` (-1: none, leave it to the
    /// scheduler).
    fn target(&mut self, tid: u32, cpu: i32) -> i32 {
        let moved = self.prev.is_some_and(|(t, c)| t == tid && c != cpu);
        self.prev = Some((tid, cpu));
        if moved && !self.runaways.contains(&tid) {
            if self.runaways.len() == RUNAWAYS_KEPT {
                self.runaways.pop_front();
            }
            self.runaways.push_back(tid);
        }
        if self.runaways.contains(&tid) {
            -1
        } else {
            cpu
        }
    }
}

/// Called by an event-loop thread for each request from thread `tid` (0: the kernel did
/// not say, as for a client in another pid namespace): asks the prober where the client
/// runs (at the first request from a new client, then once per [`CHECK_EVERY`]) and
/// moves to the CPU the prober last saw a client on.
pub fn on_request(tid: u32) {
    if !enabled() || FIXED.with(Cell::get) {
        return;
    }
    if tid != 0 {
        let (n, last) = SEEN.with(Cell::get);
        SEEN.with(|c| c.set(((n + 1) % CHECK_EVERY, tid)));
        if n == 0 || tid != last {
            ASK.store(tid, Ordering::Relaxed);
            if let Some(p) = PROBER.get() {
                p.unpark();
            }
        }
    }
    let want = LAST.load(Ordering::Relaxed);
    if PINNED.with(Cell::get) != want {
        PINNED.with(|c| c.set(want));
        match usize::try_from(want) {
            Ok(cpu) => pin(cpu),
            Err(_) => unpin(),
        };
    }
}

/// While alive, the calling thread runs on the latest client's CPU; dropped, it may use
/// every CPU the mount may use again.
pub struct NearClients(());

/// Moves the calling thread to the latest client's CPU (`None`: following is off, no
/// client yet, or the move failed).
pub fn near_clients() -> Option<NearClients> {
    if !enabled() {
        return None;
    }
    let cpu = usize::try_from(LAST.load(Ordering::Relaxed)).ok()?;
    pin(cpu).then_some(NearClients(()))
}

impl Drop for NearClients {
    fn drop(&mut self) {
        unpin();
    }
}

/// Lets the calling thread use every CPU the mount may use again.
fn unpin() -> bool {
    ALLOWED.get().is_some_and(set_affinity)
}

/// Pins the calling thread to `cpu` if the mount may use it.
fn pin(cpu: usize) -> bool {
    let Some(allowed) = ALLOWED.get() else {
        return false;
    };
    if cpu >= CpuSet::MAX_CPU || !allowed.is_set(cpu) {
        return false;
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    set_affinity(&set)
}

/// Pins the calling thread to `set`.
fn set_affinity(set: &CpuSet) -> bool {
    sched_setaffinity(None, set).is_ok()
}

/// The CPUs the calling thread may use.
fn affinity() -> Option<CpuSet> {
    sched_getaffinity(None).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_stays_is_followed_and_one_that_runs_away_is_not() {
        let mut c = Chase::default();
        assert_eq!(c.target(10, 1), 1, "a new client is followed");
        assert_eq!(c.target(10, 1), 1, "it stayed");
        assert_eq!(c.target(11, 0), 0, "another client is followed");
        assert_eq!(c.target(11, 1), -1, "it ran away from CPU 0");
        assert_eq!(c.target(11, 1), -1, "and is not followed again");
        assert_eq!(c.target(10, 0), 0, "the first one is still followed");
        for t in 100..100 + RUNAWAYS_KEPT as u32 {
            c.target(t, 0);
            c.target(t, 1);
        }
        assert_eq!(c.runaways.len(), RUNAWAYS_KEPT, "the memory is bounded");
        assert_eq!(c.target(11, 1), 1, "the oldest runaway was forgotten");
    }

    /// The thread's CPUs are read, narrowed to one and given back through the calls
    /// `pin` and `unpin` make (on a thread of its own: the others keep theirs).
    #[test]
    fn a_thread_is_pinned_and_unpinned() {
        std::thread::spawn(|| {
            let all = affinity().expect("the thread's CPUs");
            let cpu = (0..CpuSet::MAX_CPU)
                .find(|&c| all.is_set(c))
                .expect("a CPU");
            let mut one = CpuSet::new();
            one.set(cpu);
            assert!(set_affinity(&one));
            assert_eq!(affinity(), Some(one));
            assert!(set_affinity(&all));
            assert_eq!(affinity(), Some(all));
        })
        .join()
        .expect("the pinned thread");
    }
}
