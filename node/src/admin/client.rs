//! The admin API as a caller uses it: the generated `AdminServiceClient`, each request signed
//! with the operator signature (`auth::operator`: method, time, nonce and body) (the CLI, tests,
//! scripts' tools). Each request type names its reply type
//! ([`AdminCall`]), so a caller never matches an answer it did not ask for.

use std::future::Future;

use crate::auth::operator::SignOperator;
use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;

/// An admin's access key and secret, which the CLI signs its requests with.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret: crate::broker::access::Secret,
}

/// How the CLI reaches an admin listener: signed or not, over TLS or not.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub credentials: Option<Credentials>,
    /// The CA certificate (PEM) a listener with TLS is verified against; `None`: plain HTTP/2.
    pub tls_ca: Option<std::path::PathBuf>,
}

/// A channel to an admin listener whose requests are signed.
pub type SignedChannel = SignOperator<tonic::transport::Channel>;
type Client = AdminServiceClient<SignedChannel>;

/// Why an admin call was not answered with its reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The address or the CA file is unusable: nothing was sent.
    #[error("{addr}: {why}")]
    Setup { addr: String, why: crate::auth::tls::TlsError },
    /// The node answered with an error (or the call failed on the way: `Unavailable`).
    #[error("{addr}: {}", answer_text(.status))]
    Answered { addr: String, status: tonic::Status },
}

impl CallError {
    /// The gRPC code of the answer, if there was one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CallError::Setup { .. } => None,
            CallError::Answered { status, .. } => Some(status.code()),
        }
    }

    /// Why, without the address.
    pub fn reason(&self) -> String {
        match self {
            CallError::Setup { why, .. } => why.to_string(),
            CallError::Answered { status, .. } => answer_text(status),
        }
    }
}

fn answer_text(status: &tonic::Status) -> String {
    match status.message() {
        "" => format!("{:?}", status.code()),
        m => m.to_string(),
    }
}

/// A request of the admin API, and the reply it is answered with.
pub trait AdminCall: Send + 'static {
    type Reply;
    fn call(
        self,
        client: &mut Client,
    ) -> impl Future<Output = Result<tonic::Response<Self::Reply>, tonic::Status>> + Send;
}

macro_rules! calls {
    ($($request:ident => $reply:ident by $method:ident;)*) => {
        $(impl AdminCall for pb::$request {
            type Reply = pb::$reply;
            fn call(self, client: &mut Client) -> impl Future<Output = Result<tonic::Response<pb::$reply>, tonic::Status>> + Send {
                let mut client = client.clone();
                async move { client.$method(self).await }
            }
        })*
    };
}

calls! {
    GetStatusRequest => NodeStatusReply by get_status;
    InitRequest => AdminDone by init;
    CreateTopicRequest => AdminDone by create_topic;
    DeleteTopicRequest => AdminDone by delete_topic;
    ListTopicsRequest => ListTopicsReply by list_topics;
    ListLiteTopicsRequest => ListLiteTopicsReply by list_lite_topics;
    CreateGroupRequest => AdminDone by create_group;
    DeleteGroupRequest => AdminDone by delete_group;
    ListGroupsRequest => ListGroupsReply by list_groups;
    CreateUserRequest => AdminDone by create_user;
    UpdateUserRequest => AdminDone by update_user;
    DeleteUserRequest => AdminDone by delete_user;
    ListUsersRequest => ListUsersReply by list_users;
    GrantRequest => AdminDone by grant;
    RevokeRequest => AdminDone by revoke;
    ListAclRequest => ListAclReply by list_acl;
    RotateHandleKeyRequest => AdminDone by rotate_handle_key;
    AddNodeRequest => AdminDone by add_node;
    RemoveNodeRequest => AdminDone by remove_node;
    TransferLeaderRequest => AdminDone by transfer_leader;
    GetDigestRequest => DigestReply by get_digest;
    GetFailoverHistoryRequest => FailoverHistoryReply by get_failover_history;
    GetQueueSpansRequest => QueueSpansReply by get_queue_spans;
    GetQueueChecksumsRequest => QueueChecksumsReply by get_queue_checksums;
    GetSettingsRequest => SettingsReply by get_settings;
    ConfigureRequest => AdminDone by configure;
    ListMessagesRequest => ListMessagesReply by list_messages;
    GetMessageRequest => GetMessageReply by get_message;
    ResetOffsetRequest => AdminDone by reset_offset;
    ListHeldRequest => ListHeldReply by list_held;
    ResolveTransactionRequest => AdminDone by resolve_transaction;
    RegisterPluginRequest => AdminDone by register_plugin;
    RemovePluginRequest => AdminDone by remove_plugin;
    EnablePluginRequest => AdminDone by enable_plugin;
    ListPluginsRequest => ListPluginsReply by list_plugins;
    BindPluginRequest => AdminDone by bind_plugin;
}

/// The admin service at one address, signed with the caller's credentials if given. Cheap to
/// clone; it connects at the first call.
#[derive(Clone)]
pub struct AdminClient {
    addr: String,
    client: Client,
}

impl AdminClient {
    pub fn connect(addr: &str, options: &CallOptions) -> Result<AdminClient, CallError> {
        let channel = crate::auth::tls::channel(addr, options.tls_ca.as_deref())
            .map_err(|why| CallError::Setup { addr: addr.to_string(), why })?;
        let credentials = options.credentials.as_ref().map(|c| (c.access_key.clone(), c.secret.clone()));
        let client = AdminServiceClient::new(SignOperator::new(channel, credentials))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(AdminClient { addr: addr.to_string(), client })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub async fn send<R: AdminCall>(&self, request: R) -> Result<R::Reply, CallError> {
        let mut client = self.client.clone();
        match request.call(&mut client).await {
            Ok(reply) => Ok(reply.into_inner()),
            Err(status) => Err(CallError::Answered { addr: self.addr.clone(), status }),
        }
    }
}

/// Sends one request to the admin service at `addr`.
pub async fn call<R: AdminCall>(addr: &str, options: &CallOptions, request: R) -> Result<R::Reply, CallError> {
    AdminClient::connect(addr, options)?.send(request).await
}
