//! The deployment files in `deploy/` agree with the node they run: every config they ship loads
//! with the node's own config loader, and the ports, probe paths, volumes and config paths the
//! Dockerfile, the compose stack, the Kubernetes StatefulSet and the systemd unit name are the
//! ones those configs use. Each is secure as shipped: authentication on, the cluster and admin
//! secrets from files the platform mounts (never literals), no listener that grants everything
//! reachable from the network, the admin and http ports not published; a node started from the
//! systemd and the compose config serves only the callers it should, and refuses to start once
//! its secret is taken away. The image itself is built where `docker` is available.

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

/// A cluster secret and an admin secret key, as the platform would mount them.
const CLUSTER_SECRET: &str = "0f9e8d7c6b5a49382716a5b4c3d2e1f00f9e8d7c";
const ADMIN_SECRET: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

/// `text` with the secret files it names written into `dir` (as the platform mounts them,
/// private) and pointed at there.
fn with_secret_files(text: &str, dir: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let named = ["cluster_secret_file", "admin_secret_key_file"].into_iter().find(|k| line.starts_with(k));
        match named {
            Some(key) => {
                let file = dir.join(key);
                let secret = if key == "cluster_secret_file" { CLUSTER_SECRET } else { ADMIN_SECRET };
                std::fs::write(&file, format!("{secret}\n")).expect("write a secret");
                std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o400)).expect("chmod");
                out.push_str(&format!("{key} = {:?}\n", file.display().to_string()));
            }
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

/// `text` loaded as a node config by the node's own loader (which validates it), its secret
/// files mounted.
fn load(text: &str) -> NodeConfig {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, with_secret_files(text, dir.path())).expect("write config");
    NodeConfig::load(&path).unwrap_or_else(|e| panic!("the node refuses this config: {e}\n{text}"))
}

/// `text` as shipped, its secret file paths as written (not read).
fn shipped(text: &str) -> NodeConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("not a node config: {e}\n{text}"))
}

/// What every shipped config keeps: authentication on, both secrets read from files the
/// platform provides, nothing open that would need `allow_insecure`.
fn assert_secure(text: &str, config: &NodeConfig, what: &str) {
    assert!(config.auth.enabled, "{what}: [auth] is on");
    for literal in ["cluster_secret =", "admin_secret_key =", "cluster_secret=", "admin_secret_key="] {
        assert!(!text.contains(literal), "{what}: no secret is written in the file ({literal})");
    }
    assert!(config.cluster_secret_file.is_some() && config.cluster_secret.is_some(), "{what}: a cluster secret file");
    assert!(config.auth.admin_secret_key_file.is_some(), "{what}: the admin secret from a file");
    assert!(!config.allow_insecure, "{what}: allow_insecure is not set");
    assert_eq!(config.insecure_listeners(), Vec::<String>::new(), "{what}: no listener grants everything");
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
    let secrets = &stack["secrets"];
    for name in ["rockraft_cluster_secret", "rockraft_admin_secret_key"] {
        assert_eq!(secrets[name]["external"].as_bool(), Some(true), "{name} is made with `docker secret create`");
    }
    for n in 1..=3 {
        let text = read(&format!("compose/node{n}.toml"));
        let config = load(&text);
        assert_secure(&text, &config, &format!("compose/node{n}.toml"));
        assert_eq!(config.node_id, n);
        assert_eq!(ports(&config), exposed, "the image exposes the ports node {n} listens on");
        let service = &stack["services"][format!("node{n}").as_str()];
        assert!(!service.is_badvalue(), "compose.yaml has a service node{n}");
        let mounted = service["configs"][0]["target"].as_str().expect("a config target");
        assert_eq!(mounted, image_config, "node{n}'s config is where the image reads it");
        let volume = service["volumes"][0].as_str().expect("a data volume");
        let volume = Path::new(volume.split(':').nth(1).expect("a mount path"));
        assert!(config.data_dir.starts_with(volume), "node{n}'s data is on its volume");
        let published: BTreeSet<i64> =
            service["ports"].as_vec().expect("ports").iter().filter_map(|p| p["target"].as_i64()).collect();
        let outside = [port(&config.client_addr)].into_iter().collect::<BTreeSet<_>>();
        assert_eq!(published, outside, "node{n} publishes its client port only");
        // Each secret file the config reads is the stack's secret, readable by the node alone.
        // Given to every service through the stack's shared node settings (`<<: *node`).
        let mounted = service["<<"]["secrets"].as_vec().expect("secrets");
        let as_shipped = shipped(&text);
        for file in [as_shipped.cluster_secret_file.as_ref(), as_shipped.auth.admin_secret_key_file.as_ref()] {
            let file = file.expect("a secret file");
            let secret = mounted
                .iter()
                .find(|m| {
                    Some(Path::new("/run/secrets").join(m["source"].as_str().unwrap_or_default())) == Some(file.clone())
                })
                .unwrap_or_else(|| panic!("node{n} mounts {}", file.display()));
            assert_eq!(secret["uid"].as_str(), Some("10001"), "owned by the image's user");
            assert_eq!(secret["mode"].as_i64(), Some(0o400), "readable by its owner alone");
        }
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
    let mounts_of = |volume: &str| {
        container["volumeMounts"]
            .as_vec()?
            .iter()
            .find(|m| m["name"].as_str() == Some(volume))
            .and_then(|m| m["mountPath"].as_str())
            .map(Path::new)
    };
    let secret_volume = set["spec"]["template"]["spec"]["volumes"]
        .as_vec()
        .expect("volumes")
        .iter()
        .find(|v| v["name"].as_str() == Some("secrets"))
        .expect("a secrets volume")
        .clone();
    assert_eq!(secret_volume["secret"]["secretName"].as_str(), Some("rockraft"), "from the Secret");
    assert_eq!(secret_volume["secret"]["defaultMode"].as_i64(), Some(0o400), "readable by the pod alone");
    // Only the cluster's own pods reach the raft and admin ports; scrapers labelled for it the
    // http port; clients the client port.
    let policy = kind("NetworkPolicy");
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"]["app"].as_str(), Some("rockraft"));
    let rules = policy["spec"]["ingress"].as_vec().expect("ingress rules");
    let from_for = |p: i64| -> Vec<&Yaml> {
        rules
            .iter()
            .filter(|r| r["ports"].as_vec().is_some_and(|ps| ps.iter().any(|x| x["port"].as_i64() == Some(p))))
            .collect()
    };
    for p in [9081, 7081] {
        let allowed = from_for(p);
        assert_eq!(allowed.len(), 1, "one rule admits port {p}");
        let from = allowed[0]["from"].as_vec().expect("a from list");
        assert!(
            from.iter().all(|f| f["podSelector"]["matchLabels"]["app"].as_str() == Some("rockraft")
                && f["namespaceSelector"].is_badvalue()),
            "port {p} only from the cluster's pods"
        );
    }
    let scrapers = from_for(6081);
    assert!(scrapers.len() == 1 && !scrapers[0]["from"].is_badvalue(), "the http port only from labelled scrapers");
    assert!(from_for(8081)[0]["from"].is_badvalue(), "clients from anywhere");
    let service_ports: BTreeSet<i64> =
        service["spec"]["ports"].as_vec().expect("service ports").iter().filter_map(|p| p["port"].as_i64()).collect();
    for ordinal in 0..replicas {
        let host = format!("{}-{ordinal}", set["metadata"]["name"].as_str().expect("set name"));
        // What the container's command does with the template, for this pod.
        let text = template.replace("@ID@", &(ordinal + 1).to_string()).replace("@HOST@", &host);
        let config = load(&text);
        assert_secure(&text, &config, "the StatefulSet's config");
        let as_shipped = shipped(&text);
        for file in [as_shipped.cluster_secret_file.as_ref(), as_shipped.auth.admin_secret_key_file.as_ref()] {
            let file = file.expect("a secret file");
            let mounted = mounts_of("secrets").expect("the secrets are mounted");
            assert!(file.starts_with(mounted), "{} is in the mounted Secret", file.display());
        }
        assert_eq!(config.node_id as i64, ordinal + 1);
        assert_eq!(config.members.len() as i64, replicas, "the members table lists every replica");
        let me = config.members.iter().find(|m| m.id == config.node_id).expect("this pod in the members");
        assert!(me.raft_addr.starts_with(&format!("{host}.{name}.")), "pod {host} is reached through the service");
        assert_eq!(named_port("client"), Some(port(&config.client_addr)));
        assert_eq!(named_port("admin"), Some(port(&config.admin_addr)));
        assert_eq!(named_port("raft"), Some(port(&config.raft_addr)));
        assert_eq!(named_port("http"), Some(port(&config.http_addr)));
        assert_eq!(ports(&config), exposed, "the image exposes the ports the pod listens on");
        let offered = [port(&config.client_addr), port(&config.raft_addr)].into_iter().collect();
        assert_eq!(service_ports, offered, "the service offers the client and raft ports, not admin or http");
        let mounts = container["volumeMounts"].as_vec().expect("mounts");
        let data = mounts.iter().find(|m| m["name"].as_str() == Some("data")).expect("a data mount");
        let volume = Path::new(data["mountPath"].as_str().expect("a mount path"));
        assert!(config.data_dir.starts_with(volume), "the data directory is on the pod's volume");
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
    let text = read("systemd/config.toml");
    let config = load(&text);
    assert_secure(&text, &config, "systemd/config.toml");
    let state = unit.lines().find_map(|l| l.strip_prefix("StateDirectory=")).expect("StateDirectory");
    assert_eq!(Path::new("/var/lib").join(state), config.data_dir, "systemd makes the data directory");
    assert!(unit.lines().any(|l| l == "StateDirectoryMode=0700"), "the data directory is the node's alone");
    assert!(unit.lines().any(|l| l == "UMask=0077"), "and so is every file in it");
    assert!(unit.contains("KillSignal=SIGTERM"), "a stop hands leadership over");
    // Each secret file the config reads is a credential the unit loads.
    let credentials: Vec<&str> = unit.lines().filter_map(|l| l.strip_prefix("LoadCredential=")).collect();
    let as_shipped = shipped(&text);
    for file in [as_shipped.cluster_secret_file.as_ref(), as_shipped.auth.admin_secret_key_file.as_ref()] {
        let file = file.expect("a secret file");
        let name = file.strip_prefix("/run/credentials/rockraft.service").expect("a credential of this unit");
        assert!(
            credentials.iter().any(|c| c.split(':').next().map(Path::new) == Some(name)),
            "the unit loads {}",
            name.display()
        );
    }
    assert!(config.http_addr.starts_with("127.0.0.1:"), "the status page stays on the host");
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

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A node started from a shipped config, on free ports, its members' host names pointing
/// here, its data and secret files in a directory of its own. Killed when dropped.
struct Started {
    child: std::process::Child,
    dir: tempfile::TempDir,
    /// (client, admin, raft, http) on loopback.
    ports: [u16; 4],
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Started {
    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i])
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default()
    }
}

/// `text` made runnable here: the shipped ports moved to free ones, the members' host names
/// (`hosts`) to loopback, the data directory to `dir`; `edit` then changes it as a test needs.
fn start(text: &str, hosts: &[&str], edit: impl Fn(String) -> String) -> Started {
    let dir = tempfile::tempdir().expect("temp dir");
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let mut text = text.to_string();
    for (shipped, port) in [8081, 7081, 9081, 6081].iter().zip(ports) {
        text = text.replace(&format!(":{shipped}\""), &format!(":{port}\""));
    }
    for host in hosts {
        text = text.replace(&format!("\"{host}:"), "\"127.0.0.1:");
    }
    let data = dir.path().join("data");
    let text =
        text.lines()
            .map(|l| {
                if l.starts_with("data_dir") {
                    format!("data_dir = {:?}", data.display().to_string())
                } else {
                    l.into()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
    let text = edit(with_secret_files(&text, dir.path()));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).expect("write config");
    let log = std::fs::File::create(dir.path().join("node.log")).expect("log file");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_rockraft"))
        .args(["node", "--config"])
        .arg(&config)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("the node starts");
    Started { child, dir, ports }
}

/// The node's exit status once it has stopped by itself within `within`, or `None` if it runs.
fn exited(node: &mut Started, within: std::time::Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if let Some(status) = node.child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

/// `GET path` on the node's http port: the whole answer, its status line first.
fn http_get(node: &Started, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(node.addr(3)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// Waits for the node's probe path to answer 200.
async fn wait_healthy(node: &mut Started, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while http_get(node, "/healthz").is_none_or(|s| !s.starts_with("HTTP/1.0 200") && !s.starts_with("HTTP/1.1 200")) {
        assert!(node.child.try_wait().expect("wait").is_none(), "{what}: the node stopped:\n{}", node.log());
        assert!(std::time::Instant::now() < deadline, "{what}: /healthz never answered:\n{}", node.log());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Serves as documented: the probe path answers; unsigned and wrongly signed operator requests
/// and member calls without the secret are refused; the admin, signed, is served; an unsigned
/// client request is UNAUTHORIZED.
async fn serves_only_whom_it_should(node: &mut Started, what: &str) {
    use rockraft::admin::{CallOptions, Credentials, call};
    use rockraft_proto::rockraft::GetStatusRequest;
    wait_healthy(node, what).await;
    let admin = |secret: &str| CallOptions {
        credentials: Some(Credentials {
            access_key: "admin".into(),
            secret: rockraft::broker::access::Secret::new(secret.to_string()),
        }),
        tls_ca: None,
    };
    let unsigned =
        call(&node.addr(1), &CallOptions::default(), GetStatusRequest::default()).await.expect_err("unsigned");
    assert!(unsigned.to_string().contains("authentication is required"), "{what}: {unsigned}");
    let wrong = call(&node.addr(1), &admin("not-the-admin-secret"), GetStatusRequest::default()).await;
    assert!(wrong.is_err(), "{what}: a wrong admin secret is refused");
    let served = call(&node.addr(1), &admin(ADMIN_SECRET), GetStatusRequest::default()).await;
    assert!(served.is_ok(), "{what}: the admin is served: {served:?}");
    // The raft port: not even the admin gets in without the cluster secret.
    for options in [CallOptions::default(), admin(ADMIN_SECRET)] {
        let member = call(&node.addr(2), &options, GetStatusRequest::default()).await.expect_err("not a member");
        assert!(member.to_string().contains("not a member"), "{what}: {member}");
    }
    // The client port: an unsigned send is UNAUTHORIZED.
    use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
    use rockraft_proto::rocketmq::{Code, Message, Resource, SendMessageRequest, SystemProperties};
    let mut client = MessagingServiceClient::connect(format!("http://{}", node.addr(0))).await.expect("client port");
    let message = Message {
        topic: Some(Resource { name: "orders".into(), ..Default::default() }),
        system_properties: Some(SystemProperties { message_id: "01".into(), ..Default::default() }),
        body: vec![1; 64].into(),
        ..Default::default()
    };
    let answer = client.send_message(SendMessageRequest { messages: vec![message] }).await.expect("an answer");
    let code = answer.into_inner().status.map(|s| s.code);
    assert_eq!(code, Some(Code::Unauthorized as i32), "{what}: an unsigned send");
}

/// Refuses to start, saying why, once what secures it is taken away.
fn refuses(text: &str, hosts: &[&str], edit: impl Fn(String) -> String, why: &str, what: &str) {
    let mut node = start(text, hosts, edit);
    let status = exited(&mut node, std::time::Duration::from_secs(30));
    assert!(status.is_some_and(|s| !s.success()), "{what}: the node refused to start:\n{}", node.log());
    assert!(node.log().contains(why), "{what}: the refusal says {why:?}:\n{}", node.log());
}

fn without(key: &'static str) -> impl Fn(String) -> String {
    move |text| text.lines().filter(|l| !l.starts_with(key)).collect::<Vec<_>>().join("\n")
}

fn auth_off(text: String) -> String {
    text.replace("enabled = true", "enabled = false")
}

#[tokio::test]
async fn a_node_started_from_the_systemd_config_serves_only_whom_it_should_and_refuses_without_its_secret() {
    let text = read("systemd/config.toml");
    let hosts = ["rockraft-host-1", "rockraft-host-2", "rockraft-host-3"];
    let mut node = start(&text, &hosts, |t| t);
    serves_only_whom_it_should(&mut node, "systemd").await;
    let data = node.dir.path().join("data");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&data).expect("data dir").permissions()) & 0o777,
        0o700,
        "the node makes its data directory private"
    );
    drop(node);
    refuses(&text, &hosts, without("cluster_secret_file"), "cluster_secret", "systemd without its secret");
    refuses(&text, &hosts, auth_off, "allow_insecure", "systemd with auth off");
    // Said in so many words, it serves open, and says so in red on its status page and in its log.
    let mut open = start(&text, &hosts, |t| format!("allow_insecure = true\n{}", auth_off(t)));
    wait_healthy(&mut open, "systemd, allow_insecure").await;
    let page = http_get(&open, "/").expect("the status page");
    assert!(page.contains("class=\"bad insecure\"") && page.contains("admin_addr"), "the page says so:\n{page}");
    assert!(open.log().contains("INSECURE"), "the log says so:\n{}", open.log());
}

#[tokio::test]
async fn a_node_started_from_the_compose_config_serves_only_whom_it_should_and_refuses_without_its_secret() {
    let text = read("compose/node1.toml");
    let hosts = ["node1", "node2", "node3", "rockraft-host-1", "rockraft-host-2", "rockraft-host-3"];
    let mut node = start(&text, &hosts, |t| t);
    serves_only_whom_it_should(&mut node, "compose").await;
    drop(node);
    refuses(&text, &hosts, without("cluster_secret_file"), "cluster_secret", "compose without its secret");
    refuses(&text, &hosts, auth_off, "allow_insecure", "compose with auth off");
}
