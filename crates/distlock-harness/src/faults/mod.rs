//! Faults injected into a running system from outside it, on one machine and without kernel
//! tools: a TCP proxy between a client and its server that delays, blackholes or resets the
//! traffic on command ([`proxy`]); a cluster member cut off from its peers ([`peers`]); a
//! server's wall clock jumped under it ([`clock`]); and the randomness that times them
//! ([`random`]).

pub mod clock;
pub mod peers;
pub mod proxy;
pub mod random;

pub use proxy::{Fault, FaultProxy};
