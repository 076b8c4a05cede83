//! [`ConfigError`]: one problem in a configuration text, with the file name,
//! the line and column when they can be found, the field path
//! (`targets[0].luns[1].block_size`) and the problem in words. Also turns
//! serde_yaml's errors into that shape.

use crate::locate::locate;

/// A configuration problem. Displays as
/// `FILE:LINE:COL: PATH: MESSAGE`, e.g.
/// `demo.yaml:14:9: targets[0].luns[1].block_size: must be 512 or 4096 (got 1000)`.
/// Without a known position it is `FILE: PATH: MESSAGE`; without a field path
/// (YAML syntax errors) `FILE:LINE:COL: MESSAGE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    file: String,
    line: Option<usize>,
    column: Option<usize>,
    path: String,
    message: String,
}

impl ConfigError {
    /// An error at a known position (1-based line and column).
    pub fn new(
        file: &str,
        line: Option<usize>,
        column: Option<usize>,
        path: &str,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            file: file.to_string(),
            line,
            column: line.and(column),
            path: path.to_string(),
            message: message.into(),
        }
    }

    /// An error about the field at `path`, located by looking the path up in `text`.
    pub(crate) fn at_path(text: &str, file: &str, path: &str, message: impl Into<String>) -> Self {
        let (line, column) = match locate(text, path) {
            Some((l, c)) => (Some(l), Some(c)),
            None => (None, None),
        };
        ConfigError::new(file, line, column, path, message)
    }

    /// Converts a serde_yaml error, keeping its position and field path.
    pub(crate) fn from_yaml(text: &str, file: &str, err: &serde_yaml::Error) -> Self {
        let mut msg = err.to_string();
        let loc = err.location().map(|l| (l.line(), l.column()));
        if let Some((l, c)) = loc {
            let suffix = format!(" at line {l} column {c}");
            if let Some(i) = msg.find(&suffix) {
                msg.replace_range(i..i + suffix.len(), "");
            }
        }
        let mut path = String::new();
        if let Some((head, tail)) = msg.split_once(": ") {
            if is_path_like(head) {
                path = head.to_string();
                msg = tail.to_string();
            }
        }
        let (line, column) = match loc {
            Some((l, c)) => (Some(l), Some(c)),
            None if !path.is_empty() => match locate(text, &path) {
                Some((l, c)) => (Some(l), Some(c)),
                None => (None, None),
            },
            None => (None, None),
        };
        ConfigError::new(file, line, column, &path, msg)
    }

    /// The file name given to [`crate::parse`].
    pub fn file(&self) -> &str {
        &self.file
    }

    /// 1-based line of the problem, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// 1-based column of the problem, when known.
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// Field path such as `targets[0].luns[1].block_size`; empty for syntax errors.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The problem in words, without file, position or path.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn render(&self) -> String {
        let mut s = self.file.clone();
        if let Some(l) = self.line {
            s.push_str(&format!(":{l}"));
            if let Some(c) = self.column {
                s.push_str(&format!(":{c}"));
            }
        }
        s.push_str(": ");
        if !self.path.is_empty() {
            s.push_str(&self.path);
            s.push_str(": ");
        }
        s.push_str(&self.message);
        s
    }
}

/// serde_yaml prefixes messages with the field path (`targets[0].luns[0]: ...`);
/// serde's own messages start with words separated by spaces.
fn is_path_like(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shapes() {
        let e = ConfigError::new("a.yaml", Some(3), Some(5), "targets[0].iqn", "bad");
        assert_eq!(e.to_string(), "a.yaml:3:5: targets[0].iqn: bad");
        let e = ConfigError::new("a.yaml", None, Some(5), "targets[0].iqn", "bad");
        assert_eq!(e.to_string(), "a.yaml: targets[0].iqn: bad");
        let e = ConfigError::new("a.yaml", Some(1), Some(2), "", "syntax");
        assert_eq!(e.to_string(), "a.yaml:1:2: syntax");
    }
}
