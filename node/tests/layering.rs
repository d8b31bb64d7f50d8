//! No module of `node/src/` imports a module that imports it back, at two levels:
//!
//! - the top-level modules form layers (store ← broker ← auth ← {plugin, raft} ← cluster ←
//!   {jobs, proxy, admin} ← node ← cli, `a ← b` meaning "a is imported by b");
//! - inside a top-level module, its children (`proxy/lite.rs` is `lite`, everything under
//!   `proxy/receive/` is `receive`) form layers too. Items of the module's own root file
//!   (`proxy/mod.rs`) are the vocabulary its children share, not a child: naming them is no
//!   import, but a name the root re-exports (`pub use clock::now_ms`) counts as its child's.
//!
//! A reference is any path that names another module: `crate::x::..`, `crate::{x, ..}` (over
//! any number of lines), `super::..` and `self::..`, or a child declared with `mod`, in a `use`,
//! in code, or in a macro's arguments. Comments and strings name nothing. Test code (`*_test.rs`,
//! `tests.rs`, items under `#[cfg(test)]`) may see anything inside a module; between top-level
//! modules it counts like the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graphmap::DiGraphMap;
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// One reference: the absolute module path it names (from the crate root, without `crate`) and
/// where it is.
#[derive(Clone, Debug)]
struct Reference {
    path: Vec<String>,
    /// The name a `use` binds (its last segment or its `as`), for following re-exports.
    bound: Option<String>,
    line: usize,
    test_only: bool,
}

/// A source file: its path under `src/` and its text.
struct Source {
    relative: PathBuf,
    code: String,
}

/// Where a reference was made, for the failure message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    file: String,
    line: usize,
    path: String,
}

/// module → module it references → the places that do.
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<Site>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("readable source dir").map(|e| e.expect("dir entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn sources() -> Vec<Source> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|f| Source {
            relative: f.strip_prefix(&src).expect("under src").to_path_buf(),
            code: std::fs::read_to_string(&f).expect("readable source"),
        })
        .collect()
}

/// The module path of a source file: `a/b.rs` → [a, b], `a/mod.rs` and `a.rs` → [a], `lib.rs`
/// and `main.rs` → [].
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return parts;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

fn is_test_file(relative: &Path) -> bool {
    let name = relative.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.ends_with("_test.rs") || name == "tests.rs"
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

fn child_mods(items: &[syn::Item]) -> BTreeSet<String> {
    items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// Collects the references of one file, resolving `super`/`self`/child paths against the module
/// the code is in (inline modules included).
struct Collector {
    /// The module the visitor is in.
    module: Vec<String>,
    /// The children declared with `mod` in each enclosing scope, innermost last.
    children: Vec<BTreeSet<String>>,
    test_depth: usize,
    out: Vec<Reference>,
}

impl Collector {
    /// The absolute path `segments` names from the current module, if it names a module path.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        match first.as_str() {
            "crate" => Some(segments[1..].to_vec()),
            "self" => Some(self.module.iter().chain(&segments[1..]).cloned().collect()),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let kept = self.module.len().checked_sub(ups)?;
                Some(self.module[..kept].iter().chain(&segments[ups..]).cloned().collect())
            }
            name if self.children.last().is_some_and(|c| c.contains(name)) => {
                Some(self.module.iter().chain(segments).cloned().collect())
            }
            _ => None,
        }
    }

    fn record(&mut self, segments: &[String], bound: Option<String>, line: usize) {
        if let Some(path) = self.resolve(segments) {
            self.out.push(Reference { path, bound, line, test_only: self.test_depth > 0 });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                if n.ident == "self" {
                    let bound = prefix.last().cloned();
                    self.record(&prefix.clone(), bound, line);
                } else {
                    prefix.push(n.ident.to_string());
                    self.record(&prefix.clone(), Some(n.ident.to_string()), line);
                    prefix.pop();
                }
            }
            syn::UseTree::Rename(r) => {
                let line = r.ident.span().start().line;
                if r.ident != "self" {
                    prefix.push(r.ident.to_string());
                }
                self.record(&prefix.clone(), Some(r.rename.to_string()), line);
                if r.ident != "self" {
                    prefix.pop();
                }
            }
            syn::UseTree::Glob(g) => {
                self.record(&prefix.clone(), None, g.star_token.span.start().line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// Paths in a macro's arguments (`a::b::c`, not preceded by `::`), which syn leaves as tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let is_colons = |i: usize| {
            matches!((trees.get(i), trees.get(i + 1)),
                (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':')
        };
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(first) if !(i >= 2 && is_colons(i - 2)) => {
                    let line = first.span().start().line;
                    let mut segments = vec![first.to_string()];
                    while is_colons(i + 1) {
                        match trees.get(i + 3) {
                            Some(TokenTree::Ident(next)) => {
                                segments.push(next.to_string());
                                i += 3;
                            }
                            _ => break,
                        }
                    }
                    if segments.len() > 1 {
                        self.record(&segments, None, line);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = is_cfg_test(item_attrs(item));
        self.test_depth += usize::from(test);
        syn::visit::visit_item(self, item);
        self.test_depth -= usize::from(test);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            self.module.push(m.ident.to_string());
            self.children.push(child_mods(items));
            for item in items {
                self.visit_item(item);
            }
            self.children.pop();
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = p.segments.first().map_or(0, |s| s.ident.span().start().line);
            if segments.len() > 1 {
                self.record(&segments, None, line);
            }
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// Every reference the file at `relative` (under `src/`) makes.
fn references(relative: &Path, code: &str) -> Vec<Reference> {
    let file = syn::parse_file(code).unwrap_or_else(|e| panic!("{} does not parse: {e}", relative.display()));
    let mut collector = Collector {
        module: module_path(relative),
        children: vec![child_mods(&file.items)],
        test_depth: usize::from(is_test_file(relative)),
        out: Vec::new(),
    };
    collector.visit_file(&file);
    collector.out
}

/// The import graph between the children of the module `within` ([] for the crate, whose
/// children are the top-level modules).
fn module_graph(sources: &[Source], within: &[String], count_tests: bool) -> Edges {
    let depth = within.len();
    let parsed: Vec<(&Source, Vec<String>, Vec<Reference>)> = sources
        .iter()
        .map(|s| (s, module_path(&s.relative)))
        .filter(|(_, path)| path.starts_with(within))
        .map(|(s, path)| (s, path, references(&s.relative, &s.code)))
        .collect();
    let children: BTreeSet<String> = parsed.iter().filter_map(|(_, path, _)| path.get(depth).cloned()).collect();
    // A name the root file of `within` imports from one of its children stands for that child.
    let mut exported: BTreeMap<String, String> = BTreeMap::new();
    for (_, _, refs) in parsed.iter().filter(|(_, path, _)| path.len() == depth) {
        for r in refs {
            if let Some(bound) = &r.bound
                && r.path.starts_with(within)
                && r.path.len() > depth + 1
                && let Some(child) = r.path.get(depth).filter(|c| children.contains(*c))
            {
                exported.insert(bound.clone(), child.clone());
            }
        }
    }
    let mut edges = Edges::new();
    for (source, path, refs) in &parsed {
        let Some(from) = path.get(depth) else { continue };
        for r in refs.iter().filter(|r| count_tests || !r.test_only) {
            if !r.path.starts_with(within) {
                continue;
            }
            let Some(named) = r.path.get(depth) else { continue };
            let to = if children.contains(named) {
                named
            } else if let Some(child) = exported.get(named) {
                child
            } else {
                continue;
            };
            if to != from {
                edges.entry(from.clone()).or_default().entry(to.clone()).or_default().insert(Site {
                    file: source.relative.display().to_string(),
                    line: r.line,
                    path: r.path.join("::"),
                });
            }
        }
    }
    edges
}

/// Every set of modules that import each other (directly or round a circle), each with the
/// references that make it, so a failure says what to move.
fn circles(edges: &Edges) -> Vec<String> {
    let mut graph = DiGraphMap::<&str, ()>::new();
    for (a, targets) in edges {
        for b in targets.keys() {
            graph.add_edge(a.as_str(), b.as_str(), ());
        }
    }
    let mut out = Vec::new();
    for mut set in tarjan_scc(&graph).into_iter().filter(|s| s.len() > 1) {
        set.sort();
        let mut text = set.join(", ");
        for a in &set {
            for (b, sites) in edges[*a].iter().filter(|(b, _)| set.contains(&b.as_str())) {
                // One place per line, with the names it takes from there.
                let mut places: BTreeMap<(&str, usize), Vec<&str>> = BTreeMap::new();
                for s in sites {
                    let name = s.path.rsplit("::").next().unwrap_or_default();
                    places.entry((&s.file, s.line)).or_default().push(name);
                }
                let places: Vec<String> = places
                    .iter()
                    .map(|((file, line), names)| format!("{file}:{line} ({})", names.join(", ")))
                    .collect();
                text += &format!("\n    {a} → {b}: {}", places.join("; "));
            }
        }
        out.push(text);
    }
    out.sort();
    out
}

fn assert_no_circles_inside(module: &str) {
    let sources = sources();
    let edges = module_graph(&sources, &[module.to_string()], false);
    assert!(!edges.is_empty(), "the source tree of {module}/ was read");
    let found = circles(&edges);
    assert!(found.is_empty(), "modules inside {module}/ that import each other:\n  {}", found.join("\n  "));
}

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let edges = module_graph(&sources(), &[], true);
    assert!(edges.contains_key("proxy") && edges.contains_key("node"), "the source tree was read: {edges:?}");
    let found = circles(&edges);
    assert!(found.is_empty(), "modules that import each other:\n  {}", found.join("\n  "));
}

#[test]
fn no_circles_inside_proxy() {
    assert_no_circles_inside("proxy");
}

#[test]
fn no_circles_inside_cluster() {
    assert_no_circles_inside("cluster");
}

#[test]
fn no_circles_inside_raft() {
    assert_no_circles_inside("raft");
}

/// The rest were free of circles when these checks came in; a new top-level module is checked too.
#[test]
fn no_circles_inside_any_other_module() {
    let own_tests = ["broker", "cluster", "proxy", "raft"];
    let mut modules: Vec<String> = std::fs::read_dir(src_dir())
        .expect("readable source dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().expect("a name").to_string_lossy().into_owned())
        .filter(|m| !own_tests.contains(&m.as_str()))
        .collect();
    modules.sort();
    assert!(modules.len() >= 8, "the source tree was read: {modules:?}");
    let sources = sources();
    let found: Vec<String> = modules
        .iter()
        .flat_map(|m| {
            circles(&module_graph(&sources, std::slice::from_ref(m), false))
                .into_iter()
                .map(move |c| format!("{m}/: {c}"))
        })
        .collect();
    assert!(found.is_empty(), "modules that import each other:\n  {}", found.join("\n  "));
}

#[test]
fn no_circles_inside_broker() {
    assert_no_circles_inside("broker");
}

#[test]
fn references_are_found_in_every_form() {
    let code = "use crate::broker::X;\nuse crate::{\n    cluster::Y,\n    node,\n};\nuse super::super::admin::Z;\n\
                use super::status::ok; // crate::jobs in a comment\n\
                fn f() { let a = my_crate::store::x; let b = \"crate::cli\"; \
                tracing::info!(\"{}\", crate::http::x()); }\n\
                #[cfg(test)]\nmod tests {\n    use super::super::receive::Q;\n}\n";
    let refs = references(Path::new("proxy/ack.rs"), code);
    let named: Vec<(String, usize, bool)> = refs.iter().map(|r| (r.path.join("::"), r.line, r.test_only)).collect();
    assert_eq!(
        named,
        [
            ("broker::X".to_string(), 1, false),
            ("cluster::Y".to_string(), 3, false),
            ("node".to_string(), 4, false),
            ("admin::Z".to_string(), 6, false),
            ("proxy::status::ok".to_string(), 7, false),
            ("http::x".to_string(), 8, false),
            // In `mod tests`, `super` is `ack`.
            ("proxy::receive::Q".to_string(), 11, true),
        ]
    );
}

fn source(relative: &str, code: &str) -> Source {
    Source { relative: PathBuf::from(relative), code: code.to_string() }
}

#[test]
fn the_checker_finds_a_circle_and_accepts_layers() {
    let within = ["m".to_string()];
    let circle = [
        source("m/mod.rs", "mod a;\nmod b;\nmod c;\npub use c::Shared;\npub struct Root;\n"),
        source("m/a.rs", "use crate::m::{\n    Root,\n    b::B,\n};\npub struct A;\n"),
        source("m/b/mod.rs", "mod inner;\npub struct B;\n"),
        source("m/b/inner.rs", "fn f() -> super::super::Shared { todo!() }\n"),
        source("m/c.rs", "pub struct Shared(pub super::a::A);\n"),
    ];
    let found = circles(&module_graph(&circle, &within, false));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("a, b, c\n"), "{}", found[0]);
    assert!(found[0].contains("a → b: m/a.rs:3 (B)"), "{}", found[0]);
    assert!(found[0].contains("b → c: m/b/inner.rs:1 (Shared)"), "{}", found[0]);
    assert!(found[0].contains("c → a: m/c.rs:1 (A)"), "{}", found[0]);

    let layered = [
        source("m/mod.rs", "mod a;\nmod b;\nmod c;\nuse self::a::A;\npub struct Root(c::C);\n"),
        source("m/a.rs", "use super::{Root, b::B};\npub struct A(B, Root);\n"),
        source("m/b.rs", "pub struct B(crate::m::c::C);\n#[cfg(test)]\nmod tests {\n    use super::super::a::A;\n}\n"),
        source("m/c.rs", "pub struct C;\n"),
        source("m/c_test.rs", "use crate::m::a::A;\n"),
    ];
    let edges = module_graph(&layered, &within, false);
    assert_eq!(edges.keys().collect::<Vec<_>>(), ["a", "b"], "{edges:?}");
    assert!(circles(&edges).is_empty(), "{:?}", circles(&edges));
}

/// openraft is alpha software: its types stay behind `raft/` (the `Group` handle), so an API
/// change of openraft's lands there only.
#[test]
fn openraft_is_named_only_in_raft() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let outside: Vec<String> = files
        .iter()
        .filter(|f| !f.strip_prefix(&src).expect("under src").starts_with("raft"))
        .filter(|f| {
            let code = std::fs::read_to_string(f).expect("readable source");
            code.lines().map(|l| l.split("//").next().unwrap_or_default()).any(|l| l.contains("openraft"))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(files.len() > 50, "the source tree was read");
    assert!(outside.is_empty(), "files outside raft/ that name openraft: {outside:?}");
}

/// The broker is the pure state machine: it knows nothing of Raft, the cluster, or the services
/// that serve it.
#[test]
fn the_broker_imports_no_layer_above_it() {
    let edges = module_graph(&sources(), &[], true);
    let above = ["raft", "cluster", "proxy", "admin", "jobs", "http", "node", "cli", "sessions"];
    let wrong: Vec<String> = edges
        .get("broker")
        .map(|targets| {
            targets
                .iter()
                .filter(|(m, _)| above.contains(&m.as_str()))
                .map(|(m, sites)| format!("{m}: {sites:?}"))
                .collect()
        })
        .unwrap_or_default();
    assert!(edges.contains_key("broker"), "the source tree was read");
    assert!(wrong.is_empty(), "the broker imports layers above it:\n  {}", wrong.join("\n  "));
}
