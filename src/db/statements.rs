//! A migration's text as its statements one by one, for Citus.
//!
//! Citus sends a DDL statement on a distributed table (an `alter table`,
//! a `create index`) on to the workers by the text the statement came in,
//! and a migration sent whole is one text of many statements, which the
//! workers refuse ("cannot insert multiple commands into a prepared
//! statement"). Inside a PL/pgSQL block each `EXECUTE` is a text of its
//! own, so [`one_by_one`] rewrites a migration into one block that runs
//! each of its statements by an `EXECUTE`: the same statements, in the
//! same transaction, in the same order.

/// `sql` as a `DO` block that runs each of its statements with `EXECUTE`.
pub fn one_by_one(sql: &str) -> String {
    let statements = split(sql);
    let outer = tag_absent_from(sql, "ledger_migration");
    let inner = tag_absent_from(sql, "ledger_statement");
    let mut out = format!("do ${outer}$\nbegin\n");
    for statement in statements {
        out.push_str(&format!("execute ${inner}$\n{statement}\n${inner}$;\n"));
    }
    out.push_str(&format!("end\n${outer}$"));
    out
}

/// `base`, or `base` with a number after it, such that `$tag$` is not in
/// `sql`.
fn tag_absent_from(sql: &str, base: &str) -> String {
    (0..)
        .map(|n| {
            if n == 0 {
                base.to_owned()
            } else {
                format!("{base}_{n}")
            }
        })
        .find(|tag| !sql.contains(&format!("${tag}$")))
        .expect("some number makes a tag the text does not hold")
}

/// The statements of `sql`, each without its `;`, leaving out those that
/// are only blanks and comments. A `;` ends a statement only outside
/// quotes (`'...'`, `E'...'`, `"..."`, `$tag$...$tag$`) and comments
/// (`-- ...`, nested `/* ... */`).
pub fn split(sql: &str) -> Vec<&str> {
    let bytes = sql.as_bytes();
    let mut statements = Vec::new();
    let mut start = 0;
    let mut meaningful = false;
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let (end, counts) = match bytes[i] {
            b'-' if rest.starts_with(b"--") => (
                i + rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len()),
                false,
            ),
            b'/' if rest.starts_with(b"/*") => (block_comment_end(bytes, i), false),
            b'\'' => {
                let escapes = i > 0
                    && matches!(bytes[i - 1], b'e' | b'E')
                    && (i < 2 || !is_identifier_byte(bytes[i - 2]));
                (quoted_end(bytes, i, b'\'', escapes), true)
            }
            b'"' => (quoted_end(bytes, i, b'"', false), true),
            b'$' if i == 0 || !is_identifier_byte(bytes[i - 1]) => match dollar_tag(rest) {
                Some(tag) => {
                    let body = i + tag.len();
                    let close =
                        find(&bytes[body..], tag).map_or(bytes.len(), |at| body + at + tag.len());
                    (close, true)
                }
                None => (i + 1, true),
            },
            b';' => {
                if meaningful {
                    statements.push(sql[start..i].trim());
                }
                start = i + 1;
                meaningful = false;
                i += 1;
                continue;
            }
            b if b.is_ascii_whitespace() => (i + 1, false),
            _ => (i + 1, true),
        };
        meaningful |= counts;
        i = end;
    }
    if meaningful {
        statements.push(sql[start..].trim());
    }
    statements
}

fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// The opening `$tag$` at the start of `rest`, if it is one.
fn dollar_tag(rest: &[u8]) -> Option<&[u8]> {
    let close = 1 + rest[1..].iter().position(|b| *b == b'$')?;
    let tag = &rest[1..close];
    let first_ok = tag
        .first()
        .is_none_or(|b| b.is_ascii_alphabetic() || *b == b'_' || *b >= 0x80);
    let rest_ok = tag
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b >= 0x80);
    (first_ok && rest_ok).then_some(&rest[..=close])
}

/// Where the quoted text opening at `open` with `quote` ends (past its
/// closing quote): a doubled quote stays inside, and so, when `escapes`,
/// does a backslash's next byte.
fn quoted_end(bytes: &[u8], open: usize, quote: u8, escapes: bool) -> usize {
    let mut i = open + 1;
    while i < bytes.len() {
        if escapes && bytes[i] == b'\\' {
            i += 2;
        } else if bytes[i] == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    bytes.len()
}

/// Where the block comment opening at `open` ends: past its `*/`, nested
/// ones included.
fn block_comment_end(bytes: &[u8], open: usize) -> usize {
    let mut depth = 0;
    let mut i = open;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if bytes[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    bytes.len()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::{one_by_one, split};

    #[test]
    fn a_semicolon_ends_a_statement_only_outside_quotes_and_comments() {
        let sql = "create table t (a text default 'x;y'); -- a comment; still one\n\
                   comment on table t is E'it''s \\'; here';\n\
                   /* a /* nested; */ comment; */ select \"odd;name\" from t;\n\
                   create function f() returns int language plpgsql as $fn$\n\
                   begin return 1; end;\n\
                   $fn$;\n\
                   do $$ begin perform 1; end $$;\n\
                   select a$b from t;\n\
                   -- only a comment;\n";
        assert_eq!(
            split(sql),
            [
                "create table t (a text default 'x;y')",
                "-- a comment; still one\ncomment on table t is E'it''s \\'; here'",
                "/* a /* nested; */ comment; */ select \"odd;name\" from t",
                "create function f() returns int language plpgsql as $fn$\nbegin return 1; end;\n$fn$",
                "do $$ begin perform 1; end $$",
                "select a$b from t",
            ]
        );
    }

    #[test]
    fn every_statement_runs_by_its_own_execute_under_tags_the_text_does_not_hold() {
        let sql = "select 1; select '$ledger_statement$';";
        let block = one_by_one(sql);
        assert_eq!(
            block,
            "do $ledger_migration$\nbegin\n\
             execute $ledger_statement_1$\nselect 1\n$ledger_statement_1$;\n\
             execute $ledger_statement_1$\nselect '$ledger_statement$'\n$ledger_statement_1$;\n\
             end\n$ledger_migration$"
        );
    }
}
