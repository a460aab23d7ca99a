//! What a `Store` holds for one call, and the borrowed view the generated
//! `Host` traits are implemented on.

use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings;
use super::limiter::MemoryLimiter;
use super::wasi::{CallClock, ClockView, add_to_linker};
use crate::services::Session;

/// Everything a `Store` holds for one call.
pub(crate) struct State {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub session: Session,
    /// The call's monotonic clock (sleeps end at the deadline).
    pub clock: CallClock,
    /// The epoch deadline fired.
    pub timed_out: bool,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The borrowed view the `fs` and `log` hosts are implemented on: the
/// resource table of `dir` handles and the run's session, apart.
pub(crate) struct HostView<'a> {
    pub table: &'a mut ResourceTable,
    pub session: &'a mut Session,
}

/// The `HasData` marker for [`HostView`].
pub(crate) struct HasHost;

impl HasData for HasHost {
    type Data<'a> = HostView<'a>;
}

impl State {
    /// The view of the `fs` and `log` hosts.
    pub fn host(&mut self) -> HostView<'_> {
        HostView { table: &mut self.table, session: &mut self.session }
    }
}

/// The contract and every WASI interface of [`super::policy::PROVIDED_WASI`],
/// over the empty context of [`super::wasi::empty_ctx`].
pub(crate) fn add_allowed_imports(l: &mut Linker<State>) -> wasmtime::Result<()> {
    bindings::Plugin::add_to_linker::<State, HasHost>(l, State::host)?;
    add_to_linker(l, |s| ClockView { table: &mut s.table, clock: &s.clock })
}
