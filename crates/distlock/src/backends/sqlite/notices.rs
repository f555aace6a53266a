//! "A lock may be free" notices between processes: inotify on the sidecar file, whose release
//! counters a release bumps (see `sidecar.rs`).
//!
//! One task per backend reads the inotify descriptor; on every modification it rereads the
//! counters and, for each one that moved, wakes the waiters of that slot (a `watch` channel per
//! slot). The file is watched only while this process has waiters, so processes that never wait
//! (uncontended locks) are not woken by other processes' releases.
//!
//! No notice is missed between a waiter's subscription and its retry: the watch is added before
//! the waiter subscribes, a release bumps its counter only after its commit, so a release the
//! retry did not see causes an inotify event after the subscription, and the counter the task
//! then reads differs from the one it last sent. A notice lost anyway (the file replaced, an
//! inotify error) costs at most the holder's lease left: the core never sleeps longer.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::sidecar::{SLOTS, Sidecar};
use crate::backend::Wakeups;

/// The notices of one backend; stops listening when dropped.
#[derive(Debug)]
pub(super) struct Notices {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    inotify: AsyncFd<OwnedFd>,
    sidecar_path: CString,
    /// One channel per release counter; its value is the counter last seen.
    slots: Vec<watch::Sender<u64>>,
    watching: Mutex<Watching>,
}

/// How many waiters of this process listen, and the inotify watch they share.
#[derive(Debug, Default)]
struct Watching {
    waiters: usize,
    watch: Option<i32>,
}

impl Notices {
    /// Starts listening to the sidecar's releases. Fails without a Tokio I/O driver or inotify;
    /// the backend then waits without notices.
    pub(super) fn start(sidecar: Arc<Sidecar>) -> io::Result<Self> {
        // SAFETY: inotify_init1(2) takes only flags (no pointers, no descriptors of ours); a
        // negative answer is an error handled below, any other is a new descriptor that
        // nothing else in the process knows, owned right below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: from_raw_fd requires an open descriptor with no other owner: `fd` was just
        // returned by inotify_init1 (checked non-negative) and is not stored anywhere else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let sidecar_path = CString::new(sidecar.path().as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: register_with_interest requires that the descriptor stays open and the same
        // for the AsyncFd's whole life: the OwnedFd moves into the AsyncFd, nothing else holds
        // or closes that number, and it is closed only when the AsyncFd drops it.
        let inotify = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        let shared = Arc::new(Shared {
            inotify,
            sidecar_path,
            slots: (0..SLOTS).map(|_| watch::channel(0).0).collect(),
            watching: Mutex::new(Watching::default()),
        });
        let task = tokio::spawn(listen(shared.clone(), sidecar));
        Ok(Notices { shared, task })
    }

    /// The notices for lock names of `slot`, from now on.
    pub(super) fn watch(&self, slot: usize) -> io::Result<Wakeups> {
        // First listen to the file, then subscribe: see the module docs.
        let listening = Listening::register(self.shared.clone())?;
        let seen = self.shared.slots[slot].subscribe();
        Ok(Box::pin(futures_util::stream::unfold(
            (seen, listening),
            |(mut seen, listening)| async move {
                seen.changed().await.ok()?;
                Some(((), (seen, listening)))
            },
        )))
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One waiter's share of the inotify watch: the first adds it, the last removes it.
struct Listening {
    shared: Arc<Shared>,
}

impl Listening {
    fn register(shared: Arc<Shared>) -> io::Result<Self> {
        let mut watching = shared.watching.lock().unwrap_or_else(|p| p.into_inner());
        if watching.watch.is_none() {
            // SAFETY: inotify_add_watch(2) reads a NUL-terminated path and needs an inotify
            // descriptor: `sidecar_path` is a CString (NUL-terminated, alive for the call, as
            // `shared` is), and the descriptor is the AsyncFd's, open while `shared` lives.
            let wd = unsafe {
                libc::inotify_add_watch(
                    shared.inotify.as_raw_fd(),
                    shared.sidecar_path.as_ptr(),
                    libc::IN_MODIFY,
                )
            };
            if wd < 0 {
                return Err(io::Error::last_os_error());
            }
            watching.watch = Some(wd);
        }
        watching.waiters += 1;
        drop(watching);
        Ok(Listening { shared })
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut watching = self
            .shared
            .watching
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        watching.waiters -= 1;
        if watching.waiters == 0
            && let Some(wd) = watching.watch.take()
        {
            // SAFETY: inotify_rm_watch(2) takes two integers: the inotify descriptor, open while
            // `shared` lives, and a watch id; a stale id only makes the call fail (EINVAL), which
            // changes nothing.
            unsafe { libc::inotify_rm_watch(self.shared.inotify.as_raw_fd(), wd) };
        }
    }
}

/// Wakes the waiters of every slot whose counter moved, after each inotify event.
async fn listen(shared: Arc<Shared>, sidecar: Arc<Sidecar>) {
    let mut last = sidecar.counters().unwrap_or_else(|_| vec![0; SLOTS]);
    let mut events = [0u8; 4096];
    loop {
        let Ok(mut ready) = shared.inotify.readable().await else {
            return;
        };
        // The events themselves say nothing we need: only that the counters may have moved.
        let read = ready.try_io(|fd| {
            // SAFETY: read(2) writes at most `events.len()` bytes at `events`' start: a live,
            // exclusively borrowed buffer of that length; `fd` is the open inotify descriptor.
            let n = unsafe { libc::read(fd.as_raw_fd(), events.as_mut_ptr().cast(), events.len()) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
        match read {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!("inotify failed, waiters fall back on their timers: {e}");
                return;
            }
            Err(_would_block) => continue,
        }
        let Ok(now) = sidecar.counters() else {
            continue;
        };
        for ((seen, now), slot) in last.iter_mut().zip(now).zip(&shared.slots) {
            if *seen != now {
                *seen = now;
                slot.send_replace(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;

    use super::*;
    use crate::backends::sqlite::sidecar::slot_of;

    fn watch_id(notices: &Notices) -> Option<i32> {
        notices.shared.watching.lock().unwrap().watch
    }

    /// Every unsafe call here on its path: the descriptor made and registered, the watch added
    /// by the first waiter, the events read after another opening's release, the watch removed
    /// by the last waiter.
    #[tokio::test]
    async fn another_openings_release_wakes_the_waiters_of_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let notices = Notices::start(Arc::new(Sidecar::open(&db).unwrap())).unwrap();
        let releaser = Sidecar::open(&db).unwrap();
        let slot = slot_of("orders/42");
        assert_eq!(watch_id(&notices), None, "watched before any waiter");
        let mut first = notices.watch(slot).unwrap();
        let second = notices.watch(slot).unwrap();
        assert!(watch_id(&notices).is_some(), "a waiter and no watch");
        // Let the listening task read the counters it compares against before the release.
        tokio::task::yield_now().await;
        let mut woken = false;
        for _ in 0..50 {
            releaser.lock_writers().unwrap().bump(slot).unwrap();
            if let Ok(Some(())) =
                tokio::time::timeout(Duration::from_millis(200), first.next()).await
            {
                woken = true;
                break;
            }
        }
        assert!(woken, "no release of 50 woke the slot's waiter");
        drop(first);
        assert!(
            watch_id(&notices).is_some(),
            "removed while a waiter is left"
        );
        drop(second);
        assert_eq!(watch_id(&notices), None, "still watched without waiters");
    }
}
