//! One pub/sub connection per client, shared by every waiting lock.
//!
//! Redisson opens subscriptions per lock and its users run out of pub/sub connections; here a
//! single task owns a single connection. Waiters register locally (no round trip when their
//! channel is already subscribed); the task subscribes a channel when its first waiter arrives
//! and unsubscribes it once it has had no waiter for a second (a busy lock's waiters come and go
//! constantly; re-subscribing each time would cost a round trip per wait). Each release message wakes as few waiters as it
//! can, decided by its payload:
//!
//! * `""`: wake one waiter of this client (round robin over the channel's waiters);
//! * `"*"`: wake every waiter (a writer left a read-write lock: all readers may go; a
//!   semaphore grew: the new permits may let several in);
//! * anything else: the SHA-1 of a fair-lock waiter's owner token: wake that waiter only.
//!
//! Every waiter has its own [`Notify`], whose stored permit means a wake-up that arrives while
//! the waiter is busy retrying is not lost. If the connection breaks, the task reconnects with
//! backoff, subscribes every channel still wanted, and wakes every waiter once (messages sent
//! meanwhile are gone). Waiters never depend on it alone: each sleep is bounded by the lease left.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use super::sentinel::{Addr, Sentinels};
use crate::backend::Wakeups;

/// How long a new waiter waits for its SUBSCRIBE to be confirmed before relying on its timer.
pub(crate) const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);
/// Reconnection backoff bounds.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// How long a channel stays subscribed after its last waiter left.
pub(super) const IDLE_GRACE: Duration = Duration::from_secs(1);
/// Longest wait for a new pub/sub connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The client's shared subscriber. Dropping it ends its task and closes the connection.
pub(crate) struct Subscriber {
    commands: mpsc::UnboundedSender<Command>,
    registry: Arc<Mutex<Registry>>,
    /// Without a pub/sub connection (a backend made from the application's
    /// `ConnectionManager` alone): every waiter is woken this often to ask again.
    poll_every: Option<Duration>,
}

pub(super) enum Command {
    /// Make sure the channel is subscribed; answer once it is (or cannot be now).
    Subscribe(String, oneshot::Sender<()>),
    /// The channel's last waiter left.
    Unsubscribe(String),
    /// Behind Sentinel: the master is at this address now.
    Moved(Addr),
}

/// Where the pub/sub connection goes.
pub(crate) enum Source {
    /// One server.
    Fixed(Box<redis::Client>),
    /// The master the Sentinels name at each (re)connection.
    Sentinel(Arc<Sentinels>),
}

/// Tells the subscriber that the master moved (see `sentinel.rs`).
pub(crate) struct Follower(mpsc::UnboundedSender<Command>);

impl Follower {
    /// A connection to another node than `master` is dropped and opened again (to the master
    /// the Sentinels name then), and every waiter is woken once.
    pub(crate) fn moved_to(&self, master: &Addr) {
        let _ = self.0.send(Command::Moved(master.clone()));
    }
}

#[derive(Default)]
pub(super) struct Registry {
    channels: HashMap<String, VecDeque<Waiter>>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    /// SHA-1 (hex) of the owner token, for fair-lock waiters woken by name.
    wake_key: Option<String>,
    notify: Arc<Notify>,
}

impl Subscriber {
    /// Starts the subscriber task. It connects on the first wait, not before.
    pub(super) fn start(source: Source) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        let registry = Arc::new(Mutex::new(Registry::default()));
        tokio::spawn(run(source, registry.clone(), rx));
        Subscriber {
            commands,
            registry,
            poll_every: None,
        }
    }

    /// No pub/sub connection: each waiter is woken every `every` and asks again.
    pub(super) fn polling(every: Duration) -> Self {
        // No task reads the commands: each `Subscribe` is dropped, its confirmation with it.
        let (commands, _) = mpsc::unbounded_channel();
        Subscriber {
            commands,
            registry: Arc::new(Mutex::new(Registry::default())),
            poll_every: Some(every),
        }
    }

    /// The subscriber of a Redis Cluster client: sharded pub/sub on the cluster connection
    /// (its task is `cluster::subscribe_sharded`).
    pub(super) fn start_sharded(shards: super::cluster::Shards) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        let registry = Arc::new(Mutex::new(Registry::default()));
        tokio::spawn(super::cluster::subscribe_sharded(
            shards,
            registry.clone(),
            rx,
        ));
        Subscriber {
            commands,
            registry,
            poll_every: None,
        }
    }

    /// A handle that tells it the master moved.
    pub(super) fn follower(&self) -> Follower {
        Follower(self.commands.clone())
    }

    /// Registers a waiter on `channel` and returns once the channel is subscribed (or the
    /// connection is down, in which case the reconnection wakes it).
    pub(crate) async fn watch(&self, channel: String, wake_key: Option<String>) -> Wakeups {
        let (wakeups, confirmed) = self.register(channel, wake_key);
        let _ = tokio::time::timeout(SUBSCRIBE_WAIT, confirmed).await;
        wakeups
    }

    /// [`watch`](Self::watch) without waiting: registers the waiter at once (so waiters
    /// registered on several servers in one order are woken in that order on each) and returns
    /// its wake-ups with the confirmation of the subscription, which resolves (with `Err` if the
    /// subscriber has stopped) once the channel is subscribed or the connection is down.
    pub(crate) fn register(
        &self,
        channel: String,
        wake_key: Option<String>,
    ) -> (Wakeups, oneshot::Receiver<()>) {
        if let Some(every) = self.poll_every {
            let (_, confirmed) = oneshot::channel();
            let ticks = futures_util::stream::unfold((), move |()| async move {
                tokio::time::sleep(every).await;
                Some(((), ()))
            });
            return (Box::pin(ticks), confirmed);
        }
        let notify = Arc::new(Notify::new());
        let id = {
            let mut registry = lock(&self.registry);
            let id = registry.next_id;
            registry.next_id += 1;
            registry
                .channels
                .entry(channel.clone())
                .or_default()
                .push_back(Waiter {
                    id,
                    wake_key,
                    notify: notify.clone(),
                });
            id
        };
        let registration = Registration {
            registry: self.registry.clone(),
            commands: self.commands.clone(),
            channel: channel.clone(),
            id,
        };
        let (ack, confirmed) = oneshot::channel();
        let _ = self.commands.send(Command::Subscribe(channel, ack));
        let wakeups: Wakeups = Box::pin(futures_util::stream::unfold(
            (notify, registration),
            |(notify, registration)| async move {
                notify.notified().await;
                Some(((), (notify, registration)))
            },
        ));
        (wakeups, confirmed)
    }
}

fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes its waiter when the wake-up stream is dropped (the wait ended).
struct Registration {
    registry: Arc<Mutex<Registry>>,
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = lock(&self.registry);
        if let Entry::Occupied(mut waiters) = registry.channels.entry(self.channel.clone()) {
            waiters.get_mut().retain(|w| w.id != self.id);
            if waiters.get().is_empty() {
                waiters.remove();
                // Sent under the registry lock, so it is queued before any later Subscribe.
                let _ = self
                    .commands
                    .send(Command::Unsubscribe(self.channel.clone()));
            }
        }
    }
}

/// Wakes the waiters a message on `channel` is for.
pub(super) fn dispatch(registry: &Mutex<Registry>, channel: &str, payload: &[u8]) {
    let mut registry = lock(registry);
    let Some(waiters) = registry.channels.get_mut(channel) else {
        return;
    };
    match payload {
        b"" => {
            if let Some(first) = waiters.pop_front() {
                first.notify.notify_one();
                waiters.push_back(first);
            }
        }
        b"*" => waiters.iter().for_each(|w| w.notify.notify_one()),
        key => waiters
            .iter()
            .filter(|w| w.wake_key.as_deref().map(str::as_bytes) == Some(key))
            .for_each(|w| w.notify.notify_one()),
    }
}

pub(super) fn wake_all(registry: &Mutex<Registry>) {
    let registry = lock(registry);
    for waiters in registry.channels.values() {
        waiters.iter().for_each(|w| w.notify.notify_one());
    }
}

pub(super) fn wanted(registry: &Mutex<Registry>) -> Vec<String> {
    lock(registry).channels.keys().cloned().collect()
}

/// The live connection and the channels it has confirmed.
struct Connection {
    sink: PubSubSink,
    messages: PubSubStream,
    subscribed: HashSet<String>,
    /// Subscribed channels without waiters, and since when.
    idle: HashMap<String, Instant>,
    /// The node, behind Sentinel.
    addr: Option<Addr>,
}

/// Connects and subscribes every channel currently wanted.
async fn open(source: &Source, registry: &Mutex<Registry>) -> redis::RedisResult<Connection> {
    let (client, addr) = match source {
        Source::Fixed(client) => ((**client).clone(), None),
        Source::Sentinel(sentinels) => {
            let (client, addr) = sentinels.master_client().await?;
            (client, Some(addr))
        }
    };
    // No ROLE check here (the command connection has one): a replica passes on what its
    // master publishes, and the node is told to drop its clients when it changes roles.
    let pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
        .await
        .map_err(|_| {
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "timed out opening the pub/sub connection",
            ))
        })??;
    let (mut sink, messages) = pubsub.split();
    let channels = wanted(registry);
    if !channels.is_empty() {
        sink.subscribe(&channels).await?;
    }
    Ok(Connection {
        sink,
        messages,
        subscribed: channels.into_iter().collect(),
        idle: HashMap::new(),
        addr,
    })
}

async fn run(
    source: Source,
    registry: Arc<Mutex<Registry>>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut conn: Option<Connection> = None;
    // Set once a connection broke: reconnect at this time, then wake everyone.
    let mut reconnect_at: Option<Instant> = None;
    let mut backoff = RECONNECT_MIN;
    loop {
        let reconnect = async {
            match reconnect_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let sweep_at = conn.as_ref().and_then(|c| c.idle.values().min().copied());
        let sweep = async move {
            match sweep_at {
                Some(oldest) => tokio::time::sleep_until(oldest + IDLE_GRACE).await,
                None => std::future::pending().await,
            }
        };
        let message = async {
            match conn.as_mut() {
                Some(c) => c.messages.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            command = commands.recv() => match command {
                None => return,
                Some(Command::Subscribe(channel, ack)) => {
                    if conn.is_none() && reconnect_at.is_none() {
                        // First wait of this client: connect now (lazily).
                        match open(&source, &registry).await {
                            Ok(c) => conn = Some(c),
                            Err(e) => {
                                tracing::debug!("redis pub/sub connection failed: {e}");
                                reconnect_at = Some(Instant::now() + backoff);
                            }
                        }
                    }
                    if let Some(c) = conn.as_mut()
                        && !c.subscribed.contains(&channel)
                    {
                        match c.sink.subscribe(&channel).await {
                            Ok(()) => {
                                c.subscribed.insert(channel);
                            }
                            Err(e) => {
                                tracing::debug!("redis SUBSCRIBE failed: {e}");
                                conn = None;
                                reconnect_at = Some(Instant::now());
                            }
                        }
                    }
                    let _ = ack.send(());
                }
                Some(Command::Moved(master)) => {
                    if conn.as_ref().is_some_and(|c| c.addr.as_ref().is_some_and(|a| *a != master)) {
                        tracing::debug!("redis pub/sub: the master moved; reconnecting");
                        conn = None;
                        reconnect_at = Some(Instant::now());
                    }
                }
                Some(Command::Unsubscribe(channel)) => {
                    if let Some(c) = conn.as_mut()
                        && c.subscribed.contains(&channel)
                    {
                        c.idle.insert(channel, Instant::now());
                    }
                }
            },
            () = sweep => {
                if let Some(c) = conn.as_mut() {
                    let now = Instant::now();
                    let wanted = lock(&registry).channels.keys().cloned().collect::<HashSet<_>>();
                    let expired: Vec<String> = c
                        .idle
                        .iter()
                        .filter(|(ch, since)| wanted.contains(*ch) || now >= **since + IDLE_GRACE)
                        .map(|(ch, _)| ch.clone())
                        .collect();
                    for channel in expired {
                        c.idle.remove(&channel);
                        if !wanted.contains(&channel)
                            && c.subscribed.remove(&channel)
                            && let Err(e) = c.sink.unsubscribe(&channel).await
                        {
                            tracing::debug!("redis UNSUBSCRIBE failed: {e}");
                        }
                    }
                }
            }
            message = message => match message {
                Some(msg) => dispatch(&registry, msg.get_channel_name(), msg.get_payload_bytes()),
                None => {
                    tracing::debug!("redis pub/sub connection lost; reconnecting");
                    conn = None;
                    reconnect_at = Some(Instant::now());
                }
            },
            () = reconnect => {
                if lock(&registry).channels.is_empty() {
                    // Nobody waits: connect again lazily, at the next wait.
                    reconnect_at = None;
                    continue;
                }
                match open(&source, &registry).await {
                    Ok(c) => {
                        conn = Some(c);
                        reconnect_at = None;
                        backoff = RECONNECT_MIN;
                        // Messages published while we were away are lost: everyone retries once.
                        wake_all(&registry);
                    }
                    Err(e) => {
                        tracing::debug!("redis pub/sub reconnection failed: {e}");
                        backoff = (backoff * 2).min(RECONNECT_MAX);
                        reconnect_at = Some(Instant::now() + backoff);
                    }
                }
            }
        }
    }
}
