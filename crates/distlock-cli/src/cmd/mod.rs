//! One module per subcommand.

pub(crate) mod demo;
pub(crate) mod bench;
pub(crate) mod exec;
