//! Builds the dashboard (`ui/`, a Vite project) and embeds its files.
//!
//! Runs `npm ci` (when `ui/node_modules` is missing or older than the lock
//! file) and `npm run build` into `OUT_DIR`, then writes `ui_assets.rs`: a
//! table of `(path, include_bytes!(file))` that `http_ui.rs` includes.
//! Reruns only when the dashboard's sources change. Without npm the build
//! fails and says what to install. `SLUICE_UI_SKIP_BUILD=1` embeds a
//! placeholder page instead (for quick back-end work; never for releases).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the dashboard's build reads, each a file or directory under `ui/`
/// that exists: Cargo treats a `rerun-if-changed` path that does not exist as
/// always changed, so one missing entry (there was a `public`) reran npm and
/// relinked the server and every binary on each build. The build fails if an
/// entry is missing; a new input (e.g. Vite's `public/`) belongs here.
/// Not `ui/` as a whole: Cargo would scan `node_modules`, which `npm ci` rewrites.
const UI_INPUTS: [&str; 6] = [
    "src",
    "index.html",
    "package.json",
    "package-lock.json",
    "vite.config.ts",
    "tsconfig.json",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let ui = manifest.join("../../ui");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let dist = out.join("ui-dist");
    for input in UI_INPUTS {
        let path = ui.join(input);
        assert!(
            path.exists(),
            "{} is listed in UI_INPUTS but does not exist; Cargo would rerun this script on every build",
            path.display()
        );
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-env-changed=SLUICE_UI_SKIP_BUILD");
    if std::env::var_os("SLUICE_UI_SKIP_BUILD").is_some_and(|v| v != "0") {
        placeholder(&dist);
    } else {
        build(&ui, &dist);
    }
    write_table(&dist, &out.join("ui_assets.rs"));
}

fn npm(ui: &Path, args: &[&str]) {
    let status = Command::new("npm").args(args).current_dir(ui).status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "`npm {}` in {} failed ({s}); see its output above",
            args.join(" "),
            ui.display()
        ),
        Err(e) => panic!(
            "building the dashboard needs Node.js and npm (`apt-get install nodejs npm`), but running npm failed: {e}. \
             Set SLUICE_UI_SKIP_BUILD=1 to build without the dashboard."
        ),
    }
}

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn build(ui: &Path, dist: &Path) {
    let installed = modified(&ui.join("node_modules/.package-lock.json"));
    let locked = modified(&ui.join("package-lock.json"));
    if installed.is_none() || installed < locked {
        npm(ui, &["ci", "--no-audit", "--no-fund"]);
    }
    let dist_arg = dist.to_str().expect("OUT_DIR is UTF-8");
    npm(ui, &["run", "build", "--", "--outDir", dist_arg, "--emptyOutDir"]);
}

fn placeholder(dist: &Path) {
    let _ = std::fs::remove_dir_all(dist);
    std::fs::create_dir_all(dist).expect("create dist");
    std::fs::write(
        dist.join("index.html"),
        "<!doctype html><title>Sluice</title><p>This binary was built with SLUICE_UI_SKIP_BUILD: \
         the dashboard is not included. The REST API is at <a href=\"/api/v1/openapi.json\">/api/v1</a>.</p>",
    )
    .expect("write placeholder");
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn write_table(dist: &Path, target: &Path) {
    let mut all = Vec::new();
    files(dist, &mut all);
    assert!(
        all.iter().any(|p| p.ends_with("index.html")),
        "the dashboard build produced no index.html in {}",
        dist.display()
    );
    let mut code = String::from(
        "/// Every file of the built dashboard: (URL path, bytes).\npub static UI_ASSETS: &[(&str, &[u8])] = &[\n",
    );
    for file in all {
        let rel = file.strip_prefix(dist).expect("under dist");
        let url: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        code.push_str(&format!(
            "    ({:?}, include_bytes!({:?})),\n",
            format!("/{}", url.join("/")),
            file
        ));
    }
    code.push_str("];\n");
    std::fs::write(target, code).expect("write ui_assets.rs");
}
