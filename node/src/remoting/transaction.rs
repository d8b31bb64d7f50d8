//! Transactional messages over Remoting: a send to a transaction topic stores a half, answered
//! with a transaction id; END_TRANSACTION (37) commits or rolls it back through the gRPC path's
//! resolution. A half left open is checked the way gRPC producers' are: the leader asks a
//! producer of the topic, and a Remoting connection that sent transactional messages to it is
//! one, asked with CHECK_TRANSACTION_STATE (39); its END_TRANSACTION answers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use rockraft_proto::rocketmq::{
    EndTransactionRequest, Resource, TelemetryCommand, TransactionResolution, TransactionSource, telemetry_command,
};
use rockraft_proto::rockraft::StoredMessage;
use tokio::sync::{Notify, mpsc};

use crate::auth::{Caller, Pin};
use crate::broker::access::{Action, ResourceKind};
use crate::remoting::codes::*;
use crate::remoting::frame::Frame;
use crate::remoting::message::{self, Placed};
use crate::remoting::{Remoting, flag, number};
use crate::sessions::{OwnedRegistration, ProducerSessions};

/// `commitOrRollback` of END_TRANSACTION (RocketMQ's `MessageSysFlag`).
const COMMIT: i32 = 8;
const ROLLBACK: i32 = 12;

/// The transaction id a Remoting producer is handed: the topic (hex) and the sealed id the gRPC
/// path hands out, which names the topic too. END_TRANSACTION carries no topic, so the id does.
pub fn transaction_id(topic: &str, sealed: &str) -> String {
    let hex: String = topic.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex}:{sealed}")
}

/// The topic and sealed id of a Remoting transaction id.
pub fn split_transaction_id(id: &str) -> Option<(String, &str)> {
    let (hex, sealed) = id.split_once(':')?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
    Some((String::from_utf8(bytes?).ok()?, sealed))
}

/// A connection as a producer the leader may ask about its open transactions: registered for
/// the transaction topics it sent to, by the user that sent them.
pub struct ProducerLink {
    sessions: Arc<ProducerSessions>,
    commands: mpsc::Sender<TelemetryCommand>,
    state: Mutex<(BTreeMap<String, Resource>, Option<OwnedRegistration>)>,
}

/// Most questions waiting to be sent to one connection.
const QUESTIONS: usize = 64;

impl ProducerLink {
    pub fn new(sessions: Arc<ProducerSessions>) -> (ProducerLink, mpsc::Receiver<TelemetryCommand>) {
        let (commands, questions) = mpsc::channel(QUESTIONS);
        (ProducerLink { sessions, commands, state: Mutex::default() }, questions)
    }

    /// Records that this connection's producer (`pin`) publishes transactional messages to `topic`.
    pub fn publishes(&self, topic: &str, pin: Pin) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.0.contains_key(topic) {
            return;
        }
        // Bounded by the topics that exist (each send named one).
        state.0.insert(topic.to_string(), Resource { name: topic.to_string(), ..Default::default() });
        let topics = state.0.clone();
        state.1 = Some(self.sessions.register_owned(pin, topics, self.commands.clone(), Arc::new(Notify::new())));
    }
}

/// The stored form of a message a question carries (the gRPC form).
fn stored_of(m: &rockraft_proto::rocketmq::Message) -> StoredMessage {
    let sp = m.system_properties.clone().unwrap_or_default();
    let ms = |t: Option<prost_types::Timestamp>| {
        t.map_or(0, |t| t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos) / 1_000_000))
    };
    StoredMessage {
        message_id: sp.message_id,
        tag: sp.tag.unwrap_or_default(),
        keys: sp.keys,
        properties: m.user_properties.clone(),
        body: m.body.clone(),
        born_timestamp_ms: ms(sp.born_timestamp),
        born_host: sp.born_host,
        ..Default::default()
    }
}

impl Remoting {
    /// The CHECK_TRANSACTION_STATE frame asking about the half a question names.
    pub(super) fn check_frame(&self, question: TelemetryCommand) -> Option<Frame> {
        let Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(recover)) = question.command else {
            return None;
        };
        let m = recover.message?;
        let topic = m.topic.as_ref().map(|t| t.name.clone()).unwrap_or_default();
        let stored = stored_of(&m);
        let mut body = BytesMut::new();
        let at = Placed {
            topic: &topic,
            queue_id: 0,
            queue_offset: 0,
            physical_offset: 0,
            store_timestamp_ms: stored.born_timestamp_ms,
            store_host: self.options.advertised,
        };
        message::encode_stored(&mut body, &stored, &at)?;
        let opaque = self.next_opaque.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & i32::MAX;
        let ext = BTreeMap::from([
            ("transactionId".to_string(), transaction_id(&topic, &recover.transaction_id)),
            ("msgId".to_string(), stored.message_id.clone()),
            ("offsetMsgId".to_string(), stored.message_id),
            ("tranStateTableOffset".to_string(), "0".to_string()),
            ("commitLogOffset".to_string(), "0".to_string()),
        ]);
        Some(Frame::request(CHECK_TRANSACTION_STATE, opaque, ext).with_body(body.freeze()))
    }

    pub(super) async fn end_transaction(&self, request: &Frame, caller: &Caller) -> Frame {
        let Some((topic, sealed)) = request.field("transactionId").and_then(split_transaction_id) else {
            return Frame::answer(request, SYSTEM_ERROR).with_remark("not a transaction id this cluster handed out");
        };
        if let Some(refused) = self.refused(request, caller, &[(Action::Pub, ResourceKind::Topic, &topic)]) {
            return refused;
        }
        let resolution = match number::<i32>(request, "commitOrRollback") {
            Some(COMMIT) => TransactionResolution::Commit,
            Some(ROLLBACK) => TransactionResolution::Rollback,
            _ => TransactionResolution::Unspecified,
        };
        let source = match flag(request, "fromTransactionCheck") {
            true => TransactionSource::SourceServerCheck,
            false => TransactionSource::SourceClient,
        };
        let end = EndTransactionRequest {
            topic: Some(Resource { name: topic, ..Default::default() }),
            message_id: request.field("msgId").unwrap_or_default().to_string(),
            transaction_id: sealed.to_string(),
            resolution: resolution as i32,
            source: source as i32,
            trace_context: String::new(),
        };
        let status = self.proxy.end_transaction(&end, "").await;
        match of_status(&status) {
            SUCCESS => Frame::answer(request, SUCCESS),
            code => Frame::answer(request, code).with_remark(status.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remoting_transaction_id_names_its_topic() {
        let id = transaction_id("%ns%Pay:ments", "sealed:part");
        assert_eq!(split_transaction_id(&id), Some(("%ns%Pay:ments".to_string(), "sealed:part")));
        for bad in ["", "zz:x", "abc:x", "no-colon"] {
            assert_eq!(split_transaction_id(bad), None, "{bad}");
        }
    }
}
