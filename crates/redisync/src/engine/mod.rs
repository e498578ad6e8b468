//! The engine every primitive runs on: the guard core ([`held`]). A
//! primitive supplies its scripts and key roles; the rules that keep holders
//! exclusive and tokens rising are written here once.

pub(crate) mod held;
