//! FUSE over io_uring (Linux 6.14+, issue 26.6): each request is answered by a thread on
//! the CPU whose client sent it, instead of by whichever `/dev/fuse` thread the kernel
//! wakes, usually across CPUs.
//!
//! The kernel offers `FUSE_OVER_IO_URING` at `INIT` when the fuse module's `enable_uring`
//! parameter is on. The mount then keeps one queue per possible CPU (the kernel's
//! `num_possible_cpus`), each served by [`SLOTS`] threads pinned to that CPU, each thread
//! with an io_uring of its own holding one queue entry: a header buffer and a payload
//! buffer registered with `FUSE_IO_URING_CMD_REGISTER`. The kernel writes a request into
//! the entry of the client's CPU and completes the entry's command; the thread rebuilds
//! the request as `/dev/fuse` would have delivered it (`fuse_in_header`, the operation's
//! own header, the payload), hands it to the same `Filesystem` through fuser's
//! [`Dispatcher`] (a patch, `vendor/fuser/PATCHES.md`), writes the reply into the entry
//! and sends it with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also waits for the next
//! request. `FORGET`, `INTERRUPT` and notifications still go through `/dev/fuse`, whose
//! event loops stay.
//!
//! **Fallback.** Everything that can fail is done before the mount agrees at `INIT`
//! ([`Plan::prepare`]: the rings, the buffers, the `eventfd`s): if io_uring is refused
//! (kernel, `io_uring_disabled`, seccomp), the mount never asks for the transport and
//! serves `/dev/fuse` alone. Once agreed, the kernel holds requests back until every
//! queue has an entry; an entry the kernel refuses makes it give the transport up for the
//! connection (`fc->io_uring = 0`) and serve `/dev/fuse`; a ring that cannot even submit
//! leaves the mount unusable, so the mount then aborts its own connection (fusectl) rather
//! than hang its clients.

use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use fuser::transport::{Dispatcher, TransportReply};
use fuser::Filesystem;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Threads (each one io_uring with one entry) per CPU queue: a second thread serves the
/// CPU's clients while the first is in a slow request.
pub const SLOTS: usize = 2;
/// No io_uring beyond this many possible CPUs (each queue costs [`SLOTS`] threads and
/// payload buffers); `/dev/fuse` serves them.
pub const MAX_QUEUES: usize = 64;
/// The payload buffer of an entry, and the mount's `max_write` when the transport is on:
/// the kernel asks for `max(8 KiB, max_write, max_pages × page)`, and no request carries
/// more than `max_pages` (256) pages.
pub const PAYLOAD: usize = 1 << 20;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: `in_out` (128), `op_in` (128), `ring_ent_in_out` (32).
const HEADER: usize = 288;
const OP_IN: usize = 128;
const OP_IN_MAX: usize = 128;
const ENT_IN_OUT: usize = 256;
/// `struct fuse_in_header` and `struct fuse_out_header`.
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// Completion queue entries of a ring (two are ever outstanding).
const CQ_ENTRIES: u32 = 8;
/// `user_data` of the entry's command and of the wake-up poll.
const UD_ENTRY: u64 = 1;
const UD_WAKE: u64 = 2;

/// What the mount prepared for the transport before `INIT`.
pub struct Plan {
    rings: Vec<Ring>,
}

/// One thread's io_uring and its entry.
struct Ring {
    qid: u16,
    uring: IoUring<squeue::Entry128, cqueue::Entry>,
    slot: Arc<Slot>,
}

/// The entry's buffers and what a reply from another thread leaves for the ring thread.
struct Slot {
    /// `struct fuse_uring_req_header`, 8-byte aligned.
    header: UnsafeCell<Box<[u64; HEADER / 8]>>,
    payload: UnsafeCell<Box<[u8]>>,
    /// The two `iovec`s registered with the kernel (header, payload).
    iov: UnsafeCell<[libc::iovec; 2]>,
    /// A reply written into the buffers and not yet committed: its commit id.
    commit: Mutex<Option<u64>>,
    /// Wakes the ring thread (a reply from another thread, or stop).
    wake: OwnedFd,
    stop: AtomicBool,
}

// SAFETY: the buffers behind the `UnsafeCell`s are handed between the kernel, the ring
// thread and at most one replier at a time (the entry's protocol: the kernel writes a
// request and completes the command; the ring thread reads it and dispatches it; one
// reply writes the answer and sets `commit` under its mutex; only then does the ring
// thread submit the commit, after which only the kernel touches them until the next
// completion). No two threads touch them at once.
unsafe impl Sync for Slot {}
// SAFETY: as above; the raw pointers in `iov` point into the slot's own boxes.
unsafe impl Send for Slot {}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Slot")
    }
}

/// How many threads serve the transport now (0: `/dev/fuse` only), for `status`.
static SERVING: AtomicUsize = AtomicUsize::new(0);
/// How many CPU queues the transport has (set when it starts).
static QUEUES: AtomicUsize = AtomicUsize::new(0);
/// Requests served over io_uring since the mount started.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// The transport as it serves, for `status`: CPU queues, threads, requests served.
pub struct Serving {
    pub queues: usize,
    pub threads: usize,
    pub requests: u64,
}

/// `None` while no thread serves io_uring (`/dev/fuse` alone).
pub fn serving() -> Option<Serving> {
    match SERVING.load(Ordering::Relaxed) {
        0 => None,
        threads => Some(Serving {
            queues: QUEUES.load(Ordering::Relaxed),
            threads,
            requests: REQUESTS.load(Ordering::Relaxed),
        }),
    }
}

/// The payload buffer's size: [`PAYLOAD`]. Test-only (feature `test-hooks`, never a
/// release build): `RTFS_TEST_URING_SHORT_PAYLOAD` makes it 4 KiB, less than the kernel
/// asks for, so that it refuses every entry and falls back to `/dev/fuse`
/// (`uring::a_refused_entry_falls_back_to_dev_fuse`).
fn payload_size() -> usize {
    if cfg!(feature = "test-hooks") && std::env::var_os("RTFS_TEST_URING_SHORT_PAYLOAD").is_some() {
        4096
    } else {
        PAYLOAD
    }
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, "0-1,4"), as the
/// kernel counts its queues.
fn possible_cpus() -> Option<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").ok()?;
    count_cpu_list(text.trim())
}

/// The number of CPUs in a kernel CPU list ("0-3,8,10-11").
fn count_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse::<usize>().ok()?;
                (a, a)
            }
        };
        n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
    }
    (n > 0).then_some(n)
}

impl Plan {
    /// Everything the transport needs that can fail, made before the mount agrees to it at
    /// `INIT`: a ring, buffers and an `eventfd` for each thread. `None` (logged) when any
    /// of it cannot be made, so that the mount serves `/dev/fuse` alone.
    pub fn prepare() -> Option<Plan> {
        let queues = match possible_cpus() {
            Some(n) if n <= MAX_QUEUES => n,
            other => {
                log::info!(
                    "reftablefs: FUSE over io_uring not used: {} possible CPUs (at most {MAX_QUEUES})",
                    other.map_or("unknown".into(), |n| n.to_string())
                );
                return None;
            }
        };
        let mut rings = Vec::with_capacity(queues * SLOTS);
        for qid in 0..queues {
            for _ in 0..SLOTS {
                match Ring::new(qid as u16) {
                    Ok(r) => rings.push(r),
                    Err(e) => {
                        log::info!("reftablefs: FUSE over io_uring not used: {e}");
                        return None;
                    }
                }
            }
        }
        QUEUES.store(queues, Ordering::Relaxed);
        Some(Plan { rings })
    }

    /// Starts the threads that serve the rings; `dev` is the session's `/dev/fuse`,
    /// `abort` the connection's fusectl `abort` file ([`abort_path`]).
    pub fn start<FS: Filesystem>(
        self,
        dev: RawFd,
        abort: Option<PathBuf>,
        dispatcher: Dispatcher<FS>,
    ) -> Running {
        let mut threads = Vec::with_capacity(self.rings.len());
        let mut slots = Vec::with_capacity(self.rings.len());
        let mut served = vec![0usize; QUEUES.load(Ordering::Relaxed)];
        for ring in self.rings {
            slots.push(ring.slot.clone());
            let d = dispatcher.clone();
            let a = abort.clone();
            let qid = usize::from(ring.qid);
            let name = format!("fuse-uring-{qid}");
            match std::thread::Builder::new()
                .name(name)
                .spawn(move || ring.serve(dev, a.as_deref(), &d))
            {
                Ok(t) => {
                    threads.push(t);
                    if let Some(n) = served.get_mut(qid) {
                        *n += 1;
                    }
                }
                Err(e) => log::error!("reftablefs: io_uring thread: {e}"),
            }
        }
        // A queue without a thread never gets an entry: the kernel would hold every
        // request for good.
        if served.contains(&0) {
            abort_connection(abort.as_deref());
        }
        Running { threads, slots }
    }
}

/// The serving threads, stopped once the session's `/dev/fuse` loops have ended.
pub struct Running {
    threads: Vec<JoinHandle<()>>,
    slots: Vec<Arc<Slot>>,
}

impl Running {
    /// Wakes every thread to stop and waits for them (each drops its dispatcher).
    pub fn stop(self) {
        for s in &self.slots {
            s.stop.store(true, Ordering::SeqCst);
            s.kick();
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

thread_local! {
    /// The slot this thread serves (null: not a ring thread).
    static CURRENT: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
}

impl Slot {
    fn new() -> io::Result<Slot> {
        // SAFETY: eventfd(2) with valid flags; a non-negative result is a new descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut header = Box::new([0u64; HEADER / 8]);
        let mut payload = vec![0u8; payload_size()].into_boxed_slice();
        let payload_len = payload.len();
        let iov = [
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: HEADER,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload_len,
            },
        ];
        Ok(Slot {
            header: UnsafeCell::new(header),
            payload: UnsafeCell::new(payload),
            iov: UnsafeCell::new(iov),
            commit: Mutex::new(None),
            wake,
            stop: AtomicBool::new(false),
        })
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the slot's own eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn drain_wake(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from the slot's own (non-blocking) eventfd.
        let _ = unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    fn header_ptr(&self) -> *mut u8 {
        // SAFETY: a pointer to the boxed array; no reference is made.
        unsafe { (*self.header.get()).as_mut_ptr().cast() }
    }

    fn payload_len(&self) -> usize {
        // SAFETY: the boxed slice's length, read without touching its bytes; the box
        // itself is never replaced.
        unsafe { (&*self.payload.get()).len() }
    }

    fn payload_ptr(&self) -> *mut u8 {
        // SAFETY: a pointer to the boxed slice; no reference is made.
        unsafe { (*self.payload.get()).as_mut_ptr() }
    }

    /// Writes a reply (`fuse_out_header` and data, as for `/dev/fuse`) into the entry and
    /// leaves its commit for the ring thread.
    fn put_reply(&self, commit_id: u64, data: &[IoSlice<'_>]) -> io::Result<()> {
        // SAFETY: the entry's protocol (on `Slot`): until this reply is committed, its
        // sender alone touches the buffers; `HEADER` and `PAYLOAD` bytes long.
        let (header, payload) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.header_ptr(), HEADER),
                std::slice::from_raw_parts_mut(self.payload_ptr(), self.payload_len()),
            )
        };
        let result = write_reply(header, payload, commit_id, data);
        let mut c = self.commit.lock().unwrap_or_else(|p| p.into_inner());
        *c = Some(commit_id);
        drop(c);
        if !std::ptr::eq(CURRENT.with(Cell::get), self) {
            self.kick();
        }
        result
    }
}

/// Writes a reply as `/dev/fuse` takes it (`data`: `fuse_out_header`, then the reply's
/// data) into an entry: the header into `in_out`, the data into the payload, its size into
/// `ring_ent_in_out`. A reply that does not fit fails the request with `EIO`.
fn write_reply(
    header: &mut [u8],
    payload: &mut [u8],
    commit_id: u64,
    data: &[IoSlice<'_>],
) -> io::Result<()> {
    let total: usize = data.iter().map(|s| s.len()).sum();
    if total < OUT_HEADER || total - OUT_HEADER > payload.len() {
        header[..OUT_HEADER].copy_from_slice(&error_header(commit_id, libc::EIO));
        set_payload_size(header, 0);
        return Err(io::Error::other("reply does not fit the io_uring entry"));
    }
    let mut at = 0usize;
    for s in data {
        let mut s: &[u8] = s;
        if at < OUT_HEADER {
            let n = s.len().min(OUT_HEADER - at);
            header[at..at + n].copy_from_slice(&s[..n]);
            at += n;
            s = &s[n..];
            if s.is_empty() {
                continue;
            }
        }
        let p = at - OUT_HEADER;
        payload[p..p + s.len()].copy_from_slice(s);
        at += s.len();
    }
    set_payload_size(header, (total - OUT_HEADER) as u32);
    Ok(())
}

/// A `fuse_out_header` failing request `unique` with `errno`.
fn error_header(unique: u64, errno: i32) -> [u8; OUT_HEADER] {
    let mut h = [0u8; OUT_HEADER];
    h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

fn set_payload_size(header: &mut [u8], n: u32) {
    header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&n.to_ne_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(a)
}

/// Rebuilds a request as `/dev/fuse` delivers it from what the kernel wrote into an entry:
/// `fuse_in_header` (whose `len` counts the operation's header and the payload), the
/// operation's header from `op_in`, the payload. `None` if the sizes do not add up.
fn rebuild(header: &[u8], payload: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let len = u32_at(header, 0) as usize;
    let payload_sz = u32_at(header, ENT_IN_OUT + 16) as usize;
    let op_sz = len.checked_sub(IN_HEADER)?.checked_sub(payload_sz)?;
    if op_sz > OP_IN_MAX || payload_sz > payload.len() {
        return None;
    }
    out.clear();
    out.extend_from_slice(&header[..IN_HEADER]);
    out.extend_from_slice(&header[OP_IN..OP_IN + op_sz]);
    out.extend_from_slice(&payload[..payload_sz]);
    Some(())
}

/// The reply to one request read from a ring.
struct Reply {
    slot: Arc<Slot>,
    commit_id: u64,
    sent: AtomicBool,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "io_uring reply {}", self.commit_id)
    }
}

impl TransportReply for Reply {
    fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        if self.sent.swap(true, Ordering::SeqCst) {
            return Err(io::Error::other("a second reply to one request"));
        }
        self.slot.put_reply(self.commit_id, data)
    }
}

impl Ring {
    fn new(qid: u16) -> io::Result<Ring> {
        let uring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .dontfork()
            .setup_cqsize(CQ_ENTRIES)
            .build(4)?;
        Ok(Ring {
            qid,
            uring,
            slot: Arc::new(Slot::new()?),
        })
    }

    /// The entry's command: `FUSE_IO_URING_CMD_REGISTER` (its two buffers) or
    /// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH` of `commit_id`.
    fn command(&self, dev: RawFd, op: u32, commit_id: u64) -> squeue::Entry128 {
        // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6] }
        let mut cmd = [0u8; 80];
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let mut b = opcode::UringCmd80::new(types::Fd(dev), op).cmd(cmd);
        if op == CMD_REGISTER {
            b = b.addr(Some(self.slot.iov.get() as u64));
        }
        let e = b.build().user_data(UD_ENTRY);
        if op == CMD_REGISTER {
            with_len(e, 2)
        } else {
            e
        }
    }

    fn wake_poll(&self) -> squeue::Entry128 {
        squeue::Entry128::from(
            opcode::PollAdd::new(types::Fd(self.slot.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(UD_WAKE),
        )
    }

    fn push(&mut self, e: &squeue::Entry128) -> bool {
        // SAFETY: the entry's pointers (the iovecs, in the slot) live as long as the ring.
        unsafe { self.uring.submission().push(e).is_ok() }
    }

    /// The thread's loop: register the entry, then serve requests until the connection
    /// ends or [`Running::stop`].
    fn serve<FS: Filesystem>(mut self, dev: RawFd, abort: Option<&Path>, d: &Dispatcher<FS>) {
        crate::fs::cpu::pin_for_good(usize::from(self.qid));
        CURRENT.with(|c| c.set(Arc::as_ptr(&self.slot)));
        SERVING.fetch_add(1, Ordering::Relaxed);
        let why = self.run(dev, abort, d);
        SERVING.fetch_sub(1, Ordering::Relaxed);
        CURRENT.with(|c| c.set(std::ptr::null()));
        match why {
            Ok(()) => log::debug!("reftablefs: io_uring queue {} ended", self.qid),
            Err(e) => log::warn!("reftablefs: io_uring queue {}: {e}", self.qid),
        }
    }

    fn run<FS: Filesystem>(
        &mut self,
        dev: RawFd,
        abort: Option<&Path>,
        dispatcher: &Dispatcher<FS>,
    ) -> io::Result<()> {
        let register = self.command(dev, CMD_REGISTER, 0);
        let poll = self.wake_poll();
        if !self.push(&register) || !self.push(&poll) {
            abort_connection(abort);
            return Err(io::Error::other("submission queue full at start"));
        }
        let mut last = register;
        let mut request: Vec<u8> = Vec::with_capacity(4096);
        let mut eagain = 0u32;
        loop {
            match self.uring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    abort_connection(abort);
                    return Err(e);
                }
            }
            // At most two completions are ever outstanding (the entry's command and the
            // wake-up poll); taken without allocating, any beyond stay for the next turn.
            let mut done = [(0u64, 0i32); CQ_ENTRIES as usize];
            let mut n = 0;
            for c in self.uring.completion().take(done.len()) {
                done[n] = (c.user_data(), c.result());
                n += 1;
            }
            for &(ud, res) in &done[..n] {
                if ud == UD_WAKE {
                    self.slot.drain_wake();
                    if self.slot.stop.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    let p = self.wake_poll();
                    self.push(&p);
                    continue;
                }
                if res == -libc::EINTR || (res == -libc::EAGAIN && eagain < 1000) {
                    // EAGAIN: the kernel had not finished INIT; try again shortly.
                    eagain += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    let again = last.clone();
                    self.push(&again);
                    continue;
                }
                if res < 0 {
                    // ENOTCONN, ECONNABORTED, ECANCELED: the connection ended. Any other
                    // error at registration made the kernel fall back to /dev/fuse.
                    return match -res {
                        libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED => Ok(()),
                        e => Err(io::Error::from_raw_os_error(e)),
                    };
                }
                self.handle(&mut request, dispatcher);
            }
            if self.slot.stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            let commit = self
                .slot
                .commit
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(id) = commit {
                last = self.command(dev, CMD_COMMIT_AND_FETCH, id);
                let c = last.clone();
                if !self.push(&c) {
                    return Err(io::Error::other("submission queue full"));
                }
            }
        }
    }

    /// One request the kernel wrote into the entry: rebuilt and dispatched; a request
    /// that cannot be rebuilt or parsed is failed with `EIO`.
    fn handle<FS: Filesystem>(&self, request: &mut Vec<u8>, dispatcher: &Dispatcher<FS>) {
        // SAFETY: the kernel completed the entry's command: the ring thread alone touches
        // the buffers until the request's reply; the slices end before dispatching it.
        let (commit_id, rebuilt) = unsafe {
            let header = std::slice::from_raw_parts(self.slot.header_ptr(), HEADER);
            let payload =
                std::slice::from_raw_parts(self.slot.payload_ptr(), self.slot.payload_len());
            (
                u64_at(header, ENT_IN_OUT + 8),
                rebuild(header, payload, request),
            )
        };
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        let reply = Arc::new(Reply {
            slot: self.slot.clone(),
            commit_id,
            sent: AtomicBool::new(false),
        });
        if rebuilt.is_some() && dispatcher.dispatch(request, reply.clone()) {
            return;
        }
        log::warn!("reftablefs: io_uring: a request that does not parse; failed with EIO");
        let _ = reply.send(&[IoSlice::new(&error_header(commit_id, libc::EIO))]);
    }
}

/// `e` with the SQE's `len` field (bytes 24..28 of `struct io_uring_sqe`) set: the
/// registration passes two `iovec`s, which io-uring's `UringCmd80` has no setter for.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `#[repr(C)]` over `struct io_uring_sqe` (64 bytes) and 64
    // command bytes, 128 bytes with no padding and no invalid bit patterns.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above, back to the same type.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// The `abort` file of the FUSE connection mounted on `mountpoint`
/// (`/sys/fs/fuse/connections/<minor>/abort`, the minor of the mount's device in
/// `/proc/self/mountinfo`; read without touching the mount itself).
pub fn abort_path(mountpoint: &Path) -> Option<PathBuf> {
    let info = std::fs::read("/proc/self/mountinfo").ok()?;
    let want = mountpoint.as_os_str().as_bytes();
    info.split(|&b| b == b'\n').rev().find_map(|line| {
        let mut f = line.split(|&b| b == b' ');
        let dev = f.nth(2)?;
        let point = f.nth(1)?;
        if crate::mountinfo::unescape(point) != want {
            return None;
        }
        let minor = std::str::from_utf8(dev).ok()?.split_once(':')?.1;
        let minor: u32 = minor.parse().ok()?;
        Some(PathBuf::from(format!(
            "/sys/fs/fuse/connections/{minor}/abort"
        )))
    })
}

/// Aborts this mount's FUSE connection: a queue that cannot register its entry would
/// otherwise leave every client of the mount waiting for good (the kernel holds requests
/// until every queue has an entry). Without fusectl mounted there is nothing to write;
/// logged.
fn abort_connection(abort: Option<&Path>) {
    log::error!("reftablefs: an io_uring queue cannot be served; aborting the FUSE connection");
    if let Some(p) = abort {
        if let Err(e) = std::fs::write(p, b"1") {
            log::error!("reftablefs: {}: {e}", p.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The abort file is named after the device minor of the mount at that path.
    #[test]
    fn the_abort_file_is_found_by_mount_point() {
        let root = abort_path(Path::new("/")).expect("/ is a mount point");
        let s = root.to_string_lossy().into_owned();
        let minor = s
            .strip_prefix("/sys/fs/fuse/connections/")
            .and_then(|r| r.strip_suffix("/abort"))
            .expect("the fusectl layout");
        assert!(minor.parse::<u32>().is_ok(), "{s}");
        assert_eq!(abort_path(Path::new("/no/such/mount/point")), None);
    }

    #[test]
    fn cpu_lists_count_as_the_kernel_does() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    /// What the kernel writes for a `MKDIR` (op header `fuse_mkdir_in`, 8 bytes; the name
    /// in the payload) rebuilds into the bytes `/dev/fuse` would have delivered.
    #[test]
    fn a_request_is_rebuilt_as_dev_fuse_delivers_it() {
        let mut header = vec![0u8; HEADER];
        let name = b"refs\0";
        let len = (IN_HEADER + 8 + name.len()) as u32;
        header[0..4].copy_from_slice(&len.to_ne_bytes());
        header[4..8].copy_from_slice(&9u32.to_ne_bytes()); // FUSE_MKDIR
        header[8..16].copy_from_slice(&77u64.to_ne_bytes());
        header[OP_IN..OP_IN + 8].copy_from_slice(&[0xed, 1, 0, 0, 0x12, 0, 0, 0]);
        header[OP_IN + 8] = 0xAA; // beyond the op header: not copied
        header[ENT_IN_OUT + 8..ENT_IN_OUT + 16].copy_from_slice(&77u64.to_ne_bytes());
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20]
            .copy_from_slice(&(name.len() as u32).to_ne_bytes());
        let mut payload = vec![0u8; 64];
        payload[..name.len()].copy_from_slice(name);
        let mut out = Vec::new();
        assert!(rebuild(&header, &payload, &mut out).is_some());
        let mut want = header[..IN_HEADER].to_vec();
        want.extend_from_slice(&[0xed, 1, 0, 0, 0x12, 0, 0, 0]);
        want.extend_from_slice(name);
        assert_eq!(out, want);
        assert_eq!(out.len(), len as usize);
    }

    /// A reply given as fuser gives it (the out header and the data in slices that need not
    /// split where the header ends) lands as the kernel reads it: the header in `in_out`,
    /// the rest in the payload, its size in `ring_ent_in_out`.
    #[test]
    fn a_reply_is_split_into_header_and_payload() {
        let mut header = vec![0u8; HEADER];
        let mut payload = vec![0u8; 32];
        let out: Vec<u8> = (0u8..26).collect();
        let slices = [
            IoSlice::new(&out[..10]),
            IoSlice::new(&out[10..20]),
            IoSlice::new(&out[20..]),
        ];
        write_reply(&mut header, &mut payload, 5, &slices).expect("fits");
        assert_eq!(&header[..OUT_HEADER], &out[..OUT_HEADER]);
        assert_eq!(&payload[..10], &out[OUT_HEADER..]);
        assert_eq!(u32_at(&header, ENT_IN_OUT + 16), 10);
        // Too large for the payload: the request fails with EIO, nothing is sent as data.
        let big = vec![1u8; OUT_HEADER + 33];
        assert!(write_reply(&mut header, &mut payload, 5, &[IoSlice::new(&big)]).is_err());
        assert_eq!(&header[..OUT_HEADER], &error_header(5, libc::EIO));
        assert_eq!(u32_at(&header, ENT_IN_OUT + 16), 0);
    }

    #[test]
    fn sizes_that_do_not_add_up_are_refused() {
        let mut header = vec![0u8; HEADER];
        let payload = vec![0u8; 16];
        // len shorter than the header.
        header[0..4].copy_from_slice(&20u32.to_ne_bytes());
        assert!(rebuild(&header, &payload, &mut Vec::new()).is_none());
        // An operation header over 128 bytes.
        header[0..4].copy_from_slice(&((IN_HEADER + 129) as u32).to_ne_bytes());
        assert!(rebuild(&header, &payload, &mut Vec::new()).is_none());
        // A payload larger than the buffer.
        header[0..4].copy_from_slice(&((IN_HEADER + 17) as u32).to_ne_bytes());
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&17u32.to_ne_bytes());
        assert!(rebuild(&header, &payload, &mut Vec::new()).is_none());
    }

    #[test]
    fn the_registration_carries_two_iovecs() {
        let e = opcode::UringCmd80::new(types::Fd(3), CMD_REGISTER)
            .addr(Some(0x1000))
            .build();
        let e = with_len(e, 2);
        // SAFETY: as in `with_len`.
        let raw: [u8; 128] = unsafe { std::mem::transmute(e) };
        assert_eq!(raw[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(u32::from_ne_bytes([raw[24], raw[25], raw[26], raw[27]]), 2);
        assert_eq!(u64::from_ne_bytes(raw[16..24].try_into().unwrap()), 0x1000);
        // `cmd_op` shares the `off` union at byte 8; the descriptor is at byte 4.
        assert_eq!(
            u32::from_ne_bytes([raw[8], raw[9], raw[10], raw[11]]),
            CMD_REGISTER
        );
        assert_eq!(i32::from_ne_bytes([raw[4], raw[5], raw[6], raw[7]]), 3);
    }
}
