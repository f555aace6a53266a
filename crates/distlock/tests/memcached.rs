//! The conformance suite against the real memcached (DISTLOCK_MEMCACHED_URL, default
//! memcached://127.0.0.1:11211), exclusive lock only, with a private memcached for the restart
//! cases; then the cases only it has (`memcached::…`): names that memcached keys cannot hold as
//! they are, fencing tokens after a lost counter and a restart, a taker that crashed between its
//! `add` and its grant, locks spread over two servers, what its whole-second leases refuse, and
//! the election record and latch built from check-and-set steps (stale writes, racing writers,
//! a lost head, a latch that is never created by a count-down), and a memcached run with `-M`
//! whose memory is full (a renewal, a re-take and another client's take that find no memory).

use std::time::{Duration, Instant};

use distlock::backend::ElectionWrite;
use distlock::{ErrorKind, FencingToken, Lock, LockName, OwnerToken};
use distlock_testkit::faults::FaultProxy;
use distlock_testkit::servers::{
    PrivateServer, PrivateStore, start_memcached, start_memcached_without_evictions,
};
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, check, check_above, check_kind, check_taken,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_MEMCACHED_URL")
        .unwrap_or_else(|_| "memcached://127.0.0.1:11211".to_string());
    Suite::new("memcached", "memcached", url)
        .flavours(vec![Flavour::mutex()])
        // As scripts/services.sh runs it: nothing on disk, a restart loses every item.
        .private_store(start_memcached)
        .case(
            "memcached::typed_configuration_alone",
            typed_configuration_alone,
        )
        .case(
            "memcached::awkward_names_never_collide_or_break_the_stream",
            names_never_collide,
        )
        .case(
            "memcached::tokens_increase_after_the_counter_is_lost",
            counter_lost,
        )
        .case(
            "memcached::tokens_increase_across_restarts_while_held",
            restarts_while_held,
        )
        .case(
            "memcached::taker_crashed_before_its_grant_blocks_one_lease",
            pending_taker_crashed,
        )
        .case("memcached::locks_spread_over_two_servers", two_servers)
        .case(
            "memcached::sub_second_leases_are_refused_and_seconds_kept",
            whole_seconds,
        )
        .case(
            "memcached::stale_election_writes_change_nothing",
            stale_election_writes,
        )
        .case(
            "memcached::racing_election_writers_leave_no_log_hole",
            racing_election_writers,
        )
        .case(
            "memcached::latch_count_down_never_creates_or_goes_below_zero",
            latch_count_down,
        )
        .case(
            "memcached::full_memory_renewal_loses_the_lock_before_another_takes_it",
            full_memory_renewal,
        )
        .case(
            "memcached::full_memory_take_leaves_the_holders_item",
            full_memory_take,
        )
        .case(
            "memcached::full_memory_retake_and_reentry_keep_the_holding",
            full_memory_retake,
        )
        .run()
}

/// A raw text-protocol connection, for looking at items (never for taking locks).
struct Raw(BufReader<TcpStream>);

impl Raw {
    async fn connect(url: &str) -> Result<Raw, Failure> {
        let addr = url
            .strip_prefix("memcached://")
            .and_then(|rest| rest.split([',', '/', '?']).next())
            .ok_or_else(|| Failure(format!("not a memcached URL: {url}")))?;
        Ok(Raw(BufReader::new(TcpStream::connect(addr).await?)))
    }

    /// The value, if the item is there (`mg KEY c v`, its CAS left out).
    async fn get(&mut self, key: &str) -> Result<Option<String>, Failure> {
        Ok(self.get_with_cas(key).await?.map(|(_, value)| value))
    }

    /// `mg KEY c v`: the reply line (with the item's CAS) and the value, if the item is there:
    /// equal before and after only if nothing rewrote the item, even with the same value.
    async fn get_with_cas(&mut self, key: &str) -> Result<Option<(String, String)>, Failure> {
        let line = self.command(&format!("mg {key} c v")).await?;
        if line == "EN" {
            return Ok(None);
        }
        let len: usize = line
            .strip_prefix("VA ")
            .and_then(|l| l.split(' ').next())
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| Failure(format!("mg answered {line:?}")))?;
        let mut data = vec![0; len + 2];
        self.0.read_exact(&mut data).await?;
        data.truncate(len);
        Ok(Some((line, String::from_utf8_lossy(&data).into_owned())))
    }

    /// The statistic `name` of `stats`.
    async fn stat(&mut self, name: &str) -> Result<u64, Failure> {
        self.0.get_mut().write_all(b"stats\r\n").await?;
        let mut found = None;
        loop {
            let line = self.line().await?;
            if line == "END" {
                break;
            }
            if let Some(value) = line.strip_prefix(&format!("STAT {name} ")) {
                found = value.parse().ok();
            }
        }
        found.ok_or_else(|| Failure(format!("memcached's stats have no {name}")))
    }

    /// Stores items with keys of `key_len` bytes and values of `value_len` bytes (so all in one
    /// slab class, with the lock items of those lengths) until memcached, run with `-M`, refuses
    /// one for lack of memory. How many it stored. Pipelined in quiet mode (`q`: only errors are
    /// answered, `mn` ends a batch), so a few megabytes fill in well under a second.
    async fn fill(&mut self, tag: &str, key_len: usize, value_len: usize) -> Result<u64, Failure> {
        const BATCH: u64 = 256;
        let prefix = format!("fill:{tag}:");
        let digits = key_len.saturating_sub(prefix.len());
        if digits < 7 {
            return Err(Failure(format!(
                "keys of {key_len} bytes are too short to fill"
            )));
        }
        let value = "f".repeat(value_len);
        let mut sent = 0;
        loop {
            let mut batch = String::new();
            for n in sent..sent + BATCH {
                batch.push_str(&format!(
                    "ms {prefix}{n:0digits$} {value_len} q\r\n{value}\r\n"
                ));
            }
            batch.push_str("mn\r\n");
            self.0.get_mut().write_all(batch.as_bytes()).await?;
            let mut refused = 0;
            loop {
                match self.line().await?.as_str() {
                    "MN" => break,
                    l if l.starts_with("SERVER_ERROR out of memory") => refused += 1,
                    l => return Err(Failure(format!("filling: memcached answered {l:?}"))),
                }
            }
            sent += BATCH;
            if refused > 0 {
                return Ok(sent - refused);
            }
            if sent > 10_000_000 {
                return Err(Failure(
                    "memcached stored 10 million items: is it run with -M?".into(),
                ));
            }
        }
    }

    /// The next line memcached sends, without its line end; fails if it closed the connection.
    async fn line(&mut self) -> Result<String, Failure> {
        let mut line = String::new();
        if self.0.read_line(&mut line).await? == 0 {
            return Err(Failure("memcached closed the connection".into()));
        }
        Ok(line.trim_end().to_string())
    }

    /// The value of the lock item of `key`, which a take just stored.
    async fn lock_item(&mut self, key: &str) -> Result<String, Failure> {
        self.get(key)
            .await?
            .ok_or_else(|| Failure("no lock item after the take".into()))
    }

    /// Fails unless the item of `key` still has `value`: `what` (a take refused for memory)
    /// left it as it was.
    async fn check_unchanged(&mut self, key: &str, value: &str, what: &str) -> Outcome {
        let now = self.get(key).await?;
        check!(
            now.as_deref() == Some(value),
            "{what} left the item as {now:?}"
        );
        Ok(())
    }

    /// Sends `command` and returns the reply line.
    async fn command(&mut self, command: &str) -> Result<String, Failure> {
        self.0
            .get_mut()
            .write_all(format!("{command}\r\n").as_bytes())
            .await?;
        let mut line = String::new();
        self.0.read_line(&mut line).await?;
        Ok(line.trim_end().to_string())
    }
}

/// The lock key of a name made only of characters a key keeps as they are.
fn plain_lock_key(name: &str) -> String {
    plain_key("lock", name)
}

/// The key of role `role` (`lock`, `elect`, `alive`, `latch`, …) of such a name.
fn plain_key(role: &str, name: &str) -> String {
    format!("distlock:{role}:{}", name.replace('%', "%25"))
}

async fn names_never_collide(ctx: Ctx) -> Outcome {
    let base = ctx.unique_name("names");
    let victim = format!("{base}/victim");
    let victim_guard = ctx.lock(&victim).acquire().await?;
    // Protocol text inside names: spaces that would split the command line into more keys and
    // flags, and whole commands after them.
    let victim_key = plain_lock_key(&victim);
    let long_prefix = format!("{base}/{}", "p".repeat(300));
    // As many two-byte characters as a 512-byte name holds.
    let accents = (distlock::LockName::MAX_LEN - base.len() - 1) / 2;
    let names = [
        format!("{base}/a b"),
        format!("{base}/a%20b"),
        format!("{base}/a_b"),
        format!("{base}/x md {victim_key}"),
        format!("{base}/x v c t T0 {victim_key} I"),
        format!("{base}/\u{2028}line separator\u{2029}"),
        format!("{long_prefix}/one"),
        format!("{long_prefix}/two"),
        format!("{base}/{}", "é".repeat(accents)),
        format!("{base}/{}e", "é".repeat(accents - 1)),
    ];
    let mut guards = Vec::new();
    for name in &names {
        check!(name.len() <= 512, "{} bytes", name.len());
        let guard = ctx.lock(name).try_acquire().await?;
        check!(guard.is_some(), "{name:?} was held before anyone took it");
        guards.push(guard.unwrap());
    }
    // Each is its own lock, and none touched the victim.
    for name in &names {
        check_taken(&ctx.lock(name), "{name:?} is free after being taken").await?;
    }
    check_taken(
        &ctx.lock(&victim),
        "a name holding protocol text freed another lock",
    )
    .await?;
    let tokens: Vec<u64> = guards.iter().map(|g| g.fencing_token().get()).collect();
    let mut distinct = tokens.clone();
    distinct.sort();
    distinct.dedup();
    check!(
        distinct.len() == tokens.len(),
        "two names shared a fencing counter: {tokens:?}"
    );
    // Names memcached keys cannot carry are refused before anything is sent.
    for bad in ["a\r\nmd x", "a\rb", "a\nb", "a\0b"] {
        let outcome = ctx.lock(&format!("{base}/{bad}")).try_acquire().await;
        check_kind(&outcome, ErrorKind::InvalidName, &format!("{bad:?}"))?;
    }
    for guard in guards {
        check!(guard.release().await?, "a lock was lost");
    }
    // The stream is still in step: the victim is where it was, and its release works.
    let mut raw = Raw::connect(&ctx.url).await?;
    let item = raw.get(&victim_key).await?;
    check!(
        item.as_deref()
            .is_some_and(|v| v.ends_with(&format!(" {}", victim_guard.fencing_token()))),
        "the victim's item is {item:?}"
    );
    check!(victim_guard.release().await?, "the victim lost its lock");
    Ok(())
}

async fn counter_lost(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("counter");
    let lock = ctx.lock(&name);
    let first = lock.acquire().await?;
    let t1 = first.fencing_token();
    // What an eviction does: the counter is gone while the lock is held.
    let mut raw = Raw::connect(&ctx.url).await?;
    let deleted = raw
        .command(&format!("md distlock:fence:{}", name.replace('%', "%25")))
        .await?;
    check!(deleted == "HD", "deleting the counter answered {deleted:?}");
    check!(first.release().await?, "the holder lost its lock");
    let second = lock.acquire().await?;
    let whose = "the token after the counter was lost";
    check_above(whose, second.fencing_token(), t1)?;
    check!(second.release().await?, "the next holder lost its lock");
    Ok(())
}

async fn restarts_while_held(ctx: Ctx) -> Outcome {
    let mut store = ctx.private_store()?;
    let client = distlock::connect(&store.url()).await?;
    let name = ctx.unique_name("restart");
    let mut highest = 0;
    for round in 0..2 {
        let held = client
            .lock(&name)
            .lease(Duration::from_secs(2))
            .acquire()
            .await?;
        let token = held.fencing_token().get();
        check!(
            token > highest,
            "round {round}: token {token} not above {highest}"
        );
        highest = token;
        tokio::task::block_in_place(|| store.restart())?;
        // The item is gone with the restart: the holder is told within its lease.
        let lost = tokio::time::timeout(Duration::from_secs(4), held.lost()).await;
        check!(lost.is_ok(), "round {round}: lost() did not fire");
    }
    let last = client.lock(&name).acquire().await?;
    let whose = "the token after two restarts";
    check_above(whose, last.fencing_token().get(), highest)?;
    check!(last.release().await?, "the last holder lost its lock");
    Ok(())
}

/// Adds the item a taker leaves between its `add` and its grant: `owner`'s, with no token yet,
/// living `ttl` seconds.
async fn add_pending(raw: &mut Raw, name: &str, owner: &OwnerToken, ttl: u32) -> Outcome {
    let value = format!("{} -", owner.as_str());
    let key = plain_lock_key(name);
    let added = raw
        .command(&format!("ms {key} {} ME T{ttl}\r\n{value}", value.len()))
        .await?;
    check!(added == "HD", "the pending item was not added: {added:?}");
    Ok(())
}

async fn pending_taker_crashed(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("pending");
    // A taker whose `add` landed and who died before drawing its token: its pending item.
    let mut raw = Raw::connect(&ctx.url).await?;
    let crashed = OwnerToken::random();
    add_pending(&mut raw, &name, &crashed, 2).await?;
    check_taken(&ctx.lock(&name), "a pending take did not hold the lock").await?;
    let started = std::time::Instant::now();
    let guard = ctx
        .lock(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    check!(
        started.elapsed() <= Duration::from_secs(3),
        "a pending item of 2 s held the lock {:?}",
        started.elapsed()
    );
    let guard_token = guard.fencing_token();
    // The crashed taker's own owner token cannot release the new holding.
    let stale = ctx.lock(&name).owner(crashed).release().await;
    check_kind(&stale, ErrorKind::NotHeld, "the crashed taker's release")?;
    check!(guard.release().await?, "the holder lost its lock");

    // The owner's own pending item (its take was cancelled after the add): its next take
    // finishes the grant, with a token above the last holder's.
    let owner = OwnerToken::random();
    add_pending(&mut raw, &name, &owner, 30).await?;
    let resumed = ctx.lock(&name).owner(owner).try_acquire().await?;
    check!(resumed.is_some(), "the owner could not finish its own take");
    let resumed = resumed.unwrap();
    let whose = "the resumed holder's token";
    check_above(whose, resumed.fencing_token(), guard_token)?;
    check!(resumed.release().await?, "the resumed holder lost its lock");
    Ok(())
}

async fn two_servers(ctx: Ctx) -> Outcome {
    let other = ctx.private_store()?;
    let url = format!(
        "{},{}",
        ctx.url,
        other.url().trim_start_matches("memcached://")
    );
    let a = distlock::connect(&url).await?;
    let b = distlock::connect(&url).await?;
    let base = ctx.unique_name("spread");
    let names: Vec<String> = (0..16).map(|i| format!("{base}/{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(a.lock(name).acquire().await?);
        check_taken(
            &b.lock(name),
            "another client of the same servers got {name:?}",
        )
        .await?;
    }
    let (mut first, mut second) = (
        Raw::connect(&ctx.url).await?,
        Raw::connect(&other.url()).await?,
    );
    let (mut on_first, mut on_second) = (0, 0);
    for name in &names {
        let key = plain_lock_key(name);
        match (first.get(&key).await?, second.get(&key).await?) {
            (Some(_), None) => on_first += 1,
            (None, Some(_)) => on_second += 1,
            both => return Err(Failure(format!("{name:?} lives on {both:?}"))),
        }
    }
    check!(
        on_first > 0 && on_second > 0,
        "16 locks all on one server ({on_first} and {on_second})"
    );
    for guard in guards {
        check!(guard.release().await?, "a lock was lost");
    }
    Ok(())
}

async fn whole_seconds(ctx: Ctx) -> Outcome {
    use distlock::backend::LeaseModel;
    let caps = ctx.client.backend().capabilities();
    check!(
        matches!(caps.lease, LeaseModel::PerLock { granularity } if granularity == Duration::from_secs(1)),
        "capabilities say {:?}",
        caps.lease
    );
    let name = ctx.unique_name("seconds");
    let refused = ctx
        .lock(&name)
        .lease(Duration::from_millis(500))
        .try_acquire()
        .await;
    check_kind(&refused, ErrorKind::InvalidLease, "a 500 ms lease")?;
    // 1.2 s is kept as 2 s (whole seconds, rounded up): still held after 1.5 s without renewal.
    let guard = ctx
        .lock(&name)
        .lease(Duration::from_millis(1200))
        .no_watchdog()
        .acquire()
        .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    check_taken(&ctx.lock(&name), "a lease of 1.2 s ended before 1.5 s").await?;
    check!(guard.release().await?, "the holder lost its lock");
    Ok(())
}

/// A deposed leader's late writes (a lower term, with a value or resigning) change neither the
/// head nor the liveness item, not even their CAS; after the head is lost (an eviction), the
/// live leader's liveness item still bars a lower term from starting the new head, and the
/// leader's next refresh starts it above every earlier seq.
async fn stale_election_writes(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("stale");
    let record = LockName::new(&name)?;
    let backend = elections(&ctx.client)?;
    let ttl = Duration::from_secs(5);
    let (leader, deposed) = (FencingToken::new(1_000), FencingToken::new(999));
    // A write of `value` (none: a resignation) under `term`; whether it was taken.
    let write = |term, value| backend.elect_write(ElectionWrite::new(&record, term, value, ttl));
    // Fails unless the record names `leader` with "new" (`when` is the moment, in failures).
    let check_leads = async |when: &str| -> Outcome {
        let current = backend.elect_current(&record).await?;
        let expected = Some((leader, Some("new")));
        check!(
            current.as_ref().map(|e| (e.term, e.value.as_deref())) == expected,
            "{when} the leader is {current:?}"
        );
        Ok(())
    };
    // Fails saying `what` unless the record names no leader.
    let check_no_leader = async |what: &str| -> Outcome {
        check!(backend.elect_current(&record).await?.is_none(), "{what}");
        Ok(())
    };
    check!(
        write(deposed, Some("old")).await?,
        "the first write was refused"
    );
    check!(
        write(leader, Some("new")).await?,
        "a newer term was refused"
    );
    let mut raw = Raw::connect(&ctx.url).await?;
    let (head_key, alive_key) = (plain_key("elect", &name), plain_key("alive", &name));
    let head = raw.get_with_cas(&head_key).await?;
    let alive = raw.get_with_cas(&alive_key).await?;
    check!(head.is_some() && alive.is_some(), "{head:?} {alive:?}");
    for value in [Some("late"), Some("new"), None] {
        check!(
            !write(deposed, value).await?,
            "a write of the older term with {value:?} was accepted"
        );
        check!(
            raw.get_with_cas(&head_key).await? == head,
            "a refused write with {value:?} touched the head"
        );
        check!(
            raw.get_with_cas(&alive_key).await? == alive,
            "a refused write with {value:?} touched the liveness item"
        );
    }
    check_leads("after the refused writes").await?;
    let before = backend.elect_log(&record, None).await?;
    let last_seq = before.last().map_or(0, |e| e.seq);

    // The head is evicted while the leader is live.
    check!(
        raw.command(&format!("md {head_key}")).await? == "HD",
        "the head was not there to delete"
    );
    check!(
        !write(deposed, Some("late")).await?,
        "an older term started a new head under a live leader"
    );
    check!(
        raw.get(&head_key).await?.is_none(),
        "a refused write made a head"
    );
    check_no_leader("a leader without a head").await?;
    check!(
        write(leader, Some("new")).await?,
        "the leader's refresh was refused"
    );
    check_leads("after the refresh").await?;
    // An observer placed before the loss finds the new head's entry after its place.
    let after = backend.elect_log(&record, Some(last_seq)).await?;
    check!(
        after.len() == 1 && after[0].seq > last_seq && after[0].term == leader,
        "entries after seq {last_seq}: {after:?}"
    );
    check!(write(leader, None).await?, "the leader could not resign");
    check!(
        raw.get(&alive_key).await?.is_none(),
        "resigning left the liveness item"
    );
    check_no_leader("a leader after resigning").await?;

    // A head lost and started again below an observer's place (the client that started it had
    // its clock behind): the observer still gets its entries, not nothing until seqs pass it.
    let place = backend.elect_log(&record, None).await?;
    let place = place.last().map_or(0, |e| e.seq);
    let restarted = "5 5 2000 1 restarted";
    check!(
        raw.command(&format!("ms {head_key} {}\r\n{restarted}", restarted.len()))
            .await?
            == "HD",
        "the head could not be replaced"
    );
    let after = backend.elect_log(&record, Some(place)).await?;
    check!(
        after.len() == 1 && after[0].seq == 5 && after[0].value.as_deref() == Some("restarted"),
        "entries after seq {place} of a head restarted at 5: {after:?}"
    );
    Ok(())
}

/// Writers on separate clients append distinct values in the same term at once, so their
/// check-and-sets collide all the time: every write lands exactly once, the log has no hole and
/// no duplicate, and each writer's values are in the order it wrote them.
async fn racing_election_writers(ctx: Ctx) -> Outcome {
    const WRITERS: usize = 4;
    const WRITES: usize = 50;
    let name = ctx.unique_name("race");
    let record = LockName::new(&name)?;
    let term = FencingToken::new(7);
    let ttl = Duration::from_secs(5);
    let backend = elections(&ctx.client)?;
    check!(
        backend
            .elect_write(ElectionWrite::new(&record, term, Some("start"), ttl))
            .await?,
        "the first write was refused"
    );
    let start = backend.elect_log(&record, None).await?;
    let start = start.last().map_or(0, |e| e.seq);
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let client = ctx.connect().await?;
        let record = record.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..WRITES {
                let value = format!("w{w}-{i}");
                if !elections(&client)?
                    .elect_write(ElectionWrite::new(&record, term, Some(&value), ttl))
                    .await?
                {
                    return Err(Failure(format!("{value} was refused")));
                }
            }
            Ok::<(), Failure>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| Failure(format!("a writer panicked: {e}")))??;
    }
    let entries = backend.elect_log(&record, Some(start)).await?;
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (start + 1..=start + (WRITERS * WRITES) as u64).collect();
    check!(
        seqs == expected,
        "{} entries after seq {start}; the first hole or extra after {:?}",
        seqs.len(),
        seqs.iter().zip(&expected).find(|(a, b)| a != b)
    );
    for w in 0..WRITERS {
        let mine: Vec<String> = entries
            .iter()
            .filter_map(|e| e.value.clone())
            .filter(|v| v.starts_with(&format!("w{w}-")))
            .collect();
        let written: Vec<String> = (0..WRITES).map(|i| format!("w{w}-{i}")).collect();
        check!(mine == written, "writer {w}'s values in the log: {mine:?}");
    }
    check!(
        entries.iter().all(|e| e.term == term),
        "an entry of another term"
    );
    Ok(())
}

/// The election records of `client`'s store (memcached keeps them).
fn elections(client: &distlock::Client) -> Result<&dyn distlock::backend::Elections, Failure> {
    client
        .backend()
        .elections()
        .ok_or_else(|| Failure("the memcached backend keeps no election records".into()))
}

/// A count-down of a latch memcached does not hold answers 0 and creates nothing; racing
/// count-downs of a latch of 3 answer 2, 1 and then 0 every time; a latch lost mid-count (an
/// eviction) reads 0, so its waiters go: what docs.md says.
async fn latch_count_down(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("latch");
    let latch = ctx.client.latch(&name);
    let key = plain_key("latch", &name);
    let mut raw = Raw::connect(&ctx.url).await?;
    check!(
        latch.count_down().await? == 0,
        "a missing latch counted down"
    );
    check!(
        raw.get(&key).await?.is_none(),
        "a count-down created the latch"
    );
    check!(
        latch.try_set_count(3).await?,
        "a new latch refused its count"
    );
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let client = ctx.connect().await?;
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            client.latch(&name).count_down().await
        }));
    }
    let mut afters = Vec::new();
    for task in tasks {
        afters.push(
            task.await
                .map_err(|e| Failure(format!("a count-down panicked: {e}")))??,
        );
    }
    afters.sort_unstable();
    check!(
        afters == [0, 0, 0, 0, 0, 0, 0, 0, 1, 2],
        "counts after 10 count-downs of 3: {afters:?}"
    );
    check!(
        latch.try_set_count(2).await?,
        "a latch at 0 refused a new round"
    );
    check!(
        raw.command(&format!("md {key}")).await? == "HD",
        "the latch item was not there"
    );
    check!(latch.count().await? == 0, "a lost latch does not read 0");
    latch.wait_timeout(Duration::from_secs(2)).await?;
    Ok(())
}

/// How many megabytes the private memcached of the full-memory cases gets (`-M -m 2`).
const FULL_MEMORY_MB: u32 = 2;

/// A renewal that finds memcached's memory full (run with `-M`, so it refuses instead of
/// evicting): the holder's guard reports the lock lost no later than the moment another client
/// takes it. memcached's meta `ms` deletes the item it could not replace when it answers
/// `SERVER_ERROR out of memory`, even with a CAS; the renewal must not lose the item that way
/// behind the holder's back (another client took it at once while the holder learnt it a
/// twelfth of the lease later, at its next try).
async fn full_memory_renewal(ctx: Ctx) -> Outcome {
    let (_store, url) = full_memory_store()?;
    let (holder, other) = (connect(&url).await?, connect(&url).await?);
    let name = ctx.unique_name("full");
    let lease = Duration::from_secs(3);
    let held = holder.lock(&name).lease(lease).acquire().await?;
    let mut raw = Raw::connect(&url).await?;
    let key = plain_lock_key(&name);
    let value = raw.lock_item(&key).await?;
    // Every chunk of the lock item's slab class taken: its next renewal finds no memory.
    let filled = raw.fill("granted", key.len(), value.len()).await?;
    let full_at = Instant::now();
    let lost = held.lost();
    let lost_at = tokio::spawn(async move {
        let why = lost.await;
        (Instant::now(), why)
    });
    // The other client tries every 10 ms; its take may fail for lack of memory meanwhile.
    let mut refused = 0;
    let (taken_at, holder_lost_when_taken) = loop {
        match other.lock(&name).lease(lease).try_acquire().await {
            Ok(Some(guard)) => {
                let holder_lost = held.is_lost();
                let at = Instant::now();
                guard.release().await?;
                break (at, holder_lost);
            }
            Ok(None) => {}
            Err(e) if e.kind() == ErrorKind::Backend => refused += 1,
            Err(e) => return Err(e.into()),
        }
        check!(
            full_at.elapsed() < Duration::from_secs(20),
            "nobody took the lock in 20 s after memory filled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (lost_at, why) = tokio::time::timeout(Duration::from_secs(10), lost_at)
        .await
        .map_err(|_| Failure("the holder's lost() did not fire".into()))?
        .map_err(|e| Failure(format!("the lost() task failed: {e}")))?;
    eprintln!(
        "full memory ({filled} items filled the lock's slab class): lost() fired {:?} after, \
         another client took the lock {:?} after ({refused} takes refused for memory); {}",
        lost_at.duration_since(full_at),
        taken_at.duration_since(full_at),
        if taken_at >= lost_at {
            format!("{:?} after lost()", taken_at - lost_at)
        } else {
            format!("{:?} BEFORE lost()", lost_at - taken_at)
        }
    );
    check!(
        holder_lost_when_taken,
        "another client took the lock {:?} after memory filled while the holder's guard still \
         said held (its lost() fired {:?} after)",
        taken_at.duration_since(full_at),
        lost_at.duration_since(full_at)
    );
    // Lost because every renewal was refused for memory until the lease ended.
    check!(
        why.to_string().contains("out of memory"),
        "the holder's lost() says {why}"
    );
    Ok(())
}

/// A private memcached that refuses writes once its memory is full (it never evicts), and its
/// URL.
fn full_memory_store() -> Result<(PrivateServer, String), Failure> {
    let store = tokio::task::block_in_place(|| start_memcached_without_evictions(FULL_MEMORY_MB))?;
    let url = store.url();
    Ok((store, url))
}

/// A client of `url`.
async fn connect(url: &str) -> Result<distlock::Client, Failure> {
    Ok(distlock::connect(url).await?)
}

/// Lock `name` through `client`, of `owner`, with `lease`.
fn owned(client: &distlock::Client, name: &str, owner: &OwnerToken, lease: Duration) -> Lock {
    client.lock(name).owner(owner.clone()).lease(lease)
}

/// Another client's take that finds memcached's memory full must leave the holder's item: its
/// `add` reaches the server after the holder took the lock (the contender read the key free just
/// before) and is refused for lack of memory. memcached's meta `ms` in add mode then deletes the
/// item that is there, the holder's, though the add never stored anything.
async fn full_memory_take(ctx: Ctx) -> Outcome {
    let (store, url) = full_memory_store()?;
    let proxy = FaultProxy::start(store.port()).await?;
    let contender = distlock::connect(&format!("memcached://127.0.0.1:{}", proxy.port())).await?;
    let holder = distlock::connect(&url).await?;
    let name = ctx.unique_name("race");
    let key = plain_lock_key(&name);
    let lease = Duration::from_secs(30);
    let mut raw = Raw::connect(&url).await?;
    // The contender's first read of the free lock is answered 2 s late: it then adds its pending
    // item while the holder holds the lock and memory is full.
    let misses = raw.stat("get_misses").await?;
    proxy.set_delay(Duration::from_secs(2));
    let contender_lock = contender.lock(&name).lease(lease);
    let contending =
        tokio::spawn(async move { contender_lock.try_acquire().await.map(|g| g.is_some()) });
    while raw.stat("get_misses").await? == misses {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let owner = OwnerToken::random();
    let held = owned(&holder, &name, &owner, lease).acquire().await?;
    let value = raw.lock_item(&key).await?;
    // The pending item's slab class (the contender's add) and the granted item's (the holder's
    // renewals) full.
    let pending_len = owner.as_str().len() + 2;
    raw.fill("pending", key.len(), pending_len).await?;
    raw.fill("granted", key.len(), value.len()).await?;
    let contended = contending
        .await
        .map_err(|e| Failure(format!("the contender's take panicked: {e}")))?;
    check!(
        matches!(&contended, Err(e) if e.kind() == ErrorKind::Backend
            && e.to_string().contains("out of memory")),
        "the contender's take after the holder's answered {contended:?}, not memcached's out of \
         memory (its add came before memory was full: the case did not happen)"
    );
    let refused = format!(
        "the contender's take, refused for memory, while the holder's guard says held (lost: {}),",
        held.is_lost()
    );
    raw.check_unchanged(&key, &value, &refused).await?;
    check!(!held.is_lost(), "the holder lost its lock");
    check!(
        held.release().await?,
        "the holder's release found no holding"
    );
    Ok(())
}

/// The owner's re-take from another client (the take's check-and-set of its own item) and a
/// reentry in the holder's client (a confirmation, an extend) that find memcached's memory
/// full answer an error and leave the holding as it was; a release still frees it (a delete
/// needs no memory).
async fn full_memory_retake(ctx: Ctx) -> Outcome {
    let (_store, url) = full_memory_store()?;
    let (holder, twin) = (connect(&url).await?, connect(&url).await?);
    let name = ctx.unique_name("retake");
    let key = plain_lock_key(&name);
    let lease = Duration::from_secs(30);
    let owner = OwnerToken::random();
    let held = owned(&holder, &name, &owner, lease).acquire().await?;
    let mut raw = Raw::connect(&url).await?;
    let value = raw.lock_item(&key).await?;
    raw.fill("granted", key.len(), value.len()).await?;
    let out_of_memory = |r: &distlock::Result<Option<distlock::Guard>>| matches!(r, Err(e) if e.kind() == ErrorKind::Backend && e.to_string().contains("out of memory"));
    for (client, what) in [(&twin, "the owner's re-take"), (&holder, "the reentry")] {
        let tried = owned(client, &name, &owner, lease).try_acquire().await;
        check!(out_of_memory(&tried), "{what} answered {tried:?}");
        let refused = format!("{what}, refused for memory,");
        raw.check_unchanged(&key, &value, &refused).await?;
    }
    check!(!held.is_lost(), "the holder lost its lock");
    check!(
        held.release().await?,
        "the release under full memory found no holding"
    );
    check!(raw.get(&key).await?.is_none(), "the release left the item");
    Ok(())
}

/// A `MemcachedConfig` built in code from the URL's servers, no URL: it takes a lock the URL's
/// client then finds held, and frees it for that client on release; one from JSON finds it held
/// too. A setting in code the store cannot honour is refused, typed.
async fn typed_configuration_alone(ctx: Ctx) -> Outcome {
    use distlock::backends::memcached::{MemcachedBackend, MemcachedConfig};
    let servers = MemcachedConfig::from_url(&ctx.url)?.servers;
    let options = distlock::Options::default();
    let config = MemcachedConfig::new(servers.clone()).max_connections(2);
    let typed = distlock::Client::from_backend(std::sync::Arc::new(
        MemcachedBackend::connect_config(config, &options).await?,
    ));
    let name = ctx.unique_name("typed-memcached");
    let held = typed.lock(&name).acquire().await?;
    check_taken(&ctx.client.lock(&name), "the URL's client took it").await?;
    #[cfg(feature = "serde")]
    {
        let json = serde_json::json!({ "servers": servers, "max_connections": 3 });
        let config: MemcachedConfig = serde_json::from_value(json)?;
        let from_json = distlock::Client::from_backend(std::sync::Arc::new(
            MemcachedBackend::connect_config(config, &options).await?,
        ));
        check_taken(&from_json.lock(&name), "the JSON client took it").await?;
    }
    held.release().await?;
    let taken = ctx.client.lock(&name).try_acquire().await?;
    check!(taken.is_some(), "released by the typed client, yet held");
    if let Some(guard) = taken {
        guard.release().await?;
    }
    let err = MemcachedBackend::connect_config(
        MemcachedConfig::new(servers).max_connections(0),
        &options,
    )
    .await
    .map(drop)
    .unwrap_err();
    check!(err.kind() == ErrorKind::InvalidInput, "{err:?}");
    check!(err.to_string().contains("max_connections"), "{err}");
    Ok(())
}
