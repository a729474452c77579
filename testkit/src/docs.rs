//! The documents some tests follow word for word (the README's examples): a section is
//! found by its heading, so that a test keeps reading the words a reader reads, wherever
//! the section moves in the file.

use crate::workspace_root;

/// The body of the section headed exactly `heading` (e.g. `"## Named policies"`) in the
/// markdown file at `relative_path` from the checkout's root: from the line after the
/// heading up to the next heading of the same or a higher level. Lines inside fenced code
/// blocks are never headings (a shell comment there starts with `#` too). Panics, naming
/// the file, when there is no such section.
pub fn doc_section(relative_path: &str, heading: &str) -> String {
    let path = workspace_root().join(relative_path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    section(&text, heading)
        .unwrap_or_else(|| panic!("{relative_path} has no section `{heading}`"))
        .to_string()
}

/// The body of the section headed `heading` in the markdown `text`, as [`doc_section`].
fn section<'t>(text: &'t str, heading: &str) -> Option<&'t str> {
    let level = heading_level(heading)
        .unwrap_or_else(|| panic!("{heading:?} is not a markdown heading (`## Title`)"));
    let mut start = None;
    let mut in_fence = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            match start {
                None if bare == heading => start = Some(offset + line.len()),
                Some(body) if heading_level(bare).is_some_and(|l| l <= level) => {
                    // The newline before the next heading ends the body, as it ends a line.
                    return Some(&text[body..offset.max(body + 1) - 1]);
                }
                _ => {}
            }
        }
        offset += line.len();
    }
    start.map(|body| &text[body..])
}

/// The level of a markdown heading line (`## x` is 2), `None` for any other line.
fn heading_level(line: &str) -> Option<usize> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    (hashes > 0 && line[hashes..].starts_with(' ')).then_some(hashes)
}

#[cfg(test)]
mod tests {
    use super::section;

    const DOC: &str = "# Title\nintro\n## One\nfirst\n```sh\n# a comment, not a heading\n```\n### Sub\nstill one\n## Two\nsecond\n";

    #[test]
    fn a_section_ends_at_the_next_heading_of_its_level_or_higher() {
        assert_eq!(
            section(DOC, "## One"),
            Some("first\n```sh\n# a comment, not a heading\n```\n### Sub\nstill one")
        );
        assert_eq!(section(DOC, "## Two"), Some("second\n"));
        assert_eq!(section(DOC, "### Sub"), Some("still one"));
        assert_eq!(section(DOC, "## Three"), None);
    }
}
