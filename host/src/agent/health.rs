//! What `/readyz` answers: every instance loaded and its last run a
//! success, or a list of the instances that are not, each with its problem.

use std::path::PathBuf;
use std::sync::Mutex;

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

/// The shared readiness state, replaced by the agent's loop after every
/// change and read by the HTTP server.
#[derive(Debug, Default)]
pub struct Health {
    instances: Mutex<Vec<InstanceHealth>>,
}

impl Health {
    /// Replace the snapshot.
    pub fn set(&self, instances: Vec<InstanceHealth>) {
        *self.instances.lock().unwrap_or_else(|p| p.into_inner()) = instances;
    }

    /// Whether every instance is ready, and the JSON body of `/readyz`.
    pub fn readiness(&self) -> (bool, String) {
        let instances = self.instances.lock().unwrap_or_else(|p| p.into_inner()).clone();
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
}
