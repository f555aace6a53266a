//! Count-down latches in ZooKeeper: the persistent node `<chroot>/<name>%latch` (the name
//! escaped as lock names are) holds the count in decimal; no node means 0. Setting creates it
//! (only a create can start a count, so two setters never both win); each count-down is a
//! compare-and-set on the node's version (`setData` with the version read), and the one that
//! reaches 0 deletes the node (by version), so a finished latch leaves nothing behind. A write
//! that lost a race reads again. Waiters hold a one-shot watch on the node (armed again at each
//! event): every change wakes them, and they read the count again.

use std::sync::Arc;

use zookeeper_client::{Acls, CreateMode, CreateOptions, Error as Zk};

use super::nodes::escape;
use super::session::on_session;
use super::{Inner, NAME, PARENT};
use crate::backend::Wakeups;
use crate::backends::queues::records::{decode_count, latch_raced};
use crate::error::Result;
use crate::types::LockName;

const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
/// How often a step that lost a compare-and-set race is tried again before giving up.
const RACES: u32 = 1000;

fn path(prefix: &str, latch: &LockName) -> String {
    format!("{prefix}/{}%latch", escape(latch.as_str()))
}

/// The count and the node's version; `None` when there is no node (count 0).
async fn read(inner: &Inner, path: &str) -> Result<Option<(u64, i32)>> {
    let session = inner.sessions.get().await?;
    let found = inner
        .retrying(&session, "reading the latch", |client| {
            let path = path.to_string();
            async move {
                match client.get_data(&path).await {
                    Ok((data, stat)) => Ok(Some((data, stat.version))),
                    Err(Zk::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await?;
    match found {
        Some((data, version)) => Ok(Some((decode_count(&data, NAME)?, version))),
        None => Ok(None),
    }
}

/// See [`crate::backend::Latches::latch_set`].
pub(super) async fn set(inner: &Inner, latch: &LockName, count: u64) -> Result<bool> {
    let path = path(&inner.config.prefix, latch);
    let data = count.to_string();
    for _ in 0..RACES {
        let session = inner.sessions.get().await?;
        let client = session.client()?;
        match client.create(&path, data.as_bytes(), &PERSISTENT).await {
            Ok(_) => return Ok(true),
            Err(Zk::NodeExists) => {}
            Err(Zk::NoNode) => {
                // The chroot is missing.
                if let Some((parent, _)) = path.rsplit_once('/')
                    && !parent.is_empty()
                {
                    match client.mkdir(parent, &PARENT).await {
                        Ok(()) | Err(Zk::NodeExists) => {}
                        Err(e) => return Err(on_session("creating the chroot", e)),
                    }
                }
                continue;
            }
            // Not repeated on a connection fault: a create that landed would read as running.
            Err(e) => return Err(on_session("setting the latch", e)),
        }
        match read(inner, &path).await? {
            None => continue,
            Some((n, _)) if n > 0 => return Ok(false),
            // A node left at 0 (not written by this backend, which deletes it at 0).
            Some((_, version)) => {
                match client.set_data(&path, data.as_bytes(), Some(version)).await {
                    Ok(_) => return Ok(true),
                    Err(Zk::BadVersion | Zk::NoNode) => {}
                    Err(e) => return Err(on_session("setting the latch", e)),
                }
            }
        }
    }
    Err(latch_raced(latch, RACES, NAME))
}

/// See [`crate::backend::Latches::latch_count_down`].
pub(super) async fn count_down(inner: &Inner, latch: &LockName) -> Result<u64> {
    let path = path(&inner.config.prefix, latch);
    for _ in 0..RACES {
        let Some((count, version)) = read(inner, &path).await? else {
            return Ok(0);
        };
        let session = inner.sessions.get().await?;
        let client = session.client()?;
        // Not repeated on a connection fault: a step that landed would count down twice.
        let written = if count <= 1 {
            client.delete(&path, Some(version)).await.map(|()| 0)
        } else {
            let after = count - 1;
            client
                .set_data(&path, after.to_string().as_bytes(), Some(version))
                .await
                .map(|_| after)
        };
        match written {
            Ok(after) => return Ok(after),
            Err(Zk::BadVersion | Zk::NoNode) => {}
            Err(e) => return Err(on_session("counting the latch down", e)),
        }
    }
    Err(latch_raced(latch, RACES, NAME))
}

/// See [`crate::backend::Latches::latch_count`].
pub(super) async fn count(inner: &Inner, latch: &LockName) -> Result<u64> {
    let path = path(&inner.config.prefix, latch);
    Ok(read(inner, &path).await?.map_or(0, |(count, _)| count))
}

/// Wake-ups for every change of the latch's node (the last count-down deletes it).
pub(super) async fn watch(inner: Arc<Inner>, latch: &LockName) -> Result<Wakeups> {
    let path = path(&inner.config.prefix, latch);
    super::election::watch_node(inner, path).await
}
