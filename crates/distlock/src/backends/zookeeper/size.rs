//! A semaphore's size: the persistent node `<name>%permits` beside the semaphore's parent
//! `<name>%sem`, holding the size in decimal.
//!
//! Not the parent's data: the parent is a container node, which ZooKeeper deletes once its last
//! contender is gone, and a size that went with the last permit would let a caller with another
//! count set its own at the next quiet moment. The size node has no such end: it is created by
//! the semaphore's first take (in one `multi` with that take's contender node) and changed only
//! by [`set_permits`]; a take checks it in one `multi` with creating its node (see
//! [`create_contender`]), so no node is ever created against a size other than the one read.

use zookeeper_client::{
    Acls, Client, CreateMode, CreateOptions, MultiReadResult, MultiWriteError, MultiWriteResult,
    Stat,
};

use super::session::{Session, on_session};
use super::{CONTENDER, Inner, NAME, PARENT};
use crate::error::{Error, ErrorKind, Result};
use crate::types::LockName;

/// The size node outlives every contender and session.
const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());

/// How many times a step reads the size again after it changed under it.
const RACES: u32 = 10;

/// The size kept in a size node's data.
fn decode(data: &[u8]) -> Result<u32> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Backend,
                "a semaphore whose stored size is not a positive number",
            )
            .with_backend(NAME)
        })
}

/// A size as read: the size, and the node's version and last modification (a waiter compares
/// it with what its watch sees, to tell a resize it has not seen yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Size {
    pub(super) permits: u32,
    pub(super) version: i32,
    pub(super) mzxid: i64,
}

impl Size {
    fn of(data: &[u8], stat: &Stat) -> Result<Size> {
        Ok(Size {
            permits: decode(data)?,
            version: stat.version,
            mzxid: stat.mzxid,
        })
    }
}

/// The size kept at `path` (`None`: the semaphore was never used).
pub(super) async fn read(inner: &Inner, session: &Session, path: &str) -> Result<Option<Size>> {
    let read = inner
        .retrying(session, "reading a semaphore's size", |client| {
            let path = path.to_string();
            async move {
                match client.get_data(&path).await {
                    Ok(found) => Ok(Some(found)),
                    Err(zookeeper_client::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await?;
    read.map(|(data, stat)| Size::of(&data, &stat)).transpose()
}

/// The children of a semaphore's `parent` and its size at `path`, in one multi-read (one
/// snapshot of one server, so the holders are counted against the size they were under).
pub(super) async fn children_and_size(
    inner: &Inner,
    session: &Session,
    parent: &str,
    path: &str,
) -> Result<(Vec<String>, Option<Size>)> {
    let results = inner
        .retrying(session, "reading the semaphore's queue", |client| {
            let (parent, path) = (parent.to_string(), path.to_string());
            async move {
                let mut reader = client.new_multi_reader();
                reader.add_get_children(&parent)?;
                reader.add_get_data(&path)?;
                reader.commit().await
            }
        })
        .await?;
    let mut results = results.into_iter();
    let children = match results.next() {
        Some(MultiReadResult::Children { children }) => children,
        // No parent: no contenders.
        _ => Vec::new(),
    };
    let size = match results.next() {
        Some(MultiReadResult::Data { data, stat }) => Some(Size::of(&data, &stat)?),
        _ => None,
    };
    Ok((children, size))
}

/// What [`create_contender`] did.
pub(super) enum Created {
    /// The contender's node (its name under the parent, its creation zxid) and the size it was
    /// created under.
    Node(String, i64, u32),
    /// The size kept is not the one asked (and the caller must match it): nothing was created.
    Differs(u32),
    /// ZooKeeper refused the contender's create (its parent is missing, the connection broke):
    /// the caller handles it as a plain create's error.
    Failed(zookeeper_client::Error),
}

/// Creates the contender node `path` (sequential) with `record` in one `multi` with checking the
/// semaphore's size at `size_path` (or, on its first use, creating it as `asked`): the size
/// read is the one the node is created under. Unless `follows`, a size other than `asked`
/// creates nothing. Reads the size again, up to a few times, when it changed in between.
pub(super) async fn create_contender(
    client: &Client,
    path: &str,
    record: &[u8],
    size_path: &str,
    asked: u32,
    follows: bool,
) -> Result<Created> {
    let on_zk = |e| on_session("taking a place in the semaphore's queue", e);
    for _ in 0..RACES {
        let kept = match client.get_data(size_path).await {
            Ok((data, stat)) => Some((decode(&data)?, stat.version)),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => return Ok(Created::Failed(e)),
        };
        let mut multi = client.new_multi_writer();
        let size = match kept {
            Some((size, _)) if size != asked && !follows => return Ok(Created::Differs(size)),
            Some((size, version)) => {
                multi.add_check_version(size_path, version).map_err(on_zk)?;
                size
            }
            None => {
                let data = asked.to_string();
                multi
                    .add_create(size_path, data.as_bytes(), &PERSISTENT)
                    .map_err(on_zk)?;
                asked
            }
        };
        multi.add_create(path, record, &CONTENDER).map_err(on_zk)?;
        match multi.commit().await {
            Ok(results) => {
                let Some(MultiWriteResult::Create { path, stat }) = results.into_iter().last()
                else {
                    return Err(unexpected("a contender's create answered no node"));
                };
                let czxid = if stat.is_invalid() {
                    // Servers with ZOOKEEPER-4026 answer a create inside a multi without its
                    // stat: read it.
                    match client.check_stat(&path).await {
                        Ok(Some(stat)) => stat.czxid,
                        Ok(None) => return Err(unexpected("a contender's node vanished")),
                        Err(e) => return Ok(Created::Failed(e)),
                    }
                } else {
                    stat.czxid
                };
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                return Ok(Created::Node(name, czxid, size));
            }
            // Creating the size found no chroot: the caller creates the semaphore's parent,
            // and the chroot with it, as for a missing parent.
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source: zookeeper_client::Error::NoNode,
            }) if kept.is_none() => {
                return Ok(Created::Failed(zookeeper_client::Error::NoNode));
            }
            // The size was created first by another caller, changed, or deleted: read again.
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source:
                    zookeeper_client::Error::NodeExists
                    | zookeeper_client::Error::BadVersion
                    | zookeeper_client::Error::NoNode,
            }) => {}
            Err(MultiWriteError::OperationFailed { source, .. })
            | Err(MultiWriteError::RequestFailed { source }) => {
                return Ok(Created::Failed(source));
            }
        }
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("a semaphore's size changed under {RACES} takes in a row"),
    )
    .with_backend(NAME))
}

/// See [`crate::backend::Semaphores::set_permits`]: sets the size node at `path` to `permits`
/// (creating it, and the chroot, if need be) by compare-and-set on the version read; the write
/// wakes every waiter's watch on it. Not sent again after a connection fault (had it landed, the
/// size it had would be answered as the new one).
pub(super) async fn set_permits(
    inner: &Inner,
    name: &LockName,
    path: &str,
    permits: u32,
) -> Result<Option<u32>> {
    let session = inner.sessions.get().await?;
    let data = permits.to_string();
    let what = "changing a semaphore's size";
    for _ in 0..RACES {
        let had = read(inner, &session, path).await?;
        let client = session.client()?;
        let written = match had {
            Some(size) => client
                .set_data(path, data.as_bytes(), Some(size.version))
                .await
                .map(|_| ()),
            None => client
                .create(path, data.as_bytes(), &PERSISTENT)
                .await
                .map(|_| ()),
        };
        match written {
            Ok(()) => return Ok(had.map(|size| size.permits)),
            // No chroot yet: make it (as a lock's parent would), then create.
            Err(zookeeper_client::Error::NoNode) if had.is_none() => {
                if let Some((chroot, _)) = path.rsplit_once('/')
                    && !chroot.is_empty()
                {
                    match client.mkdir(chroot, &PARENT).await {
                        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => return Err(on_session("creating the chroot", e)),
                    }
                }
            }
            // Changed, created or deleted by another meanwhile: read again.
            Err(
                zookeeper_client::Error::BadVersion
                | zookeeper_client::Error::NodeExists
                | zookeeper_client::Error::NoNode,
            ) => {}
            Err(e) => return Err(on_session(what, e)),
        }
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("semaphore {name:?}: its size changed under {RACES} resizes in a row"),
    )
    .with_backend(NAME))
}

fn unexpected(what: &str) -> Error {
    Error::new(ErrorKind::Backend, what.to_string()).with_backend(NAME)
}
