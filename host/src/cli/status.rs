//! `durasync status`: what a running agent holds, read from its `/status`
//! (on its `--metrics-addr`): a table for a person, `--json` for scripts.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;

use durasync::agent::status::{InstanceStatus, NodeStatus};

/// The address `durasync status` asks when none is given (the port the
/// examples in docs/agent.md give `--metrics-addr`).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:9464";
/// The largest `/status` answer read (a thousand instances fit easily).
pub const MAX_RESPONSE_BYTES: u64 = 8 << 20;
/// How long connecting, and then each read or write, may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// `durasync status [--address HOST:PORT] [--json]`
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The agent's metrics address (its `--metrics-addr`).
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_ADDRESS)]
    pub address: String,
    /// Print the agent's JSON document as it is, for scripts.
    #[arg(long)]
    pub json: bool,
}

pub fn status(args: &StatusArgs) -> Result<()> {
    let body = fetch(&args.address)?;
    let node: NodeStatus = serde_json::from_str(&body).with_context(|| {
        format!("{} answered /status with something that is not an agent's status", args.address)
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&node)?);
    } else {
        print!("{}", table(&node, SystemTime::now()));
    }
    Ok(())
}

/// `GET /status` from `address`, bounded by [`TIMEOUT`] and [`MAX_RESPONSE_BYTES`].
fn fetch(address: &str) -> Result<String> {
    let no_agent = |why: String| {
        anyhow!(
            "no durasync agent answers on {address} ({why}); is one running with --metrics-addr {address}? \
             (or pass --address)"
        )
    };
    let addrs: Vec<_> = address.to_socket_addrs().map_err(|e| no_agent(e.to_string()))?.collect();
    let mut last = "no address".to_owned();
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let mut stream = stream.ok_or_else(|| no_agent(last))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    write!(stream, "GET /status HTTP/1.0\r\nHost: {address}\r\nAccept: application/json\r\n\r\n")
        .map_err(|e| no_agent(e.to_string()))?;
    let mut response = Vec::new();
    stream
        .take(MAX_RESPONSE_BYTES + 1)
        .read_to_end(&mut response)
        .map_err(|e| no_agent(format!("reading its answer: {e}")))?;
    if response.len() as u64 > MAX_RESPONSE_BYTES {
        bail!("{address} answered /status with more than {MAX_RESPONSE_BYTES} bytes");
    }
    let response =
        String::from_utf8(response).map_err(|_| anyhow!("{address} answered /status with invalid UTF-8"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head.split_whitespace().nth(1).unwrap_or("?");
    if code != "200" {
        let first = body.lines().next().unwrap_or("").trim();
        bail!(
            "{address} answered /status with HTTP {code}{}: is it a durasync agent of this version?",
            if first.is_empty() { String::new() } else { format!(" ({first})") }
        );
    }
    Ok(body.to_owned())
}

/// How long ago an RFC 3339 time was, shortly (`4s ago`), or the time.
fn ago(at: &str, now: SystemTime) -> String {
    match humantime::parse_rfc3339(at).ok().and_then(|t| now.duration_since(t).ok()) {
        Some(d) => {
            let s = d.as_secs();
            let short = match s {
                0..60 => format!("{s}s"),
                60..3600 => format!("{}m", s / 60),
                3600..86400 => format!("{}h", s / 3600),
                _ => format!("{}d", s / 86400),
            };
            format!("{short} ago")
        }
        None => at.to_owned(),
    }
}

/// The human table: one row per instance, then what needs attention.
fn table(node: &NodeStatus, now: SystemTime) -> String {
    let header = ["INSTANCE", "PLUGIN", "LAST RUN", "LAST COMMIT", "OWED", "DRIFT", "STATE"];
    let rows: Vec<[String; 7]> = node.instances.iter().map(|i| row(i, now)).collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = format!(
        "agent {} on {} (started {}), {} instances\n",
        node.version,
        node.config_dir.display(),
        ago(&node.started, now),
        node.instances.len()
    );
    out.push_str(&line(&header.map(str::to_owned)));
    for r in &rows {
        out.push_str(&line(r));
    }
    for i in &node.instances {
        let mut notes = Vec::new();
        if let Some(p) = &i.problem {
            notes.push(format!("not ready: {p}"));
        }
        if let Some(r) = &i.last_refusal {
            notes.push(format!("last refusal {} by {}: {}", ago(&r.at, now), r.by, r.message));
        }
        if !i.drift.last_paths.is_empty() {
            let mut paths: Vec<String> = i.drift.last_paths.iter().map(|p| p.display().to_string()).collect();
            if i.drift.last_more > 0 {
                paths.push(format!("and {} more", i.drift.last_more));
            }
            notes.push(format!("last drift: {}", paths.join(", ")));
        }
        if let Some(c) = &i.last_commit {
            for (root, digest) in &c.roots {
                notes.push(format!("root {root}: {digest}"));
            }
        }
        if !notes.is_empty() {
            out.push_str(&format!("{}:\n", i.instance));
            for n in notes {
                out.push_str(&format!("  {n}\n"));
            }
        }
    }
    out
}

fn row(i: &InstanceStatus, now: SystemTime) -> [String; 7] {
    let plugin = match &i.plugin {
        Some(p) => {
            let mut s = format!("sha256:{}", p.sha256.get(..12).unwrap_or(&p.sha256));
            if let Some(by) = &p.signed_by {
                s.push_str(&format!(" signed by {by}"));
            }
            // Baseline code, until the background compile is swapped in.
            if p.compiler.as_deref() == Some(durasync::runtime::compiler::Compiler::Winch.name()) {
                s.push_str(" (Winch's code)");
            }
            s
        }
        None => "-".to_owned(),
    };
    let last_run = i
        .last_run
        .as_ref()
        .map_or("-".to_owned(), |r| format!("{} {} ({})", r.result, ago(&r.at, now), r.trigger));
    let last_commit = i.last_commit.as_ref().map_or("-".to_owned(), |c| ago(&c.at, now));
    let drift = match (i.drift.mode.as_str(), i.drift.seen, &i.drift.last_at) {
        ("off", _, _) => "off".to_owned(),
        (m, 0, _) => format!("{m}: none"),
        (m, n, Some(at)) => format!("{m}: {n}, last {}", ago(at, now)),
        (m, n, None) => format!("{m}: {n}"),
    };
    let state = if i.problem.is_some() { "NOT READY" } else { "ready" };
    [
        i.instance.clone(),
        plugin,
        last_run,
        last_commit,
        i.owed_actions.len().to_string(),
        drift,
        state.to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_short_and_a_time_that_does_not_parse_is_shown_as_it_is() {
        let now = humantime::parse_rfc3339("2025-01-01T01:00:00Z").unwrap();
        assert_eq!(ago("2025-01-01T00:59:55Z", now), "5s ago");
        assert_eq!(ago("2025-01-01T00:00:00Z", now), "1h ago");
        assert_eq!(ago("yesterday", now), "yesterday");
    }

    #[test]
    fn nobody_listening_is_a_clear_error_naming_the_address() {
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let err = fetch(&addr).unwrap_err().to_string();
        assert!(err.starts_with(&format!("no durasync agent answers on {addr}")), "{err}");
        assert!(err.contains("--metrics-addr"), "{err}");
    }
}
