//! docs tests (see tests/README.md): the documentation's own promises,
//! checked so they cannot rot. The README stays short and quotes
//! BENCHMARKS.md's current figures as they are; every relative link in the
//! README, ARCHITECTURE.md, BENCHMARKS.md, docs/*.md, tests/README.md and
//! guest-sdk/README.md reaches a file, and its `#anchor` a heading of that
//! file (GitHub's slugs); no heading under docs/ or of a README names an
//! issue number (history belongs in git).
//!
//! Markdown is read as GitHub renders these files: fenced code blocks and
//! inline code hold no links and no headings; headings are ATX (`#` to
//! `######`). std only.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The most lines the README may have: what durasync is, its current
/// figures, the set-up, the guarantees in brief and the links to the rest.
const README_MAX_LINES: usize = 250;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The markdown files under `docs/`, sorted.
fn docs_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("reading docs/")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "docs/ holds no .md page");
    pages
}

/// Every README.md of the repository (case-insensitive), outside `target/`,
/// `node_modules/` and hidden directories.
fn readmes(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                    dirs.push(entry.path());
                }
            } else if kind.is_file() && name.eq_ignore_ascii_case("readme.md") {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

/// The files whose links are checked: the README, ARCHITECTURE.md (when
/// present), BENCHMARKS.md, docs/*.md, tests/README.md, guest-sdk/README.md.
fn linked_docs(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    if root.join("ARCHITECTURE.md").exists() {
        files.push(root.join("ARCHITECTURE.md"));
    }
    files.push(root.join("BENCHMARKS.md"));
    files.extend(docs_pages(root));
    files.push(root.join("tests/README.md"));
    files.push(root.join("guest-sdk/README.md"));
    files
}

/// One line of a markdown file outside fenced code blocks, with its number
/// (from 1).
struct Line<'a> {
    number: usize,
    text: &'a str,
}

/// The lines of `text` outside fenced code blocks (``` or ~~~, the fence
/// lines themselves left out too).
fn prose_lines(text: &str) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let opens = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        match (fence, opens) {
            (None, Some(f)) => fence = Some(f),
            (Some(open), Some(f)) if f == open => fence = None,
            (None, None) => lines.push(Line { number: i + 1, text: line }),
            _ => {}
        }
    }
    lines
}

/// `line` without its inline code spans (a run of N backticks to the next
/// run of exactly N). An unclosed run is kept as text, as GitHub does.
fn without_code_spans(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = line[i..].find('`').map_or(line.len(), |n| i + n);
            out.push_str(&line[i..next]);
            i = next;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let mut j = i + run;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let other = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                if other == run {
                    close = Some(j + other);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => i = end,
            None => {
                out.push_str(&line[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// A heading's text as GitHub slugs it: lowercase; letters, digits, `-`
/// and `_` kept, spaces turned into `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The text of an ATX heading line, without its `#`s (leading and closing).
fn heading_text(line: &str) -> Option<&str> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let level = trimmed.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &trimmed[level..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    let rest = rest.trim();
    let without_closing = rest.trim_end_matches('#');
    Some(if without_closing.is_empty() || without_closing.ends_with(' ') {
        without_closing.trim_end()
    } else {
        rest
    })
}

/// The headings of a markdown text, with their line numbers.
fn headings(text: &str) -> Vec<(usize, String)> {
    prose_lines(text).iter().filter_map(|l| heading_text(l.text).map(|h| (l.number, h.to_owned()))).collect()
}

/// The anchors GitHub gives the headings of `text`: each heading's slug, a
/// repeated slug suffixed `-1`, `-2`, … in order.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, heading) in headings(text) {
        let base = slug(&heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The link targets of a markdown text outside code: inline links and
/// images (`](target)`, `](target "title")`) and reference definitions
/// (`[name]: target`), with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let prose = without_code_spans(line.text);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let after = after.strip_prefix('<').unwrap_or(after);
            let end = after.find(|c: char| c == ')' || c == '>' || c.is_whitespace()).unwrap_or(after.len());
            if end > 0 {
                out.push((line.number, after[..end].to_owned()));
            }
            rest = &after[end..];
        }
        let trimmed = prose.trim_start();
        if let Some(close) = trimmed.strip_prefix('[').and_then(|t| t.find("]:"))
            && let Some(target) = trimmed[close + 3..].split_whitespace().next()
        {
            out.push((line.number, target.trim_matches(['<', '>']).to_owned()));
        }
    }
    out
}

/// Whether `target` names a scheme (`https:`, `mailto:`): not a file here.
fn is_external(target: &str) -> bool {
    match target.find(':') {
        Some(colon) => {
            let scheme = &target[..colon];
            !scheme.is_empty()
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && !target[..colon].contains('/')
        }
        None => false,
    }
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

#[test]
fn the_readme_is_at_most_250_lines() {
    let readme = read(&workspace_root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: move a section to docs/ and link it"
    );
}

#[test]
fn every_relative_link_reaches_a_file_and_every_anchor_a_heading_of_it() {
    let root = workspace_root();
    let mut anchors_of: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in linked_docs(&root) {
        let text = read(&file);
        let dir = file.parent().unwrap();
        for (line, target) in links(&text) {
            if is_external(&target) {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() { file.clone() } else { dir.join(path) };
            let at = format!("{}:{line}: `{target}`", relative(&root, &file));
            let Ok(dest) = dest.canonicalize() else {
                broken.push(format!("{at}: no such file"));
                continue;
            };
            let Some(anchor) = anchor else { continue };
            if dest.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let known = anchors_of.entry(dest.clone()).or_insert_with(|| anchors(&read(&dest)));
            if !known.contains(anchor) {
                broken
                    .push(format!("{at}: no heading of {} has the anchor #{anchor}", relative(&root, &dest)));
            }
        }
    }
    assert!(checked > 0, "no relative link found: the link reader is broken");
    assert!(broken.is_empty(), "{} broken links:\n{}", broken.len(), broken.join("\n"));
}

/// Whether `heading` names an issue by number: "issue" (any case) then,
/// after spaces or `#`, a digit.
fn names_an_issue(heading: &str) -> bool {
    let lower = heading.to_lowercase();
    lower.match_indices("issue").any(|(at, word)| {
        let after = lower[at + word.len()..].trim_start_matches([' ', '#', '\u{a0}']);
        after.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn no_doc_under_docs_and_no_readme_has_an_issue_number_in_a_heading() {
    let root = workspace_root();
    let mut files = docs_pages(&root);
    files.extend(readmes(&root));
    assert!(files.iter().any(|f| f == &root.join("README.md")), "the README was not found");
    let mut found = Vec::new();
    for file in files {
        for (line, heading) in headings(&read(&file)) {
            if names_an_issue(&heading) {
                found.push(format!("{}:{line}: {heading}", relative(&root, &file)));
            }
        }
    }
    assert!(found.is_empty(), "headings naming an issue (history belongs in git):\n{}", found.join("\n"));
}

/// The table that follows the heading `## Current figures` in `text`: its
/// first run of lines starting with `|`.
fn current_figures(text: &str, name: &str) -> Vec<String> {
    let lines = prose_lines(text);
    let start = lines
        .iter()
        .position(|l| heading_text(l.text) == Some("Current figures"))
        .unwrap_or_else(|| panic!("{name}: no heading \"Current figures\""));
    let table: Vec<String> = lines[start + 1..]
        .iter()
        .skip_while(|l| !l.text.starts_with('|'))
        .take_while(|l| l.text.starts_with('|'))
        .map(|l| l.text.trim_end().to_owned())
        .collect();
    assert!(table.len() > 2, "{name}: no table under \"Current figures\"");
    table
}

#[test]
fn the_readme_quotes_the_current_figures_of_benchmarks_md_as_they_are() {
    let root = workspace_root();
    let readme = current_figures(&read(&root.join("README.md")), "README.md");
    let benchmarks = current_figures(&read(&root.join("BENCHMARKS.md")), "BENCHMARKS.md");
    for (i, (r, b)) in readme.iter().zip(&benchmarks).enumerate() {
        assert_eq!(r, b, "row {} of the current figures differs between README.md and BENCHMARKS.md", i + 1);
    }
    assert_eq!(
        readme.len(),
        benchmarks.len(),
        "README.md and BENCHMARKS.md list different numbers of figures"
    );
}

#[test]
fn the_markdown_reader_finds_links_headings_and_slugs_as_github_does() {
    let text = "# Title\n\n## Flush strategy: `--flush auto|fsync|syncfs`\n## Title\n\
                ```sh\n# Install the unit\n[not](a-link)\n```\n\
                See [x](docs/a.md#b) and `[code](no)`, ![img](p.png \"t\").\n[ref]: other.md\n";
    let hs: Vec<String> = headings(text).into_iter().map(|(_, h)| h).collect();
    assert_eq!(hs, ["Title", "Flush strategy: `--flush auto|fsync|syncfs`", "Title"]);
    assert_eq!(
        anchors(text),
        BTreeSet::from([
            "title".to_owned(),
            "title-1".to_owned(),
            "flush-strategy---flush-autofsyncsyncfs".to_owned()
        ])
    );
    let ls: Vec<String> = links(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(ls, ["docs/a.md#b", "p.png", "other.md"]);
    assert_eq!(
        slug("Drift and a node's status: `drift`, `/status`"),
        "drift-and-a-nodes-status-drift-status"
    );
    assert_eq!(
        slug("The one-file fast path (issue 13's last goal)"),
        "the-one-file-fast-path-issue-13s-last-goal"
    );
    assert!(names_an_issue("Incremental sync (issue 13)") && names_an_issue("Issue #20 in session 6"));
    assert!(!names_an_issue("Issues and tissue") && !names_an_issue("issues 1"));
    assert!(is_external("https://example.com") && is_external("mailto:a@b") && !is_external("docs/a.md#x:y"));
}
