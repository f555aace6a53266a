//! Lock status and forced release over the masters: the Redis backend's scripts
//! (`status.lua`, `force_release.lua`) on each master, merged here. A holding is shown (and
//! counted as removed) when a majority of the masters show it with the same token, as a take
//! only holds with a majority; a minority share (an undone take the masters did not all hear of)
//! is not a holding.

use std::time::Duration;

use futures_util::future::join_all;

use crate::backends::redis::inspect::{self as single, Found};
use crate::backends::redis::scripts::COUNTER_SCRIPTS as SCRIPTS;
use crate::error::Result;
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

use super::masters::{Call, no_quorum};
use super::{RAISE_FENCE, RedlockBackend};

impl RedlockBackend {
    /// The holdings a majority of `answers` show (the lease left is the one a majority still
    /// has: the `quorum`-th longest), the largest counter, and whether a majority answered.
    fn merge(&self, answers: Vec<Result<Found>>, what: &str) -> Result<Found> {
        let mut failures = Vec::new();
        let mut found = Vec::new();
        for answer in answers {
            match answer {
                Ok(f) => found.push(f),
                Err(e) => failures.push(e),
            }
        }
        if found.len() < self.quorum {
            return Err(no_quorum(
                self.masters.len(),
                self.quorum,
                found.len(),
                what,
                &failures,
            ));
        }
        let mut merged = Found {
            counter: found.iter().filter_map(|f| f.counter).max(),
            ..Found::default()
        };
        let mut tokens: Vec<FencingToken> = found
            .iter()
            .flat_map(|f| f.holdings.iter().map(|(_, h)| h.token))
            .collect();
        tokens.sort_unstable();
        tokens.dedup();
        for token in tokens {
            let shares: Vec<&(_, Holding)> = found
                .iter()
                .filter_map(|f| f.holdings.iter().find(|(_, h)| h.token == token))
                .collect();
            if shares.len() < self.quorum {
                continue;
            }
            let mut left: Vec<Duration> = shares.iter().filter_map(|(_, h)| h.lease_left).collect();
            left.sort_unstable_by(|a, b| b.cmp(a));
            let (side, first) = shares[0];
            let mut holding = first.clone();
            holding.lease_left = left.get(self.quorum - 1).copied();
            // Each master stamped its own clock; the earliest is nearest to the take's start.
            holding.since = shares.iter().filter_map(|(_, h)| h.since).min();
            if holding.holder.is_none() {
                holding.holder = shares.iter().find_map(|(_, h)| h.holder.clone());
            }
            merged.holdings.push((*side, holding));
        }
        Ok(merged)
    }

    pub(super) async fn inspect_status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let what = "reading lock status";
        let limit = self.response_timeout;
        let mut scanned = Vec::new();
        if let Some(pattern) = single::scan_pattern(&self.prefix, which) {
            // Every master's keys: a lock a majority holds is on some master that answers.
            let answers = join_all(self.masters.iter().map(|m| m.scan(&pattern, limit))).await;
            let mut failures = Vec::new();
            let mut answered = 0;
            for answer in answers {
                match answer {
                    Ok(keys) => {
                        answered += 1;
                        scanned.extend(keys);
                    }
                    Err(e) => failures.push(e),
                }
            }
            if answered < self.quorum {
                let n = self.masters.len();
                return Err(no_quorum(n, self.quorum, answered, what, &failures));
            }
        }
        let mut all = Vec::new();
        // Redlock keeps only the exclusive lock.
        let family = crate::backends::redis::keys::family(LockKind::Mutex);
        for (_, name) in single::selected(&self.prefix, which, &scanned)
            .into_iter()
            .filter(|(f, _)| *f == family)
        {
            let Some((keys, args)) = single::status_call(&self.prefix, family, &name) else {
                continue;
            };
            let call = Call::new(&SCRIPTS.status, &keys, &args, what);
            let answers = self.on_all::<Vec<String>>(call, limit).await;
            let found = answers
                .into_iter()
                .map(|a| a.and_then(|reply| single::decode(reply, what)))
                .collect();
            all.extend(single::statuses(&name, family, self.merge(found, what)?));
        }
        Ok(all)
    }

    /// Removes the holding on every master at once, then raises every master's counter to the
    /// largest any of them advanced to, as a take raises it: a later take's majority meets the
    /// raised majority, so it draws above.
    pub(super) async fn inspect_force(&self, name: &LockName) -> Result<ForcedRelease> {
        let what = format!("forcing the release of {:?}", name.as_str());
        let limit = self.response_timeout;
        let (keys, args) = single::force_call(&self.prefix, name, LockKind::Mutex);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let call = Call::new(&SCRIPTS.force_release, &keys, &args, &what);
        let answers = self.on_all::<Vec<String>>(call, limit).await;
        let found = answers
            .into_iter()
            .map(|a| a.and_then(|reply| single::decode(reply, &what)))
            .collect();
        let merged = self.merge(found, &what)?;
        let fence = merged.counter.unwrap_or_default();
        let fence_text = fence.to_string();
        let raise_args = ["", "", fence_text.as_str()];
        let raise = Call::new(
            &RAISE_FENCE,
            &keys,
            &raise_args,
            "raising the fencing counter",
        );
        let raised = self.on_all::<i64>(raise, limit).await;
        let failures: Vec<_> = raised.into_iter().filter_map(|r| r.err()).collect();
        let carried = self.masters.len() - failures.len();
        if carried < self.quorum {
            let n = self.masters.len();
            return Err(no_quorum(n, self.quorum, carried, &what, &failures));
        }
        let removed = merged.holdings.into_iter().map(|(_, h)| h).collect();
        Ok(ForcedRelease::new(removed, FencingToken(fence)))
    }
}
