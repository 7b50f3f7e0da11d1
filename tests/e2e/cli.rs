use std::process::Command;

use crate::support::*;

fn signpost(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn shipped_policies_pass_check() {
    for file in ["config/default.toml", "config/example.toml"] {
        let path = repo_root().join(file);
        let (code, stdout, stderr) = signpost(&["check", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{file}: {stdout}{stderr}");
        assert!(stdout.contains("ok"), "{stdout}");
    }
}

#[test]
fn check_names_file_line_and_column_of_a_broken_policy() {
    let scratch = Scratch::new("check");
    let path = scratch.write("broken.toml", "listen = [\"127.0.0.1:8080\"]\n\n[[zone]]\nname = \"a\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:8000\"\nconect_timeout = \"5s\"\n");
    let (code, stdout, stderr) = signpost(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("{}:7:1", path.display())),
        "file:line:col in {stderr}"
    );
    assert!(
        stderr.contains("connect_timeout"),
        "a did-you-mean hint in {stderr}"
    );
}

#[test]
fn render_prints_the_exact_response() {
    let (code, stdout, _) = signpost(&[
        "render",
        "1015",
        "--accept",
        "text/markdown",
        "--host",
        "shop.example",
    ]);
    assert_eq!(code, 0);
    let (head, body) = stdout
        .split_once("\n\n")
        .expect("headers, a blank line, the body");
    let mut lines = head.lines();
    assert_eq!(lines.next(), Some("HTTP/1.1 429 Too Many Requests"));
    let headers: Vec<(&str, &str)> = lines.map(|l| l.split_once(": ").unwrap()).collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    assert_eq!(get("content-type"), Some("text/markdown; charset=utf-8"));
    assert_eq!(get("content-length"), Some(body.len().to_string().as_str()));
    assert_eq!(get("retry-after"), Some("30"));
    let (meta, _) = frontmatter(body);
    assert_eq!(meta["zone"].as_str(), Some("shop.example"));
    assert_eq!(meta["ray_id"].as_str(), get("cf-ray"));
}

#[test]
fn codes_lists_the_whole_catalog() {
    let (code, stdout, _) = signpost(&["codes"]);
    assert_eq!(code, 0);
    for expected in ["1001", "1015", "1020", "1016", "520", "526"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(expected)),
            "{expected} missing from:\n{stdout}"
        );
    }
}

#[test]
fn tokens_meets_the_1015_budget() {
    let (code, stdout, stderr) = signpost(&["tokens"]);
    assert_eq!(code, 0, "{stderr}");
    let row: Vec<usize> = stdout
        .lines()
        .find(|l| l.starts_with("1015 "))
        .expect("a 1015 row")
        .split_whitespace()
        .skip(1)
        .map(|c| c.parse().unwrap())
        .collect();
    let (md_tokens, json_tokens) = (row[3], row[5]);
    assert!(md_tokens <= 221, "Markdown 1015 is {md_tokens} tokens");
    assert!(json_tokens <= 256, "JSON 1015 is {json_tokens} tokens");
    assert!(
        stdout.contains("Cloudflare"),
        "the comparison row is printed"
    );
}

/// An address that cannot be bound is a start-up error that names it, at once: not Pingora's
/// 30 s of retries followed by a process serving only its admin endpoint.
#[test]
fn run_refuses_to_start_on_an_address_in_use() {
    let scratch = Scratch::new("in-use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let free: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cases = [
        (
            "listener in use",
            policy(taken_addr, free, "127.0.0.1:9", "", ""),
        ),
        (
            "admin in use",
            policy(free, taken_addr, "127.0.0.1:9", "", ""),
        ),
        (
            "admin on the listener",
            policy(free, free, "127.0.0.1:9", "", ""),
        ),
    ];
    for (case, text) in cases {
        let config = scratch.write("policy.toml", &text);
        let started = std::time::Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_signpost"))
            .args(["run", "--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > std::time::Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{case}: {stderr}");
        let in_use = if case == "admin on the listener" {
            free
        } else {
            taken_addr
        };
        assert!(
            stderr.contains(&format!("cannot listen on {in_use}")) && stderr.contains("in use"),
            "{case}: {stderr}"
        );
    }
    drop(taken);
}

#[test]
fn the_example_policy_passes_its_shipped_test_cases() {
    let policy = repo_root().join("config/example.toml");
    let cases = repo_root().join("config/example.cases.toml");
    let (code, stdout, stderr) =
        signpost(&["test", policy.to_str().unwrap(), cases.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "{stdout}");
    let passed: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 15, "{stdout}");
}
