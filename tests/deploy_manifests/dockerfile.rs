//! `deploy/Dockerfile` read as instructions (no Docker daemon here).

use super::manifests::Manifests;
use std::collections::BTreeSet;

/// Where the image puts the binary (on PATH, so ENTRYPOINT ["sluice"]).
const BINARY: &str = "/usr/local/bin/sluice";

/// `(INSTRUCTION, arguments)`, continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let (part, continued) = match line.trim_end().strip_suffix('\\') {
            Some(part) => (part, true),
            None => (line, false),
        };
        current.push_str(part.trim());
        current.push(' ');
        if !continued && !current.trim().is_empty() {
            let (name, args) = current.trim().split_once(' ').unwrap_or((current.trim(), ""));
            out.push((name.to_ascii_uppercase(), args.trim().to_string()));
            current.clear();
        } else if !continued {
            current.clear();
        }
    }
    out
}

/// One `FROM … [AS name]` and the instructions after it.
struct Stage {
    image: String,
    name: Option<String>,
    body: Vec<(String, String)>,
}

fn stages(text: &str) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    for (name, args) in instructions(text) {
        if name == "FROM" {
            let words: Vec<&str> = args.split_whitespace().filter(|w| !w.starts_with("--")).collect();
            stages.push(Stage {
                image: words.first().copied().unwrap_or_default().to_string(),
                name: (words.len() == 3 && words[1].eq_ignore_ascii_case("as")).then(|| words[2].to_string()),
                body: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.body.push((name, args));
        }
    }
    stages
}

/// `1.94` → `[1, 94]`, for comparing versions.
fn version(text: &str) -> Vec<u32> {
    text.split('.').map_while(|n| n.parse().ok()).collect()
}

/// Pinned base images, a release build of `sluice` copied to [`BINARY`],
/// a non-root numeric user the pods run as, the manifests' ports exposed.
pub fn check_dockerfile(text: &str, m: &Manifests, rust_version: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let stages = stages(text);
    for s in &stages {
        let tag = s.image.split_once(':').map(|(_, t)| t);
        if !matches!(tag, Some(t) if t != "latest") && !s.image.contains('@') {
            problems.push(format!("FROM {}: pin a tag (not latest) or a digest", s.image));
        }
    }
    let (Some(build), Some(run)) = (stages.iter().find(|s| s.image.starts_with("rust:")), stages.last()) else {
        return vec!["a rust: build stage and a runtime stage are expected".into()];
    };
    let toolchain = build
        .image
        .trim_start_matches("rust:")
        .split('-')
        .next()
        .unwrap_or_default();
    if version(toolchain) < version(rust_version) {
        problems.push(format!(
            "FROM {}: Rust {toolchain} is older than rust-version {rust_version}",
            build.image
        ));
    }
    let build_runs: String = build
        .body
        .iter()
        .filter(|(i, _)| i == "RUN")
        .map(|(_, a)| a.as_str())
        .collect();
    for needed in ["cargo build", "--release", "--bin sluice", "target/release/sluice"] {
        if !build_runs.contains(needed) {
            problems.push(format!("the build stage does not run `{needed}`"));
        }
    }
    problems.extend(runtime_stage(run, build, &build_runs, m));
    problems
}

fn runtime_stage(run: &Stage, build: &Stage, build_runs: &str, m: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    let from_build = format!("--from={}", build.name.as_deref().unwrap_or("0"));
    let copied = run.body.iter().any(|(i, args)| {
        let words: Vec<&str> = args.split_whitespace().collect();
        i == "COPY" && words.first() == Some(&from_build.as_str()) && words.last() == Some(&BINARY) && {
            let source = words[words.len() - 2];
            source.ends_with("target/release/sluice") || build_runs.contains(source)
        }
    });
    if !copied {
        problems.push(format!(
            "the runtime stage does not COPY {from_build} the release binary to {BINARY}"
        ));
    }
    let user = run
        .body
        .iter()
        .rev()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.clone())
        .unwrap_or_default();
    let uid = user.split(':').next().unwrap_or_default();
    match uid.parse::<i64>() {
        Ok(0) | Err(_) => problems.push(format!("USER {user:?}: a numeric, non-root user is expected")),
        Ok(uid) => {
            for w in m.workloads() {
                let run_as = w
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.security_context.as_ref()?.run_as_user);
                if run_as != Some(uid) {
                    problems.push(format!("{w}: runAsUser {run_as:?} is not the image's USER {uid}"));
                }
            }
        }
    }
    let exposed: BTreeSet<i32> = run
        .body
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .flat_map(|(_, a)| {
            a.split_whitespace()
                .map(|p| p.trim_end_matches("/tcp").parse().unwrap_or(-1))
        })
        .collect();
    let ports: BTreeSet<i32> = m
        .workloads()
        .iter()
        .flat_map(|w| {
            w.containers()
                .iter()
                .flat_map(|c| c.ports.iter().flatten().map(|p| p.container_port))
        })
        .collect();
    for p in ports.difference(&exposed) {
        problems.push(format!("container port {p} is not EXPOSEd"));
    }
    for p in exposed.difference(&ports) {
        problems.push(format!("EXPOSE {p}: no container listens there"));
    }
    let entrypoint = run
        .body
        .iter()
        .rev()
        .find(|(i, _)| i == "ENTRYPOINT")
        .map(|(_, a)| a.as_str());
    let program = entrypoint
        .and_then(|e| serde_json::from_str::<Vec<String>>(e).ok())
        .and_then(|v| v.first().cloned());
    if !matches!(program.as_deref(), Some("sluice") | Some(BINARY)) {
        problems.push(format!(
            "ENTRYPOINT {entrypoint:?}: [\"sluice\"] (exec form) is expected"
        ));
    }
    problems
}

#[test]
fn instructions_join_continuations_and_drop_comments() {
    let text = "# c\nFROM a:1 AS b\nRUN x \\\n    && y\n\nUSER 5\n";
    assert_eq!(
        instructions(text),
        [
            ("FROM".to_string(), "a:1 AS b".to_string()),
            ("RUN".into(), "x && y".into()),
            ("USER".into(), "5".into())
        ]
    );
    assert!(version("1.93") < version("1.94") && version("1.100") > version("1.94"));
}
