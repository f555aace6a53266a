//! What a status shows and what a forced release removes, read off the lock's children by the
//! same rules its contenders apply (see [`nodes`](super::nodes)).
//!
//! A holding's token is its node's creation zxid, its holder the record the contender wrote into
//! its node, `since` the node's `ctime` (when it joined the queue), and it has no lease of its own
//! (the session keeps it). A forced release deletes the holders' nodes and sets the (empty) data
//! of the lock's parent in one `multi`: that write's zxid is the zxid of the deletion, above
//! every removed node's creation zxid, and every node created later has a larger one.

use std::sync::Arc;

use futures_util::future::join_all;
use zookeeper_client::{MultiWriteError, MultiWriteResult, Stat};

use super::nodes::{LockNodes, Parent, first_in_sequence, parse_parent};
use super::session::{Session, on_session};
use super::{Inner, NAME};
use crate::backends::queues::records::decode_contender;
use crate::error::{Error, ErrorKind, Result};
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

/// How many times a forced release reads the queue again after a contender it was about to
/// delete left first.
const RACES: u32 = 10;

/// See [`crate::backend::Inspection::status`].
pub(super) async fn status(inner: &Arc<Inner>, which: &Selection) -> Result<Vec<LockStatus>> {
    let session = inner.sessions.get().await?;
    let parents: Vec<(LockName, Parent)> = match which {
        Selection::Name(name) => [Parent::Shared, Parent::Fair, Parent::Semaphore]
            .into_iter()
            .map(|p| (name.clone(), p))
            .collect(),
        Selection::Prefix(_) => {
            let root = match inner.config.prefix.as_str() {
                "" => "/",
                prefix => prefix,
            };
            let mut found: Vec<(LockName, Parent)> = inner
                .children(&session, root)
                .await?
                .iter()
                .filter_map(|child| parse_parent(child))
                .filter(|(name, _)| which.matches(name))
                // A node no lock name makes (too long, say) is nobody's lock.
                .filter_map(|(name, parent)| Some((LockName::new(name).ok()?, parent)))
                .collect();
            found.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            found
        }
    };
    let mut statuses = Vec::new();
    for (name, parent) in parents {
        statuses.extend(parent_status(inner, &session, &name, parent).await?);
    }
    Ok(statuses)
}

/// The flavours of `name` whose contenders live under `parent`, as their children show them.
async fn parent_status(
    inner: &Arc<Inner>,
    session: &Session,
    name: &LockName,
    parent: Parent,
) -> Result<Vec<LockStatus>> {
    let path = LockNodes::new(&inner.config.prefix, name, parent.kinds(0)[0]);
    let children = inner.children(session, path.parent()).await?;
    if children.is_empty() {
        return Ok(Vec::new());
    }
    let permits = match parent {
        Parent::Semaphore => semaphore_size(inner, session, &path, &children).await?,
        _ => 0,
    };
    let mut statuses = Vec::new();
    for kind in parent.kinds(permits) {
        let nodes = LockNodes::new(&inner.config.prefix, name, kind);
        let (holders, waiters, _) = nodes.holders(&children);
        if holders.is_empty() && waiters == 0 {
            continue;
        }
        let mut status = LockStatus::new(name.as_str(), kind);
        // A holder gone between the two reads is no longer held: left out.
        status.holdings = read_holders(inner, session, &nodes, &holders)
            .await?
            .into_iter()
            .flatten()
            .map(|(holding, _)| holding)
            .collect();
        status.waiters = Some(waiters);
        statuses.push(status);
    }
    Ok(statuses)
}

/// A semaphore's size: the one its size node keeps, else (a semaphore of a distlock version that
/// kept none) the count its oldest contender recorded, else 0 (it then has no holders a status
/// can tell).
async fn semaphore_size(
    inner: &Arc<Inner>,
    session: &Session,
    nodes: &LockNodes,
    children: &[String],
) -> Result<u32> {
    if let Some(path) = nodes.size_node()
        && let Some(size) = super::size::read(inner, session, path).await?
    {
        return Ok(size.permits);
    }
    recorded_permits(inner, session, nodes, children).await
}

/// The permit count the semaphore's oldest contender recorded (every holder of one semaphore
/// uses the same): 0 if it recorded none.
async fn recorded_permits(
    inner: &Arc<Inner>,
    session: &Session,
    nodes: &LockNodes,
    children: &[String],
) -> Result<u32> {
    let first: Vec<&str> = first_in_sequence(children).into_iter().collect();
    let read = read_holders(inner, session, nodes, &first).await?;
    Ok(read
        .into_iter()
        .flatten()
        .find_map(|(_, data)| decode_contender(&data).permits)
        .unwrap_or(0))
}

/// Each named child's holding (`None`: gone by now) and its data, read in one pipelined batch.
async fn read_holders(
    inner: &Arc<Inner>,
    session: &Session,
    nodes: &LockNodes,
    children: &[&str],
) -> Result<Vec<Option<(Holding, Vec<u8>)>>> {
    let reads = children.iter().map(|child| {
        let path = format!("{}/{child}", nodes.parent());
        inner.retrying(session, "reading a holder's node", move |client| {
            let path = path.clone();
            async move {
                match client.get_data(&path).await {
                    Ok((data, stat)) => Ok(Some((holding(&data, &stat), data))),
                    Err(zookeeper_client::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
    });
    join_all(reads).await.into_iter().collect()
}

fn holding(data: &[u8], stat: &Stat) -> Holding {
    let mut holding = Holding::new(FencingToken(stat.czxid as u64)).since_unix_ms(Some(stat.ctime));
    holding.holder = decode_contender(data).holder;
    holding
}

/// See [`crate::backend::Inspection::force_release`].
pub(super) async fn force_release(
    inner: &Arc<Inner>,
    name: &LockName,
    kind: LockKind,
) -> Result<ForcedRelease> {
    let session = inner.sessions.get().await?;
    let mut nodes = LockNodes::new(&inner.config.prefix, name, kind);
    for _ in 0..RACES {
        let children = inner.children(&session, nodes.parent()).await?;
        if let LockKind::Permit { permits: asked } = kind {
            // Whatever count the caller gave, the holders are the first N of the size kept.
            let permits = match semaphore_size(inner, &session, &nodes, &children).await? {
                0 => asked,
                kept => kept,
            };
            nodes = LockNodes::new(&inner.config.prefix, name, LockKind::Permit { permits });
        }
        let (holders, _, next) = nodes.holders(&children);
        let read = read_holders(inner, &session, &nodes, &holders).await?;
        let Some(removed) = read
            .into_iter()
            .map(|r| r.map(|(holding, _)| holding))
            .collect::<Option<Vec<Holding>>>()
        else {
            continue; // A holder left meanwhile: read the queue again.
        };
        // The first contender that does not hold may hold next with the token it has now,
        // older than the deletion: the fence stays below it.
        let next_czxid = match next {
            None => None,
            Some(next) => {
                let path = format!("{}/{next}", nodes.parent());
                let stat = inner
                    .retrying(&session, "reading the next contender's node", |client| {
                        let path = path.clone();
                        async move { client.check_stat(&path).await }
                    })
                    .await?;
                match stat {
                    Some(stat) => Some(stat.czxid),
                    None => continue, // It left: read the queue again.
                }
            }
        };
        let client = session.client()?;
        let mut multi = client.new_multi_writer();
        let prepare = |e| on_session("preparing the forced release", e);
        for child in &holders {
            multi
                .add_delete(&format!("{}/{child}", nodes.parent()), None)
                .map_err(prepare)?;
        }
        // Changes nothing a contender reads (the parent's data is empty, and Curator's too):
        // it is there for the zxid its answer carries.
        multi
            .add_set_data(nodes.parent(), &[], None)
            .map_err(prepare)?;
        let deleted_at = match multi.commit().await {
            Ok(results) => match results.last() {
                Some(MultiWriteResult::SetData { stat }) => stat.mzxid,
                _ => return Err(unexpected("the forced release's answer lacks its zxid")),
            },
            Err(MultiWriteError::OperationFailed {
                source: zookeeper_client::Error::NoNode,
                ..
            }) => {
                if holders.is_empty() && children.is_empty() {
                    // No parent: nobody ever queued, or every contender is gone and ZooKeeper
                    // reaped it. Every later node is created after this read of the root.
                    let root = match inner.config.prefix.as_str() {
                        "" => "/",
                        prefix => prefix,
                    };
                    let stat = inner
                        .retrying(&session, "reading the chroot", |client| {
                            let root = root.to_string();
                            async move { client.check_stat(&root).await }
                        })
                        .await?;
                    let fence = stat.map_or(0, |s| s.pzxid.max(s.mzxid));
                    return Ok(ForcedRelease::new(Vec::new(), FencingToken(fence as u64)));
                }
                continue; // A holder left, or the parent was reaped: read again.
            }
            Err(MultiWriteError::OperationFailed { source, .. })
            | Err(MultiWriteError::RequestFailed { source }) => {
                // Not sent again on a connection fault: had it landed, the holders it removed
                // would be reported as never there.
                return Err(on_session("forcing a release", source));
            }
        };
        let fence = next_czxid.map_or(deleted_at, |next| deleted_at.min(next - 1));
        return Ok(ForcedRelease::new(removed, FencingToken(fence as u64)));
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("lock {name:?}: its holders changed under {RACES} forced releases in a row"),
    )
    .with_backend(NAME))
}

fn unexpected(what: &str) -> Error {
    Error::new(ErrorKind::Backend, what.to_string()).with_backend(NAME)
}
