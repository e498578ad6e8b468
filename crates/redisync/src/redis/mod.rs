//! The Redis plumbing under the engine: key names, the scripts and how they
//! are sent, the restart guard, and replica sync. (The connection seam,
//! `crate::link`, stays at the crate root: the simulation reaches it as a
//! public module.)

pub(crate) mod args;
pub(crate) mod keys;
pub(crate) mod replica;
pub(crate) mod restart;
pub(crate) mod script;
