//! `rockraft user …` and `rockraft acl …`: users and their access rules, replicated through the
//! log. Secrets are printed once, when the CLI makes one up, and never read back.

use clap::Subcommand;

use crate::admin::api::{AdminRequest, AdminResponse};
use crate::broker::access::{Action, Decision, Secret};

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
    List,
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
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ActionArg {
    Pub,
    Sub,
}

/// The secret to send, and whether to print it (only one the CLI made up).
fn secret_or_random(given: Option<String>) -> Result<(String, bool), String> {
    match given {
        Some(s) => Ok((s, false)),
        None => Ok((crate::auth::random_key()?, true)),
    }
}

pub fn user_request(cmd: UserCmd) -> Result<AdminRequest, String> {
    Ok(match cmd {
        UserCmd::Create { user: access_key, secret, admin } => {
            let (secret, made) = secret_or_random(secret)?;
            if made {
                println!("access key: {access_key}\nsecret key: {secret}");
            }
            AdminRequest::CreateUser { access_key, secret: Secret::new(secret), admin }
        }
        UserCmd::Update { user: access_key, secret, rotate, admin } => {
            let secret = match (secret, rotate) {
                (Some(s), _) => Some(s),
                (None, true) => {
                    let s = crate::auth::random_key()?;
                    println!("access key: {access_key}\nsecret key: {s}");
                    Some(s)
                }
                (None, false) => None,
            };
            if secret.is_none() && admin.is_none() {
                return Err("nothing to change: give --user-secret, --rotate or --admin".into());
            }
            AdminRequest::UpdateUser { access_key, secret: secret.map(Secret::new), admin }
        }
        UserCmd::Delete { user: access_key } => AdminRequest::DeleteUser { access_key },
        UserCmd::List => AdminRequest::ListUsers,
    })
}

pub fn acl_request(cmd: AclCmd) -> Result<AdminRequest, String> {
    Ok(match cmd {
        AclCmd::Grant { user: access_key, resource, actions, deny } => AdminRequest::Grant {
            access_key,
            resource,
            actions: actions
                .into_iter()
                .map(|a| match a {
                    ActionArg::Pub => Action::Pub,
                    ActionArg::Sub => Action::Sub,
                })
                .collect(),
            decision: if deny { Decision::Deny } else { Decision::Allow },
        },
        AclCmd::Revoke { user: access_key, resource } => AdminRequest::Revoke { access_key, resource },
        AclCmd::List { user: access_key } => AdminRequest::ListAcl { access_key },
    })
}

pub fn print(response: AdminResponse) {
    match response {
        AdminResponse::Done(text) => println!("{text}"),
        AdminResponse::Users(users) => {
            println!("{:<32} {:<6} rules", "access key", "admin");
            for u in users {
                println!("{:<32} {:<6} {}", u.access_key, u.admin, u.rules);
            }
        }
        AdminResponse::Acl(lines) => {
            println!("{:<32} {:<32} {:<8} decision", "access key", "resource", "actions");
            for l in lines {
                let actions: Vec<String> = l.actions.iter().map(|a| format!("{a:?}").to_lowercase()).collect();
                println!("{:<32} {:<32} {:<8} {:?}", l.access_key, l.resource, actions.join(","), l.decision);
            }
        }
        other => println!("{other:?}"),
    }
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
