//! Text a plugin makes the host print — its result, its error, its log
//! messages, its stderr, the paths it names — with every control character
//! escaped, so it can neither drive the operator's terminal (ESC, CSI, OSC)
//! nor forge lines of the host's own output (CR, LF).

/// Every C0 and C1 control character and DEL escaped (`\n`, `\r`, `\t`,
/// `\u{1b}`, `\u{9b}`, …); all other text as it is.
pub fn escape_all(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// Like [`escape_all`], but a line feed still ends a line: the next line is
/// indented by `indent`, so no line a plugin writes starts where the host's
/// own lines do. A CR before the line feed is dropped.
pub fn escape_lines(s: &str, indent: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(indent);
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        for c in line.chars() {
            push_escaped(&mut out, c);
        }
    }
    out
}

/// The C1 controls (U+0080..U+009F) escaped as JSON `\u` escapes in JSON
/// text. serde_json escapes C0 controls itself but writes C1 controls raw,
/// and some terminals act on them (U+009B is CSI).
pub fn escape_json_c1(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if ('\u{80}'..='\u{9f}').contains(&c) || c == '\u{7f}' {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_lines_indented() {
        assert_eq!(escape_all("a\x1b]0;t\x07\r\nb\u{9b}c"), "a\\u{1b}]0;t\\u{7}\\r\\nb\\u{9b}c");
        assert_eq!(
            escape_lines("one\r\ndurasync: forged\n\x1b[2J", "  "),
            "one\n  durasync: forged\n  \\u{1b}[2J"
        );
        assert_eq!(escape_json_c1("\"a\u{9b}b\""), "\"a\\u009bb\"");
        assert_eq!(escape_all("plain ünïcode"), "plain ünïcode");
    }
}
