//! What `/readyz` answers: every instance loaded and its last run a
//! success, or a list of the instances that are not, each with its problem.
//! And what `/healthz` answers: whether the agent's loop is turning.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One instance as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceHealth {
    /// The plugin's name (the file name when it never loaded).
    pub instance: String,
    /// Its manifest.
    pub file: PathBuf,
    /// The sha256 of the component running now, if any.
    pub sha256: Option<String>,
    /// Consecutive failed runs.
    pub failures: u32,
    /// Why it is not ready; `None` when it is.
    pub problem: Option<String>,
}

/// How long the agent's loop may go without turning before `/healthz`
/// fails. The loop wakes at least once a second and does no slow work
/// itself (loads and runs have threads of their own), so twenty seconds
/// without a turn means it is stuck, not busy; a liveness probe (or
/// systemd's watchdog, pinged from the same loop) then restarts the agent.
pub const LOOP_STALL: Duration = Duration::from_secs(20);

/// The shared readiness state, replaced by the agent's loop after every
/// change and read by the HTTP server, and the loop's heartbeat.
#[derive(Debug)]
pub struct Health {
    instances: Mutex<Vec<InstanceHealth>>,
    /// Owed actions whose last attempt failed, by (instance, action): set
    /// by the action threads, cleared when the action succeeds. An
    /// instance with one is not ready (its change is not fully applied).
    actions: Mutex<BTreeMap<(String, String), String>>,
    /// Per instance, its changes on probation or reverted since their last
    /// good change (set by the probing threads): not ready meanwhile.
    probations: Mutex<BTreeMap<String, String>>,
    /// When this state was made; beats are counted from it.
    born: Instant,
    /// Milliseconds from `born` to the loop's last turn.
    beat_ms: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            instances: Mutex::default(),
            actions: Mutex::default(),
            probations: Mutex::default(),
            born: Instant::now(),
            beat_ms: AtomicU64::new(0),
        }
    }
}

impl Health {
    /// The loop turned: called at the top of every turn.
    pub fn beat(&self) {
        self.beat_at(Instant::now());
    }

    fn beat_at(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.born).as_millis()).unwrap_or(u64::MAX);
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether the loop turned within `stall` of `now`, and the body of
    /// `/healthz`.
    pub fn liveness_at(&self, now: Instant, stall: Duration) -> (bool, String) {
        let last = self.born + Duration::from_millis(self.beat_ms.load(Ordering::Relaxed));
        let quiet = now.saturating_duration_since(last);
        if quiet <= stall {
            (true, "ok\n".to_owned())
        } else {
            (false, format!("stalled: the agent's loop has not turned for {:.1} s\n", quiet.as_secs_f64()))
        }
    }

    /// [`Health::liveness_at`] now, with [`LOOP_STALL`].
    pub fn liveness(&self) -> (bool, String) {
        self.liveness_at(Instant::now(), LOOP_STALL)
    }

    /// Replace the snapshot.
    pub fn set(&self, instances: Vec<InstanceHealth>) {
        *self.instances.lock().unwrap_or_else(|p| p.into_inner()) = instances;
    }

    /// The last attempt of `instance`'s owed action `action` failed with
    /// `problem`, or (`None`) it succeeded or was dropped.
    pub fn set_action_problem(&self, instance: &str, action: &str, problem: Option<&str>) {
        let mut actions = self.actions.lock().unwrap_or_else(|p| p.into_inner());
        let key = (instance.to_owned(), action.to_owned());
        match problem {
            Some(p) => actions.insert(key, p.to_owned()),
            None => actions.remove(&key),
        };
    }

    /// What `instance`'s probations keep it from being ready (changes on
    /// probation, a revert since the last good change), or `None`.
    pub fn set_probation_problem(&self, instance: &str, problem: Option<&str>) {
        let mut probations = self.probations.lock().unwrap_or_else(|p| p.into_inner());
        match problem {
            Some(p) => probations.insert(instance.to_owned(), p.to_owned()),
            None => probations.remove(instance),
        };
    }

    /// Whether every instance is ready, and the JSON body of `/readyz`.
    pub fn readiness(&self) -> (bool, String) {
        let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let actions = self.actions.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for i in instances.iter_mut().filter(|i| i.problem.is_none()) {
            let failed: Vec<String> = actions
                .iter()
                .filter(|((inst, _), _)| *inst == i.instance)
                .map(|((_, action), p)| format!("action {action} failed: {p}"))
                .collect();
            if !failed.is_empty() {
                i.problem = Some(failed.join("; "));
            }
        }
        let probations = self.probations.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for i in instances.iter_mut().filter(|i| i.problem.is_none()) {
            i.problem = probations.get(&i.instance).cloned();
        }
        let ready = instances.iter().all(|i| i.problem.is_none());
        let not_ready: Vec<&InstanceHealth> = instances.iter().filter(|i| i.problem.is_some()).collect();
        let body = serde_json::json!({
            "ready": ready,
            "not_ready": not_ready,
            "instances": instances,
        });
        (ready, body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(name: &str, problem: Option<&str>) -> InstanceHealth {
        InstanceHealth {
            instance: name.into(),
            file: format!("/d/{name}.toml").into(),
            sha256: None,
            failures: 0,
            problem: problem.map(Into::into),
        }
    }

    #[test]
    fn healthz_fails_once_the_loop_has_not_turned_for_longer_than_the_stall_limit() {
        let h = Health::default();
        let t0 = h.born;
        h.beat_at(t0 + Duration::from_secs(5));
        assert!(h.liveness_at(t0 + Duration::from_secs(6), Duration::from_secs(20)).0);
        assert!(h.liveness_at(t0 + Duration::from_secs(25), Duration::from_secs(20)).0);
        let (alive, body) = h.liveness_at(t0 + Duration::from_secs(26), Duration::from_secs(20));
        assert!(!alive);
        assert!(body.starts_with("stalled: the agent's loop has not turned for 21.0 s"), "{body}");
        h.beat_at(t0 + Duration::from_secs(26));
        assert!(h.liveness_at(t0 + Duration::from_secs(26), Duration::from_secs(20)).0);
    }

    #[test]
    fn ready_only_when_no_instance_has_a_problem() {
        let h = Health::default();
        h.set(vec![health("a", None), health("b", None)]);
        assert!(h.readiness().0);
        h.set(vec![health("a", None), health("b", Some("reload failed: sha256"))]);
        let (ready, body) = h.readiness();
        assert!(!ready);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["not_ready"][0]["instance"], "b");
        assert_eq!(v["not_ready"][0]["problem"], "reload failed: sha256");
        assert_eq!(v["instances"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn an_instance_whose_owed_action_failed_is_not_ready_until_it_succeeds() {
        let h = Health::default();
        h.set(vec![health("a", None), health("b", None)]);
        h.set_action_problem("a", "reload", Some("SIGHUP to pid 7 failed: No such process"));
        let (ready, body) = h.readiness();
        assert!(!ready);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["not_ready"][0]["problem"],
            "action reload failed: SIGHUP to pid 7 failed: No such process"
        );
        h.set_action_problem("a", "reload", None);
        assert!(h.readiness().0);
    }
}
