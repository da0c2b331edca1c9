//! Producers' text made safe to show: in a spreadsheet ([`csv_text`]) and on a terminal or in a log ([`printable`]).
//! Names and ids the contract bounds (tenant, subject, metric, request_id, idempotency_key) never hold a control
//! character, since ingest quarantines them; event ids, sources, reasons, attributes and whatever an older ledger
//! recorded may, and a newline in them would forge a line of `status`, `audit` or a table, an escape sequence would
//! drive the reader's terminal.

use std::borrow::Cow;

/// A text cell, safe to open in a spreadsheet (OWASP "CSV injection"): one that starts with `=`, `+`, `-`,
/// `@`, a tab or a carriage return is prefixed with `'`, so that it is shown as text and never run as a
/// formula; then quoted (RFC 4180) when it holds a comma, a quote or a line break.
pub fn csv_text(text: &str) -> String {
    let neutralised =
        if text.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{text}") } else { text.to_string() };
    if neutralised.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", neutralised.replace('"', "\"\""))
    } else {
        neutralised
    }
}

/// `text` with every control character written as an escape (`\n`, `\t`, `\r`, `\u{1b}`), so that it stays on its
/// line and cannot drive a terminal; text without one is borrowed as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\r' => shown.push_str("\\r"),
            c if c.is_control() => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_borrowed() {
        assert!(matches!(printable("org-42 requests"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nTOTAL 0"), "a\\nTOTAL 0");
        assert_eq!(printable("\u{1b}[2Jx\t\r\u{7f}"), "\\u{1b}[2Jx\\t\\r\\u{7f}");
    }
}
