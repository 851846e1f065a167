//! Duplicate keys in a JSON object, found before anything reads the body.
//! JSON leaves their meaning open: serde_json keeps the last, other parsers
//! the first or both, so a body that names `amount` twice can mean one
//! refund to the ledger's canonical form and another to a provider. Such a
//! body is refused whole, naming the key and where it is.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// A key named twice in one object: where the object is (a JSON pointer,
/// RFC 6901) and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// The object holding the key twice (`""` for the top level).
    pub object: String,
    pub key: String,
}

impl DuplicateKey {
    /// The pointer of the key itself.
    pub fn pointer(&self) -> String {
        format!("{}/{}", self.object, escape(&self.key))
    }
}

impl fmt::Display for DuplicateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = if self.object.is_empty() {
            "the top-level object".to_owned()
        } else {
            format!("the object at {}", self.object)
        };
        write!(
            f,
            "the key {:?} appears more than once in {place}: a JSON object must name each key once",
            self.key
        )
    }
}

/// The first duplicate key in `body`, in document order; `None` when every
/// object names each key once, or when `body` is not JSON at all (the
/// parser that follows says what is wrong with it).
pub fn first_duplicate(body: &[u8]) -> Option<DuplicateKey> {
    let mut path = Vec::new();
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    // Deep nesting is refused by serde_json's own recursion limit, as it
    // would be by the parse that follows.
    let _ = Walk {
        path: &mut path,
        found: &mut found,
    }
    .deserialize(&mut de);
    found
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Walks one value, with the path to it; stops at the first duplicate.
struct Walk<'a> {
    path: &'a mut Vec<String>,
    found: &'a mut Option<DuplicateKey>,
}

impl Walk<'_> {
    fn pointer(&self) -> String {
        self.path
            .iter()
            .map(|s| format!("/{}", escape(s)))
            .collect()
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                *self.found = Some(DuplicateKey {
                    object: self.pointer(),
                    key,
                });
                // Stops the walk; the error itself is never shown.
                return Err(serde::de::Error::custom("duplicate key"));
            }
            self.path.push(key);
            map.next_value_seed(Walk {
                path: &mut *self.path,
                found: &mut *self.found,
            })?;
            self.path.pop();
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            self.path.push(index.to_string());
            let more = seq.next_element_seed(Walk {
                path: &mut *self.path,
                found: &mut *self.found,
            })?;
            self.path.pop();
            if more.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(body: &str) -> Option<(String, String)> {
        first_duplicate(body.as_bytes()).map(|d| (d.pointer(), d.object))
    }

    #[test]
    fn a_key_named_twice_is_found_where_it_is() {
        assert_eq!(
            dup(r#"{"kind":"refund","kind":"charge"}"#),
            Some(("/kind".into(), "".into()))
        );
        assert_eq!(
            dup(r#"{"args":{"to":"a@b.c","amount":"1 USD","amount":"900 USD"}}"#),
            Some(("/args/amount".into(), "/args".into()))
        );
        assert_eq!(
            dup(r#"{"items":[{"args":{}},{"args":{"x":{"y":1,"y":2}}}]}"#),
            Some(("/items/1/args/x/y".into(), "/items/1/args/x".into()))
        );
        // Keys are compared after JSON unescaping: "\u0061" is "a".
        assert_eq!(dup(r#"{"a":1,"\u0061":2}"#), Some(("/a".into(), "".into())));
        // Pointer segments are escaped (RFC 6901).
        assert_eq!(
            dup(r#"{"a/b":{"~":1,"~":2}}"#),
            Some(("/a~1b/~0".into(), "/a~1b".into()))
        );
    }

    #[test]
    fn the_first_duplicate_in_document_order_is_named() {
        let d = first_duplicate(br#"{"b":{"z":1,"z":2},"a":1,"a":2}"#).unwrap();
        assert_eq!((d.object.as_str(), d.key.as_str()), ("/b", "z"));
        assert!(d.to_string().contains("\"z\""), "{d}");
        assert!(d.to_string().contains("/b"), "{d}");
    }

    #[test]
    fn the_same_key_in_different_objects_is_no_duplicate() {
        for ok in [
            r#"{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}"#,
            r#"[{"k":1},{"k":1}]"#,
            r#"{}"#,
            r#"[]"#,
            r#""text""#,
            r#"12.5"#,
            r#"null"#,
            r#"{"a":[1,2,[3,{"b":true}]],"c":null}"#,
        ] {
            assert_eq!(dup(ok), None, "{ok}");
        }
    }

    #[test]
    fn what_is_not_json_is_left_to_the_parser() {
        for bad in ["", "{", r#"{"a":}"#, "nope", r#"{"a":1}{"a":2}"#] {
            assert_eq!(dup(bad), None, "{bad}");
        }
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let deep = "[".repeat(100_000);
        assert_eq!(dup(&deep), None);
        let deep_objects = r#"{"a":"#.repeat(10_000);
        assert_eq!(dup(&deep_objects), None);
    }
}
