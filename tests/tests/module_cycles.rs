//! No module of a crate imports, through others, a sibling module that imports it back: a
//! reader can take the children of any module in an order where each uses only those before
//! it. Modules are found as the compiler finds them, from `lib.rs` or `main.rs` along `mod`
//! items, inline ones included, so `kinds/rule.rs` is module `kinds::rule`. An import is any
//! `crate::`, `self::` or `super::` path in code that is not a test (`#[cfg(test)]` items and
//! modules named `tests` are left out), parsed with `syn`, so paths in comments and doc links
//! do not count.
//!
//! An import made anywhere inside child `a` of a module, of anything inside its child `b`,
//! makes `a` import `b`. A module using its parent's own items, or the parent using its
//! children's, is no circle: the parent is where the children's shared pieces live. Names are
//! taken as written, so an import through a re-export (`crate::Name` that `lib.rs` takes from
//! a module) counts as one of the parent.

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

/// The files a crate's `src/` folder compiles from: the library, the main binary and any
/// `src/bin` programs, each with modules of its own.
fn roots(src: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|f| f.is_file())
        .collect();
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "rs") {
                found.push(path);
            } else if path.join("main.rs").is_file() {
                found.push(path.join("main.rs"));
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

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// A module's path from its crate's root: `["kinds", "rule"]`; empty for the root.
type ModPath = Vec<String>;

fn display(path: &[String]) -> String {
    path.join("::")
}

/// A crate's modules, and every path outside test code as the module it is written in and
/// the path made absolute (still ending in the item's name).
#[derive(Default)]
struct Crate {
    modules: BTreeSet<ModPath>,
    references: Vec<(ModPath, Vec<String>)>,
}

/// Reads one module's items: declares its child modules (reading their files) and notes its
/// `crate::`, `self::` and `super::` paths.
struct Walker<'c> {
    read: &'c dyn Fn(&Path) -> Option<String>,
    krate: &'c mut Crate,
    module: ModPath,
    /// Where the files of this module's children are: the root's or a `mod.rs`'s own folder,
    /// else the folder named after the module (`kinds/` for `kinds.rs`, or for an inline
    /// `mod kinds { .. }`).
    dir: PathBuf,
}

impl Walker<'_> {
    fn walk_file(&mut self, file: &Path) {
        let text = (self.read)(file).unwrap_or_else(|| panic!("cannot read {}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        if is_test(&parsed.attrs) {
            return;
        }
        self.krate.modules.insert(self.module.clone());
        self.visit_file(&parsed);
    }

    fn child(&mut self, m: &syn::ItemMod) {
        let name = m.ident.to_string();
        let mut child = Walker {
            read: self.read,
            krate: &mut *self.krate,
            module: [self.module.clone(), vec![name.clone()]].concat(),
            dir: self.dir.join(&name),
        };
        match &m.content {
            Some((_, items)) => {
                child.krate.modules.insert(child.module.clone());
                for item in items {
                    child.visit_item(item);
                }
            }
            None => {
                let flat = self.dir.join(format!("{name}.rs"));
                let nested = self.dir.join(&name).join("mod.rs");
                let file = [flat, nested]
                    .into_iter()
                    .find(|f| (self.read)(f).is_some())
                    .unwrap_or_else(|| {
                        panic!(
                            "no file for module {} in {} (#[path] is not followed)",
                            display(&child.module),
                            self.dir.display()
                        )
                    });
                child.walk_file(&file);
            }
        }
    }

    /// Notes `segments` if they start from this crate: relative to the crate's root or to this
    /// module. Other paths name local items, dependencies or names brought in by a `use`,
    /// whose own path is noted where it is written.
    fn note(&mut self, segments: &[String]) {
        let Some((first, mut rest)) = segments.split_first() else {
            return;
        };
        let mut absolute = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.module.clone(),
            "super" => {
                let mut parent = self.module.clone();
                if parent.pop().is_none() {
                    return;
                }
                parent
            }
            _ => return,
        };
        while let Some((next, tail)) = rest.split_first()
            && next == "super"
        {
            if absolute.pop().is_none() {
                return;
            }
            rest = tail;
        }
        absolute.extend(rest.iter().cloned());
        self.krate.references.push((self.module.clone(), absolute));
    }

    /// Every path a `use` tree names, `self` in a group standing for the path before it.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(syn::UseName { ident, .. })
            | syn::UseTree::Rename(syn::UseRename { ident, .. }) => {
                let mut path = prefix.clone();
                if ident != "self" || path.is_empty() {
                    path.push(ident.to_string());
                }
                self.note(&path);
            }
            syn::UseTree::Glob(_) => self.note(prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Mod(m) if m.ident == "tests" => {}
            syn::Item::Mod(m) => self.child(m),
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !is_test(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, &mut Vec::new());
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.note(&segments);
        syn::visit::visit_path(self, path);
    }

    // `pub(super)` and `pub(in crate::x)` say who may look, not what is used.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

/// The crate compiled from `root`, its files read with `read`.
fn read_crate(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
    let mut krate = Crate::default();
    let dir = root
        .parent()
        .expect("a root file in a folder")
        .to_path_buf();
    Walker {
        read,
        krate: &mut krate,
        module: Vec::new(),
        dir,
    }
    .walk_file(root);
    krate
}

/// For each module with children, which child imports which (by full name).
fn sibling_edges(krate: &Crate) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let mut edges: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, to) in &krate.references {
        // The module the path leads into; the root when nothing longer is a module.
        let target = (0..=to.len())
            .rev()
            .map(|n| &to[..n])
            .find(|p| krate.modules.contains(*p))
            .expect("the root is a module");
        let common = from.iter().zip(target).take_while(|(a, b)| a == b).count();
        if from.len() > common && target.len() > common {
            edges
                .entry(from[..common].to_vec())
                .or_default()
                .entry(display(&from[..=common]))
                .or_default()
                .insert(display(&target[..=common]));
        }
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

/// Every circle among the children of any one module of `krate`.
fn crate_circles(krate: &Crate) -> Vec<Vec<String>> {
    let mut found: Vec<Vec<String>> = sibling_edges(krate).values().flat_map(circles).collect();
    found.sort();
    found
}

fn read_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
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
        let src = root.join(krate).join("src");
        let mut found = BTreeSet::new();
        for file in roots(&src) {
            let read = read_crate(&file, &read_disk);
            if name == "mixer/config" && file.ends_with("lib.rs") {
                // Guards the walk itself: it must reach files in subfolders.
                let rule: ModPath = vec!["kinds".into(), "rule".into()];
                assert!(read.modules.contains(&rule), "kinds::rule not found");
            }
            found.extend(crate_circles(&read));
        }
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

/// The circles of a crate made of `files` (paths relative to `src/`), rooted at `lib.rs`.
fn circles_of(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, text)| (Path::new("src").join(p), (*text).to_owned()))
        .collect();
    let read = |p: &Path| files.get(p).cloned();
    crate_circles(&read_crate(Path::new("src/lib.rs"), &read))
}

#[test]
fn circles_between_submodules_are_found() {
    let found = circles_of(&[
        ("lib.rs", "mod kinds;\nmod validate;\n"),
        ("kinds/mod.rs", "mod headers;\npub(crate) mod rule;\n"),
        // `super::` in a file of a subfolder.
        ("kinds/headers.rs", "use super::rule::{Scope, list};\n"),
        (
            "kinds/rule.rs",
            "pub struct Scope;\npub fn list() {}\nfn f() { super::headers::ops(); }\n",
        ),
        // Inline modules, `self::` and `super::super::`, in a file without a folder.
        (
            "validate.rs",
            "mod a { pub fn f() { super::b::g() } }\n\
             mod b {\n  pub fn g() { self::inner::h() }\n  \
             mod inner { pub fn h() { super::super::a::f() } }\n}\n",
        ),
    ]);
    assert_eq!(
        found,
        vec![
            vec!["kinds::headers", "kinds::rule"],
            vec!["validate::a", "validate::b"],
        ]
    );
}

#[test]
fn a_parent_a_shared_module_and_tests_make_no_circle() {
    let found = circles_of(&[
        ("lib.rs", "mod document;\nmod kinds;\n"),
        ("document.rs", "pub fn list() {}\n"),
        (
            "kinds/mod.rs",
            "mod headers;\nmod rule;\npub struct Doc;\nuse self::rule::rule;\n\
             #[cfg(test)]\nmod test_support { use super::headers::ops; }\n",
        ),
        // Only test code imports `rule` back; a module named `tests` is never read.
        (
            "kinds/headers.rs",
            "use super::Doc;\nuse crate::document::list;\npub fn ops() {}\n\
             #[cfg(test)]\nfn only_in_tests() { crate::kinds::rule::rule() }\nmod tests;\n",
        ),
        (
            "kinds/rule.rs",
            "use super::{Doc, headers};\nuse crate::document::list;\n\
             pub fn rule() { headers::ops() }\n",
        ),
    ]);
    assert_eq!(found, Vec::<Vec<String>>::new());
}
