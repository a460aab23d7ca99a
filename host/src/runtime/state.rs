//! What a `Store` holds for one call, and the borrowed view the generated
//! `Host` traits are implemented on.

use wasmtime::component::{HasData, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::limiter::MemoryLimiter;
use crate::services::Session;

/// Everything a `Store` holds for one call.
pub(crate) struct State {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub session: Session,
    /// The call's monotonic clock (sleeps end at the deadline).
    pub clock: super::wasi::CallClock,
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
