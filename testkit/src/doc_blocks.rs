//! The fenced code blocks of the README and the book (`docs/src/**/*.md`), which the
//! documentation tests run or check. CONTRIBUTING.md ("Every example is run") says what
//! each info string means.

use std::path::{Path, PathBuf};

/// One fenced block: where it is, its info string's words, and its lines.
#[derive(Debug, Clone)]
pub struct Block {
    pub page: PathBuf,
    /// The line of the opening fence, from 1.
    pub line: usize,
    pub info: Vec<String>,
    pub lines: Vec<String>,
}

impl Block {
    /// The language: the info string's first word, "" when there is none.
    pub fn language(&self) -> &str {
        self.info.first().map(String::as_str).unwrap_or("")
    }

    /// Marked as not run (`norun` among the info string's words).
    pub fn norun(&self) -> bool {
        self.info.iter().any(|word| word == "norun")
    }

    /// Marked as starting on an empty server (`fresh` among the info string's words), not
    /// on what the page's blocks before it left.
    pub fn fresh(&self) -> bool {
        self.info.iter().any(|word| word == "fresh")
    }

    /// The value of an info word `name=value`.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.info
            .iter()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
    }

    /// `page:line`, relative to the checkout, for messages.
    pub fn place(&self) -> String {
        let root = super::workspace_root();
        let page = self.page.strip_prefix(root).unwrap_or(&self.page);
        format!("{}:{}", page.display(), self.line)
    }

    /// The block's text, each line ended by a newline.
    pub fn text(&self) -> String {
        self.lines.iter().map(|line| format!("{line}\n")).collect()
    }
}

/// The README and every page of the book, sorted.
pub fn pages() -> Vec<PathBuf> {
    let root = super::workspace_root();
    let mut pages = vec![root.join("README.md")];
    let mut book = Vec::new();
    markdown_under(&root.join("docs/src"), &mut book);
    book.sort();
    pages.extend(book);
    pages
}

fn markdown_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            markdown_under(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            found.push(path);
        }
    }
}

/// The fenced blocks of one page, in order. A fence is a line starting with three
/// backticks; blocks do not nest.
pub fn blocks(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (index, line) in text.lines().enumerate() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            if let Some(block) = open.as_mut() {
                block.lines.push(line.to_string());
            }
            continue;
        };
        match open.take() {
            Some(block) => blocks.push(block),
            None => {
                open = Some(Block {
                    page: page.to_path_buf(),
                    line: index + 1,
                    info: info.split_whitespace().map(String::from).collect(),
                    lines: Vec::new(),
                })
            }
        }
    }
    assert!(
        open.is_none(),
        "{}: a code block is never closed",
        page.display()
    );
    blocks
}

/// Every block of the README and the book.
pub fn all_blocks() -> Vec<Block> {
    pages().iter().flat_map(|page| blocks(page)).collect()
}
