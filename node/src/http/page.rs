//! The status page at `/`: one self-contained HTML document (no assets from elsewhere), readable
//! on a phone, that reloads its content every two seconds. Every name shown is escaped.
//!
//! Topics and groups are shown [`PAGE`] at a time by name (`?topics_after=`, `?groups_after=`,
//! with a link to the next page), and what the page shows is gathered at most once a second
//! ([`Cached`]): a flood of GETs costs one call to every member a second.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::admin::api::{GroupInfo, NodeStatus, PluginInfo, Role, TopicInfo};
use crate::broker::failover::Failover;
use crate::cluster::leadership::LeaderChange;
use crate::metrics::traffic::Rates;
use crate::store::free_space::DiskLevel;

use super::HttpState;
use crate::admin::page_after;

/// Topics, and groups, shown on one page.
pub(super) const PAGE: usize = 100;
/// How long gathered data is shown before it is gathered again.
const FRESH: Duration = Duration::from_secs(1);

/// One gathering of the page's data: filled once, by whichever GET comes first.
type Gathering = Arc<tokio::sync::OnceCell<Arc<View>>>;

/// The page's data for [`FRESH`]: GETs that come while it is gathered wait for that gathering.
#[derive(Default)]
pub(super) struct Cached {
    /// The latest gathering and when it began.
    slot: std::sync::Mutex<Option<(tokio::time::Instant, Gathering)>>,
}

impl Cached {
    /// The data gathered within the last [`FRESH`], or gathered now by `gather`.
    pub(super) async fn get<F: Future<Output = View>>(&self, gather: impl FnOnce() -> F) -> Arc<View> {
        let cell = {
            let mut slot = self.slot.lock().expect("status page cache lock");
            match &*slot {
                Some((at, cell)) if at.elapsed() < FRESH => Arc::clone(cell),
                _ => {
                    let cell = Arc::new(tokio::sync::OnceCell::new());
                    *slot = Some((tokio::time::Instant::now(), Arc::clone(&cell)));
                    cell
                }
            }
        };
        // Gathered outside the slot's lock: one caller gathers, the others of this second wait.
        Arc::clone(cell.get_or_init(|| async { Arc::new(gather().await) }).await)
    }
}

/// Where the topic and group lists start: after these names.
#[derive(Debug, Default, PartialEq)]
pub(super) struct At {
    topics_after: String,
    groups_after: String,
}

/// Characters escaped in a paging link: all but letters and digits.
const LINK: &AsciiSet = NON_ALPHANUMERIC;

impl At {
    /// From the request's query (`topics_after=…&groups_after=…`); anything else is ignored.
    pub(super) fn parse(query: Option<&str>) -> At {
        let mut at = At::default();
        for pair in query.unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode_str(&value.replace('+', " ")).decode_utf8_lossy().into_owned();
            match key {
                "topics_after" => at.topics_after = value,
                "groups_after" => at.groups_after = value,
                _ => {}
            }
        }
        at
    }

    /// A link to this page with the topic list after `topics` and the group list after `groups`.
    fn link(topics: &str, groups: &str) -> String {
        format!(
            "?topics_after={}&amp;groups_after={}",
            utf8_percent_encode(topics, LINK),
            utf8_percent_encode(groups, LINK)
        )
    }
}

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
    /// Each Raft group's traffic over the last minutes, oldest first.
    traffic: std::collections::BTreeMap<u32, Vec<Rates>>,
    now_ms: i64,
    insecure: Vec<String>,
    /// Damaged log records this node found, and those filled again, since it started.
    corruption: (u64, u64),
}

impl View {
    pub(super) async fn gather(state: &HttpState) -> View {
        state.parts.meters.status_page_gathered();
        let own = state.admin.status();
        let members = state.members(&own).await;
        let refusing = state
            .cluster
            .members()
            .into_iter()
            .filter_map(|(id, n)| Some((id, state.cluster.refusals().refusing(&n.raft_addr)?)))
            .collect();
        View {
            members,
            refusing,
            failovers: state.admin.history(),
            topics: state.admin.list_topics().await,
            groups: state.admin.list_groups().await,
            plugins: state.admin.list_plugins(),
            changes: state.cluster.leader_changes().recent(),
            traffic: state.parts.meters.traffic().rates(),
            now_ms: crate::cluster::now_ms(),
            insecure: state.insecure.clone(),
            corruption: state.parts.meters.corruption(),
            own,
        }
    }
}

/// The latest of `values` and a small line chart of them all (oldest first), scaled to their
/// largest; an inline SVG, so the page stays one document.
fn chart(id: &str, values: impl Iterator<Item = f64>) -> String {
    const WIDTH: f64 = 120.0;
    const HEIGHT: f64 = 24.0;
    let values: Vec<f64> = values.collect();
    let Some(last) = values.last() else { return "<span class=muted>-</span>".into() };
    let top = values.iter().copied().fold(0.0f64, f64::max).max(1.0);
    let step = if values.len() > 1 { WIDTH / (values.len() - 1) as f64 } else { 0.0 };
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{:.1},{:.1}", i as f64 * step, HEIGHT - v / top * (HEIGHT - 2.0) - 1.0))
        .collect();
    format!(
        "<svg id={id} class=chart width={WIDTH} height={HEIGHT} viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=img \
         aria-label=\"{id}\"><polyline fill=none stroke=currentColor stroke-width=1.5 points=\"{points}\"/></svg> {last:.0}",
        points = points.join(" "),
    )
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
const REFRESH: &str = "setInterval(async()=>{try{const r=await fetch(location.pathname+location.search,{cache:'no-store'});\
if(!r.ok)return;const d=new DOMParser().parseFromString(await r.text(),'text/html');\
const m=d.querySelector('main');if(m)document.querySelector('main').replaceWith(m);}catch(e){}},2000);";

pub(super) fn render(v: &View, at: &At) -> String {
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
    let (found, repaired) = v.corruption;
    if found > 0 {
        let class = if repaired >= found { "ok" } else { "bad" };
        let _ = write!(
            h,
            "<p id=integrity class={class}>Since it started, this node found <b>{found}</b> log records \
             (or snapshot files) it had written that did not read back; <b>{repaired}</b> were filled \
             again from other members. None was served.</p>"
        );
    }
    for open in &v.insecure {
        let _ = write!(h, "<p class=\"bad insecure\"><b>Insecure (allow_insecure = true):</b> {}</p>", esc(open));
    }

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

    if own.groups.len() > 1 {
        h.push_str(
            "<h2>Raft groups</h2><div class=scroll><table id=raft-groups><tr><th>group</th><th>leader</th>\
             <th>term</th><th>this node</th><th>committed</th><th>applied here</th>\
             <th>sends/s</th><th>consumed/s</th><th>lag</th></tr>",
        );
        for g in &own.groups {
            // A group this node holds no replica of: its leader as last heard of, and its
            // traffic as its leader reports it.
            let (this_node, committed, applied) = match g.elsewhere {
                true => ("<span class=muted>no replica</span>".to_string(), "-".to_string(), "-".to_string()),
                false => {
                    (role(g.role).to_string(), g.committed.unwrap_or(0).to_string(), g.applied.unwrap_or(0).to_string())
                }
            };
            let traffic = v.traffic.get(&g.id).map(Vec::as_slice).unwrap_or_default();
            let _ = write!(
                h,
                "<tr><td>{id}</td><td>{leader}</td><td>{term}</td><td>{this_node}</td><td>{committed}</td><td>{applied}</td>\
                 <td>{sends}</td><td>{consumed}</td><td>{lag}</td></tr>",
                id = match g.id {
                    0 => "0 (metadata)".to_string(),
                    n => n.to_string(),
                },
                leader = g.leader.map_or_else(|| "<span class=bad>none</span>".to_string(), |l| format!("node {l}")),
                term = g.term,
                sends = chart(&format!("group-{}-sends", g.id), traffic.iter().map(|r| r.sends_per_sec)),
                consumed = chart(&format!("group-{}-consumed", g.id), traffic.iter().map(|r| r.consumed_per_sec)),
                lag = chart(&format!("group-{}-lag", g.id), traffic.iter().map(|r| r.lag as f64)),
            );
        }
        h.push_str("</table></div>");
        h.push_str(
            "<p class=muted>Per group over the last five minutes, from this node's replica (or the group's \
             leader, where this node holds none): messages stored and acked per second, and messages not acked \
             yet.</p>",
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
    let (topics, next_topics) = page_after(v.topics.iter().collect(), |t| &t.config.name, &at.topics_after, PAGE);
    for t in topics {
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
    if !next_topics.is_empty() {
        let link = At::link(&next_topics, &at.groups_after);
        let _ = write!(h, "<p><a id=topics-next href=\"{link}\">Next {PAGE} topics</a></p>");
    }

    h.push_str(
        "<h2>Consumer groups</h2><div class=scroll><table id=groups><tr><th>group</th><th>topic</th>\
        <th>lag</th><th>in flight</th></tr>",
    );
    let (groups, next_groups) = page_after(v.groups.iter().collect(), |g| &g.config.name, &at.groups_after, PAGE);
    for g in groups {
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
    if !next_groups.is_empty() {
        let link = At::link(&at.topics_after, &next_groups);
        let _ = write!(h, "<p><a id=groups-next href=\"{link}\">Next {PAGE} groups</a></p>");
    }

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

    #[test]
    fn paging_links_carry_any_topic_name_back_unchanged() {
        for name in ["Orders", "ns%Orders", "a|b_c-d", "x&topics_after=y", "ü +"] {
            let link = At::link(name, "g%1").replace("&amp;", "&");
            let at = At::parse(link.strip_prefix('?'));
            assert_eq!(at, At { topics_after: name.into(), groups_after: "g%1".into() }, "{link}");
        }
        assert_eq!(At::parse(None), At::default());
        assert_eq!(
            At::parse(Some("groups_after=b&other=1&topics_after")),
            At { groups_after: "b".into(), ..At::default() }
        );
    }

    /// However many ask at once or within a second, the data is gathered once; a second later,
    /// again.
    #[tokio::test(start_paused = true)]
    async fn many_asking_within_a_second_gather_once() {
        let cache = Arc::new(Cached::default());
        let gathered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ask = |cache: Arc<Cached>, gathered: Arc<std::sync::atomic::AtomicUsize>| async move {
            cache
                .get(|| async move {
                    gathered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // A slow member: the others asking meanwhile wait for this gathering.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    empty_view()
                })
                .await
        };
        let asks: Vec<_> = (0..20).map(|_| tokio::spawn(ask(cache.clone(), gathered.clone()))).collect();
        for a in asks {
            a.await.unwrap();
        }
        ask(cache.clone(), gathered.clone()).await;
        assert_eq!(gathered.load(std::sync::atomic::Ordering::SeqCst), 1);
        tokio::time::sleep(FRESH).await;
        ask(cache.clone(), gathered.clone()).await;
        assert_eq!(gathered.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    fn empty_view() -> View {
        View {
            own: NodeStatus {
                id: 1,
                role: Role::Leader,
                term: 1,
                leader: Some(1),
                last_log_index: None,
                committed: None,
                applied: None,
                purged: None,
                members: vec![],
                clock: Default::default(),
                disk: Default::default(),
                refused_by: Default::default(),
                groups: vec![],
            },
            members: vec![],
            topics: vec![],
            groups: vec![],
            plugins: vec![],
            changes: vec![],
            failovers: vec![],
            traffic: Default::default(),
            now_ms: 0,
            insecure: vec![],
            refusing: Default::default(),
            corruption: (0, 0),
        }
    }

    /// Damage this node found is on its page: red until every record was filled again.
    #[test]
    fn damaged_records_found_and_filled_are_on_the_page() {
        let mut view = empty_view();
        assert!(!render(&view, &At::default()).contains("id=integrity"));
        view.corruption = (3, 1);
        let page = render(&view, &At::default());
        assert!(page.contains("<p id=integrity class=bad>") && page.contains("<b>3</b> log records"), "{page}");
        view.corruption = (3, 3);
        assert!(render(&view, &At::default()).contains("<p id=integrity class=ok>"));
    }

    /// What `allow_insecure` let through is on every page, in red, its text escaped.
    #[test]
    fn each_listener_served_open_is_a_red_line() {
        let mut view = empty_view();
        assert!(!render(&view, &At::default()).contains("insecure"));
        view.insecure = vec!["admin_addr 0.0.0.0:7081 is <open>".into()];
        let page = render(&view, &At::default());
        assert!(page.contains("<p class=\"bad insecure\">"), "{page}");
        assert!(page.contains("admin_addr 0.0.0.0:7081 is &lt;open&gt;"), "{page}");
    }

    #[test]
    fn several_groups_get_a_row_each_with_their_leader() {
        use crate::admin::api::GroupRow;
        let mut view = empty_view();
        let row = |id, leader| GroupRow {
            id,
            role: Role::Follower,
            leader,
            term: 2,
            committed: Some(9),
            applied: Some(9),
            elsewhere: false,
        };
        view.own.groups = vec![row(1, Some(1))];
        assert!(!render(&view, &At::default()).contains("raft-groups"), "one group: no table");
        view.own.groups = vec![row(1, Some(1)), row(2, Some(3)), row(3, None)];
        let page = render(&view, &At::default());
        assert!(page.contains("<tr><td>2</td><td>node 3</td>"), "{page}");
        assert!(page.contains("<tr><td>3</td><td><span class=bad>none</span></td>"), "{page}");
        assert!(page.contains("<td><span class=muted>-</span></td>"), "no traffic sampled yet: {page}");
    }

    #[test]
    fn each_group_s_traffic_is_a_small_chart_with_its_latest_value() {
        use crate::admin::api::GroupRow;
        let mut view = empty_view();
        let row = |id| GroupRow {
            id,
            role: Role::Follower,
            leader: Some(1),
            term: 2,
            committed: None,
            applied: None,
            elsewhere: false,
        };
        view.own.groups = vec![row(1), row(2)];
        let rates = |sends: f64| Rates { at_ms: 0, sends_per_sec: sends, consumed_per_sec: sends / 2.0, lag: 7 };
        view.traffic = [(2, vec![rates(0.0), rates(100.0), rates(50.0)])].into();
        let page = render(&view, &At::default());
        assert!(page.contains("<svg id=group-2-sends class=chart"), "{page}");
        // Scaled to the largest value: 100/s at the top, 0 at the bottom, the latest shown.
        assert!(page.contains("points=\"0.0,23.0 60.0,1.0 120.0,12.0\"/></svg> 50"), "{page}");
        assert!(page.contains("<svg id=group-2-lag class=chart"), "{page}");
        assert!(!page.contains("group-1-sends"), "group 1 sampled nothing yet: no chart");
    }

    /// From five nodes a node holds three of every five groups: the others get a row too, with
    /// their leader and their traffic as that leader reports it.
    #[test]
    fn a_group_held_elsewhere_is_charted_and_says_so() {
        use crate::admin::api::GroupRow;
        let mut view = empty_view();
        let row = |id, elsewhere| GroupRow {
            id,
            role: Role::Follower,
            leader: Some(4),
            term: 3,
            committed: Some(12),
            applied: Some(12),
            elsewhere,
        };
        view.own.groups = vec![row(1, false), row(2, true)];
        let rates = Rates { at_ms: 0, sends_per_sec: 10.0, consumed_per_sec: 5.0, lag: 2 };
        view.traffic = [(2, vec![rates, rates])].into();
        let page = render(&view, &At::default());
        let held_elsewhere =
            "<tr><td>2</td><td>node 4</td><td>3</td><td><span class=muted>no replica</span></td><td>-</td><td>-</td>";
        assert!(page.contains(held_elsewhere), "{page}");
        assert!(page.contains("<svg id=group-2-sends class=chart"), "{page}");
        assert!(
            page.contains("<tr><td>1</td><td>node 4</td><td>3</td><td>follower</td><td>12</td><td>12</td>"),
            "{page}"
        );
    }
}
