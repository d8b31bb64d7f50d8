//! The Remoting frame: `[i32 length][i32: serialize type << 24 | header length][header][body]`,
//! big-endian; `length` counts everything after itself. The header is JSON (type 0) or
//! RocketMQ's binary form (type 1). Both are read; an answer goes out in the form its request
//! came in, since the C++ clients (and so the Python ones) cannot read the binary form.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Header forms (the high byte of the second word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Json,
    Binary,
}

/// Flag bit 0: the frame answers a request. Bit 1: a request that wants no answer (the C++
/// clients never set it, so every request is answered).
pub const RESPONSE: i32 = 1;
pub const ONEWAY: i32 = 2;

/// The version answers carry: RocketMQ 5.3.3's. The Java clients refuse SQL92 pulls from a
/// broker older than 4.1 (version 232).
pub const SERVER_VERSION: i32 = 479;

/// One request or answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub code: i32,
    pub language: String,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: String,
    /// Every value as a string: the clients send some as JSON numbers, and read only strings.
    pub ext: BTreeMap<String, String>,
    pub body: Bytes,
    pub form: Form,
}

impl Frame {
    /// An answer to `request` with `code`, in the request's form.
    pub fn answer(request: &Frame, code: i32) -> Frame {
        Frame {
            code,
            language: "JAVA".into(),
            version: SERVER_VERSION,
            opaque: request.opaque,
            flag: RESPONSE,
            remark: String::new(),
            ext: BTreeMap::new(),
            body: Bytes::new(),
            form: request.form,
        }
    }

    /// A request this node sends a client (NOTIFY_CONSUMER_IDS_CHANGED).
    pub fn request(code: i32, opaque: i32, ext: BTreeMap<String, String>) -> Frame {
        Frame {
            code,
            language: "JAVA".into(),
            version: SERVER_VERSION,
            opaque,
            flag: 0,
            remark: String::new(),
            ext,
            body: Bytes::new(),
            form: Form::Json,
        }
    }

    pub fn with_remark(mut self, remark: impl Into<String>) -> Frame {
        self.remark = remark.into();
        self
    }

    pub fn with(mut self, key: &str, value: impl ToString) -> Frame {
        self.ext.insert(key.to_string(), value.to_string());
        self
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Frame {
        self.body = body.into();
        self
    }

    pub fn is_response(&self) -> bool {
        self.flag & RESPONSE != 0
    }

    /// The ext field `key`, if present.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.ext.get(key).map(String::as_str)
    }

    /// The frame as sent, length word included.
    pub fn encode(&self) -> Bytes {
        let header = match self.form {
            Form::Json => self.json_header(),
            Form::Binary => self.binary_header(),
        };
        let form: u32 = match self.form {
            Form::Json => 0,
            Form::Binary => 1,
        };
        let mut out = BytesMut::with_capacity(8 + header.len() + self.body.len());
        out.put_u32((4 + header.len() + self.body.len()) as u32);
        out.put_u32(form << 24 | header.len() as u32);
        out.put_slice(&header);
        out.put_slice(&self.body);
        out.freeze()
    }

    fn json_header(&self) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        header.insert("code".into(), self.code.into());
        header.insert("language".into(), self.language.clone().into());
        header.insert("version".into(), self.version.into());
        header.insert("opaque".into(), self.opaque.into());
        header.insert("flag".into(), self.flag.into());
        if !self.remark.is_empty() {
            header.insert("remark".into(), self.remark.clone().into());
        }
        // Always present: the C++ client dereferences it on send, pull and offset answers.
        let ext: serde_json::Map<String, serde_json::Value> =
            self.ext.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        header.insert("extFields".into(), ext.into());
        header.insert("serializeTypeCurrentRPC".into(), "JSON".into());
        serde_json::to_vec(&header).unwrap_or_default()
    }

    fn binary_header(&self) -> Vec<u8> {
        let mut out = BytesMut::new();
        out.put_i16(self.code as i16);
        out.put_u8(LANGUAGES.iter().position(|l| *l == self.language).unwrap_or(0) as u8);
        out.put_i16(self.version as i16);
        out.put_i32(self.opaque);
        out.put_i32(self.flag);
        out.put_i32(self.remark.len() as i32);
        out.put_slice(self.remark.as_bytes());
        let mut ext = BytesMut::new();
        for (k, v) in &self.ext {
            ext.put_i16(k.len() as i16);
            ext.put_slice(k.as_bytes());
            ext.put_i32(v.len() as i32);
            ext.put_slice(v.as_bytes());
        }
        out.put_i32(ext.len() as i32);
        out.put_slice(&ext);
        out.to_vec()
    }
}

/// RocketMQ's `LanguageCode` ordinals, as the binary header numbers them.
const LANGUAGES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST",
    "NODE_JS",
];

/// Why a frame cannot be read: its connection is closed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {0} bytes exceeds the limit of {1}")]
    TooLarge(usize, usize),
    #[error("header of {0} bytes exceeds the limit of {1}")]
    HeaderTooLarge(usize, usize),
    #[error("frame too short for its header ({0} bytes)")]
    Truncated(usize),
    #[error("unknown serialize type {0}")]
    UnknownForm(u8),
    #[error("malformed header: {0}")]
    Malformed(String),
}

/// Bounds on what one frame may hold.
#[derive(Debug, Clone, Copy)]
pub struct FrameLimits {
    /// Of the whole frame after its length word.
    pub max_frame: usize,
    pub max_header: usize,
}

/// Reads the frame whose bytes (after the length word) are `bytes`.
pub fn decode(mut bytes: Bytes, limits: FrameLimits) -> Result<Frame, FrameError> {
    if bytes.len() < 4 {
        return Err(FrameError::Truncated(bytes.len()));
    }
    let word = bytes.get_u32();
    let form = match (word >> 24) as u8 {
        0 => Form::Json,
        1 => Form::Binary,
        other => return Err(FrameError::UnknownForm(other)),
    };
    let header_len = (word & 0x00FF_FFFF) as usize;
    if header_len > limits.max_header {
        return Err(FrameError::HeaderTooLarge(header_len, limits.max_header));
    }
    if header_len > bytes.len() {
        return Err(FrameError::Truncated(bytes.len()));
    }
    let header = bytes.split_to(header_len);
    let mut frame = match form {
        Form::Json => json_frame(&header)?,
        Form::Binary => binary_frame(header)?,
    };
    frame.body = bytes;
    Ok(frame)
}

fn json_frame(header: &[u8]) -> Result<Frame, FrameError> {
    let malformed = |why: String| FrameError::Malformed(why);
    let value: serde_json::Value = serde_json::from_slice(header).map_err(|e| malformed(e.to_string()))?;
    let object = value.as_object().ok_or_else(|| malformed("the header is not a JSON object".into()))?;
    let int = |key: &str| -> Result<i32, FrameError> {
        match object.get(key) {
            None | Some(serde_json::Value::Null) => Ok(0),
            Some(v) => as_text(v)
                .and_then(|t| t.parse::<i64>().ok())
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| malformed(format!("{key} is not a 32-bit integer"))),
        }
    };
    let text = |key: &str| object.get(key).and_then(as_text).unwrap_or_default();
    let mut ext = BTreeMap::new();
    match object.get("extFields") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(fields)) => {
            for (k, v) in fields {
                if let Some(t) = as_text(v) {
                    ext.insert(k.clone(), t);
                }
            }
        }
        Some(_) => return Err(malformed("extFields is not an object".into())),
    }
    Ok(Frame {
        code: int("code")?,
        language: text("language"),
        version: int("version")?,
        opaque: int("opaque")?,
        flag: int("flag")?,
        remark: text("remark"),
        ext,
        body: Bytes::new(),
        form: Form::Json,
    })
}

/// A header value as the Java broker reads it: strings as they are, numbers and booleans in
/// their decimal or word form; `None` for null.
fn as_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        other => Some(other.to_string()),
    }
}

fn binary_frame(mut h: Bytes) -> Result<Frame, FrameError> {
    let short = || FrameError::Malformed("binary header ends early".into());
    let need = |h: &Bytes, n: usize| if h.remaining() < n { Err(short()) } else { Ok(()) };
    need(&h, 2 + 1 + 2 + 4 + 4 + 4)?;
    let code = i32::from(h.get_i16());
    let language = LANGUAGES.get(h.get_u8() as usize).unwrap_or(&"OTHER").to_string();
    let version = i32::from(h.get_i16());
    let opaque = h.get_i32();
    let flag = h.get_i32();
    let text = |h: &mut Bytes, len: usize| -> Result<String, FrameError> {
        need(h, len)?;
        String::from_utf8(h.split_to(len).to_vec()).map_err(|_| FrameError::Malformed("text is not UTF-8".into()))
    };
    let remark_len = usize::try_from(h.get_i32()).map_err(|_| short())?;
    let remark = text(&mut h, remark_len)?;
    need(&h, 4)?;
    let ext_len = usize::try_from(h.get_i32()).map_err(|_| short())?;
    need(&h, ext_len)?;
    let mut fields = h.split_to(ext_len);
    let mut ext = BTreeMap::new();
    while fields.has_remaining() {
        need(&fields, 2)?;
        let key_len = usize::try_from(fields.get_i16()).map_err(|_| short())?;
        let key = text(&mut fields, key_len)?;
        need(&fields, 4)?;
        let value_len = usize::try_from(fields.get_i32()).map_err(|_| short())?;
        ext.insert(key, text(&mut fields, value_len)?);
    }
    Ok(Frame { code, language, version, opaque, flag, remark, ext, body: Bytes::new(), form: Form::Binary })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: FrameLimits = FrameLimits { max_frame: 1 << 20, max_header: 1 << 16 };

    fn body_of(encoded: Bytes) -> Bytes {
        let mut b = encoded;
        let len = b.get_u32() as usize;
        assert_eq!(len, b.len(), "the length word counts the rest of the frame");
        b
    }

    #[test]
    fn a_request_the_cpp_client_sent_is_read_with_numbers_as_strings_and_a_trailing_newline() {
        let header = br#"{"code":10,"extFields":{"AccessKey":"","batch":"0","queueId":3,"sysFlag":0,"unitMode":false,"n":null},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}
"#;
        let mut raw = BytesMut::new();
        raw.put_u32(header.len() as u32);
        raw.put_slice(header);
        raw.put_slice(b"hello");
        let f = decode(raw.freeze(), LIMITS).unwrap();
        assert_eq!((f.code, f.version, f.opaque, f.flag, f.language.as_str()), (10, 63, 0, 0, "CPP"));
        assert_eq!(f.field("queueId"), Some("3"));
        assert_eq!(f.field("sysFlag"), Some("0"));
        assert_eq!(f.field("unitMode"), Some("false"));
        assert_eq!(f.field("n"), None);
        assert_eq!(&f.body[..], b"hello");
        assert_eq!(f.form, Form::Json);
    }

    #[test]
    fn answers_go_out_in_the_requests_form_and_read_back_the_same() {
        for form in [Form::Json, Form::Binary] {
            let request = Frame { form, opaque: 77, ..Frame::request(105, 77, BTreeMap::new()) };
            let answer = Frame::answer(&request, 17).with("queueOffset", 42).with_remark("no topic").with_body("b");
            let read = decode(body_of(answer.encode()), LIMITS).unwrap();
            assert_eq!(read, answer, "{form:?}");
            assert!(read.is_response());
        }
    }

    #[test]
    fn json_answers_carry_ext_values_as_strings_and_an_ext_object_even_when_empty() {
        let request = Frame::request(11, 5, BTreeMap::new());
        let encoded = body_of(Frame::answer(&request, 19).with("nextBeginOffset", 7).encode());
        let header_len = (u32::from_be_bytes(encoded[..4].try_into().unwrap()) & 0xFF_FFFF) as usize;
        let header: serde_json::Value = serde_json::from_slice(&encoded[4..4 + header_len]).unwrap();
        assert_eq!(header["extFields"]["nextBeginOffset"], serde_json::json!("7"));
        assert_eq!(header["flag"], serde_json::json!(1));
        let empty = body_of(Frame::answer(&request, 0).encode());
        let header_len = (u32::from_be_bytes(empty[..4].try_into().unwrap()) & 0xFF_FFFF) as usize;
        let header: serde_json::Value = serde_json::from_slice(&empty[4..4 + header_len]).unwrap();
        assert_eq!(header["extFields"], serde_json::json!({}));
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![0, 0], "short"),
            (vec![0, 0, 0, 9, b'{'], "header longer than the frame"),
            (vec![0, 0, 0, 1, b'['], "not an object"),
            (vec![2, 0, 0, 0], "unknown form"),
            (vec![1, 0, 0, 3, 0, 1, 2], "binary header cut short"),
            (
                vec![0, 0, 0, 12, b'{', b'"', b'c', b'o', b'd', b'e', b'"', b':', b'"', b'x', b'"', b'}'],
                "code not a number",
            ),
        ];
        for (bytes, what) in cases {
            assert!(decode(Bytes::from(bytes), LIMITS).is_err(), "{what}");
        }
        let mut big = BytesMut::new();
        big.put_u32(1 << 20);
        assert_eq!(decode(big.freeze(), LIMITS), Err(FrameError::HeaderTooLarge(1 << 20, 1 << 16)));
    }
}
