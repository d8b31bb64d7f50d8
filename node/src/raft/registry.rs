//! The groups this node runs, by id, as other members' calls name them (the `rockraft-group`
//! request header): the Raft service finds a group's replica here, the peer service the group's
//! cluster handle. Every group's calls are served concurrently; the registry is only looked up.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tonic::{Request, Status};

use crate::raft::{GROUP_HEADER, GroupId};

/// What this node serves for each group it runs. Clones share the map.
pub struct GroupRegistry<T>(Arc<RwLock<BTreeMap<GroupId, T>>>);

impl<T> Default for GroupRegistry<T> {
    fn default() -> Self {
        GroupRegistry(Arc::default())
    }
}

impl<T> Clone for GroupRegistry<T> {
    fn clone(&self) -> Self {
        GroupRegistry(Arc::clone(&self.0))
    }
}

impl<T: Clone> GroupRegistry<T> {
    pub fn insert(&self, group: GroupId, value: T) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).insert(group, value);
    }

    /// Every group's, by group.
    pub fn all(&self) -> Vec<(GroupId, T)> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(g, t)| (*g, t.clone())).collect()
    }

    pub fn get(&self, group: GroupId) -> Option<T> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).get(&group).cloned()
    }

    /// What this node serves for the group a request names: `INVALID_ARGUMENT` if it names none,
    /// `NOT_FOUND` if this node does not run it. No lock is held once it returns.
    pub fn addressed<R>(&self, req: &Request<R>) -> Result<T, Status> {
        let group = group_of(req.metadata())?;
        self.get(group).ok_or_else(|| Status::not_found(format!("this node runs no replica of group {group}")))
    }
}

/// The group a request names.
fn group_of(metadata: &tonic::metadata::MetadataMap) -> Result<GroupId, Status> {
    let value = metadata
        .get(GROUP_HEADER)
        .ok_or_else(|| Status::invalid_argument(format!("a call between members names its group ({GROUP_HEADER})")))?;
    let group = value.to_str().ok().and_then(|v| v.parse().ok());
    group.map(GroupId).ok_or_else(|| Status::invalid_argument(format!("{GROUP_HEADER} is not a group number")))
}

impl GroupId {
    /// `message` as a request to a member's replica of this group.
    pub fn address<T>(self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.metadata_mut().insert(GROUP_HEADER, self.0.into());
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(value: Option<&'static str>) -> Request<()> {
        let mut req = Request::new(());
        if let Some(v) = value {
            req.metadata_mut().insert(GROUP_HEADER, tonic::metadata::MetadataValue::from_static(v));
        }
        req
    }

    #[test]
    fn a_call_names_a_group_this_node_runs_or_is_refused() {
        let groups = GroupRegistry::default();
        groups.insert(GroupId(2), "two");
        let code = |req: Request<()>| groups.addressed(&req).err().map(|s| (s.code(), s.message().to_string()));
        let (missing, _) = code(named(None)).unwrap();
        assert_eq!(missing, tonic::Code::InvalidArgument);
        for garbage in ["", "one", "-1", "4294967296"] {
            assert_eq!(code(named(Some(garbage))).map(|c| c.0), Some(tonic::Code::InvalidArgument), "{garbage:?}");
        }
        assert_eq!(
            code(named(Some("7"))),
            Some((tonic::Code::NotFound, "this node runs no replica of group 7".to_string()))
        );
        assert_eq!(groups.addressed(&named(Some("2"))).ok(), Some("two"));
        // What a caller sends names the group it is addressed to.
        assert_eq!(groups.addressed(&GroupId(2).address(())).ok(), Some("two"));
    }
}
