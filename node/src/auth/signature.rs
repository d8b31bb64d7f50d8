//! The request signature the official RocketMQ 5 clients send when given credentials:
//!
//! ```text
//! x-mq-date-time: 20261201T220000Z            (Java, Python, Node; the Rust client: RFC 3339)
//! authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
//!                 Signature=<hex of HMAC-SHA1(secret, the x-mq-date-time value)>
//! ```
//!
//! Only the date is signed, not the request: a signature proves the caller knows the secret and
//! signed within the allowed clock skew, so anyone who reads one can replay it until then. Hence
//! TLS on any network others can listen to (`docs/security.md`).

use std::fmt;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha1::Sha1;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

pub const AUTHORIZATION: &str = "authorization";
pub const DATE_TIME: &str = "x-mq-date-time";
const SCHEME: &str = "MQv2-HMAC-SHA1";

/// A parsed `authorization` header.
#[derive(Debug, PartialEq, Eq)]
pub struct Signed<'a> {
    pub access_key: &'a str,
    /// The signature's bytes (decoded from hex).
    pub signature: Vec<u8>,
}

/// Why a signature is not accepted. Shown to the caller: it names no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential at all (or an empty one, as the Python client sends without credentials).
    Anonymous,
    Malformed(&'static str),
    UnknownAccessKey,
    BadSignature,
    /// The signed time is further from this node's clock than allowed.
    Skewed {
        by_secs: i64,
        max_secs: u64,
    },
    /// A stream opened by a user who has since been deleted or given a new secret.
    Revoked,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Anonymous => f.write_str("authentication is required: sign requests with an access key"),
            Refusal::Malformed(what) => write!(f, "malformed credentials: {what}"),
            Refusal::UnknownAccessKey | Refusal::BadSignature => f.write_str("unknown access key or wrong signature"),
            Refusal::Skewed { by_secs, max_secs } => write!(
                f,
                "the signed x-mq-date-time is {by_secs} s from the broker's clock (at most {max_secs} s allowed)"
            ),
            Refusal::Revoked => {
                f.write_str("the user this stream was opened as was deleted or given a new secret since: sign in again")
            }
        }
    }
}

/// Parses `MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>`.
/// `Err(Anonymous)` when the credential is empty.
pub fn parse(header: &str) -> Result<Signed<'_>, Refusal> {
    let rest = header.strip_prefix(SCHEME).ok_or(Refusal::Malformed("the scheme is not MQv2-HMAC-SHA1"))?;
    let (mut access_key, mut signature, mut signed_headers) = (None, None, None);
    for part in rest.split(',') {
        let Some((name, value)) = part.trim().split_once('=') else {
            return Err(Refusal::Malformed("expected Name=value parts"));
        };
        match name {
            "Credential" => access_key = Some(value),
            "Signature" => signature = Some(value),
            "SignedHeaders" => signed_headers = Some(value),
            _ => return Err(Refusal::Malformed("unknown part")),
        }
    }
    let access_key = access_key.unwrap_or_default();
    if access_key.is_empty() {
        return Err(Refusal::Anonymous);
    }
    if !signed_headers.is_some_and(|h| h.eq_ignore_ascii_case(DATE_TIME)) {
        return Err(Refusal::Malformed("SignedHeaders must be x-mq-date-time"));
    }
    let signature =
        hex::decode(signature.unwrap_or_default()).map_err(|_| Refusal::Malformed("the signature is not hex"))?;
    Ok(Signed { access_key, signature })
}

/// Parses the signed time in either form the official clients send.
pub fn parse_date_time(value: &str) -> Option<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(value, &Rfc3339) {
        return Some(t);
    }
    let compact = format_description!("[year][month][day]T[hour][minute][second]Z");
    time::PrimitiveDateTime::parse(value, compact).ok().map(|t| t.assume_utc())
}

/// Checks the signature of `date_time` with `secret`, in constant time, and the skew of the
/// signed time from `now` (`max_skew` zero: not checked).
pub fn verify(
    signed: &Signed<'_>,
    secret: &str,
    date_time: &str,
    now: OffsetDateTime,
    max_skew: Duration,
) -> Result<(), Refusal> {
    let mut mac = Hmac::<Sha1>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(date_time.as_bytes());
    mac.verify_slice(&signed.signature).map_err(|_| Refusal::BadSignature)?;
    if !max_skew.is_zero() {
        let at = parse_date_time(date_time).ok_or(Refusal::Malformed("x-mq-date-time is not a date"))?;
        let by_secs = (at - now).whole_seconds();
        if by_secs.unsigned_abs() > max_skew.as_secs() {
            return Err(Refusal::Skewed { by_secs, max_secs: max_skew.as_secs() });
        }
    }
    Ok(())
}

/// Signs as the official clients do: the `x-mq-date-time` and `authorization` values for `now`
/// (the CLI signs its admin requests so).
pub fn sign(access_key: &str, secret: &str, now: OffsetDateTime) -> (String, String) {
    let compact = format_description!("[year][month][day]T[hour][minute][second]Z");
    let date_time = now.to_offset(time::UtcOffset::UTC).format(compact).expect("a UTC time formats");
    let mut mac = Hmac::<Sha1>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(date_time.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let header = format!("{SCHEME} Credential={access_key}, SignedHeaders={DATE_TIME}, Signature={signature}");
    (date_time, header)
}

/// Signs every request it passes with an access key and secret, as the official clients do
/// (`None`: passes requests unsigned). The CLI's admin calls and the bench tool use it.
#[derive(Clone, Default)]
pub struct SignRequests(pub Option<(String, crate::broker::access::Secret)>);

impl tonic::service::Interceptor for SignRequests {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some((access_key, secret)) = &self.0 {
            let (date_time, authorization) = sign(access_key, secret.expose(), OffsetDateTime::now_utc());
            let ascii = |v: String| {
                v.parse().map_err(|_| tonic::Status::invalid_argument("credentials must be printable ASCII"))
            };
            request.metadata_mut().insert(DATE_TIME, ascii(date_time)?);
            request.metadata_mut().insert(AUTHORIZATION, ascii(authorization)?);
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    // HMAC-SHA1("12345678", "20261201T220000Z"), computed with Python's `hmac` module.
    const KNOWN: &str = "4e7492b9e8f9f27825c0bffabfcd38f81f2cd8cd";

    #[test]
    fn a_signature_made_elsewhere_verifies_in_either_hex_case_and_a_changed_one_does_not() {
        let now = datetime!(2026-12-01 22:00:30 UTC);
        let skew = Duration::from_secs(900);
        for hex in [KNOWN.to_string(), KNOWN.to_uppercase()] {
            let header = format!("MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, Signature={hex}");
            let signed = parse(&header).unwrap();
            assert_eq!(signed.access_key, "alice");
            assert_eq!(verify(&signed, "12345678", "20261201T220000Z", now, skew), Ok(()));
            assert_eq!(verify(&signed, "12345679", "20261201T220000Z", now, skew), Err(Refusal::BadSignature));
            assert_eq!(verify(&signed, "12345678", "20261201T220001Z", now, skew), Err(Refusal::BadSignature));
        }
        let (date_time, header) = sign("alice", "12345678", datetime!(2026-12-01 22:00:00 UTC));
        assert_eq!(date_time, "20261201T220000Z");
        assert!(header.ends_with(KNOWN), "{header}");
    }

    #[test]
    fn the_signed_time_must_be_near_the_brokers_clock_in_both_forms() {
        let secret = "12345678";
        let check = |date_time: &str, now| {
            let mut mac = Hmac::<Sha1>::new_from_slice(secret.as_bytes()).unwrap();
            mac.update(date_time.as_bytes());
            let signed = Signed { access_key: "a", signature: mac.finalize().into_bytes().to_vec() };
            verify(&signed, secret, date_time, now, Duration::from_secs(900))
        };
        let now = datetime!(2026-12-01 22:00:00 UTC);
        assert_eq!(check("20261201T221400Z", now), Ok(()));
        assert_eq!(check("2026-12-01T23:10:00+01:00", now), Ok(()), "the Rust client's RFC 3339 with an offset");
        assert_eq!(check("20261201T221600Z", now), Err(Refusal::Skewed { by_secs: 960, max_secs: 900 }));
        assert_eq!(check("2026-12-01T21:40:00Z", now), Err(Refusal::Skewed { by_secs: -1200, max_secs: 900 }));
        assert!(matches!(check("yesterday", now), Err(Refusal::Malformed(_))));
    }

    #[test]
    fn malformed_and_empty_credentials_are_told_apart() {
        assert_eq!(
            parse("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=00"),
            Err(Refusal::Anonymous)
        );
        for bad in [
            "Basic dXNlcjpwYXNz",
            "MQv2-HMAC-SHA1 Credential=a, SignedHeaders=host, Signature=00",
            "MQv2-HMAC-SHA1 Credential=a, SignedHeaders=x-mq-date-time, Signature=zz",
            "MQv2-HMAC-SHA1 Credential=a SignedHeaders",
            "MQv2-HMAC-SHA1 Credential=a, Other=b",
        ] {
            assert!(matches!(parse(bad), Err(Refusal::Malformed(_))), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_headers_never_panic(header in ".{0,200}", date in ".{0,40}") {
            if let Ok(signed) = parse(&header) {
                let _ = verify(&signed, "12345678", &date, OffsetDateTime::UNIX_EPOCH, Duration::from_secs(900));
            }
        }
    }
}
