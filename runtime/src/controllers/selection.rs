//! Which controllers run: upstream's names, aliases and `--controllers` syntax.
//!
//! `--controllers` is a comma-separated list. `*` turns on every controller that is on by
//! default, `name` turns one on, and `-name` turns one off. For each controller the first
//! entry naming it wins. Without `*`, only the controllers named are on. Aliases
//! (`cloud-node`, `service`, `route`, ...) name the same controllers. An unknown name is an
//! error, as upstream. Given more than once, the lists are joined in order, as upstream's
//! string-slice flag appends (see [`ControllerSelection::from_iter`]).

use std::fmt;
use std::str::FromStr;

/// One of the four upstream controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Controller {
    /// `cloud-node-controller`: initialises nodes and syncs their addresses.
    CloudNode,
    /// `cloud-node-lifecycle-controller`: deletes nodes whose instance is gone.
    CloudNodeLifecycle,
    /// `service-lb-controller`: load balancers for `type: LoadBalancer` Services.
    ServiceLoadBalancer,
    /// `node-route-controller`: cloud routes for node pod CIDRs.
    NodeRoute,
}

impl Controller {
    /// Every controller, in start order.
    pub const ALL: [Controller; 4] = [
        Controller::CloudNode,
        Controller::CloudNodeLifecycle,
        Controller::ServiceLoadBalancer,
        Controller::NodeRoute,
    ];

    /// The canonical upstream name, e.g. `cloud-node-controller`.
    pub fn name(self) -> &'static str {
        match self {
            Controller::CloudNode => "cloud-node-controller",
            Controller::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            Controller::ServiceLoadBalancer => "service-lb-controller",
            Controller::NodeRoute => "node-route-controller",
        }
    }

    /// The short alias `--controllers` also accepts, e.g. `cloud-node`.
    pub fn alias(self) -> &'static str {
        match self {
            Controller::CloudNode => "cloud-node",
            Controller::CloudNodeLifecycle => "cloud-node-lifecycle",
            Controller::ServiceLoadBalancer => "service",
            Controller::NodeRoute => "route",
        }
    }

    /// The name of its API client, in its user agent: upstream's `ClientName`s, except
    /// that the cloud-node controller has its own (`cloud-node-controller`) instead of
    /// sharing `node-controller` with the lifecycle controller, so the two can be told
    /// apart in the API server's audit log. (Its ServiceAccount is upstream's: see
    /// [`Controller::service_account`].)
    pub fn client_name(self) -> &'static str {
        match self {
            Controller::CloudNode => "cloud-node-controller",
            Controller::CloudNodeLifecycle => "node-controller",
            Controller::ServiceLoadBalancer => "service-controller",
            Controller::NodeRoute => "route-controller",
        }
    }

    /// The ServiceAccount in `kube-system` the controller acts as with
    /// `--use-service-account-credentials`: upstream's `ClientName`, under which the
    /// cloud-node controller shares `node-controller` with the lifecycle controller (and so
    /// the bootstrap policy's `system:controller:node-controller` role).
    pub fn service_account(self) -> &'static str {
        match self {
            Controller::CloudNode | Controller::CloudNodeLifecycle => "node-controller",
            Controller::ServiceLoadBalancer => "service-controller",
            Controller::NodeRoute => "route-controller",
        }
    }

    /// The component upstream's events name as their source.
    pub fn event_component(self) -> &'static str {
        match self {
            Controller::CloudNode => "cloud-node-controller",
            Controller::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            Controller::ServiceLoadBalancer => "service-controller",
            Controller::NodeRoute => "route_controller",
        }
    }

    fn lookup(name: &str) -> Option<Controller> {
        Controller::ALL
            .into_iter()
            .find(|c| c.name() == name || c.alias() == name)
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parsed value of `--controllers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSelection {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    All,
    On(Controller),
    Off(Controller),
}

/// Why `--controllers` could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--controllers: {0:?} is not in the list of known controllers (known: *, {known})", known = known_names())]
pub struct SelectionError(pub String);

fn known_names() -> String {
    let names: Vec<String> = Controller::ALL
        .iter()
        .map(|c| format!("{} (alias {})", c.name(), c.alias()))
        .collect();
    names.join(", ")
}

impl Default for ControllerSelection {
    /// `*`: every controller.
    fn default() -> Self {
        ControllerSelection {
            entries: vec![Entry::All],
        }
    }
}

impl FromStr for ControllerSelection {
    type Err = SelectionError;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        let entries = list
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                if item == "*" {
                    return Ok(Entry::All);
                }
                let (off, name) = match item.strip_prefix('-') {
                    Some(name) => (true, name),
                    None => (false, item),
                };
                let controller =
                    Controller::lookup(name).ok_or_else(|| SelectionError(item.to_string()))?;
                Ok(if off {
                    Entry::Off(controller)
                } else {
                    Entry::On(controller)
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(ControllerSelection { entries })
    }
}

/// Lists joined in order: `--controllers=cloud-node --controllers=service` is
/// `cloud-node,service`. The default `*` applies only when the flag is absent.
impl FromIterator<ControllerSelection> for ControllerSelection {
    fn from_iter<I: IntoIterator<Item = ControllerSelection>>(lists: I) -> Self {
        ControllerSelection {
            entries: lists.into_iter().flat_map(|list| list.entries).collect(),
        }
    }
}

impl ControllerSelection {
    /// Whether `controller` runs: the first entry naming it decides; otherwise `*` does.
    pub fn is_enabled(&self, controller: Controller) -> bool {
        let mut star = false;
        for entry in &self.entries {
            match *entry {
                Entry::On(c) if c == controller => return true,
                Entry::Off(c) if c == controller => return false,
                Entry::All => star = true,
                _ => {}
            }
        }
        // Upstream has no controllers that are off by default.
        star
    }

    /// The controllers that run, in start order.
    pub fn enabled(&self) -> Vec<Controller> {
        Controller::ALL
            .into_iter()
            .filter(|c| self.is_enabled(*c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Controller::*;

    fn enabled(list: &str) -> Vec<Controller> {
        list.parse::<ControllerSelection>().unwrap().enabled()
    }

    #[test]
    fn star_enables_everything_and_is_the_default() {
        assert_eq!(enabled("*"), Controller::ALL.to_vec());
        assert_eq!(
            ControllerSelection::default().enabled(),
            Controller::ALL.to_vec()
        );
    }

    #[test]
    fn names_and_aliases_enable_and_disable() {
        assert_eq!(
            enabled("*,-route"),
            vec![CloudNode, CloudNodeLifecycle, ServiceLoadBalancer]
        );
        assert_eq!(enabled("*,-node-route-controller"), enabled("*,-route"));
        assert_eq!(
            enabled("cloud-node,service"),
            vec![CloudNode, ServiceLoadBalancer]
        );
        assert_eq!(enabled("service-lb-controller"), vec![ServiceLoadBalancer]);
        assert_eq!(enabled(""), vec![]);
    }

    #[test]
    fn the_first_entry_naming_a_controller_wins() {
        assert_eq!(
            enabled("-service,service,*"),
            vec![CloudNode, CloudNodeLifecycle, NodeRoute]
        );
        assert_eq!(enabled("service,-service"), vec![ServiceLoadBalancer]);
        assert_eq!(
            enabled("-route,*"),
            vec![CloudNode, CloudNodeLifecycle, ServiceLoadBalancer]
        );
    }

    #[test]
    fn joined_lists_keep_their_order() {
        let joined: ControllerSelection = ["cloud-node", "-service,*"]
            .into_iter()
            .map(|list| list.parse().unwrap())
            .collect();
        assert_eq!(joined, "cloud-node,-service,*".parse().unwrap());
        assert_eq!(
            joined.enabled(),
            vec![CloudNode, CloudNodeLifecycle, NodeRoute]
        );
    }

    #[test]
    fn unknown_names_are_refused_listing_the_known_ones() {
        let error = "*,-routes"
            .parse::<ControllerSelection>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"-routes\""), "{error}");
        assert!(
            error.contains("node-route-controller (alias route)"),
            "{error}"
        );
        assert!("nodeipam".parse::<ControllerSelection>().is_err());
    }
}
