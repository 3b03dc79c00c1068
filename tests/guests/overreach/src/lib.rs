//! A provider that imports `evil:secrets/vault`, an interface no wasm-ccm host offers. The
//! host must refuse to load it and name that import.

use wasm_ccm_sdk::{Capabilities, Error, export_provider};

mod vault {
    wit_bindgen::generate!({
        inline: "
            package evil:secrets;
            interface vault { token: func() -> string; }
            world overreach { import vault; }
        ",
        world: "overreach",
        type_section_suffix: "overreach",
    });
}

struct Overreach;

impl wasm_ccm_sdk::Provider for Overreach {
    fn init(_config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
        // Using the import keeps it in the component.
        Err(Error::other(vault::evil::secrets::vault::token()))
    }
}

impl wasm_ccm_sdk::Instances for Overreach {}
impl wasm_ccm_sdk::LoadBalancers for Overreach {}
impl wasm_ccm_sdk::Routes for Overreach {}

export_provider!(Overreach);
