//! Policy files end to end: every `inputs/ok_*.toml` loads, every `inputs/err_*.toml` fails
//! with the snapshotted, located messages; the shipped `config/*.toml` load too.

use std::path::{Path, PathBuf};

use signpost_policy::CompiledPolicy;

fn inputs(prefix: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/inputs exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(prefix) && name.ends_with(".toml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no {prefix}*.toml inputs");
    files
}

fn load(path: &Path) -> Result<CompiledPolicy, signpost_policy::PolicyError> {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    let name = format!("{}", path.file_name().unwrap().to_string_lossy());
    CompiledPolicy::from_toml(&text, &name, path.parent().unwrap(), None)
}

#[test]
fn ok_inputs_load() {
    for path in inputs("ok_") {
        if let Err(e) = load(&path) {
            panic!("{} should load:\n{e}", path.display());
        }
    }
}

#[test]
fn err_inputs_report_located_problems() {
    for path in inputs("err_") {
        let err = match load(&path) {
            Ok(_) => panic!("{} should fail", path.display()),
            Err(e) => e,
        };
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        for p in err.problems() {
            assert!(p.location.is_some(), "{stem}: unlocated problem {p}");
        }
        insta::assert_snapshot!(stem, err.to_string());
    }
}

#[test]
fn shipped_configs_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    for name in ["default.toml", "example.toml"] {
        let path = root.join(name);
        if let Err(e) = CompiledPolicy::load(&path, None) {
            panic!("config/{name} should load:\n{e}");
        }
    }
}
