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

/// `signpost codes` prints one row for each code of the catalog the binary is built with
/// (`signpost_problem::catalog()`), in order, each with the entry's status, category, retry,
/// owner action, error name and title, and nothing else.
#[test]
fn codes_lists_the_whole_catalog() {
    let (code, stdout, _) = signpost(&["codes"]);
    assert_eq!(code, 0);
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "code",
            "status",
            "category",
            "retry",
            "owner",
            "error_name",
            "title"
        ]
    );
    let rows: Vec<&str> = lines.collect();
    let catalog = signpost_problem::catalog();
    assert!(catalog.len() >= 60, "{} codes", catalog.len());
    assert_eq!(rows.len(), catalog.len(), "{stdout}");
    for (row, entry) in rows.iter().zip(catalog) {
        // Six one-word columns, then the title, which has spaces.
        let mut rest = *row;
        let mut columns = Vec::new();
        for _ in 0..6 {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            columns.push(&rest[..end]);
            rest = &rest[end..];
        }
        let retry = entry
            .retry_after
            .map_or_else(|| "no".to_string(), |s| format!("{s}s"));
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        assert_eq!(
            columns,
            [
                entry.code.get().to_string().as_str(),
                entry.status.to_string().as_str(),
                entry.error_category.as_str(),
                retry.as_str(),
                yes_no(entry.owner_action_required),
                entry.error_name.as_str(),
            ],
            "{row}"
        );
        assert_eq!(rest.trim(), entry.title, "{row}");
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
        let (status, stderr) = run_until_exit(&config);
        assert_eq!(status, Some(2), "{case}: {stderr}");
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
    let (code, stdout, stderr) = signpost(&[
        "test",
        "-c",
        policy.to_str().unwrap(),
        cases.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "{stdout}");
    let passed: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 15, "{stdout}");
}

#[test]
fn render_previews_the_error_rules_of_a_policy() {
    let config = repo_root().join("config/example.toml");
    let config = config.to_str().unwrap();
    let render = |args: &[&str]| {
        let mut all = vec!["render"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--config", config]);
        let (code, stdout, stderr) = signpost(&all);
        assert_eq!(code, 0, "{stdout}{stderr}");
        let (head, body) = stdout.split_once("\n\n").unwrap();
        (head.to_owned(), body.to_owned(), stderr)
    };
    // 1020 for a browser: the rule's page, from its html_file.
    let (head, body, stderr) = render(&["1020", "--host", "www.example.com"]);
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\n"), "{head}");
    assert!(body.contains("<h1>This request was blocked</h1>"), "{body}");
    assert!(
        body.contains("<code>192.0.2.1</code>"),
        "the client's address: {body}"
    );
    assert!(stderr.contains("error rule: blocked-page"), "{stderr}");
    // A 52x for an agent asking for Markdown: the rule's status, wait and body.
    let (head, body, _) = render(&[
        "521",
        "--accept",
        "text/markdown",
        "--host",
        "www.example.com",
    ]);
    assert!(
        head.starts_with("HTTP/1.1 503 Service Unavailable\n"),
        "{head}"
    );
    assert!(head.contains("\nretry-after: 60\n"), "{head}");
    let (meta, prose) = frontmatter(&body);
    assert_eq!(meta["error_code"].as_u64(), Some(521));
    assert!(prose.contains("Retry in 60 seconds."), "{prose}");
    // The zone's rule before the global ones, by --zone.
    let (_, body, stderr) = render(&["1015", "--accept", "application/json", "--zone", "api"]);
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["title"], "Error 1015: API rate limit reached");
    assert_eq!(p["documentation"], "https://docs.example.com/api/limits");
    assert!(stderr.contains("error rule: api-rate-limit"), "{stderr}");
    // An origin's error, as a structured zone answers it.
    let (head, body, _) = render(&[
        "503",
        "--origin",
        "--accept",
        "application/json",
        "--zone",
        "api",
    ]);
    assert!(head.contains("\nretry-after: 60\n"), "{head}");
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (p["source"].as_str(), p["cloudflare_error"].as_bool()),
        (Some("origin"), Some(false))
    );
}

#[test]
fn check_names_an_unknown_token_and_a_missing_asset_in_place() {
    let scratch = Scratch::new("check-rules");
    let path = scratch.write(
        "rules.toml",
        "[[zone]]\nname = \"a\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:8000\"\n\n\
         [[error_rule]]\nid = \"e\"\nexpression = 'cf.response.1xxx_code eq 1020'\n\
         title = \"Blocked ::FOO::\"\nhtml_file = \"missing.html\"\n",
    );
    let (code, stdout, stderr) = signpost(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let at = |line_col: &str| format!("{}:{line_col}", path.display());
    assert!(
        stderr.contains(&format!("{}: unknown token `::FOO::`", at("9:18"))),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{}: cannot read `html_file` `missing.html`",
            at("10:13")
        )),
        "{stderr}"
    );
}

/// `signpost run --config <config>`: its exit status (waited for with a generous deadline) and
/// what it printed on stderr.
fn run_until_exit(config: &std::path::Path) -> (Option<i32>, String) {
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
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.and_then(|s| s.code()), stderr)
}

#[test]
fn check_refuses_a_ledger_dir_run_cannot_open_at_its_key_and_run_says_the_same() {
    let scratch = Scratch::new("ledger-dir");
    let file = scratch.write("a-file", "not a directory\n");
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let policy = |dir: &str| {
        format!(
            "listen = [\"{listen}\"]\nadmin = \"{admin}\"\n\n[ledger]\ndir = \"{dir}\"\n\n\
             [[zone]]\nname = \"a\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:9\"\n"
        )
    };
    // Tests run as root, whom permission bits do not stop: a regular file, and a path under one,
    // are what no process can open as a directory.
    let under_file = file.join("ledger");
    for dir in [file.clone(), under_file] {
        let dir = dir.to_str().unwrap();
        let config = scratch.write("policy.toml", &policy(dir));
        let (code, stdout, stderr) = signpost(&["check", config.to_str().unwrap()]);
        assert_eq!(code, 1, "{dir}: {stdout}{stderr}");
        // The `dir` key's value: line 5, column 7.
        let at = format!("{}:5:7: ", config.display());
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&at))
            .unwrap_or_else(|| panic!("{dir}: no problem at {at} in {stderr}"));
        assert!(line.contains("is not a directory"), "{line}");
        assert!(
            line.contains(dir) || line.contains(file.to_str().unwrap()),
            "{line}"
        );
        // `run` refuses the same policy with the same words, at the same place.
        let (status, run_stderr) = run_until_exit(&config);
        assert_eq!(status, Some(2), "{dir}: {run_stderr}");
        assert!(run_stderr.contains(line), "{line} in {run_stderr}");
    }
    // A directory that does not exist yet under one that does: both accept it, and `check`
    // creates nothing.
    let fresh = scratch.0.join("ledgers").join("fresh");
    let config = scratch.write("policy.toml", &policy(fresh.to_str().unwrap()));
    let (code, stdout, stderr) = signpost(&["check", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!scratch.0.join("ledgers").exists(), "check created the dir");
}

#[test]
fn check_refuses_tls_files_run_cannot_serve_at_their_key_and_run_says_the_same() {
    let scratch = Scratch::new("tls-files");
    let key = rcgen::KeyPair::generate().unwrap();
    let other_key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["example.com".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    scratch.write("cert.pem", &cert.pem());
    scratch.write("key.pem", &key.serialize_pem());
    scratch.write("other-key.pem", &other_key.serialize_pem());
    // A certificate block whose contents are not base64: it has the PEM markers `check` looked
    // for, and nothing the TLS library can load.
    scratch.write(
        "garbled.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
    );
    let listen = format!("127.0.0.1:{}", free_port());
    // (cert, key, the file the problem is about, what is said)
    let cases = [
        (
            "cert.pem",
            "other-key.pem",
            "other-key.pem",
            "cannot serve the certificate",
        ),
        (
            "garbled.pem",
            "key.pem",
            "garbled.pem",
            "cannot load the TLS certificate",
        ),
    ];
    for (cert_file, key_file, culprit, says) in cases {
        let tls_line = format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}",
            scratch.0.join(cert_file).display(),
            scratch.0.join(key_file).display()
        );
        let config = scratch.write(
            "policy.toml",
            &format!(
                "admin = \"off\"\n\n[[listener]]\naddr = \"{listen}\"\n{tls_line}\n\n\
                 [[zone]]\nname = \"a\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:9\"\n"
            ),
        );
        let column = tls_line
            .find(&format!("\"{}\"", scratch.0.join(culprit).display()))
            .unwrap()
            + 1;
        let at = format!("{}:5:{column}: ", config.display());
        let (code, stdout, stderr) = signpost(&["check", config.to_str().unwrap()]);
        assert_eq!(code, 1, "{cert_file} {key_file}: {stdout}{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&at))
            .unwrap_or_else(|| panic!("no problem at {at} in {stderr}"));
        assert!(line.contains(says), "{line}");
        // `run` refuses it with the same words at the same place, and exits (a key that does
        // not go with its certificate used to stop only the listener's thread).
        let (status, run_stderr) = run_until_exit(&config);
        assert_eq!(status, Some(2), "{cert_file} {key_file}: {run_stderr}");
        assert!(run_stderr.contains(line), "{line} in {run_stderr}");
    }
    // The matching pair passes.
    let config = scratch.write(
        "policy.toml",
        &format!(
            "admin = \"off\"\n\n[[listener]]\naddr = \"{listen}\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n\n\
             [[zone]]\nname = \"a\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:9\"\n",
            scratch.0.join("cert.pem").display(),
            scratch.0.join("key.pem").display()
        ),
    );
    let (code, stdout, stderr) = signpost(&["check", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

#[test]
fn check_and_run_refuse_a_zone_certificate_whose_key_does_not_go_with_it_at_the_key() {
    let scratch = Scratch::new("zone-tls-files");
    let key = rcgen::KeyPair::generate().unwrap();
    let other_key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["shop.test".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = scratch.write("shop.pem", &cert.pem());
    let key_path = scratch.write("other-key.pem", &other_key.serialize_pem());
    let listen = format!("127.0.0.1:{}", free_port());
    let text = format!(
        "admin = \"off\"\nlisten = [\"{listen}\"]\n\n[[zone]]\nname = \"shop\"\nhosts = [\"shop.test\"]\n\
         origin = \"127.0.0.1:9\"\n[zone.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert_path.display(),
        key_path.display()
    );
    let config = scratch.write("policy.toml", &text);
    // The zone's `key` is on line 10, its value from column 7.
    let at = format!("{}:10:7: ", config.display());
    let (code, stdout, stderr) = signpost(&["check", config.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&at))
        .unwrap_or_else(|| panic!("no problem at {at} in {stderr}"));
    assert!(line.contains("cannot serve the certificate"), "{line}");
    let (status, run_stderr) = run_until_exit(&config);
    assert_eq!(status, Some(2), "{run_stderr}");
    assert!(run_stderr.contains(line), "{line} in {run_stderr}");
}

/// `signpost` with `SIGNPOST_CONFIG` set to `policy`.
fn signpost_with_env(policy: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_signpost"))
        .args(args)
        .env("SIGNPOST_CONFIG", policy)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_command_that_reads_a_policy_takes_it_by_config_or_signpost_config() {
    let policy = repo_root().join("config/example.toml");
    let cases = repo_root().join("config/example.cases.toml");
    let policy_arg = policy.to_str().unwrap();
    let cases_arg = cases.to_str().unwrap();
    let trace = ["trace", "--url", "http://example.com/", "--json"];
    let commands: [&[&str]; 5] = [
        &["check"],
        &["test", cases_arg],
        &trace,
        &["render", "1020", "--accept", "application/json"],
        &["bots"],
    ];
    for command in commands {
        let by_flag: Vec<&str> = command
            .iter()
            .take(1)
            .chain(["--config", policy_arg].iter())
            .chain(command.iter().skip(1))
            .copied()
            .collect();
        let flagged = signpost(&by_flag);
        let by_short: Vec<&str> = by_flag
            .iter()
            .map(|a| if *a == "--config" { "-c" } else { a })
            .collect();
        let short = signpost(&by_short);
        let from_env = signpost_with_env(&policy, command);
        assert_eq!(flagged.0, 0, "{by_flag:?}: {}{}", flagged.1, flagged.2);
        // The same policy, however it was given: the same output (ray ids and times aside).
        let stable = |s: &str| mask_ray_ids(&mask_times(s));
        assert_eq!(stable(&flagged.1), stable(&short.1), "{command:?} with -c");
        assert_eq!(
            stable(&flagged.1),
            stable(&from_env.1),
            "{command:?} with SIGNPOST_CONFIG"
        );
    }
    // `signpost check FILE` as before, over SIGNPOST_CONFIG.
    let missing = repo_root().join("no-such-policy.toml");
    let (code, stdout, stderr) = signpost_with_env(&missing, &["check", policy_arg]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // A command that needs a policy and is given none says how to give one.
    let (code, _, stderr) = signpost(&["check"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--config") && stderr.contains("SIGNPOST_CONFIG"),
        "{stderr}"
    );
    // The policy's own catalog: a [[bot]] of the example policy, or the shipped one.
    let (_, shipped, _) = signpost(&["bots"]);
    assert!(
        shipped.lines().any(|l| l.starts_with("GPTBot ")),
        "{shipped}"
    );
    assert!(shipped.lines().count() > 15, "{shipped}");
}

#[test]
fn health_asks_the_admin_listener_the_policy_names() {
    let (_origin, edge) = echo_edge("health-policy", "", "", &[]);
    let config = edge.config.to_str().unwrap();
    let (code, _, stderr) = signpost(&["health", "--config", config]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = signpost_with_env(&edge.config, &["health"]);
    assert_eq!(code, 0, "{stderr}");
    // The default admin address is not this edge's: without the policy, nothing answers there
    // (or something else does); with an admin listener turned off, there is nothing to ask.
    let scratch = Scratch::new("health-off");
    let off = scratch.write(
        "off.toml",
        "admin = \"off\"\n[[zone]]\nname = \"a\"\nhosts = [\"a.test\"]\norigin = \"127.0.0.1:1\"\n",
    );
    let (code, _, stderr) = signpost(&["health", "-c", off.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("off"), "{stderr}");
    // --url still wins.
    let url = format!("http://{}/healthz", edge.admin);
    let (code, _, stderr) = signpost(&["health", "-c", off.to_str().unwrap(), "--url", &url]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let policy = repo_root().join("config/example.toml");
    let policy = policy.to_str().unwrap();
    let cases = repo_root().join("config/example.cases.toml");
    let commands: [&[&str]; 6] = [
        &["bots"],
        &["codes"],
        &["render", "1015"],
        &["check", "-c", policy],
        &["test", "-c", policy, cases.to_str().unwrap()],
        &["trace", "-c", policy, "--url", "http://example.com/"],
    ];
    for args in commands {
        // A pipe whose reader is gone before the command writes a byte: every write fails with
        // EPIPE, as when `head -1` has read its line and left.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_signpost"))
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert!(
            out.status.code().is_some_and(|c| c == 0 || c == 1),
            "{args:?} ended with {}: {stderr}",
            out.status
        );
    }
}

/// `text` with every ray id (16 lower-case hex digits in a row) replaced by `RAY`.
fn mask_ray_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || ('a'..='f').contains(&c) {
            run.push(c);
            continue;
        }
        if run.len() == 16 {
            out.push_str("RAY");
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// `text` with every UTC time (`2026-11-28T16:30:15Z`, to the second) replaced by `TIME`.
fn mask_times(text: &str) -> String {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:ddZ";
    let bytes = text.as_bytes();
    let fits = |at: usize| {
        bytes.get(at..at + SHAPE.len()).is_some_and(|window| {
            window.iter().zip(SHAPE).all(|(b, s)| match s {
                b'd' => b.is_ascii_digit(),
                other => b == other,
            })
        })
    };
    let (mut out, mut at) = (Vec::with_capacity(bytes.len()), 0);
    while at < bytes.len() {
        if fits(at) {
            out.extend_from_slice(b"TIME");
            at += SHAPE.len();
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).unwrap()
}
