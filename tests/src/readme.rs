//! The project README's configuration blocks, for the tests that run them as written there.

/// The README's fenced block that begins at the line `marker` (a comment line of the block),
/// up to the fence that closes it.
pub fn block(marker: &str) -> String {
    let readme = include_str!("../../README.md");
    let start = readme
        .find(marker)
        .unwrap_or_else(|| panic!("no README block begins with {marker:?}"));
    let block = &readme[start..];
    let end = block
        .find("```")
        .unwrap_or_else(|| panic!("the README block {marker:?} is not closed"));
    block[..end].to_string()
}
