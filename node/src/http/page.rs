//! The status page at `/`: one self-contained HTML document (no assets from elsewhere), readable
//! on a phone, that reloads its content every two seconds. Every name shown is escaped.

use std::fmt::Write;

use crate::admin::api::{AdminRequest, AdminResponse, GroupInfo, NodeStatus, PluginInfo, Role, TopicInfo};
use crate::broker::failover::Failover;
use crate::cluster::leadership::LeaderChange;
use crate::store::free_space::DiskLevel;

use super::HttpState;

/// What one rendering shows, gathered from this node (and the members' own statuses).
pub(super) struct View {
    own: NodeStatus,
    members: Vec<(u64, String, Option<NodeStatus>)>,
    /// Members that refuse this node's calls, and why.
    refusing: std::collections::BTreeMap<u64, String>,
    topics: Vec<TopicInfo>,
    groups: Vec<GroupInfo>,
    plugins: Vec<PluginInfo>,
    changes: Vec<LeaderChange>,
    failovers: Vec<Failover>,
    now_ms: i64,
}

impl View {
    pub(super) async fn gather(state: &HttpState) -> View {
        let own = state.admin.status();
        let members = state.members(&own).await;
        let topics = state.local(AdminRequest::ListTopics, |r| match r {
            AdminResponse::Topics(t) => Some(t),
            _ => None,
        });
        let groups = state.local(AdminRequest::ListGroups, |r| match r {
            AdminResponse::Groups(g) => Some(g),
            _ => None,
        });
        let failovers = state.local(AdminRequest::History, |r| match r {
            AdminResponse::History(h) => Some(h),
            _ => None,
        });
        let refusing = state
            .cluster
            .members()
            .into_iter()
            .filter_map(|(id, n)| Some((id, state.cluster.refusals().refusing(&n.raft_addr)?)))
            .collect();
        View {
            members,
            refusing,
            failovers: failovers.await.unwrap_or_default(),
            topics: topics.await.unwrap_or_default(),
            groups: groups.await.unwrap_or_default(),
            plugins: state.admin.list_plugins(),
            changes: state.cluster.leader_changes().recent(),
            now_ms: crate::cluster::now_ms(),
            own,
        }
    }
}

/// `text` with the five HTML-special characters escaped.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn role(r: Role) -> &'static str {
    match r {
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Candidate => "candidate",
        Role::Learner => "learner",
        Role::ShuttingDown => "shutting down",
    }
}

fn ago(now_ms: i64, at_ms: i64) -> String {
    let s = (now_ms - at_ms).max(0) / 1000;
    match s {
        0..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:.5rem;color:#222}\
h1{font-size:1.3rem}h2{font-size:1.1rem;margin-top:1.4rem}\
table{border-collapse:collapse;width:100%;font-size:.9rem}th,td{text-align:left;padding:.25rem .4rem;border-bottom:1px solid #ddd}\
.scroll{overflow-x:auto}.ok{color:#176317}.bad{color:#a11}.muted{color:#777}";

/// Replaces `main` with that of a fresh copy of the page every two seconds; keeps the last one
/// shown while the node does not answer.
const REFRESH: &str = "setInterval(async()=>{try{const r=await fetch(location.pathname,{cache:'no-store'});\
if(!r.ok)return;const d=new DOMParser().parseFromString(await r.text(),'text/html');\
const m=d.querySelector('main');if(m)document.querySelector('main').replaceWith(m);}catch(e){}},2000);";

pub(super) fn render(v: &View) -> String {
    let mut h = String::new();
    let own = &v.own;
    let leader = own.leader.map_or_else(|| "none known".to_string(), |l| format!("node {l}"));
    let _ = write!(
        h,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width,initial-scale=1\">\
         <title>RockRaft node {id}</title><style>{STYLE}</style></head><body><main>\
         <h1>RockRaft node {id}: {role}</h1>\
         <p id=leader>Leader: <b>{leader}</b>, term <b>{term}</b>. This node has applied up to \
         index {applied}, of {committed} committed.</p>",
        id = own.id,
        role = role(own.role),
        term = own.term,
        applied = own.applied.unwrap_or(0),
        committed = own.committed.unwrap_or(0),
    );

    h.push_str(
        "<h2>Members</h2><div class=scroll><table id=members><tr><th>node</th><th>client endpoint</th>\
        <th>role</th><th>term</th><th>applied</th><th>disk</th><th>health</th></tr>",
    );
    for (id, addr, status) in &v.members {
        let _ = match status {
            _ if v.refusing.contains_key(id) => write!(
                h,
                "<tr><td>{id}</td><td>{addr}</td><td class=muted>?</td><td></td><td></td><td></td><td class=bad>refusing us: {why}</td></tr>",
                addr = esc(addr),
                why = esc(&v.refusing[id]),
            ),
            Some(s) => write!(
                h,
                "<tr><td>{id}</td><td>{addr}</td><td>{role}</td><td>{term}</td><td>{applied}</td>\
                 <td class={disk_class}>{disk}</td><td class=ok>answering</td></tr>",
                addr = esc(addr),
                role = role(s.role),
                term = s.term,
                applied = s.applied.unwrap_or(0),
                disk = s.disk.here.describe(),
                disk_class = if s.disk.here.level == DiskLevel::Ok { "ok" } else { "bad" },
            ),
            None => write!(
                h,
                "<tr><td>{id}</td><td>{addr}</td><td class=muted>?</td><td></td><td></td><td></td><td class=bad>not answering</td></tr>",
                addr = esc(addr),
            ),
        };
    }
    h.push_str("</table></div>");
    let alarm = own.disk.cluster.alarm;
    if alarm != DiskLevel::Ok {
        let _ = write!(
            h,
            "<p id=disk-alarm class=bad>Disk alarm ({}): a voter is below a free-space mark; {} until space is freed.</p>",
            alarm.as_str(),
            alarm.refuses()
        );
    }

    h.push_str("<h2>Leadership changes</h2>");
    if v.changes.is_empty() {
        h.push_str("<p class=muted>None seen since this node started.</p>");
    } else {
        h.push_str(
            "<div class=scroll><table id=changes><tr><th>when</th><th>term</th><th>leader</th><th>before</th>\
            <th>without a leader</th></tr>",
        );
        for c in v.changes.iter().rev() {
            let _ = write!(
                h,
                "<tr><td>{when}</td><td>{term}</td><td>node {leader}</td><td>{before}</td><td>{gap} ms</td></tr>",
                when = ago(v.now_ms, c.at_ms),
                term = c.term,
                leader = c.leader,
                before = c.previous.map_or_else(|| "—".to_string(), |p| format!("node {p}")),
                gap = c.without_leader_ms,
            );
        }
        h.push_str("</table></div>");
    }

    h.push_str("<h2>Failover history</h2>");
    if v.failovers.is_empty() {
        h.push_str("<p class=muted>No leadership change recorded yet.</p>");
    } else {
        h.push_str(
            "<p class=muted>Replicated: every node shows the same. Each phase from the end of the one before, \
            measured by the new leader.</p><div class=scroll><table id=failovers><tr><th>term</th><th>leader</th><th>before</th>\
            <th>when</th><th>detection</th><th>election</th><th>first commit</th><th>routes</th>\
            <th>unavailable</th><th>not following</th></tr>",
        );
        for f in &v.failovers {
            let p = f.phases();
            let missing: Vec<String> = f.not_following.iter().map(|id| format!("node {id}")).collect();
            let _ = write!(
                h,
                "<tr><td>{term}</td><td>node {leader}</td><td>{before}</td><td>{when}</td><td>{detection}</td>\
                 <td>{election} ms</td><td>{commit} ms</td><td>{routes} ms</td><td>{unavailable} ms</td><td>{missing}</td></tr>",
                term = f.term,
                leader = f.leader,
                before = f.previous.map_or_else(|| "—".to_string(), |p| format!("node {p}")),
                when = ago(v.now_ms, f.elected_ms),
                detection = p.detection_ms.map_or_else(|| "—".to_string(), |ms| format!("{ms} ms")),
                election = p.election_ms,
                commit = p.first_commit_ms,
                routes = p.routes_ms,
                unavailable = p.unavailable_ms,
                missing = if missing.is_empty() { "—".to_string() } else { missing.join(", ") },
            );
        }
        h.push_str("</table></div>");
    }

    h.push_str(
        "<h2>Topics</h2><div class=scroll><table id=topics><tr><th>topic</th><th>type</th><th>queues</th>\
        <th>messages</th><th>timers</th><th>open transactions</th></tr>",
    );
    for t in &v.topics {
        let messages: u64 = t.queues.iter().map(|(_, start, next)| next - start).sum();
        let _ = write!(
            h,
            "<tr><td>{name}</td><td>{kind}</td><td>{queues}</td><td>{messages}</td><td>{timers}</td><td>{halves}</td></tr>",
            name = esc(&t.config.name),
            kind = esc(&format!("{:?}", t.config.kind).to_lowercase()),
            queues = t.config.queues,
            timers = t.held.timers,
            halves = t.held.open_halves,
        );
    }
    h.push_str("</table></div>");

    h.push_str(
        "<h2>Consumer groups</h2><div class=scroll><table id=groups><tr><th>group</th><th>topic</th>\
        <th>lag</th><th>in flight</th></tr>",
    );
    for g in &v.groups {
        if g.progress.is_empty() {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=muted>nothing consumed yet</td><td></td><td></td></tr>",
                esc(&g.config.name)
            );
        }
        for p in &g.progress {
            let _ = write!(
                h,
                "<tr><td>{group}</td><td>{topic}</td><td>{lag}</td><td>{inflight}</td></tr>",
                group = esc(&g.config.name),
                topic = esc(&p.topic),
                lag = p.lag,
                inflight = p.inflight,
            );
        }
    }
    h.push_str("</table></div>");

    h.push_str(
        "<h2>Plugins</h2><div class=scroll><table id=plugins><tr><th>plugin</th><th>kind</th>\
        <th>calls</th><th>messages</th><th>failures</th><th>state</th></tr>",
    );
    for p in &v.plugins {
        let state = match &p.quarantined {
            Some(why) => format!("<span class=bad>quarantined: {}</span>", esc(why)),
            None => "<span class=ok>running</span>".to_string(),
        };
        let _ = write!(
            h,
            "<tr><td>{name}</td><td>{kind}</td><td>{calls}</td><td>{messages}</td><td>{failures}</td><td>{state}</td></tr>",
            name = esc(&p.name),
            kind = esc(&format!("{:?}", p.kind).to_lowercase()),
            calls = p.calls,
            messages = p.messages,
            failures = p.failures,
        );
    }
    h.push_str("</table></div>");
    let _ = write!(
        h,
        "<p class=muted>Shown by node {id}; refreshed every 2 s. Metrics: <a href=/metrics>/metrics</a>.</p></main>\
         <script>{REFRESH}</script></body></html>",
        id = own.id,
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(esc("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
    }
}
