//! WASI 0.2 for plugins in any language, over a context that grants
//! nothing (the table in [`super::policy`]): no preopened directory, no
//! environment, no arguments, empty stdin, TCP/UDP/name lookup off, real
//! randomness, the real wall clock.
//!
//! Every interface is wasmtime-wasi's own except `wasi:clocks/monotonic-clock`:
//! its sleeps (`subscribe-duration`, `subscribe-instant`, what Python's
//! `time.sleep` and JavaScript's timers poll on) block the host thread, where
//! the epoch deadline cannot interrupt them. Here a sleep ends no later than
//! the call's deadline, so the guest wakes up, runs, and is stopped by the
//! epoch interruption with "timed out after …" — a plugin cannot sleep past
//! its `timeout_ms`. A sleep cut short at the deadline also bumps the
//! engine's epoch, so the guest is stopped at its next instruction rather
//! than returning as if it had slept.

use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{StdoutStream, WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::bindings::{self as wasi, sync};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};
use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};
use wasmtime_wasi::{WasiCtx, WasiView};

/// The WASI context of one call: stdout and stderr go to `stdout` and
/// `stderr`; nothing else is granted. The builder's defaults already hold
/// no preopens, no environment, no arguments and an empty stdin; the
/// socket switches are set explicitly because TCP and UDP default to on.
pub(crate) fn empty_ctx(stdout: impl StdoutStream + 'static, stderr: impl StdoutStream + 'static) -> WasiCtx {
    WasiCtx::builder()
        .stdout(stdout)
        .stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

/// The monotonic clock of one call: nanoseconds since the call started,
/// sleeps capped at the call's deadline.
#[derive(Clone)]
pub(crate) struct CallClock {
    start: Instant,
    deadline: Instant,
    engine: Engine,
}

impl CallClock {
    /// A clock starting now whose sleeps end by `deadline`; `engine`'s
    /// epoch is bumped when a sleep is cut short there.
    pub(crate) fn new(deadline: Instant, engine: &Engine) -> Self {
        CallClock { start: Instant::now(), deadline, engine: engine.clone() }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What `wasi:clocks/monotonic-clock` works on: the call's clock and the
/// resource table its pollables go into.
pub(crate) struct ClockView<'a> {
    /// The store's resource table.
    pub(crate) table: &'a mut ResourceTable,
    /// The call's clock.
    pub(crate) clock: &'a CallClock,
}

struct HasClock;

impl HasData for HasClock {
    type Data<'a> = ClockView<'a>;
}

impl ClockView<'_> {
    fn sleep(&mut self, duration: Duration) -> wasmtime::Result<Resource<DynPollable>> {
        let sleep = self.table.push(Sleep::new(self.clock, duration))?;
        subscribe(self.table, sleep)
    }
}

impl monotonic_clock::Host for ClockView<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(self.clock.now_ns())
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.sleep(Duration::from_nanos(when.saturating_sub(self.clock.now_ns())))
    }

    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.sleep(Duration::from_nanos(duration))
    }
}

/// A sleep that is ready at `until` (never later than the call's deadline).
struct Sleep {
    until: Instant,
    /// Set when the guest asked for longer than its deadline: the engine
    /// whose epoch to bump when the sleep ends there.
    cut_short: Option<Engine>,
    yielded: bool,
}

impl Sleep {
    /// A sleep of `duration` from now, cut short at the call's deadline.
    fn new(clock: &CallClock, duration: Duration) -> Self {
        match Instant::now().checked_add(duration) {
            Some(until) if until <= clock.deadline => Sleep { until, cut_short: None, yielded: false },
            _ => Sleep { until: clock.deadline, cut_short: Some(clock.engine.clone()), yielded: false },
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Sleep {
    async fn ready(&mut self) {
        if Instant::now() < self.until {
            tokio::time::sleep_until(tokio::time::Instant::from_std(self.until)).await;
        } else if !self.yielded {
            // Yield once, as wasmtime-wasi's own clock does, so a guest
            // polling in a zero-timeout loop cannot starve other pollables.
            self.yielded = true;
            tokio::task::yield_now().await;
        }
        if let Some(engine) = &self.cut_short {
            // The deadline has passed: the epoch callback stops the guest at
            // its next check instead of letting it run on, whatever the
            // watchdog thread's timing.
            engine.increment_epoch();
        }
    }
}

/// Link every WASI interface of [`super::policy::PROVIDED_WASI`]:
/// wasmtime-wasi's synchronous implementations, except the monotonic clock
/// (see the module docs), which `clock` projects out of the store's data.
pub(crate) fn add_to_linker<T: WasiView + 'static>(
    l: &mut Linker<T>,
    clock: fn(&mut T) -> ClockView<'_>,
) -> wasmtime::Result<()> {
    struct HasIo;
    impl HasData for HasIo {
        type Data<'a> = &'a mut ResourceTable;
    }
    sync::io::error::add_to_linker::<T, HasIo>(l, |t| t.ctx().table)?;
    sync::io::poll::add_to_linker::<T, HasIo>(l, |t| t.ctx().table)?;
    sync::io::streams::add_to_linker::<T, HasIo>(l, |t| t.ctx().table)?;

    wasi::clocks::wall_clock::add_to_linker::<T, WasiClocks>(l, T::clocks)?;
    monotonic_clock::add_to_linker::<T, HasClock>(l, clock)?;

    wasi::random::random::add_to_linker::<T, WasiRandom>(l, T::random)?;
    wasi::random::insecure::add_to_linker::<T, WasiRandom>(l, T::random)?;
    wasi::random::insecure_seed::add_to_linker::<T, WasiRandom>(l, T::random)?;

    wasi::filesystem::preopens::add_to_linker::<T, WasiFilesystem>(l, T::filesystem)?;
    sync::filesystem::types::add_to_linker::<T, WasiFilesystem>(l, T::filesystem)?;

    wasi::sockets::tcp_create_socket::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    wasi::sockets::instance_network::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    wasi::sockets::network::add_to_linker::<T, WasiSockets>(l, &Default::default(), T::sockets)?;
    wasi::sockets::ip_name_lookup::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync::sockets::tcp::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync::sockets::udp::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync::sockets::udp_create_socket::add_to_linker::<T, WasiSockets>(l, T::sockets)?;

    wasi::cli::exit::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::environment::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::stdin::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::stdout::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::stderr::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::terminal_input::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::terminal_output::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::terminal_stdin::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::terminal_stdout::add_to_linker::<T, WasiCli>(l, T::cli)?;
    wasi::cli::terminal_stderr::add_to_linker::<T, WasiCli>(l, T::cli)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(deadline_in: Duration) -> CallClock {
        CallClock::new(Instant::now() + deadline_in, &Engine::default())
    }

    #[test]
    fn a_sleep_within_the_deadline_is_kept_as_asked() {
        let c = clock(Duration::from_secs(60));
        let before = Instant::now();
        let s = Sleep::new(&c, Duration::from_millis(10));
        assert!(s.cut_short.is_none());
        assert!(s.until >= before + Duration::from_millis(10) && s.until < c.deadline);
    }

    #[test]
    fn a_sleep_past_the_deadline_ends_at_the_deadline_and_will_bump_the_epoch() {
        let c = clock(Duration::from_millis(100));
        for asked in [Duration::from_secs(3600), Duration::from_nanos(u64::MAX), Duration::MAX] {
            let s = Sleep::new(&c, asked);
            assert_eq!(s.until, c.deadline, "{asked:?}");
            assert!(s.cut_short.is_some(), "{asked:?}");
        }
    }

    #[test]
    fn the_monotonic_clock_counts_from_the_start_of_the_call() {
        let c = clock(Duration::from_secs(1));
        let a = c.now_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = c.now_ns();
        assert!(a < 1_000_000_000 && b >= a + 2_000_000, "{a} {b}");
    }
}
