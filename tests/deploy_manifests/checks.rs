//! The checks of the Kubernetes manifests. Each returns the problems it
//! found, as sentences naming the object and the field.

use super::manifests::{Manifests, Workload};
use k8s_openapi::api::core::v1::{Container, EnvVar};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// A worker stopped with SIGTERM drains: the master fails its deployments
/// over, its tasks stop (sinks end their transactions), then it exits.
/// Kubernetes' default grace (30 s) is the least a drain may need under
/// load, not a comfortable bound: at least twice that.
const WORKER_GRACE_MIN_S: i64 = 60;

/// What `sluice <role> --help` lists: each flag, whether it takes a value;
/// and the flags its usage line requires.
pub struct Help {
    pub flags: BTreeMap<String, bool>,
    pub required: BTreeSet<String>,
}

fn sluice() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// The real binary's help for `role` (run once per role).
pub fn help(role: &str) -> &'static Help {
    static HELPS: OnceLock<BTreeMap<String, Help>> = OnceLock::new();
    let helps = HELPS.get_or_init(|| {
        ["master", "worker"]
            .into_iter()
            .map(|role| {
                let out = sluice().args([role, "--help"]).output().expect("run sluice");
                assert!(out.status.success(), "sluice {role} --help: {out:?}");
                (role.to_string(), parse_help(&String::from_utf8_lossy(&out.stdout)))
            })
            .collect()
    });
    &helps[role]
}

fn parse_help(text: &str) -> Help {
    let mut flags = BTreeMap::new();
    let mut required = BTreeSet::new();
    for line in text.lines().map(str::trim_start) {
        if let Some(usage) = line.strip_prefix("Usage:") {
            required.extend(
                usage
                    .split_whitespace()
                    .filter_map(|t| t.strip_prefix("--"))
                    .map(String::from),
            );
        } else if line.starts_with('-') {
            let long = line.split_once("--").map(|(_, rest)| rest).unwrap_or_default();
            let name: String = long
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() {
                flags.insert(name, long.contains(" <"));
            }
        }
    }
    assert!(flags.len() > 3, "no flags found in the help text:\n{text}");
    Help { flags, required }
}

/// A container's arguments: the subcommand, then `--name[=value]` each.
pub struct Args {
    pub role: String,
    pub flags: Vec<(String, Option<String>)>,
    /// Arguments that are not `--name[=value]`.
    pub malformed: Vec<String>,
}

impl Args {
    pub fn of(container: &Container) -> Args {
        let args = container.args.clone().unwrap_or_default();
        let mut flags = Vec::new();
        let mut malformed = Vec::new();
        for arg in args.iter().skip(1) {
            match arg.strip_prefix("--") {
                Some(flag) => match flag.split_once('=') {
                    Some((name, value)) => flags.push((name.to_string(), Some(value.to_string()))),
                    None => flags.push((flag.to_string(), None)),
                },
                None => malformed.push(arg.clone()),
            }
        }
        Args {
            role: args.first().cloned().unwrap_or_default(),
            flags,
            malformed,
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// `$(VAR)` names in `text`.
fn references(text: &str) -> Vec<String> {
    text.split("$(")
        .skip(1)
        .filter_map(|s| s.split_once(')').map(|(name, _)| name.to_string()))
        .collect()
}

/// The environment variable `name` of `container`.
fn env<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container.env.as_ref()?.iter().find(|e| e.name == name)
}

/// The downward-API field an env var comes from.
fn field_path(var: &EnvVar) -> Option<&str> {
    Some(var.value_from.as_ref()?.field_ref.as_ref()?.field_path.as_str())
}

/// A value Kubernetes could give `var` in a pod of `w` (for running the
/// binary on the expanded arguments), or why it has none.
fn sample_value(w: &Workload, var: &EnvVar) -> Result<String, String> {
    if let Some(value) = &var.value {
        return Ok(value.clone());
    }
    let from = var
        .value_from
        .as_ref()
        .ok_or(format!("env {} has no value", var.name))?;
    if from.secret_key_ref.is_some() || from.config_map_key_ref.is_some() {
        return Ok("from-a-key".into());
    }
    let path = field_path(var).ok_or(format!("env {}: unsupported source", var.name))?;
    if let Some(label) = path
        .strip_prefix("metadata.labels['")
        .and_then(|l| l.strip_suffix("']"))
    {
        return w.labels().get(label).cloned().ok_or(format!(
            "env {} reads label {label}, which the pod template lacks",
            var.name
        ));
    }
    match path {
        "status.podIP" | "status.hostIP" => Ok("10.1.2.3".into()),
        "metadata.name" => Ok(format!("{}-0", w.name)),
        "metadata.namespace" | "spec.nodeName" | "spec.serviceAccountName" => Ok("sample".into()),
        other => Err(format!("env {}: unexpected field {other}", var.name)),
    }
}

/// `arg` with every `$(VAR)` replaced by a sample of the container's env.
fn expand(w: &Workload, c: &Container, arg: &str) -> Result<String, String> {
    let mut out = arg.to_string();
    for name in references(arg) {
        let var = env(c, &name).ok_or(format!(
            "`{arg}` uses $({name}), which the container's env does not define"
        ))?;
        out = out.replace(&format!("$({name})"), &sample_value(w, var)?);
    }
    Ok(out)
}

/// Flags are `sluice <role> --help`'s, written `--name=value`, required ones
/// present, `$(VAR)`s defined, and the real binary accepts the values.
pub fn check_flags(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    for w in m.workloads() {
        for c in w.containers() {
            let at = format!("{w} container {}", c.name);
            if c.command.is_some() {
                problems.push(format!("{at}: sets command; the image's ENTRYPOINT is sluice"));
            }
            let args = Args::of(c);
            if args.role != w.role {
                problems.push(format!(
                    "{at}: runs `sluice {}`; a {} runs `sluice {}`",
                    args.role, w.kind, w.role
                ));
                continue;
            }
            problems.extend(args.malformed.iter().map(|a| format!("{at}: `{a}` is not a --flag")));
            let help = help(w.role);
            for (name, value) in &args.flags {
                match help.flags.get(name) {
                    None => problems.push(format!("{at}: --{name} is not a flag of `sluice {}`", w.role)),
                    Some(true) if value.is_none() => {
                        problems.push(format!("{at}: write --{name}=VALUE (one argument per flag)"))
                    }
                    _ => {}
                }
            }
            for name in &help.required {
                if args.get(name).is_none() {
                    problems.push(format!("{at}: --{name} is required by `sluice {}`", w.role));
                }
            }
            problems.extend(binary_accepts(&w, c, &at));
        }
    }
    problems
}

/// Runs `sluice <args, $(VAR)s expanded> --help`: clap parses every value
/// it meets before the final `--help`, so an invalid one fails the run.
fn binary_accepts(w: &Workload, c: &Container, at: &str) -> Vec<String> {
    let mut expanded = Vec::new();
    for arg in c.args.iter().flatten() {
        match expand(w, c, arg) {
            Ok(a) => expanded.push(a),
            Err(why) => return vec![format!("{at}: {why}")],
        }
    }
    let out = sluice().args(&expanded).arg("--help").output().expect("run sluice");
    if out.status.success() {
        Vec::new()
    } else {
        vec![format!(
            "{at}: `sluice {}` is refused: {}",
            expanded.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )]
    }
}

/// `HOST:PORT` → (host, port).
fn host_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// The number of the container port `port` names (by name or number).
fn container_port(c: &Container, port: &IntOrString) -> Option<i32> {
    c.ports.iter().flatten().find_map(|p| match port {
        IntOrString::Int(n) => (p.container_port == *n).then_some(*n),
        IntOrString::String(name) => (p.name.as_deref() == Some(name.as_str())).then_some(p.container_port),
    })
}

/// The address flags each role binds, with the container port each needs.
fn bound_flags(role: &str) -> &'static [&'static str] {
    match role {
        "master" => &["listen", "data-listen", "pg-listen", "http-listen"],
        _ => &["listen"],
    }
}

/// The port a flag's `HOST:PORT` value names.
pub fn flag_port(args: &Args, flag: &str) -> Option<u16> {
    args.get(flag).and_then(host_port).map(|(_, p)| p)
}

/// Every bound address has its container port and every container port a
/// flag; addresses others dial are the pod's; Services reach the ports.
pub fn check_ports(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    for w in m.workloads() {
        for c in w.containers() {
            problems.extend(container_ports(&w, c));
        }
    }
    problems.extend(service_ports(m));
    problems
}

fn container_ports(w: &Workload, c: &Container) -> Vec<String> {
    let mut problems = Vec::new();
    let at = format!("{w} container {}", c.name);
    let args = Args::of(c);
    let mut claimed = BTreeSet::new();
    for flag in bound_flags(w.role) {
        match flag_port(&args, flag) {
            None => problems.push(format!("{at}: --{flag}=HOST:PORT is needed (its default is loopback)")),
            Some(port) => {
                claimed.insert(i32::from(port));
                if container_port(c, &IntOrString::Int(i32::from(port))).is_none() {
                    problems.push(format!("{at}: --{flag} port {port} is not a container port"));
                }
            }
        }
    }
    for p in c.ports.iter().flatten() {
        if !claimed.contains(&p.container_port) {
            problems.push(format!("{at}: container port {} is bound by no flag", p.container_port));
        }
    }
    // Addresses other processes dial: the master advertises the address its
    // data plane binds, a worker its --advertise.
    let dialled = if w.role == "master" { "data-listen" } else { "advertise" };
    match args.get(dialled).and_then(host_port) {
        None => problems.push(format!("{at}: --{dialled}=HOST:PORT is needed: others dial it")),
        Some((host, port)) => {
            if w.role == "worker" && Some(port) != flag_port(&args, "listen") {
                problems.push(format!("{at}: --advertise port {port} is not the --listen port"));
            }
            problems.extend(pod_address(c, host).map(|why| format!("{at}: --{dialled} {why}")));
        }
    }
    problems
}

/// Why `host` is not an address another pod can dial, if it is not.
fn pod_address(c: &Container, host: &str) -> Option<String> {
    if ["0.0.0.0", "[::]", "::", "localhost"].contains(&host) || host.starts_with("127.") {
        return Some(format!("host {host} is not reachable from other pods"));
    }
    let names = references(host);
    let from_ip = |n: &String| env(c, n).and_then(field_path) == Some("status.podIP");
    (!names.iter().all(from_ip)).then(|| format!("host {host}: an env var here should be the pod's IP (status.podIP)"))
}

fn service_ports(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    let workloads = m.workloads();
    for s in &m.services {
        let name = s.metadata.name.clone().unwrap_or_default();
        let spec = s.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        let selected: Vec<&Workload> = workloads
            .iter()
            .filter(|w| !selector.is_empty() && selector.iter().all(|(k, v)| w.labels().get(k) == Some(v)))
            .collect();
        if selected.is_empty() {
            problems.push(format!("Service {name}: its selector {selector:?} selects no pods"));
        }
        for p in spec.ports.iter().flatten() {
            let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
            let port_name = p.name.clone().unwrap_or_default();
            for w in &selected {
                match w.containers().iter().find_map(|c| container_port(c, &target)) {
                    None => problems.push(format!("Service {name} port {port_name}: {target:?} is no port of {w}")),
                    Some(n) if n != p.port => problems.push(format!(
                        "Service {name} port {port_name}: port {} differs from the container's {n}",
                        p.port
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    problems.extend(client_service(m));
    problems
}

/// Some ClusterIP Service exposes the masters' pgwire and HTTP ports.
fn client_service(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    for w in m.workloads().iter().filter(|w| w.role == "master") {
        let args = Args::of(&w.containers()[0]);
        for (flag, what) in [("pg-listen", "pgwire"), ("http-listen", "HTTP")] {
            let Some(port) = flag_port(&args, flag) else { continue };
            let exposed = m.services.iter().any(|s| {
                let spec = s.spec.clone().unwrap_or_default();
                let selects = spec
                    .selector
                    .unwrap_or_default()
                    .iter()
                    .all(|(k, v)| w.labels().get(k) == Some(v));
                spec.cluster_ip.as_deref() != Some("None")
                    && selects
                    && spec.ports.iter().flatten().any(|p| p.port == i32::from(port))
            });
            if !exposed {
                problems.push(format!("{w}: no client Service exposes {what} (--{flag} port {port})"));
            }
        }
    }
    problems
}

/// One master until the quorum exists; workers' `--masters` are the
/// StatefulSet's pods' DNS names through its headless Service.
pub fn check_master_names(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    let [sts] = m.statefulsets.as_slice() else {
        return vec![format!("{} master StatefulSets; expected one", m.statefulsets.len())];
    };
    let name = sts.metadata.name.clone().unwrap_or_default();
    let spec = sts.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let service = spec.service_name.clone().unwrap_or_default();
    if replicas % 2 == 0 {
        problems.push(format!(
            "StatefulSet {name}: replicas {replicas}; a master quorum needs an odd number (1, 3 or 5)"
        ));
    }
    let master = &m.workloads()[0];
    let master_args = Args::of(&master.containers()[0]);
    let control = flag_port(&master_args, "listen");
    let control_text = control.map_or("?".to_string(), |p| p.to_string());
    // Each pod's --id is its name, and --peers names every pod by its
    // stable DNS name and control port (a pod skips its own entry).
    let peers = master_args.get("peers");
    if replicas > 1 && master_args.get("id") != Some("$(POD_NAME)") {
        problems.push(format!(
            "StatefulSet {name}: --id must be the pod's name, $(POD_NAME), which --peers lists"
        ));
    }
    match (replicas, peers) {
        (1, Some(_)) => problems.push(format!("StatefulSet {name}: one replica with --peers")),
        (1, None) => {}
        (_, None) => problems.push(format!("StatefulSet {name}: {replicas} replicas without --peers")),
        (_, Some(list)) => {
            let mut named = BTreeSet::new();
            for entry in list.split(',') {
                let ordinal = entry.split_once('=').and_then(|(id, address)| {
                    let i = master_ordinal(address, &name, &service, control)?;
                    (id == format!("{name}-{i}")).then_some(i)
                });
                match ordinal {
                    Some(i) if i < replicas => {
                        named.insert(i);
                    }
                    _ => problems.push(format!(
                        "StatefulSet {name}: --peers {entry} is not {name}-N={name}-N.{service}:{control_text}"
                    )),
                }
            }
            if named.len() != replicas as usize {
                problems.push(format!(
                    "StatefulSet {name}: --peers names {named:?} of {replicas} masters"
                ));
            }
        }
    }
    let headless = m
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(service.as_str()));
    match headless.and_then(|s| s.spec.clone()) {
        None => problems.push(format!("StatefulSet {name}: its serviceName {} is no Service", service)),
        Some(s) => {
            if s.cluster_ip.as_deref() != Some("None") {
                problems.push(format!("Service {}: not headless (clusterIP: None)", service));
            }
            if !s.ports.iter().flatten().any(|p| Some(p.port) == control.map(i32::from)) {
                problems.push(format!("Service {}: lacks the control port {control_text}", service));
            }
        }
    }
    for w in m.workloads().iter().filter(|w| w.role == "worker") {
        let args = Args::of(&w.containers()[0]);
        let masters = args.get("masters").unwrap_or_default();
        let mut named = BTreeSet::new();
        for address in masters.split(',') {
            match master_ordinal(address, &name, &service, control) {
                Some(i) if i < replicas => {
                    named.insert(i);
                }
                _ => problems.push(format!(
                    "{w}: --masters {address} is not {name}-<0..{replicas}>.{}:{control_text}",
                    service
                )),
            }
        }
        if named.len() != replicas as usize {
            problems.push(format!("{w}: --masters names {named:?} of {replicas} masters"));
        }
    }
    problems
}

/// `sts-N.service[.namespace.svc…]:PORT` → N, when PORT is `control`.
fn master_ordinal(address: &str, sts: &str, service: &str, control: Option<u16>) -> Option<i32> {
    let (host, port) = host_port(address)?;
    let (pod, domain) = host.split_once('.')?;
    let in_service = domain == service || domain.starts_with(&format!("{service}."));
    (in_service && Some(port) == control).then_some(())?;
    pod.strip_prefix(sts)?.strip_prefix('-')?.parse().ok()
}

/// Masters: HTTP probes of /health on the --http-listen port. Workers (no
/// HTTP): TCP probes of the data-plane port.
pub fn check_probes(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    for w in m.workloads() {
        for c in w.containers() {
            let at = format!("{w} container {}", c.name);
            let args = Args::of(c);
            let probes = [
                ("readinessProbe", c.readiness_probe.as_ref(), true),
                ("livenessProbe", c.liveness_probe.as_ref(), true),
                ("startupProbe", c.startup_probe.as_ref(), false),
            ];
            for (kind, probe, required) in probes {
                let Some(probe) = probe else {
                    if required {
                        problems.push(format!("{at}: no {kind}"));
                    }
                    continue;
                };
                let (port, problem) = if w.role == "master" {
                    let scheme = if args.get("tls-cert").is_some() {
                        "HTTPS"
                    } else {
                        "HTTP"
                    };
                    match &probe.http_get {
                        Some(h) if h.path.as_deref() != Some("/health") => {
                            (None, Some(format!("path {:?} is not /health", h.path)))
                        }
                        Some(h) if h.scheme.as_deref().unwrap_or("HTTP") != scheme => {
                            (None, Some(format!("scheme must be {scheme}")))
                        }
                        Some(h) => (container_port(c, &h.port), None),
                        None => (None, Some("is not an httpGet of /health".into())),
                    }
                } else {
                    match &probe.tcp_socket {
                        Some(t) => (container_port(c, &t.port), None),
                        None => (None, Some("is not a tcpSocket probe of the data plane".into())),
                    }
                };
                let flag = if w.role == "master" { "http-listen" } else { "listen" };
                let want = flag_port(&args, flag).map(i32::from);
                match problem {
                    Some(p) => problems.push(format!("{at}: {kind} {p}")),
                    None if port != want || want.is_none() => {
                        problems.push(format!("{at}: {kind} checks port {port:?}, not --{flag}'s {want:?}"))
                    }
                    None => {}
                }
            }
        }
    }
    problems
}

/// Shared checkpoints, data dirs on volumes, Secrets, resources, the
/// workers' grace period and a non-root user.
pub fn check_pods(m: &Manifests) -> Vec<String> {
    let mut problems = checkpoint_volume(m);
    for w in m.workloads() {
        let spec = w.pod.spec.clone().unwrap_or_default();
        let security = spec.security_context.clone().unwrap_or_default();
        if security.run_as_non_root != Some(true) || security.run_as_user.unwrap_or(0) == 0 {
            problems.push(format!("{w}: runAsNonRoot: true and a non-zero runAsUser are expected"));
        }
        if w.role == "worker" && spec.termination_grace_period_seconds.unwrap_or(30) < WORKER_GRACE_MIN_S {
            problems.push(format!(
                "{w}: terminationGracePeriodSeconds under {WORKER_GRACE_MIN_S}: a draining worker is killed"
            ));
        }
        for c in w.containers() {
            let at = format!("{w} container {}", c.name);
            let data_dir = Args::of(c).get("data-dir").map(String::from);
            match data_dir {
                Some(dir) if mount_of(c, &dir).is_some() => {}
                _ => problems.push(format!("{at}: --data-dir {data_dir:?} is on no volume")),
            }
            problems.extend(resources(c).into_iter().map(|p| format!("{at}: {p}")));
            for var in c.env.iter().flatten() {
                let Some(key) = var.value_from.as_ref().and_then(|f| f.secret_key_ref.as_ref()) else {
                    continue;
                };
                let found = m.secrets.iter().any(|s| {
                    s.metadata.name.as_deref() == Some(key.name.as_str())
                        && (s.data.as_ref().is_some_and(|d| d.contains_key(&key.key))
                            || s.string_data.as_ref().is_some_and(|d| d.contains_key(&key.key)))
                });
                if !found {
                    problems.push(format!(
                        "{at}: env {} needs Secret {} with key {}",
                        var.name, key.name, key.key
                    ));
                }
            }
            if w.role == "master"
                && Args::of(c).get("auth") != Some("trust")
                && env(c, "SLUICE_SUPERUSER_PASSWORD").is_none()
            {
                problems.push(format!(
                    "{at}: SCRAM without SLUICE_SUPERUSER_PASSWORD: nobody can log in"
                ));
            }
        }
    }
    problems
}

/// The volume mount under which `path` lies: (mount path, volume name).
fn mount_of(c: &Container, path: &str) -> Option<(String, String)> {
    c.volume_mounts.iter().flatten().find_map(|v| {
        let base = v.mount_path.trim_end_matches('/');
        (path == base || path.starts_with(&format!("{base}/"))).then(|| (v.mount_path.clone(), v.name.clone()))
    })
}

/// The claim a pod volume of `w` names.
fn claim_of(w: &Workload, volume: &str) -> Option<String> {
    let spec = w.pod.spec.as_ref()?;
    let v = spec.volumes.iter().flatten().find(|v| v.name == volume)?;
    Some(v.persistent_volume_claim.as_ref()?.claim_name.clone())
}

/// A local --checkpoint-dir lies on a ReadWriteMany claim that every worker
/// mounts at the same path; every claimed volume exists.
fn checkpoint_volume(m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    let workloads = m.workloads();
    for w in &workloads {
        for v in w.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(claim) = &v.persistent_volume_claim else {
                continue;
            };
            if !m
                .claims
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(claim.claim_name.as_str()))
            {
                problems.push(format!(
                    "{w}: volume {} claims {}, which is not defined",
                    v.name, claim.claim_name
                ));
            }
        }
    }
    let Some(master) = workloads.iter().find(|w| w.role == "master") else {
        return problems;
    };
    let c = &master.containers()[0];
    let dir = Args::of(c).get("checkpoint-dir").unwrap_or_default().to_string();
    if dir.starts_with("hdfs://") {
        return problems;
    }
    let Some((mount, claim)) = mount_of(c, &dir).and_then(|(p, v)| Some((p, claim_of(master, &v)?))) else {
        return vec![format!(
            "{master}: --checkpoint-dir {dir:?} is on no PersistentVolumeClaim"
        )];
    };
    let shared = m.claims.iter().any(|c| {
        c.metadata.name.as_deref() == Some(claim.as_str())
            && c.spec
                .iter()
                .flat_map(|s| s.access_modes.iter().flatten())
                .any(|a| a == "ReadWriteMany")
    });
    if !shared {
        problems.push(format!(
            "claim {claim} (--checkpoint-dir) is not ReadWriteMany: workers share it"
        ));
    }
    for w in workloads.iter().filter(|w| w.role == "worker") {
        let same = w.containers().iter().all(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|v| v.mount_path == mount && claim_of(w, &v.name).as_deref() == Some(claim.as_str()))
        });
        if !same {
            problems.push(format!(
                "{w}: does not mount claim {claim} at {mount}, the master's --checkpoint-dir"
            ));
        }
    }
    problems
}

/// Requests and limits of CPU and memory, each request within its limit.
fn resources(c: &Container) -> Vec<String> {
    let r = c.resources.clone().unwrap_or_default();
    let (requests, limits) = (r.requests.unwrap_or_default(), r.limits.unwrap_or_default());
    let mut problems = Vec::new();
    for resource in ["cpu", "memory"] {
        let request = requests.get(resource).and_then(|q| quantity(&q.0));
        let limit = limits.get(resource).and_then(|q| quantity(&q.0));
        match (request, limit) {
            (Some(r), Some(l)) if r <= l => {}
            (Some(_), Some(_)) => problems.push(format!("{resource} request exceeds its limit")),
            _ => problems.push(format!("{resource} needs a request and a limit")),
        }
    }
    problems
}

/// A Kubernetes quantity (`500m`, `2`, `4Gi`, `1G`) as a number.
fn quantity(q: &str) -> Option<f64> {
    let units = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(suffix, scale)| q.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((q, 1.0));
    number.parse::<f64>().ok().map(|n| n * scale)
}

#[test]
fn quantities_and_help_parse() {
    assert_eq!(quantity("500m"), Some(0.5));
    assert_eq!(quantity("2"), Some(2.0));
    assert_eq!(quantity("4Gi"), Some(4.0 * 1024f64.powi(3)));
    assert_eq!(quantity("lots"), None);
    let h = parse_help(
        "Usage: sluice worker [OPTIONS] --id <ID>\n\nOptions:\n      --id <ID>  x\n      --listen <L>  y\n      \
         --insecure  z\n  -h, --help  p\n",
    );
    assert_eq!(h.required, BTreeSet::from(["id".to_string()]));
    assert_eq!(h.flags.get("listen"), Some(&true));
    assert_eq!(h.flags.get("insecure"), Some(&false));
    assert_eq!(h.flags.get("help"), Some(&false));
}
