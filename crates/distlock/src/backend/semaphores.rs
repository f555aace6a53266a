//! Semaphore sizing: what a store that keeps semaphores ([`Kinds`](super::Kinds) with
//! [`LockKind::Permit`](crate::LockKind::Permit)) implements besides taking and releasing
//! permits, which the lock contract covers. The size of a semaphore is kept with it in the
//! store from its first use; [`Semaphores`] reads it with the permits taken, and changes it for
//! every caller.
//!
//! A store with semaphores implements [`Semaphores`] and answers it from
//! [`Backend::semaphores`](super::Backend::semaphores); one without them (or a configuration
//! without them, such as SQL's `?lock=session`) answers `None`.

use async_trait::async_trait;

use super::LockRequest;
use crate::error::{Error, ErrorKind, Result};
use crate::types::LockName;

/// A semaphore as its store counts it ([`Semaphores::count_permits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PermitCount {
    /// The size the store keeps; `None` if the semaphore was never used.
    pub size: Option<u32>,
    /// The permits taken: live holdings, and where waiters hold places among the holders
    /// (ZooKeeper's nodes, etcd's keys), those too.
    pub taken: u32,
}

impl PermitCount {
    /// The permits free for a caller asking for a semaphore of `asked` permits, or
    /// [`permits_differ`] if the store keeps another size. 0 while more are held than a shrink
    /// left; a semaphore never used would have the caller's size.
    pub fn free(self, backend: &'static str, name: &LockName, asked: u32) -> Result<u32> {
        match self.size {
            Some(size) if size != asked => Err(permits_differ(backend, name, size, asked)),
            size => Ok(size.unwrap_or(asked).saturating_sub(self.taken)),
        }
    }
}

/// The error of a caller asking `asked` permits of the semaphore `name`, whose size the store
/// keeps as `stored` ([`ErrorKind::InvalidInput`], naming both): what a backend answers instead
/// of a permit.
pub fn permits_differ(backend: &'static str, name: &LockName, stored: u32, asked: u32) -> Error {
    let plural = if stored == 1 { "" } else { "s" };
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "semaphore {name:?} has {stored} permit{plural}, and this caller asks for {asked}: \
             a semaphore's size is kept with it from its first use, and every caller must ask \
             the same; fix the caller's count, or change the size for everyone with \
             Client::set_semaphore_permits"
        ),
    )
    .with_backend(backend)
}

/// Reading and changing a semaphore's size in the store.
///
/// # Contract
///
/// * The size is the one a semaphore's takes are judged by: a take asking another size is
///   refused ([`permits_differ`]) unless it follows a resize
///   ([`LockRequest::follows_resize`]).
/// * [`set_permits`](Semaphores::set_permits) is one atomic step, and wakes the semaphore's
///   waiters.
#[async_trait]
pub trait Semaphores: Send + Sync {
    /// The semaphore `req` names as the store counts it (`req.kind` is
    /// [`LockKind::Permit`](crate::LockKind::Permit)): the size it keeps and the permits taken.
    /// The core answers [`Lock::available_permits`](crate::Lock::available_permits) from it, by
    /// one rule for every store.
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount>;

    /// Sets the size the store keeps for the semaphore `name` to `permits` (at least 1),
    /// whatever it was, in one atomic step, and wakes the semaphore's waiters (a larger size may
    /// let them in). Holdings are left as they are: after a shrink, permits beyond the new size
    /// stay held until released, and new takes wait until fewer than `permits` are held.
    /// Answers the size it had (`None`: none was kept yet).
    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>>;
}
