//! One module per subcommand.

pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod exec;
