//! Logging and traces. Logs: human-readable text by default, one JSON object
//! per line on request; `RUST_LOG` picks the levels (default: info for this
//! crate, warn elsewhere). Traces: OpenTelemetry over OTLP/HTTP, off unless
//! the standard `OTEL_*` variables ask for them ([`otel_wanted`]); the spans
//! the service opens (`request`, `claim_start`, `effect`, `record`, ...) are
//! exported, joined to the W3C trace context a caller sent
//! ([`join`], [`current_trace`]).

use std::io::IsTerminal as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::domain::trace_context::{TraceContext, TraceParent};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The levels logged when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "warn,command_ledger=info,tower_http=warn";

/// The service name traces carry unless `OTEL_SERVICE_NAME` says another.
pub const SERVICE_NAME: &str = "command-ledger";

/// What [`init`] set up: flush the traces with [`Telemetry::shutdown`]
/// before the process exits.
#[derive(Debug)]
pub struct Telemetry {
    traces: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Whether traces are exported.
    pub fn exporting(&self) -> bool {
        self.traces.is_some()
    }

    /// Exports the spans still queued (the batch processor sends every few
    /// seconds) and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.traces
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: OpenTelemetry traces: {e}");
        }
    }
}

/// Installs the process's subscriber: logs to stderr, and traces when the
/// environment asks for them. An `OTEL_*` setting this build cannot honour
/// (gRPC, an unknown exporter) is an error: the caller says it and stops.
pub fn init(format: LogFormat) -> Result<Telemetry, String> {
    init_with_default(format, DEFAULT_FILTER)
}

/// [`init`] with another default for the log levels when `RUST_LOG` is
/// unset (the benchmark logs its own progress, not the service's).
pub fn init_with_default(format: LogFormat, default_filter: &str) -> Result<Telemetry, String> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = std::io::stderr().is_terminal();
    let env = |name: &str| std::env::var(name).ok();
    let traces = if otel_wanted(&env)? {
        Some(tracer_provider(&env)?)
    } else {
        None
    };
    let tracer = traces.as_ref().map(|p| {
        use opentelemetry::trace::TracerProvider as _;
        p.tracer(SERVICE_NAME)
    });
    // A second init (tests) keeps the first subscriber.
    let _ = layered(format, filter, std::io::stderr, ansi, tracer).try_init();
    Ok(Telemetry { traces })
}

/// The subscriber the binary logs with, writing to `writer`: [`init`]
/// installs it over stderr; tests install it over a buffer of their own, so
/// what they read is what an operator reads.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> tracing::Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    layered(format, filter, writer, ansi, None)
}

fn layered<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
    tracer: Option<opentelemetry_sdk::trace::Tracer>,
) -> tracing::Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    let logs = match format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        LogFormat::Json => logs.json().flatten_event(true).with_filter(filter).boxed(),
    };
    // The spans exported are the service's own at info and above, whatever
    // `RUST_LOG` keeps of the logs.
    let traces = tracer.map(|t| {
        tracing_opentelemetry::layer().with_tracer(t).with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("command_ledger", tracing::Level::INFO),
        )
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .into()
}

/// Whether the environment asks for traces, by the OpenTelemetry
/// specification's variables: `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none` turn them off; `OTEL_TRACES_EXPORTER=otlp`,
/// or an endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) with no exporter named, turn them on.
/// Nothing set: off (the specification's default would send to
/// `localhost:4318` unasked). The protocol must be OTLP over HTTP
/// (`http/protobuf`, the default, or `http/json`).
pub fn otel_wanted(env: &dyn Fn(&str) -> Option<String>) -> Result<bool, String> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    let wanted = match set("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if v == "none" => false,
        Some(v) if v == "otlp" => true,
        Some(v) => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={v}: this service exports traces over OTLP only (otlp, or none)"
            ));
        }
        None => {
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
                || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        }
    };
    if wanted {
        protocol(env)?;
    }
    Ok(wanted)
}

/// The OTLP protocol asked for (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`).
fn protocol(env: &dyn Fn(&str) -> Option<String>) -> Result<opentelemetry_otlp::Protocol, String> {
    let asked = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty());
    match asked.as_deref() {
        None | Some("http/protobuf") => Ok(opentelemetry_otlp::Protocol::HttpBinary),
        Some("http/json") => Ok(opentelemetry_otlp::Protocol::HttpJson),
        Some(other) => Err(format!(
            "OTLP protocol {other:?}: this service exports over OTLP/HTTP \
             (http/protobuf or http/json; a collector's port 4318), not gRPC"
        )),
    }
}

/// The tracer provider: an OTLP/HTTP exporter (endpoint, headers, timeout
/// and compression from the `OTEL_EXPORTER_OTLP_*` variables), batched on
/// a thread of its own; the resource from `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`, the service named `command-ledger` unless
/// they name it.
fn tracer_provider(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol(env)?)
        .build()
        .map_err(|e| format!("OpenTelemetry exporter: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// Makes `span` a child of the caller's span `trace` names (when traces
/// are exported; otherwise it does nothing).
pub fn join(span: &tracing::Span, trace: Option<&TraceContext>) {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let Some(trace) = trace else { return };
    let remote = opentelemetry::Context::new().with_remote_span_context(span_context(trace));
    // No exporter installed, or a span already started: nothing to join.
    let _ = span.set_parent(remote);
}

/// Records on `span` a link to each trace in `traces` (a claim or a record
/// that serves the commands of many traces at once).
pub fn link_all(span: &tracing::Span, traces: impl IntoIterator<Item = TraceContext>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    for trace in traces {
        span.add_link(span_context(&trace));
    }
}

/// The trace context to record or send on from where the code runs now:
/// the current span's, when traces are exported and it has one (the
/// ledger's own span, a child of the caller's); else `fallback` (what the
/// caller sent, passed on unchanged).
pub fn current_trace(fallback: Option<TraceContext>) -> Option<TraceContext> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return fallback;
    }
    let state = sc.trace_state().header();
    Some(TraceContext {
        parent: TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            parent_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        },
        state: (!state.is_empty()).then_some(state),
    })
}

fn span_context(trace: &TraceContext) -> opentelemetry::trace::SpanContext {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let state = trace
        .state
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(trace.parent.trace_id),
        SpanId::from_bytes(trace.parent.parent_id),
        TraceFlags::new(trace.parent.flags),
        true,
        state,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn traces_are_off_unless_the_environment_asks() {
        assert_eq!(otel_wanted(&env(&[])), Ok(false));
        assert_eq!(otel_wanted(&env(&[("OTEL_SERVICE_NAME", "x")])), Ok(false));
        for on in [
            vec![("OTEL_TRACES_EXPORTER", "otlp")],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")],
            vec![(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces",
            )],
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ],
        ] {
            assert_eq!(otel_wanted(&env(&on)), Ok(true), "{on:?}");
        }
        for off in [
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "true"),
            ],
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_TRACES_EXPORTER", "none"),
            ],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "")],
        ] {
            assert_eq!(otel_wanted(&env(&off)), Ok(false), "{off:?}");
        }
    }

    #[test]
    fn what_this_build_cannot_export_is_refused_with_a_reason() {
        let grpc = otel_wanted(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]));
        assert!(
            grpc.as_ref().is_err_and(|e| e.contains("not gRPC")),
            "{grpc:?}"
        );
        let zipkin = otel_wanted(&env(&[("OTEL_TRACES_EXPORTER", "zipkin")]));
        assert!(
            zipkin.as_ref().is_err_and(|e| e.contains("zipkin")),
            "{zipkin:?}"
        );
        // Off, nothing to refuse.
        assert_eq!(
            otel_wanted(&env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Ok(false)
        );
    }

    #[test]
    fn with_no_exporter_the_callers_context_passes_on_unchanged() {
        let caller = TraceContext::from_headers(
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("congo=1"),
        );
        assert_eq!(current_trace(caller.clone()), caller);
        assert_eq!(current_trace(None), None);
    }
}
