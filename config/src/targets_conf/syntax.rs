//! The Config::General syntax of tgt's targets.conf, as tgt-admin reads it
//! (`-UseApacheInclude`, `-IncludeGlob`): lines, `#` comments (`\#` is a
//! literal `#`), `/* ... */` comment blocks, backslash continuation, `name
//! value` / `name = value` directives, `<name arg> ... </name>` blocks and
//! `include PATTERN` (also `<<include PATTERN>>`), expanded in place. Owns
//! reading the included files (relative patterns are relative to the
//! including file), cycle detection and the size limits; knows nothing about
//! what the directives mean.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::glob;
use crate::error::ConfigError;

/// Where a directive or block was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loc {
    pub file: Rc<str>,
    pub line: usize,
}

/// One directive or block, in file order.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    /// `name value` (the value with surrounding quotes removed; may be empty).
    Directive {
        name: String,
        value: String,
        loc: Loc,
    },
    /// `<name arg> children </name>`.
    Block {
        name: String,
        arg: String,
        children: Vec<Node>,
        loc: Loc,
    },
}

/// Most nested includes.
const MAX_DEPTH: usize = 16;
/// Most files read in one import.
const MAX_FILES: usize = 256;
/// Largest file read.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// State shared by the whole import: files being read (for cycles), files
/// read (for repeats), warnings.
pub(crate) struct Reader {
    stack: Vec<PathBuf>,
    seen: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

impl Reader {
    pub(crate) fn new() -> Self {
        Reader {
            stack: Vec::new(),
            seen: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Parses `text`, the contents of `origin`, expanding includes.
    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        origin: &Path,
    ) -> Result<Vec<Node>, ConfigError> {
        let key = canonical(origin);
        self.stack.push(key.clone());
        self.seen.push(key);
        let file: Rc<str> = Rc::from(origin.display().to_string());
        let r = self.parse_lines(text, &file, origin);
        self.stack.pop();
        r
    }

    fn parse_lines(
        &mut self,
        text: &str,
        file: &Rc<str>,
        origin: &Path,
    ) -> Result<Vec<Node>, ConfigError> {
        let err = |line: usize, what: &str, msg: String| {
            ConfigError::new(file, Some(line), None, what, msg)
        };
        // Stack of open blocks: (name, arg, loc, children so far).
        let mut open: Vec<(String, String, Loc, Vec<Node>)> = Vec::new();
        let mut top: Vec<Node> = Vec::new();
        for (line_no, line) in logical_lines(text) {
            let loc = Loc {
                file: file.clone(),
                line: line_no,
            };
            let node = if let Some(rest) = line.strip_prefix("</") {
                let name = rest.trim_end_matches('>').trim();
                let Some((oname, arg, oloc, children)) = open.pop() else {
                    return Err(err(
                        line_no,
                        name,
                        format!("</{name}> closes no open block"),
                    ));
                };
                if !oname.eq_ignore_ascii_case(name) {
                    return Err(err(
                        line_no,
                        name,
                        format!(
                            "</{name}> does not close <{oname}> opened at line {}",
                            oloc.line
                        ),
                    ));
                }
                Node::Block {
                    name: oname,
                    arg,
                    children,
                    loc: oloc,
                }
            } else if let Some(rest) = line.strip_prefix("<<") {
                let inner = rest.trim_end_matches(">>").trim();
                let (name, value) = split_directive(inner);
                if !name.eq_ignore_ascii_case("include") {
                    return Err(err(
                        line_no,
                        &name,
                        "here-documents and <<...>> forms other than <<include FILE>> are not supported"
                            .into(),
                    ));
                }
                let nodes = self.include(&value, origin, &loc)?;
                push_all(&mut open, &mut top, nodes);
                continue;
            } else if let Some(rest) = line.strip_prefix('<') {
                let Some(inner) = rest.strip_suffix('>') else {
                    return Err(err(line_no, "", format!("unterminated block tag {line:?}")));
                };
                let inner = inner.trim();
                let (name, arg) = split_directive(inner);
                if name.is_empty() {
                    return Err(err(line_no, "", "empty block tag <>".into()));
                }
                if let Some(n) = name.strip_suffix('/') {
                    // `<name/>`: an empty block.
                    push_all(
                        &mut open,
                        &mut top,
                        vec![Node::Block {
                            name: n.to_string(),
                            arg,
                            children: Vec::new(),
                            loc,
                        }],
                    );
                    continue;
                }
                if open.len() >= MAX_DEPTH {
                    return Err(err(line_no, &name, "blocks nested too deeply".into()));
                }
                open.push((name, arg, loc, Vec::new()));
                continue;
            } else {
                let (name, value) = split_directive(&line);
                if name.eq_ignore_ascii_case("include") {
                    let nodes = self.include(&value, origin, &loc)?;
                    push_all(&mut open, &mut top, nodes);
                    continue;
                }
                Node::Directive { name, value, loc }
            };
            push_all(&mut open, &mut top, vec![node]);
        }
        if let Some((name, _, loc, _)) = open.pop() {
            return Err(err(
                loc.line,
                &name,
                format!("<{name}> is not closed (expected </{name}> before the end of the file)"),
            ));
        }
        Ok(top)
    }

    /// Reads the files `pattern` names (relative to `origin`'s directory) and
    /// returns their nodes, in the sorted order of the matches.
    fn include(
        &mut self,
        pattern: &str,
        origin: &Path,
        loc: &Loc,
    ) -> Result<Vec<Node>, ConfigError> {
        let err = |msg: String| ConfigError::new(&loc.file, Some(loc.line), None, "include", msg);
        if pattern.is_empty() {
            return Err(err("missing file name".into()));
        }
        let p = Path::new(pattern);
        let full = if p.is_absolute() {
            p.to_path_buf()
        } else {
            origin.parent().unwrap_or(Path::new("")).join(p)
        };
        let files = if glob::has_magic(pattern) {
            glob::expand(&full)
        } else {
            vec![full]
        };
        let mut out = Vec::new();
        for f in files {
            let key = canonical(&f);
            if self.stack.contains(&key) {
                let chain: Vec<String> = self
                    .stack
                    .iter()
                    .chain(std::iter::once(&key))
                    .map(|p| p.display().to_string())
                    .collect();
                return Err(err(format!("include cycle: {}", chain.join(" -> "))));
            }
            if self.seen.contains(&key) {
                self.warnings.push(format!(
                    "{}:{}: include: {} was already read; not read again (as Config::General does)",
                    loc.file,
                    loc.line,
                    f.display()
                ));
                continue;
            }
            if self.stack.len() > MAX_DEPTH {
                return Err(err(format!("includes nested more than {MAX_DEPTH} deep")));
            }
            if self.seen.len() >= MAX_FILES {
                return Err(err(format!("more than {MAX_FILES} files included")));
            }
            let text =
                read_file(&f).map_err(|m| err(format!("cannot read {}: {m}", f.display())))?;
            out.extend(self.parse_text(&text, &f)?);
        }
        Ok(out)
    }
}

fn push_all(open: &mut [(String, String, Loc, Vec<Node>)], top: &mut Vec<Node>, nodes: Vec<Node>) {
    match open.last_mut() {
        Some((_, _, _, children)) => children.extend(nodes),
        None => top.extend(nodes),
    }
}

/// The path made absolute and free of symlinks when possible, for cycle checks.
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Reads a regular file of at most 4 MiB as UTF-8.
pub(crate) fn read_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    String::from_utf8(buf).map_err(|_| "not UTF-8 text".to_string())
}

/// Splits `name rest`, `name = rest` or `name=rest` the way Config::General
/// does (at the first blank or `=`); the value is trimmed and loses one pair
/// of surrounding double quotes.
pub(crate) fn split_directive(line: &str) -> (String, String) {
    let line = line.trim();
    let Some(i) = line.find(|c: char| c.is_whitespace() || c == '=') else {
        return (line.to_string(), String::new());
    };
    let name = &line[..i];
    let rest = line[i..].trim_start();
    let rest = rest.strip_prefix('=').map(str::trim_start).unwrap_or(rest);
    (name.to_string(), unquote(rest.trim_end()).to_string())
}

fn unquote(v: &str) -> &str {
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        &v[1..v.len() - 1]
    } else {
        v
    }
}

/// The meaningful lines of `text` with their (first) line numbers: comments
/// removed, continuations joined, blank lines dropped, trimmed.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    let mut in_c_comment = false;
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let t = raw.trim();
        if in_c_comment {
            if t.contains("*/") {
                in_c_comment = false;
            }
            continue;
        }
        if pending.is_none() && t.starts_with("/*") {
            in_c_comment = !t[2..].contains("*/");
            continue;
        }
        let stripped = strip_comment(raw);
        let s = stripped.trim();
        let (body, continues) = match s.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (s, false),
        };
        let (start, mut acc) = pending.take().unwrap_or((no, String::new()));
        acc.push_str(if acc.is_empty() {
            body
        } else {
            body.trim_start()
        });
        if continues {
            pending = Some((start, acc));
        } else if !acc.trim().is_empty() {
            out.push((start, acc.trim().to_string()));
        }
    }
    if let Some((start, acc)) = pending {
        if !acc.trim().is_empty() {
            out.push((start, acc.trim().to_string()));
        }
    }
    out
}

/// The line up to an unescaped `#`, with `\#` turned into `#`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '#' => break,
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Node>, ConfigError> {
        Reader::new().parse_text(text, Path::new("/nonexistent/t.conf"))
    }

    #[test]
    fn directives_and_separators() {
        assert_eq!(split_directive("a b c"), ("a".into(), "b c".into()));
        assert_eq!(split_directive("a = b"), ("a".into(), "b".into()));
        assert_eq!(split_directive("a=b=c"), ("a".into(), "b=c".into()));
        assert_eq!(
            split_directive("params x=1"),
            ("params".into(), "x=1".into())
        );
        assert_eq!(split_directive("a \"b c\""), ("a".into(), "b c".into()));
        assert_eq!(split_directive("lonely"), ("lonely".into(), String::new()));
    }

    #[test]
    fn lines_comments_continuations() {
        let l = logical_lines(
            "# c\n\n  a 1 # trailing\nb \\\n   2 \\\n 3\n/* x\n y */\nc \\# not comment\nd\\\n",
        );
        assert_eq!(
            l,
            vec![
                (3, "a 1".to_string()),
                (4, "b 2 3".to_string()),
                (9, "c # not comment".to_string()),
                (10, "d".to_string()),
            ]
        );
    }

    #[test]
    fn blocks() {
        let n = parse("<target iqn.x:a>\n  backing-store /a\n  <backing-store /b>\n lun 3\n </backing-store>\n</target>\n")
            .unwrap();
        assert_eq!(n.len(), 1);
        let Node::Block {
            name,
            arg,
            children,
            loc,
        } = &n[0]
        else {
            panic!()
        };
        assert_eq!(
            (name.as_str(), arg.as_str(), loc.line),
            ("target", "iqn.x:a", 1)
        );
        assert_eq!(children.len(), 2);
        let e = parse("<target a>\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/nonexistent/t.conf:1: target: <target> is not closed (expected </target> before the end of the file)"
        );
        let e = parse("</target>\n").unwrap_err();
        assert_eq!(e.line(), Some(1));
        let e = parse("<target a>\n</backing-store>\n").unwrap_err();
        assert!(e.to_string().contains("does not close <target>"), "{e}");
        assert!(parse("<target a\n").is_err());
        assert!(parse("<<EOF\n").is_err());
    }

    #[test]
    fn missing_include_is_an_error() {
        let e = parse("include /nonexistent/x.conf\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/t.conf:1: include: cannot read"),
            "{e}"
        );
        // A glob that matches nothing is fine (Debian's conf.d may be empty).
        assert!(parse("include /nonexistent/*.conf\n").unwrap().is_empty());
    }
}
