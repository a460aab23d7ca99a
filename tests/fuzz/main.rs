//! The fuzz driver for the parsers of outside input (`durasync::fuzzing`),
//! on the stable toolchain: no libFuzzer, no coverage feedback; instead
//! each target's seed corpus (`tests/fuzz/corpus/<target>/`) mutated with
//! a seeded generator (bit flips, byte inserts and deletes, splices,
//! truncation, numeric boundary values, dictionary tokens, repeated
//! structure for depth) and structured inputs built by proptest strategies
//! (JSON and TOML trees over each target's vocabulary).
//!
//! Every input runs on a thread with a 2 MiB stack (the smallest the host
//! runs parsers on) and must return: a panic, more than
//! [`INPUT_MS`] milliseconds or more than [`INPUT_MEMORY`] bytes allocated
//! at once is a finding, written to `target/tmp/fuzz-findings/<target>/`
//! (minimized for a panic) and failing the test. An input that never
//! returns fails the test after a watchdog's bound; one that aborts the
//! process (a stack overflow) leaves itself in
//! `target/tmp/fuzz/<target>/current-input`.
//!
//! `DURASYNC_FUZZ_SECS` (default 3) bounds each target's run;
//! `DURASYNC_FUZZ_SEED` replays a run (each test prints its seed).
//! Longer runs: tests/README.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::os::unix::fs::FileExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::Value;

/// Default seconds of fuzzing per target (11 targets on 2 test threads:
/// under 20 s for the whole binary).
const DEFAULT_SECS: u64 = 3;
/// The longest one input may take (a debug build on a loaded CI machine).
const INPUT_MS: u64 = 3000;
/// An input still running after this long is a hang: the test fails.
const HANG_MS: u64 = 30_000;
/// The most bytes one input may have allocated at once, beyond what was
/// live before it.
const INPUT_MEMORY: isize = 256 << 20;
/// Mutated and generated inputs are cut to this size.
const MAX_INPUT: usize = 64 << 10;
/// The stack of the thread inputs run on.
const STACK: usize = 2 << 20;

// ---------------------------------------------------------------------------
// Memory: a counting allocator, per thread (targets run in parallel).

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

fn count(n: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + n;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counters are thread-local cells that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new) };
        if !q.is_null() {
            count(new as isize - layout.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ---------------------------------------------------------------------------
// One input, checked.

/// What was wrong with one input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    Panic(String),
    Slow(u128),
    Memory(isize),
}

impl Finding {
    fn kind(&self) -> &'static str {
        match self {
            Finding::Panic(_) => "panic",
            Finding::Slow(_) => "slow",
            Finding::Memory(_) => "memory",
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // A message quoting a huge input is cut (the input is on disk).
            Finding::Panic(m) if m.len() > 600 => {
                let cut = (0..=600).rev().find(|&i| m.is_char_boundary(i)).unwrap_or(0);
                write!(f, "panicked: {} [... {} more bytes]", &m[..cut], m.len() - cut)
            }
            Finding::Panic(m) => write!(f, "panicked: {m}"),
            Finding::Slow(ms) => write!(f, "took {ms} ms (bound {INPUT_MS} ms)"),
            Finding::Memory(b) => write!(f, "allocated {b} bytes at once (bound {INPUT_MEMORY})"),
        }
    }
}

/// A panic hook that keeps a fuzzed input's panic message for the report
/// instead of printing it (other threads' panics print as usual).
fn install_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let at = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
                PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
            } else {
                default(info);
            }
        }));
    });
}

/// Run `target` on `data`: `Some` when it panicked, was slow, or took too
/// much memory.
fn check(target: fn(&[u8]), data: &[u8]) -> Option<Finding> {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    QUIET.with(|q| q.set(true));
    let start = Instant::now();
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| target(data)));
    let took = start.elapsed();
    QUIET.with(|q| q.set(false));
    let peak = PEAK.with(Cell::get) - before;
    match r {
        Err(_) => Some(Finding::Panic(PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default())),
        Ok(()) if peak > INPUT_MEMORY => Some(Finding::Memory(peak)),
        Ok(()) if took > Duration::from_millis(INPUT_MS) => Some(Finding::Slow(took.as_millis())),
        Ok(()) => None,
    }
}

/// The smallest input (by removing chunks) that still panics the same way,
/// within a second.
fn minimize(target: fn(&[u8]), data: &[u8], finding: &Finding) -> Vec<u8> {
    let Finding::Panic(first) = finding else { return data.to_vec() };
    let place = |m: &str| m.rsplit_once(" at ").map(|(_, at)| at.to_owned());
    let same = |d: &[u8]| matches!(check(target, d), Some(Finding::Panic(m)) if place(&m) == place(first));
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut best = data.to_vec();
    let mut chunk = best.len() / 2;
    while chunk > 0 && Instant::now() < deadline {
        let mut at = 0;
        while at + chunk <= best.len() && Instant::now() < deadline {
            let mut shorter = best[..at].to_vec();
            shorter.extend_from_slice(&best[at + chunk..]);
            if same(&shorter) {
                best = shorter;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    best
}

// ---------------------------------------------------------------------------
// Inputs: mutations and structure.

/// splitmix64: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }
}

/// Numbers at the edges of the integer types and the parsers' limits.
const BOUNDARIES: &[&str] = &[
    "0",
    "-0",
    "-1",
    "1",
    "255",
    "256",
    "4095",
    "4096",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e309",
    "-1e309",
    "0.5",
    "1e-400",
    "0o7777",
    "0o10000",
    "0x7fffffffffffffff",
    "0b1",
    "nan",
    "inf",
    "-inf",
    "1979-05-27T07:32:00Z",
    "00:00:00",
];

/// Apply one random mutation to `data`.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, dict: &[&str], corpus: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(12) {
        // Flip a bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Set a byte to anything, or to an interesting one.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] =
                *rng.pick(&[0, b'\n', b'\r', b'"', b'\\', b'[', b']', b'{', b'}', b'=', b'.', 0x7f, 0xff]);
            if rng.below(2) == 0 {
                data[i] = rng.next() as u8;
            }
        }
        // Insert random bytes.
        2 => {
            let i = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(i..i, bytes);
        }
        // Delete a range.
        3 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(64));
            data.drain(i..i + n);
        }
        // Truncate.
        4 if len > 0 => data.truncate(rng.below(len)),
        // Insert a token of the target's vocabulary.
        5 | 6 if !dict.is_empty() => {
            let i = rng.below(len + 1);
            data.splice(i..i, rng.pick(dict).bytes());
        }
        // Replace a number (or insert one) with a boundary value.
        7 => {
            let digits: Vec<usize> = (0..len).filter(|i| data[*i].is_ascii_digit()).collect();
            let value = rng.pick(BOUNDARIES).as_bytes();
            if digits.is_empty() {
                let i = rng.below(len + 1);
                data.splice(i..i, value.iter().copied());
            } else {
                let start = *rng.pick(&digits);
                let end = (start..len).find(|i| !data[*i].is_ascii_digit()).unwrap_or(len);
                data.splice(start..end, value.iter().copied());
            }
        }
        // Repeat a range: long lines, many keys, deep nesting.
        8 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(32));
            let most = if rng.below(4) == 0 { 2000 } else { 16 };
            let times = 1 + rng.below(most);
            let piece = data[i..i + n].repeat(times);
            data.splice(i..i, piece);
        }
        // Open many brackets at once (nesting depth).
        9 => {
            let i = rng.below(len + 1);
            let open = *rng.pick(&["[", "{", "[[", "{\"a\":", "a={", "x=[", "\""]);
            let piece = open.repeat(1 + rng.below(5000));
            data.splice(i..i, piece.bytes());
        }
        // Splice with another corpus entry.
        10 if !corpus.is_empty() => {
            let other = rng.pick(corpus);
            let (a, b) = (rng.below(len + 1), rng.below(other.len() + 1));
            data.truncate(a);
            data.extend_from_slice(&other[b..]);
        }
        // Duplicate a line (TOML keys and tables twice, JSON lines again).
        _ => {
            let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
            let line = rng.pick(&lines).to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, line.into_iter().chain([b'\n']));
        }
    }
    data.truncate(MAX_INPUT);
}

/// How a target's structured inputs are shaped.
#[derive(Clone, Copy)]
enum Shape {
    /// A TOML document from a random tree over the vocabulary.
    Toml,
    /// One JSON document.
    Json,
    /// JSON lines, each an object with a `call`.
    JsonLines,
    /// Tokens of the vocabulary and random text, concatenated.
    Text,
}

/// A target: its vocabulary (keys, values, punctuation) and shape.
struct Spec {
    name: &'static str,
    shape: Shape,
    dict: &'static [&'static str],
}

const MANIFEST_WORDS: &[&str] = &[
    "name",
    "wasm",
    "sha256",
    "verify",
    "roots",
    "limits",
    "config",
    "flush",
    "validate",
    "action",
    "path",
    "access",
    "rw",
    "ro",
    "special_modes",
    "max_removed_fraction",
    "max_files",
    "protect",
    "fuel",
    "unlimited",
    "timeout_ms",
    "memory_bytes",
    "write_bytes",
    "write_files",
    "log_bytes",
    "output_bytes",
    "call_bytes",
    "read_bytes",
    "keys",
    "annotations",
    "command",
    "paths",
    "run",
    "on",
    "signal",
    "pidfile",
    "attempts",
    "timeout",
    "exec",
    "syncfs",
    "fsync",
    "auto",
    "out",
    "in",
    "{staged}",
    "{target}",
    "{root}",
    "*",
    "**",
    "[roots.out]",
    "[[validate]]",
    "[[action]]",
    "[limits]",
    "[config]",
    "[verify]",
    "[input]",
    "[schedule]",
    "interval",
    "backoff_min",
    "backoff_max",
    "file",
    "command_timeout_ms",
    "10m",
    "1s",
    "0s",
    "oci://registry.example/plugins/x:1",
    "oci://127.0.0.1:5000/a/b@sha256:",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "SIGHUP",
    "HUP",
    "/bin/true",
    " = ",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "\\u0000",
    "\\n",
    ".",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\n",
    "=",
    "#",
];

const OCI_WORDS: &[&str] = &[
    "schemaVersion",
    "mediaType",
    "config",
    "layers",
    "manifests",
    "digest",
    "size",
    "annotations",
    "subject",
    "artifactType",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.wasm.config.v0+json",
    "application/vnd.oci.empty.v1+json",
    "sha256:",
    "sha256:0000000000000000000000000000000000000000000000000000000000000000",
    "sha512:",
    "critical",
    "identity",
    "docker-reference",
    "image",
    "docker-manifest-digest",
    "type",
    "optional",
    "cosign container image signature",
    "dev.cosignproject.cosign/signature",
    "-----BEGIN PUBLIC KEY-----\n",
    "\n-----END PUBLIC KEY-----\n",
    "\\u0000",
    "\\ud800",
];

const URL_WORDS: &[&str] = &[
    "https://",
    "http://",
    "file:///",
    "//",
    "/v2/",
    "\n",
    "127.0.0.1",
    "localhost",
    "[::1]",
    ":5000",
    "@",
    "?",
    "#",
    "%2F",
    "..",
    "registry.example",
    "xn--",
    "\\",
    " ",
    "\t",
    "http:",
    "https:",
];
const HEADER_WORDS: &[&str] = &[
    "Bearer ",
    "Basic ",
    "realm=",
    "service=",
    "scope=",
    "error=",
    "\"",
    ",",
    " ",
    "=",
    "http://",
    "https://",
    "file:///etc/passwd",
    "oci://",
    "registry.example",
    "127.0.0.1:5000",
    "[::1]",
    ":",
    "/",
    "@",
    "sha256:",
    "repository:a/b:pull",
    "latest",
    "%",
    "..",
    "\\",
];

const HARNESS_WORDS: &[&str] = &[
    "call",
    "open-root",
    "open-dir",
    "drop",
    "sync",
    "write-file",
    "read-file",
    "list-dir",
    "remove",
    "exchange",
    "fsync",
    "log",
    "harness:operations",
    "harness:logs",
    "dir",
    "path",
    "name",
    "files",
    "contents",
    "mode",
    "level",
    "message",
    "a",
    "b",
    "out",
    "in",
    "..",
    "/",
    "env",
    ".durasync",
    "info",
    "debug",
    "warn",
    "error",
    "MQo=",
    "",
    "420",
    "384",
    "4095",
    "2048",
    "\\u001b",
];

const CASE_WORDS: &[&str] = &[
    "result",
    "error",
    "config",
    "modes",
    "[config]",
    "[modes]",
    "\"0644\"",
    "\"7777\"",
    "\"10000\"",
    "\"0o600\"",
    "\"after/out/env/A\"",
    "\"before/out/key.pem\"",
    "\"before/../x\"",
    " = ",
    "\"",
    "[",
    "]",
    "{",
    "}",
    "\n",
    "=",
    ".",
];

const SIGSTORE_WORDS: &[&str] = &[
    "mediaType",
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
    "verificationMaterial",
    "certificate",
    "x509CertificateChain",
    "certificates",
    "rawBytes",
    "publicKey",
    "hint",
    "tlogEntries",
    "logIndex",
    "logId",
    "keyId",
    "kindVersion",
    "kind",
    "version",
    "hashedrekord",
    "dsse",
    "integratedTime",
    "inclusionPromise",
    "signedEntryTimestamp",
    "inclusionProof",
    "rootHash",
    "treeSize",
    "hashes",
    "checkpoint",
    "envelope",
    "canonicalizedBody",
    "messageSignature",
    "messageDigest",
    "algorithm",
    "SHA2_256",
    "digest",
    "signature",
    "dsseEnvelope",
    "payload",
    "payloadType",
    "application/vnd.in-toto+json",
    "signatures",
    "sig",
    "tlogs",
    "certificateAuthorities",
    "certChain",
    "validFor",
    "start",
    "end",
    "2020-01-01T00:00:00Z",
    "manifests",
    "artifactType",
    "schemaVersion",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "ASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4mrze8=",
    "MEUCIQ==",
    "\u{2014} ",
    "\n\n",
];

const LEDGER_WORDS: &[&str] =
    &["\n", "\r", "\u{0}", "restart", "reload nginx", "\u{1b}", "\u{2028}", "\u{7f}", "\u{ff}"];

fn specs() -> Vec<Spec> {
    vec![
        Spec { name: "manifest", shape: Shape::Toml, dict: MANIFEST_WORDS },
        Spec { name: "hooks", shape: Shape::Toml, dict: MANIFEST_WORDS },
        Spec { name: "agent_config", shape: Shape::Toml, dict: MANIFEST_WORDS },
        Spec { name: "oci_manifest", shape: Shape::Json, dict: OCI_WORDS },
        Spec { name: "oci_reference", shape: Shape::Text, dict: HEADER_WORDS },
        Spec { name: "www_authenticate", shape: Shape::Text, dict: HEADER_WORDS },
        Spec { name: "registry_urls", shape: Shape::Text, dict: URL_WORDS },
        Spec { name: "cosign", shape: Shape::Json, dict: OCI_WORDS },
        Spec { name: "sigstore", shape: Shape::Json, dict: SIGSTORE_WORDS },
        Spec { name: "ledger", shape: Shape::Text, dict: LEDGER_WORDS },
        Spec { name: "harness", shape: Shape::JsonLines, dict: HARNESS_WORDS },
        Spec { name: "case_toml", shape: Shape::Toml, dict: CASE_WORDS },
        Spec { name: "input", shape: Shape::Text, dict: LEDGER_WORDS },
    ]
}

/// A JSON tree whose keys and strings come mostly from `dict`.
fn tree(dict: &'static [&'static str], nulls: bool) -> BoxedStrategy<Value> {
    let word = proptest::sample::select(dict).prop_map(str::to_owned);
    let key = prop_oneof![4 => word.clone(), 1 => "[a-z_.]{0,8}"];
    let number = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (0u64..0o10000).prop_map(Value::from),
    ];
    let leaf = prop_oneof![
        2 => word.prop_map(Value::from),
        1 => ".{0,12}".prop_map(Value::from),
        1 => number,
        1 => any::<bool>().prop_map(Value::from),
        (if nulls { 1 } else { 0 }) => Just(Value::Null),
    ];
    leaf.prop_recursive(5, 64, 8, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key.clone(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A structured input of `shape`.
fn structured(shape: Shape, dict: &'static [&'static str]) -> BoxedStrategy<Vec<u8>> {
    match shape {
        Shape::Toml => {
            proptest::collection::btree_map(proptest::sample::select(dict), tree(dict, false), 0..8)
                .prop_map(|m| {
                    let m: serde_json::Map<String, Value> =
                        m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                    toml::to_string(&Value::Object(m)).map(String::into_bytes).unwrap_or_default()
                })
                .boxed()
        }
        Shape::Json => tree(dict, true).prop_map(|v| v.to_string().into_bytes()).boxed(),
        Shape::JsonLines => {
            let request = (proptest::sample::select(dict), tree(dict, true)).prop_map(|(call, v)| {
                let mut m = match v {
                    Value::Object(m) => m,
                    other => serde_json::Map::from_iter([("path".to_owned(), other)]),
                };
                m.insert("call".into(), call.into());
                m.entry("dir").or_insert(1.into());
                Value::Object(m).to_string()
            });
            proptest::collection::vec(request, 1..12)
                .prop_map(|lines| {
                    let mut all = "{\"call\":\"open-root\",\"name\":\"out\"}\n".to_owned();
                    all.push_str(&lines.join("\n"));
                    all.into_bytes()
                })
                .boxed()
        }
        Shape::Text => proptest::collection::vec(
            prop_oneof![
                3 => proptest::sample::select(dict).prop_map(|w| w.as_bytes().to_vec()),
                1 => proptest::collection::vec(any::<u8>(), 0..8),
                1 => ".{0,8}".prop_map(String::into_bytes),
            ],
            0..24,
        )
        .prop_map(|parts| parts.concat())
        .boxed(),
    }
}

// ---------------------------------------------------------------------------
// The run of one target.

fn target_fn(name: &str) -> fn(&[u8]) {
    durasync::fuzzing::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no fuzz target {name} in durasync::fuzzing::TARGETS"))
}

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz/corpus").join(name)
}

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(name);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    seeds.sort();
    seeds
}

fn seconds() -> u64 {
    std::env::var("DURASYNC_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SECS)
}

fn seed() -> u64 {
    std::env::var("DURASYNC_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        t.as_nanos() as u64
    })
}

fn work_dir(name: &str, sub: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(sub).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Record a finding: the (minimized) input in a file named for its kind
/// and hash; returns the report line.
fn record(name: &str, target: fn(&[u8]), data: &[u8], finding: &Finding) -> String {
    let small = minimize(target, data, finding);
    let hash =
        small.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    let path = work_dir(name, "fuzz-findings").join(format!("{}-{hash:016x}", finding.kind()));
    std::fs::write(&path, &small).unwrap();
    format!(
        "{name}: {finding}\n  input ({} bytes, {:?}) in {}\n  make it a regression test beside the parser: \
         durasync::fuzzing::{name}(&std::fs::read(\"…\")?) or the parser called on these bytes",
        small.len(),
        String::from_utf8_lossy(&small[..small.len().min(200)]),
        path.display()
    )
}

/// What one run of a target found: the reports, the inputs run.
struct Run {
    findings: Vec<String>,
    inputs: u64,
}

fn run(spec: &Spec, secs: u64, seed: u64, beat: &mpsc::Sender<()>) -> Run {
    install_hook();
    let target = target_fn(spec.name);
    let seeds = corpus(spec.name);
    assert!(!seeds.is_empty(), "{}: the seed corpus is empty", spec.name);
    let current = work_dir(spec.name, "fuzz").join("current-input");
    let current = std::fs::File::create(&current).unwrap();
    let mut out = Run { findings: Vec::new(), inputs: 0 };
    let one = |data: &[u8], out: &mut Run| {
        // Kept on disk first: an input that aborts the process is found there.
        current.set_len(0).unwrap();
        current.write_all_at(data, 0).unwrap();
        out.inputs += 1;
        let _ = beat.send(());
        if let Some(f) = check(target, data)
            && out.findings.len() < 5
        {
            out.findings.push(record(spec.name, target, data, &f));
        }
    };
    for (_, data) in &seeds {
        one(data, &mut out);
    }
    let pool: Vec<Vec<u8>> = seeds.into_iter().map(|(_, d)| d).collect();
    let mut rng = Rng(seed);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner =
        TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    let shaped = structured(spec.shape, spec.dict);
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        let data = if rng.below(4) == 0 {
            let mut d = shaped.new_tree(&mut runner).map(|t| t.current()).unwrap_or_default();
            if rng.below(2) == 0 {
                mutate(&mut rng, &mut d, spec.dict, &pool);
            }
            d
        } else {
            let mut d = rng.pick(&pool).clone();
            for _ in 0..1 + rng.below(4) {
                mutate(&mut rng, &mut d, spec.dict, &pool);
            }
            d
        };
        one(&data, &mut out);
    }
    out
}

/// Fuzz the target `name` for the configured time, on its own thread,
/// failing with every finding (and on a hang).
fn fuzz(name: &'static str) {
    let (secs, seed) = (seconds(), seed());
    println!("fuzz {name}: {secs} s, DURASYNC_FUZZ_SEED={seed}");
    let (beat, beats) = mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz-{name}"))
        .stack_size(STACK)
        .spawn(move || {
            let spec = specs().into_iter().find(|s| s.name == name).expect("a spec");
            run(&spec, secs, seed, &beat)
        })
        .unwrap();
    loop {
        match beats.recv_timeout(Duration::from_millis(HANG_MS)) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "fuzz {name}: an input ran over {HANG_MS} ms (a hang); it is in {} (DURASYNC_FUZZ_SEED={seed})",
                work_dir(name, "fuzz").join("current-input").display()
            ),
        }
    }
    let result = worker.join().expect("the driver itself does not panic");
    println!("fuzz {name}: {} inputs", result.inputs);
    assert!(
        result.findings.is_empty(),
        "fuzz {name} (DURASYNC_FUZZ_SEED={seed}):\n{}",
        result.findings.join("\n")
    );
}

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { fuzz(stringify!($name)); } )*

        #[test]
        fn every_parser_target_has_a_spec_and_a_seed_corpus() {
            let tested = [$(stringify!($name)),*];
            for (name, _) in durasync::fuzzing::TARGETS {
                assert!(tested.contains(name), "target {name} has no test here");
                assert!(specs().iter().any(|s| s.name == *name), "target {name} has no spec");
                assert!(!corpus(name).is_empty(), "target {name} has no seed in {}", corpus_dir(name).display());
            }
        }
    };
}

targets!(
    sigstore,
    manifest,
    hooks,
    agent_config,
    oci_manifest,
    oci_reference,
    www_authenticate,
    registry_urls,
    cosign,
    ledger,
    harness,
    case_toml,
    input,
);

// ---------------------------------------------------------------------------
// The driver's own checks: what it must catch, it catches.

#[test]
fn the_driver_reports_a_panic_minimized_a_slow_input_and_a_memory_hog() {
    install_hook();
    fn panics_on_a_z(d: &[u8]) {
        assert!(!d.contains(&b'Z'), "found Z");
    }
    fn slow(d: &[u8]) {
        if d.first() == Some(&b's') {
            std::thread::sleep(Duration::from_millis(INPUT_MS + 100));
        }
    }
    fn hog(d: &[u8]) {
        if d.first() == Some(&b'm') {
            let v = vec![1u8; INPUT_MEMORY as usize + 1];
            std::hint::black_box(&v);
        }
    }
    assert_eq!(check(panics_on_a_z, b"abc"), None);
    let input = b"aaaaaaaaZbbbbbbbbbb";
    let f = check(panics_on_a_z, input).unwrap();
    assert!(matches!(&f, Finding::Panic(m) if m.starts_with("found Z at ")), "{f:?}");
    assert_eq!(minimize(panics_on_a_z, input, &f), b"Z");
    let report = record("driver-self-check", panics_on_a_z, input, &f);
    let path = report.lines().nth(1).and_then(|l| l.split(" in ").last()).unwrap().trim();
    assert_eq!(std::fs::read(path).unwrap(), b"Z", "{report}");
    assert!(matches!(check(slow, b"s"), Some(Finding::Slow(_))));
    assert!(matches!(check(hog, b"m"), Some(Finding::Memory(n)) if n > INPUT_MEMORY));
    assert_eq!(check(hog, b"x"), None);
}

#[test]
fn mutations_stay_bounded_and_change_the_input() {
    let mut rng = Rng(7);
    let pool = vec![b"name = \"x\"\n[roots.out]\npath = \"o\"\n".to_vec()];
    let mut changed = 0;
    for _ in 0..2000 {
        let mut d = pool[0].clone();
        mutate(&mut rng, &mut d, MANIFEST_WORDS, &pool);
        assert!(d.len() <= MAX_INPUT);
        changed += usize::from(d != pool[0]);
    }
    assert!(changed > 1800, "{changed} of 2000 mutations changed the input");
}
