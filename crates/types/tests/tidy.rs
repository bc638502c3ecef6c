//! The repository's tidy check: rules about the code and docs as text that
//! the compiler and clippy do not enforce. It lives in `latsdb-types`, the
//! crate with the fewest dependencies, so the quick test tier runs it
//! without building the servers.
//!
//! - No function is longer than `FUNCTION_LINES_MAX` lines and no Rust file
//!   longer than `FILE_LINES_MAX`, unless it is on the allow-list below. The
//!   list only shrinks: an entry that is no longer needed fails the check
//!   too, so it is removed when its function or file is split.
//! - `ClusterLayout` is built by its builder: no struct literal outside
//!   `types/src/proto/layout.rs`.
//! - docs/architecture/wire.md lists every message enum of the protocols with its
//!   variants in the order (so with the numbers) the code declares them.
//! - A document a source file or doc names (`something.md`) exists in the
//!   repository: the repository is read without anything beside it.
//! - No package registry's host name is written anywhere: dependencies come
//!   by package name through the ordinary clients (cargo, apt-get, pip,
//!   Maven coordinates, go), which may be configured to use mirrors.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const FUNCTION_LINES_MAX: usize = 150;
const FILE_LINES_MAX: usize = 1500;

/// Functions over `FUNCTION_LINES_MAX` lines, as "path::name". Shrinking.
const LONG_FUNCTIONS_ALLOWED: &[&str] = &[
    "crates/sql/src/bind.rs::bind",
    "crates/sql/src/bind.rs::function",
    "crates/sql/src/catalog.rs::information_schema",
    "crates/sql/src/catalog.rs::run",
    "crates/sql/src/dml.rs::run_insert",
    "crates/sql/src/plan.rs::plan_query",
];

/// The allow-lists' combined length may only go down.
const ALLOWED_ENTRIES_MAX: usize = 9;

/// Rust files over `FILE_LINES_MAX` lines. Shrinking.
const LONG_FILES_ALLOWED: &[&str] = &["crates/sql/src/bind.rs", "crates/sql/src/catalog.rs", "crates/sql/src/eval.rs"];

/// Host names of package registries. Cargo.lock files are exempt (the workspace's and fuzz/'s): cargo writes
/// its registry's identifier into it, and it is not edited by hand.
const REGISTRY_HOSTS: &[&str] = &[
    "repo1.maven.org",
    "repo.maven.apache.org",
    "central.sonatype",
    "crates.io",
    "pypi.org",
    "pythonhosted.org",
    "proxy.golang.org",
    "sum.golang.org",
    "registry.npmjs.org",
    "deb.debian.org",
    "security.debian.org",
    "archive.ubuntu.com",
];

fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(root.join("Cargo.lock").is_file(), "the repository root is not at {}", root.display());
    root.canonicalize().expect("the repository root exists")
}

/// Every file of the repository, as (path relative to the root, text),
/// without build output, version control and binary files.
fn repo_files(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir).expect("readable directory").map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') && name != ".ci" || name == "target" {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(text) = fs::read_to_string(&path) {
                let relative = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                files.push((relative, text));
            }
        }
    }
    assert!(files.iter().any(|(p, _)| p == "README.md"), "the walk found no README.md under {}", root.display());
    files
}

/// Removes string and char literals and comments from a line of Rust, so
/// that braces inside them are not counted. A `'` that opens no char
/// literal (a lifetime) is kept. Raw strings spanning lines are not
/// handled; `in_string` carries an ordinary string across lines.
fn code_of(line: &str, in_string: &mut bool) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut code = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if *in_string {
            match c {
                '\\' => i += 1,
                '"' => *in_string = false,
                _ => {}
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            break;
        } else if c == '"' {
            *in_string = true;
        } else if c == '\'' {
            // A char literal: 'x', '\n', '\u{..}'; otherwise a lifetime.
            let close = if chars.get(i + 1) == Some(&'\\') {
                chars[i + 2..].iter().position(|&c| c == '\'').map(|p| i + 2 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => i = end,
                None => code.push(c),
            }
        } else {
            code.push(c);
        }
        i += 1;
    }
    code
}

/// The name of the function a line of code starts, if it starts one.
fn function_name(code: &str) -> Option<String> {
    let mut words = code.split_whitespace().peekable();
    while let Some(word) = words.next() {
        if word == "fn" {
            let name: String = words.next()?.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            return (!name.is_empty()).then_some(name);
        }
        let qualifier = matches!(word, "pub" | "async" | "const" | "unsafe" | "extern" | "default")
            || word.starts_with("pub(")
            || word.starts_with('"');
        if !qualifier {
            return None;
        }
    }
    None
}

/// Functions with a body, as (name, lines from the `fn` line to the
/// closing brace).
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    // Functions being measured: (name, first line, brace depth outside it).
    let mut open: Vec<(String, usize, i64)> = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let (mut depth, mut in_string) = (0i64, false);
    for (number, line) in text.lines().enumerate() {
        let code = code_of(line, &mut in_string);
        if let Some(name) = function_name(&code) {
            pending = Some((name, number));
        }
        for c in code.chars() {
            match c {
                '{' => {
                    if let Some((name, first)) = pending.take() {
                        open.push((name, first, depth));
                    }
                    depth += 1;
                }
                '}' => {
                    depth -= 1;
                    if open.last().is_some_and(|(_, _, outside)| *outside == depth) {
                        let (name, first, _) = open.pop().unwrap();
                        found.push((name, number - first + 1));
                    }
                }
                // A declaration without a body (a trait's, an extern's).
                ';' if pending.is_some() && !code.contains('{') => pending = None,
                _ => {}
            }
        }
    }
    found
}

#[test]
fn function_lengths_are_measured_from_fn_to_closing_brace() {
    let text = "fn a() {\n    let s = \"{\";\n    let c = '}';\n}\n\
                impl X {\n    pub(crate) fn b<'a>(x: &'a u8) -> u8 {\n        if true { 1 } else { 2 }\n    }\n}\n\
                trait T {\n    fn c(&self);\n    fn d(&self) {\n    }\n}\n";
    assert_eq!(function_lengths(text), vec![("a".to_string(), 4), ("b".to_string(), 3), ("d".to_string(), 2)]);
}

#[test]
fn functions_and_files_stay_short() {
    let root = repo_root();
    let mut long_functions = BTreeSet::new();
    let mut long_files = BTreeSet::new();
    for (path, text) in repo_files(&root).iter().filter(|(p, _)| p.ends_with(".rs")) {
        if text.lines().count() > FILE_LINES_MAX {
            long_files.insert(path.clone());
        }
        for (name, lines) in function_lengths(text) {
            if lines > FUNCTION_LINES_MAX {
                long_functions.insert(format!("{path}::{name}"));
            }
        }
    }
    let allowed_functions: BTreeSet<String> = LONG_FUNCTIONS_ALLOWED.iter().map(|s| s.to_string()).collect();
    let allowed_files: BTreeSet<String> = LONG_FILES_ALLOWED.iter().map(|s| s.to_string()).collect();
    let new_functions: Vec<_> = long_functions.difference(&allowed_functions).collect();
    let new_files: Vec<_> = long_files.difference(&allowed_files).collect();
    assert!(
        new_functions.is_empty() && new_files.is_empty(),
        "functions over {FUNCTION_LINES_MAX} lines: {new_functions:?}; Rust files over {FILE_LINES_MAX} lines: \
         {new_files:?}. Split them (the allow-list in this file only shrinks)"
    );
    let stale: Vec<_> =
        allowed_functions.difference(&long_functions).chain(allowed_files.difference(&long_files)).collect();
    assert!(stale.is_empty(), "no longer too long, remove from the allow-list in tidy.rs: {stale:?}");
    assert!(
        allowed_functions.len() + allowed_files.len() <= ALLOWED_ENTRIES_MAX,
        "the allow-list of tidy.rs has grown beyond {ALLOWED_ENTRIES_MAX} entries"
    );
}

/// Where a text writes a `ClusterLayout` struct literal: the name followed
/// by a brace, not as a function's return type or the type's own
/// declaration.
fn layout_literals(text: &str) -> Vec<usize> {
    let pattern = "ClusterLayout {";
    text.match_indices(pattern)
        .filter(|(at, _)| {
            let before = text[..*at].trim_end();
            !(before.ends_with("->")
                || before.ends_with("struct")
                || before.ends_with("impl")
                || before.ends_with("for"))
        })
        .map(|(at, _)| text[..at].lines().count())
        .collect()
}

#[test]
fn cluster_layout_is_built_by_its_builder() {
    assert_eq!(layout_literals("fn f() -> ClusterLayout {\n    ClusterLayout { version: 1 }\n}"), vec![2]);
    let root = repo_root();
    let mut found = Vec::new();
    for (path, text) in repo_files(&root) {
        if !path.ends_with(".rs") || path.ends_with("types/src/proto/layout.rs") || path.ends_with("tidy.rs") {
            continue;
        }
        found.extend(layout_literals(&text).into_iter().map(|line| format!("{path}:{line}")));
    }
    assert!(
        found.is_empty(),
        "ClusterLayout struct literals outside its builder (use ClusterLayout::builder): {found:?}"
    );
}

/// The variants of every `pub enum` a Rust source declares, in order, by
/// enum name. A variant is a line indented once inside the enum that
/// starts with a capital letter.
fn enum_variants(source: &str) -> Vec<(String, Vec<String>)> {
    let mut enums = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("pub enum ") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let mut variants = Vec::new();
        let mut depth = 0i64;
        for line in lines.by_ref() {
            if line == "}" {
                break;
            }
            let first = line.strip_prefix("    ").filter(|l| !l.starts_with(' '));
            if let Some(first) = first.filter(|_| depth == 0) {
                if first.starts_with(|c: char| c.is_ascii_uppercase()) {
                    variants.push(first.chars().take_while(|c| c.is_alphanumeric()).collect());
                }
            }
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
        }
        enums.push((name, variants));
    }
    enums
}

/// The enums docs/architecture/wire.md tabulates: for each "### `Name`" heading, the
/// variant column of its table's rows, in order, with their numbers.
fn documented_variants(doc: &str) -> Vec<(String, Vec<(usize, String)>)> {
    let mut enums: Vec<(String, Vec<(usize, String)>)> = Vec::new();
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("### `") {
            enums.push((rest.split('`').next().unwrap_or("").to_string(), Vec::new()));
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let (Some((_, rows)), [_, number, variant, ..]) = (enums.last_mut(), cells.as_slice()) {
            if let Ok(n) = number.parse::<usize>() {
                rows.push((n, variant.to_string()));
            }
        }
    }
    enums
}

#[test]
fn wire_doc_lists_every_message_variant_in_order() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join("docs/architecture/wire.md")).expect("docs/architecture/wire.md exists");
    let documented = documented_variants(&doc);
    let mut checked = 0;
    for module in ["client", "peer", "membership", "management", "layout"] {
        let source =
            fs::read_to_string(root.join(format!("crates/types/src/proto/{module}.rs"))).expect("a protocol module");
        for (name, variants) in enum_variants(&source) {
            let rows = documented.iter().find(|(n, _)| *n == name).map(|(_, rows)| rows);
            let Some(rows) = rows else {
                panic!("docs/architecture/wire.md has no table for enum {name} of proto/{module}.rs")
            };
            let expected: Vec<(usize, String)> = variants.into_iter().enumerate().collect();
            assert_eq!(
                *rows, expected,
                "docs/architecture/wire.md's table of {name} differs from proto/{module}.rs (variant numbers are declaration order)"
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} enums were found in the protocol modules");
}

/// The `.md` file names a text mentions: a run of path characters ending
/// in ".md".
fn markdown_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let is_path = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i + 3 <= bytes.len() {
        let at_end = bytes.get(i + 3).is_none_or(|c| !c.is_ascii_alphanumeric());
        if bytes[i..i + 3] == ['.', 'm', 'd'] && at_end {
            let mut start = i;
            while start > 0 && is_path(bytes[start - 1]) {
                start -= 1;
            }
            if start < i {
                names.push(bytes[start..i + 3].iter().collect());
            }
        }
        i += 1;
    }
    names
}

#[test]
fn documents_named_exist_in_the_repository() {
    let root = repo_root();
    let files = repo_files(&root);
    let documents: BTreeSet<&str> = files.iter().map(|(p, _)| p.as_str()).filter(|p| p.ends_with(".md")).collect();
    let basenames: BTreeSet<&str> = documents.iter().map(|p| p.rsplit('/').next().unwrap()).collect();
    let mut missing = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| p.ends_with(".rs") || p.ends_with(".md") || p.ends_with(".sh")) {
        if path.starts_with("docs/journal/") || path.ends_with("tidy.rs") {
            // Dated entries may name documents as they were.
            continue;
        }
        let dir = Path::new(path).parent().unwrap_or(Path::new(""));
        for name in markdown_names(text) {
            let trimmed = name.trim_start_matches("./");
            let resolves = documents.contains(trimmed)
                || root.join(dir).join(&name).is_file()
                || (!name.contains('/') && basenames.contains(name.as_str()));
            if !resolves {
                missing.push(format!("{path} names {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "documents named but not in the repository: {missing:#?}");
}

#[test]
fn no_package_registry_host_is_named() {
    let root = repo_root();
    let mut found = Vec::new();
    for (path, text) in repo_files(&root) {
        if path == "Cargo.lock" || path.ends_with("/Cargo.lock") || path.ends_with("tidy.rs") {
            continue;
        }
        for (number, line) in text.lines().enumerate() {
            for host in REGISTRY_HOSTS.iter().filter(|h| line.contains(**h)) {
                found.push(format!("{path}:{}: {host}", number + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "package registry hosts named (fetch by package name through cargo, apt-get, pip, Maven coordinates or go instead): {found:#?}"
    );
}
