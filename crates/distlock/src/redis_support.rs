//! What every user of redis-rs in the crate shares: how its errors read as distlock's. The
//! Redis stores (`redis://` and its Sentinel and Cluster forms, Redlock's masters) and the fence
//! helper on the caller's own connection ([`crate::fence::RedisFence`]) map them alike. It sits
//! at the crate's top so that the fence helper needs nothing from `backends/` (a helper on the
//! caller's connection runs no store).

use ::redis::{RedisError, ServerErrorKind};

use crate::error::{Error, ErrorKind};

/// The backend the errors name.
const NAME: &str = "redis";

/// What a Sentinel that refused the URL's `sentinel_password` is reported as.
pub(crate) const SENTINEL_REFUSED_LOGIN: &str =
    "a Sentinel refused the URL's sentinel_user/sentinel_password";
/// What a Sentinel that wants a password the URL does not give is reported as.
pub(crate) const SENTINEL_WANTS_LOGIN: &str =
    "a Sentinel asks for a password (its requirepass): give it as ?sentinel_password=";

/// A redis-rs error as a distlock error: transport trouble is `Connection`, the rest `Backend`.
/// redis-rs messages carry no URL, so no password can leak through them.
pub(crate) fn from_redis(what: &str, e: RedisError) -> Error {
    use ::redis::ErrorKind as Redis;
    if matches!(
        e.kind(),
        Redis::AuthenticationFailed | Redis::Server(ServerErrorKind::NoPerm)
    ) || e.code() == Some("NOAUTH")
    {
        let text = e.to_string();
        // Behind Sentinel, the Sentinels' own login (see `sentinel.rs`) or the data nodes'.
        let whose = [SENTINEL_REFUSED_LOGIN, SENTINEL_WANTS_LOGIN]
            .into_iter()
            .find(|why| text.contains(why))
            .unwrap_or(
                "the server refused the user or password in the URL (or asks for one the URL \
                 does not give), or its ACL forbids scripts",
            );
        return Error::new(ErrorKind::Backend, format!("{what}: {whose}"))
            .with_backend(NAME)
            .with_source(e);
    }
    let kind = if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
    {
        ErrorKind::Connection
    } else {
        ErrorKind::Backend
    };
    Error::new(kind, what.to_string())
        .with_backend(NAME)
        .with_source(e)
}
