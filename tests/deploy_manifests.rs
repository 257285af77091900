//! `deploy/` checked without a Kubernetes cluster or a Docker daemon (issue
//! 24, "Deploying it"):
//!
//! - every YAML document under `deploy/kubernetes/` parses into the
//!   Kubernetes API's own type for its kind (k8s-openapi) and loses no field
//!   on the way (a misspelt or misplaced field would be dropped by the API
//!   server, silently);
//! - the containers' flags are the ones `sluice master --help` / `sluice
//!   worker --help` list, with values the real binary accepts;
//! - ports in flags, container ports, Services and probes agree; workers'
//!   `--masters` are the master StatefulSet's stable DNS names; storage,
//!   the Secret, resources and the grace period are there;
//! - `deploy/grafana/sluice.json` queries only series `/metrics` exports;
//! - `deploy/Dockerfile` builds and runs what the manifests expect.
//!
//! Each check returns the problems it finds; the `*_are_caught` tests break a
//! copy of the files and expect the check to report it.

#[path = "deploy_manifests/checks.rs"]
mod checks;
#[path = "deploy_manifests/dashboard.rs"]
mod dashboard;
#[path = "deploy_manifests/dockerfile.rs"]
mod dockerfile;
#[path = "deploy_manifests/manifests.rs"]
mod manifests;

use checks::*;
use dashboard::*;
use dockerfile::*;
use manifests::*;
use serde_json::{Value, json};

fn assert_clean(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

/// `problems` contains one that mentions `needle`.
fn assert_caught(problems: &[String], needle: &str) {
    assert!(
        problems.iter().any(|p| p.contains(needle)),
        "expected a problem mentioning {needle:?}, got {problems:#?}"
    );
}

fn manifests(values: &[Document]) -> Manifests {
    Manifests::from_documents(values).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_document_is_a_known_kubernetes_object_without_unknown_fields() {
    let docs = load_documents();
    let m = manifests(&docs);
    assert_eq!(m.statefulsets.len(), 1, "one StatefulSet of masters");
    assert_eq!(m.deployments.len(), 1, "one Deployment of workers");
    assert!(m.services.len() >= 2, "a headless Service and a client Service");
    assert!(!m.claims.is_empty(), "the checkpoint volume's claim");
    assert!(!m.secrets.is_empty(), "the superuser's Secret");
}

#[test]
fn unknown_kinds_and_fields_are_caught() {
    let docs = load_documents();
    let mut typo = docs.clone();
    set(&mut typo, "Deployment", "/spec/replica", json!(2));
    let err = Manifests::from_documents(&typo).unwrap_err();
    assert!(err.contains("/spec/replica"), "{err}");

    let mut misplaced = docs.clone();
    set(
        &mut misplaced,
        "StatefulSet",
        "/spec/template/spec/containers/0/probe",
        json!({}),
    );
    let err = Manifests::from_documents(&misplaced).unwrap_err();
    assert!(err.contains("containers/0/probe"), "{err}");

    let mut wrong_type = docs.clone();
    set(&mut wrong_type, "Deployment", "/spec/replicas", json!("two"));
    assert!(Manifests::from_documents(&wrong_type).is_err());

    let mut ingress = docs.clone();
    set(&mut ingress, "Secret", "/kind", json!("Ingress"));
    let err = Manifests::from_documents(&ingress).unwrap_err();
    assert!(err.contains("Ingress"), "{err}");
}

#[test]
fn container_flags_are_the_binarys() {
    assert_clean("flags", check_flags(&manifests(&load_documents())));
}

#[test]
fn wrong_flags_are_caught() {
    let docs = load_documents();
    let mut unknown = docs.clone();
    set_arg(&mut unknown, "Deployment", "--slots=", "--slot=4");
    assert_caught(&check_flags(&manifests(&unknown)), "--slot");

    let mut bad_value = docs.clone();
    set_arg(&mut bad_value, "Deployment", "--slots=", "--slots=many");
    assert_caught(&check_flags(&manifests(&bad_value)), "many");

    let mut undefined_var = docs.clone();
    set_arg(&mut undefined_var, "Deployment", "--id=", "--id=$(NODE_NAME)");
    assert_caught(&check_flags(&manifests(&undefined_var)), "NODE_NAME");

    let mut missing_label = docs.clone();
    set(
        &mut missing_label,
        "Deployment",
        "/spec/template/metadata/labels/sluice.io~1zone",
        Value::Null,
    );
    remove_nulls(&mut missing_label);
    assert_caught(&check_flags(&manifests(&missing_label)), "sluice.io/zone");

    let mut master_args_on_worker = docs.clone();
    set(
        &mut master_args_on_worker,
        "Deployment",
        "/spec/template/spec/containers/0/args/0",
        json!("master"),
    );
    assert_caught(&check_flags(&manifests(&master_args_on_worker)), "worker");

    let mut separate_value = docs.clone();
    set_arg(&mut separate_value, "Deployment", "--slots=", "--slots");
    assert_caught(&check_flags(&manifests(&separate_value)), "--slots");
}

#[test]
fn ports_agree_between_flags_containers_and_services() {
    assert_clean("ports", check_ports(&manifests(&load_documents())));
}

#[test]
fn port_mismatches_are_caught() {
    let docs = load_documents();
    let mut pg = docs.clone();
    set_arg(&mut pg, "StatefulSet", "--pg-listen=", "--pg-listen=0.0.0.0:5434");
    assert_caught(&check_ports(&manifests(&pg)), "5434");

    let mut unspecified = docs.clone();
    set_arg(
        &mut unspecified,
        "Deployment",
        "--advertise=",
        "--advertise=0.0.0.0:7171",
    );
    assert_caught(&check_ports(&manifests(&unspecified)), "--advertise");

    let mut bound_to_any = docs.clone();
    set_arg(
        &mut bound_to_any,
        "StatefulSet",
        "--data-listen=",
        "--data-listen=0.0.0.0:7072",
    );
    assert_caught(&check_ports(&manifests(&bound_to_any)), "--data-listen");

    let mut service = docs.clone();
    let i = index_where(&service, |d| d.value["spec"]["type"] == "ClusterIP");
    service[i].value["spec"]["ports"][1]["port"] = json!(80);
    assert_caught(&check_ports(&manifests(&service)), "80");

    let mut selector = docs.clone();
    let i = index_where(&selector, |d| d.value["spec"]["type"] == "ClusterIP");
    selector[i].value["spec"]["selector"]["app.kubernetes.io/component"] = json!("worker");
    assert_caught(&check_ports(&manifests(&selector)), "pgwire");
}

#[test]
fn workers_find_the_master_by_its_stable_dns_name() {
    assert_clean("masters", check_master_names(&manifests(&load_documents())));
}

#[test]
fn wrong_master_names_are_caught() {
    let docs = load_documents();
    for wrong in [
        "--masters=sluice-master:7070",
        "--masters=sluice-master-1.sluice-master:7070",
        "--masters=sluice-master-0.sluice:7070",
        "--masters=sluice-master-0.sluice-master:7071",
    ] {
        let mut d = docs.clone();
        set_arg(&mut d, "Deployment", "--masters=", wrong);
        assert_caught(&check_master_names(&manifests(&d)), "--masters");
    }
    // An even quorum; five replicas with --peers and --masters for three.
    let mut even = docs.clone();
    set(&mut even, "StatefulSet", "/spec/replicas", json!(4));
    assert_caught(&check_master_names(&manifests(&even)), "odd number");
    let mut five = docs.clone();
    set(&mut five, "StatefulSet", "/spec/replicas", json!(5));
    assert_caught(&check_master_names(&manifests(&five)), "--peers names");
    // A peer entry whose id is not its pod's name, or on another port.
    for wrong in [
        "--peers=m0=sluice-master-0.sluice-master:7070,sluice-master-1=sluice-master-1.sluice-master:7070,sluice-master-2=sluice-master-2.sluice-master:7070",
        "--peers=sluice-master-0=sluice-master-0.sluice-master:7071,sluice-master-1=sluice-master-1.sluice-master:7070,sluice-master-2=sluice-master-2.sluice-master:7070",
        "--peers=sluice-master-0=sluice-master-0.sluice-master:7070,sluice-master-1=sluice-master-1.sluice-master:7070",
    ] {
        let mut d = docs.clone();
        set_arg(&mut d, "StatefulSet", "--peers=", wrong);
        assert_caught(&check_master_names(&manifests(&d)), "--peers");
    }
    // One replica keeping the quorum's --peers.
    let mut one = docs.clone();
    set(&mut one, "StatefulSet", "/spec/replicas", json!(1));
    assert_caught(&check_master_names(&manifests(&one)), "one replica with --peers");
}

#[test]
fn probes_hit_health_on_the_http_port() {
    assert_clean("probes", check_probes(&manifests(&load_documents())));
}

#[test]
fn wrong_probes_are_caught() {
    let docs = load_documents();
    let mut path = docs.clone();
    set(
        &mut path,
        "StatefulSet",
        "/spec/template/spec/containers/0/livenessProbe/httpGet/path",
        json!("/healthz"),
    );
    assert_caught(&check_probes(&manifests(&path)), "/healthz");

    let mut port = docs.clone();
    set(
        &mut port,
        "StatefulSet",
        "/spec/template/spec/containers/0/readinessProbe/httpGet/port",
        json!("pgwire"),
    );
    assert_caught(&check_probes(&manifests(&port)), "readinessProbe");

    let mut none = docs.clone();
    set(
        &mut none,
        "Deployment",
        "/spec/template/spec/containers/0/livenessProbe",
        Value::Null,
    );
    remove_nulls(&mut none);
    assert_caught(&check_probes(&manifests(&none)), "livenessProbe");
}

#[test]
fn storage_secrets_resources_and_shutdown_are_set() {
    assert_clean("pods", check_pods(&manifests(&load_documents())));
}

#[test]
fn missing_storage_secrets_resources_and_grace_are_caught() {
    let docs = load_documents();
    let mut rwo = docs.clone();
    set(
        &mut rwo,
        "PersistentVolumeClaim",
        "/spec/accessModes/0",
        json!("ReadWriteOnce"),
    );
    assert_caught(&check_pods(&manifests(&rwo)), "ReadWriteMany");

    let mut elsewhere = docs.clone();
    set(
        &mut elsewhere,
        "Deployment",
        "/spec/template/spec/containers/0/volumeMounts/1/mountPath",
        json!("/ckpt"),
    );
    assert_caught(&check_pods(&manifests(&elsewhere)), "--checkpoint-dir");

    let mut hdfs = docs.clone();
    set_arg(
        &mut hdfs,
        "StatefulSet",
        "--checkpoint-dir=",
        "--checkpoint-dir=hdfs://nn:8020/ckpt",
    );
    assert_clean("hdfs checkpoints", check_pods(&manifests(&hdfs)));

    let mut secret = docs.clone();
    set(&mut secret, "Secret", "/metadata/name", json!("other"));
    assert_caught(&check_pods(&manifests(&secret)), "sluice-superuser");

    let mut grace = docs.clone();
    set(
        &mut grace,
        "Deployment",
        "/spec/template/spec/terminationGracePeriodSeconds",
        json!(30),
    );
    assert_caught(&check_pods(&manifests(&grace)), "terminationGracePeriodSeconds");

    let mut limits = docs.clone();
    set(
        &mut limits,
        "StatefulSet",
        "/spec/template/spec/containers/0/resources/limits/memory",
        json!("1Gi"),
    );
    assert_caught(&check_pods(&manifests(&limits)), "memory");

    let mut root = docs.clone();
    set(
        &mut root,
        "Deployment",
        "/spec/template/spec/securityContext/runAsNonRoot",
        json!(false),
    );
    assert_caught(&check_pods(&manifests(&root)), "runAsNonRoot");
}

#[test]
fn the_dashboard_queries_only_exported_series() {
    let exported = exported_metrics(&read("crates/sluice-server/src/metrics_export.rs"));
    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/sluice.json")).unwrap();
    assert_clean("dashboard", check_dashboard(&dashboard, &exported));
}

#[test]
fn dashboard_mistakes_are_caught() {
    let exported = exported_metrics(&read("crates/sluice-server/src/metrics_export.rs"));
    assert!(
        exported.contains("sluice_task_backpressure_seconds_total"),
        "{exported:?}"
    );
    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/sluice.json")).unwrap();
    let expr = "/panels/1/targets/0/expr";
    let mut typo = dashboard.clone();
    *typo.pointer_mut(expr).unwrap() = json!("rate(sluice_pipeline_rows_inn_total[1m])");
    assert_caught(&check_dashboard(&typo, &exported), "sluice_pipeline_rows_inn_total");

    let mut old = dashboard.clone();
    old["schemaVersion"] = json!(30);
    assert_caught(&check_dashboard(&old, &exported), "schemaVersion");

    let mut fixed_source = dashboard.clone();
    fixed_source["panels"][1]["datasource"] = json!({"type": "prometheus", "uid": "prod"});
    assert_caught(&check_dashboard(&fixed_source, &exported), "datasource");

    let mut no_credit_panel = dashboard.clone();
    let panels = no_credit_panel["panels"].as_array_mut().unwrap();
    panels.retain(|p| !p.to_string().contains("sluice_worker_credit_wait_seconds_total"));
    assert_caught(&check_dashboard(&no_credit_panel, &exported), "credit");
}

#[test]
fn the_dockerfile_builds_and_runs_what_the_manifests_expect() {
    let m = manifests(&load_documents());
    assert_clean(
        "Dockerfile",
        check_dockerfile(&read("deploy/Dockerfile"), &m, &rust_version()),
    );
}

#[test]
fn dockerfile_mistakes_are_caught() {
    let m = manifests(&load_documents());
    let text = read("deploy/Dockerfile");
    let rust = rust_version();
    let check = |from: &str, to: &str| {
        assert!(text.contains(from), "{from:?} is not in the Dockerfile");
        check_dockerfile(&text.replacen(from, to, 1), &m, &rust)
    };
    assert_caught(&check("USER 10001:10001", "USER root"), "USER");
    assert_caught(&check("USER 10001:10001", "USER 10002"), "runAsUser");
    assert_caught(&check("FROM debian:bookworm-slim", "FROM debian"), "debian");
    assert_caught(&check("FROM debian:bookworm-slim", "FROM debian:latest"), "latest");
    assert_caught(&check("FROM rust:1.94-bookworm", "FROM rust:1.93-bookworm"), "1.93");
    assert_caught(&check(" 8090 ", " "), "8090");
    assert_caught(&check("EXPOSE 7070", "EXPOSE 9999 7070"), "9999");
    assert_caught(&check("--release --locked", "--locked"), "--release");
    assert_caught(&check("ENTRYPOINT [\"sluice\"]", "ENTRYPOINT [\"sh\"]"), "ENTRYPOINT");
    assert_caught(
        &check(
            "/usr/local/bin/sluice /usr/local/bin/sluice",
            "/usr/local/bin/sluice /opt/sluice",
        ),
        "/usr/local/bin/sluice",
    );
}
