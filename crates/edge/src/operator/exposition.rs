//! The two text formats `/metrics` speaks: OpenMetrics 1.0, which the metrics library writes and
//! Prometheus asks for first, and the classic Prometheus text format 0.0.4, which every other
//! reader expects (`promtool check metrics`, `curl`, older scrapers).
//!
//! The formats differ where a reader notices: an OpenMetrics counter family is named without
//! its `_total` suffix (`# TYPE signpost_requests counter`, samples `signpost_requests_total`),
//! so a 0.0.4 reader sees samples of a family it was never told about, untyped and without help
//! (`promtool`: "signpost_requests_total no help text"). So the admin listener negotiates, as
//! Prometheus' own client libraries do: OpenMetrics to a client that asks for it, 0.0.4 to
//! every other, translated from the OpenMetrics text by [`to_text_format`].

/// The media type of the OpenMetrics answer.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The media type of the classic text answer.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether an `Accept` header prefers OpenMetrics to the classic text format: it names
/// `application/openmetrics-text` with a q-value above zero and at least that of any
/// `text/plain` it names. Prometheus sends `application/openmetrics-text;version=1.0.0,...,
/// text/plain;version=0.0.4;q=0.5,*/*;q=0.1`; curl sends `*/*`, which gets the classic format.
pub fn wants_openmetrics(accept: Option<&[u8]>) -> bool {
    let Some(accept) = accept.and_then(|a| std::str::from_utf8(a).ok()) else {
        return false;
    };
    let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            openmetrics = openmetrics.max(q);
        } else if media.eq_ignore_ascii_case("text/plain") {
            text = text.max(q);
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// The classic text format (0.0.4) of an OpenMetrics exposition as the metrics library writes
/// it (`# HELP`, `# TYPE`, optional `# UNIT`, then the family's samples, then `# EOF`):
///
/// - a counter family's `HELP` and `TYPE` take its samples' name, `<name>_total`; its
///   `_created` samples, which 0.0.4 has no place for, are left out;
/// - an `info` family becomes the gauge `<name>_info` (its samples are already named so, with
///   the value 1), as Prometheus' own `prometheus_build_info` is;
/// - `unknown` becomes `untyped`, and `# UNIT` and `# EOF` lines are dropped;
/// - a `\"` in help text (OpenMetrics escapes quotes there, 0.0.4 does not) becomes `"`.
///
/// Samples are otherwise the same in both formats (label values are escaped alike); the edge
/// records no exemplars and no timestamps.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len() + openmetrics.len() / 16);
    // The help line of the family being read, held until its type says what it is named.
    let mut help: Option<(&str, &str)> = None;
    // The family being read: its name, and whether its `_created` samples are dropped.
    let mut family: (&str, bool) = ("", false);
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (suffix, kind_out) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "gauge" | "histogram" | "summary" => ("", kind),
                _ => ("", "untyped"),
            };
            if let Some((_, text)) = help.take().filter(|(n, _)| *n == name) {
                out.push_str("# HELP ");
                out.push_str(name);
                out.push_str(suffix);
                out.push(' ');
                out.push_str(&text.replace("\\\"", "\""));
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(name);
            out.push_str(suffix);
            out.push(' ');
            out.push_str(kind_out);
            out.push('\n');
            family = (name, matches!(kind, "counter" | "histogram" | "summary"));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            // `# UNIT`, `# EOF`: no place in 0.0.4.
            continue;
        }
        let sample_name = line.split(['{', ' ']).next().unwrap_or("");
        if family.1
            && sample_name
                .strip_prefix(family.0)
                .is_some_and(|rest| rest == "_created")
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::metrics::info::Info;
    use prometheus_client::registry::Registry;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_classic_format() {
        let prometheus = b"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(wants_openmetrics(Some(b"application/openmetrics-text")));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some(b"*/*")));
        assert!(!wants_openmetrics(Some(b"text/plain")));
        assert!(!wants_openmetrics(Some(
            b"text/plain, application/openmetrics-text;q=0.5"
        )));
        assert!(!wants_openmetrics(Some(
            b"application/openmetrics-text;q=0"
        )));
        assert!(!wants_openmetrics(Some(b"\xff\xfe")));
        assert!(wants_openmetrics(Some(
            b"Application/OpenMetrics-Text; Q=0.9, text/plain; q=0.9"
        )));
    }

    #[test]
    fn every_kind_of_family_is_translated() {
        let mut registry = Registry::with_prefix("signpost");
        let requests = Family::<Vec<(String, String)>, Counter>::default();
        registry.register("requests", "Requests \"answered\"", requests.clone());
        requests
            .get_or_create(&vec![("rule".into(), "a \"quoted\" \\ rule\nx".into())])
            .inc();
        let gauge = Gauge::<i64>::default();
        registry.register("open", "Open things", gauge.clone());
        gauge.set(3);
        let histogram = Histogram::new([0.5, 1.0]);
        histogram.observe(0.7);
        registry.register("latency_seconds", "Latency", histogram);
        registry.register(
            "build",
            "The build",
            Info::new(vec![("version".to_string(), "1.2.3".to_string())]),
        );
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        let text = to_text_format(&openmetrics);
        assert_eq!(
            text,
            "# HELP signpost_requests_total Requests \"answered\".\n\
             # TYPE signpost_requests_total counter\n\
             signpost_requests_total{rule=\"a \\\"quoted\\\" \\\\ rule\\nx\"} 1\n\
             # HELP signpost_open Open things.\n\
             # TYPE signpost_open gauge\n\
             signpost_open 3\n\
             # HELP signpost_latency_seconds Latency.\n\
             # TYPE signpost_latency_seconds histogram\n\
             signpost_latency_seconds_sum 0.7\n\
             signpost_latency_seconds_count 1\n\
             signpost_latency_seconds_bucket{le=\"0.5\"} 0\n\
             signpost_latency_seconds_bucket{le=\"1.0\"} 1\n\
             signpost_latency_seconds_bucket{le=\"+Inf\"} 1\n\
             # HELP signpost_build_info The build.\n\
             # TYPE signpost_build_info gauge\n\
             signpost_build_info{version=\"1.2.3\"} 1\n",
            "from:\n{openmetrics}"
        );
    }

    #[test]
    fn created_samples_and_units_are_left_out() {
        let openmetrics = "# HELP a_seconds A.\n# TYPE a_seconds counter\n# UNIT a_seconds seconds\n\
                           a_seconds_total 2\na_seconds_created 1.7e9\n# EOF\n";
        assert_eq!(
            to_text_format(openmetrics),
            "# HELP a_seconds_total A.\n# TYPE a_seconds_total counter\na_seconds_total 2\n"
        );
    }
}
