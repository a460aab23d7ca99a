//! How durasync starts what runs beside its caller: threads that keep the
//! caller's log ([`thread`]), and the operator's commands as supervised
//! child processes ([`child`]). Used by the agent and by the hooks; knows
//! neither.

pub(crate) mod child;
pub(crate) mod thread;

pub(crate) use thread::spawn_traced;
