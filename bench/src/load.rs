//! HTTP load against the API: closed loops of N clients, and an open loop at
//! a fixed rate whose latency counts from when each request was due (so a
//! stall is not hidden by requests that were never sent).

use hdrhistogram::Histogram;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The API under load and the principal that submits.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) token: String,
}

/// Which idempotency key each request carries.
#[derive(Debug, Clone)]
pub(crate) enum Keys {
    /// A new key every time: every request records a command.
    Unique { prefix: String },
    /// With probability `share`, one of `known` (already recorded with the
    /// same body: a replay); otherwise a new key.
    DuplicateMix {
        prefix: String,
        share: f64,
        known: Arc<Vec<String>>,
    },
}

#[derive(Debug)]
pub(crate) struct LoadResult {
    pub(crate) ok: u64,
    pub(crate) errors: u64,
    pub(crate) seconds: f64,
    pub(crate) latency_us: Histogram<u64>,
}

impl LoadResult {
    pub(crate) fn rps(&self) -> f64 {
        self.ok as f64 / self.seconds
    }

    pub(crate) fn ms(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

/// A small deterministic generator; the mix needs no more.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(crate) async fn submit(target: &Target, key: &str, body: &'static str) -> bool {
    let response = target
        .client
        .post(format!("{}/v1/commands", target.url))
        .bearer_auth(&target.token)
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await;
    matches!(response, Ok(r) if r.status().is_success())
}

fn pick_key(keys: &Keys, client: usize, i: u64, rng: &mut XorShift) -> String {
    match keys {
        Keys::Unique { prefix } => format!("{prefix}-{client}-{i}"),
        Keys::DuplicateMix {
            prefix,
            share,
            known,
        } => {
            if rng.unit() < *share && !known.is_empty() {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let at = ((rng.unit() * known.len() as f64) as usize).min(known.len() - 1);
                known[at].clone()
            } else {
                format!("{prefix}-{client}-{i}")
            }
        }
    }
}

/// `clients` loops, each sending its next request when the last answered,
/// for `duration`.
pub(crate) async fn closed_loop(
    target: &Target,
    clients: usize,
    duration: Duration,
    keys: &Keys,
    body: &'static str,
) -> LoadResult {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let (target, keys) = (target.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (client as u64 + 1));
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = pick_key(&keys, client, i, &mut rng);
                i += 1;
                let sent = Instant::now();
                if submit(&target, &key, body).await {
                    ok += 1;
                    #[allow(clippy::cast_possible_truncation)]
                    let _ = hist.record((sent.elapsed().as_micros() as u64).max(1));
                } else {
                    errors += 1;
                }
            }
            (ok, errors, hist)
        }));
    }
    gather(tasks, started).await
}

/// Requests sent at `rate` per second for `duration`, whether or not earlier
/// ones have answered; each latency counts from when the request was due.
pub(crate) async fn open_loop(
    target: &Target,
    rate: f64,
    duration: Duration,
    prefix: &str,
    body: &'static str,
) -> LoadResult {
    let started = Instant::now();
    let hist = Arc::new(Mutex::new(histogram()));
    let counts = Arc::new(Mutex::new((0u64, 0u64)));
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let total = (rate * duration.as_secs_f64()) as u64;
    let mut tasks = Vec::new();
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let (target, hist, counts) = (target.clone(), Arc::clone(&hist), Arc::clone(&counts));
        let key = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            let ok = submit(&target, &key, body).await;
            #[allow(clippy::cast_possible_truncation)]
            let us = (due.elapsed().as_micros() as u64).max(1);
            let mut c = counts.lock().expect("counts lock");
            if ok {
                c.0 += 1;
                let _ = hist.lock().expect("histogram lock").record(us);
            } else {
                c.1 += 1;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a load task does not panic");
    }
    let (ok, errors) = *counts.lock().expect("counts lock");
    let latency_us = hist.lock().expect("histogram lock").clone();
    LoadResult {
        ok,
        errors,
        seconds: started.elapsed().as_secs_f64(),
        latency_us,
    }
}

/// `clients` loops, each sending its next batch of `items` commands (each
/// with a new key) to `POST /v1/commands/batch` when the last answered, for
/// `duration`. `ok` counts the items answered `new`; a batch with any other
/// answer counts as an error.
pub(crate) async fn batch_loop(
    target: &Target,
    clients: usize,
    duration: Duration,
    prefix: &str,
    items: usize,
    body: &'static str,
) -> LoadResult {
    let started = Instant::now();
    let deadline = started + duration;
    // The item without its closing brace, to append the key to.
    let open = body
        .trim_end()
        .strip_suffix('}')
        .expect("a submission body is a JSON object");
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let target = target.clone();
        let (prefix, open) = (prefix.to_owned(), open.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut i = 0u64;
            while Instant::now() < deadline {
                let mut batch = String::with_capacity(items * (open.len() + 48) + 16);
                batch.push_str(r#"{"items":["#);
                for n in 0..items {
                    if n > 0 {
                        batch.push(',');
                    }
                    batch.push_str(&open);
                    batch.push_str(&format!(r#","idempotency_key":"{prefix}-{client}-{i}"}}"#));
                    i += 1;
                }
                batch.push_str("]}");
                let sent = Instant::now();
                let response = target
                    .client
                    .post(format!("{}/v1/commands/batch", target.url))
                    .bearer_auth(&target.token)
                    .header("Content-Type", "application/json")
                    .body(batch)
                    .send()
                    .await;
                let new = match response {
                    Ok(r) if r.status().is_success() => r
                        .text()
                        .await
                        .map_or(0, |t| t.matches(r#""status":202"#).count()),
                    _ => 0,
                };
                if new == items {
                    ok += items as u64;
                    #[allow(clippy::cast_possible_truncation)]
                    let _ = hist.record((sent.elapsed().as_micros() as u64).max(1));
                } else {
                    errors += 1;
                }
            }
            (ok, errors, hist)
        }));
    }
    gather(tasks, started).await
}

/// The clients' counts and latencies added up, over the time since `started`.
async fn gather(
    tasks: Vec<tokio::task::JoinHandle<(u64, u64, Histogram<u64>)>>,
    started: Instant,
) -> LoadResult {
    let mut result = LoadResult {
        ok: 0,
        errors: 0,
        seconds: 0.0,
        latency_us: histogram(),
    };
    for task in tasks {
        let (ok, errors, hist) = task.await.expect("a load task does not panic");
        result.ok += ok;
        result.errors += errors;
        result
            .latency_us
            .add(&hist)
            .expect("histograms with the same bounds add");
    }
    result.seconds = started.elapsed().as_secs_f64();
    result
}
