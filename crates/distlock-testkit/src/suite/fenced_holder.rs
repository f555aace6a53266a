//! A holder in a process of its own that writes to a fenced resource: what the forced-release
//! and pause cases start with.

use std::time::Duration;

use serde_json::Value;

use crate::child::{ChildProcess, Role};
use crate::fenced::FencedFile;
use crate::suite::Ctx;
use crate::{Failure, check};

pub(super) struct FencedHolder {
    /// The holding process, which answers the commands of [`Role::Hold`].
    pub(super) process: ChildProcess,
    /// Its holding's fencing token.
    pub(super) token: u64,
    /// The resource it writes to, for the case's own writes.
    pub(super) resource: FencedFile,
    write: String,
}

impl FencedHolder {
    /// Starts a process holding lock `name` with `lease` and has it write its token to a fenced
    /// file of the case's directory; fails unless that first write is accepted.
    pub(super) async fn start(ctx: &Ctx, name: &str, lease: Duration) -> Result<Self, Failure> {
        let path = ctx
            .dir
            .path()
            .join(format!("{}.fenced", name.replace('/', "_")));
        let process = ChildProcess::spawn(&ctx.spec(Role::Hold {
            name: name.to_owned(),
            lease_ms: lease.as_millis() as u64,
        }))?;
        let mut holder = FencedHolder {
            process,
            token: u64::MAX,
            resource: FencedFile::new(&path),
            write: format!("write {}", path.display()),
        };
        let acquired = holder.process.event(Duration::from_secs(30)).await?;
        holder.token = acquired["token"].as_u64().unwrap_or(u64::MAX);
        let first = holder.write().await?;
        check!(first["accepted"] == true, "the holder's own write: {first}");
        Ok(holder)
    }

    /// Has the holder write its token to the resource; the answer says whether it was accepted.
    pub(super) async fn write(&mut self) -> Result<Value, Failure> {
        self.process.send(&self.write).await?;
        self.process.event(Duration::from_secs(10)).await
    }
}
