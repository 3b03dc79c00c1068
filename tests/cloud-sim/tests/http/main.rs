//! The simulator exercised over real HTTP on 127.0.0.1:0.

mod binary;
mod gateway;
mod harness;
mod instances;
mod load_balancers;
mod routes;
