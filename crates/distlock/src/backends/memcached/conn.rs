//! The server: a small pool of connections to one memcached, and the commands the lock needs:
//! `mg` (read an item with its CAS), `add` (store unless an item is there), `cas` (replace the
//! item whose CAS was read), `md` with a CAS (delete exactly that item), `ma` with autovivify
//! (the fencing counter); for elections and latches a plain `ms`, a plain `md` and `ma`
//! decrementing without autovivify; and `lru_crawler metadump` for a status by prefix.
//!
//! Why `add` and `cas` are the classic text commands and not the meta `ms` in add or CAS mode:
//! when memcached cannot allocate the new item (its memory is full and `-M` forbids evicting),
//! the meta `ms` answers `SERVER_ERROR out of memory` **and deletes the item already at the
//! key**, whatever its mode (memcached 1.6's `process_mset_command`, "avoid stale data persisting
//! in cache because we failed alloc"; measured on 1.6.18 for `ms … C<cas>` and `ms … ME`). For
//! a lock that is the holding itself: a renewal, a re-take, or another client's `add` would
//! free the lock behind its holder's back. The classic `add` and `cas` answer the same error
//! and leave the item as it was (memcached deletes there only for a plain `set`). Every command
//! here on a lock item therefore either succeeds or changes nothing.
//!
//! A connection serves one request at a time and goes back to the pool only after a complete
//! reply: a call cancelled or failed mid-request drops its connection, so a reply never reaches
//! the wrong request.

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout};

use crate::error::{Error, ErrorKind};

use super::NAME;

/// What went wrong with one request.
#[derive(Debug)]
pub(super) enum Fault {
    /// The connection broke or timed out; `sent` says whether the request may have reached the
    /// server.
    Transport { error: io::Error, sent: bool },
    /// The server answered with an error or something this client does not understand.
    Reply(String),
}

impl From<io::Error> for Fault {
    fn from(error: io::Error) -> Self {
        Fault::Transport { error, sent: true }
    }
}

impl Fault {
    pub(super) fn into_error(self, server: &str, what: &str) -> Error {
        match self {
            Fault::Transport { error, .. } => Error::new(
                ErrorKind::Connection,
                format!(
                    "{what}: memcached at {server}: {error} (is memcached running and listening \
                     on that address?)"
                ),
            )
            .with_source(error),
            Fault::Reply(reply) if is_out_of_memory(&reply) => Error::new(
                ErrorKind::Backend,
                format!(
                    "{what}: memcached at {server} answered {reply:?}: its memory is full and \
                     it runs without evictions (-M), so it refuses new items (a holding already \
                     stored is kept until it expires or is released); give it more memory (-m) \
                     or free some"
                ),
            ),
            Fault::Reply(reply) => Error::new(
                ErrorKind::Backend,
                format!("{what}: memcached at {server} answered {reply:?}"),
            ),
        }
        .with_backend(NAME)
    }
}

/// Whether `reply` is memcached's refusal for lack of memory (`SERVER_ERROR out of memory storing
/// object` for a store, `SERVER_ERROR Out of memory allocating new item` for a new counter).
fn is_out_of_memory(reply: &str) -> bool {
    reply
        .to_ascii_lowercase()
        .starts_with("server_error out of memory")
}

/// An item as `mg <key> v c t` shows it.
pub(super) struct Item {
    pub(super) value: String,
    pub(super) cas: u64,
    /// Seconds left before it expires (memcached's clock); -1 for never.
    pub(super) ttl: i64,
}

/// One connection to the server.
pub(super) struct Conn {
    stream: BufReader<TcpStream>,
    /// Taken from the pool (it may have been closed by the server since) rather than opened
    /// for this call.
    pub(super) reused: bool,
}

fn bad_reply(line: &str) -> Fault {
    Fault::Reply(line.to_string())
}

/// The longest value distlock reads back. Its own values are well under 1 KiB and memcached's
/// default item limit is 1 MiB: a longer length is a corrupt reply, not a buffer to allocate.
const MAX_VALUE_LEN: usize = 1 << 20;

/// The length of the value block a `VA <len> …` line announces, if it is one distlock can hold.
fn value_len(line: &str) -> Option<usize> {
    let len = line.split(' ').nth(1)?.parse().ok()?;
    (len <= MAX_VALUE_LEN).then_some(len)
}

/// The token of flag `flag` (`c123` → 123) in a reply's flags.
fn flag<T: std::str::FromStr>(tokens: &[&str], flag: char) -> Option<T> {
    tokens
        .iter()
        .find_map(|t| t.strip_prefix(flag))
        .and_then(|v| v.parse().ok())
}

impl Conn {
    async fn open(addr: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream: BufReader::new(stream),
            reused: false,
        })
    }

    /// Sends `command` (and `data`, when it has a value block) and reads the reply line.
    async fn request(&mut self, command: &str, data: Option<&str>) -> Result<String, Fault> {
        self.send(&[(command, data)]).await?;
        self.reply().await
    }

    /// Sends `commands` (each with its value block, if any) in one write.
    async fn send(&mut self, commands: &[(&str, Option<&str>)]) -> Result<(), Fault> {
        let mut out = Vec::new();
        for (command, data) in commands {
            out.extend_from_slice(command.as_bytes());
            out.extend_from_slice(b"\r\n");
            if let Some(data) = data {
                out.extend_from_slice(data.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        if let Err(error) = self.stream.get_mut().write_all(&out).await {
            // Nothing (or not all) reached a server that had closed the connection.
            return Err(Fault::Transport { error, sent: false });
        }
        Ok(())
    }

    /// Reads the next reply line; an error line is a [`Fault::Reply`].
    async fn reply(&mut self) -> Result<String, Fault> {
        let mut line = String::new();
        let n = match self.stream.read_line(&mut line).await {
            Ok(n) => n,
            // Reset before answering: the server process that held this connection is gone (a
            // restart), so on a pooled connection it never saw the request, as below.
            Err(error) if error.kind() == io::ErrorKind::ConnectionReset => {
                return Err(Fault::Transport {
                    error,
                    sent: !self.reused,
                });
            }
            Err(error) => return Err(error.into()),
        };
        if n == 0 || !line.ends_with("\r\n") {
            // Closed before answering: on a pooled connection, a server that went away while it
            // was idle never saw the request.
            let error = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed");
            return Err(Fault::Transport {
                error,
                sent: !self.reused,
            });
        }
        line.truncate(line.len() - 2);
        // It answered: whatever fails later on it may have reached the server.
        self.reused = false;
        if line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR") || line == "ERROR" {
            return Err(bad_reply(&line));
        }
        Ok(line)
    }

    /// Reads the value block of a `VA <len> …` reply.
    async fn value(&mut self, line: &str) -> Result<String, Fault> {
        let len = value_len(line).ok_or_else(|| bad_reply(line))?;
        let mut data = vec![0; len + 2];
        self.stream.read_exact(&mut data).await?;
        if !data.ends_with(b"\r\n") {
            return Err(bad_reply(line));
        }
        data.truncate(len);
        String::from_utf8(data).map_err(|_| bad_reply("a value that is not UTF-8"))
    }

    /// `mg`: the item at `key`, if any.
    pub(super) async fn get(&mut self, key: &str) -> Result<Option<Item>, Fault> {
        self.send(&[(&format!("mg {key} v c t"), None)]).await?;
        self.item().await
    }

    /// Reads the reply of an `mg <key> v c t`.
    async fn item(&mut self) -> Result<Option<Item>, Fault> {
        let line = self.reply().await?;
        if line == "EN" {
            return Ok(None);
        }
        if !line.starts_with("VA ") {
            return Err(bad_reply(&line));
        }
        let tokens: Vec<&str> = line.split(' ').skip(2).collect();
        // A CAS is a u64 (past i64::MAX too); a TTL is -1 for an item without expiry.
        let (Some(cas), Some(ttl)) = (flag::<u64>(&tokens, 'c'), flag::<i64>(&tokens, 't')) else {
            return Err(bad_reply(&line));
        };
        let value = self.value(&line).await?;
        Ok(Some(Item { value, cas, ttl }))
    }

    /// `add` (classic, not `ms … ME`: see the module's docs): stores `value` at `key` for `ttl`
    /// seconds (0: no expiry) unless an item is there. Whether it stored.
    pub(super) async fn add(&mut self, key: &str, value: &str, ttl: u32) -> Result<bool, Fault> {
        let command = format!("add {key} 0 {ttl} {}", value.len());
        match self.request(&command, Some(value)).await?.as_str() {
            "STORED" => Ok(true),
            "NOT_STORED" => Ok(false),
            line => Err(bad_reply(line)),
        }
    }

    /// [`add`](Self::add), then `mg` of the same key in the same round trip: the item there
    /// afterwards, whoever's it is (the classic `add` answers no CAS). What the `add` did shows in
    /// the item: the value added (and a CAS to change exactly it), or the item that was there.
    pub(super) async fn add_and_get(
        &mut self,
        key: &str,
        value: &str,
        ttl: u32,
    ) -> Result<Option<Item>, Fault> {
        let add = format!("add {key} 0 {ttl} {}", value.len());
        self.send(&[(&add, Some(value)), (&format!("mg {key} v c t"), None)])
            .await?;
        let added = match self.reply().await {
            // An answer, even an error (out of memory): the `mg` reply follows it.
            Ok(line) | Err(Fault::Reply(line)) => line,
            Err(transport) => return Err(transport),
        };
        let item = self.item().await?;
        match added.as_str() {
            "STORED" | "NOT_STORED" => Ok(item),
            line => Err(bad_reply(line)),
        }
    }

    /// `cas` (classic, not `ms … C<cas>`: see the module's docs): replaces the item at `key`
    /// with `value` for `ttl` seconds if it is still the one whose CAS is `cas`. Whether it was.
    pub(super) async fn swap(
        &mut self,
        key: &str,
        value: &str,
        ttl: u32,
        cas: u64,
    ) -> Result<bool, Fault> {
        let command = format!("cas {key} 0 {ttl} {} {cas}", value.len());
        match self.request(&command, Some(value)).await?.as_str() {
            "STORED" => Ok(true),
            "EXISTS" | "NOT_FOUND" => Ok(false),
            line => Err(bad_reply(line)),
        }
    }

    /// `md` with a CAS: deletes the item at `key` if it is still the one whose CAS is `cas`.
    pub(super) async fn delete(&mut self, key: &str, cas: u64) -> Result<bool, Fault> {
        match self
            .request(&format!("md {key} C{cas}"), None)
            .await?
            .as_str()
        {
            "HD" => Ok(true),
            "EX" | "NF" => Ok(false),
            line => Err(bad_reply(line)),
        }
    }

    /// `ms`: stores `value` at `key` for `ttl` seconds (0: no expiry), whatever was there (and
    /// deletes what was there if memcached has no memory for the new item).
    pub(super) async fn set(&mut self, key: &str, value: &str, ttl: u32) -> Result<(), Fault> {
        let command = format!("ms {key} {} T{ttl}", value.len());
        match self.request(&command, Some(value)).await?.as_str() {
            "HD" => Ok(()),
            line => Err(bad_reply(line)),
        }
    }

    /// `md` without a CAS: deletes the item at `key`, if any. Whether there was one.
    pub(super) async fn remove(&mut self, key: &str) -> Result<bool, Fault> {
        match self.request(&format!("md {key}"), None).await?.as_str() {
            "HD" => Ok(true),
            "NF" => Ok(false),
            line => Err(bad_reply(line)),
        }
    }

    /// `ma` in decrement mode, without autovivify: the counter at `key` minus one (memcached
    /// stops at 0), or `None` if there is no counter (none is created).
    pub(super) async fn decrement(&mut self, key: &str) -> Result<Option<u64>, Fault> {
        let line = self.request(&format!("ma {key} MD v"), None).await?;
        if line == "NF" {
            return Ok(None);
        }
        if !line.starts_with("VA ") {
            return Err(bad_reply(&line));
        }
        let value = self.value(&line).await?;
        // A decrement that shortens the number may leave it padded with spaces.
        value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| bad_reply(&value))
    }

    /// `lru_crawler metadump all` (memcached 1.4.31 and later): the key of every item the server
    /// holds, as the server writes it (URL-encoded). It walks every item, so it is for
    /// operations, not for locking. `None` from a server that does not know the command (older,
    /// or its crawler disabled); a server crawling already answers `BUSY`, a [`Fault::Reply`].
    pub(super) async fn metadump(&mut self) -> Result<Option<Vec<String>>, Fault> {
        if let Err(error) = self
            .stream
            .get_mut()
            .write_all(b"lru_crawler metadump all\r\n")
            .await
        {
            return Err(Fault::Transport { error, sent: false });
        }
        let mut keys = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                let error = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed");
                return Err(Fault::Transport {
                    error,
                    sent: !self.reused,
                });
            }
            self.reused = false;
            // Item lines end in '\n' alone, the last one ('END') in '\r\n'.
            let item = line.trim_end();
            if item == "END" {
                return Ok(Some(keys));
            }
            if keys.is_empty() && (item == "ERROR" || item.starts_with("CLIENT_ERROR")) {
                return Ok(None);
            }
            match item.strip_prefix("key=") {
                Some(rest) => keys.push(rest.split(' ').next().unwrap_or_default().to_string()),
                None => return Err(bad_reply(item)),
            }
        }
    }

    /// `ma` with autovivify: the counter at `key` plus one, or `start` if there was none (then
    /// created to live `ttl` seconds).
    pub(super) async fn bump(&mut self, key: &str, start: u64, ttl: u32) -> Result<u64, Fault> {
        let line = self
            .request(&format!("ma {key} N{ttl} J{start} v"), None)
            .await?;
        if !line.starts_with("VA ") {
            return Err(bad_reply(&line));
        }
        let value = self.value(&line).await?;
        value.parse().map_err(|_| bad_reply(&value))
    }
}

/// A step a lock operation takes on one connection (requests in sequence, one round trip each).
#[async_trait::async_trait]
pub(super) trait Task: Sync {
    type Output: Send;
    /// Runs it. Run again from the start if the connection turned out to be closed.
    async fn run(&self, conn: &mut Conn) -> Result<Self::Output, Fault>;
}

/// Timeouts of one server's requests.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub(super) connect: Duration,
    pub(super) response: Duration,
    /// How long refused connections are tried again (a restarting server).
    pub(super) retry_for: Duration,
}

/// One memcached server and its pool of idle connections.
pub(super) struct Server {
    pub(super) addr: String,
    idle: Mutex<Vec<Conn>>,
    /// One permit per connection in use.
    slots: Semaphore,
    timeouts: Timeouts,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addr)
    }
}

impl Server {
    pub(super) fn new(addr: String, max_connections: usize, timeouts: Timeouts) -> Self {
        Server {
            addr,
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(max_connections),
            timeouts,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a connection, trying again for `retry_for` while the server refuses (restarting).
    async fn open(&self) -> Result<Conn, Fault> {
        let started = Instant::now();
        loop {
            let error = match timeout(self.timeouts.connect, Conn::open(&self.addr)).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(e)) => e,
                Err(_) => io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
            };
            let refused = error.kind() == io::ErrorKind::ConnectionRefused;
            if !refused || started.elapsed() >= self.timeouts.retry_for {
                return Err(Fault::Transport { error, sent: false });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `task` on a connection of the pool, within the response timeout. A connection the
    /// server closed or reset while it sat idle is replaced (with every other idle one) and
    /// `task` run again, once: the request never reached it. Every other fault is the caller's.
    pub(super) async fn run<T: Task>(
        &self,
        what: &str,
        task: &T,
    ) -> crate::error::Result<T::Output> {
        let fail = |fault: Fault| fault.into_error(&self.addr, what);
        let _slot = self.slots.acquire().await.map_err(|_| {
            Error::new(ErrorKind::Connection, "the memcached pool is closed").with_backend(NAME)
        })?;
        let mut second_try = false;
        loop {
            let pooled = self.idle().pop();
            let mut conn = match pooled {
                Some(mut conn) => {
                    conn.reused = true;
                    conn
                }
                None => self.open().await.map_err(fail)?,
            };
            let outcome = match timeout(self.timeouts.response, task.run(&mut conn)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(Fault::Transport {
                    error: io::Error::new(io::ErrorKind::TimedOut, "no answer in time"),
                    sent: true,
                }),
            };
            match outcome {
                Ok(value) => {
                    self.idle().push(conn);
                    return Ok(value);
                }
                Err(Fault::Transport { sent: false, .. }) if conn.reused && !second_try => {
                    // The other idle connections predate the same server going away: the second
                    // try opens a fresh one instead of meeting the next dead one.
                    self.idle().clear();
                    second_try = true;
                }
                Err(fault) => return Err(fail(fault)),
            }
        }
    }
}

#[cfg(test)]
mod properties;
