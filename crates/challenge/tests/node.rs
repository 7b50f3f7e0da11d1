//! The page's own JavaScript, run under Node.js: its SHA-256 against known vectors and Rust's
//! `sha2`, and its proof of work (with Web Crypto and with its own hash) answered and checked by
//! the edge's code. Needs `node`; without it the tests say so and pass, unless
//! `SIGNPOST_NO_SKIP=1`, which makes them fail.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use scraper::{Html, Selector};
use sha2::{Digest, Sha256};
use signpost_challenge::{
    Difficulty, Key, KeyRing, Lang, PageInput, Settings, Visitor, WORKER, meets, render, work_hash,
};

/// Evaluates the worker's source as a worker would, with `self` standing for the worker scope;
/// mode `vectors` hashes each hex line of a file with the worker's own SHA-256, modes `subtle`
/// and `own` run the worker's message handler on a challenge and print the answer.
const HARNESS: &str = r#"
const fs = require("fs");
const [source, mode, arg1, arg2] = process.argv.slice(2);
const progress = [];
let answered;
const found = new Promise((resolve) => { answered = resolve; });
const self = {
  crypto: mode === "subtle" ? globalThis.crypto : undefined,
  postMessage(m) { if (m.nonce !== undefined) answered(m.nonce); else progress.push(m.tried); },
};
const api = new Function("self", fs.readFileSync(source, "utf8") + "\nreturn { sha256 };")(self);
if (mode === "vectors") {
  for (const hex of fs.readFileSync(arg1, "utf8").split("\n")) {
    const bytes = Uint8Array.from(Buffer.from(hex, "hex"));
    process.stdout.write(Buffer.from(api.sha256(bytes)).toString("hex") + "\n");
  }
} else {
  self.onmessage({ data: { challenge: arg1, difficulty: Number(arg2) } });
  found.then((nonce) => console.log(JSON.stringify({ nonce, progress })));
}
"#;

fn node() -> Option<&'static str> {
    let found = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("SIGNPOST_NO_SKIP").is_none(),
            "node is not installed and SIGNPOST_NO_SKIP is set"
        );
        eprintln!("SKIPPED: node is not installed; the page's JavaScript was not run");
        return None;
    }
    Some("node")
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("signpost-challenge-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(contents))
            .unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(node: &str, harness: &Path, args: &[&str]) -> String {
    let out = Command::new(node).arg(harness).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The worker source as the page ships it, read back out of a rendered page.
fn shipped_worker(token: &str, difficulty: Difficulty) -> String {
    let page = render(&PageInput {
        lang: Lang::En,
        host: "shop.example",
        branding: "",
        footer: "",
        ray_id: "r",
        token,
        difficulty,
        return_to: "/",
        body_not_resent: false,
        fallback_delay_secs: 10,
    });
    let doc = Html::parse_document(&page.html);
    let worker = doc
        .select(&Selector::parse("script#challenge-worker").unwrap())
        .next()
        .unwrap()
        .text()
        .collect::<String>();
    assert_eq!(worker, WORKER);
    worker
}

#[test]
fn the_page_sha256_matches_known_vectors() {
    let Some(node) = node() else { return };
    let scratch = Scratch::new("vectors");
    let worker = scratch.file("worker.js", WORKER.as_bytes());
    let harness = scratch.file("harness.js", HARNESS.as_bytes());
    // FIPS 180-4 examples, then every length around the padding boundaries, and a long input.
    let mut inputs: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"abc".to_vec(),
        b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".to_vec(),
    ];
    let known = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    ];
    for len in [
        1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 100_000,
    ] {
        inputs.push((0..len).map(|i| (i * 31 + 7) as u8).collect());
    }
    let lines: Vec<String> = inputs.iter().map(hex).collect();
    let list = scratch.file("inputs.txt", lines.join("\n").as_bytes());
    let out = run(
        node,
        &harness,
        &[worker.to_str().unwrap(), "vectors", list.to_str().unwrap()],
    );
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), inputs.len());
    assert_eq!(&got[..3], &known);
    for (input, got) in inputs.iter().zip(&got) {
        assert_eq!(*got, hex(Sha256::digest(input)), "{} bytes", input.len());
    }
}

fn hex(bytes: impl AsRef<[u8]>) -> String {
    bytes.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The page's solver, with Web Crypto (as in a secure context) and with its own SHA-256 (as on a
/// plain-HTTP zone), finds the first answer, and the edge accepts it.
#[test]
fn the_page_solver_answers_what_the_edge_accepts() {
    let Some(node) = node() else { return };
    let ring = KeyRing::new(Key::new(1, &[7; 32]).unwrap(), None).unwrap();
    let settings = Settings::default();
    let visitor = Visitor {
        zone: "shop.example",
        addr: "192.0.2.10".parse().unwrap(),
        user_agent: b"Mozilla/5.0",
    };
    let now = 1_800_000_000;
    let scratch = Scratch::new("solve");
    let harness = scratch.file("harness.js", HARNESS.as_bytes());
    for (mode, zeros, random) in [
        ("subtle", 4, [1u8; 16]),
        ("own", 3, [2; 16]),
        ("own", 0, [3; 16]),
    ] {
        let difficulty = Difficulty::new(zeros).unwrap();
        let token = ring.issue_challenge(&visitor, &settings, difficulty, now, random);
        let worker = scratch.file("worker.js", shipped_worker(&token, difficulty).as_bytes());
        let out = run(
            node,
            &harness,
            &[worker.to_str().unwrap(), mode, &token, &zeros.to_string()],
        );
        let answer: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let nonce = answer["nonce"].as_u64().unwrap();
        let first = (0u64..)
            .find(|n| {
                meets(
                    &work_hash(token.as_bytes(), n.to_string().as_bytes()),
                    difficulty,
                )
            })
            .unwrap();
        assert_eq!(nonce, first, "{mode}: the smallest answer");
        let solved = ring
            .check_solution(
                token.as_bytes(),
                nonce.to_string().as_bytes(),
                &visitor,
                &settings,
                now + 2,
            )
            .unwrap_or_else(|e| panic!("{mode}: refused: {e}"));
        assert_eq!(solved.difficulty, difficulty);
        if first >= 4096 {
            let progress = answer["progress"].as_array().unwrap();
            assert!(!progress.is_empty(), "{mode}: progress is reported");
        }
    }
}

/// Runs the page's script with the page's own data against a stand-in DOM: `document` holds the
/// rendered form's values, `Worker` runs the worker's source (from the blob the script makes) in
/// a scope of its own, messages cross asynchronously. Prints what the script did: the nonce it
/// submitted, the live region's last text, whether the fallback was shown.
const PAGE_HARNESS: &str = r#"
const fs = require("fs");
const [dataFile, mode] = process.argv.slice(2);
const data = JSON.parse(fs.readFileSync(dataFile, "utf8"));
const said = [];
const status = { set textContent(t) { said.push(t); }, get textContent() { return said[said.length - 1]; } };
const fallback = { hidden: true };
const form = {
  dataset: data.dataset,
  elements: { token: { value: data.token }, nonce: { value: "" } },
  submit() {
    console.log(JSON.stringify({ submitted: form.elements.nonce.value, said, fallbackShown: !fallback.hidden }));
    process.exit(0);
  },
};
const elements = {
  "challenge-form": form,
  "challenge-status": status,
  "challenge-fallback": fallback,
  "challenge-worker": { textContent: data.worker },
};
globalThis.document = { getElementById: (id) => elements[id] || null, documentElement: { lang: data.lang } };
const blobs = new Map();
globalThis.Blob = class { constructor(parts) { this.text = parts.join(""); } };
globalThis.URL = { createObjectURL(blob) { const url = "blob:" + blobs.size; blobs.set(url, blob.text); return url; } };
globalThis.Worker = class {
  constructor(url) {
    if (mode === "no-worker") throw new Error("workers are blocked");
    const scope = {
      crypto: globalThis.crypto,
      postMessage: (m) => setImmediate(() => this.onmessage && this.onmessage({ data: m })),
    };
    new Function("self", blobs.get(url))(scope);
    this.scope = scope;
  }
  postMessage(m) { setImmediate(() => this.scope.onmessage({ data: m })); }
  terminate() {}
};
new Function(data.script)();
if (mode === "no-worker") {
  console.log(JSON.stringify({ submitted: null, said, fallbackShown: !fallback.hidden }));
}
"#;

/// The page's own script, with its own data, drives the worker to an answer, puts it in the
/// form and submits; the edge accepts what it submitted. Without workers, it shows the fallback.
#[test]
fn the_page_script_submits_an_answer_the_edge_accepts() {
    let Some(node) = node() else { return };
    let ring = KeyRing::new(Key::new(1, &[7; 32]).unwrap(), None).unwrap();
    let settings = Settings::default();
    let visitor = Visitor {
        zone: "shop.example",
        addr: "192.0.2.10".parse().unwrap(),
        user_agent: b"Mozilla/5.0",
    };
    let now = 1_800_000_000;
    let difficulty = Difficulty::new(3).unwrap();
    let token = ring.issue_challenge(&visitor, &settings, difficulty, now, [9; 16]);
    let page = render(&PageInput {
        lang: Lang::De,
        host: "shop.example",
        branding: "",
        footer: "",
        ray_id: "r",
        token: &token,
        difficulty,
        return_to: "/",
        body_not_resent: false,
        fallback_delay_secs: 10,
    });
    let doc = Html::parse_document(&page.html);
    let one = |css: &str| {
        doc.select(&Selector::parse(css).unwrap())
            .next()
            .unwrap_or_else(|| panic!("{css}"))
    };
    let form = one("form#challenge-form");
    let dataset: serde_json::Map<String, serde_json::Value> =
        ["difficulty", "progress", "solved", "failed"]
            .into_iter()
            .map(|k| {
                (
                    k.to_owned(),
                    form.attr(&format!("data-{k}")).unwrap().into(),
                )
            })
            .collect();
    let data = serde_json::json!({
        "dataset": dataset,
        "token": one("input[name=token]").attr("value").unwrap(),
        "worker": one("script#challenge-worker").text().collect::<String>(),
        "script": one("script:not([type])").text().collect::<String>(),
        "lang": one("html").attr("lang").unwrap(),
    });
    let scratch = Scratch::new("page");
    let data_file = scratch.file("data.json", data.to_string().as_bytes());
    let harness = scratch.file("page-harness.js", PAGE_HARNESS.as_bytes());

    let out = run(node, &harness, &[data_file.to_str().unwrap(), "worker"]);
    let result: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let nonce = result["submitted"].as_str().unwrap();
    assert!(
        ring.check_solution(
            token.as_bytes(),
            nonce.as_bytes(),
            &visitor,
            &settings,
            now + 1
        )
        .is_ok(),
        "the edge refused the page's answer {nonce}"
    );
    let said = result["said"].as_array().unwrap();
    assert_eq!(
        said.last().and_then(|s| s.as_str()),
        Some(Lang::De.strings().solved)
    );
    assert_eq!(result["fallbackShown"], false);

    let out = run(node, &harness, &[data_file.to_str().unwrap(), "no-worker"]);
    let result: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(result["submitted"], serde_json::Value::Null);
    assert_eq!(result["fallbackShown"], true);
    assert_eq!(result["said"][0], Lang::De.strings().failed);
}
