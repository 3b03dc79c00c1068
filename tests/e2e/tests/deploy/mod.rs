//! Installing the manager as an operator does: the container image built and pushed without a
//! daemon (`image`), a Helm release installed, upgraded, rolled back and uninstalled with
//! the install page's commands (`chart_release`), a release published to a registry and
//! installed and upgraded from it (`release`), and the manager built as a Rust user builds
//! it (`build`).

mod build;
mod chart_release;
mod image;
mod release;
