//! Installing the manager as an operator does: the container image built and pushed without a
//! daemon (`image`), and a Helm release installed, upgraded, rolled back and uninstalled with
//! the install page's commands (`chart_release`).

mod chart_release;
mod image;
