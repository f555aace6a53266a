//! The conformance suite against the embedded SQLite backend, in a temporary file, plus what only
//! an embedded file has to get right. Set DISTLOCK_SQLITE_URL to run it against another file.

use std::sync::Arc;
use std::time::Duration;

use distlock::LockKind;
use distlock::backend::{Attempt, Backend, Waiter};
use distlock_testkit::cases;
use distlock_testkit::child::{ChildProcess, Role, Spec};
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, check, check_above, check_taken, mutex_request,
};

fn main() -> std::process::ExitCode {
    // Removed when the run ends; child processes get the URL from their spec.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = std::env::var("DISTLOCK_SQLITE_URL")
        .unwrap_or_else(|_| format!("sqlite:{}", dir.path().join("locks.db").display()));
    Suite::new("sqlite", "SQLite file", url)
        .flavours(Flavour::every())
        .case(
            "sqlite::readers_share_writers_exclude",
            cases::readers_share_writers_exclude,
        )
        .case(
            "sqlite::waiting_writer_holds_back_new_readers",
            cases::writer_preference,
        )
        .case(
            "sqlite::read_to_write_upgrade_is_refused",
            cases::upgrade_is_refused,
        )
        .case(
            "sqlite::semaphore_counts_permits",
            cases::semaphore_counts_permits,
        )
        .case(
            "sqlite::fair_lock_serves_in_arrival_order",
            cases::fair_serves_in_arrival_order,
        )
        // The place of a waiter lasts 6 s without it asking again (flavours.rs).
        .case("sqlite::fair_killed_waiter_lapses", |ctx| {
            cases::fair_killed_waiter_lapses(ctx, Duration::from_secs(15))
        })
        .case(
            "sqlite::client_supports_every_flavour",
            supports_every_flavour,
        )
        .case("sqlite::processes_create_one_file_at_once", create_at_once)
        .case(
            "sqlite::hand_over_in_memory_keeps_exclusion_and_fencing",
            hand_over_in_memory,
        )
        .case(
            "sqlite::forced_release_stops_hand_overs_in_memory",
            forced_release_stops_hand_overs,
        )
        .case(
            "sqlite::a_lease_nearly_over_is_handed_over_in_a_write",
            nearly_over_is_written,
        )
        .case("sqlite::config_in_code_locks", config_in_code_locks)
        .run()
}

/// A store opened from [`SqliteConfig`](distlock::backends::sqlite::SqliteConfig) alone (the
/// suite's file, no URL), and (feature `serde`) from JSON, locks: the suite's client, opened by
/// URL, finds the lock held, then free once released.
async fn config_in_code_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::sqlite::{SqliteBackend, SqliteConfig};
    let path = ctx
        .url
        .strip_prefix("sqlite:")
        .ok_or_else(|| Failure(format!("{} is not sqlite:PATH", ctx.url)))?;
    let mut configs = vec![SqliteConfig::new(path).busy_timeout(Duration::from_secs(5))];
    #[cfg(feature = "serde")]
    {
        let json = serde_json::json!({"path": path, "busy_timeout": "5s"}).to_string();
        let read: SqliteConfig = serde_json::from_str(&json)
            .map_err(|e| Failure(format!("the JSON configuration does not read: {e}")))?;
        check!(read == configs[0], "JSON read as {read:?}");
        configs.push(read);
    }
    for config in configs {
        let backend = SqliteBackend::connect_config(config, &distlock::Options::default()).await?;
        let client = distlock::Client::from_backend(Arc::new(backend));
        let name = ctx.unique_name("config");
        let guard = client.lock(&name).acquire().await?;
        check!(
            ctx.client.lock(&name).try_acquire().await?.is_none(),
            "the URL client took a lock the configured client holds"
        );
        check!(guard.release().await?, "the release found nothing");
        let after = ctx.client.lock(&name).try_acquire().await?;
        check!(after.is_some(), "still held after the release");
        after.expect("checked").release().await?;
    }
    let empty = SqliteBackend::connect_config(SqliteConfig::new(""), &distlock::Options::default())
        .await
        .err();
    check!(
        empty.as_ref().map(distlock::Error::kind) == Some(distlock::ErrorKind::InvalidInput),
        "an empty path answered {empty:?}"
    );
    Ok(())
}

/// Eight processes open a file that does not exist yet at the same moment: all of them must
/// come up (one creates the tables and switches to WAL, the others wait), then share the lock.
async fn create_at_once(ctx: Ctx) -> Outcome {
    let file = ctx
        .dir
        .path()
        .join(format!("{}.db", ctx.unique_name("fresh").replace('/', "_")));
    let spec = Spec {
        url: format!("sqlite:{}", file.display()),
        flavour: ctx.flavour.name.to_string(),
        role: Role::Record {
            name: "shared".into(),
            acquisitions: 20,
        },
    };
    let mut children = Vec::new();
    for _ in 0..8 {
        children.push(ChildProcess::spawn(&spec)?);
    }
    let mut holds = Vec::new();
    for child in &mut children {
        let event = child.event(Duration::from_secs(60)).await?;
        holds.extend(event["holds"].as_array().cloned().unwrap_or_default());
    }
    for child in children {
        child.finish(Duration::from_secs(10)).await?;
    }
    check!(holds.len() == 160, "{} holds of 160", holds.len());
    Ok(())
}

/// The token of an attempt that must have acquired.
fn acquired(attempt: Attempt, what: &str) -> Result<u64, Failure> {
    match attempt {
        Attempt::Acquired { token, .. } => Ok(token.get()),
        other => Err(Failure(format!("{what}: {other:?}"))),
    }
}

/// Each of `waiters` finds the lock held by `holder`, which then releases it.
async fn held_then_released<const N: usize>(
    backend: &Arc<dyn Backend>,
    holder: &distlock::LockRequest,
    waiters: [&mut Box<dyn Waiter>; N],
) -> Outcome {
    for waiter in waiters {
        check!(
            matches!(waiter.poll().await?, Attempt::Held { .. }),
            "a waiter did not find the lock held"
        );
    }
    check!(
        backend.release(holder, None).await?,
        "the holder's release was refused"
    );
    Ok(())
}

/// The token the file names for `name`, as another client reads it.
async fn token_in_file(other: &distlock::Client, name: &str) -> Result<Option<u64>, Failure> {
    let status = other.status(name).await?;
    Ok(status
        .first()
        .and_then(|s| s.holdings.first())
        .map(|h| h.token.get()))
}

/// A release hands the lock to a waiter of its own client in memory: no write, so the file still
/// names the first holding. Another client (its own writer and memory, as another process would
/// be) must find the lock held throughout; the first holder's stale release and renewal must be
/// refused and change nothing; the file must name the new holding from the next write about
/// the lock on; and tokens must increase: first holder < waiter < the next take anywhere.
async fn hand_over_in_memory(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("handed");
    let lease = Duration::from_secs(10);
    let (first, second) = (mutex_request(&name, lease)?, mutex_request(&name, lease)?);
    let backend = ctx.client.backend();
    let other = distlock::connect(&ctx.url).await?;
    // Whether the backend renews, or releases, `request`'s holding with `token`.
    let renews = async |request: &distlock::LockRequest, token: u64| -> Result<bool, Failure> {
        let token = distlock::FencingToken::new(token);
        Ok(backend.extend(request, token).await?.is_some())
    };
    let releases = async |request: &distlock::LockRequest, token: u64| -> Result<bool, Failure> {
        let token = distlock::FencingToken::new(token);
        Ok(backend.release(request, Some(token)).await?)
    };

    let t1 = acquired(backend.try_take(&first).await?, "the first take")?;
    let mut waiter = backend
        .waiter(&second)
        .expect("the SQLite backend has a waiter");
    held_then_released(backend, &first, [&mut waiter]).await?;
    let t2 = acquired(waiter.poll().await?, "the waiter after the release")?;
    check!(
        t2 > t1,
        "the waiter's token {t2} is not above the first's {t1}"
    );
    // Handed over in memory: the file has not been written.
    check!(
        token_in_file(&other, &name).await? == Some(t1),
        "the file no longer names the first holding: the hand-over was written"
    );
    check_taken(
        &other.lock(&name),
        "another client took the lock the waiter was handed",
    )
    .await?;

    // The first holder's stale renewal and release change nothing, and make the file name the
    // waiter (a write about the lock moves the row first).
    check!(
        !renews(&first, t1).await?,
        "the first holder renewed a lock it had handed over"
    );
    check!(
        !releases(&first, t1).await?,
        "the first holder released a lock it had handed over"
    );
    check!(
        token_in_file(&other, &name).await? == Some(t2),
        "after a write about the lock the file names {:?}, not the waiter's {t2}",
        token_in_file(&other, &name).await?
    );
    check_taken(
        &other.lock(&name),
        "another client took the lock after the first holder's stale release",
    )
    .await?;

    check!(
        renews(&second, t2).await?,
        "the waiter could not renew its holding"
    );
    check!(
        releases(&second, t2).await?,
        "the waiter could not release its holding"
    );
    let next = other
        .lock(&name)
        .try_acquire()
        .await?
        .ok_or_else(|| Failure("the lock was not free after the waiter released it".into()))?;
    let whose = "a later take's token, after the handed-over one";
    check_above(whose, next.fencing_token().get(), t2)?;
    next.release().await?;
    Ok(())
}

/// A holder handed the lock in memory is released by force from another client: the file's row
/// is gone, so its release must not hand the lock on in memory to the next waiter of its client
/// (who would then hold a lock the file says is free); the waiter gets it only by a take, with a
/// token above the one the forced release drew.
async fn forced_release_stops_hand_overs(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("forced");
    let lease = Duration::from_secs(10);
    let (first, second, third) = (
        mutex_request(&name, lease)?,
        mutex_request(&name, lease)?,
        mutex_request(&name, lease)?,
    );
    let backend = ctx.client.backend();
    let other = distlock::connect(&ctx.url).await?;

    acquired(backend.try_take(&first).await?, "the first take")?;
    let mut second_waiter = backend.waiter(&second).expect("a waiter");
    let mut third_waiter = backend.waiter(&third).expect("a waiter");
    held_then_released(backend, &first, [&mut second_waiter, &mut third_waiter]).await?;
    let t2 = acquired(second_waiter.poll().await?, "the second after the release")?;

    let forced = other.force_release(&name, LockKind::Mutex).await?;
    check!(
        forced.fence.get() > t2,
        "the forced release drew {} below the holder's {t2}",
        forced.fence
    );
    let taker = other
        .lock(&name)
        .try_acquire()
        .await?
        .ok_or_else(|| Failure("the lock was not free after the forced release".into()))?;
    // The forced-out holder releases: nothing of it is in the file any more.
    check!(
        !backend
            .release(&second, Some(distlock::FencingToken::new(t2)))
            .await?,
        "the forced-out holder's release was accepted"
    );
    check!(
        matches!(third_waiter.poll().await?, Attempt::Held { .. }),
        "the next waiter was handed a lock another client holds"
    );
    taker.release().await?;
    let t3 = acquired(
        third_waiter.poll().await?,
        "the third once the lock was free",
    )?;
    check!(
        t3 > forced.fence.get(),
        "the third drew {t3}, not above the forced release's {}",
        forced.fence
    );
    check!(
        backend.release(&third, None).await?,
        "the third's release was refused"
    );
    third_waiter.leave().await?;
    second_waiter.leave().await?;
    Ok(())
}

/// A row with less than half the waiter's lease left is not handed over in memory (the waiter
/// would get only the little that is left): the release's transaction takes the lock for the
/// waiter with a full lease, so the file names the waiter at once.
async fn nearly_over_is_written(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("nearly-over");
    let lease = Duration::from_secs(2);
    let (first, second) = (mutex_request(&name, lease)?, mutex_request(&name, lease)?);
    let backend = ctx.client.backend();
    let other = distlock::connect(&ctx.url).await?;

    acquired(backend.try_take(&first).await?, "the first take")?;
    let mut waiter = backend.waiter(&second).expect("a waiter");
    check!(
        matches!(waiter.poll().await?, Attempt::Held { .. }),
        "the waiter did not find the lock held"
    );
    // Past half the lease: 0.8 s left of 2 s.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    check!(
        backend.release(&first, None).await?,
        "the holder's release was refused"
    );
    let (token, valid_for) = match waiter.poll().await? {
        Attempt::Acquired {
            token,
            hold: distlock::backend::Hold::Lease { valid_for },
        } => (token.get(), valid_for),
        other => return Err(Failure(format!("the waiter after the release: {other:?}"))),
    };
    check!(
        valid_for > Duration::from_millis(1500),
        "the waiter was given {valid_for:?} of a 2 s lease: handed the old row's rest in memory"
    );
    check!(
        token_in_file(&other, &name).await? == Some(token),
        "the file does not name the waiter's holding {token} after the hand-over"
    );
    check!(
        backend
            .release(&second, Some(distlock::FencingToken::new(token)))
            .await?,
        "the waiter could not release"
    );
    Ok(())
}

/// The embedded default carries every flavour, and says so at run time.
async fn supports_every_flavour(ctx: Ctx) -> Outcome {
    for kind in distlock_testkit::flavour::every_lock_kind(3) {
        check!(
            ctx.client.supports(kind),
            "Client::supports({kind:?}) is false on SQLite"
        );
    }
    Ok(())
}
