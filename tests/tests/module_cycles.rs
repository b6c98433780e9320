//! No module of a crate imports, through others, a module that imports it back: a reader can
//! take a crate's modules in an order where each uses only those before it. Modules are the
//! top-level files and folders of each crate's `src/`; an import is any `crate::m` path in
//! code that is not a test (`#[cfg(test)]` items, `tests.rs` files and `tests` folders are
//! left out), parsed with
//! `syn`, so paths in comments and doc links do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Circles known today, each named by its modules in order; the test fails while an entry
/// here no longer matches what the crate holds.
const KNOWN: &[(&str, &[&str])] = &[];

/// Every crate of the workspace with a `src/` folder, by its folder relative to the root.
fn crates(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for group in ["mixer", "adapters", "adapters/examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(group)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.path().join("src").is_dir() {
                found.push(PathBuf::from(group).join(e.file_name()));
            }
        }
    }
    found.sort();
    found
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Collects the first segment after `crate::` of every path outside test items.
struct Imports<'m> {
    modules: &'m BTreeSet<String>,
    found: BTreeSet<String>,
}

impl Imports<'_> {
    fn note(&mut self, first: &syn::Ident, second: Option<&syn::Ident>) {
        if first == "crate"
            && let Some(m) = second.map(ToString::to_string)
            && self.modules.contains(&m)
        {
            self.found.insert(m);
        }
    }

    fn use_tree(&mut self, tree: &syn::UseTree, head: Option<&syn::Ident>) {
        match tree {
            syn::UseTree::Path(p) => match head {
                None => self.use_tree(&p.tree, Some(&p.ident)),
                Some(h) => self.note(h, Some(&p.ident)),
            },
            syn::UseTree::Name(n) => {
                if let Some(h) = head {
                    self.note(h, Some(&n.ident));
                }
            }
            syn::UseTree::Rename(r) => {
                if let Some(h) = head {
                    self.note(h, Some(&r.ident));
                }
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, head);
                }
            }
            syn::UseTree::Glob(_) => {}
        }
    }
}

impl<'ast> Visit<'ast> for Imports<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, None);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter();
        if let Some(first) = segments.next() {
            self.note(&first.ident, segments.next().map(|s| &s.ident));
        }
        syn::visit::visit_path(self, path);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|x| x == "rs")
            && path.file_stem().is_some_and(|n| n != "tests")
        {
            out.push(path);
        }
    }
}

/// The crate's top-level modules and, for each, the others it imports.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (name != "lib" && name != "main").then(|| name.to_owned())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top(f)).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let Some(module) = top(file) else { continue };
        if module == "tests" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source");
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let mut imports = Imports {
            modules: &modules,
            found: BTreeSet::new(),
        };
        imports.visit_file(&parsed);
        imports.found.remove(&module);
        edges
            .entry(module)
            .or_insert_with(BTreeSet::new)
            .extend(imports.found);
    }
    edges
}

/// The strongly connected parts of more than one module (Tarjan's algorithm), each sorted.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        edges: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let next: Vec<&'g str> = s
            .edges
            .get(v)
            .map(|e| e.iter().map(String::as_str).collect())
            .unwrap_or_default();
        for w in next {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut part = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                part.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if part.len() > 1 {
                part.sort();
                s.out.push(part);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

#[test]
fn no_module_imports_itself_through_others() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let crates = crates(&root);
    assert!(crates.len() > 10, "found only {crates:?}");
    let mut unexpected = Vec::new();
    let mut stale = Vec::new();
    for krate in &crates {
        let name = krate.to_str().expect("utf-8 path");
        let found = circles(&graph(&root.join(krate).join("src")));
        let known: Vec<Vec<String>> = KNOWN
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, m)| m.iter().map(|s| (*s).to_owned()).collect())
            .collect();
        for c in &found {
            if !known.contains(c) {
                unexpected.push(format!("{name}: {}", c.join(" <-> ")));
            }
        }
        for k in &known {
            if !found.contains(k) {
                stale.push(format!("{name}: {}", k.join(" <-> ")));
            }
        }
    }
    assert!(
        unexpected.is_empty(),
        "modules that import each other in a circle: {unexpected:?}"
    );
    assert!(
        stale.is_empty(),
        "circles listed in KNOWN that are gone (remove them): {stale:?}"
    );
}

#[test]
fn a_circle_is_found() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(circles(&edges), vec![vec!["a", "b", "c"]]);
}
