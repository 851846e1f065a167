//! Why args could not be brought to their canonical form: an unreadable
//! or ambiguous amount of money, or two keys that are one in Unicode NFC.
//! Apart from the canonicalizer (`canonical`) so that the money parser it
//! calls (`money`) can name the same errors without importing it back.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    #[error(
        "{path}: {text:?} is an amount without a currency; add a currency field, write it like \"12.00 USD\", or give the kind a currency in the catalog"
    )]
    AmbiguousMoney { path: String, text: String },
    #[error("{path}: {text:?} is not an amount of money")]
    BadMoney { path: String, text: String },
    #[error("{path}: unknown currency {code:?} (ISO 4217 codes such as USD, EUR, JPY)")]
    UnknownCurrency { path: String, code: String },
    #[error("{path}: {text:?} has more decimals than {currency} allows ({digits})")]
    TooPrecise {
        path: String,
        text: String,
        currency: String,
        digits: u32,
    },
    #[error("{path}: the amount says {found} but the currency field says {given}")]
    CurrencyMismatch {
        path: String,
        found: String,
        given: String,
    },
    #[error("{path}: amount out of range")]
    OutOfRange { path: String },
    #[error("{path}: {text:?} is not more than zero; this kind takes only positive amounts")]
    NotPositive { path: String, text: String },
    #[error(
        "{path}: two fields of one object have the same name once written in Unicode NFC; send one"
    )]
    DuplicateKey { path: String },
}

impl CanonError {
    /// Where in the args the unreadable value sits (a JSON pointer).
    pub fn path(&self) -> &str {
        match self {
            CanonError::AmbiguousMoney { path, .. }
            | CanonError::BadMoney { path, .. }
            | CanonError::UnknownCurrency { path, .. }
            | CanonError::TooPrecise { path, .. }
            | CanonError::CurrencyMismatch { path, .. }
            | CanonError::OutOfRange { path }
            | CanonError::NotPositive { path, .. }
            | CanonError::DuplicateKey { path } => path,
        }
    }
}
