//! Requests read from another transport than `/dev/fuse` (a reftablefs patch to fuser
//! 0.18.0, see PATCHES.md).
//!
//! A session's `/dev/fuse` event loops stay as they are; [`Session::run_with`] also hands
//! a [`Dispatcher`] to the caller, who reads requests elsewhere (FUSE over io_uring), gives
//! each to [`Dispatcher::dispatch`] as `/dev/fuse` would have delivered it, and receives
//! its reply through its own [`TransportReply`].
//!
//! [`Session::run_with`]: crate::Session::run_with

use std::fmt;
use std::io;
use std::io::IoSlice;
use std::sync::Arc;

use crate::Filesystem;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// Where the reply to a request read from another transport goes.
pub trait TransportReply: fmt::Debug + Send + Sync + 'static {
    /// Sends one reply: a `fuse_out_header` followed by the reply's data, the bytes a
    /// reply written to `/dev/fuse` would have. Called once per request, from whichever
    /// thread replies.
    fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()>;
}

/// Dispatches requests read from another transport to the session's filesystem.
pub struct Dispatcher<FS: Filesystem> {
    pub(crate) se: Arc<SessionEventLoop<FS>>,
}

impl<FS: Filesystem> Clone for Dispatcher<FS> {
    fn clone(&self) -> Self {
        Self {
            se: self.se.clone(),
        }
    }
}

impl<FS: Filesystem> fmt::Debug for Dispatcher<FS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Dispatcher")
    }
}

impl<FS: Filesystem> Dispatcher<FS> {
    /// Dispatches one request (`data`: a `fuse_in_header` and its arguments, as read from
    /// `/dev/fuse`); its reply goes to `reply`. Returns `false`, replying nothing, when
    /// `data` is not a request fuser can parse.
    pub fn dispatch(&self, data: &[u8], reply: Arc<dyn TransportReply>) -> bool {
        match RequestWithSender::with_transport(self.se.ch.sender(), reply, data) {
            Some(req) => {
                req.dispatch(&self.se);
                true
            }
            None => false,
        }
    }
}
