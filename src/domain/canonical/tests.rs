//! The canonicalizer's tests: examples, and properties over many spellings.

use super::*;
use crate::domain::digest::canonical_json;
use proptest::prelude::*;
use serde_json::json;

#[allow(clippy::needless_pass_by_value)]
fn canon(v: Value) -> Value {
    canonicalize(&v, &Policy::default()).unwrap().value
}

#[allow(clippy::needless_pass_by_value)]
fn err(v: Value) -> CanonError {
    canonicalize(&v, &Policy::default()).unwrap_err()
}

#[test]
fn every_spelling_of_one_refund_is_one_intent() {
    let expected =
        json!({"customer": "ada@example.com", "amount": {"amount_minor": 1200, "currency": "USD"}});
    for args in [
        json!({"customer": "Ada@Example.com", "amount": "$12.00", "currency": "usd"}),
        json!({"customer": "ada@example.com", "amount": "12.00 USD"}),
        json!({"amount": "USD 12", "customer": "ADA@EXAMPLE.COM"}),
        json!({"customer": "ada@example.com", "amount": "1200 cents", "currency": "usd"}),
        json!({"customer": "ada@example.com", "amount": 12, "currency": "USD"}),
        json!({"customer": "ada@example.com", "amount": 12.0, "currency": "USD"}),
        json!({"customer": "ada@example.com", "amount": "12", "currency": "usd"}),
        json!({"customer": "ada@example.com", "amount": "US$12", "trace_id": "t-1", "request_id": "r-9"}),
        json!({"customer": " ada@example.com", "amount": "$12", "traceId": "x", "timestamp": "2026-01-01"}),
        json!({"customer": "ada@example.com", "amount": {"amount_minor": 1200, "currency": "USD"}}),
    ] {
        assert_eq!(canon(args.clone()), expected, "{args}");
    }
}

#[test]
fn money_in_exponent_notation_is_refused_in_text_and_read_in_json_numbers() {
    for text in ["1e3 USD", "$1e3", "USD 1E3", "1.2e2 EUR", "1e-2 USD"] {
        assert!(
            matches!(err(json!({"amount": text})), CanonError::BadMoney { .. }),
            "{text}"
        );
    }
    // A JSON number is printed by serde, not by a person: its exponent is read.
    assert_eq!(
        canon(json!({"amount": 1e3, "currency": "USD"}))["amount"],
        json!({"amount_minor": 100_000, "currency": "USD"})
    );
}

#[test]
fn strings_and_keys_are_compared_in_unicode_nfc() {
    let a = canon(json!({"payee": "Jos\u{e9}", "caf\u{e9}": ["\u{c5}ngstr\u{f6}m"]}));
    let b = canon(json!({"payee": "Jose\u{301}", "cafe\u{301}": ["A\u{30a}ngstro\u{308}m"]}));
    assert_eq!(a, b);
    assert_eq!(a["payee"], json!("Jos\u{e9}"));
}

#[test]
fn minor_units_follow_iso_4217() {
    assert_eq!(
        canon(json!({"amount": "¥1200"}))["amount"],
        json!({"amount_minor": 1200, "currency": "JPY"})
    );
    assert_eq!(
        canon(json!({"amount": "1.234 BHD"}))["amount"],
        json!({"amount_minor": 1234, "currency": "BHD"})
    );
    assert_eq!(
        canon(json!({"amount": 12.5, "currency": "eur"}))["amount"],
        json!({"amount_minor": 1250, "currency": "EUR"})
    );
    assert_eq!(
        canon(json!({"price": "1,234.50 GBP"}))["price"],
        json!({"amount_minor": 123_450, "currency": "GBP"})
    );
    assert_eq!(
        canon(json!({"fee": "-0.05 USD"}))["fee"],
        json!({"amount_minor": -5, "currency": "USD"})
    );
    assert_eq!(
        canon(json!({"amount": "12€"}))["amount"],
        json!({"amount_minor": 1200, "currency": "EUR"})
    );
    assert_eq!(
        canon(json!({"amount": "$5", "currency": "CAD"}))["amount"],
        json!({"amount_minor": 500, "currency": "CAD"})
    );
    assert!(matches!(
        err(json!({"amount": "12.5 JPY"})),
        CanonError::TooPrecise { .. }
    ));
    assert!(matches!(
        err(json!({"amount": "12.001 USD"})),
        CanonError::TooPrecise { .. }
    ));
    assert_eq!(
        canon(json!({"amount": "12.0100 USD"}))["amount"]["amount_minor"],
        1201
    );
}

#[test]
fn money_without_a_currency_is_an_error_not_a_guess() {
    for args in [
        json!({"amount": 12}),
        json!({"amount": "12.00"}),
        json!({"total": "1200 cents"}),
    ] {
        assert!(
            matches!(err(args.clone()), CanonError::AmbiguousMoney { .. }),
            "{args}"
        );
    }
    assert!(matches!(
        err(json!({"amount": "12 XYZ"})),
        CanonError::BadMoney { .. } | CanonError::UnknownCurrency { .. }
    ));
    assert!(matches!(
        err(json!({"amount": "12", "currency": "XYZ"})),
        CanonError::UnknownCurrency { .. }
    ));
    assert!(matches!(
        err(json!({"amount": "12 USD", "currency": "EUR"})),
        CanonError::CurrencyMismatch { .. }
    ));
    assert!(matches!(
        err(json!({"amount": "12 apples"})),
        CanonError::BadMoney { .. }
    ));
}

#[test]
fn text_under_a_money_name_that_is_no_amount_is_refused_not_passed_through() {
    for args in [
        json!({"to": "x@y.z", "amount": "twelve bucks"}),
        json!({"amount": "twelve"}),
        json!({"fee": ""}),
        json!({"price": "x".repeat(300)}),
        json!({"order": {"total": "lots"}}),
    ] {
        match err(args.clone()) {
            CanonError::BadMoney { path, .. } => assert!(path.starts_with('/'), "{path}"),
            other => panic!("{args}: {other:?}"),
        }
    }
    let e = err(json!({"to": "x@y.z", "amount": "twelve bucks"}));
    assert_eq!(e.path(), "/amount");
    assert_eq!(
        e.to_string(),
        "/amount: \"twelve bucks\" is not an amount of money"
    );
    // What is no text or number is not taken for money.
    for args in [json!({"amount": null}), json!({"fee": true})] {
        assert_eq!(canon(args.clone()), args);
    }
    assert!(matches!(
        err(json!({"amount": "99999999999999999999 USD"})),
        CanonError::OutOfRange { .. }
    ));
}

#[test]
fn a_kind_with_a_currency_reads_amounts_that_name_none_in_it() {
    let usd = Policy {
        currency: Some("USD".into()),
        ..Policy::default()
    };
    let expected = json!({"amount": {"amount_minor": 1200, "currency": "USD"}});
    for args in [
        json!({"amount": "1200 cents"}),
        json!({"amount": "12.00"}),
        json!({"amount": 12}),
        json!({"amount": "$12"}),
        json!({"amount": "12 USD"}),
    ] {
        let c = canonicalize(&args, &usd).unwrap();
        assert_eq!(c.value, expected, "{args}");
    }
    let c = canonicalize(&json!({"amount": "1200 cents"}), &usd).unwrap();
    assert_eq!(c.rules, ["kind_currency@/amount", "money@/amount"]);
    // A currency the request names still wins: the kind's is a default.
    let eur = canonicalize(&json!({"amount": "12 EUR"}), &usd).unwrap();
    assert_eq!(eur.value["amount"]["currency"], "EUR");
    // "$" in a kind counting in CAD is CAD.
    let cad = Policy {
        currency: Some("CAD".into()),
        ..Policy::default()
    };
    let c = canonicalize(&json!({"amount": "$5"}), &cad).unwrap();
    assert_eq!(c.value["amount"]["currency"], "CAD");
    // Without the kind's currency, still an error.
    assert!(matches!(
        err(json!({"amount": "1200 cents"})),
        CanonError::AmbiguousMoney { .. }
    ));
}

#[test]
fn fields_that_are_not_money_are_left_alone() {
    let args = json!({"direction": "left", "degrees": 12.5, "amount_minor": 1200, "currency": "usd", "note": "pay $12"});
    let out = canonicalize(&args, &Policy::default()).unwrap();
    assert_eq!(
        out.value, args,
        "no money-named field: the currency field stays too"
    );
    let off = Policy {
        auto_detect: false,
        ..Policy::default()
    };
    assert_eq!(
        canonicalize(&json!({"amount": 12, "to": "A@B.co"}), &off)
            .unwrap()
            .value,
        json!({"amount": 12, "to": "A@B.co"})
    );
}

#[test]
fn the_policy_names_fields_explicitly() {
    let policy = Policy {
        auto_detect: false,
        money_fields: vec!["refund.sum".into()],
        email_fields: vec!["who".into()],
        volatile_fields: vec!["attempt".into()],
        currency: None,
        positive_money: Vec::new(),
    };
    let out = canonicalize(
        &json!({"refund": {"sum": "3 EUR"}, "who": "X@Y.org", "attempt": 4}),
        &policy,
    )
    .unwrap();
    assert_eq!(
        out.value,
        json!({"refund": {"sum": {"amount_minor": 300, "currency": "EUR"}}, "who": "x@y.org"})
    );
}

#[test]
fn the_rules_that_fired_are_recorded_with_their_paths() {
    let out = canonicalize(&json!({"customer": "Ada@Example.com", "amount": "$12.00", "currency": "usd", "trace_id": "t", "n": 1.0}), &Policy::default()).unwrap();
    assert_eq!(
        out.rules,
        [
            "currency_merged@/currency",
            "drop_volatile@/trace_id",
            "email_lowercase@/customer",
            "money@/amount",
            "number@/n"
        ]
    );
}

#[test]
fn numbers_take_one_form() {
    assert_eq!(canon(json!({"n": 1.0})), json!({"n": 1}));
    assert_eq!(canon(json!({"n": 1e2})), json!({"n": 100}));
    assert_eq!(canon(json!({"n": 0.5})), json!({"n": 0.5}));
    assert_eq!(canon(json!({"n": [2.0, -3.0]})), json!({"n": [2, -3]}));
}

fn arb_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("amount".to_owned()),
        Just("currency".to_owned()),
        Just("trace_id".to_owned()),
        Just("to".to_owned()),
        "[a-z_]{1,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1.0e9f64..1.0e9).prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        Just(json!("$12.00")),
        Just(json!("12.00 USD")),
        Just(json!("usd")),
        Just(json!("Ada@Example.com")),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn reorder(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<_> = m.iter().collect();
            entries.reverse();
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), reorder(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(reorder).collect()),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn canonicalization_is_a_fixpoint(v in arb_json()) {
        if let Ok(once) = canonicalize(&v, &Policy::default()) {
            let twice = canonicalize(&once.value, &Policy::default()).unwrap();
            prop_assert_eq!(&twice.value, &once.value);
        }
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter(v in arb_json()) {
        let respelled: Value = serde_json::from_str(&serde_json::to_string_pretty(&reorder(&v)).unwrap()).unwrap();
        let a = canonicalize(&v, &Policy::default()).map(|c| canonical_json(&c.value));
        let b = canonicalize(&respelled, &Policy::default()).map(|c| canonical_json(&c.value));
        prop_assert_eq!(a, b);
    }

    #[test]
    fn every_spelling_of_an_amount_agrees_and_different_amounts_differ(
        cents in 0i64..10_000_000, other in 0i64..10_000_000,
    ) {
        let (units, rest) = (cents / 100, cents % 100);
        let spellings = [
            json!({"amount": format!("${units}.{rest:02}")}),
            json!({"amount": format!("{units}.{rest:02} USD")}),
            json!({"amount": format!("USD {units}.{rest:02}")}),
            json!({"amount": format!("{cents} cents"), "currency": "usd"}),
            json!({"amount": cents as f64 / 100.0, "currency": "USD"}),
        ];
        let first = canon(spellings[0].clone());
        prop_assert_eq!(&first["amount"]["amount_minor"], &json!(cents));
        for s in &spellings[1..] {
            prop_assert_eq!(&canon(s.clone()), &first);
        }
        let different = canon(json!({"amount": format!("{other} cents"), "currency": "usd"}));
        prop_assert_eq!(different == first, other == cents);
        let euros = canon(json!({"amount": format!("{cents} cents"), "currency": "eur"}));
        prop_assert_ne!(euros, first);
    }

    #[test]
    fn different_recipients_stay_different(a in "[a-z]{1,8}", b in "[a-z]{1,8}") {
        let x = canon(json!({"to": format!("{a}@example.com"), "amount": "1 USD"}));
        let y = canon(json!({"to": format!("{}@EXAMPLE.com", b.to_uppercase()), "amount": "1 USD"}));
        prop_assert_eq!(x == y, a == b);
    }

    #[test]
    fn arbitrary_json_never_panics(v in arb_json()) {
        let _ = canonicalize(&v, &Policy::default());
    }

    #[test]
    fn arbitrary_money_text_never_panics(s in "\\PC{0,40}", currency in "[A-Za-z]{0,4}") {
        let _ = canonicalize(&json!({"amount": s, "currency": currency}), &Policy::default());
    }
}

proptest! {
    /// Any text, composed or decomposed, in values and in keys: one form.
    #[test]
    fn a_string_and_its_decomposition_canonicalize_alike(s in "\\PC{0,16}", k in "\\PC{1,8}") {
        use unicode_normalization::UnicodeNormalization;
        let nfd = |t: &str| t.nfd().collect::<String>();
        let mut a = Map::new();
        a.insert(k.clone(), Value::String(s.clone()));
        let mut b = Map::new();
        b.insert(nfd(&k), Value::String(nfd(&s)));
        let (a, b) = (
            canonicalize(&Value::Object(a), &Policy::default()),
            canonicalize(&Value::Object(b), &Policy::default()),
        );
        match (a, b) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a.value, b.value),
            (a, b) => prop_assert_eq!(a.is_err(), b.is_err()),
        }
    }
}

#[test]
fn a_positive_money_field_refuses_zero_and_negative_amounts_in_every_spelling() {
    let refund = Policy {
        positive_money: vec!["amount".into(), "refund.fee".into()],
        ..Policy::default()
    };
    for bad in [
        json!({"amount": "-5.00 USD"}),
        json!({"amount": "0.00 USD"}),
        json!({"amount": "-$5"}),
        json!({"amount": "0 cents", "currency": "USD"}),
        json!({"amount": -5, "currency": "EUR"}),
        json!({"amount": {"amount_minor": -500, "currency": "USD"}}),
        json!({"amount": {"amount_minor": 0, "currency": "USD"}}),
        json!({"amount": "1 USD", "refund": {"fee": "-0.01 USD"}}),
    ] {
        let e = canonicalize(&bad, &refund).unwrap_err();
        assert!(matches!(e, CanonError::NotPositive { .. }), "{bad}: {e}");
        assert!(e.to_string().contains("not more than zero"), "{e}");
    }
    let e = canonicalize(&json!({"amount": "-5.00 USD"}), &refund).unwrap_err();
    assert_eq!(e.path(), "/amount");
    for good in [
        json!({"amount": "0.01 USD"}),
        json!({"amount": "$12.00"}),
        json!({"amount": {"amount_minor": 1, "currency": "USD"}}),
        json!({"amount": "1 USD", "refund": {"fee": "0.50 USD"}}),
    ] {
        assert!(canonicalize(&good, &refund).is_ok(), "{good}");
    }
    // Without the rule, a negative amount is read as it is.
    let plain = canonicalize(&json!({"amount": "-5.00 USD"}), &Policy::default()).unwrap();
    assert_eq!(plain.value["amount"]["amount_minor"], -500);
}
