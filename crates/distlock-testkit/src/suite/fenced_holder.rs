//! A holder in a process of its own that writes to a fenced resource: what the forced-release
//! and pause cases start with.

use std::time::Duration;

use serde_json::Value;

use crate::child::ChildProcess;
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
        let (process, token) = ctx.holder_process(name, lease).await?;
        let mut holder = FencedHolder {
            process,
            token,
            resource: FencedFile::new(&path),
            write: format!("write {}", path.display()),
        };
        let first = holder.write().await?;
        check!(first["accepted"] == true, "the holder's own write: {first}");
        Ok(holder)
    }

    /// Has the holder write its token to the resource; the answer says whether it was accepted.
    pub(super) async fn write(&mut self) -> Result<Value, Failure> {
        self.process.ask(&self.write, Duration::from_secs(10)).await
    }
}
