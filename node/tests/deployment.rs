//! The deployment files in `deploy/` agree with the node they run: every config they ship loads
//! with the node's own config loader, and the ports, probe paths, volumes and config paths the
//! Dockerfile, the compose stack, the Kubernetes StatefulSet and the systemd unit name are the
//! ones those configs use. The image itself is built where `docker` is available.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rockraft::admin::NodeConfig;
use yaml_rust2::{Yaml, YamlLoader};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(deploy().join(relative)).unwrap_or_else(|e| panic!("deploy/{relative}: {e}"))
}

/// `text` loaded as a node config by the node's own loader (which validates it).
fn load(text: &str) -> NodeConfig {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).expect("write config");
    NodeConfig::load(&path).unwrap_or_else(|e| panic!("the node refuses this config: {e}\n{text}"))
}

fn port(addr: &str) -> i64 {
    addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or_else(|| panic!("no port in {addr}"))
}

/// The four listen ports of a config: client, admin, raft, http.
fn ports(c: &NodeConfig) -> BTreeSet<i64> {
    [&c.client_addr, &c.admin_addr, &c.raft_addr, &c.http_addr].into_iter().map(|a| port(a)).collect()
}

fn yaml(relative: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(relative)).unwrap_or_else(|e| panic!("deploy/{relative} is not YAML: {e}"))
}

/// The config path and the ports the Dockerfile's runtime image declares.
fn dockerfile() -> (String, BTreeSet<i64>) {
    let text = read("Dockerfile");
    let exposed = text
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| l.split_whitespace().map(|p| p.parse::<i64>().expect("a port")))
        .collect();
    let cmd = text.lines().find_map(|l| l.strip_prefix("CMD ")).expect("a CMD");
    let config = cmd.split('"').find(|w| w.ends_with(".toml")).expect("CMD names a config").to_string();
    (config, exposed)
}

#[test]
fn the_compose_stack_runs_three_nodes_with_the_ports_and_paths_of_their_configs() {
    let (image_config, exposed) = dockerfile();
    let stack = &yaml("compose/compose.yaml")[0];
    for n in 1..=3 {
        let config = load(&read(&format!("compose/node{n}.toml")));
        assert_eq!(config.node_id, n);
        assert_eq!(ports(&config), exposed, "the image exposes the ports node {n} listens on");
        let service = &stack["services"][format!("node{n}").as_str()];
        assert!(!service.is_badvalue(), "compose.yaml has a service node{n}");
        let mounted = service["configs"][0]["target"].as_str().expect("a config target");
        assert_eq!(mounted, image_config, "node{n}'s config is where the image reads it");
        let volume = service["volumes"][0].as_str().expect("a data volume");
        assert_eq!(volume.split(':').nth(1).map(Path::new), Some(config.data_dir.as_path()), "node{n}'s data volume");
        let published: BTreeSet<i64> =
            service["ports"].as_vec().expect("ports").iter().filter_map(|p| p["target"].as_i64()).collect();
        let outside = [port(&config.client_addr), port(&config.http_addr)].into_iter().collect::<BTreeSet<_>>();
        assert_eq!(published, outside, "node{n} publishes its client and http ports");
        // Members reach each other by service name; clients by the advertised address.
        for m in &config.members {
            let host = m.raft_addr.split(':').next().unwrap_or_default();
            assert!(!stack["services"][host].is_badvalue(), "member {} is the compose service {host}", m.id);
            assert_eq!(port(&m.raft_addr), port(&config.raft_addr));
            assert_eq!(port(&m.client_addr), port(&config.client_addr));
        }
        assert_eq!(config.members.len(), 3);
    }
}

#[test]
fn the_statefulset_runs_the_config_it_templates_with_probes_on_the_http_port() {
    let (_, exposed) = dockerfile();
    let docs = yaml("kubernetes/rockraft.yaml");
    let kind = |k: &str| docs.iter().find(|d| d["kind"].as_str() == Some(k)).unwrap_or_else(|| panic!("a {k}"));
    let (service, map, set) = (kind("Service"), kind("ConfigMap"), kind("StatefulSet"));
    let name = service["metadata"]["name"].as_str().expect("service name");
    assert_eq!(service["spec"]["clusterIP"].as_str(), Some("None"), "the service is headless");
    assert_eq!(set["spec"]["serviceName"].as_str(), Some(name));
    let replicas = set["spec"]["replicas"].as_i64().expect("replicas");
    let template = map["data"]["config.toml"].as_str().expect("the config template");
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let named_port = |n: &str| {
        container["ports"]
            .as_vec()
            .expect("ports")
            .iter()
            .find(|p| p["name"].as_str() == Some(n))
            .and_then(|p| p["containerPort"].as_i64())
    };
    let service_ports: BTreeSet<i64> =
        service["spec"]["ports"].as_vec().expect("service ports").iter().filter_map(|p| p["port"].as_i64()).collect();
    for ordinal in 0..replicas {
        let host = format!("{}-{ordinal}", set["metadata"]["name"].as_str().expect("set name"));
        // What the container's command does with the template, for this pod.
        let text = template
            .replace("@ID@", &(ordinal + 1).to_string())
            .replace("@HOST@", &host)
            .replace("@SECRET@", "0f9e8d7c6b5a49382716a5b4c3d2e1f0");
        let config = load(&text);
        assert_eq!(config.node_id as i64, ordinal + 1);
        assert_eq!(config.members.len() as i64, replicas, "the members table lists every replica");
        let me = config.members.iter().find(|m| m.id == config.node_id).expect("this pod in the members");
        assert!(me.raft_addr.starts_with(&format!("{host}.{name}.")), "pod {host} is reached through the service");
        assert_eq!(named_port("client"), Some(port(&config.client_addr)));
        assert_eq!(named_port("admin"), Some(port(&config.admin_addr)));
        assert_eq!(named_port("raft"), Some(port(&config.raft_addr)));
        assert_eq!(named_port("http"), Some(port(&config.http_addr)));
        assert_eq!(ports(&config), exposed, "the image exposes the ports the pod listens on");
        assert_eq!(ports(&config), service_ports, "the service names every port");
        let mounts = container["volumeMounts"].as_vec().expect("mounts");
        let data = mounts.iter().find(|m| m["name"].as_str() == Some("data")).expect("a data mount");
        assert_eq!(data["mountPath"].as_str().map(Path::new), Some(config.data_dir.as_path()));
    }
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(container[probe]["httpGet"]["path"].as_str(), Some(path), "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"].as_str(), Some("http"), "{probe} asks the http port");
    }
    let claim = &set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"];
    assert_eq!(claim.as_str(), Some("data"), "a volume per node");
}

#[test]
fn the_systemd_unit_runs_the_config_it_ships() {
    let unit = read("systemd/rockraft.service");
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    assert!(exec.ends_with("node --config /etc/rockraft/config.toml"), "{exec}");
    let config = load(&read("systemd/config.toml"));
    let state = unit.lines().find_map(|l| l.strip_prefix("StateDirectory=")).expect("StateDirectory");
    assert_eq!(Path::new("/var/lib").join(state), config.data_dir, "systemd makes the data directory");
    assert!(unit.contains("KillSignal=SIGTERM"), "a stop hands leadership over");
}

#[test]
fn the_image_builds_where_docker_is_available() {
    let docker = std::process::Command::new("docker").arg("version").output();
    if !docker.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no docker here; the Dockerfile's ports and paths are checked by the tests above");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let built = std::process::Command::new("docker")
        .args(["build", "-q", "-f", "deploy/Dockerfile", "-t", "rockraft:test", "."])
        .current_dir(root)
        .status()
        .expect("docker build runs");
    assert!(built.success(), "the image builds");
}
