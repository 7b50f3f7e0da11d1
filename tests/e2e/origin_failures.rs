use serde_json::Value;

use crate::support::*;

fn problem_from(edge: &Edge) -> (u16, Value, reqwest::header::HeaderMap) {
    let response = client(edge)
        .get(edge.url("/"))
        .header("accept", "application/json")
        .send()
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, response.json().unwrap(), headers)
}

#[test]
fn nothing_listening_is_521() {
    let origin = format!("127.0.0.1:{}", free_port());
    let edge = Edge::start("521", |l, a| policy(l, a, &origin, "", ""), &[]);
    let (status, problem, headers) = problem_from(&edge);
    assert_eq!(status, 521);
    assert_eq!(problem["error_code"], 521);
    assert_eq!(problem["error_category"], "origin");
    assert_eq!(problem["retryable"], true);
    assert_eq!(
        headers["retry-after"].to_str().unwrap(),
        problem["retry_after"].to_string()
    );
    // The Markdown form of the same failure.
    let md = client(&edge)
        .get(edge.url("/"))
        .header("accept", "text/markdown")
        .send()
        .unwrap();
    assert_eq!(md.status().as_u16(), 521);
    let (meta, _) = frontmatter(&md.text().unwrap());
    assert_eq!(meta["error_code"].as_u64(), Some(521));
}

#[test]
fn an_origin_that_never_answers_is_524() {
    let origin = BadOrigin::start(Misbehaviour::NeverAnswers);
    let o = origin.addr.to_string();
    let edge = Edge::start(
        "524",
        |l, a| policy(l, a, &o, "", "read_timeout = \"1s\""),
        &[],
    );
    let started = std::time::Instant::now();
    let (status, problem, _) = problem_from(&edge);
    assert_eq!(status, 524);
    assert_eq!(problem["error_name"], "origin_response_timeout");
    // Under a third of the 100 s default (the client gives up at 30 s): the policy's 1 s.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the policy's read timeout applies"
    );
}

#[test]
fn an_origin_that_closes_at_once_is_520() {
    let origin = BadOrigin::start(Misbehaviour::ClosesAtOnce);
    let o = origin.addr.to_string();
    let edge = Edge::start("520", |l, a| policy(l, a, &o, "", ""), &[]);
    let (status, problem, _) = problem_from(&edge);
    assert_eq!(status, 520);
    assert_eq!(problem["error_code"], 520);
}

#[test]
fn an_origin_that_answers_garbage_is_520() {
    let origin = BadOrigin::start(Misbehaviour::Garbage);
    let o = origin.addr.to_string();
    let edge = Edge::start("520g", |l, a| policy(l, a, &o, "", ""), &[]);
    let (status, problem, _) = problem_from(&edge);
    assert_eq!(status, 520);
    assert_eq!(problem["error_code"], 520);
}

#[test]
fn an_origin_name_that_does_not_resolve_is_1016() {
    // `.invalid` never resolves (RFC 6761), and the lookup fails without leaving the machine.
    let edge = Edge::start(
        "1016",
        |l, a| policy(l, a, "origin.invalid:80", "", ""),
        &[],
    );
    let (status, problem, _) = problem_from(&edge);
    assert_eq!(status, 530);
    assert_eq!(problem["error_code"], 1016);
    assert_eq!(problem["error_name"], "origin_dns_error");
}

#[test]
fn the_origin_flag_overrides_the_policy() {
    let origin = EchoOrigin::start();
    let dead = format!("127.0.0.1:{}", free_port());
    let real = origin.addr.to_string();
    let edge = Edge::start(
        "override",
        |l, a| policy(l, a, &dead, "", ""),
        &["--origin", &real],
    );
    let response = client(&edge).get(edge.url("/")).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["x-origin"], "echo");
}
