//! A pipelined connection to one Redis server: the command path of every lock operation.
//!
//! Why not redis-rs' multiplexed connection: what a lock costs the server is mostly not the
//! script but the system calls around it. On this project's test machine `redis-benchmark`
//! measured ~6.5 µs of server CPU per `SET` when each arrives in a read of its own and ~1.7 µs
//! when four share a read (`-P 1` against `-P 4`). So requests from concurrent tasks should leave
//! in one write: when the last read answered more requests than are now waiting to be written,
//! the writer task yields once before it takes the buffer, so the requests of the tasks that read
//! woke (ready in the same scheduler pass) go out together, the server reads them at once and
//! answers them in one write, and the tasks it wakes send their next requests together again. A
//! lone request (the next take of a hand-over, one worker) is written at once: yielding for it
//! only added latency (fair-lock hand-offs fell ~10% when every write yielded). redis-rs still
//! packs the commands and parses errors (`ConnectionLike`), so scripts, errors and `NOSCRIPT`
//! work as on any redis-rs connection; the other replies are decoded here (`decode`: redis-rs'
//! parser zeroes a buffer per reply).
//!
//! A connection that fails (reset, closed, a reply later than the response timeout) is
//! abandoned; the next request opens a new one. A request whose bytes never reached the socket
//! fails as "broken pipe" (surely not sent, so the caller may retry it); one that was written
//! fails as "connection reset" (it may have run).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, ErrorKind as RedisKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;

use super::sentinel::{Addr, Sentinels, is_master, refused};

/// Where to connect and how to log in.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Behind Sentinel: each connection goes to the master they name (`host` and `port` unused).
    pub(crate) sentinels: Option<Arc<Sentinels>>,
}

impl Target {
    /// The server at `host:port`, logged in and on the database as `login` says, not behind
    /// Sentinel.
    pub(crate) fn new(
        host: String,
        port: u16,
        login: &::redis::RedisConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Target {
            host,
            port,
            username: login.username().map(str::to_string),
            password: login.password().map(str::to_string),
            db: login.db(),
            connect_timeout,
            response_timeout,
            sentinels: None,
        }
    }
}

/// The current connection of one server, opened again after a failure. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Pipelined(Arc<Shared>);

struct Shared {
    target: Target,
    current: Mutex<Option<Live>>,
    /// Held while a connection is being opened, so concurrent requests open only one.
    connecting: tokio::sync::Mutex<()>,
}

/// An open connection and its two tasks, stopped when it is replaced or the client goes.
struct Live {
    link: Arc<Link>,
    tasks: [AbortHandle; 2],
    /// The node it is connected to.
    addr: Addr,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.link.fail(
            io::ErrorKind::ConnectionAborted,
            "the client closed the connection",
        );
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What the caller and the two tasks of one connection share.
struct Link {
    state: Mutex<State>,
    wake_writer: Notify,
    /// Written by the writer task, or by a caller whose request finds the connection idle
    /// (`send`), never by both at once (`State::writing`).
    socket: OwnedWriteHalf,
}

type Answer = oneshot::Sender<RedisResult<Value>>;

struct State {
    /// Packed requests not yet handed to the socket.
    out: Vec<u8>,
    /// How many of the requests in `answers` (the last ones) are still in `out`.
    unsent: usize,
    /// One per request in flight, in the order they were packed.
    answers: VecDeque<Answer>,
    /// How many requests the reader's last read answered (until the writer's next write).
    last_answered: usize,
    /// The writer task is writing a batch it took from `out`: nothing else may write.
    writing: bool,
    broken: bool,
}

impl Pipelined {
    pub(crate) fn new(target: Target) -> Self {
        Pipelined(Arc::new(Shared {
            target,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }))
    }

    /// Opens the connection now (so `connect` reports an unreachable server at once).
    pub(crate) async fn open(&self) -> RedisResult<()> {
        self.link().await.map(drop)
    }

    async fn link(&self) -> RedisResult<Arc<Link>> {
        if let Some(link) = self.live_link() {
            return Ok(link);
        }
        let _one_at_a_time = self.0.connecting.lock().await;
        if let Some(link) = self.live_link() {
            return Ok(link);
        }
        let live = open(&self.0.target).await?;
        let link = live.link.clone();
        *lock(&self.0.current) = Some(live);
        Ok(link)
    }

    /// Drops the open connection unless it is to `master` (the master moved): requests in flight
    /// on it fail, and the next request opens one to where the Sentinels say the master is.
    pub(crate) fn leave_unless(&self, master: &Addr) {
        let mut current = lock(&self.0.current);
        if current.as_ref().is_some_and(|live| live.addr != *master) {
            current.take();
        }
    }

    /// The node the open connection goes to, if one is open.
    pub(crate) fn node(&self) -> Option<Addr> {
        lock(&self.0.current).as_ref().map(|live| live.addr.clone())
    }

    /// Drops the open connection (its node answered `READONLY`: it is no longer the master).
    pub(crate) fn leave(&self) {
        lock(&self.0.current).take();
    }

    fn live_link(&self) -> Option<Arc<Link>> {
        let current = lock(&self.0.current);
        current
            .as_ref()
            .filter(|live| !lock(&live.link.state).broken)
            .map(|live| live.link.clone())
    }

    /// Queues `cmd` on the open connection now, behind every request queued before it and ahead
    /// of every one queued after, and leaves its answer unread; false when no connection is open
    /// (nothing is sent: opening one takes a wait, and the request would lose its place).
    // Only Redlock sends without awaiting.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))]
    pub(crate) fn send_now(&self, cmd: &Cmd) -> bool {
        self.live_link()
            .is_some_and(|link| link.send([cmd]).is_ok())
    }

    async fn request(&self, cmd: &Cmd) -> RedisResult<Value> {
        let link = self.link().await?;
        let [answer] = link.send([cmd])?;
        self.answer(&link, answer).await
    }

    /// Sends `first` and `second` together (one write, nothing between them) and answers both,
    /// or the first error: a take and the `WAIT` for its replicas in one round trip.
    pub(crate) async fn request_pair(
        &self,
        first: &Cmd,
        second: &Cmd,
    ) -> RedisResult<(Value, Value)> {
        let link = self.link().await?;
        let [first, second] = link.send([first, second])?;
        let first = self.answer(&link, first).await;
        let second = self.answer(&link, second).await;
        Ok((first?, second?))
    }

    /// The answer to a request sent on `link`, within the response timeout.
    async fn answer(
        &self,
        link: &Link,
        answer: oneshot::Receiver<RedisResult<Value>>,
    ) -> RedisResult<Value> {
        match tokio::time::timeout(self.0.target.response_timeout, answer).await {
            Ok(Ok(value)) => value,
            // The connection failed and dropped the request unanswered (`fail` answers every
            // request it knows of, so this is a connection being torn down).
            Ok(Err(_)) => Err(io_error(
                io::ErrorKind::ConnectionReset,
                "the connection closed before the answer",
            )),
            Err(_) => {
                // A server that does not answer in time may never: later requests get a new
                // connection rather than queueing behind this one.
                link.fail(
                    io::ErrorKind::TimedOut,
                    "no answer within the response timeout",
                );
                Err(io_error(
                    io::ErrorKind::TimedOut,
                    "no answer within the response timeout",
                ))
            }
        }
    }
}

impl ConnectionLike for Pipelined {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.request(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // distlock sends scripts, one command at a time; a pipeline here is a programming error.
        Box::pin(async {
            Err(RedisError::from((
                RedisKind::Client,
                "distlock's pipelined connection sends single commands only",
            )))
        })
    }

    fn get_db(&self) -> i64 {
        self.0.target.db
    }
}

impl Link {
    /// Packs `cmds` for the writer, one after the other, and returns where their answers will
    /// arrive.
    fn send<const N: usize>(
        &self,
        cmds: [&Cmd; N],
    ) -> RedisResult<[oneshot::Receiver<RedisResult<Value>>; N]> {
        let receivers = {
            let mut state = lock(&self.state);
            if state.broken {
                return Err(not_sent());
            }
            let idle = state.out.is_empty() && !state.writing;
            let receivers = std::array::from_fn(|i| {
                let (tx, rx) = oneshot::channel();
                cmds[i].write_packed_command(&mut state.out);
                state.unsent += 1;
                state.answers.push_back(tx);
                rx
            });
            // Alone on an idle connection, and no task that the last answers woke is about to
            // add its request (see the module doc): written here and now, which spares a
            // hand-over to the writer task (a wake-up of another thread) on every request of a
            // lone worker. The state's lock keeps the bytes in order with the writer's.
            if idle && state.unsent >= state.last_answered {
                // Full, or failing: the writer waits for room, or reports the failure.
                if let Ok(written) = self.socket.try_write(&state.out) {
                    state.out.drain(..written);
                    state.unsent = 0;
                    state.last_answered = 0;
                    if state.out.is_empty() {
                        return Ok(receivers);
                    }
                }
            }
            receivers
        };
        self.wake_writer.notify_one();
        Ok(receivers)
    }

    /// Marks the connection failed and answers every request in flight: those still unwritten
    /// as not sent, the others as lost with the connection.
    fn fail(&self, kind: io::ErrorKind, why: &'static str) {
        let answers = {
            let mut state = lock(&self.state);
            if state.broken {
                return;
            }
            state.broken = true;
            state.out.clear();
            let written = state.answers.len() - state.unsent;
            state.unsent = 0;
            std::mem::take(&mut state.answers)
                .into_iter()
                .enumerate()
                .map(|(i, answer)| (i < written, answer))
                .collect::<Vec<_>>()
        };
        for (written, answer) in answers {
            let error = if written {
                io_error(kind, why)
            } else {
                not_sent()
            };
            let _ = answer.send(Err(error));
        }
        self.wake_writer.notify_one();
    }
}

async fn open(target: &Target) -> RedisResult<Live> {
    let addr = match &target.sentinels {
        Some(sentinels) => sentinels.master().await?,
        None => (target.host.clone(), target.port),
    };
    let address = (addr.0.as_str(), addr.1);
    let stream =
        match tokio::time::timeout(target.connect_timeout, TcpStream::connect(address)).await {
            Ok(stream) => stream?,
            Err(_) => {
                return Err(io_error(
                    io::ErrorKind::TimedOut,
                    "no connection within the connect timeout",
                ));
            }
        };
    stream.set_nodelay(true)?;
    let (reader, writer) = stream.into_split();
    let link = Arc::new(Link {
        state: Mutex::new(State {
            out: Vec::with_capacity(4096),
            unsent: 0,
            answers: VecDeque::new(),
            last_answered: 0,
            writing: false,
            broken: false,
        }),
        wake_writer: Notify::new(),
        socket: writer,
    });
    let live = Live {
        tasks: [
            tokio::spawn(write_loop(link.clone())).abort_handle(),
            tokio::spawn(read_loop(link.clone(), reader)).abort_handle(),
        ],
        link,
        addr,
    };
    // Log in and choose the database on the new connection before anyone else uses it.
    let hello = |cmd: Cmd| {
        let link = live.link.clone();
        let timeout = target.response_timeout;
        async move {
            let [answer] = link.send([&cmd])?;
            match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(value)) => value,
                _ => Err(io_error(
                    io::ErrorKind::TimedOut,
                    "no answer to the connection's handshake",
                )),
            }
        }
    };
    if let Some(password) = &target.password {
        let mut auth = ::redis::cmd("AUTH");
        if let Some(user) = &target.username {
            auth.arg(user);
        }
        auth.arg(password);
        if let Err(e) = hello(auth).await {
            return Err(if e.kind() == RedisKind::Io {
                e
            } else {
                // The server's text says which (WRONGPASS, …); it never echoes the password.
                RedisError::from((
                    RedisKind::AuthenticationFailed,
                    "authentication failed",
                    e.to_string(),
                ))
            });
        }
    }
    if target.db != 0 {
        hello({
            let mut select = ::redis::cmd("SELECT");
            select.arg(target.db);
            select
        })
        .await?;
    }
    // Behind Sentinel, the node named may have been turned into a replica since (a Sentinel
    // that has not seen the failover yet): nothing is sent to it, and the request is retried.
    if target.sentinels.is_some() && !is_master(&hello(::redis::cmd("ROLE")).await?) {
        return Err(refused(
            "the node the Sentinels named is not a master (yet): a failover is under way",
        ));
    }
    Ok(live)
}

/// Hands packed requests to the socket, as many at a time as are ready.
async fn write_loop(link: Arc<Link>) {
    let mut batch = Vec::with_capacity(4096);
    loop {
        link.wake_writer.notified().await;
        // Let the other tasks that are ready now add their requests first (see the module doc).
        // Fewer requests waiting than the last read answered: the tasks those answers woke are
        // likely about to send theirs, so let them run first (see the module doc). A request
        // alone (a hand-over's next take, a single worker) leaves at once.
        let expecting_more = {
            let state = lock(&link.state);
            state.unsent < state.last_answered
        };
        if expecting_more {
            tokio::task::yield_now().await;
        }
        {
            let mut state = lock(&link.state);
            if state.broken {
                return;
            }
            std::mem::swap(&mut batch, &mut state.out);
            state.unsent = 0;
            state.last_answered = 0;
            state.writing = !batch.is_empty();
        }
        if batch.is_empty() {
            continue;
        }
        let written = write_all(&link.socket, &batch).await;
        lock(&link.state).writing = false;
        if written.is_err() {
            link.fail(
                io::ErrorKind::ConnectionReset,
                "writing to the server failed",
            );
            return;
        }
        batch.clear();
    }
}

/// Writes all of `bytes` to `socket`, waiting for room as needed.
async fn write_all(socket: &OwnedWriteHalf, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        socket.writable().await?;
        match socket.try_write(bytes) {
            Ok(written) => bytes = &bytes[written..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads replies and hands each to the request it answers (the server answers in order).
async fn read_loop(link: Arc<Link>, mut socket: OwnedReadHalf) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0;
    loop {
        let mut answered = 0;
        loop {
            let len = match frame_len(&buf[start..]) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(why) => {
                    link.fail(io::ErrorKind::InvalidData, why);
                    return;
                }
            };
            let frame = &buf[start..start + len];
            start += len;
            let value = match decode(frame) {
                Some((value, _)) => Ok(value),
                None => ::redis::parse_redis_value(frame).and_then(Value::extract_error),
            };
            let answer = lock(&link.state).answers.pop_front();
            match answer {
                Some(answer) => {
                    let _ = answer.send(value);
                    answered += 1;
                }
                None => {
                    link.fail(io::ErrorKind::InvalidData, "a reply nobody asked for");
                    return;
                }
            }
        }
        if answered > 0 {
            lock(&link.state).last_answered = answered;
        }
        if start == buf.len() {
            buf.clear();
        } else {
            buf.drain(..start);
        }
        start = 0;
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match socket.read_buf(&mut buf).await {
            Ok(0) => {
                link.fail(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                );
                return;
            }
            Ok(_) => {}
            Err(_) => {
                link.fail(
                    io::ErrorKind::ConnectionReset,
                    "reading from the server failed",
                );
                return;
            }
        }
    }
}

/// How deep arrays may nest in a reply. distlock's own replies nest two deep; the bound keeps a
/// corrupt or hostile stream (`*1\r\n` repeated) from overflowing the stack.
const MAX_NESTING: usize = 16;

/// The length of the RESP2 reply at the start of `buf`, `None` if it is not complete yet.
fn frame_len(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    frame_len_within(buf, MAX_NESTING)
}

fn frame_len_within(buf: &[u8], depth: usize) -> Result<Option<usize>, &'static str> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let header = line_end + 2;
    match kind {
        b'+' | b'-' | b':' => Ok(Some(header)),
        b'$' => {
            let n = number(&buf[1..line_end])?;
            if n < 0 {
                return Ok(Some(header));
            }
            let end = header + n as usize + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        b'*' => {
            let n = number(&buf[1..line_end])?;
            if n > 0 && depth == 0 {
                return Err("a reply nested deeper than distlock's replies ever are");
            }
            let mut end = header;
            for _ in 0..n.max(0) {
                match frame_len_within(&buf[end..], depth - 1)? {
                    Some(len) => end += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        _ => Err("a reply of a type distlock does not expect (RESP3?)"),
    }
}

/// The value of a whole frame (as [`frame_len`] measured it) and its length, for the replies a
/// lock gets: simple strings, integers, bulk strings and arrays of them. redis-rs'
/// `parse_redis_value` zeroes an 8 KiB buffer at every call, which was a quarter of this
/// client's instructions per lock cycle. `None` for errors (and anything else), which go to
/// redis-rs; the values are the ones its parser makes (`+OK` is `Value::Okay`).
fn decode(frame: &[u8]) -> Option<(Value, usize)> {
    let line_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let line = &frame[1..line_end];
    let header = line_end + 2;
    let value = match frame.first()? {
        b'+' => match std::str::from_utf8(line).ok()? {
            "OK" => Value::Okay,
            text => Value::SimpleString(text.to_owned()),
        },
        b':' => Value::Int(number(line).ok()?),
        b'$' => {
            let Ok(len) = usize::try_from(number(line).ok()?) else {
                return Some((Value::Nil, header));
            };
            let end = header.checked_add(len)?;
            if frame.get(end..end.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            return Some((Value::BulkString(frame[header..end].to_vec()), end + 2));
        }
        b'*' => {
            let Ok(count) = usize::try_from(number(line).ok()?) else {
                return Some((Value::Nil, header));
            };
            // `frame_len` found every item within the frame, so `count` is no larger than it.
            let mut items = Vec::with_capacity(count.min(frame.len()));
            let mut at = header;
            for _ in 0..count {
                let (item, len) = decode(frame.get(at..)?)?;
                items.push(item);
                at += len;
            }
            return Some((Value::Array(items), at));
        }
        _ => return None,
    };
    Some((value, header))
}

fn number(digits: &[u8]) -> Result<i64, &'static str> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("a malformed length in a reply")
}

fn io_error(kind: io::ErrorKind, why: &'static str) -> RedisError {
    RedisError::from(io::Error::new(kind, why))
}

/// The error of a request that never reached the socket: "broken pipe", which
/// `invoke::surely_not_sent` recognises, so the request is retried.
fn not_sent() -> RedisError {
    io_error(
        io::ErrorKind::BrokenPipe,
        "broken pipe: the connection failed before the request was written",
    )
}

/// A poisoned lock only means another task panicked while holding it; the state stays usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::{decode, frame_len};

    #[test]
    fn replies_decode_as_redis_rs_parses_them() {
        let frames: [&[u8]; 10] = [
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b":42\r\n",
            b":-1700000000000001\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\na\r\nb!\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n$-1\r\n+OK\r\n",
        ];
        for frame in frames {
            let parsed = ::redis::parse_redis_value(frame).unwrap();
            assert_eq!(decode(frame), Some((parsed, frame.len())), "{frame:?}");
        }
        // Errors, alone or inside an array, are left to redis-rs.
        assert_eq!(decode(b"-NOSCRIPT No matching script.\r\n"), None);
        assert_eq!(decode(b"*2\r\n:1\r\n-ERR no\r\n"), None);
        assert_eq!(decode(b"%1\r\n"), None);
    }

    #[test]
    fn frames_are_measured_whole() {
        assert_eq!(frame_len(b""), Ok(None));
        assert_eq!(frame_len(b"+OK\r\n"), Ok(Some(5)));
        assert_eq!(frame_len(b"+OK\r"), Ok(None));
        assert_eq!(frame_len(b":42\r\n:1"), Ok(Some(5)));
        assert_eq!(frame_len(b"$-1\r\n"), Ok(Some(5)));
        assert_eq!(frame_len(b"$3\r\nabc\r\n"), Ok(Some(9)));
        assert_eq!(frame_len(b"$3\r\nab"), Ok(None));
        assert_eq!(
            frame_len(b"*2\r\n:1\r\n:1700000000000000\r\n"),
            Ok(Some(27))
        );
        assert_eq!(frame_len(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(frame_len(b"*-1\r\n"), Ok(Some(5)));
        assert_eq!(
            frame_len(b"-NOSCRIPT No matching script.\r\n+OK\r\n"),
            Ok(Some(31))
        );
        assert!(frame_len(b"%1\r\n").is_err());
        assert!(frame_len(b"$x\r\n").is_err());
    }
}
