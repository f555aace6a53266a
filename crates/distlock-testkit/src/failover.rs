//! Workloads for the tests that kill and pause members of a replicated store (an etcd cluster, a
//! ZooKeeper ensemble, Redlock's masters): lock cycles that must keep working while a minority is
//! down ([`cycles`]), workers contending for one lock while the leader dies ([`contend`]),
//! whose holds are checked for overlaps and token order, and a holder whose only member is taken
//! away from the others ([`holder_cut_off_is_lost_before_its_successor`]); and the small steps
//! these tests share (a follower, clients warmed up, a waiter).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{Client, ErrorKind};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::faults::peers::Partitionable;
use crate::history::{self, Hold, Verdict};
use crate::{Failure, Outcome, check, monotonic_ns};

/// A distlock error with its causes, for failure messages.
pub fn why(e: &distlock::Error) -> String {
    distlock::error::chain(e)
}

/// A distlock error as a failure, with its causes.
pub fn fail(e: distlock::Error) -> Failure {
    Failure(why(&e))
}

/// A client of `url`, or a failure naming it.
pub async fn client(url: &str) -> Result<Client, Failure> {
    distlock::connect(url)
        .await
        .map_err(|e| Failure(format!("connecting to {url}: {}", why(&e))))
}

/// Runs a blocking call (starting, killing or pausing a member, asking who leads) without
/// stalling the runtime.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// `n` clients of `url`.
pub async fn clients(url: &str, n: usize) -> Result<Vec<Client>, Failure> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(client(url).await?);
    }
    Ok(clients)
}

/// Lock `name` taken through `client`, waiting at most 5 s.
pub async fn hold(client: &Client, name: &str) -> Result<distlock::Guard, Failure> {
    client
        .lock(name)
        .acquire_timeout(Duration::from_secs(5))
        .await
        .map_err(fail)
}

/// Lock `name` taken through `client` within 10 s, once the store serves it again after a
/// fault; a failure names `who` took it.
pub async fn taken_again(
    client: &Client,
    name: &str,
    who: &str,
) -> Result<distlock::Guard, Failure> {
    client
        .lock(name)
        .acquire_timeout(Duration::from_secs(10))
        .await
        .map_err(|e| Failure(format!("{who} once its member ran again: {}", why(&e))))
}

/// The members of a cluster of `members` but `x`.
pub fn others(x: usize, members: usize) -> Vec<usize> {
    (0..members).filter(|&i| i != x).collect()
}

/// A member of `cluster` that does not lead right now (waits out an election).
pub fn follower(cluster: &impl Partitionable) -> Result<usize, Failure> {
    let all: Vec<usize> = (0..cluster.members()).collect();
    let leader = blocking(|| cluster.leader_among(&all))?;
    Ok((leader + 1) % all.len())
}

/// Each of `clients` takes lock `name` once and releases it, so that every one has talked to
/// the store (has a session) before a fault.
pub async fn warm_up(clients: &[&Client], name: &str) -> Outcome {
    for c in clients {
        check!(
            hold(c, name).await?.release().await.map_err(fail)?,
            "a warm-up hold was lost"
        );
    }
    Ok(())
}

/// The holding `held` outlives the death of a follower killed at `killed_at` (two members of
/// three are still up): its lost signal stays silent until `until`, and `is_lost()` agrees.
pub async fn kept_after_a_follower_died(
    held: &distlock::Guard,
    killed_at: Instant,
    until: Instant,
) -> Outcome {
    if let Ok(e) = tokio::time::timeout_at(until, held.lost()).await {
        return Err(Failure(format!(
            "the holding was lost {:?} after a follower was killed (2 of 3 members still up): {}",
            killed_at.elapsed(),
            why(&e)
        )));
    }
    check!(!held.is_lost(), "is_lost() after a follower was killed");
    Ok(())
}

/// A task waiting (at most `within`) for lock `name` through `client`: it answers when it got
/// its answer, the answer, and the client (kept alive meanwhile). Checks, half a second later,
/// that it still waits (the lock is held).
pub async fn waiter(
    client: Client,
    name: &'static str,
    within: Duration,
) -> Result<JoinHandle<(Instant, distlock::Result<distlock::Guard>, Client)>, Failure> {
    let waiter = tokio::spawn(async move {
        let got = client.lock(name).acquire_timeout(within).await;
        (Instant::now(), got, client)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    check!(!waiter.is_finished(), "the waiter got a held lock");
    Ok(waiter)
}

/// A take the URL's replicas had to acknowledge (`?wait_replicas=2`) with one of the two unable
/// to: answered `NoQuorum`, retryable, naming the count and that the take was undone. `what`
/// says which take, in the failure.
pub async fn take_refused_for_replicas(lock: &distlock::Lock, what: &str) -> Outcome {
    let err = match lock.try_acquire().await {
        Ok(taken) => {
            return Err(Failure(format!(
                "{what}: a take two replicas had to acknowledge, one unable to, answered {:?}",
                taken.map(|g| g.fencing_token().get())
            )));
        }
        Err(e) => e,
    };
    check!(
        err.kind() == ErrorKind::NoQuorum
            && err.is_retryable()
            && err.to_string().contains("1 of the 2 replicas")
            && err.to_string().contains("undone"),
        "{what}: {err}"
    );
    Ok(())
}

/// The guard a waiter spawned earlier (a task acquiring the lock) got, within 30 s; `what`
/// names the wait in the failure.
pub async fn waiter_guard(
    waiting: JoinHandle<distlock::Result<distlock::Guard>>,
    what: &str,
) -> Result<distlock::Guard, Failure> {
    let answer = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .map_err(|_| Failure(format!("{what}: the waiter did not get the lock in 30 s")))?
        .map_err(|e| Failure(format!("{what}: the waiter's task: {e}")))?;
    Ok(answer?)
}

/// The holder `held` releases (its holding must still be there `after` the fault), and the
/// waiter spawned earlier gets the lock within 30 s, with a larger token: the waiter's guard.
pub async fn handed_on(
    held: distlock::Guard,
    waiting: JoinHandle<distlock::Result<distlock::Guard>>,
    after: &str,
) -> Result<distlock::Guard, Failure> {
    let token = held.fencing_token();
    check!(
        held.release().await.map_err(fail)?,
        "the release {after} found no holding"
    );
    let taken = waiter_guard(waiting, after).await?;
    let whose = format!("the waiter's token {after}, after the holder's");
    crate::check_above(&whose, taken.fencing_token(), token)?;
    Ok(taken)
}

/// What [`cycles`] saw.
pub struct Cycles {
    /// The token of each cycle's hold, in order.
    pub tokens: Vec<u64>,
    /// Every failed call (retried), in order.
    pub errors: Vec<String>,
}

/// `count` cycles of acquire and release of lock `name`, by `clients` in turn. A failed acquire is
/// noted and tried again, up to five times, so one run shows how many calls fail; a cycle that
/// fails five times, or whose holding is lost by its release, fails the test. `during` says what
/// is wrong with the store, for messages ("with one follower of three dead").
pub async fn cycles(
    clients: &[&Client],
    name: &str,
    count: usize,
    during: &str,
) -> Result<Cycles, Failure> {
    let mut seen = Cycles {
        tokens: Vec::new(),
        errors: Vec::new(),
    };
    for i in 0..count {
        let c = clients[i % clients.len()];
        let mut tries = 0;
        let guard = loop {
            tries += 1;
            match c.lock(name).acquire_timeout(Duration::from_secs(5)).await {
                Ok(guard) => break guard,
                Err(e) if tries < 5 => seen.errors.push(format!("cycle {i} acquire: {}", why(&e))),
                Err(e) => {
                    return Err(Failure(format!(
                        "cycle {i} failed {tries} times {during} ({} failed calls in all, the \
                         first: {:?}); the last: {}",
                        seen.errors.len() + 1,
                        seen.errors.first(),
                        why(&e),
                    )));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        seen.tokens.push(guard.fencing_token().get());
        match guard.release().await {
            Ok(true) => {}
            Ok(false) => return Err(Failure(format!("cycle {i}: the holding was lost"))),
            Err(e) => seen.errors.push(format!("cycle {i} release: {}", why(&e))),
        }
    }
    Ok(seen)
}

impl Cycles {
    /// Fails unless the tokens increase and no call failed.
    pub fn check_clean(&self, during: &str) -> Outcome {
        check!(
            self.tokens.windows(2).all(|w| w[0] < w[1]),
            "tokens of successive holds do not increase: {:?}",
            self.tokens
        );
        check!(
            self.errors.is_empty(),
            "{} requests of {} cycles failed {during}; first: {:?}",
            self.errors.len(),
            self.tokens.len(),
            self.errors.first()
        );
        Ok(())
    }
}

/// What the workers of [`contend`] saw.
#[derive(Default)]
pub struct Seen {
    /// Every hold, as the holder timed it.
    pub holds: Vec<Hold>,
    /// Holds whose guard reported the loss before release.
    pub lost: usize,
    /// Every failed call and its kind.
    pub errors: Vec<String>,
    /// Failed calls of a kind the store's failover should not give (a broken connection must
    /// not look like the store's refusal).
    pub untyped: Vec<String>,
    /// The longest `acquire_timeout(2 s)` call.
    pub longest_acquire: Duration,
}

impl Seen {
    fn note(&mut self, call: &str, e: &distlock::Error, expected: &[ErrorKind]) {
        if !expected.contains(&e.kind()) {
            self.untyped.push(format!("{call}: {}", why(e)));
        }
        self.errors.push(format!("{call} {:?}", e.kind()));
    }

    fn add(&mut self, other: Seen) {
        self.holds.extend(other.holds);
        self.lost += other.lost;
        self.errors.extend(other.errors);
        self.untyped.extend(other.untyped);
        self.longest_acquire = self.longest_acquire.max(other.longest_acquire);
    }
}

/// Workers contending for one lock until an instant: see [`contend`].
pub struct Contention {
    workers: Vec<JoinHandle<Seen>>,
    max_inside: Arc<AtomicUsize>,
    until: Instant,
}

/// One worker per client, each looping until `until`: acquire lock `name` (waiting at most 2 s),
/// hold it 2 ms while counting the holders inside, release. Failed calls are noted and tried
/// again; those of a kind not in `expected` are noted apart ([`Seen::untyped`]).
pub fn contend(
    clients: Vec<Client>,
    name: &str,
    until: Instant,
    expected: &'static [ErrorKind],
) -> Contention {
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let workers = clients
        .into_iter()
        .map(|client| {
            let (inside, max_inside) = (inside.clone(), max_inside.clone());
            let lock = client.lock(name);
            tokio::spawn(async move {
                let _client = client;
                let mut seen = Seen::default();
                while Instant::now() < until {
                    let asked = Instant::now();
                    let got = lock.acquire_timeout(Duration::from_secs(2)).await;
                    seen.longest_acquire = seen.longest_acquire.max(asked.elapsed());
                    let guard = match got {
                        Ok(guard) => guard,
                        // A failover: requests fail or wait; try again.
                        Err(e) => {
                            seen.note("acquire", &e, expected);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let start_ns = monotonic_ns();
                    let before = inside.fetch_add(1, Ordering::SeqCst);
                    max_inside.fetch_max(before + 1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let end_ns = monotonic_ns();
                    seen.holds.push(Hold {
                        start_ns,
                        end_ns,
                        token: guard.fencing_token().get(),
                    });
                    seen.lost += usize::from(guard.is_lost());
                    if let Err(e) = guard.release().await {
                        seen.note("release", &e, expected);
                    }
                }
                seen
            })
        })
        .collect();
    Contention {
        workers,
        max_inside,
        until,
    }
}

/// What [`Contention::finish`] gathered from every worker.
pub struct Contended {
    /// Every worker's holds and failures together.
    pub seen: Seen,
    /// The most holders inside at once (1 when the lock held).
    pub max_inside: usize,
    /// The holds checked for overlaps and token order.
    pub verdict: Verdict,
}

impl Contention {
    /// Waits for the workers to stop (at the instant given to [`contend`]) and gathers what they
    /// saw.
    pub async fn finish(self) -> Result<Contended, Failure> {
        tokio::time::sleep_until(self.until).await;
        let mut seen = Seen::default();
        for worker in self.workers {
            seen.add(worker.await.map_err(|e| Failure(e.to_string()))?);
        }
        let verdict = history::check(seen.holds.iter().copied());
        Ok(Contended {
            seen,
            max_inside: self.max_inside.load(Ordering::SeqCst),
            verdict,
        })
    }
}

impl Contended {
    /// Holds that ended before, and holds that started after, the instant `fault_ns`.
    pub fn around(&self, fault_ns: u64) -> (usize, usize) {
        let holds = &self.seen.holds;
        (
            holds.iter().filter(|h| h.end_ns < fault_ns).count(),
            holds.iter().filter(|h| h.start_ns > fault_ns).count(),
        )
    }

    /// The largest token any worker held.
    pub fn last_token(&self) -> u64 {
        self.seen.holds.iter().map(|h| h.token).max().unwrap_or(0)
    }

    /// One line for messages: the verdict, holds around the fault at `fault_ns`, lost guards,
    /// failures by kind, the longest wait, and `more` (what the store held at the end, …).
    pub fn summary(&self, fault_ns: u64, more: &str) -> String {
        let (before, after) = self.around(fault_ns);
        let mut errors = BTreeMap::new();
        for e in &self.seen.errors {
            *errors.entry(e).or_insert(0) += 1;
        }
        format!(
            "{}; {before} holds before the fault, {after} after; {} guards lost; errors: \
             {errors:?}; longest acquire_timeout(2 s): {:?}; {more}; first errors of another \
             kind: {:?}",
            self.verdict,
            self.seen.lost,
            self.seen.longest_acquire,
            self.seen.untyped.iter().take(2).collect::<Vec<_>>()
        )
    }

    /// Fails unless one holder at a time held the lock, tokens followed the holds' order, at
    /// least `before` holds ended before the fault and `after` began after it, and every failure
    /// was of an expected kind.
    pub fn check(&self, fault_ns: u64, (before, after): (usize, usize), more: &str) -> Outcome {
        let summary = self.summary(fault_ns, more);
        let (seen_before, seen_after) = self.around(fault_ns);
        check!(
            self.max_inside == 1,
            "{} holders at once: {summary}",
            self.max_inside
        );
        check!(self.verdict.is_ok(), "{summary}");
        check!(
            seen_before >= before,
            "too few holds before the fault: {summary}"
        );
        check!(
            seen_after >= after,
            "too few holds after the fault: {summary}"
        );
        check!(
            self.seen.untyped.is_empty(),
            "{} failures were of an unexpected kind: {:?}",
            self.seen.untyped.len(),
            self.seen.untyped.iter().take(3).collect::<Vec<_>>()
        );
        Ok(())
    }
}

/// How a cluster's URL names some of its members: `url(cluster, which)`, with the session
/// length the test gives its clients.
pub type MembersUrl<C> = fn(&C, &[usize]) -> String;

/// What a member does for [`holder_cut_off_is_lost_before_its_successor`].
type MemberAction<C> = fn(&mut C, usize) -> Result<(), Failure>;

/// How [`holder_cut_off_is_lost_before_its_successor`] takes the holder's only member away.
pub enum TakenAway<C> {
    /// A follower paused (SIGSTOP) by `pause` and resumed by `resume`: it answers nothing from
    /// the moment it is paused.
    PausedFollower {
        pause: MemberAction<C>,
        resume: MemberAction<C>,
    },
    /// The leader cut off from its followers (the cluster was started with peer links) while
    /// the holder still reaches it: it may go on answering the holder for `answers_on` (until
    /// it finds it has no quorum).
    CutOffLeader { answers_on: Duration },
}

/// A holder reaching the cluster only through one member (its URL as `url` says), a waiter
/// through the others, their sessions lasting `session`; the member is taken away from the
/// others as `how` says, and brought back. The holder's lost signal fires within the time the
/// member may go on answering, the session and a bit; by its own clock it has lost the lock
/// when the waiter gets it; the waiter's token is larger; and once the member serves again the
/// old holder takes the lock anew, with a larger token still.
pub async fn holder_cut_off_is_lost_before_its_successor<C: Partitionable>(
    cluster: &mut C,
    url: MembersUrl<C>,
    session: Duration,
    taken_away: TakenAway<C>,
) -> Outcome {
    const NAME: &str = "cut-off-member";
    let all: Vec<usize> = (0..cluster.members()).collect();
    let x = match &taken_away {
        TakenAway::PausedFollower { .. } => follower(cluster)?,
        TakenAway::CutOffLeader { .. } => blocking(|| cluster.leader_among(&all))?,
    };
    let (holder_url, waiter_url) = (url(cluster, &[x]), url(cluster, &others(x, all.len())));
    let (how, answers_on) = match &taken_away {
        TakenAway::PausedFollower { .. } => ("paused", Duration::ZERO),
        TakenAway::CutOffLeader { answers_on } => ("cut off", *answers_on),
    };
    let holder_client = client(&holder_url).await?;
    let waiter_client = client(&waiter_url).await?;
    let held = Arc::new(hold(&holder_client, NAME).await?);
    let token = held.fencing_token();
    let lost = held.lost();
    let lost = tokio::spawn(async move {
        let e = lost.await;
        (Instant::now(), e)
    });
    let waiter = tokio::spawn({
        let held = held.clone();
        async move {
            // The waiter's own session may end while the members it reaches elect a new leader
            // (ZooKeeper's followers drop their clients meanwhile; CI saw it once with a 4 s
            // session): as an application would, it waits again, within the same 20 s. What
            // this case checks is the holder, not the waiter's session.
            let deadline = Instant::now() + Duration::from_secs(20);
            let got = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let got = waiter_client.lock(NAME).acquire_timeout(left).await;
                match &got {
                    Err(e) if e.kind() == ErrorKind::LeaseLost && !left.is_zero() => {
                        eprintln!("the waiter's session ended ({e}); it waits again");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    _ => break got,
                }
            };
            // By the holder's own clock, at the moment the successor has the lock.
            let holder_knew = held.is_lost();
            (Instant::now(), got, holder_knew, waiter_client)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    check!(!waiter.is_finished(), "the waiter got a held lock");

    blocking(|| match &taken_away {
        TakenAway::PausedFollower { pause, .. } => pause(cluster, x),
        TakenAway::CutOffLeader { .. } => Ok(cluster.isolate(x)?),
    })?;
    let stopped = Instant::now();
    let within = session + answers_on + Duration::from_secs(2);
    let lost = tokio::time::timeout(within, lost).await;
    let waited = tokio::time::timeout(Duration::from_secs(15), waiter).await;
    blocking(|| match &taken_away {
        TakenAway::PausedFollower { resume, .. } => resume(cluster, x),
        TakenAway::CutOffLeader { .. } => Ok(cluster.heal()?),
    })?;
    let (lost_at, e) = lost
        .map_err(|_| {
            Failure(format!(
                "lost() did not fire within {within:?} of the holder's only member being {how}"
            ))
        })?
        .map_err(|e| Failure(e.to_string()))?;
    check!(e.kind() == ErrorKind::LeaseLost, "lost() said {}", why(&e));
    let (got_at, got, holder_knew, _waiter_client) = waited
        .map_err(|_| Failure("the waiter never got the lock of the lost holder".into()))?
        .map_err(|e| Failure(e.to_string()))?;
    let guard = got.map_err(|e| Failure(format!("the waiter: {}", why(&e))))?;
    eprintln!(
        "member {how}: the holder's lost() fired {:?} after, the successor took the lock {:?} \
         after",
        lost_at - stopped,
        got_at - stopped
    );
    // The holder's own clock is what counts (is_lost() checks it on every call); when its
    // lost() task got to run is only reported.
    check!(
        holder_knew,
        "the successor got the lock {:?} after the member was {how} while the holder still \
         believed it held it (its lost() fired {:?} after)",
        got_at - stopped,
        lost_at - stopped
    );
    check!(
        guard.fencing_token() > token,
        "the successor's token {:?} is not above the lost holder's {token:?}",
        guard.fencing_token()
    );

    let held = Arc::try_unwrap(held).map_err(|_| Failure("the guard is still shared".into()))?;
    let released = held.release().await.map_err(fail)?;
    check!(
        !released,
        "the lost holder's release says it still held the lock"
    );
    check!(
        guard.release().await.map_err(fail)?,
        "the successor's holding was lost"
    );
    // Its member serves again once it has caught up with the leader (a ZooKeeper member serves
    // no client until then): the holder's client starts a new session and takes the lock anew.
    blocking(|| cluster.leader_among(&all))?;
    let again = taken_again(&holder_client, NAME, "the old holder").await?;
    check!(
        again.fencing_token() > token,
        "the old holder's new token is not larger"
    );
    check!(
        again.release().await.map_err(fail)?,
        "its new holding was lost"
    );
    Ok(())
}
