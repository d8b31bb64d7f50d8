//! No module of `node/src/` imports a module that imports it back: the top-level modules form
//! layers (store ← broker ← auth ← {plugin, raft} ← cluster ← {jobs, proxy, admin} ← node ← cli, `a ← b` meaning
//! "a is imported by b"). A reference is any path to another top-level module from a file of
//! this one: `crate::x`, `crate::{x, ..}`, or `super::` climbing out of the module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

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

/// The module path of a source file: `a/b.rs` → [a, b], `a/mod.rs` and `a.rs` → [a].
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` names, seen from the module at `path`.
fn references(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines() {
        // Comments may name any module; only code counts.
        let line = line.split("//").next().unwrap_or_default();
        let mut rest = line;
        while let Some(at) = rest.find(['c', 's']) {
            let tail = &rest[at..];
            let preceded_by_ident = rest[..at].chars().next_back().is_some_and(is_ident);
            rest = &rest[at + 1..];
            if preceded_by_ident {
                continue;
            }
            let (depth, after) = if let Some(after) = tail.strip_prefix("crate::") {
                (path.len(), after)
            } else if tail.starts_with("super::") {
                let mut after = tail;
                let mut ups = 0;
                while let Some(a) = after.strip_prefix("super::") {
                    after = a;
                    ups += 1;
                }
                (ups, after)
            } else {
                continue;
            };
            // `super::` that stays inside the module names nothing outside it.
            if depth < path.len() {
                continue;
            }
            if let Some(group) = after.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    let name = ident_at(item.trim());
                    if !name.is_empty() {
                        found.insert(name.to_string());
                    }
                }
            } else {
                let name = ident_at(after);
                if !name.is_empty() {
                    found.insert(name.to_string());
                }
            }
        }
    }
    found
}

/// top-level module → module it references → the files that do.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph::new();
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_path(f.strip_prefix(src).expect("under src")).into_iter().next())
        .filter(|t| t != "lib" && t != "main")
        .collect();
    for file in &files {
        let relative = file.strip_prefix(src).expect("under src");
        let path = module_path(relative);
        let top = &path[0];
        if top == "lib" || top == "main" {
            continue;
        }
        let code = std::fs::read_to_string(file).expect("readable source");
        for other in references(&code, &path) {
            if &other != top && tops.contains(&other) {
                let files = graph.entry(top.clone()).or_default().entry(other).or_default();
                files.insert(relative.display().to_string());
            }
        }
    }
    graph
}

/// Every cycle's modules in order, one per strongly connected set of modules.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let edges = |a: &str| -> Vec<String> { graph.get(a).map(|m| m.keys().cloned().collect()).unwrap_or_default() };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for start in graph.keys() {
        // A path from `start` back to itself, by depth-first search.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut visited = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges(&at) {
                if &next == start {
                    let key: BTreeSet<String> = path.iter().cloned().collect();
                    if seen.insert(key) {
                        out.push(path.clone());
                    }
                } else if visited.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next, longer));
                }
            }
        }
    }
    out
}

fn describe(graph: &Graph, cycle: &[String]) -> String {
    let mut text = cycle.join(" → ") + " → " + &cycle[0];
    for (i, a) in cycle.iter().enumerate() {
        let b = &cycle[(i + 1) % cycle.len()];
        let files = graph[a][b].iter().cloned().collect::<Vec<_>>().join(", ");
        text += &format!("\n    {a} → {b}: {files}");
    }
    text
}

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(graph.contains_key("proxy") && graph.contains_key("node"), "the source tree was read: {graph:?}");
    let mut problems = Vec::new();
    for (a, targets) in &graph {
        for b in targets.keys() {
            if a < b && graph.get(b).is_some_and(|m| m.contains_key(a)) {
                problems.push(describe(&graph, &[a.clone(), b.clone()]));
            }
        }
    }
    for cycle in cycles(&graph).into_iter().filter(|c| c.len() > 2) {
        problems.push(describe(&graph, &cycle));
    }
    assert!(problems.is_empty(), "modules that import each other:\n  {}", problems.join("\n  "));
}

#[test]
fn references_are_found_in_every_form() {
    let path = vec!["proxy".to_string(), "ack".to_string()];
    let code = "use crate::broker::X;\nuse crate::{cluster::Y, node};\nuse super::super::admin::Z;\n\
                use super::status::ok; // crate::jobs in a comment\nlet a = my_crate::store::x;";
    let found: Vec<String> = references(code, &path).into_iter().collect();
    assert_eq!(found, ["admin", "broker", "cluster", "node"]);
    let mut graph = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("raft", "broker"), ("broker", "raft")] {
        graph.entry(a.into()).or_default().entry(b.into()).or_default().insert(format!("{a}.rs"));
    }
    let found = cycles(&graph);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2]);
}

/// openraft is alpha software: its types stay behind `raft/` (the `Group` handle), so an API
/// change of openraft's lands there only.
#[test]
fn openraft_is_named_only_in_raft() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    let above = ["raft", "cluster", "proxy", "admin", "jobs", "http", "node", "cli", "sessions"];
    let wrong: Vec<String> = graph
        .get("broker")
        .map(|targets| {
            targets
                .iter()
                .filter(|(m, _)| above.contains(&m.as_str()))
                .map(|(m, files)| format!("{m}: {files:?}"))
                .collect()
        })
        .unwrap_or_default();
    assert!(graph.contains_key("broker"), "the source tree was read");
    assert!(wrong.is_empty(), "the broker imports layers above it:\n  {}", wrong.join("\n  "));
}
