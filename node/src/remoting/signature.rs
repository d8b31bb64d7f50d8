//! RocketMQ's Remoting ACL signature: `Signature` = Base64(HMAC-SHA1(secret, the values of every
//! other ext field, sorted by name, then the body)), with the signer's `AccessKey` among them.
//! The 4.x clients sign so (the C++ ones sign every request, with an empty key when none is set).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use subtle::ConstantTimeEq as _;

use crate::auth::signature::Refusal;
use crate::remoting::frame::Frame;

/// The signature `secret` makes over `request`'s fields and body.
pub fn sign(request: &Frame, secret: &str) -> String {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    // `ext` is ordered by name, as the clients order what they sign.
    for (k, v) in &request.ext {
        if k != "Signature" {
            mac.update(v.as_bytes());
        }
    }
    mac.update(&request.body);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// The signer's access key and admin flag if `request` is signed by a known user's secret
/// (`credential` finds it). The Go client leaves `SecurityToken` out of what it signs: a request
/// carrying one is checked both ways.
pub fn verify(request: &Frame, credential: impl Fn(&str) -> Option<(String, bool)>) -> Result<(String, bool), Refusal> {
    let access_key = request.field("AccessKey").unwrap_or_default();
    if access_key.is_empty() {
        return Err(Refusal::Anonymous);
    }
    let given = request.field("Signature").ok_or(Refusal::Malformed("no Signature"))?;
    let (secret, admin) = credential(access_key).ok_or(Refusal::UnknownAccessKey)?;
    let matches = |expected: &str| bool::from(expected.as_bytes().ct_eq(given.as_bytes()));
    if matches(&sign(request, &secret)) {
        return Ok((access_key.to_string(), admin));
    }
    if request.ext.contains_key("SecurityToken") {
        let mut without = request.clone();
        without.ext.remove("SecurityToken");
        if matches(&sign(&without, &secret)) {
            return Ok((access_key.to_string(), admin));
        }
    }
    Err(Refusal::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn frame(ext: &[(&str, &str)], body: &'static [u8]) -> Frame {
        let ext: BTreeMap<String, String> = ext.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Frame::request(105, 0, ext).with_body(body)
    }

    /// Signatures captured from the PyPI `rocketmq` 0.4.4 client (no credentials: empty key).
    #[test]
    fn the_cpp_clients_captured_signatures_are_reproduced() {
        let route = frame(&[("AccessKey", ""), ("OnsChannel", "ALIYUN"), ("topic", "TopicTest")], b"");
        assert_eq!(sign(&route, ""), "N/YT7X6tJe5UfutmW+uNwTTJ7Fc=");
    }

    #[test]
    fn only_the_users_secret_over_these_fields_and_body_is_taken() {
        let users = |key: &str| (key == "alice").then(|| ("s3cret".to_string(), false));
        let mut f = frame(&[("AccessKey", "alice"), ("topic", "T"), ("queueId", "1")], b"body");
        let good = sign(&f, "s3cret");
        f.ext.insert("Signature".into(), good.clone());
        assert_eq!(verify(&f, users), Ok(("alice".to_string(), false)));
        let mut changed = f.clone();
        changed.ext.insert("queueId".into(), "2".into());
        assert_eq!(verify(&changed, users), Err(Refusal::BadSignature));
        let other_body = f.clone().with_body(&b"other"[..]);
        assert_eq!(verify(&other_body, users), Err(Refusal::BadSignature));
        let mut stranger = f.clone();
        stranger.ext.insert("AccessKey".into(), "mallory".into());
        assert_eq!(verify(&stranger, users), Err(Refusal::UnknownAccessKey));
        let mut anonymous = f.clone();
        anonymous.ext.insert("AccessKey".into(), String::new());
        assert_eq!(verify(&anonymous, users), Err(Refusal::Anonymous));
        let mut unsigned = f.clone();
        unsigned.ext.remove("Signature");
        assert_eq!(verify(&unsigned, users), Err(Refusal::Malformed("no Signature")));
        // The Go client signs without its SecurityToken.
        let mut go = frame(&[("AccessKey", "alice"), ("topic", "T")], b"");
        let signed = sign(&go, "s3cret");
        go.ext.insert("SecurityToken".into(), "tok".into());
        go.ext.insert("Signature".into(), signed);
        assert!(verify(&go, users).is_ok());
    }
}
