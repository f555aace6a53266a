//! COMMAND dies with `distlock exec`, however `distlock` dies.
//!
//! Once `distlock` is gone nobody renews the lease: within one lease another holder may take the
//! lock, so COMMAND must not outlive it. Signals handle most endings, but `kill -9`, the OOM
//! killer or a crash leave no chance to forward anything. Two mechanisms cover them:
//!
//! * [`die_with_parent`]: COMMAND itself gets `PR_SET_PDEATHSIG(SIGKILL)`, so the kernel kills it
//!   when `distlock` ends. This does not reach what COMMAND started.
//! * [`Tether`]: a tiny watcher process, forked from `distlock`, blocks reading a pipe whose only
//!   write end `distlock` holds. When `distlock` dies the pipe closes and the watcher SIGKILLs
//!   COMMAND's process group, grandchildren included. When COMMAND has ended normally, `distlock`
//!   sends one byte first and the watcher leaves quietly. Where COMMAND gets a process group of
//!   its own, the watcher is started *first* and COMMAND joins the watcher's group
//!   ([`Tether::group`]): a watcher started after COMMAND left a window in which a killed
//!   `distlock` left COMMAND's children running (seen on a loaded machine, where `distlock` was
//!   not scheduled between spawning COMMAND and starting the watcher). The watcher ignores the
//!   signals `distlock` forwards to that group.
//!
//! What remains: a *stopped* `distlock` (SIGSTOP, a frozen VM) holds the pipe open and cannot stop
//! anything; its lease still runs out. The fencing token is the answer there.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Makes COMMAND (spawned by `command`) receive SIGKILL when `distlock` ends.
///
/// The death signal follows the *thread* that forked COMMAND: `exec` spawns from the thread
/// running `block_on` (the main thread), which lives as long as the process.
pub(super) fn die_with_parent(command: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: pre_exec requires a closure that is safe between fork and exec in a child of
        // a multi-threaded process: no allocation, no locks, only async-signal-safe calls. It
        // captures one integer, makes only prctl(2) and getppid(2), and its errors are built
        // from errno or an ErrorKind, neither of which allocates.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then no signal will come.
                // (No message: one would allocate after fork, and nobody is left to read it.)
                if libc::getppid() != parent {
                    return Err(io::ErrorKind::Other.into());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// The watcher process of one COMMAND; see the [module docs](self).
pub(super) struct Tether {
    /// The pipe's write end: closing it (by exiting, in any way) tells the watcher to kill.
    alive: OwnedFd,
    watcher: libc::pid_t,
}

impl Tether {
    /// Starts a watcher in a process group of its own, for COMMAND to join before it starts
    /// ([`group`](Tether::group)); the watcher SIGKILLs that whole group as soon as this process
    /// ends without calling [`Tether::stand_down`].
    pub(super) fn for_new_group() -> io::Result<Tether> {
        let tether = Self::attach(0)?;
        // Also here, not only in the watcher: COMMAND may be spawned into the group before the
        // watcher has run at all (a group must exist to be joined).
        // SAFETY: setpgid(2) takes two integers and touches no memory of ours: our own child
        // (not reaped while `tether` lives) made the leader of its own group. A failure
        // (the watcher already did it) is harmless.
        unsafe { libc::setpgid(tether.watcher, tether.watcher) };
        Ok(tether)
    }

    /// The process group COMMAND joins (`Command::process_group`): the watcher's.
    pub(super) fn group(&self) -> libc::pid_t {
        self.watcher
    }

    /// Starts a watcher that SIGKILLs `target` (a pid, a process group if negative, its own
    /// process group if 0) as soon as this process ends without calling [`Tether::stand_down`].
    pub(super) fn attach(target: libc::pid_t) -> io::Result<Tether> {
        let mut fds = [0; 2];
        // SAFETY: pipe2(2) writes two descriptors through its pointer: `fds` is a live array of
        // exactly two c_ints. O_CLOEXEC keeps the write end out of COMMAND and every other
        // program we start: only this process may hold it.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: from_raw_fd requires open descriptors with no other owner: pipe2 succeeded,
        // so both are open, and they were created just above and are stored nowhere else.
        let (read_end, alive) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child of fork in a multi-threaded process may only make async-signal-safe
        // calls until it execs or exits; `watch` makes only dup2, close, close_range, setpgid,
        // signal, read, kill and _exit (and sysconf(_SC_OPEN_MAX), which glibc answers from
        // getrlimit, only on kernels without close_range), allocates nothing and never
        // returns. The parent only records the pid.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            // SAFETY: `watch` must run only in the child of fork, with the pipe's read end:
            // fork answered 0, so this is the child, and `read_end` is that end.
            0 => unsafe { watch(read_end.as_raw_fd(), target) },
            watcher => Ok(Tether { alive, watcher }),
        }
    }

    /// COMMAND has ended: the watcher leaves without killing anything, and is reaped.
    pub(super) fn stand_down(self) {
        // SAFETY: write(2) reads one byte from a static one-byte buffer into our own open
        // pipe; waitpid(2) on our own child, not reaped before (stand_down consumes the
        // Tether), with a null status pointer, which it allows.
        unsafe {
            libc::write(self.alive.as_raw_fd(), b"x".as_ptr().cast(), 1);
            libc::waitpid(self.watcher, std::ptr::null_mut(), 0);
        }
    }
}

/// The watcher's whole life, in the forked child.
///
/// # Safety
/// Only in the child of `fork`, with `read_end` the pipe's read end; `target` as for
/// [`Tether::attach`] (0: the watcher's own group, `kill(0, …)`).
unsafe fn watch(read_end: libc::c_int, target: libc::pid_t) -> ! {
    // SAFETY: the caller is the child of fork (see `# Safety`), where only async-signal-safe
    // calls are allowed: every call below is one, on this process's own descriptors and
    // process group, and `read` writes one byte into a live local.
    unsafe {
        // Keep only the pipe, as fd 0: no copy of the write end (else no EOF would ever come),
        // of the store's connections (a session lock must end with distlock) or of stdout.
        libc::dup2(read_end, 0);
        close_from(1);
        // Out of distlock's process group, so a Ctrl-C meant for distlock does not end it.
        libc::setpgid(0, 0);
        if target == 0 {
            // COMMAND's group is ours: what distlock forwards to it must not end the watcher.
            for sig in [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGUSR1,
                libc::SIGUSR2,
                libc::SIGALRM,
                libc::SIGPIPE,
                libc::SIGTSTP,
                libc::SIGTTIN,
                libc::SIGTTOU,
            ] {
                libc::signal(sig, libc::SIG_IGN);
            }
        }
        let mut byte = 0u8;
        let n = loop {
            let n = libc::read(0, (&raw mut byte).cast(), 1);
            if n != -1 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n;
            }
        };
        // 0 is EOF: distlock ended without standing the watcher down.
        if n == 0 {
            libc::kill(target, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}

/// Closes every descriptor from `first` up.
///
/// # Safety
/// Only where no code still uses those descriptors (the watcher).
unsafe fn close_from(first: libc::c_int) {
    // SAFETY: close_range(2), sysconf(3) and close(2) take integers only; closing numbers no
    // code uses any more is what the caller promises (`# Safety`), and closing a number that is
    // not open only fails with EBADF.
    unsafe {
        #[cfg(target_os = "linux")]
        if libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            0,
        ) == 0
        {
            return;
        }
        // Older kernels: every number up to the descriptor limit.
        let limit = match libc::sysconf(libc::_SC_OPEN_MAX) {
            n if n > 0 => n.min(1 << 20) as libc::c_int,
            _ => 1024,
        };
        for fd in first..limit {
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Child, Command};

    use super::*;

    fn sleeper(command: &mut Command) -> Child {
        command.arg("30").spawn().expect("sleep starts")
    }

    /// Collects a watcher that has exited, so that no zombie is left behind.
    fn reap(watcher: libc::pid_t) {
        // SAFETY: waitpid(2) on our own child, not reaped before (its Tether was dropped, not
        // stood down), with a null status pointer, which it allows.
        let reaped = unsafe { libc::waitpid(watcher, std::ptr::null_mut(), 0) };
        assert_eq!(reaped, watcher, "the watcher was not ours to reap");
    }

    /// The write end closing without a stand-down — what `distlock`'s death does — makes the
    /// watcher SIGKILL its target: pipe2, fork and the watcher's whole body on their path.
    #[test]
    fn a_tether_dropped_without_standing_down_kills_its_target() {
        let mut sleeping = sleeper(&mut Command::new("sleep"));
        let tether = Tether::attach(sleeping.id() as libc::pid_t).unwrap();
        let watcher = tether.watcher;
        drop(tether);
        let ended = sleeping.wait().unwrap();
        assert_eq!(ended.signal(), Some(libc::SIGKILL), "{ended:?}");
        reap(watcher);
    }

    #[test]
    fn a_stood_down_tether_kills_nothing() {
        let mut sleeping = sleeper(&mut Command::new("sleep"));
        let tether = Tether::attach(sleeping.id() as libc::pid_t).unwrap();
        // Returns once the watcher has exited: it had nothing left to do.
        tether.stand_down();
        assert!(sleeping.try_wait().unwrap().is_none(), "COMMAND was ended");
        sleeping.kill().unwrap();
        sleeping.wait().unwrap();
    }

    /// COMMAND joins the watcher's new group (setpgid on both sides), and the whole group dies
    /// with `distlock`.
    #[test]
    fn a_command_in_the_watchers_group_dies_with_the_tether() {
        let tether = Tether::for_new_group().unwrap();
        let (group, watcher) = (tether.group(), tether.watcher);
        let mut sleeping = sleeper(Command::new("sleep").process_group(group));
        drop(tether);
        let ended = sleeping.wait().unwrap();
        assert_eq!(ended.signal(), Some(libc::SIGKILL), "{ended:?}");
        reap(watcher);
    }

    /// The pre_exec hook runs in the child and lets COMMAND start as usual (its kill on
    /// `distlock`'s death is tests/exec.rs' `killing_distlock_kills_command_and_its_children`).
    #[tokio::test]
    async fn a_command_dying_with_its_parent_runs_as_usual() {
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", "exit 7"]);
        die_with_parent(&mut command);
        let status = command.status().await.unwrap();
        assert_eq!(status.code(), Some(7));
    }
}
