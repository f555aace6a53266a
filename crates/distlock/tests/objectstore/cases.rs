//! The object-store cases beyond the conformance suite, run against each server (RustFS for
//! `s3://`, Azurite for `az://`): typed errors for a bad bucket, credentials or endpoint; a
//! waiter that takes over only after a whole unchanged lease; fencing tokens after the lock's
//! object is lost; an object distlock did not write, left alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backends::objectstore::ObjectStoreBackend;
use distlock::{ErrorKind, LockName};
use distlock_testkit::{Ctx, Outcome, Suite, check, check_above, check_kind};
use object_store::{ObjectStoreExt, PutPayload};

/// `suite` with the cases every object store runs.
pub fn added(suite: Suite) -> Suite {
    let suite = suite
        .case(
            "objectstore::bad_bucket_credentials_and_endpoint_are_typed_errors",
            bad_bucket_credentials_and_endpoint,
        )
        .case(
            "objectstore::waiter_takes_over_after_an_unchanged_lease",
            waiter_takes_over_after_an_unchanged_lease,
        )
        .case(
            "objectstore::tokens_stay_above_after_the_object_is_lost",
            tokens_stay_above_after_the_object_is_lost,
        )
        .case(
            "objectstore::foreign_object_is_left_alone",
            foreign_object_is_left_alone,
        );
    // The fence an application keeps beside its data, with the SQLite fence's feature.
    #[cfg(feature = "sqlite-fence")]
    let suite = suite.case(
        "objectstore::paused_holders_late_write_refused_by_sqlfence",
        paused_holders_late_write_refused_by_sqlfence,
    );
    suite
}

/// `url` (`scheme://user:secret@bucket?query`) with one part replaced.
fn with_bucket(url: &str, bucket: &str) -> String {
    let (head, rest) = url.split_once('@').expect("credentials in the URL");
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    format!("{head}@{bucket}?{query}")
}

fn with_secret(url: &str, secret: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a scheme");
    let (user, _) = rest.split_once(':').expect("a user");
    let (_, tail) = rest.split_once('@').expect("credentials in the URL");
    format!("{scheme}://{user}:{secret}@{tail}")
}

fn with_endpoint(url: &str, endpoint: &str) -> String {
    let (head, query) = url.split_once('?').expect("a query");
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("endpoint="))
        .collect();
    format!("{head}?endpoint={endpoint}&{}", kept.join("&"))
        .trim_end_matches('&')
        .to_string()
}

pub async fn bad_bucket_credentials_and_endpoint(ctx: Ctx) -> Outcome {
    let missing = with_bucket(&ctx.url, "distlock-no-such-bucket");
    let answer = distlock::connect(&missing).await;
    check_kind(&answer, ErrorKind::Backend, "a bucket that does not exist")?;
    let message = answer.err().map(|e| e.to_string()).unwrap_or_default();
    check!(
        message.contains("does the bucket or container exist"),
        "the missing bucket's error does not say so: {message}"
    );

    // A secret of the right shape (Azure's is base64), but not the server's.
    let secret = "d3JvbmctYnV0LWJhc2U2NC1zaGFwZWQtc2VjcmV0LWtleS0xMjM0NTY3ODkwMTI%3D";
    let answer = distlock::connect(&with_secret(&ctx.url, secret)).await;
    check_kind(&answer, ErrorKind::Backend, "wrong credentials")?;
    let message = answer.err().map(|e| e.to_string()).unwrap_or_default();
    check!(
        message.contains("refused the credentials"),
        "the wrong credentials' error does not say so: {message}"
    );
    check!(
        !message.contains("d3JvbmctYnV0"),
        "the error shows the secret: {message}"
    );

    // No credentials at all (none in the environment either, as in CI): S3's client asks the
    // instance metadata service, which off a cloud fails without naming a credential; Azure's
    // cannot even name the account. Either way the error says what to set.
    if !["AWS_ACCESS_KEY_ID", "AZURE_STORAGE_ACCOUNT_NAME"]
        .iter()
        .any(|var| std::env::var_os(var).is_some())
    {
        let (scheme, rest) = ctx.url.split_once("://").expect("a scheme");
        let (_, after) = rest.split_once('@').expect("credentials in the URL");
        let answer = distlock::connect(&format!("{scheme}://{after}")).await;
        check!(answer.is_err(), "a URL without credentials connected");
        let message = answer
            .as_ref()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let (kind, wanted) = match scheme {
            "s3" => (None, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
            _ => (Some(ErrorKind::InvalidUrl), "AZURE_STORAGE_ACCOUNT_NAME"),
        };
        if let Some(kind) = kind {
            check_kind(&answer, kind, "no account")?;
        }
        check!(
            message.contains(wanted) && message.contains("@"),
            "the error of a URL without credentials does not say what to set: {message}"
        );
    }

    // Nothing listens on port 1.
    let started = Instant::now();
    let answer = distlock::connect(&with_endpoint(&ctx.url, "http://127.0.0.1:1")).await;
    check_kind(
        &answer,
        ErrorKind::Connection,
        "an endpoint nobody listens on",
    )?;
    let took = started.elapsed();
    check!(
        took < Duration::from_secs(30),
        "an unreachable endpoint took {took:?} to answer"
    );
    Ok(())
}

/// A holder that stops renewing (here: no watchdog, a 2 s lease) keeps its lock until a waiter
/// has seen its object unchanged for the whole lease and the drift allowance, by the waiter's
/// clock: never sooner, and soon after.
pub async fn waiter_takes_over_after_an_unchanged_lease(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("takeover");
    let lease = Duration::from_secs(2);
    let holder = ctx
        .client
        .lock(&name)
        .lease(lease)
        .no_watchdog()
        .acquire()
        .await?;
    let other = distlock::connect(&ctx.url).await?;
    let first_look = Instant::now();
    check!(
        other.lock(&name).try_acquire().await?.is_none(),
        "a second client took a held lock"
    );
    let taken = other
        .lock(&name)
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    let after = first_look.elapsed();
    let margin = other.backend().capabilities().drift_margin(lease);
    check!(
        after >= lease + margin,
        "taken over {after:?} after the first look, before the lease and drift ({:?})",
        lease + margin
    );
    check!(
        after < lease + margin + Duration::from_secs(2),
        "taken over only {after:?} after the first look"
    );
    check_above(
        "the token after the takeover",
        taken.fencing_token(),
        holder.fencing_token(),
    )?;
    check!(
        !holder.release().await?,
        "the old holder's release freed the new holder's lock"
    );
    check!(taken.release().await?, "the new holder lost its lock");
    Ok(())
}

/// The lock's object deleted (a lifecycle rule, an operator): the next take draws a token from
/// the clock in µs, above every token drawn from the object before.
pub async fn tokens_stay_above_after_the_object_is_lost(ctx: Ctx) -> Outcome {
    let backend = ObjectStoreBackend::connect(&ctx.url).await?;
    let store = Arc::clone(backend.store());
    let name = ctx.unique_name("lost-object");
    let object = backend.lock_object(&LockName::new(&name)?);
    let client = distlock::Client::new(backend);
    let mut last = None;
    for _ in 0..3 {
        let held = client.lock(&name).acquire().await?;
        if let Some(previous) = last {
            check_above(
                "the token after the object was lost",
                held.fencing_token(),
                previous,
            )?;
        }
        last = Some(held.fencing_token());
        check!(held.release().await?, "the holder lost its lock");
        store.delete(&object).await?;
    }
    Ok(())
}

/// An object at a lock's key that distlock did not write is an error, and stays as it was.
pub async fn foreign_object_is_left_alone(ctx: Ctx) -> Outcome {
    let backend = ObjectStoreBackend::connect(&ctx.url).await?;
    let store = Arc::clone(backend.store());
    let name = ctx.unique_name("foreign");
    let object = backend.lock_object(&LockName::new(&name)?);
    let client = distlock::Client::new(backend);
    store
        .put(&object, PutPayload::from_static(b"someone else's data"))
        .await?;
    let answer = client.lock(&name).try_acquire().await;
    check_kind(&answer, ErrorKind::Backend, "a take over a foreign object")?;
    let there = store.get(&object).await?.bytes().await?;
    check!(
        there.as_ref() == b"someone else's data",
        "the foreign object was changed to {there:?}"
    );
    store.delete(&object).await?;
    Ok(())
}

/// A holder that stopped renewing (paused past its lease: here, no watchdog) is taken over, and
/// its late write is refused by the resource's fence: `SqlFence` on SQLite, as an application
/// would keep one beside its data.
#[cfg(feature = "sqlite-fence")]
pub async fn paused_holders_late_write_refused_by_sqlfence(ctx: Ctx) -> Outcome {
    use distlock::fence::SqlFence;
    let db = ctx.dir.path().join("objectstore-fence.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}?mode=rwc", db.display())).await?;
    let fence = SqlFence::<sqlx::Sqlite>::install(&pool).await?;
    let name = ctx.unique_name("fenced");
    let paused = ctx
        .client
        .lock(&name)
        .lease(Duration::from_secs(2))
        .no_watchdog()
        .acquire()
        .await?;
    let other = distlock::connect(&ctx.url).await?;
    let newer = other
        .lock(&name)
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    let mut tx = pool.begin().await?;
    fence.check(&mut tx, &name, newer.fencing_token()).await?;
    tx.commit().await?;
    check!(
        paused.is_lost(),
        "the paused holder does not know its lease ended"
    );
    let mut tx = pool.begin().await?;
    let late = fence.check(&mut tx, &name, paused.fencing_token()).await;
    check_kind(
        &late,
        ErrorKind::StaleToken,
        "the paused holder's late write",
    )?;
    drop(tx);
    check!(newer.release().await?, "the newer holder lost its lock");
    Ok(())
}
