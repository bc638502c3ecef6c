//! The Helm chart (deploy/helm/latsdb): `helm lint`, `helm template` with
//! and without zones, the rendered objects checked against the Kubernetes
//! API's schemas (kubernetes-validate, strict), the rendered cluster
//! configuration parsed by the management server's own parser, and every
//! container's start command run against this build's binary with `--help`
//! appended, so a flag the chart passes that the binary does not take (or
//! takes another way) fails here rather than in a pod. Helm and the
//! validator are installed by scripts/install-deps.sh.

mod common;

use common::{run_bounded, workspace, BIN};
use latsdb_types::config::ClusterConfig;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn helm() -> PathBuf {
    let helm = workspace().join("target/tools/helm");
    assert!(helm.exists(), "{} is missing; scripts/install-deps.sh installs it", helm.display());
    helm
}

fn chart() -> PathBuf {
    workspace().join("deploy/helm/latsdb")
}

fn python() -> PathBuf {
    workspace().join("target/pyenv/bin/python3")
}

/// Runs `cmd` (bounded) and returns its stdout; panics with its output
/// when it fails.
fn run(cmd: &mut Command, what: &str) -> String {
    let (status, out, err) = run_bounded(cmd, None, Duration::from_secs(120));
    assert!(status.success(), "{what} failed:\n{out}\n{err}");
    out
}

/// `helm template` of the chart with `sets` (`key=value`), as YAML text.
fn render(sets: &[&str]) -> String {
    let mut cmd = Command::new(helm());
    cmd.args(["template", "db", chart().to_str().unwrap(), "--namespace", "prod"]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    run(&mut cmd, &format!("helm template --set {sets:?}"))
}

/// Reads the rendered objects with PyYAML: each container's command and
/// arguments as a JSON list per line, then the ConfigMap's cluster.toml
/// (as a JSON string) on the last line.
const EXTRACT: &str = r#"
import json, sys, yaml
config = None
for doc in yaml.safe_load_all(sys.stdin):
    if not doc:
        continue
    if doc["kind"] == "ConfigMap":
        config = doc["data"]["cluster.toml"]
        continue
    for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        print(json.dumps({"name": doc["metadata"]["name"], "argv": c.get("command", []) + c.get("args", [])}))
print(json.dumps(config))
"#;

struct Rendered {
    /// (object name, command and arguments) of every container.
    containers: Vec<(String, Vec<String>)>,
    config: ClusterConfig,
}

fn read_rendered(yaml: &str) -> Rendered {
    let mut cmd = Command::new(python());
    cmd.args(["-c", EXTRACT]);
    let (status, out, err) = run_bounded(&mut cmd, Some(yaml), Duration::from_secs(60));
    assert!(status.success(), "reading the rendered chart failed: {err}");
    let mut lines: Vec<&str> = out.lines().collect();
    let config: Option<String> = serde_json::from_str(lines.pop().expect("the configuration line")).unwrap();
    let config = config.expect("the chart renders a ConfigMap with cluster.toml");
    let config = ClusterConfig::parse(&config).unwrap_or_else(|e| panic!("{}\n{config}", e.message));
    let containers = lines
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let argv = v["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
            (v["name"].as_str().unwrap().to_string(), argv)
        })
        .collect();
    Rendered { containers, config }
}

/// Checks the rendered objects against the Kubernetes schemas (strict:
/// an unknown field fails too).
fn validate(yaml: &str, dir: &Path) {
    let file = dir.join("rendered.yaml");
    std::fs::write(&file, yaml).unwrap();
    let validator = workspace().join("target/pyenv/bin/kubernetes-validate");
    run(Command::new(validator).args(["--strict", "--quiet"]).arg(&file), "kubernetes-validate --strict");
}

/// Runs a container's command with `--help` appended, with `latsdb` on the
/// PATH being this build's binary and the pod's host name set (the data
/// nodes' command computes the node id from it).
fn parses(name: &str, argv: &[String], bin_dir: &Path) {
    let mut cmd = match argv.first().map(String::as_str) {
        Some("latsdb") => {
            let mut cmd = Command::new(BIN);
            cmd.args(&argv[1..]).arg("--help");
            cmd
        }
        Some("/bin/sh") => {
            assert_eq!(argv.len(), 3, "{name}: a shell command is /bin/sh -c SCRIPT: {argv:?}");
            assert!(argv[2].starts_with("exec latsdb "), "{name}: the script runs latsdb: {argv:?}");
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &format!("{} --help", argv[2])]);
            cmd
        }
        _ => panic!("{name}: unexpected command {argv:?}"),
    };
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    cmd.env("PATH", path).env("HOSTNAME", format!("{name}-1"));
    let out = run(&mut cmd, &format!("{name}: {argv:?} --help"));
    assert!(out.contains("Usage:"), "{name}: --help printed no usage:\n{out}");
}

/// The node id a data-node pod's shell command passes, run with a stub
/// `latsdb` (in `stub_dir`) that prints its arguments, as pod `pod`.
fn node_id_of(argv: &[String], pod: &str, stub_dir: &Path) -> u16 {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &argv[2]]);
    let path = format!("{}:{}", stub_dir.display(), std::env::var("PATH").unwrap_or_default());
    cmd.env("PATH", path).env("HOSTNAME", pod);
    let out = run(&mut cmd, &format!("{pod}: {argv:?} with the stub"));
    let args: Vec<&str> = out.lines().collect();
    let at = args.iter().position(|a| *a == "--node-id").unwrap_or_else(|| panic!("{pod}: no --node-id in {args:?}"));
    args[at + 1].parse().unwrap_or_else(|_| panic!("{pod}: --node-id {:?} is no number", args[at + 1]))
}

#[test]
fn the_chart_lints_renders_valid_objects_and_its_commands_parse() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("latsdb")).unwrap();
    let stub_dir = dir.path().join("stub");
    std::fs::create_dir(&stub_dir).unwrap();
    std::fs::write(stub_dir.join("latsdb"), "#!/bin/sh\nprintf '%s\\n' \"$@\"\n").unwrap();
    std::fs::set_permissions(stub_dir.join("latsdb"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let zoned = ["zones={zone-a,zone-b}", "mgmdZone=zone-c", "cluster.nodeGroups=2", "sql.zone=zone-a"];
    for sets in [&[][..], &zoned[..]] {
        let mut lint = Command::new(helm());
        lint.args(["lint", "--strict", chart().to_str().unwrap()]);
        for set in sets {
            lint.args(["--set", set]);
        }
        run(&mut lint, &format!("helm lint --strict {sets:?}"));
        let yaml = render(sets);
        validate(&yaml, dir.path());
        let rendered = read_rendered(&yaml);
        let names: Vec<&str> = rendered.containers.iter().map(|(n, _)| n.as_str()).collect();
        for role in ["db-mgmd", "db-datanode-0", "db-datanode-1", "db-sql", "db-rest"] {
            assert!(names.contains(&role), "{sets:?}: no {role} in {names:?}");
        }
        for (name, argv) in &rendered.containers {
            parses(name, argv, &bin_dir);
        }
        // The configuration the management server reads: every data node
        // the StatefulSets run, each in its zone when zones are given.
        let config = &rendered.config;
        let groups = if sets.is_empty() { 1 } else { 2 };
        assert_eq!(config.datanodes.len(), 2 * groups, "{sets:?}");
        assert!(config.mgmd.host.starts_with("db-mgmd-0.db-mgmd.prod."), "{}", config.mgmd.host);
        for (i, d) in config.datanodes.iter().enumerate() {
            let (group, position) = (i / 2, i % 2);
            assert_eq!(d.node_id as usize, 2 + i);
            assert!(d.host.starts_with(&format!("db-datanode-{position}-{group}.db-datanode.prod.")), "{}", d.host);
            let zone = (!sets.is_empty()).then(|| ["zone-a", "zone-b"][position].to_string());
            assert_eq!(d.location_domain, zone, "data node {}", d.node_id);
        }
        let warnings = latsdb_types::location::placement_warnings(config);
        assert!(warnings.is_empty(), "{sets:?}: {warnings:?}");
        // Each data-node pod takes the node id the configuration gives its host.
        for (name, argv) in rendered.containers.iter().filter(|(n, _)| n.starts_with("db-datanode-")) {
            for group in 0..groups {
                let pod = format!("{name}-{group}");
                let configured = config.datanodes.iter().find(|d| d.host.starts_with(&format!("{pod}.")));
                let configured = configured.unwrap_or_else(|| panic!("no [[datanode]] for pod {pod}"));
                assert_eq!(node_id_of(argv, &pod, &stub_dir), configured.node_id, "pod {pod}");
            }
        }
    }
}

#[test]
fn the_chart_refuses_zones_that_do_not_cover_the_replicas() {
    let mut cmd = Command::new(helm());
    cmd.args(["template", "db", chart().to_str().unwrap(), "--set", "zones={zone-a}"]);
    let (status, _, err) = run_bounded(&mut cmd, None, Duration::from_secs(60));
    assert!(!status.success(), "one zone for two replicas was rendered");
    assert!(err.contains("zones must name one zone per replica position"), "{err}");
}
