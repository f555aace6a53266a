//! What the stores whose locks are queues of contender entries held by a session (etcd keys,
//! ZooKeeper sequential nodes) share: the client's holdings, found again by fencing token, and
//! the read-write rules such a queue cannot honour; and the entries a session's periodic check
//! reads to find holdings someone else removed (a forced release).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::backend::{LockRequest, Signal};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{LockKind, LockName, OwnerToken};

/// A lock this client holds: its entry in the store (`key`), held by `session`.
pub(crate) struct Holding<S> {
    pub(crate) name: LockName,
    pub(crate) kind: LockKind,
    pub(crate) owner: OwnerToken,
    pub(crate) key: String,
    pub(crate) session: Arc<S>,
}

/// The entries of a session's holdings that its periodic check (ZooKeeper's session check,
/// etcd's keep-alive) reads along with it, so a holding whose entry someone else deleted ends:
/// no request per acquisition, and no watch beside the successor's.
#[derive(Default)]
pub(crate) struct Watched(Mutex<Vec<WatchedEntry>>);

struct WatchedEntry {
    key: String,
    token: i64,
    gone: tokio::sync::oneshot::Sender<()>,
}

impl Watched {
    /// Resolves when the check finds `key` (created as `token`) gone or replaced, or when
    /// `session_ended` does (the check then ends and drops the sender too). Dropping the signal
    /// stops the reads of that entry.
    pub(crate) fn holding_ended(&self, key: String, token: i64, session_ended: Signal) -> Signal {
        let (gone, found_gone) = tokio::sync::oneshot::channel();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(WatchedEntry { key, token, gone });
        Box::pin(async move {
            tokio::select! {
                _ = found_gone => {}
                () = session_ended => {}
            }
        })
    }

    /// The entries to read now (those whose holding still listens), with their tokens.
    pub(crate) fn to_check(&self) -> Vec<(String, i64)> {
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|e| !e.gone.is_closed());
        entries.iter().map(|e| (e.key.clone(), e.token)).collect()
    }

    /// Ends the holdings of `checked` (as [`to_check`](Self::to_check) gave them) whose read
    /// found them gone: `None`, or an entry created as another token. A holding is its key *and*
    /// token: etcd's contender names are used again once this client deleted its own key, so a
    /// read that finds a released holding's key gone, or put anew, says nothing of a later
    /// holding on the same name.
    pub(crate) fn found(&self, checked: &[(String, i64)], now: &[Option<i64>]) {
        let gone: Vec<(&str, i64)> = checked
            .iter()
            .zip(now)
            .filter(|((_, token), now)| **now != Some(*token))
            .map(|((key, token), _)| (key.as_str(), *token))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for entry in std::mem::take(&mut *entries) {
            if gone.contains(&(entry.key.as_str(), entry.token)) {
                let _ = entry.gone.send(());
            } else {
                entries.push(entry);
            }
        }
    }
}

/// This client's holdings by fencing token: release and confirmation name a holding by token,
/// and each contender's entry is its own.
pub(crate) struct Holdings<S>(Mutex<HashMap<i64, Holding<S>>>);

impl<S> Default for Holdings<S> {
    fn default() -> Self {
        Holdings(Mutex::new(HashMap::new()))
    }
}

impl<S> Holdings<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Holding<S>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn hold(&self, token: i64, holding: Holding<S>) {
        self.lock().insert(token, holding);
    }

    /// Whether `owner` holds `name` as `kind` in this client.
    pub(crate) fn holds_as(&self, name: &LockName, owner: &OwnerToken, kind: LockKind) -> bool {
        self.lock()
            .values()
            .any(|h| h.name == *name && h.owner == *owner && h.kind == kind)
    }

    /// The entry and session of `owner`'s holding `token` of `name`.
    pub(crate) fn find(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        token: i64,
    ) -> Option<(String, Arc<S>)> {
        let held = self.lock();
        let h = held.get(&token)?;
        (h.name == *name && h.owner == *owner).then(|| (h.key.clone(), h.session.clone()))
    }

    /// Takes `owner`'s holding of `name` out: the one `token` names, or any when `None`.
    pub(crate) fn take(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        token: Option<i64>,
    ) -> Option<(i64, String, Arc<S>)> {
        let mut held = self.lock();
        let token = match token {
            Some(t) => t,
            None => {
                *held
                    .iter()
                    .find(|(_, h)| h.name == *name && h.owner == *owner)?
                    .0
            }
        };
        let h = held.get(&token)?;
        if h.name != *name || h.owner != *owner {
            return None;
        }
        held.remove(&token).map(|h| (token, h.key, h.session))
    }

    /// Refuses what a queue of contenders in arrival order cannot do without deadlock or a
    /// broken promise: a holder of the read lock taking the write lock (two readers upgrading
    /// would wait for each other), and a holder of the write lock taking the read lock (its
    /// reader entry would queue behind every older waiting writer, so it would wait for itself,
    /// or, let in, could not keep an older waiting writer out after the write lock's release).
    pub(crate) fn refuse_mixed_read_write(
        &self,
        req: &LockRequest,
        backend: &'static str,
    ) -> Result<()> {
        let (held, why) = match req.kind {
            LockKind::Write => (
                LockKind::Read,
                "this owner holds the read lock; release it before taking the write lock \
                 (upgrading could deadlock two readers)",
            ),
            LockKind::Read => (
                LockKind::Write,
                "this owner holds the write lock, which already excludes every other reader \
                 and writer; it cannot also take the read lock here (a younger reader could \
                 not keep an older waiting writer out after the write lock's release)",
            ),
            _ => return Ok(()),
        };
        if self.holds_as(&req.name, &req.owner, held) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("lock {:?}: {why}", req.name),
            )
            .with_backend(backend));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Watched;

    fn never() -> crate::backend::Signal {
        Box::pin(std::future::pending())
    }

    #[tokio::test]
    async fn a_read_of_a_released_holding_leaves_a_later_one_on_the_same_name() {
        let watched = Watched::default();
        let old = watched.holding_ended("a/1-0".into(), 10, never());
        let new = watched.holding_ended("a/1-0".into(), 20, never());
        drop(old);
        // The old holding's read (taken while it was listed) finds the name put again as 20,
        // or gone: neither ends the holding of 20.
        watched.found(&[("a/1-0".into(), 10)], &[Some(20)]);
        watched.found(&[("a/1-0".into(), 10)], &[None]);
        let ended = tokio::time::timeout(std::time::Duration::from_millis(50), new);
        assert!(ended.await.is_err(), "the holding of 20 was ended");
        // Its own key found gone (a forced release) ends it.
        let new = watched.holding_ended("a/1-0".into(), 30, never());
        watched.found(&[("a/1-0".into(), 30)], &[None]);
        tokio::time::timeout(std::time::Duration::from_secs(1), new)
            .await
            .expect("the holding of 30 was not ended");
    }
}
