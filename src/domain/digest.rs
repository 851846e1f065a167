//! The request digest: SHA-256 over a canonical JSON encoding of what the
//! request asks for (kind, authority, args). Two requests with the same
//! digest are the same request; the stored version keeps old rows comparable
//! when a richer canonicalizer replaces this one.

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Version of the canonical form below; stored with every command.
pub const DIGEST_VERSION: i16 = 1;

/// Domain separation: a digest of this form can never equal a digest of some
/// other use of SHA-256 over the same bytes.
const DIGEST_CONTEXT: &[u8] = b"command-ledger/request/v1\n";

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

/// The canonical form of a request and its digest.
#[derive(Debug, Clone, PartialEq)]
pub struct CanonicalRequest {
    /// `{"args": ..., "authority": ..., "kind": ...}`, stored beside the command.
    pub form: Value,
    pub digest: RequestDigest,
    pub version: i16,
}

/// The single entry point for canonicalization: everything that decides
/// whether two requests are the same goes through here.
/// `authority` is the canonical authority (see `AuthorityRef::canonical`).
pub fn canonical_request(kind: &str, authority: &Value, args: &Value) -> CanonicalRequest {
    let mut form = Map::new();
    form.insert("args".to_owned(), args.clone());
    form.insert("authority".to_owned(), authority.clone());
    form.insert("kind".to_owned(), Value::String(kind.to_owned()));
    let form = Value::Object(form);

    let mut bytes = Vec::with_capacity(DIGEST_CONTEXT.len() + 128);
    bytes.extend_from_slice(DIGEST_CONTEXT);
    write_canonical(&form, &mut bytes);
    let digest = RequestDigest(Sha256::digest(&bytes).into());
    CanonicalRequest {
        form,
        digest,
        version: DIGEST_VERSION,
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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_digest() {
        let a: Value = serde_json::from_str(r#"{"to":"ada","amount":{"v":1,"c":"USD"}}"#).unwrap();
        let b: Value =
            serde_json::from_str("{ \"amount\" : { \"c\":\"USD\", \"v\":1 },\n \"to\":\"ada\" }")
                .unwrap();
        assert_eq!(
            canonical_request("refund", &json!("a1"), &a),
            canonical_request("refund", &json!("a1"), &b)
        );
    }

    #[test]
    fn kind_authority_and_args_each_change_the_digest() {
        let args = json!({"amount": 12});
        let base = canonical_request("refund", &json!("agent-1"), &args).digest;
        assert_ne!(
            base,
            canonical_request("refund2", &json!("agent-1"), &args).digest
        );
        assert_ne!(
            base,
            canonical_request("refund", &json!("agent-2"), &args).digest
        );
        assert_ne!(
            base,
            canonical_request("refund", &json!("agent-1"), &json!({"amount": 13})).digest
        );
        assert_ne!(
            base,
            canonical_request("refund", &json!("agent-1"), &json!({"amount": "12"})).digest
        );
    }

    #[test]
    fn canonical_json_sorts_nested_keys_and_drops_whitespace() {
        let v = json!({"b": [ {"z": 1, "a": null} ], "a": true});
        assert_eq!(canonical_json(&v), r#"{"a":true,"b":[{"a":null,"z":1}]}"#);
    }

    #[test]
    fn the_canonical_form_names_kind_authority_and_args() {
        let c = canonical_request("refund", &json!("agent-1"), &json!({"x": 1}));
        assert_eq!(
            c.form,
            json!({"kind": "refund", "authority": "agent-1", "args": {"x": 1}})
        );
        assert_eq!(c.version, DIGEST_VERSION);
    }

    #[test]
    fn a_known_request_has_a_fixed_digest() {
        // Stored digests must stay comparable: this value may only change
        // together with DIGEST_VERSION.
        let c = canonical_request("refund", &json!("agent-1"), &json!({"amount": 12}));
        let mut bytes = DIGEST_CONTEXT.to_vec();
        bytes.extend_from_slice(br#"{"args":{"amount":12},"authority":"agent-1","kind":"refund"}"#);
        assert_eq!(c.digest.0, <[u8; 32]>::from(Sha256::digest(&bytes)));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
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

        #[test]
        fn the_digest_ignores_how_the_args_were_spelled(v in arb_json()) {
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            let reparsed: Value = serde_json::from_str(&pretty).unwrap();
            prop_assert_eq!(
                canonical_request("k", &json!("a"), &v).digest,
                canonical_request("k", &json!("a"), &reparsed).digest
            );
        }
    }
}
