use std::net::SocketAddr;

use crate::support::*;

struct TlsEdge {
    edge: Edge,
    ca: reqwest::Certificate,
}

fn tls_edge(origin: &str) -> TlsEdge {
    let scratch = Scratch::new("tls");
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![
        "example.com".to_string(),
        "www.example.com".to_string(),
    ])
    .unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = scratch.write("cert.pem", &cert.pem());
    let key_path = scratch.write("key.pem", &key.serialize_pem());
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        r#"admin = "{admin}"

[[listener]]
addr = "{addr}"
tls = {{ cert = "{}", key = "{}" }}

[[zone]]
name = "test"
hosts = ["example.com", "www.example.com"]
origin = "{origin}"
"#,
        cert_path.display(),
        key_path.display()
    );
    let config = scratch.write("policy.toml", &text);
    let edge = Edge::start_with_file(scratch, config, addr, admin, &[]);
    TlsEdge {
        edge,
        ca: reqwest::Certificate::from_pem(cert.pem().as_bytes()).unwrap(),
    }
}

fn https_client(t: &TlsEdge, http1_only: bool) -> reqwest::blocking::Client {
    let mut builder = reqwest::blocking::Client::builder()
        .tls_certs_only([t.ca.clone()])
        .resolve("example.com", t.edge.addr)
        .resolve("www.example.com", t.edge.addr);
    if http1_only {
        builder = builder.http1_only();
    }
    builder.build().unwrap()
}

#[test]
fn https_serves_http1_and_http2() {
    let origin = EchoOrigin::start();
    let t = tls_edge(&origin.addr.to_string());
    let url = format!("https://example.com:{}/over-tls", t.edge.addr.port());

    let h1 = https_client(&t, true).get(&url).send().unwrap();
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.status().as_u16(), 200);
    let echo: serde_json::Value = h1.json().unwrap();
    assert_eq!(echo["headers"]["x-forwarded-proto"], "https");

    let h2 = https_client(&t, false).get(&url).send().unwrap();
    assert_eq!(
        h2.version(),
        reqwest::Version::HTTP_2,
        "HTTP/2 is offered by ALPN"
    );
    assert_eq!(h2.status().as_u16(), 200);

    let problem = https_client(&t, false)
        .get(format!(
            "https://example.com:{}/cdn-cgi/error/1015",
            t.edge.addr.port()
        ))
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(problem.version(), reqwest::Version::HTTP_2);
    assert_eq!(problem.status().as_u16(), 429);
    let body: serde_json::Value = problem.json().unwrap();
    assert_eq!(body["zone"], "example.com");
}

#[test]
fn host_that_differs_from_sni_gets_1013() {
    let origin = EchoOrigin::start();
    let t = tls_edge(&origin.addr.to_string());
    // The handshake names www.example.com; the request then asks for example.com.
    let response = https_client(&t, true)
        .get(format!("https://www.example.com:{}/", t.edge.addr.port()))
        .header("host", "example.com")
        .header("accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: serde_json::Value = response.json().unwrap();
    assert_eq!(body["error_code"], 1013);
    assert_eq!(body["error_category"], "tls");
}
