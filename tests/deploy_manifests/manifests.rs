//! Loading `deploy/kubernetes/` into k8s-openapi's types, and the small
//! edits the `*_are_caught` tests make to a copy of it.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, PodTemplateSpec, Secret, Service};
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One YAML document: where it came from and its content.
#[derive(Debug, Clone)]
pub struct Document {
    pub source: String,
    pub value: Value,
}

/// Every object of the manifests, by kind.
#[derive(Debug, Default)]
pub struct Manifests {
    pub statefulsets: Vec<StatefulSet>,
    pub deployments: Vec<Deployment>,
    pub services: Vec<Service>,
    pub claims: Vec<PersistentVolumeClaim>,
    pub secrets: Vec<Secret>,
}

/// A pod template that runs `sluice <role>`: masters in a StatefulSet,
/// workers in a Deployment.
pub struct Workload<'a> {
    pub kind: &'static str,
    pub name: String,
    pub role: &'static str,
    pub pod: &'a PodTemplateSpec,
}

impl Workload<'_> {
    pub fn containers(&self) -> &[Container] {
        self.pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
    }

    pub fn labels(&self) -> std::collections::BTreeMap<String, String> {
        self.pod
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }
}

impl std::fmt::Display for Workload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

impl Manifests {
    /// Parses each document into the type its `apiVersion` and `kind`
    /// name; any other kind, or a field the type drops, is an error.
    pub fn from_documents(docs: &[Document]) -> Result<Manifests, String> {
        let mut m = Manifests::default();
        for doc in docs {
            let api = doc.value["apiVersion"].as_str().unwrap_or_default();
            let kind = doc.value["kind"].as_str().unwrap_or_default();
            match (api, kind) {
                ("apps/v1", "StatefulSet") => m.statefulsets.push(typed(doc)?),
                ("apps/v1", "Deployment") => m.deployments.push(typed(doc)?),
                ("v1", "Service") => m.services.push(typed(doc)?),
                ("v1", "PersistentVolumeClaim") => m.claims.push(typed(doc)?),
                ("v1", "Secret") => m.secrets.push(typed(doc)?),
                _ => {
                    return Err(format!(
                        "{}: {api}/{kind} is not a kind these manifests use (StatefulSet, Deployment, Service, \
                         PersistentVolumeClaim, Secret); add it to the test with its k8s-openapi type",
                        doc.source
                    ));
                }
            }
        }
        Ok(m)
    }

    /// Masters (StatefulSets) first, then workers (Deployments).
    pub fn workloads(&self) -> Vec<Workload<'_>> {
        let masters = self.statefulsets.iter().filter_map(|s| {
            let spec = s.spec.as_ref()?;
            Some(Workload {
                kind: "StatefulSet",
                name: s.metadata.name.clone().unwrap_or_default(),
                role: "master",
                pod: &spec.template,
            })
        });
        let workers = self.deployments.iter().filter_map(|d| {
            let spec = d.spec.as_ref()?;
            Some(Workload {
                kind: "Deployment",
                name: d.metadata.name.clone().unwrap_or_default(),
                role: "worker",
                pod: &spec.template,
            })
        });
        masters.chain(workers).collect()
    }
}

/// `doc` as a `T`, re-serialised and compared with the original: a field
/// the Kubernetes type does not have is dropped on the way (serde ignores
/// unknown fields), so it shows up as lost. The type may add fields
/// (`apiVersion` and `kind` of nested objects), not lose or change any.
fn typed<T: DeserializeOwned + Serialize>(doc: &Document) -> Result<T, String> {
    let kind = doc.value["kind"].as_str().unwrap_or_default();
    let object: T =
        serde_json::from_value(doc.value.clone()).map_err(|e| format!("{}: not a valid {kind}: {e}", doc.source))?;
    let back = serde_json::to_value(&object).map_err(|e| format!("{}: {e}", doc.source))?;
    let mut lost = Vec::new();
    lost_fields(&doc.value, &back, "", &mut lost);
    if lost.is_empty() {
        Ok(object)
    } else {
        Err(format!(
            "{}: fields a {kind} does not have (misspelt or misplaced?): {}",
            doc.source,
            lost.join(", ")
        ))
    }
}

/// Paths in `input` that `output` lacks or holds differently.
fn lost_fields(input: &Value, output: &Value, path: &str, lost: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}/{key}");
                match b.get(key) {
                    Some(other) => lost_fields(value, other, &here, lost),
                    None => lost.push(here),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                lost_fields(x, y, &format!("{path}/{i}"), lost);
            }
        }
        (a, b) if a == b => {}
        (a, b) => lost.push(format!("{path} ({a} became {b})")),
    }
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the repository.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every document of every file under `deploy/kubernetes/`, files in name
/// order.
pub fn load_documents() -> Vec<Document> {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.ends_with(".yaml"),
            "{name}: deploy/kubernetes holds only manifests (*.yaml), which `kubectl apply -f` reads"
        );
        let before = docs.len();
        docs.extend(documents(&file));
        assert!(docs.len() > before, "{name} holds no object");
    }
    assert!(!docs.is_empty(), "no manifests under {}", dir.display());
    docs
}

fn documents(file: &Path) -> Vec<Document> {
    use k8s_openapi::serde::Deserialize;
    let text = std::fs::read_to_string(file).unwrap();
    let name = format!("deploy/kubernetes/{}", file.file_name().unwrap().to_string_lossy());
    serde_yaml::Deserializer::from_str(&text)
        .enumerate()
        .map(|(i, doc)| {
            let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: document {i}: {e}"));
            assert!(value.is_object(), "{name}: document {i} is not an object: {value}");
            Document {
                source: format!("{name} (document {i}, {})", value["kind"]),
                value,
            }
        })
        .collect()
}

/// The first document of `kind`.
fn document_mut<'a>(docs: &'a mut [Document], kind: &str) -> &'a mut Value {
    &mut docs
        .iter_mut()
        .find(|d| d.value["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the manifests"))
        .value
}

pub fn index_where(docs: &[Document], pred: impl Fn(&Document) -> bool) -> usize {
    docs.iter().position(pred).expect("a matching document")
}

/// Sets the JSON pointer `pointer` of the first `kind` to `value`, adding
/// the last key if its parent exists.
pub fn set(docs: &mut [Document], kind: &str, pointer: &str, value: Value) {
    let doc = document_mut(docs, kind);
    if let Some(slot) = doc.pointer_mut(pointer) {
        *slot = value;
        return;
    }
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let key = key.replace("~1", "/").replace("~0", "~");
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(key, value);
        }
        _ => panic!("{kind}: {parent} is not an object"),
    }
}

/// Replaces the first container argument of `kind` that starts with
/// `prefix`.
pub fn set_arg(docs: &mut [Document], kind: &str, prefix: &str, arg: &str) {
    let args = document_mut(docs, kind)
        .pointer_mut("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array_mut)
        .expect("container args");
    let slot = args
        .iter_mut()
        .find(|a| a.as_str().is_some_and(|a| a.starts_with(prefix)))
        .unwrap_or_else(|| panic!("{kind} has no argument starting with {prefix}"));
    *slot = Value::String(arg.into());
}

/// Drops every object key whose value is null (how a test removes a field).
pub fn remove_nulls(docs: &mut [Document]) {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                map.values_mut().for_each(walk);
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    docs.iter_mut().for_each(|d| walk(&mut d.value));
}

/// The workspace's `rust-version`.
pub fn rust_version() -> String {
    read("Cargo.toml")
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("rust-version in the workspace Cargo.toml")
        .to_string()
}
