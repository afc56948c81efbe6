//! Serde for [`Rate`](sfb_net::bandwidth::Rate): bytes per second as a number, or a text
//! such as `1gbit` (the spec's and the simulator's options).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sfb_net::bandwidth::Rate;

#[derive(Deserialize)]
#[serde(untagged)]
enum Given {
    BytesPerS(f64),
    Text(String),
}

pub(crate) fn serialize<S: Serializer>(r: &Option<Rate>, s: S) -> Result<S::Ok, S::Error> {
    r.map(|r| r.0).serialize(s)
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Rate>, D::Error> {
    match Option::<Given>::deserialize(d)? {
        None => Ok(None),
        Some(Given::BytesPerS(b)) if b.is_finite() && b > 0.0 => Ok(Some(Rate(b))),
        Some(Given::BytesPerS(b)) => Err(serde::de::Error::custom(format!(
            "bandwidth {b} must be a positive number of bytes per second"
        ))),
        Some(Given::Text(t)) => t.parse().map(Some).map_err(serde::de::Error::custom),
    }
}
