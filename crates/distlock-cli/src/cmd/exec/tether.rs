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
        // SAFETY: the closure runs in the forked child before exec and only makes the
        // async-signal-safe calls prctl(2) and getppid(2).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then no signal will come.
                if libc::getppid() != parent {
                    return Err(io::Error::other("distlock exited before COMMAND started"));
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
        // SAFETY: setpgid(2) on our own child.
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
        // SAFETY: pipe2 writes two descriptors into `fds`. O_CLOEXEC keeps the write end out of
        // COMMAND and every other program we start: only this process may hold it.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read_end, alive) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child of fork in a multi-threaded process may only make async-signal-safe
        // calls; `watch` makes only dup2, close, setpgid, signal, read, kill and _exit.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe { watch(read_end.as_raw_fd(), target) },
            watcher => Ok(Tether { alive, watcher }),
        }
    }

    /// COMMAND has ended: the watcher leaves without killing anything, and is reaped.
    pub(super) fn stand_down(self) {
        // SAFETY: one byte from a live buffer to our own pipe, then waitpid on our own child.
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
    // SAFETY (whole body): async-signal-safe calls on descriptors of this process only.
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
    // SAFETY: close_range(2) and close(2) on this process's own descriptor numbers.
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
