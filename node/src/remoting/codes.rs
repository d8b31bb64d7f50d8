//! Request and response codes (apache/rocketmq `RequestCode.java`, `ResponseCode.java`).

pub const SEND_MESSAGE: i32 = 10;
pub const PULL_MESSAGE: i32 = 11;
pub const QUERY_CONSUMER_OFFSET: i32 = 14;
pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
pub const GET_MAX_OFFSET: i32 = 30;
pub const GET_MIN_OFFSET: i32 = 31;
pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
pub const HEART_BEAT: i32 = 34;
pub const UNREGISTER_CLIENT: i32 = 35;
pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
pub const END_TRANSACTION: i32 = 37;
pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
pub const CHECK_TRANSACTION_STATE: i32 = 39;
pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
pub const LOCK_BATCH_MQ: i32 = 41;
pub const UNLOCK_BATCH_MQ: i32 = 42;
pub const CHECK_CLIENT_CONFIG: i32 = 46;
pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
pub const SEND_MESSAGE_V2: i32 = 310;
pub const SEND_BATCH_MESSAGE: i32 = 320;

pub const SUCCESS: i32 = 0;
pub const SYSTEM_ERROR: i32 = 1;
pub const SYSTEM_BUSY: i32 = 2;
pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
pub const MESSAGE_ILLEGAL: i32 = 13;
pub const SERVICE_NOT_AVAILABLE: i32 = 14;
pub const NO_PERMISSION: i32 = 16;
pub const TOPIC_NOT_EXIST: i32 = 17;
pub const PULL_NOT_FOUND: i32 = 19;
pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
pub const PULL_OFFSET_MOVED: i32 = 21;
pub const QUERY_NOT_FOUND: i32 = 22;
pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;

/// The Remoting code for a gRPC status the shared paths answered with.
pub fn of_status(status: &rockraft_proto::rocketmq::Status) -> i32 {
    use rockraft_proto::rocketmq::Code;
    match Code::try_from(status.code).unwrap_or(Code::InternalError) {
        Code::Ok | Code::MultipleResults => SUCCESS,
        Code::TopicNotFound => TOPIC_NOT_EXIST,
        Code::ConsumerGroupNotFound => SUBSCRIPTION_GROUP_NOT_EXIST,
        Code::Unauthorized | Code::Forbidden => NO_PERMISSION,
        Code::TooManyRequests => SYSTEM_BUSY,
        Code::HaNotAvailable | Code::ProxyTimeout | Code::MasterPersistenceTimeout | Code::SlavePersistenceTimeout => {
            SERVICE_NOT_AVAILABLE
        }
        Code::IllegalFilterExpression => SUBSCRIPTION_PARSE_FAILED,
        c if (40000..50000).contains(&(c as i32)) => MESSAGE_ILLEGAL,
        _ => SYSTEM_ERROR,
    }
}
