//! The AWS provider (`guests/aws`, the real component) against moto with signature checking
//! on: the provider's functions one by one (`provider`), and the manager running it against
//! the API emulator (`controllers`).

mod controllers;
mod provider;
