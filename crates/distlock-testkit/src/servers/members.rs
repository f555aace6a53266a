//! The members of a private replicated store (an etcd cluster, a ZooKeeper ensemble): one
//! [`PrivateServer`] each, so a test can kill, pause and start again one member at a time; a
//! paused member is left out of what is asked of the running ones, and the proxies on the
//! members' peer ports, when the group can be partitioned, learn each member's pid as it starts.

use std::time::Duration;

use super::{Launch, PrivateServer, PrivateStore, poll};
use crate::Failure;
use crate::faults::peers::PeerLinks;

pub(crate) struct Members {
    /// The group in messages ("the private etcd cluster").
    group: &'static str,
    servers: Vec<PrivateServer>,
    /// Paused with SIGSTOP: it would not answer, so [`running`](Self::running) leaves it out.
    paused: Vec<bool>,
    links: Option<PeerLinks>,
}

impl Members {
    /// No members yet, of `group`, talking to each other through `links` if given.
    pub(crate) fn new(group: &'static str, links: Option<PeerLinks>) -> Self {
        Members {
            group,
            servers: Vec::new(),
            paused: Vec::new(),
            links,
        }
    }

    /// The proxies on the members' peer ports, if the group can be partitioned.
    pub(crate) fn links(&self) -> Option<&PeerLinks> {
        self.links.as_ref()
    }

    /// [`links`](Self::links), to cut and heal.
    pub(crate) fn links_mut(&mut self) -> Option<&mut PeerLinks> {
        self.links.as_mut()
    }

    /// Starts the next member as `launch` says (the links are told its pid at each start,
    /// before it is ready: it dials its peers while it starts).
    pub(crate) fn start(&mut self, launch: Launch) -> Result<(), Failure> {
        let i = self.servers.len();
        let on_spawn = self
            .links
            .as_ref()
            .map(|links| Box::new(links.pid_of(i)) as Box<dyn Fn(Option<u32>) + Send>);
        self.servers
            .push(PrivateServer::start_telling(launch, on_spawn)?);
        self.paused.push(false);
        Ok(())
    }

    /// How many members it has (running or not).
    pub(crate) fn len(&self) -> usize {
        self.servers.len()
    }

    /// Every member, by index.
    pub(crate) fn all(&self) -> Vec<usize> {
        (0..self.len()).collect()
    }

    /// The loopback client port of member `i`.
    pub(crate) fn client_port(&self, i: usize) -> u16 {
        self.servers[i].port()
    }

    /// The client ports of the members `which`.
    pub(crate) fn client_ports<'a>(&'a self, which: &'a [usize]) -> impl Iterator<Item = u16> + 'a {
        which.iter().map(|&i| self.client_port(i))
    }

    /// The members neither killed, shut down nor paused.
    pub(crate) fn running(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| self.servers[i].is_running() && !self.paused[i])
            .collect()
    }

    /// Kills member `i` (SIGKILL): no clean shutdown, its connections just break.
    pub(crate) fn kill(&mut self, i: usize) -> Result<(), Failure> {
        self.paused[i] = false;
        self.servers[i].kill()
    }

    /// Shuts member `i` down cleanly and waits until it has exited.
    pub(crate) fn shut_down(&mut self, i: usize) -> Result<(), Failure> {
        if self.paused[i] {
            self.cont(i)?;
        }
        self.servers[i].stop()
    }

    /// Pauses member `i` (SIGSTOP): its connections stay open but nothing is answered.
    pub(crate) fn pause(&mut self, i: usize) -> Result<(), Failure> {
        self.servers[i].signal(libc::SIGSTOP)?;
        self.paused[i] = true;
        Ok(())
    }

    /// Lets member `i` run again (SIGCONT) after [`pause`](Self::pause).
    pub(crate) fn cont(&mut self, i: usize) -> Result<(), Failure> {
        self.servers[i].signal(libc::SIGCONT)?;
        self.paused[i] = false;
        Ok(())
    }

    /// Starts member `i` again, on the same ports and data, once its process answers.
    pub(crate) fn start_again(&mut self, i: usize) -> Result<(), Failure> {
        self.servers[i].start_again()?;
        self.paused[i] = false;
        Ok(())
    }

    /// Waits up to `within` until `ready` holds of the members `which` (each of them
    /// `state`: "healthy", "serving"), failing early if one of them exits.
    pub(crate) fn wait_until(
        &mut self,
        which: &[usize],
        within: Duration,
        state: &str,
        ready: impl Fn(&Self) -> Result<bool, Failure>,
    ) -> Result<(), Failure> {
        let done = poll(within, Duration::from_millis(50), || {
            if ready(self)? {
                return Ok(Some(()));
            }
            for &i in which {
                if let Some(status) = self.servers[i].exited()? {
                    return Err(Failure(format!(
                        "member {i} of {} exited ({status}) before it was {state}: {}",
                        self.group,
                        self.servers[i].log_tail()
                    )));
                }
            }
            Ok(None)
        })?;
        done.ok_or_else(|| {
            let tails: Vec<String> = which.iter().map(|&i| self.servers[i].log_tail()).collect();
            Failure(format!(
                "{} was not {state} within {within:?}: {}",
                self.group,
                tails.join("\n")
            ))
        })
    }
}

/// The URLs and the controls of one member that a private replicated store offers its tests,
/// written once for every store whose members are in a `members: Members` field, that says in
/// `members_url(&self, which: &[usize], $setting)` how a client reaches the members `which`
/// with a session setting (etcd: its TTL), and in `wait_ready(&mut self, which: &[usize])` when
/// they are ready (etcd: healthy, ZooKeeper: serving).
macro_rules! member_controls {
    ($setting:ident: $type:ty) => {
        /// The URL of the whole group, every member, with the clients' session setting.
        pub fn url(&self, $setting: $type) -> String {
            self.members_url(&self.members.all(), $setting)
        }

        /// The URL of member `i` alone: a client that can reach the group only through it.
        pub fn member_url(&self, i: usize, $setting: $type) -> String {
            self.members_url(&[i], $setting)
        }

        /// Which member leads, once the running members (not killed, not paused) agree on one
        /// (waits out an election).
        pub fn leader(&self) -> Result<usize, Failure> {
            Ok(self.leader_among(&self.members.running())?)
        }

        /// Kills member `i` (SIGKILL): no clean shutdown, its connections just break.
        pub fn kill(&mut self, i: usize) -> Result<(), Failure> {
            self.members.kill(i)
        }

        /// Shuts member `i` down cleanly (SIGTERM) and waits until it has exited.
        pub fn shut_down(&mut self, i: usize) -> Result<(), Failure> {
            self.members.shut_down(i)
        }

        /// Pauses member `i` (SIGSTOP): its connections stay open but nothing is answered, as
        /// a member that stalls or is cut off.
        pub fn stop(&mut self, i: usize) -> Result<(), Failure> {
            self.members.pause(i)
        }

        /// Lets member `i` run again (SIGCONT) after [`stop`](Self::stop).
        pub fn cont(&mut self, i: usize) -> Result<(), Failure> {
            self.members.cont(i)
        }

        /// Starts member `i` again after [`kill`](Self::kill) or
        /// [`shut_down`](Self::shut_down), on the same ports and data (it rejoins from its own
        /// log), and waits until it is ready.
        pub fn start_again(&mut self, i: usize) -> Result<(), Failure> {
            self.members.start_again(i)?;
            self.wait_ready(&[i])
        }
    };
}
pub(crate) use member_controls;
