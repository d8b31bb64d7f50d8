//! `rockraft user …` and `rockraft acl …`: users and their access rules, replicated through the
//! log. Secrets are printed once, when the CLI makes one up, and never read back.

use clap::Subcommand;

use rockraft_proto::rockraft as pb;

use super::{Admin, CliError, Listing};

#[derive(Subcommand)]
pub enum UserCmd {
    /// Create a user. Without `--user-secret` a random secret (64 hex digits) is made and printed
    /// (only now).
    Create {
        /// The user's access key.
        user: String,
        /// Read from the environment rather than typed on a command line where others see it.
        #[arg(long = "user-secret", env = "ROCKRAFT_USER_SECRET", hide_env_values = true)]
        secret: Option<String>,
        /// May do everything: every topic and group, and the admin API.
        #[arg(long)]
        admin: bool,
    },
    /// Change a user's secret (`--new-secret`, or a random one with `--rotate`) or admin flag.
    Update {
        /// The user's access key.
        user: String,
        #[arg(long = "user-secret", env = "ROCKRAFT_USER_SECRET", hide_env_values = true, conflicts_with = "rotate")]
        secret: Option<String>,
        /// Make up a new random secret and print it.
        #[arg(long)]
        rotate: bool,
        #[arg(long)]
        admin: Option<bool>,
    },
    /// Remove a user and every rule of theirs.
    Delete {
        /// The user's access key.
        user: String,
    },
    /// Users, whether they are admins, and how many rules each has; never secrets.
    List(Listing),
}

#[derive(Subcommand)]
pub enum AclCmd {
    /// Allow (or with `--deny`, deny) a user actions on a resource; replaces their rule on it.
    Grant {
        /// The user's access key.
        user: String,
        /// `Topic:<name>`, `Topic:<prefix>*`, `Group:<name>` or `Group:<prefix>*`.
        #[arg(long)]
        resource: String,
        /// Comma-separated: `pub`, `sub` (a group takes `sub` only).
        #[arg(long, value_delimiter = ',', required = true)]
        actions: Vec<ActionArg>,
        /// A deny: wins over every allow that covers the same request.
        #[arg(long)]
        deny: bool,
    },
    /// Remove a user's rule on a resource.
    Revoke {
        /// The user's access key.
        user: String,
        #[arg(long)]
        resource: String,
    },
    /// Every rule, or one user's.
    List {
        /// Only this user's rules.
        user: Option<String>,
        /// Start after this rule (`"<access key> <resource>"`, where a listing cut at `--limit`
        /// says to go on).
        #[arg(long, default_value = "")]
        after: String,
        /// At most this many rules (all when not given).
        #[arg(long, default_value_t = usize::MAX)]
        limit: usize,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ActionArg {
    Pub,
    Sub,
}

/// The secret to send, and whether to print it (only one the CLI made up).
fn secret_or_random(given: Option<String>) -> Result<(String, bool), CliError> {
    match given {
        Some(s) => Ok((s, false)),
        None => Ok((crate::auth::random_key().map_err(|e| CliError::Usage(e.to_string()))?, true)),
    }
}

pub(super) async fn user(admin: &Admin, cmd: UserCmd) -> Result<(), CliError> {
    let done = match cmd {
        UserCmd::Create { user: access_key, secret, admin: is_admin } => {
            let (secret_key, made) = secret_or_random(secret)?;
            if made {
                println!("access key: {access_key}\nsecret key: {secret_key}");
            }
            admin.send(pb::CreateUserRequest { access_key, secret_key, admin: is_admin }).await?
        }
        UserCmd::Update { user: access_key, secret, rotate, admin: is_admin } => {
            let secret_key = match (secret, rotate) {
                (Some(s), _) => Some(s),
                (None, true) => {
                    let s = crate::auth::random_key().map_err(|e| CliError::Usage(e.to_string()))?;
                    println!("access key: {access_key}\nsecret key: {s}");
                    Some(s)
                }
                (None, false) => None,
            };
            if secret_key.is_none() && is_admin.is_none() {
                return Err(CliError::Usage("nothing to change: give --user-secret, --rotate or --admin".into()));
            }
            admin.send(pb::UpdateUserRequest { access_key, secret_key, admin: is_admin }).await?
        }
        UserCmd::Delete { user: access_key } => admin.send(pb::DeleteUserRequest { access_key }).await?,
        UserCmd::List(listing) => {
            println!("{:<32} {:<6} rules", "access key", "admin");
            let ask = |after: &String, limit| pb::ListUsersRequest { after: after.clone(), limit };
            let rows = |r: pb::ListUsersReply| (r.users, Some(r.next_after).filter(|n| !n.is_empty()));
            let print = |u: pb::User| println!("{:<32} {:<6} {}", u.access_key, u.admin, u.rules);
            return admin.page_through(listing.after, listing.limit, "--after", ask, rows, print).await;
        }
    };
    println!("{}", done.message);
    Ok(())
}

pub(super) async fn acl(admin: &Admin, cmd: AclCmd) -> Result<(), CliError> {
    let done = match cmd {
        AclCmd::Grant { user: access_key, resource, actions, deny } => {
            let actions = actions
                .into_iter()
                .map(|a| match a {
                    ActionArg::Pub => "PUB".to_string(),
                    ActionArg::Sub => "SUB".to_string(),
                })
                .collect();
            admin.send(pb::GrantRequest { access_key, resource, actions, deny }).await?
        }
        AclCmd::Revoke { user: access_key, resource } => admin.send(pb::RevokeRequest { access_key, resource }).await?,
        AclCmd::List { user, after, limit } => {
            println!("{:<32} {:<32} {:<8} decision", "access key", "resource", "actions");
            let access_key = user.unwrap_or_default();
            let ask = |after: &String, limit| pb::ListAclRequest {
                access_key: access_key.clone(),
                after: after.clone(),
                limit,
            };
            let rows = |r: pb::ListAclReply| (r.rules, Some(r.next_after).filter(|n| !n.is_empty()));
            let print = |l: pb::AclRule| {
                let actions: Vec<String> = l.actions.iter().map(|a| a.to_lowercase()).collect();
                // `Allow` / `Deny`, as printed before the typed API.
                let decision = if l.decision.eq_ignore_ascii_case("deny") { "Deny" } else { "Allow" };
                println!("{:<32} {:<32} {:<8} {decision}", l.access_key, l.resource, actions.join(","));
            };
            return admin.page_through(after, limit, "--after", ask, rows, print).await;
        }
    };
    println!("{}", done.message);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Top};

    #[test]
    fn the_user_named_never_replaces_the_credential_the_cli_signs_with() {
        let args = ["rockraft", "--access-key", "admin", "--secret-key", "admin-secret", "user", "create", "app"];
        let cli = Cli::try_parse_from(args).expect("parses");
        assert_eq!(cli.access_key.as_deref(), Some("admin"));
        let Top::User(super::UserCmd::Create { user, .. }) = cli.command else { panic!("user create") };
        assert_eq!(user, "app");
        let args = [
            "rockraft",
            "--access-key",
            "admin",
            "acl",
            "grant",
            "app",
            "--resource",
            "Topic:t",
            "--actions",
            "pub,sub",
        ];
        let cli = Cli::try_parse_from(args).expect("parses");
        assert_eq!(cli.access_key.as_deref(), Some("admin"));
    }
}
