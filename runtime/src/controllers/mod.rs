//! The upstream cloud-controller-manager controllers. So far this holds which of them run
//! (`--controllers`); the controllers themselves arrive with the controller-manager.

mod selection;

pub use selection::{Controller, ControllerSelection, SelectionError};
