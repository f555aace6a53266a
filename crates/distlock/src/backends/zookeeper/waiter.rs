//! A contender's place in a lock's queue: its ephemeral sequential node. The first poll creates
//! it (and the lock's parent, if need be); every poll reads the children and applies the
//! flavour's rule. A contender that does not hold watches the one node it waits for (the one
//! just before its own, so one release wakes one waiter) and polls again when it goes; a
//! semaphore's waiter watches the children and the semaphore's size node (a resize may let it
//! in), and goes by the size that node keeps (see [`size`](super::size)).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::EventType;

use super::nodes::{LockNodes, Standing};
use super::session::{Session, on_session, session_over};
use super::size::{self, Created};
use super::{CONTENDER, Holding, Inner, NAME, PARENT};
use crate::backend::{Attempt, Hold, LockRequest, Waiter, permits_differ};
use crate::backends::queues::records::encode_contender;
use crate::error::{ErrorKind, Result};
use crate::types::{FencingToken, LockKind};

/// This contender's node: named by a random id before it is created, so a create whose answer
/// was lost is found again by name (Curator's "protection").
struct Place {
    session: Arc<Session>,
    id: String,
    /// The node's name under the parent, and its creation zxid (the fencing token once it
    /// holds); `None` until an answer showed the node.
    node: Option<(String, i64)>,
}

pub(super) struct ZkWaiter {
    inner: Arc<Inner>,
    req: LockRequest,
    nodes: LockNodes,
    place: Option<Place>,
    /// What the last poll found this contender waiting for, and the children it saw.
    waits: Option<(Standing, Vec<String>)>,
    /// The one child before this contender's (the holder) is gone, as seen on its session: it
    /// holds, with no need to read the children again (one round trip less per hand-off).
    turn_came: bool,
    /// A semaphore's contender goes by the size kept, whatever it is: once its node was created
    /// under the size it asked (or when its request says so, see
    /// [`LockRequest::follows_resize`]).
    follows: bool,
    /// The size node's last modification as the last poll read it (`None`: no node).
    size_seen: Option<i64>,
}

impl ZkWaiter {
    pub(super) fn new(inner: Arc<Inner>, req: LockRequest) -> Self {
        let follows = req.follows_resize;
        let nodes = LockNodes::new(&inner.config.prefix, &req.name, req.kind);
        ZkWaiter {
            inner,
            req,
            nodes,
            place: None,
            waits: None,
            turn_came: false,
            follows,
            size_seen: None,
        }
    }

    /// Creates this contender's node (and the lock's parent, if it is missing), or finds it if
    /// an earlier create's answer was lost.
    async fn take_place(&mut self) -> Result<()> {
        let place = match self.place.take() {
            Some(p) if !p.session.is_over() => p,
            _ => Place {
                session: self
                    .inner
                    .sessions
                    .get_for(self.req.lease.duration(), self.req.name.as_str())
                    .await?,
                id: contender_id(),
                node: None,
            },
        };
        let session = place.session.clone();
        let id = place.id.clone();
        self.place = Some(place);
        let path = self.nodes.contender(&id);
        // Who put it, for a status (the owner token stays out: anyone may read the node).
        let permits = match self.req.kind {
            LockKind::Permit { permits } => permits,
            _ => 0,
        };
        let record = encode_contender("", permits);
        let mut tries = 0;
        let size_node = self.nodes.size_node().map(str::to_string);
        let node = loop {
            tries += 1;
            let client = session.client()?;
            let created = match &size_node {
                None => client
                    .create(&path, record.as_bytes(), &CONTENDER)
                    .await
                    .map(|(stat, sequence)| {
                        let name = path.rsplit('/').next().unwrap_or_default();
                        (format!("{name}{sequence}"), stat.czxid)
                    }),
                // A semaphore's node is created in one multi with checking its size.
                Some(size_node) => {
                    let created = size::create_contender(
                        &client,
                        &path,
                        record.as_bytes(),
                        size_node,
                        permits,
                        self.follows,
                    )
                    .await?;
                    match created {
                        Created::Node(name, czxid, size) => {
                            self.nodes.with_permits(size);
                            Ok((name, czxid))
                        }
                        Created::Differs(size) => {
                            self.place = None;
                            return Err(permits_differ(NAME, &self.req.name, size, permits));
                        }
                        Created::Failed(e) => Err(e),
                    }
                }
            };
            match created {
                Ok(node) => break node,
                Err(zookeeper_client::Error::NoNode) if tries < 10 => {
                    // The parent is missing (never made, or reaped as an empty container).
                    match client.mkdir(self.nodes.parent(), &PARENT).await {
                        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => {
                            return Err(on_session("creating the lock's node", e));
                        }
                    }
                }
                Err(e) => {
                    let error = on_session("taking a place in the lock's queue", e);
                    if error.kind() != ErrorKind::Connection || tries >= 10 {
                        return Err(error);
                    }
                    // The create may have landed with its answer lost: look for it by name.
                    if let Some(found) = self.find_own(&session, &id).await? {
                        break found;
                    }
                    tokio::time::sleep(Duration::from_millis(10 * tries)).await;
                }
            }
        };
        if let Some(place) = self.place.as_mut() {
            place.node = Some(node);
        }
        // Queued under the size it asked: from now on it goes by the size kept.
        self.follows = true;
        Ok(())
    }

    /// This contender's node and its creation zxid, if a create of it landed.
    async fn find_own(&self, session: &Session, id: &str) -> Result<Option<(String, i64)>> {
        let children = self.inner.children(session, self.nodes.parent()).await?;
        let Some(name) = self.nodes.find(&children, id) else {
            return Ok(None);
        };
        let path = format!("{}/{name}", self.nodes.parent());
        let stat = self
            .inner
            .retrying(session, "finding the contender's node", |client| {
                let path = path.clone();
                async move { client.check_stat(&path).await }
            })
            .await?;
        Ok(stat.map(|s| (name.to_string(), s.czxid)))
    }

    fn path(&self, child: &str) -> String {
        format!("{}/{child}", self.nodes.parent())
    }
}

/// A new contender's id: 128 random bits, shaped as a UUID like Curator's protection ids.
fn contender_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random source failed");
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[async_trait]
impl Waiter for ZkWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        self.waits = None;
        self.inner
            .holdings
            .refuse_mixed_read_write(&self.req, NAME)?;
        if let Some(place) = &self.place
            && place.session.is_over()
        {
            let queued = place.node.is_some();
            self.place = None;
            if queued {
                // Its node went with the session: the place in the queue is lost.
                return Err(session_over());
            }
        }
        if self.place.as_ref().is_none_or(|p| p.node.is_none()) {
            self.take_place().await?;
        }
        let place = self.place.as_ref().expect("placed");
        let (mine, czxid) = place.node.clone().expect("placed");
        let session = place.session.clone();
        // Seen through this session, the deletion proves it was alive then, so its node was
        // there, with nothing before it.
        let (standing, children) = if std::mem::take(&mut self.turn_came) {
            (Standing::Holds, Vec::new())
        } else if let Some(size_node) = self.nodes.size_node().map(str::to_string) {
            // The children counted against the size in one snapshot: a holder is one of the
            // first N under the size N kept at that moment.
            let (children, size) =
                size::children_and_size(&self.inner, &session, self.nodes.parent(), &size_node)
                    .await?;
            if let Some(size) = size {
                self.nodes.with_permits(size.permits);
            }
            self.size_seen = size.map(|s| s.mzxid);
            (self.nodes.standing(&children, &mine), children)
        } else {
            let children = self.inner.children(&session, self.nodes.parent()).await?;
            (self.nodes.standing(&children, &mine), children)
        };
        match standing {
            Standing::Gone if session.is_over() => {
                self.place = None;
                Err(session_over())
            }
            Standing::Gone => {
                // Deleted by hand: queue again.
                self.place = None;
                Ok(Attempt::Held {
                    retry_after: Some(Duration::ZERO),
                })
            }
            Standing::Holds => {
                // The read showed our node, so the session was alive then; our clock must agree
                // that it still is.
                if session.is_over() {
                    self.place = None;
                    return Err(session_over());
                }
                self.place = None;
                // Its node deleted by someone else (a forced release) ends it too.
                let ended = session.holding_ended(self.path(&mine), czxid);
                let valid_until = session.valid_until();
                self.inner.holdings.hold(
                    czxid,
                    Holding {
                        name: self.req.name.clone(),
                        kind: self.req.kind,
                        owner: self.req.owner.clone(),
                        key: self.path(&mine),
                        session,
                    },
                );
                Ok(Attempt::Acquired {
                    token: FencingToken(czxid as u64),
                    hold: Hold::Session {
                        ended,
                        valid_until: Some(valid_until),
                    },
                })
            }
            waiting => {
                self.waits = Some((waiting, children));
                Ok(Attempt::Held { retry_after: None })
            }
        }
    }

    async fn changed(&mut self) -> Result<()> {
        let (Some((standing, seen)), Some(place)) = (self.waits.take(), self.place.as_ref()) else {
            return Ok(());
        };
        let session = place.session.clone();
        let client = session.client()?;
        let next_after = matches!(standing, Standing::NextAfter(_));
        let watcher = match standing {
            Standing::WaitsFor(child) | Standing::NextAfter(child) => {
                let what = "watching the contender ahead";
                match client.check_and_watch_stat(&self.path(&child)).await {
                    // Gone already: poll again.
                    Ok((None, _)) => {
                        self.turn_came = next_after;
                        return Ok(());
                    }
                    Ok((Some(_), watcher)) => watcher,
                    Err(e) => return Err(on_session(what, e)),
                }
            }
            _ => {
                let what = "watching the lock's queue";
                match client.get_and_watch_children(self.nodes.parent()).await {
                    Ok((children, _, _)) if children != seen => return Ok(()),
                    Ok((_, _, watcher)) => watcher,
                    Err(zookeeper_client::Error::NoNode) => return Ok(()),
                    Err(e) => return Err(on_session(what, e)),
                }
            }
        };
        // A semaphore's waiter also watches its size: a growth may let it in.
        let resized = match self.nodes.size_node() {
            Some(size_node) => match client.check_and_watch_stat(size_node).await {
                Ok((stat, _)) if stat.map(|s| s.mzxid) != self.size_seen => return Ok(()),
                Ok((_, watcher)) => Some(watcher),
                Err(e) => return Err(on_session("watching the semaphore's size", e)),
            },
            None => None,
        };
        drop(client);
        // The deletion, a resize, a session event, or the session over: poll again.
        tokio::select! {
            event = watcher.changed() => {
                self.turn_came = next_after && event.event_type == EventType::NodeDeleted;
            }
            _ = async {
                match resized {
                    Some(watcher) => { watcher.changed().await; }
                    None => std::future::pending().await,
                }
            } => {}
            _ = session.ended() => {}
        }
        Ok(())
    }

    async fn leave(&mut self) -> Result<()> {
        self.waits = None;
        self.turn_came = false;
        let Some(place) = self.place.take() else {
            return Ok(());
        };
        if place.session.is_over() {
            return Ok(());
        }
        // Without an answer, a create may still have landed: the node goes if it is there.
        let node = match place.node {
            Some((name, _)) => Some(name),
            None => self
                .find_own(&place.session, &place.id)
                .await?
                .map(|(name, _)| name),
        };
        if let Some(name) = node {
            self.inner
                .delete_surely(self.path(&name), place.session)
                .await?;
        }
        Ok(())
    }
}
