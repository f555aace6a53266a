//! One module per subcommand.

pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod elect;
pub(crate) mod exec;
pub(crate) mod processes;
pub(crate) mod progress;
pub(crate) mod serve;
pub(crate) mod status;
pub(crate) mod torture;
