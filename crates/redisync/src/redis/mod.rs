//! The Redis plumbing under the engine: making the connections
//! ([`connect`]), the seam the engine sends through ([`link`]; a simulated
//! Redis plugs in there), key names, the scripts, their arguments and how
//! they are sent, the restart guard, and replica sync.

pub(crate) mod args;
pub(crate) mod connect;
pub(crate) mod keys;
#[cfg(feature = "simulation")]
pub mod link;
#[cfg(not(feature = "simulation"))]
#[allow(unreachable_pub)]
pub(crate) mod link;
pub(crate) mod replica;
pub(crate) mod restart;
pub(crate) mod script;
