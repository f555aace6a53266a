//! Reads and conditional writes of one object, the errors of the store as distlock's, and the
//! probe that refuses at connect a store whose conditional writes would not exclude.

use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};
use tokio::time::Instant;

use super::NAME;
use super::record::{Layout, LockRecord, decode_latch};
use crate::error::{Error, ErrorKind, Result};

/// An object as read: its bytes and version, or absent.
pub(super) struct Read {
    pub(super) bytes: Option<Vec<u8>>,
    /// The version a conditional write names; `None` when the object is absent.
    pub(super) version: Option<UpdateVersion>,
    /// When the answer arrived (for [`super::watch::Watch::seen`]).
    pub(super) received: Instant,
}

impl Read {
    /// The lock record read, `None` when absent; an object distlock did not write is an error
    /// (it is never overwritten).
    pub(super) fn lock_record(&self, path: &Path) -> Result<Option<LockRecord>> {
        match &self.bytes {
            None => Ok(None),
            Some(bytes) => LockRecord::decode(bytes)
                .map(Some)
                .ok_or_else(|| foreign(path, "lock")),
        }
    }

    /// The latch count read, `None` when absent.
    pub(super) fn latch_count(&self, path: &Path) -> Result<Option<u64>> {
        match &self.bytes {
            None => Ok(None),
            Some(bytes) => decode_latch(bytes)
                .map(Some)
                .ok_or_else(|| foreign(path, "latch")),
        }
    }
}

fn foreign(path: &Path, what: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!(
            "the object {path} is not a distlock {what} record: something else wrote it; \
             distlock leaves it alone (choose another prefix, or remove the object)"
        ),
    )
    .with_backend(NAME)
}

/// The answer to a conditional write.
pub(super) enum Written {
    /// Written: the object's new version.
    Yes(UpdateVersion),
    /// The object changed (or appeared) since the version named: nothing was written.
    Conflict,
}

/// The store and how messages show it.
pub(super) struct Objects {
    store: Arc<dyn ObjectStore>,
    shown: String,
}

impl Objects {
    pub(super) fn new(store: Arc<dyn ObjectStore>, shown: String) -> Self {
        Objects { store, shown }
    }

    pub(super) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub(super) async fn read(&self, path: &Path) -> Result<Read> {
        match self.store.get_opts(path, GetOptions::default()).await {
            Ok(got) => {
                let version = UpdateVersion {
                    e_tag: got.meta.e_tag.clone(),
                    version: got.meta.version.clone(),
                };
                let bytes = got
                    .bytes()
                    .await
                    .map_err(|e| self.error("reading a lock object", e))?;
                Ok(Read {
                    bytes: Some(bytes.to_vec()),
                    version: Some(version),
                    received: Instant::now(),
                })
            }
            Err(object_store::Error::NotFound { .. }) => Ok(Read {
                bytes: None,
                version: None,
                received: Instant::now(),
            }),
            Err(e) => Err(self.error("reading a lock object", e)),
        }
    }

    /// Writes `bytes` at `path` only if the object is still at `over` (or, `None`, does not
    /// exist). A write whose answer was lost and that the client sent again finds its own
    /// bytes there: that is a write that landed, not a conflict.
    pub(super) async fn write(
        &self,
        path: &Path,
        over: Option<&UpdateVersion>,
        bytes: &[u8],
    ) -> Result<Written> {
        let mode = match over {
            Some(version) => PutMode::Update(version.clone()),
            None => PutMode::Create,
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let payload = PutPayload::from(bytes.to_vec());
        match self.store.put_opts(path, payload, opts).await {
            Ok(put) => Ok(Written::Yes(UpdateVersion {
                e_tag: put.e_tag,
                version: put.version,
            })),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => {
                let now = self.read(path).await?;
                match (now.bytes, now.version) {
                    (Some(there), Some(version)) if there == bytes => Ok(Written::Yes(version)),
                    _ => Ok(Written::Conflict),
                }
            }
            // An update of an object removed since (a forced release, a lifecycle rule):
            // some stores answer 404 where others answer 412. Either way the race is lost.
            Err(object_store::Error::NotFound { .. }) if over.is_some() => Ok(Written::Conflict),
            Err(e) => Err(self.error("writing a lock object", e)),
        }
    }

    /// The keys under `folder` whose last segment starts with `starts`.
    pub(super) async fn list(&self, folder: &Path, starts: &str) -> Result<Vec<Path>> {
        let metas: Vec<_> = self
            .store
            .list(Some(folder))
            .try_collect()
            .await
            .map_err(|e| self.error("listing locks", e))?;
        Ok(metas
            .into_iter()
            .map(|m| m.location)
            .filter(|p| p.filename().is_some_and(|f| f.starts_with(starts)))
            .collect())
    }

    /// The error of a step that lost every race to other writers.
    pub(super) fn contended(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::Connection,
            format!(
                "{what} at {}: other writers changed the object at every attempt; try again",
                self.shown
            ),
        )
        .with_backend(NAME)
    }

    /// distlock's error for the store's: unreachable or timed out is a connection error (the
    /// core retries within the lease); credentials or a missing bucket say so.
    pub(super) fn error(&self, what: &str, e: object_store::Error) -> Error {
        let (kind, why) = match &e {
            object_store::Error::NotFound { .. } => (
                ErrorKind::Backend,
                "not found: does the bucket or container exist?".to_string(),
            ),
            object_store::Error::Unauthenticated { .. }
            | object_store::Error::PermissionDenied { .. } => (
                ErrorKind::Backend,
                "the store refused the credentials (check the access key and secret, or the \
                 account and key, in the URL or the environment)"
                    .to_string(),
            ),
            _ if unreachable(&e) => (
                ErrorKind::Connection,
                format!("the store could not be reached ({})", first_line(&e)),
            ),
            _ => (
                ErrorKind::Backend,
                format!("the store answered an error ({})", first_line(&e)),
            ),
        };
        // One line: not the store's whole answer (an XML body, request ids), which the error's
        // source would print after it.
        Error::new(kind, format!("{what} at {}: {why}", self.shown)).with_backend(NAME)
    }

    /// Refuses a store whose conditional writes would not exclude: a create-only write must
    /// fail where the object exists, a write on a stale version must fail. Also the first
    /// request, so a wrong endpoint, bucket or credentials fail here with their own error.
    /// `hint`, what to do when no credentials were given, follows the first request's error
    /// (but for a missing bucket, which credentials reached).
    pub(super) async fn probe(&self, layout: &Layout, hint: Option<&str>) -> Result<()> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).map_err(|e| {
            Error::new(
                ErrorKind::Backend,
                format!("no randomness for the probe: {e}"),
            )
            .with_backend(NAME)
        })?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let path = layout.probe(&nonce);
        let put = |mode: PutMode, body: &'static str| {
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            self.store
                .put_opts(&path, PutPayload::from_static(body.as_bytes()), opts)
        };
        let refused = |what: &str| {
            Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{} cannot hold locks: {what}. Two holders could each believe they hold a \
                     lock. Use a store whose conditional writes are atomic (Amazon S3, Azure \
                     Blob Storage, or an S3-compatible server that honours If-None-Match and \
                     If-Match)",
                    self.shown
                ),
            )
            .with_backend(NAME)
        };
        let first = put(PutMode::Create, "probe 1").await.map_err(|e| {
            let missing_bucket = matches!(e, object_store::Error::NotFound { .. });
            let error = self.error("writing the connect probe", e);
            match hint {
                Some(hint) if !missing_bucket => {
                    Error::new(error.kind(), format!("{}; {hint}", error.message()))
                        .with_backend(NAME)
                }
                _ => error,
            }
        })?;
        let outcome = async {
            match put(PutMode::Create, "probe 2").await {
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Ok(_) => {
                    return Err(refused(
                        "a create-only write (If-None-Match: *) replaced an existing object",
                    ));
                }
                Err(object_store::Error::NotImplemented { .. })
                | Err(object_store::Error::NotSupported { .. }) => {
                    return Err(refused("it has no create-only write"));
                }
                Err(e) => return Err(self.error("probing create-only writes", e)),
            }
            if first.e_tag.is_none() && first.version.is_none() {
                return Err(refused("its writes answer no ETag or version to write on"));
            }
            let stale = UpdateVersion::from(first);
            let second = match put(PutMode::Update(stale.clone()), "probe 3").await {
                Ok(second) => second,
                Err(object_store::Error::NotImplemented { .. })
                | Err(object_store::Error::NotSupported { .. }) => {
                    return Err(refused(
                        "it has no write conditional on a version (If-Match)",
                    ));
                }
                Err(e) => return Err(self.error("probing conditional writes", e)),
            };
            if UpdateVersion::from(second) == stale {
                return Err(refused("a write left the object's ETag unchanged"));
            }
            match put(PutMode::Update(stale), "probe 4").await {
                Err(object_store::Error::Precondition { .. })
                | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
                Ok(_) => Err(refused(
                    "a write conditional on a replaced version (If-Match: <old ETag>) succeeded",
                )),
                Err(e) => Err(self.error("probing conditional writes", e)),
            }
        }
        .await;
        // The probe's object is left to nobody: removed whatever the outcome (a failure to
        // remove it harms nothing but a few bytes).
        let _ = self.store.delete(&path).await;
        outcome
    }
}

/// The first line of `e`'s causes, at most 300 characters (a server's XML answer follows it).
fn first_line(e: &object_store::Error) -> String {
    let chain = crate::error::chain(e);
    let line = chain.lines().next().unwrap_or_default();
    match line.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

/// Whether `e` is a connection that failed or timed out (the request may not have arrived).
fn unreachable(e: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(http) = err.downcast_ref::<HttpError>() {
            return matches!(
                http.kind(),
                HttpErrorKind::Connect | HttpErrorKind::Timeout | HttpErrorKind::Interrupted
            );
        }
        source = err.source();
    }
    false
}

/// `pause` spread over its second half, so racing writers do not retry in step.
pub(super) fn jitter(pause: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let _ = getrandom::fill(&mut byte);
    pause / 2 + pause / 2 * u32::from(byte[0]) / 255
}
