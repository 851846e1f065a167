//! The digests: SHA-256 over a canonical JSON encoding of what a request
//! asks for. The request digest covers kind, authority, canonical args and
//! run id, and decides replay vs conflict under one key; the intent digest
//! leaves the run id out, and recognises one intent sent by several runs.
//! The stored version keeps old rows comparable.

use serde_json::{Map, Value};

use super::canonical::{CanonError, Policy, canonicalize_at};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Version of the digests below (the canonicalizer's); stored with every command.
pub const DIGEST_VERSION: i16 = super::canonical::CANONICALIZER_VERSION;

// Domain separation: a digest of one form can never equal a digest of
// another form, or of some other use of SHA-256 over the same bytes.
// Versions 2 and 3 share the contexts: they differ only in the NFC pass,
// so a request whose text is already NFC has the same digests under both,
// and commands recorded under 2 keep meeting their copies.
const V1_CONTEXT: &[u8] = b"command-ledger/request/v1\n";
const REQUEST_CONTEXT: &[u8] = b"command-ledger/request/v2\n";
const INTENT_CONTEXT: &[u8] = b"command-ledger/intent/v2\n";

/// A SHA-256 request digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestDigest(pub [u8; 32]);

impl RequestDigest {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Reads a stored digest; `None` unless it is exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(RequestDigest)
    }
}

impl fmt::Debug for RequestDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestDigest({})", hex::encode(self.0))
    }
}

impl fmt::Display for RequestDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// The canonical form of a request, its digests, and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct CanonicalRequest {
    /// `{"args": <canonical args>, "authority": ..., "kind": ..., "run_id"?: ...}`,
    /// stored beside the command.
    pub form: Value,
    /// Decides replay vs conflict under one key: covers the run id.
    pub digest: RequestDigest,
    /// The same intent however it is spelled and whichever run sent it.
    pub intent_digest: RequestDigest,
    pub version: i16,
    /// The canonicalizer rules that fired, as `rule@path`.
    pub rules: Vec<String>,
}

/// The single entry point: everything that decides whether two requests
/// are the same goes through here. `authority` is the canonical authority
/// (see `AuthorityRef::canonical`).
pub fn canonical_request(
    kind: &str,
    authority: &Value,
    args: &Value,
    run_id: Option<&str>,
    policy: &Policy,
) -> Result<CanonicalRequest, CanonError> {
    canonical_request_at(DIGEST_VERSION, kind, authority, args, run_id, policy)
}

/// [`canonical_request`] under the rules of `version` (2 or later): a
/// request is compared with a stored command at the command's version.
pub fn canonical_request_at(
    version: i16,
    kind: &str,
    authority: &Value,
    args: &Value,
    run_id: Option<&str>,
    policy: &Policy,
) -> Result<CanonicalRequest, CanonError> {
    let canonical = canonicalize_at(args, policy, version)?;
    let mut form = Map::new();
    form.insert("args".to_owned(), canonical.value);
    form.insert("authority".to_owned(), authority.clone());
    form.insert("kind".to_owned(), Value::String(kind.to_owned()));
    let intent_digest = sha256(INTENT_CONTEXT, &Value::Object(form.clone()));
    if let Some(run_id) = run_id {
        form.insert("run_id".to_owned(), Value::String(run_id.to_owned()));
    }
    let form = Value::Object(form);
    let digest = sha256(REQUEST_CONTEXT, &form);
    Ok(CanonicalRequest {
        form,
        digest,
        intent_digest,
        version,
        rules: canonical.rules,
    })
}

/// The version-1 digest (keys sorted, nothing else), kept so that rows
/// recorded under it stay comparable: a request is compared with a stored
/// row at the row's version.
pub fn request_digest_v1(kind: &str, authority: &Value, args: &Value) -> RequestDigest {
    let mut form = Map::new();
    form.insert("args".to_owned(), args.clone());
    form.insert("authority".to_owned(), authority.clone());
    form.insert("kind".to_owned(), Value::String(kind.to_owned()));
    sha256(V1_CONTEXT, &Value::Object(form))
}

fn sha256(context: &[u8], form: &Value) -> RequestDigest {
    let mut bytes = Vec::with_capacity(context.len() + 128);
    bytes.extend_from_slice(context);
    write_canonical(form, &mut bytes);
    RequestDigest(Sha256::digest(&bytes).into())
}

/// The JSON pointers at which two canonical forms differ (for a conflict
/// response): objects are compared key by key, anything else as a whole.
pub fn differences(stored: &Value, incoming: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(stored, incoming, String::new(), &mut out);
    out
}

fn diff(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                let child = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => diff(v, w, child, out),
                    _ => out.push(child),
                }
            }
        }
        _ if a != b => out.push(if path.is_empty() {
            "/".to_owned()
        } else {
            path
        }),
        _ => {}
    }
}

/// Canonical JSON text: no insignificant whitespace, object keys sorted by
/// their UTF-8 bytes at every depth. Written by hand rather than trusting the
/// map type's iteration order, which another crate's feature could change.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    String::from_utf8(out).expect("canonical JSON is built from valid UTF-8 pieces")
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    let quoted = serde_json::to_string(s).expect("serializing a str cannot fail");
    out.extend_from_slice(quoted.as_bytes());
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[allow(clippy::needless_pass_by_value)]
    fn request(args: Value, run_id: Option<&str>) -> CanonicalRequest {
        canonical_request(
            "refund",
            &json!("payments"),
            &args,
            run_id,
            &Policy::default(),
        )
        .unwrap()
    }

    #[test]
    fn spellings_of_one_intent_share_both_digests() {
        let a = request(
            json!({"to": "Ada@Example.com", "amount": "$12.00", "currency": "usd", "trace_id": "1"}),
            None,
        );
        let b = request(
            json!({"amount": "1200 cents", "currency": "USD", "to": "ada@example.com"}),
            None,
        );
        assert_eq!((a.digest, a.intent_digest), (b.digest, b.intent_digest));
        assert_eq!(a.version, 3);
        assert!(a.rules.contains(&"money@/amount".to_owned()));
    }

    #[test]
    fn the_run_id_changes_the_request_digest_but_not_the_intent() {
        let a = request(json!({"amount": "1 USD"}), Some("worker-a"));
        let b = request(json!({"amount": "1 USD"}), Some("worker-b"));
        let none = request(json!({"amount": "1 USD"}), None);
        assert_ne!(a.digest, b.digest);
        assert_ne!(a.digest, none.digest);
        assert_eq!(a.intent_digest, b.intent_digest);
        assert_eq!(a.intent_digest, none.intent_digest);
        assert_eq!(a.form["run_id"], "worker-a");
    }

    #[test]
    fn kind_authority_and_args_each_change_both_digests() {
        let base = canonical_request(
            "refund",
            &json!("a1"),
            &json!({"n": 1}),
            None,
            &Policy::default(),
        )
        .unwrap();
        for other in [
            canonical_request(
                "refund2",
                &json!("a1"),
                &json!({"n": 1}),
                None,
                &Policy::default(),
            ),
            canonical_request(
                "refund",
                &json!("a2"),
                &json!({"n": 1}),
                None,
                &Policy::default(),
            ),
            canonical_request(
                "refund",
                &json!({"id": "a1", "generation": 3}),
                &json!({"n": 1}),
                None,
                &Policy::default(),
            ),
            canonical_request(
                "refund",
                &json!("a1"),
                &json!({"n": 2}),
                None,
                &Policy::default(),
            ),
            canonical_request(
                "refund",
                &json!("a1"),
                &json!({"n": "1"}),
                None,
                &Policy::default(),
            ),
        ] {
            let other = other.unwrap();
            assert_ne!(base.digest, other.digest);
            assert_ne!(base.intent_digest, other.intent_digest);
        }
    }

    #[test]
    fn ambiguous_money_is_refused_before_any_digest() {
        assert!(
            canonical_request(
                "refund",
                &json!("a"),
                &json!({"amount": 12}),
                None,
                &Policy::default()
            )
            .is_err()
        );
    }

    #[test]
    fn a_name_in_nfc_and_in_nfd_is_one_intent_from_version_3() {
        let composed = json!({"to": "Jos\u{e9}@example.com", "memo": "caf\u{e9}", "n\u{e9}": 1});
        let decomposed =
            json!({"to": "Jose\u{301}@example.com", "memo": "cafe\u{301}", "ne\u{301}": 1});
        let policy = Policy::default();
        let at = |version, args: &Value| {
            canonical_request_at(version, "refund", &json!("agent-1"), args, None, &policy).unwrap()
        };
        let (a, b) = (at(3, &composed), at(3, &decomposed));
        assert_eq!((a.digest, a.intent_digest), (b.digest, b.intent_digest));
        assert_eq!(a.form, b.form);
        assert!(b.rules.contains(&"nfc@/memo".to_owned()), "{:?}", b.rules);
        assert!(b.rules.contains(&"nfc@/né".to_owned()), "{:?}", b.rules);
        // Version 2 kept them apart; commands recorded under it keep their digests.
        assert_ne!(at(2, &composed).digest, at(2, &decomposed).digest);
        assert_eq!(
            at(2, &composed).digest,
            a.digest,
            "text already in NFC: the same digest"
        );
        assert_eq!(at(2, &composed).version, 2);
    }

    #[test]
    fn two_keys_that_become_one_in_nfc_are_refused() {
        let args = json!({"ne\u{301}": 1, "n\u{e9}": 2});
        let err = canonical_request("k", &json!("a"), &args, None, &Policy::default()).unwrap_err();
        assert!(matches!(err, CanonError::DuplicateKey { .. }), "{err:?}");
        // Version 2 did not normalize, so it saw two fields.
        assert!(canonical_request_at(2, "k", &json!("a"), &args, None, &Policy::default()).is_ok());
    }

    #[test]
    fn the_version_1_digest_is_fixed() {
        // Stored digests must stay comparable: this value may never change.
        let mut bytes = V1_CONTEXT.to_vec();
        bytes.extend_from_slice(br#"{"args":{"amount":12},"authority":"agent-1","kind":"refund"}"#);
        assert_eq!(
            request_digest_v1("refund", &json!("agent-1"), &json!({"amount": 12})).0,
            <[u8; 32]>::from(Sha256::digest(&bytes))
        );
    }

    #[test]
    fn differences_name_the_fields_that_differ() {
        let a = request(
            json!({"to": "ada@example.com", "amount": "12 USD", "memo": "x"}),
            None,
        )
        .form;
        let b = request(
            json!({"to": "bob@example.com", "amount": "13 USD"}),
            Some("r"),
        )
        .form;
        assert_eq!(
            differences(&a, &b),
            [
                "/args/amount/amount_minor",
                "/args/memo",
                "/args/to",
                "/run_id"
            ]
        );
        assert!(differences(&a, &a).is_empty());
    }

    #[test]
    fn canonical_json_sorts_nested_keys_and_drops_whitespace() {
        let v = json!({"b": [ {"z": 1, "a": null} ], "a": true});
        assert_eq!(canonical_json(&v), r#"{"a":true,"b":[{"a":null,"z":1}]}"#);
    }

    /// Any JSON value: numbers of every form serde_json writes (signed,
    /// unsigned, finite floats), any text, nested.
    pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_json_parses_back_to_the_same_value(v in arb_json()) {
            let text = canonical_json(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&back, &v);
            prop_assert_eq!(canonical_json(&back), text);
        }
    }
}
